"""Scenario suite through the /filter code path: every upstream case as a pod and a cluster state.

Each case of tests/data/conformance becomes a ClusterState (its node, slices, classes, the claims
as ResourceClaims in `default`, and the allocated devices as claims held by another pod) and a
pod that references the claims. `Placement.filter` must then pass the node exactly when upstream
allocated, reject it when upstream found no allocation, and report upstream's error text when
upstream failed. This exercises the vectorised fast path and the exact search against the same
expectations, so it also checks that the two agree.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from extender.allocator.features import Features
from extender.claims import ADMIN_ACCESS_LABEL
from extender.cluster.state import ClusterState
from extender.core.assumed import AssumeCache
from extender.core.placement import Placement
from extender.pods import parse_pod
from tests.conformance.test_upstream_allocator_cases import CASES, INTERRUPT_CAUSES, PREFIX_ONLY

POD_UID = "00000000-0000-0000-0000-00000000cafe"


def _holder_claim(case: dict[str, Any]) -> dict[str, Any] | None:
    """One allocated claim that holds the case's allocated devices and shares."""
    results = []
    for item in case.get("allocatedDevices") or ():
        driver, pool, device = item.split("/", 2)
        results.append({"request": "held", "driver": driver, "pool": pool, "device": device})
    shares = {
        (s["driver"], s["pool"], s["device"]): s["shareID"]
        for s in case.get("allocatedSharedDeviceIDs") or ()
    }
    for aggregated in case.get("aggregatedCapacity") or ():
        key = (aggregated["driver"], aggregated["pool"], aggregated["device"])
        results.append(
            {
                "request": "held",
                "driver": key[0],
                "pool": key[1],
                "device": key[2],
                "shareID": shares.get(key, "bbbbbbbb-bbbb-bbbb-bbbb-bbbbbbbbbbbb"),
                "consumedCapacity": aggregated["consumedCapacity"],
            }
        )
    if not results:
        return None
    return {
        "kind": "ResourceClaim",
        "metadata": {"name": "held-by-others", "namespace": "default", "uid": "held-uid"},
        "spec": {"devices": {"requests": []}},
        "status": {"allocation": {"devices": {"results": results}}, "reservedFor": [{"uid": "other"}]},
    }


def _state_and_pod(case: dict[str, Any]) -> tuple[ClusterState, dict[str, Any]]:
    objects: list[dict[str, Any]] = [{**case["node"], "kind": "Node"}]
    # Admin-access requests need the namespace label (the API server would enforce it).
    objects.append(
        {"kind": "Namespace", "metadata": {"name": "default", "labels": {ADMIN_ACCESS_LABEL: "true"}}}
    )
    # The upstream table may reuse a slice or claim name; the API cannot.
    seen: set[str] = set()
    for slice_ in case.get("resourceSlices") or ():
        name = slice_["metadata"]["name"]
        while name in seen:
            name += "-again"
        seen.add(name)
        objects.append({**slice_, "kind": "ResourceSlice", "metadata": {**slice_["metadata"], "name": name}})
    objects += [{**c, "kind": "DeviceClass"} for c in case.get("deviceClasses") or ()]
    pod_claims = []
    for number, claim in enumerate(case.get("claims") or ()):
        name = claim["metadata"]["name"]
        while name in seen:
            name += "-again"
        seen.add(name)
        meta = {**claim["metadata"], "name": name, "namespace": "default", "uid": f"claim-uid-{number}"}
        objects.append({**claim, "kind": "ResourceClaim", "metadata": meta})
        pod_claims.append({"name": f"c{number}", "resourceClaimName": meta["name"]})
    holder = _holder_claim(case)
    if holder is not None:
        objects.append(holder)
    pod = {
        "metadata": {"name": "pod", "namespace": "default", "uid": POD_UID},
        "spec": {"resourceClaims": pod_claims},
    }
    return ClusterState.from_objects(objects), pod


SCENARIOS = [c for c in CASES if c["name"] not in INTERRUPT_CAUSES]


def check_filter(case: dict[str, Any], version: str = "1.36", *, lossy: bool = False) -> None:
    """The node passes /filter iff upstream allocated; failures carry upstream's error text.

    `lossy`: the case's dump cannot name the device of a CEL error (test_dumped_tables.LOSSY_137),
    so the device named is left out of the comparison.
    """
    state, pod = _state_and_pod(case)
    features = Features.from_conformance(case["features"], version)
    placement = Placement(state, features=features, assumed=AssumeCache())
    node = case["node"]["metadata"]["name"]
    verdict = placement.filter(parse_pod(pod), [node])
    expected = case["expected"]
    assert verdict.error == ""
    if expected["status"] == "allocated":
        assert verdict.passed == [node], verdict
    elif expected["status"] == "unschedulable":
        assert verdict.passed == []
        assert node in verdict.failed or node in verdict.unresolvable
    else:
        reason = verdict.unresolvable.get(node, "")
        # Our claims live in a namespace, so messages name them ns/name as klog.KObj does.
        reason = reason.replace("claim default/", "claim ")
        if case["name"] in PREFIX_ONLY:
            assert "could not retrieve device class" in reason
        elif lossy:
            on_device = re.compile(r" on device \S+:")
            assert on_device.sub(":", expected["error"]) in on_device.sub(":", reason), verdict
        else:
            assert expected["error"] in reason, verdict


@pytest.mark.parametrize("case", SCENARIOS, ids=[c["name"].removeprefix("TestDump/") for c in SCENARIOS])
def test_filter_agrees_with_upstream(case: dict[str, Any]) -> None:
    """The node passes /filter iff upstream allocated; failures carry upstream's error text."""
    check_filter(case)
