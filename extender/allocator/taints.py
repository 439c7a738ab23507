"""Device taints and request tolerations (DRADeviceTaints, spec dra.md §3.7)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from extender.allocator.model import Taint

#: Only these effects keep a device from being allocated; `None` and unknown effects do not.
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def tolerates(toleration: dict[str, Any], taint: Taint) -> bool:
    """Core v1 toleration matching, applied to a device taint."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.effect:
        return False
    key = toleration.get("key") or ""
    if key and key != taint.key:
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return (toleration.get("value") or "") == taint.value
    return False


def all_tolerated(taints: Iterable[Taint], tolerations: Iterable[dict[str, Any]]) -> bool:
    """True if every blocking taint is tolerated by at least one toleration."""
    tolerations = tuple(tolerations)
    return all(
        taint.effect not in BLOCKING_EFFECTS or any(tolerates(t, taint) for t in tolerations)
        for taint in taints
    )
