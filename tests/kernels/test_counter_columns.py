"""Counter columns (`extender.index.counters`) against the allocator's own counter bookkeeping.

Scope: on random mixed clusters (the property test's generator: partitionable GPUs with counters in
Gi, plain devices, held devices, sometimes overdrawing a counter), every node's counter capacities,
per-row consumption and available-after-held amounts equal what upstream's search computes
(`_Search._available`, the device's `consumes_counters`), in milli-units; and a rebuild after a
one-node change recomputes only that node's columns.
"""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest

from extender.allocator.allocating import _Search
from extender.allocator.features import Features
from extender.cluster.state import ClusterState
from extender.core.assumed import AssumeCache
from extender.core.placement import Placement
from extender.core.searching import Classes
from extender.index import counters
from extender.index.counters import CounterColumns, counter_columns, milli
from extender.quantity import Quantity
from tests.core.test_tiers_property import make_cluster


def test_milli_is_exact_or_refuses() -> None:
    assert milli(Quantity.parse("80Gi")) == 80 * 2**30 * 1000
    assert milli(Quantity.parse("1500m")) == 1500
    assert milli(Quantity.parse("7")) == 7000
    assert milli(Quantity.parse("1u")) is None  # finer than a milli-unit: not modelled
    assert milli(Quantity.parse("100E")) is None  # beyond the int64 headroom


@pytest.mark.parametrize("seed", range(25))
def test_columns_equal_the_allocators_counters(seed: int) -> None:
    objects, _ = make_cluster(random.Random(seed))
    placement = Placement(
        ClusterState.from_objects(objects), features=Features.from_gates(), assumed=AssumeCache()
    )
    index = placement.index()
    allocated, free = placement.allocated_state()
    columns = counter_columns(index)
    available = columns.available(free)
    for position, name in enumerate(index.node_names):
        pools = index.pools[name]
        search = _Search(
            [], index.nodes[name], pools, index.features, Classes(index), allocated, index.evaluator
        )
        ids = range(columns.counter_start[position], columns.counter_start[position + 1])
        names = columns.counter_names(position)
        assert len(names) == len(ids)
        by_pool = {pool.id: pool for pool in pools}
        for counter, (pool_id, set_name, counter_name) in zip(ids, names, strict=True):
            pool = by_pool[pool_id]
            assert columns.capacity[counter] == milli(pool.counter_sets[set_name][counter_name])
            # The allocator's own bookkeeping (extender/allocator/counters.py, nano-units).
            book = search._pool_counters(pool)
            expected_nano = book.available[book._index[(set_name, counter_name)]]
            assert int(available[counter]) * 10**6 == expected_nano, (name, pool_id, set_name, counter_name)
        for row in range(index.node_start[position], index.node_start[position + 1]):
            device = index.row_device[row]
            entries = range(columns.row_ptr[row], columns.row_ptr[row + 1])
            got = sorted(
                (names[columns.row_counter[e] - ids.start], int(columns.row_amount[e])) for e in entries
            )
            pool_id = (device.id.driver, device.id.pool)
            want = sorted(
                ((pool_id, set_name, counter), milli(amount))
                for set_name, counters in device.consumes_counters
                for counter, amount in counters.items()
            )
            assert got == want


def test_a_one_node_change_recomputes_only_that_node() -> None:
    objects, _ = make_cluster(random.Random(3))
    while sum(o["kind"] == "Node" for o in objects) < 2:
        objects, _ = make_cluster(random.Random(len(objects)))
    state = ClusterState.from_objects(objects)
    placement = Placement(state, features=Features.from_gates(), assumed=AssumeCache())
    first = counter_columns(placement.index())
    before = {id(entry[0]): entry[1] for entry in first.block_cache().values()}
    slice_ = copy.deepcopy(
        next(o for o in objects if o["kind"] == "ResourceSlice" and o["spec"].get("devices"))
    )
    slice_["spec"]["devices"] = slice_["spec"]["devices"][:1]
    state.upsert(slice_)
    index = placement.index()
    second = counter_columns(index)
    changed = slice_["spec"]["nodeName"]
    after = second.block_cache()
    for name in index.node_names:
        block = index.blocks[name]
        reused = before.get(id(block)) is after[id(block)][1]
        assert reused == (name != changed), name
    assert len(second.row_ptr) == index.num_rows + 1
    assert np.array_equal(np.diff(second.row_ptr) > 0, second.row_consumes)


def _available_by_hand(columns: CounterColumns, free: np.ndarray) -> np.ndarray:
    held = ~free[columns.consumer_row]
    want = columns.capacity.copy()
    np.subtract.at(want, columns.consumer_counter[held], columns.consumer_amount[held])
    return want


@pytest.mark.parametrize("seed", range(6))
def test_available_from_the_last_mask_equals_a_full_count(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """`available` redoes only the counters whose held consumers changed since the last mask
    (and, after a one-slice change, the counters the patch rewrote): always the full count."""
    monkeypatch.setattr(counters, "REDO_SHARE", 1.0)  # small clusters: take the incremental path
    for attempt in range(100):  # the first random cluster of this seed with counter consumers
        objects, _ = make_cluster(random.Random(seed * 1000 + attempt))
        state = ClusterState.from_objects(objects)
        placement = Placement(state, features=Features.from_gates(), assumed=AssumeCache())
        columns = counter_columns(placement.index())
        if len(columns.consumer_row):
            break
    assert len(columns.consumer_row), "no random cluster with counter consumers"
    gen = np.random.default_rng(seed)
    free = gen.random(placement.index().num_rows) < 0.7
    assert np.array_equal(columns.available(free), _available_by_hand(columns, free))
    for _ in range(5):  # a few rows change at a time: the incremental path
        before = (free, columns.available(free))
        free = free.copy()
        flip = gen.integers(0, len(free), size=1)
        free[flip] = ~free[flip]
        incremental = columns._available_from(before, None, free)
        assert incremental is not None and np.array_equal(incremental, _available_by_hand(columns, free))
        columns.has_foreign = True  # the general path (consumers on any node's rows) agrees too
        general = columns._available_from(before, None, free)
        columns.has_foreign = False
        assert general is not None and np.array_equal(general, incremental)
        assert np.array_equal(columns.available(free), _available_by_hand(columns, free))
    # A slice replaced by the same content under a new version: patched columns inherit the mask.
    slice_ = next(o for o in objects if o["kind"] == "ResourceSlice" and o["spec"].get("devices"))
    state.upsert({**slice_, "metadata": {**slice_["metadata"], "resourceVersion": "changed"}})
    patched = counter_columns(placement.index())
    if placement.index().patched is not None and patched is not columns:  # rows written over
        assert patched._inherited is not None  # the previous generation's mask and availability
    assert np.array_equal(patched.available(free), _available_by_hand(patched, free))
    free = free.copy()
    free[: len(free) // 2] = True
    assert np.array_equal(patched.available(free), _available_by_hand(patched, free))
