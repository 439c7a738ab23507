"""Counter columns after a slice change: a rebuilt node block whose counters and consumption
read as before keeps its previous columns (`counters._reads_alike`); any change to what they
read works them out again. Either way the columns equal those built from nothing."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any
from unittest import mock

import numpy as np
import pytest

from extender.allocator.features import Features
from extender.cluster.state import ClusterState
from extender.index import counters
from extender.index.counters import CounterColumns, counter_columns
from extender.index.snapshot import DeviceIndex, build_index
from extender.objects import Obj
from loadtests.fleet import generate_mixed_cluster

FEATURES = Features.from_gates()
COLUMNS = (
    "capacity", "counter_node", "row_counter", "row_amount", "row_ptr", "consumer_row",
    "consumer_counter", "consumer_amount", "uncertain", "incomplete", "other_special",
    "row_consumes", "counter_start",
)  # fmt: skip


def _a100_slice(state: ClusterState, counters_slice: bool) -> Obj:
    return copy.deepcopy(
        next(
            s
            for s in state.list("ResourceSlice")
            if s["spec"]["nodeName"].startswith("a100")
            and bool(s["spec"].get("sharedCounters")) == counters_slice
        )
    )


def _same_content(raw: Obj) -> None:
    pass


def _more_consumed(raw: Obj) -> None:
    device = next(d for d in raw["spec"]["devices"] if d.get("consumesCounters"))
    counters_ = device["consumesCounters"][0]["counters"]
    name = next(iter(counters_))
    counters_[name] = {"value": "2"}


def _less_counted(raw: Obj) -> None:
    counters_ = raw["spec"]["sharedCounters"][0]["counters"]
    name = next(iter(counters_))
    counters_[name] = {"value": "1"}


@pytest.mark.parametrize(
    ("counters_slice", "change", "reused"),
    [
        (False, _same_content, True),
        (True, _same_content, True),
        (False, _more_consumed, False),
        (True, _less_counted, False),
    ],
)
def test_counter_columns_of_a_rebuilt_block_equal_a_build_from_nothing(
    counters_slice: bool, change: Callable[[Obj], None], reused: bool
) -> None:
    objects, _ = generate_mixed_cluster(nodes=16, seed=3, pods=0)
    state = ClusterState.from_objects(objects)
    index = build_index(state, FEATURES)
    counter_columns(index)
    raw = _a100_slice(state, counters_slice)
    raw["metadata"]["resourceVersion"] += "1"
    change(raw)
    state.upsert(raw)
    new = build_index(state, FEATURES, previous=index)
    assert new.patched is not None and len(new.rebuilt) == 1
    calls: list[Any] = []
    real = counters._block_counters

    def counting(*args: Any) -> Any:
        calls.append(args)
        return real(*args)

    with mock.patch.object(counters, "_block_counters", counting):
        patched = counter_columns(new)
    assert (calls == []) == reused
    built = CounterColumns(build_index(state, FEATURES), {})
    for column in COLUMNS:
        assert np.array_equal(getattr(patched, column), getattr(built, column)), column
    _assert_available_alike(new, patched, built)


def _assert_available_alike(index: DeviceIndex, ours: CounterColumns, theirs: CounterColumns) -> None:
    free = np.ones(index.num_rows, dtype=bool)
    free[::3] = False
    assert np.array_equal(ours.available(free), theirs.available(free))
