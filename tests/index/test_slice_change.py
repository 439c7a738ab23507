"""A slice or node change re-derives the touched nodes only, and gives what a build from nothing
gives (issue 21 item 2): pools, row columns, row map, masks, attribute codes, counter columns and
parent-GPU groups, after changes that keep the content, change an attribute, drop a device or
relabel a node."""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest

from extender.allocator.features import Features
from extender.allocator.pools import Pool
from extender.cluster.state import UPDATED, ClusterState
from extender.core import scoring
from extender.index.counters import CounterColumns, counter_columns
from extender.index.snapshot import DeviceIndex, build_index
from extender.index.topology import partition_groups
from extender.settings import Settings
from loadtests.fleet import generate_mixed_cluster

ATTRIBUTES = ("gpu.nvidia.com/parentUUID", "resource.kubernetes.io/pcieRoot", "gpu.nvidia.com/nvlinkDomain")


def _pool_key(pool: Pool) -> tuple[object, ...]:
    return (
        pool.id,
        pool.incomplete,
        pool.invalid,
        pool.invalid_reason,
        [(s.name, s.generation, len(s.devices)) for s in pool.slices],
        [s.name for s in pool.slices_not_targeting_node],
        sorted(pool.counter_sets),
    )


def _derive(index: DeviceIndex) -> None:
    for name in index.classes:
        index.mask(name, ())
    for attribute in ATTRIBUTES:
        index.attribute_codes(attribute)
    counter_columns(index)
    scoring.partitions(index)


