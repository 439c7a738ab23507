"""The linear device index (issue 10): pools gathered once per pool, blocks rebuilt per change.

The oracle is the per-node gather (tests/index/reference_pools.py, upstream's gatherPools shape):
on many seeded random clusters every node's pool list, rows and invalid flag must be exactly
what that oracle gives, after full builds and after incremental rebuilds.
"""

from __future__ import annotations

import copy
import random
from typing import Any

import numpy as np
import pytest

from extender.allocator.features import Features
from extender.allocator.model import PoolID, Slice
from extender.allocator.pools import PoolCatalog, gather_pools
from extender.cluster.state import ClusterState
from extender.index.snapshot import DeviceIndex, _node_block, build_index
from extender.objects import Obj
from tests.index.reference_pools import reference_gather_pools

GATES_ON = Features.from_gates()
GATES_OFF = Features.from_gates({"DRAPartitionableDevices": False})
RACKS = ("a", "b", "c")


# ----------------------------------------------------------------- random clusters
def _node(name: str, rack: str) -> Obj:
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": {"rack": rack, "kubernetes.io/hostname": name}},
    }


def _rack_selector(rack: str) -> Obj:
    return {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": [rack]}]}]
    }


def _device(rng: random.Random, name: str, counter_sets: list[str]) -> Obj:
    device: Obj = {"name": name, "attributes": {"index": {"int": rng.randrange(8)}}}
    if counter_sets and rng.random() < 0.8:
        wanted = rng.choice([*counter_sets, "missing-set"] if rng.random() < 0.05 else counter_sets)
        counter = "mem" if rng.random() > 0.05 else "missing-counter"
        device["consumesCounters"] = [{"counterSet": wanted, "counters": {counter: {"value": "1"}}}]
    if rng.random() < 0.05:
        device["bindingConditions"] = ["ready"]
    if rng.random() < 0.05:
        device["taints"] = [{"key": "k", "effect": "NoSchedule"}]
    return device


