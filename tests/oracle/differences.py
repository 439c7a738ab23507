"""Tell a documented upstream defect (docs/upstream-differences.md) from a bug of ours.

Only the oracle's own answers decide, never the shape of the generated case:
- (b) counters keyed by pool name: rename every pool so that no two drivers share a pool name
  (a name means nothing else to the allocator) and ask both sides again. If they agree on the
  renamed case, the difference came from two drivers' pools sharing upstream's bookkeeping.
- (c) `distinctAttribute` remembering one value per request: upstream's allocation itself holds
  two devices with the same value (or, for list attributes, overlapping values) under one
  distinct constraint; or, for an `All` request (where a broken constraint is an error), both
  sides report "cannot add device ... because a claim constraint would not be satisfied" for the
  same request of a claim whose only constraints are `distinctAttribute`, upstream naming a
  later device than ours: upstream took a device whose value repeats an earlier one; or
  upstream fails on a later claim that ours never reaches, and the oracle, asked about the
  claims before it alone, allocates them with a repeated distinct value; or ours refuses an
  `All` request for a broken constraint and the oracle, asked about the claims up to that
  request, allocates them with a repeated distinct value; generally, when the oracle allocates
  some first part of the claims (cut after a request) with a repeated distinct value, upstream's
  search went where ours rightly does not, and what follows is explained by (c); or, judging
  1.36, the 1.37 oracle (v0.37.2, where upstream fixed (c)) gives exactly our answer and,
  without the `distinctAttribute` constraints, the 1.36 oracle and ours agree: upstream 1.36
  remembered one value per request
  (e.g. an `All` request over families ampere, hopper, ampere: upstream 1.36 goes past the
  repeated ampere, 1.37 and ours refuse it).
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Callable
from typing import Any

Obj = dict[str, Any]


def renamed_pools(case: Obj) -> Obj:
    """The case with pool `p` of driver `d` renamed to `<first label of d>-<p>` everywhere."""
    out = copy.deepcopy(case)

    def rename(driver: str, pool: str) -> str:
        return f"{driver.split('.')[0]}-{pool}"

    for slice_ in out.get("resourceSlices") or ():
        spec = slice_["spec"]
        spec["pool"]["name"] = rename(spec["driver"], spec["pool"]["name"])
    out["allocatedDevices"] = [
        "/".join((d, rename(d, p), n))
        for d, p, n in (i.split("/", 2) for i in out.get("allocatedDevices") or ())
    ]
    for key in ("allocatedSharedDeviceIDs", "aggregatedCapacity"):
        for item in out.get(key) or ():
            item["pool"] = rename(item["driver"], item["pool"])
    return out


def _attribute_values(slices: list[Obj], result: Obj, name: str) -> frozenset[Any] | None:
    """The device's value(s) of the fully qualified attribute `name`, None when it has none."""
    domain, _, short = name.rpartition("/")
    for slice_ in slices:
        spec = slice_["spec"]
        if spec["driver"] != result["driver"] or spec["pool"]["name"] != result["pool"]:
            continue
        for device in spec.get("devices") or ():
            if device["name"] != result["device"]:
                continue
            attributes = device.get("attributes") or {}
            value = attributes.get(name)
            if value is None and domain == result["driver"]:
                value = attributes.get(short)
            if value is None:
                return None
            (kind, raw), *_ = value.items()
            return (
                frozenset((kind.rstrip("s"), v) for v in raw)
                if isinstance(raw, list)
                else frozenset({(kind, raw)})
            )
    return None


def _covered(result: Obj, requests: list[str] | None) -> bool:
    if not requests:
        return True
    name: str = result["request"]
    return name in requests or name.split("/", 1)[0] in requests


def distinct_broken(case: Obj, allocations: list[Obj]) -> bool:
    """Does an allocation hold two devices whose distinct attribute is the same (or overlaps)?"""
    slices = case.get("resourceSlices") or []
    for claim, allocation in zip(case.get("claims") or (), allocations, strict=False):
        results = (allocation.get("devices") or {}).get("results") or []
        for constraint in claim["spec"]["devices"].get("constraints") or ():
            name = constraint.get("distinctAttribute")
            if not name:
                continue
            values = [
                _attribute_values(slices, r, name) for r in results if _covered(r, constraint.get("requests"))
            ]
            for a, b in itertools.combinations(values, 2):
                if a is not None and b is not None and a & b:
                    return True
    return False


_CONSTRAINT_ERROR = re.compile(
    r"^claim (?P<claim>\S+), request (?P<request>\S+): cannot add device (?P<device>\S+) "
    r"because a claim constraint would not be satisfied$"
)


