"""Compatibility groups of counter consumption (Kubernetes 1.37 DRADeviceCompatibilityGroups).

A device's counter consumption may name compatibility groups; devices drawing from one counter
set may be allocated together only while the groups they declare intersect (v0.37.2
structured/internal/experimental/compatibility_groups.go). A device that declares no groups goes
only with others that declare none. The devices already allocated (read from the pool's slices)
form each counter set's baseline; this search's devices narrow it further, and backtracking
restores it. While the gate is off, slices that use groups are ignored (`slice_uses_groups`;
extender/allocator/pools.py), which leaves their pool incomplete.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from extender.allocator.model import Device, DeviceID, PoolID, Slice


@dataclass(frozen=True, slots=True)
class Intersection:
    """The rolling state of one counter set (upstream's compatibilityGroupIntersection)."""

    has_members: bool = False
    all_empty: bool = False  # every member so far declared no groups
    groups: frozenset[str] = frozenset()

    def admits(self, groups: frozenset[str]) -> bool:
        if not self.has_members:
            return True
        if not groups:
            return self.all_empty
        if self.all_empty:
            return False
        return bool(self.groups & groups)

    def add(self, groups: frozenset[str]) -> Intersection:
        if not self.has_members:
            return Intersection(True, not groups, groups)
        if self.all_empty or not groups:
            return self
        return Intersection(True, False, self.groups & groups)


def slice_uses_groups(slice_: Slice) -> bool:
    """Does any device of the slice name compatibility groups (upstream's sliceUsesCompatibilityGroups)?"""
    return any(any(device.counter_groups) for device in slice_.devices)


def device_groups(device: Device, index: int) -> frozenset[str]:
    """The groups of the device's `index`-th counter consumption (empty when none)."""
    return device.counter_groups[index] if index < len(device.counter_groups) else frozenset()


class CompatibilityState:
    """Per (pool, counter set): the intersection over allocated devices and this search's devices."""

    def __init__(self, is_allocated: Callable[[DeviceID], bool]) -> None:
        self._is_allocated = is_allocated
        self._baseline: dict[PoolID, dict[str, Intersection]] = {}
        self._running: dict[PoolID, dict[str, Intersection]] = {}

    def _baseline_of(self, pool_id: PoolID, slices: list[Slice]) -> dict[str, Intersection]:
        baseline = self._baseline.get(pool_id)
        if baseline is None:
            baseline = {}
            for slice_ in slices:
                for device in slice_.devices:
                    if not self._is_allocated(device.id):
                        continue
                    for index, (set_name, _) in enumerate(device.consumes_counters):
                        current = baseline.get(set_name, Intersection())
                        baseline[set_name] = current.add(device_groups(device, index))
            self._baseline[pool_id] = baseline
        return baseline

    def take(self, pool_id: PoolID, slices: list[Slice], device: Device) -> Callable[[], None] | None:
        """Fold the device in; returns the undo, or None when a counter set does not admit it.

        `slices`: all device slices of the pool (targeting the node or not), for the baseline.
        """
        running = self._running.setdefault(pool_id, {})
        baseline = self._baseline_of(pool_id, slices)
        saved: list[tuple[str, Intersection | None]] = []

        def undo() -> None:
            for set_name, previous in reversed(saved):
                if previous is None:
                    running.pop(set_name, None)
                else:
                    running[set_name] = previous

        for index, (set_name, _) in enumerate(device.consumes_counters):
            previous = running.get(set_name)
            current = previous if previous is not None else baseline.get(set_name, Intersection())
            groups = device_groups(device, index)
            if not current.admits(groups):
                undo()
                return None
            saved.append((set_name, previous))
            running[set_name] = current.add(groups)
        return undo
