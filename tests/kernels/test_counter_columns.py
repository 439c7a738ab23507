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
from extender.index.counters import counter_columns, milli
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
    before = {id(entry[0]): entry[1] for entry in first._cache.values()}
    slice_ = copy.deepcopy(
        next(o for o in objects if o["kind"] == "ResourceSlice" and o["spec"].get("devices"))
    )
    slice_["spec"]["devices"] = slice_["spec"]["devices"][:1]
    state.upsert(slice_)
    index = placement.index()
    second = counter_columns(index)
    changed = slice_["spec"]["nodeName"]
    for name in index.node_names:
        block = index.blocks[name]
        reused = before.get(id(block)) is second._cache[id(block)][1]
        assert reused == (name != changed), name
    assert len(second.row_ptr) == index.num_rows + 1
    assert np.array_equal(np.diff(second.row_ptr) > 0, second.row_consumes)
