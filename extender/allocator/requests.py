"""Parsed device requests of a ResourceClaim (spec dra.md §1.5).

`parse_claim` reads `spec.devices` once into immutable records; validation that depends on
feature gates or on the node's pools happens in the allocator, in upstream's order, so that
error messages match upstream's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from extender.quantity import Quantity

EXACT_COUNT = "ExactCount"
ALL = "All"


@dataclass(frozen=True, slots=True)
class Selector:
    """A device selector; `expression` is None for a selector type we do not know."""

    expression: str | None


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """An exact request or one `firstAvailable` subrequest."""

    name: str
    class_name: str
    selectors: tuple[Selector, ...]
    mode: str
    count: int
    admin_access: bool | None  # None when unset (subrequests never set it)
    tolerations: tuple[dict[str, Any], ...]
    capacity: dict[str, Quantity] | None  # `capacity.requests`, None when absent
    #: 1.37 `derivedAttributes`: (fully qualified name, CEL expression); only 1.37 reads them.
    derived_attributes: tuple[tuple[str, str], ...] = ()

    @property
    def is_admin(self) -> bool:
        return bool(self.admin_access)


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """One entry of `spec.devices.requests`: exactly one of `exactly` and `first_available`."""

    name: str
    exactly: RequestSpec | None
    first_available: tuple[RequestSpec, ...]


@dataclass(frozen=True, slots=True)
class ConstraintSpec:
    """`matchAttribute` or `distinctAttribute` (neither set: a type we do not know)."""

    requests: frozenset[str]
    match_attribute: str | None
    distinct_attribute: str | None


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    """What the allocator needs of one ResourceClaim."""

    namespace: str
    name: str
    uid: str
    requests: tuple[DeviceRequest, ...]
    constraints: tuple[ConstraintSpec, ...]
    config: tuple[dict[str, Any], ...]

    @property
    def ref(self) -> str:
        """`ns/name` (or `name` without namespace), as upstream's klog.KObj prints it."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


def _spec(raw: dict[str, Any], name: str, *, subrequest: bool, apply_defaults: bool) -> RequestSpec:
    mode = raw.get("allocationMode") or ""
    count = raw.get("count")
    if apply_defaults:
        mode = mode or EXACT_COUNT
        if count is None and mode == EXACT_COUNT:
            count = 1
        # The API server refuses count < 1; an object that skipped it must not allocate nothing.
        if mode == EXACT_COUNT and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
            raise ValueError(f"request {name}: count must be an integer of at least 1, got {count!r}")
    capacity = raw.get("capacity")
    tolerations = []
    for toleration in raw.get("tolerations") or ():
        toleration = dict(toleration)
        if apply_defaults and not toleration.get("operator"):
            toleration["operator"] = "Equal"
        tolerations.append(toleration)
    return RequestSpec(
        name=name,
        class_name=raw.get("deviceClassName") or "",
        selectors=tuple(Selector((s.get("cel") or {}).get("expression")) for s in raw.get("selectors") or ()),
        mode=mode,
        count=int(count or 0),
        admin_access=None if subrequest else raw.get("adminAccess"),
        tolerations=tuple(tolerations),
        capacity=None
        if capacity is None
        else {k: Quantity.parse(v) for k, v in (capacity.get("requests") or {}).items()},
        derived_attributes=tuple(
            (str(d.get("name") or ""), str(d.get("expression") or ""))
            for d in raw.get("derivedAttributes") or ()
        ),
    )


def parse_claim(claim: dict[str, Any], *, apply_defaults: bool = True) -> ClaimSpec:
    """Parse a ResourceClaim (or a template's claim spec wrapped as a claim).

    `apply_defaults` fills what the API server would default (ExactCount, count 1, toleration
    operator Equal) for objects that never went through it, e.g. hand-written state files.
    """
    meta = claim.get("metadata") or {}
    devices = (claim.get("spec") or {}).get("devices") or {}
    requests = []
    for raw in devices.get("requests") or ():
        name = raw.get("name", "")
        exactly = raw.get("exactly")
        first = raw.get("firstAvailable") or ()
        requests.append(
            DeviceRequest(
                name=name,
                exactly=_spec(exactly, name, subrequest=False, apply_defaults=apply_defaults)
                if exactly is not None
                else None,
                first_available=tuple(
                    _spec(sub, sub.get("name", ""), subrequest=True, apply_defaults=apply_defaults)
                    for sub in first
                ),
            )
        )
    constraints = tuple(
        ConstraintSpec(
            requests=frozenset(c.get("requests") or ()),
            match_attribute=c.get("matchAttribute"),
            distinct_attribute=c.get("distinctAttribute"),
        )
        for c in devices.get("constraints") or ()
    )
    return ClaimSpec(
        namespace=meta.get("namespace", "") or "",
        name=meta.get("name", ""),
        uid=meta.get("uid", "") or "",
        requests=tuple(requests),
        constraints=constraints,
        config=tuple(devices.get("config") or ()),
    )
