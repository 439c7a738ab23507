"""`TopologyModel.node_coords`: partitions take their parent GPU's coordinates where they have
none, as the device-by-device completion in listing order does (the array step equals it)."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np

from extender.allocator.features import Features
from extender.allocator.model import Device, parse_slice
from extender.cluster.state import ClusterState
from extender.index.snapshot import build_index
from extender.index.topology import NO_COORD, NODE_LEVEL, TopologyModel
from loadtests.fleet import generate_mixed_cluster


def _one_by_one(model: TopologyModel, devices: Sequence[Device]) -> np.ndarray:
    """The completion row by row in listing order (the reference)."""
    coords = np.array([model.coords(d) for d in devices], dtype=np.int32).reshape(len(devices), NODE_LEVEL)
    owners: dict[str, int] = {}
    for row, device in enumerate(devices):
        own = model.own_id(device)
        if own is not None:
            owners.setdefault(own, row)
    for row, device in enumerate(devices):
        parent = model.parent_of(device)
        source = owners.get(parent) if parent is not None else None
        if source is None or source == row:
            continue
        missing = coords[row] == NO_COORD
        coords[row, missing] = coords[source, missing]
    return coords


def test_node_coords_equal_the_row_by_row_completion_on_the_mixed_fleet() -> None:
    objects, _ = generate_mixed_cluster(nodes=40, seed=3, pods=0)
    index = build_index(ClusterState.from_objects(objects), Features.from_gates())
    for name in index.node_names:
        devices = list(index.blocks[name].devices)
        assert np.array_equal(index.topology.node_coords(devices), _one_by_one(index.topology, devices)), name


def _device(name: str, **attributes: object) -> dict[str, object]:
    return {
        "name": name,
        "attributes": {key.replace("_", "/", 1): value for key, value in attributes.items()},
    }


def test_partitions_take_their_gpus_coordinates_and_chains_complete_in_listing_order() -> None:
    uuid = "gpu.nvidia.com_uuid"
    parent = "gpu.nvidia.com_parentUUID"
    root = "resource.kubernetes.io_pcieRoot"
    numa = "resource.kubernetes.io_numaNode"
    devices = [
        _device("gpu-0", **{uuid: {"string": "G0"}, root: {"string": "pci0"}, numa: {"int": 0}}),
        _device("gpu-1", **{uuid: {"string": "G1"}, root: {"string": "pci1"}}),
        _device("mig-0", **{parent: {"string": "G0"}}),  # takes pci0 and NUMA 0
        _device("mig-1", **{parent: {"string": "G1"}, numa: {"int": 1}}),  # keeps its own NUMA
        _device("mig-2", **{parent: {"string": "G9"}}),  # its parent is not on the node
        _device("nested", **{parent: {"string": "M3"}}),  # listed before its parent...
        _device("mig-3", **{uuid: {"string": "M3"}, parent: {"string": "G1"}}),  # ...completed after it
    ]
    raw = {
        "metadata": {"name": "s"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "n",
            "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }
    listed = list(parse_slice(raw).devices)
    model = TopologyModel()
    for order in (listed, listed[::-1], listed[:5]):
        assert np.array_equal(model.node_coords(order), _one_by_one(model, order))
    coords = model.node_coords(listed)  # levels: nvlink, pcie, numa, socket
    assert (coords[2][1:3] == coords[0][1:3]).all()  # mig-0: its GPU's root complex and NUMA node
    assert coords[3][1] == coords[1][1] and coords[3][2] != NO_COORD and coords[1][2] == NO_COORD
    assert (coords[4][1:3] == NO_COORD).all()  # mig-2: no parent on the node
    assert coords[5][1] == NO_COORD  # nested: from mig-3 as listed before mig-3 was completed


def test_a_rebuilt_block_keeps_coordinates_only_while_its_devices_read_the_same() -> None:
    objects, _ = generate_mixed_cluster(nodes=12, seed=5, pods=0)
    state = ClusterState.from_objects(objects)
    index = build_index(state, Features.from_gates())
    raw = next(
        s
        for s in state.list("ResourceSlice")
        if any(
            "resource.kubernetes.io/pcieRoot" in (d.get("attributes") or {})
            for d in s["spec"].get("devices") or []
        )
    )
    node = raw["spec"]["nodeName"]
    before = index.blocks[node]
    # Re-published as it is: the block is rebuilt (a new slice object) and keeps its coordinates.
    state.upsert({**raw, "metadata": {**raw["metadata"], "resourceVersion": "r1"}})
    index = build_index(state, Features.from_gates(), previous=index)
    kept = index.blocks[node]
    assert kept is not before and kept.coords is before.coords
    # A device moved to another root complex: the coordinates are worked out again.
    moved = copy.deepcopy(raw)
    moved["metadata"]["resourceVersion"] = "r2"
    device = next(d for d in moved["spec"]["devices"] if "resource.kubernetes.io/pcieRoot" in d["attributes"])
    device["attributes"]["resource.kubernetes.io/pcieRoot"] = {"string": "pci-elsewhere"}
    state.upsert(moved)
    index = build_index(state, Features.from_gates(), previous=index)
    block = index.blocks[node]
    assert block.coords is not kept.coords
    assert np.array_equal(block.coords, index.topology.node_coords(block.devices))
    assert not np.array_equal(block.coords, kept.coords)
