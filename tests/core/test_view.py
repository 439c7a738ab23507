"""The ClusterView alone: index per device generation, held devices and free rows per claims and
assumed generation, snapshots, warm-up and the generation triple."""

from __future__ import annotations

import copy

import numpy as np

from extender.allocator.features import Features
from extender.cluster.state import ClusterState
from extender.core.assumed import AssumeCache
from extender.core.view import ClusterView
from extender.index.topology import TopologyModel, TopologySettings
from tests.core import small_cluster as c


def _view(objects: list[c.Obj], assumed: AssumeCache | None = None) -> ClusterView:
    return ClusterView(
        ClusterState.from_objects(objects),
        features=Features.from_gates(),
        assumed=assumed if assumed is not None else AssumeCache(clock=lambda: 0.0),
        topology=TopologyModel(TopologySettings()),
    )


def _free_names(view: ClusterView) -> set[str]:
    index = view.index()
    _, free = view.allocated_state()
    return {
        f"{index.node_names[index.row_node[row]]}/{index.row_device[row].name}"
        for row in np.flatnonzero(free)
    }


def test_the_index_is_built_on_first_use_and_kept_while_devices_do_not_change() -> None:
    view = _view([c.node("a"), *c.gpus("a", 2), c.gpu_class()])
    assert view.current_index() is None  # nothing built yet, and current_index builds nothing
    index = view.index()
    assert view.current_index() is index
    assert list(index.node_names) == ["a"] and index.num_rows == 2
    view.state.upsert(c.claim("pending", 1))  # a claim is no device change
    assert view.index() is index
    view.state.upsert(c.node("b"))
    for obj in c.gpus("b", 3):
        view.state.upsert(obj)
    rebuilt = view.index()
    assert rebuilt is not index and rebuilt.num_rows == 5
    assert rebuilt.generation == view.state.devices_generation


def test_free_rows_follow_allocated_claims_by_diff() -> None:
    view = _view([c.node("a"), *c.gpus("a", 3), c.gpu_class(), c.held("h", "a", ["gpu-0"])])
    allocated, free = view.allocated_state()
    assert _free_names(view) == {"a/gpu-1", "a/gpu-2"}
    assert {d.device for d in allocated.devices} == {"gpu-0"}
    assert view.allocated_state()[1] is free  # unchanged generation: the same mask
    view.state.upsert(c.held("h2", "a", ["gpu-2"]))
    assert _free_names(view) == {"a/gpu-1"}
    assert free.sum() == 2  # the mask handed out before is a new object, never changed in place
    released = copy.deepcopy(view.state.get("ResourceClaim", "h", "default"))
    released.pop("status")
    view.state.upsert(released)
    assert _free_names(view) == {"a/gpu-0", "a/gpu-1"}


def test_a_device_change_keeps_the_held_devices_and_a_claim_change_renews_them() -> None:
    """A new index generation with no claim or assumed change re-reads nothing held: the held
    devices are the same object (equal content); a claim change after it gives new ones."""
    view = _view([c.node("a"), *c.gpus("a", 3), c.gpu_class(), c.held("h", "a", ["gpu-0"])])
    allocated, _ = view.allocated_state()
    view.state.upsert(c.node("b"))
    for obj in c.gpus("b", 2):
        view.state.upsert(obj)
    after, _ = view.allocated_state()
    assert after is allocated and _free_names(view) == {"a/gpu-1", "a/gpu-2", "b/gpu-0", "b/gpu-1"}
    view.state.upsert(c.held("h2", "b", ["gpu-1"]))
    renewed, _ = view.allocated_state()
    assert renewed is not allocated and {(d.pool, d.device) for d in renewed.devices} == {
        ("a", "gpu-0"),
        ("b", "gpu-1"),
    }


def test_assumed_allocations_hold_devices_until_forgotten() -> None:
    assumed = AssumeCache(clock=lambda: 0.0)
    view = _view([c.node("a"), *c.gpus("a", 2), c.gpu_class(), c.claim("mine", 1)], assumed)
    before = view.generation()
    result = {"request": "r", "driver": c.DRIVER, "pool": "a", "device": "gpu-1"}
    assumed.assume("uid-mine", {"devices": {"results": [result]}}, pod_uid="p")
    assert view.generation() == (before[0], before[1], before[2] + 1)
    assert _free_names(view) == {"a/gpu-0"}
    assumed.forget("uid-mine")
    assert _free_names(view) == {"a/gpu-0", "a/gpu-1"}


def test_a_snapshot_is_the_index_and_held_devices_of_one_moment() -> None:
    view = _view([c.node("a"), *c.gpus("a", 2), c.gpu_class(), c.held("h", "a", ["gpu-1"])])
    snapshot = view.snapshot()
    allocated, free = view.allocated_state()
    assert snapshot.index is view.index() and snapshot.allocated is allocated and snapshot.free is free
    view.state.upsert(c.held("h2", "a", ["gpu-0"]))
    assert snapshot.free.tolist() == [True, False]  # the snapshot keeps what it saw
    assert view.snapshot().free.tolist() == [False, False]


def test_generation_is_devices_claims_and_assumed() -> None:
    view = _view([c.node("a"), *c.gpus("a", 1), c.gpu_class()])
    state = view.state
    assert view.generation() == (state.devices_generation, state.claims_generation, view.assumed.version)
    state.upsert(c.claim("x", 1))
    assert view.generation()[1] == state.claims_generation


def test_warm_builds_the_index_and_the_held_devices() -> None:
    view = _view([c.node("a"), *c.gpus("a", 2), c.gpu_class(), c.held("h", "a", ["gpu-0"])])
    view.warm()
    index = view.current_index()
    assert index is not None and index.cached_masks >= 1  # every class's mask, evaluated once
    assert view.allocated_state()[1].tolist() == [False, True]


def test_freezing_new_caches_is_off_unless_asked() -> None:
    view = _view([c.node("a"), *c.gpus("a", 1), c.gpu_class()])
    view.index()
    view.freeze_new_caches()
    assert view._frozen_at == (-1, -1, -1)