def distinct_error_later(case: Obj, mine: Obj, upstream: Obj) -> bool:
    """Both refuse an `All` request over a distinct-only claim, upstream at a later device."""
    if mine["status"] != "error" or upstream["status"] != "error":
        return False
    ours, theirs = _CONSTRAINT_ERROR.match(mine["error"]), _CONSTRAINT_ERROR.match(upstream["error"])
    if not ours or not theirs or ours["device"] == theirs["device"]:
        return False
    if (ours["claim"], ours["request"]) != (theirs["claim"], theirs["request"]):
        return False
    for claim in case.get("claims") or ():
        meta = claim["metadata"]
        if theirs["claim"] in (meta["name"], f"{meta.get('namespace')}/{meta['name']}"):
            constraints = claim["spec"]["devices"].get("constraints") or []
            return bool(constraints) and all("distinctAttribute" in c for c in constraints)
    return False


_CLAIM_ERROR = re.compile(r"^claim (?:[^/\s,]+/)?(?P<claim>[^\s,:]+)[,:]")


def _claims_before_error(case: Obj, upstream: Obj) -> Obj | None:
    """The case with only the claims before the one upstream's error names (None if none)."""
    if upstream["status"] != "error":
        return None
    match = _CLAIM_ERROR.match(upstream["error"])
    if not match:
        return None
    names = [c["metadata"]["name"] for c in case.get("claims") or ()]
    if match["claim"] not in names or names.index(match["claim"]) == 0:
        return None
    return {**case, "claims": case["claims"][: names.index(match["claim"])]}


def _through_our_error(case: Obj, mine: Obj) -> Obj | None:
    """The claims up to the request our constraint error names, that request last (or None)."""
    match = _CONSTRAINT_ERROR.match(mine.get("error", "")) if mine["status"] == "error" else None
    if not match:
        return None
    claim_name = match["claim"].rsplit("/", 1)[-1]
    for index, claim in enumerate(case.get("claims") or ()):
        if claim["metadata"]["name"] != claim_name:
            continue
        requests = claim["spec"]["devices"]["requests"]
        names = [r["name"] for r in requests]
        if match["request"] not in names:
            return None
        devices = {**claim["spec"]["devices"], "requests": requests[: names.index(match["request"]) + 1]}
        cut = {**claim, "spec": {**claim["spec"], "devices": devices}}
        return {**case, "claims": [*case["claims"][:index], cut]}
    return None


def _request_prefixes(case: Obj) -> list[Obj]:
    """The case cut after each request of each claim, shortest first (the full case excluded)."""
    out = []
    claims = case.get("claims") or []
    for index, claim in enumerate(claims):
        requests = claim["spec"]["devices"]["requests"]
        for count in range(1, len(requests) + 1):
            if index == len(claims) - 1 and count == len(requests):
                break
            devices = {**claim["spec"]["devices"], "requests": requests[:count]}
            cut = {**claim, "spec": {**claim["spec"], "devices": devices}}
            out.append({**case, "claims": [*claims[:index], cut]})
    return out


def known_difference(
    case: Obj,
    upstream: Obj,
    *,
    ours_of: Callable[[Obj], Obj],
    upstream_of: Callable[[Obj], Obj],
    difference: Callable[[Obj, Obj], str],
    fixed_upstream_of: Callable[[Obj], Obj] | None = None,
) -> str:
    """Which documented difference explains a disagreement: "b", "c", or "" (a bug).

    `fixed_upstream_of`: the answer of the upstream version that fixed (c) (the 1.37 oracle),
    when judging 1.36; None otherwise.
    """
    if upstream["status"] == "allocated" and distinct_broken(case, upstream["allocations"]):
        return "c"
    mine = ours_of(case)
    if distinct_error_later(case, mine, upstream):
        return "c"
    through = _through_our_error(case, mine)
    if through is not None:
        earlier = upstream_of(through)
        if earlier["status"] == "allocated" and distinct_broken(through, earlier["allocations"]):
            return "c"
    # Upstream went past a point ours could not: some first part of the claims, alone, is
    # allocated by upstream with a repeated distinct value.
    for part in _request_prefixes(case):
        earlier = upstream_of(part)
        if earlier["status"] == "allocated" and distinct_broken(part, earlier["allocations"]):
            return "c"
    prefix = _claims_before_error(case, upstream)
    if prefix is not None:
        earlier = upstream_of(prefix)
        if earlier["status"] == "allocated" and distinct_broken(prefix, earlier["allocations"]):
            return "c"
    renamed = renamed_pools(case)
    if renamed != case and difference(ours_of(renamed), upstream_of(renamed)) == "":
        return "b"
    if fixed_upstream_of is not None and difference(mine, fixed_upstream_of(case)) == "":
        # Only if the distinct constraints are the cause: without them both sides agree (a bug
        # of ours that copies 1.37 elsewhere would still show there).
        without = _without_distinct(case)
        if without != case and difference(ours_of(without), upstream_of(without)) == "":
            return "c"
    return ""


def _without_distinct(case: Obj) -> Obj:
    """The case with every `distinctAttribute` constraint dropped."""
    out = copy.deepcopy(case)
    for claim in out.get("claims") or ():
        devices = claim["spec"]["devices"]
        kept = [c for c in devices.get("constraints") or () if "distinctAttribute" not in c]
        if "constraints" in devices:
            devices["constraints"] = kept
    return out
