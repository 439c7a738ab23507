"""Reference oracle: the per-node `gather_pools` as it was before the linear index (issue 10).

Provenance: extender/allocator/pools.py at commit 495d6a2 (the per-node implementation that runs
over every candidate slice of the cluster for one node, as upstream's gatherPools does), kept
verbatim apart from this docstring and the names, so tests can compare the linear catalog with
it. Test-only: nothing in `extender` imports this.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from extender.allocator.features import Features
from extender.allocator.model import PoolID, Slice
from extender.allocator.nodeselection import Node
from extender.allocator.pools import Pool, slice_is_relevant
from extender.quantity import Quantity


def reference_gather_pools(
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