def _same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal codes exactly where the other has equal codes (codes are only compared)."""
    if not np.array_equal(a < 0, b < 0) or not np.array_equal(a[a < 0], b[b < 0]):
        return False
    pairs = set(zip(a.tolist(), b.tolist(), strict=True))
    return len({x for x, _ in pairs}) == len(pairs) == len({y for _, y in pairs})


def _assert_same(new: DeviceIndex, fresh: DeviceIndex) -> None:
    assert new.node_names == fresh.node_names
    for name in new.node_names:
        assert [_pool_key(p) for p in new.pools[name]] == [_pool_key(p) for p in fresh.pools[name]], name
    assert [d.id for d in new.row_device] == [d.id for d in fresh.row_device]
    for column in ("row_node", "row_special", "row_tainted", "row_coords", "node_start", "link_offset"):
        assert np.array_equal(getattr(new, column), getattr(fresh, column)), column
    assert np.array_equal(new.node_has_invalid_pool, fresh.node_has_invalid_pool)
    assert np.array_equal(new.link_distance, fresh.link_distance, equal_nan=True)
    assert dict(new.rows_of.row_map) == dict(fresh.rows_of.row_map)
    for name in new.classes:
        a, b = new.mask(name, ()), fresh.mask(name, ())
        assert np.array_equal(a.match, b.match) and np.array_equal(a.error, b.error), name
    for attribute in ATTRIBUTES:
        assert _same_partition(new.attribute_codes(attribute), fresh.attribute_codes(attribute)), attribute
    patched, built = counter_columns(new), CounterColumns(fresh, {})
    for column in (
        "capacity", "counter_node", "row_counter", "row_amount", "row_ptr", "consumer_row",
        "consumer_counter", "consumer_amount", "uncertain", "incomplete", "other_special",
        "row_consumes", "counter_start",
    ):  # fmt: skip
        assert np.array_equal(getattr(patched, column), getattr(built, column)), column
    groups = scoring.partitions(new)
    grouped = partition_groups(
        fresh.topology, fresh.row_device, fresh.node_start, [fresh.pools[n] for n in fresh.node_names]
    )
    for column in ("row_group", "row_cost", "group_counters", "row_counters_only"):
        assert np.array_equal(getattr(groups, column), getattr(grouped, column)), column


def _change(state: ClusterState, rng: random.Random, step: int) -> str:
    """One random change to the state; returns what it did."""
    if rng.random() < 0.15:
        node = copy.deepcopy(rng.choice(state.list("Node")))
        node["metadata"].setdefault("labels", {})["example.com/step"] = str(step)
        state.upsert(node)
        return "node"
    raw = copy.deepcopy(rng.choice(state.list("ResourceSlice")))
    raw["metadata"]["resourceVersion"] = f"{raw['metadata'].get('resourceVersion', '')}-{step}"
    devices = raw["spec"].get("devices") or []
    kind = rng.random()
    if kind < 0.35 and devices:
        attributes = rng.choice(devices).setdefault("attributes", {})
        attributes["example.com/revision"] = {"int": step}
        what = "attribute"
    elif kind < 0.5 and len(devices) > 1:
        devices.pop()
        what = "device removed"
    else:
        what = "same content"
    state.upsert(raw)
    return what


@pytest.mark.parametrize("version", ["1.36", "1.37"])
def test_incremental_generations_match_a_build_from_nothing(version: str) -> None:
    features: Features = Settings().with_kubernetes_version(version).features
    objects, _ = generate_mixed_cluster(nodes=40, seed=3, pods=1)
    state = ClusterState.from_objects(objects)
    previous = build_index(state, features)
    _derive(previous)
    rng = random.Random(7)
    done: set[str] = set()
    patched = 0
    for step in range(24):
        done.add(_change(state, rng, step))
        index = build_index(state, features, previous=previous)
        patched += index.patched is not None
        _derive(index)
        _assert_same(index, build_index(state, features))
        previous = index
    assert done == {"node", "attribute", "device removed", "same content"}
    assert patched >= 12  # most changes keep the row layout: the columns were patched, not rebuilt


def _change_read_values(state: ClusterState, rng: random.Random, step: int) -> None:
    """A change of what the classes' selectors read (a device leaves its class) or of a counter
    slice's values, keeping the slice's devices (the rows stay where they are)."""
    raw = copy.deepcopy(rng.choice(state.list("ResourceSlice")))
    raw["metadata"]["resourceVersion"] = f"{raw['metadata'].get('resourceVersion', '')}-{step}"
    for counter_set in raw["spec"].get("sharedCounters") or []:
        for counter in counter_set["counters"].values():
            counter["value"] = str(step)
    for device in raw["spec"].get("devices") or []:
        attributes = device.get("attributes") or {}
        if "type" in attributes and rng.random() < 0.5:
            attributes["type"] = {"string": f"retired-{step}"}
        if "dra.net/rdma" in attributes and rng.random() < 0.5:
            attributes["dra.net/rdma"] = {"bool": False}
    state.upsert(raw)


def test_generations_asked_nothing_in_between_match_a_build_from_nothing() -> None:
    """Masks, code columns, counter columns and parent-GPU groups carried over generations that
    derived nothing (`DeviceIndex.changes_since`, the carry's stale entries) equal a fresh build."""
    features: Features = Settings().features
    objects, _ = generate_mixed_cluster(nodes=40, seed=5, pods=1)
    state = ClusterState.from_objects(objects)
    previous = build_index(state, features)
    _derive(previous)
    rng = random.Random(11)
    stale = lineage = 0
    for step in range(24):
        if step % 2:
            _change(state, rng, step)
        else:
            _change_read_values(state, rng, step)
        index = build_index(state, features, previous=previous)
        carry = index._carry
        stale += carry is not None and bool(carry.stale_masks) and bool(carry.stale_codes)
        lineage = max(lineage, len(index.lineage))
        if step % 3 == 2:  # only every third generation derives anything
            _derive(index)
            _assert_same(index, build_index(state, features))
        previous = index
    assert stale >= 4 and lineage >= 3, (stale, lineage)


def test_a_replayed_change_rebuilds_only_its_node() -> None:
    """A slice update read from the state's change log rebuilds its node's block only."""
    features = Settings().features
    objects, _ = generate_mixed_cluster(nodes=12, seed=3, pods=1)
    state = ClusterState.from_objects(objects)
    first = build_index(state, features)
    raw = copy.deepcopy(next(s for s in state.list("ResourceSlice") if s["spec"].get("devices")))
    raw["metadata"]["resourceVersion"] = "new"
    state.upsert(raw)
    second = build_index(state, features, previous=first)
    assert second.rebuilt == [raw["spec"]["nodeName"]]
    assert second.patched is not None and second.patched[0] == first.serial
    assert sum(a is not b for a, b in zip(first.slices, second.slices, strict=True)) == 1
    _assert_same(second, build_index(state, features))


def test_device_change_log() -> None:
    objects, _ = generate_mixed_cluster(nodes=3, seed=3, pods=1)
    state = ClusterState.from_objects(objects)
    start = state.devices_generation
    raw = copy.deepcopy(state.list("ResourceSlice")[0])
    state.upsert(raw)
    changes = state.device_changes_since(start)
    assert changes == [("ResourceSlice", ("", raw["metadata"]["name"]), UPDATED)]
    assert state.device_changes_since(state.devices_generation) == []
    assert state.device_changes_since(state.devices_generation + 1) is None  # not a generation it had
    state.replace_kind("Node", state.list("Node"))
    assert state.device_changes_since(start) is None  # a relist since: the caller rescans
