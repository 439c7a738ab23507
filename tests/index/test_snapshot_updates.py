"""Device index rebuilds: what a change to one slice re-does, and what it keeps."""

from __future__ import annotations

import copy

from extender.allocator.features import Features
from extender.cluster.sample import sample_objects
from extender.cluster.state import ClusterState
from extender.index.snapshot import build_index

FEATURES = Features.from_gates()


def _state() -> ClusterState:
    return ClusterState.from_objects(copy.deepcopy(sample_objects()))


def test_changing_one_slice_rebuilds_only_its_node() -> None:
    """Other nodes keep their block and device objects (and so their CEL results)."""
    state = _state()
    first = build_index(state, FEATURES)
    tpu_slice = next(s for s in state.list("ResourceSlice") if s["spec"]["driver"] == "tpu.google.com")
    changed = copy.deepcopy(tpu_slice)
    changed["spec"]["devices"] = changed["spec"]["devices"][:2]
    state.upsert(changed)
    second = build_index(state, FEATURES, previous=first)
    node = changed["spec"]["nodeName"]
    assert second.generation != first.generation
    assert second.blocks[node] is not first.blocks[node]
    assert len(second.blocks[node].devices) == 2
    unchanged = [name for name in first.node_names if name != node]
    assert all(second.blocks[name] is first.blocks[name] for name in unchanged)


def test_rows_follow_the_change() -> None:
    """Removing a node's slice removes its rows; other rows are still indexed by device id."""
    state = _state()
    first = build_index(state, FEATURES)
    fpga = next(s for s in state.list("ResourceSlice") if s["spec"]["driver"] == "fpga.intel.com")
    state.delete("ResourceSlice", fpga["metadata"]["name"])
    second = build_index(state, FEATURES, previous=first)
    assert second.num_rows == first.num_rows - len(fpga["spec"]["devices"])
    assert not any(d.id.driver == "fpga.intel.com" for d in second.row_device)
    for device_id, rows in second.rows_of.items():
        assert all(second.row_device[row].id == device_id for row in rows)