class _Builder:
    """Raw objects of one random cluster (names unique, everything else random)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.count = 0
        self.nodes = [_node(f"n{i}", self.rng.choice(RACKS)) for i in range(self.rng.randint(1, 7))]
        self.slices: list[Obj] = []

    def slice(self, pool: str, generation: int, count: int, **spec: Any) -> Obj:
        self.count += 1
        raw = {
            "kind": "ResourceSlice",
            "metadata": {"name": f"s{self.rng.randrange(1000):03d}-{self.count}"},
            "spec": {
                "driver": self.rng.choice(("gpu.example.com", "nic.example.com")),
                "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
                **spec,
            },
        }
        self.slices.append(raw)
        return raw

    def devices(self, prefix: str, counter_sets: list[str], n: int | None = None) -> list[Obj]:
        n = self.rng.randint(0, 4) if n is None else n
        names = [f"{prefix}-{i}" for i in range(n)]
        if names and self.rng.random() < 0.05:
            names.append(names[0])  # duplicate device name: invalid pool
        return [_device(self.rng, name, counter_sets) for name in names]

    def target(self) -> Obj:
        """A random slice-level node selection (mostly one node)."""
        roll = self.rng.random()
        if roll < 0.6:
            return {"nodeName": self.rng.choice(self.nodes)["metadata"]["name"]}
        if roll < 0.75:
            return {"allNodes": True}
        if roll < 0.9:
            return {"nodeSelector": _rack_selector(self.rng.choice(RACKS))}
        if roll < 0.95:
            return {"nodeName": "not-a-node"}
        return {}  # no selection mechanism: ignored

    def per_device_target(self) -> Obj:
        roll = self.rng.random()
        if roll < 0.6:
            return {"nodeName": self.rng.choice(self.nodes)["metadata"]["name"]}
        if roll < 0.7:
            return {"allNodes": True}
        if roll < 0.95:
            return {"nodeSelector": _rack_selector(self.rng.choice(RACKS))}
        return {}

    def pool(self, number: int) -> None:
        rng = self.rng
        name = f"pool-{number}"
        kind = rng.choice(("local", "local", "multi", "counters", "counters", "network", "per-device"))
        generation = rng.randint(1, 2)
        if kind == "local":
            self.slice(name, generation, 1, devices=self.devices(name, []), **self.target())
        elif kind == "multi":  # one pool over several slices and nodes, sometimes incomplete/obsolete
            slices = rng.randint(1, 4)
            count = slices + rng.choice((0, 0, 0, 1, -1))
            for i in range(slices):
                gen = generation + (1 if rng.random() < 0.15 else 0)
                self.slice(name, gen, max(count, 1), devices=self.devices(f"{name}-{i}", []), **self.target())
        elif kind == "counters":  # a counter slice and device slices consuming it (MIG-like)
            sets = [f"gpu-{i}" for i in range(rng.randint(1, 3))]
            shared = [{"name": s, "counters": {"mem": {"value": "4"}}} for s in sets]
            if rng.random() < 0.05:
                shared.append(shared[0])  # duplicate counter set name: invalid pool
            device_slices = rng.randint(1, 2)
            count = 1 + device_slices + rng.choice((0, 0, 0, 0, 1))
            owner = (
                self.target()
                if rng.random() < 0.3
                else {"nodeName": rng.choice(self.nodes)["metadata"]["name"]}
            )
            self.slice(name, generation, count, sharedCounters=shared, **owner)
            for i in range(device_slices):
                gen = generation + (1 if rng.random() < 0.1 else 0)
                target = owner if rng.random() < 0.8 else self.target()
                self.slice(name, gen, count, devices=self.devices(f"{name}-{i}", sets), **target)
        elif kind == "network":  # network-attached: selector or all nodes
            spec = (
                {"allNodes": True}
                if rng.random() < 0.4
                else {"nodeSelector": _rack_selector(rng.choice(RACKS))}
            )
            self.slice(name, generation, 1, devices=self.devices(name, []), **spec)
        else:  # per-device node selection
            devices = self.devices(name, [], rng.randint(1, 4))
            for device in devices:
                device.update(self.per_device_target())
            self.slice(name, generation, 1, perDeviceNodeSelection=True, devices=devices)

    def objects(self) -> list[Obj]:
        return [*self.nodes, *self.slices]


def random_cluster(seed: int) -> list[Obj]:
    builder = _Builder(seed)
    for number in range(builder.rng.randint(1, 12)):
        builder.pool(number)
    builder.rng.shuffle(builder.slices)  # cluster order matters for resourceSliceCount ties
    return builder.objects()


# ----------------------------------------------------------------- oracle checks
def _by_pool(slices: list[Slice]) -> dict[PoolID, list[Slice]]:
    by_pool: dict[PoolID, list[Slice]] = {}
    for slice_ in slices:
        by_pool.setdefault(slice_.pool_id, []).append(slice_)
    return by_pool


def assert_matches_oracle(index: DeviceIndex, features: Features) -> None:
    """Every node's pools, rows and invalid flag equal the per-node oracle's."""
    by_pool = _by_pool(index.slices)
    rows = 0
    for position, name in enumerate(index.node_names):
        node = index.nodes[name]
        expected = reference_gather_pools(index.slices, node, features, all_slices_of_pool=by_pool)
        got = list(index.pools[name])
        assert got == expected, name
        assert len(index.pools[name]) == len(expected)
        assert [p.id for p in got] == [p.id for p in expected]  # search order
        assert index.node_has_invalid_pool[position] == any(p.invalid for p in expected)
        block = _node_block((), node, expected, features, index.topology)
        start, stop = index.node_start[position], index.node_start[position + 1]
        assert index.row_device[start:stop] == block.devices, name
        assert index.row_special[start:stop].tolist() == block.special
        assert index.row_tainted[start:stop].tolist() == block.tainted
        rows += len(block.devices)
    assert index.num_rows == rows
    expected_rows: dict[Any, list[int]] = {}
    for row, device in enumerate(index.row_device):
        expected_rows.setdefault(device.id, []).append(row)
    assert len(index.rows_of) == len(expected_rows) and set(index.rows_of) == set(expected_rows)
    for device_id, wanted in expected_rows.items():
        assert index.rows_of[device_id].tolist() == wanted
        assert index.rows_of.get(device_id).tolist() == wanted
    assert index.rows_of.get(("no", "such", "device")) is None
    assert sorted(index.rows_of.rows_for(expected_rows).tolist()) == list(range(index.num_rows))


@pytest.mark.parametrize("features", [GATES_ON, GATES_OFF], ids=["partitionable", "no-partitionable"])
@pytest.mark.parametrize("seed", range(120))
def test_pools_equal_the_per_node_gather(seed: int, features: Features) -> None:
    index = build_index(ClusterState.from_objects(random_cluster(seed)), features)
    assert_matches_oracle(index, features)


@pytest.mark.parametrize("seed", range(60))
def test_one_node_gather_equals_the_oracle(seed: int) -> None:
    """`gather_pools` (the form for nodes the index does not know) also equals the oracle."""
    objects = random_cluster(seed)
    index = build_index(ClusterState.from_objects(objects), GATES_ON)
    by_pool = _by_pool(index.slices)
    for node in [*index.nodes.values(), {"metadata": {"name": "unknown", "labels": {"rack": "a"}}}, None]:
        expected = reference_gather_pools(index.slices, node, GATES_ON, all_slices_of_pool=by_pool)
        assert gather_pools(index.slices, node, GATES_ON, all_slices_of_pool=by_pool) == expected


def _mutate(rng: random.Random, state: ClusterState) -> None:
    """One random change: edit, drop or add a slice, bump a generation, relabel a node."""
    slices = state.list("ResourceSlice")
    roll = rng.random()
    if slices and roll < 0.35:
        raw = copy.deepcopy(rng.choice(slices))
        devices = raw["spec"].get("devices") or []
        if devices:
            devices.pop()
        raw["spec"]["pool"]["generation"] += rng.choice((0, 0, 1))
        state.upsert(raw)
    elif slices and roll < 0.55:
        state.delete("ResourceSlice", rng.choice(slices)["metadata"]["name"])
    elif roll < 0.8:
        builder = _Builder(rng.randrange(10**6))
        builder.nodes = state.list("Node")
        builder.count = 10_000 + rng.randrange(10**6)
        builder.pool(rng.randrange(20))  # may join an existing pool (same name)
        for raw in builder.slices:
            state.upsert(raw)
    else:
        node = copy.deepcopy(rng.choice(state.list("Node")))
        node["metadata"]["labels"]["rack"] = rng.choice(RACKS)
        state.upsert(node)


@pytest.mark.parametrize("seed", range(40))
def test_incremental_rebuilds_equal_a_fresh_build(seed: int) -> None:
    rng = random.Random(seed)
    state = ClusterState.from_objects(random_cluster(seed))
    index = build_index(state, GATES_ON)
    for _ in range(6):
        _mutate(rng, state)
        previous, index = index, build_index(state, GATES_ON, previous=index)
        assert_matches_oracle(index, GATES_ON)
        fresh = build_index(state, GATES_ON)
        assert [d.id for d in index.row_device] == [d.id for d in fresh.row_device]
        assert (index.node_start == fresh.node_start).all()
        _assert_same_catalog(index.catalog, fresh.catalog)
        for name in index.rebuilt:  # coordinates kept from the block before equal a recompute
            block = index.blocks[name]
            assert np.array_equal(block.coords, index.topology.node_coords(block.devices)), name
            links = index.topology.link_matrix(index.nodes[name], [d.name for d in block.devices])
            assert (links is None) == (block.links is None)
            assert links is None or np.array_equal(links, block.links, equal_nan=True)
        # A block is re-used only when its node and the pools giving it devices are the same.
        for name in set(index.node_names) - set(index.rebuilt):
            assert index.blocks[name] is previous.blocks[name]


def _assert_same_catalog(ours: PoolCatalog, fresh: PoolCatalog) -> None:
    """A catalog carried through changes (`PoolCatalog.replacing`, its shared `Replaced` maps and
    markers replaced in place) lists what one built from the same slices lists."""

    def slices(catalog: PoolCatalog) -> dict[object, list[tuple[str, str]]]:
        return {
            pool: [(s.name, s.pool_id.pool) for s in members] for pool, members in catalog.by_pool.items()
        }

    assert slices(ours) == slices(fresh)
    assert ours.facts.keys() == fresh.facts.keys() and len(ours.facts) == len(fresh.facts)
    assert {n: [f.id for f in fs] for n, fs in ours.named.items()} == {
        n: [f.id for f in fs] for n, fs in fresh.named.items()
    }
    assert [f.id for f in ours.selected] == [f.id for f in fresh.selected]
    assert [p.id for p in ours.shared] == [p.id for p in fresh.shared]
    assert ours.shared_keys == fresh.shared_keys
    assert [p.id for p in ours.shared_with_devices] == [p.id for p in fresh.shared_with_devices]
    assert ours.shared_invalid == fresh.shared_invalid
    assert ours.shared_positions() == {id(p): i for i, p in enumerate(ours.shared)}


# ----------------------------------------------------------------- block reuse and linearity
def _a100_node(name: str, gpus: int = 2) -> list[Obj]:
    """A node-local pool: a counter slice and a device slice whose MIG devices consume it."""
    pool = {"name": f"{name}-gpu", "generation": 1, "resourceSliceCount": 2}
    counter_sets = [{"name": f"gpu-{g}", "counters": {"mem": {"value": "8"}}} for g in range(gpus)]
    devices = [
        {
            "name": f"gpu-{g}-mig-{m}",
            "consumesCounters": [{"counterSet": f"gpu-{g}", "counters": {"mem": {"value": "1"}}}],
        }
        for g in range(gpus)
        for m in range(3)
    ]
    driver = "gpu.nvidia.com"
    return [
        _node(name, "a"),
        {
            "kind": "ResourceSlice",
            "metadata": {"name": f"{name}-counters"},
            "spec": {"driver": driver, "nodeName": name, "pool": pool, "sharedCounters": counter_sets},
        },
        {
            "kind": "ResourceSlice",
            "metadata": {"name": f"{name}-devices"},
            "spec": {"driver": driver, "nodeName": name, "pool": pool, "devices": devices},
        },
        {
            "kind": "ResourceSlice",
            "metadata": {"name": f"{name}-nic"},
            "spec": {
                "driver": "nic.example.com",
                "nodeName": name,
                "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "nic-0"}],
            },
        },
    ]


def _fleet(nodes: int) -> ClusterState:
    return ClusterState.from_objects([obj for i in range(nodes) for obj in _a100_node(f"node-{i:03d}")])


@pytest.mark.parametrize("nodes", [3, 12, 48])
def test_pool_builds_are_linear_in_the_pools(nodes: int) -> None:
    """Each pool is built at most twice (as its own node sees it, and as every other node sees
    it: a counter-only marker), whatever the node count; the per-node gather would build
    nodes x counter pools."""
    index = build_index(_fleet(nodes), GATES_ON)
    pools = len(index.catalog.facts)
    assert pools == 2 * nodes
    counter_pools = nodes
    assert index.catalog.builds == 2 * counter_pools + (pools - counter_pools)
    # Every node still sees every other node's counter pool (a counter slice is relevant
    # everywhere), as one shared object.
    markers = [
        p for p in index.pools["node-000"] if p.id.pool != "node-000-gpu" and p.id.driver == "gpu.nvidia.com"
    ]
    assert len(markers) == nodes - 1 and all(not p.slices and p.counter_sets for p in markers)
    other = {p.id: p for p in index.pools["node-001"]}
    assert all(other[p.id] is p for p in markers if p.id.pool != "node-001-gpu")
    assert_matches_oracle(index, GATES_ON)


def test_counter_slice_change_rebuilds_only_its_node() -> None:
    state = _fleet(10)
    first = build_index(state, GATES_ON)
    raw = copy.deepcopy(state.get("ResourceSlice", "node-004-counters"))
    raw["spec"]["sharedCounters"][0]["counters"]["mem"]["value"] = "7"
    state.upsert(raw)
    second = build_index(state, GATES_ON, previous=first)
    assert second.rebuilt == ["node-004"]
    assert second.catalog.reused == len(second.catalog.facts) - 1
    assert second.catalog.builds == 2  # only the changed pool: its own view and the shared marker
    for name in second.node_names:
        if name != "node-004":
            assert second.blocks[name] is first.blocks[name]
    pool = next(p for p in second.pools["node-004"] if p.id.pool == "node-004-gpu")
    assert str(pool.counter_sets["gpu-0"]["mem"]) == "7"
    marker = next(p for p in second.pools["node-007"] if p.id.pool == "node-004-gpu")
    assert str(marker.counter_sets["gpu-0"]["mem"]) == "7"  # other nodes see the new marker
    assert_matches_oracle(second, GATES_ON)


def test_device_slice_change_rebuilds_only_its_node() -> None:
    state = _fleet(10)
    first = build_index(state, GATES_ON)
    raw = copy.deepcopy(state.get("ResourceSlice", "node-002-devices"))
    raw["spec"]["devices"].pop()
    state.upsert(raw)
    second = build_index(state, GATES_ON, previous=first)
    assert second.rebuilt == ["node-002"]
    assert second.num_rows == first.num_rows - 1
    assert_matches_oracle(second, GATES_ON)


def test_an_invalid_counter_pool_elsewhere_is_seen_by_every_node() -> None:
    """Upstream semantics kept: a counter slice is relevant everywhere, so its pool's problem
    reaches every node's list (it makes `All` fail and names the node-scoped error)."""
    objects = [obj for i in range(4) for obj in _a100_node(f"node-{i}")]
    broken = next(o for o in objects if o["metadata"]["name"] == "node-3-devices")
    broken["spec"]["devices"][0]["consumesCounters"][0]["counterSet"] = "nope"
    index = build_index(ClusterState.from_objects(objects), GATES_ON)
    assert index.node_has_invalid_pool.all()
    for name in index.node_names:
        invalid = [p for p in index.pools[name] if p.invalid]
        assert [p.id.pool for p in invalid] == ["node-3-gpu"]
        assert invalid[0].invalid_reason == "counter set nope not found"
    assert_matches_oracle(index, GATES_ON)


def test_catalog_reuses_facts_only_for_the_same_slices() -> None:
    state = _fleet(4)
    index = build_index(state, GATES_ON)
    again = PoolCatalog(index.slices, GATES_ON, index.catalog)
    assert again.reused == len(index.catalog.facts)
    assert all(again.facts[k] is v for k, v in index.catalog.facts.items())
    other_features = PoolCatalog(index.slices, GATES_OFF, index.catalog)
    assert other_features.reused == 0
