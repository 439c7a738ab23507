"""Gather the resource pools usable from one node (spec dra.md §3.2).

A pool is complete when all `resourceSliceCount` slices of its newest generation are present,
obsolete when some slice of a newer generation exists elsewhere (the pool is ignored),
incomplete otherwise (kept as a marker: `All` requests fail on it), and invalid when its slices
contradict each other (duplicate device names, unknown counter sets). The order of the result
is the first-fit search order: pools without binding-condition devices first, each group sorted
by driver then pool name; slices by name; devices as listed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from extender.allocator.features import Features
from extender.allocator.model import PoolID, Slice
from extender.allocator.nodeselection import Node, node_matches
from extender.quantity import Quantity


@dataclass(slots=True)
class Pool:
    """One pool as seen from one node."""

    id: PoolID
    incomplete: bool = False
    invalid: bool = False
    invalid_reason: str = ""
    slices: list[Slice] = field(default_factory=list)  # device slices targeting the node
    slices_not_targeting_node: list[Slice] = field(default_factory=list)
    counter_sets: dict[str, dict[str, Quantity]] = field(default_factory=dict)

    @property
    def has_binding_conditions(self) -> bool:
        return any(d.binding_conditions for s in self.slices for d in s.devices)


def invalid_pools_detail(pools: Iterable[Pool]) -> str:
    """Each invalid pool and why (upstream's error names neither), so an operator finds the slices."""
    return "; ".join(f"pool {p.id}: {p.invalid_reason}" for p in pools if p.invalid)


def slice_is_relevant(slice_: Slice, node: Node | None, features: Features) -> bool:
    """Whether a slice contributes to the pools seen from `node`."""
    if not features.partitionable_devices and (slice_.per_device_node_selection or slice_.shared_counters):
        return False
    if slice_.shared_counters:
        return True
    if slice_.node_name or slice_.all_nodes or slice_.node_selector is not None:
        return node_matches(
            node, node_name=slice_.node_name, all_nodes=slice_.all_nodes, node_selector=slice_.node_selector
        )
    if slice_.per_device_node_selection:
        return any(
            node_matches(node, node_name=d.node_name, all_nodes=d.all_nodes, node_selector=d.node_selector)
            for d in slice_.devices
        )
    return False  # some future selection mechanism we do not understand


def gather_pools(
    candidate_slices: Iterable[Slice],
    node: Node | None,
    features: Features,
    *,
    all_slices_of_pool: dict[PoolID, Sequence[Slice]],
) -> list[Pool]:
    """Pools usable from `node`, in search order.

    Args:
        candidate_slices: slices that may be relevant for the node (a superset is fine).
        node: the Node object (labels matter for node selectors).
        features: allocator feature switches.
        all_slices_of_pool: every slice in the cluster by pool, for the obsolete/incomplete check.
    """
    grouped: dict[PoolID, list[Slice]] = {}
    for slice_ in candidate_slices:
        if not slice_is_relevant(slice_, node, features):
            continue
        current = grouped.get(slice_.pool_id)
        if current is None or slice_.generation > current[0].generation:
            grouped[slice_.pool_id] = [slice_]
        elif slice_.generation == current[0].generation:
            current.append(slice_)

    plain: list[Pool] = []
    with_binding_conditions: list[Pool] = []
    for pool_id, slices in grouped.items():
        generation = slices[0].generation
        expected = slices[0].resource_slice_count
        all_for_pool: list[Slice] | None = None
        if len(slices) != expected:
            siblings = all_slices_of_pool.get(pool_id, ())
            if any(s.generation > generation for s in siblings):
                continue  # obsolete: the driver is replacing this generation
            all_for_pool = [s for s in siblings if s.generation == generation]
            if len(all_for_pool) != expected:
                plain.append(Pool(id=pool_id, incomplete=True))
                continue
        pool = _build_pool(pool_id, slices, features, all_for_pool)
        (with_binding_conditions if pool.has_binding_conditions else plain).append(pool)

    plain.sort(key=lambda p: p.id)
    with_binding_conditions.sort(key=lambda p: p.id)
    return plain + with_binding_conditions


def _build_pool(
    pool_id: PoolID, slices: list[Slice], features: Features, all_for_pool: list[Slice] | None
) -> Pool:
    slices = sorted(slices, key=lambda s: s.name)
    if features.partitionable_devices:
        counter_slices = [s for s in slices if s.shared_counters]
        device_slices = [s for s in slices if not s.shared_counters]
    else:
        counter_slices, device_slices = [], slices

    seen: set[str] = set()
    for slice_ in device_slices:
        for device in slice_.devices:
            if device.name in seen:
                return Pool(id=pool_id, invalid=True, invalid_reason=f"duplicate device name {device.name}")
            seen.add(device.name)
    if not features.partitionable_devices:
        return Pool(id=pool_id, slices=device_slices)

    counter_sets: dict[str, dict[str, Quantity]] = {}
    for slice_ in counter_slices:
        for name, counters in slice_.shared_counters:
            if name in counter_sets:
                return Pool(id=pool_id, invalid=True, invalid_reason=f"duplicate counter set name {name}")
            counter_sets[name] = counters
    reason = _counter_consumption_problem(counter_sets, slices)
    if reason:
        return Pool(id=pool_id, invalid=True, invalid_reason=reason)

    not_targeting: list[Slice] = []
    if all_for_pool is not None and len(all_for_pool) != len(slices):
        names = {s.name for s in slices}
        not_targeting = [s for s in all_for_pool if s.name not in names]
        reason = _counter_consumption_problem(counter_sets, not_targeting)
        if reason:
            return Pool(id=pool_id, invalid=True, invalid_reason=reason)
    return Pool(
        id=pool_id, slices=device_slices, slices_not_targeting_node=not_targeting, counter_sets=counter_sets
    )


def _counter_consumption_problem(
    counter_sets: dict[str, dict[str, Quantity]], slices: Iterable[Slice]
) -> str:
    for slice_ in slices:
        for device in slice_.devices:
            for set_name, counters in device.consumes_counters:
                counter_set = counter_sets.get(set_name)
                if counter_set is None:
                    return f"counter set {set_name} not found"
                for counter in counters:
                    if counter not in counter_set:
                        return f"counter {counter} not found in counter set {set_name}"
    return ""
