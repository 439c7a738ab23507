"""Selector masks across index generations: rows of unchanged nodes are copied, not re-evaluated."""

from __future__ import annotations

import copy
from unittest import mock

import numpy as np

from extender.allocator.features import Features
from extender.cluster.sample import sample_objects
from extender.cluster.state import ClusterState
from extender.index import snapshot
from extender.index.snapshot import build_index

FEATURES = Features.from_gates()


def _touch(state: ClusterState, node: str) -> None:
    raw = next(s for s in state.list("ResourceSlice") if s["spec"].get("nodeName") == node)
    meta = raw["metadata"]
    state.upsert({**raw, "metadata": {**meta, "resourceVersion": meta["resourceVersion"] + "0"}})


def _rename_product(state: ClusterState, node: str, name: str) -> None:
    raw = copy.deepcopy(
        next(
            s
            for s in state.list("ResourceSlice")
            if s["spec"].get("nodeName") == node and s["spec"]["driver"] == "gpu.nvidia.com"
        )
    )
    raw["metadata"]["resourceVersion"] += "1"
    for device in raw["spec"]["devices"]:
        device["attributes"]["productName"] = {"string": name}
    state.upsert(raw)


def _counting_cel() -> tuple[list[object], object]:
    calls: list[object] = []
    real = snapshot.DeviceIndex._evaluate

    def counting(self: snapshot.DeviceIndex, *args: object) -> object:
        calls.append(args)
        return real(self, *args)  # type: ignore[arg-type]

    return calls, mock.patch.object(snapshot.DeviceIndex, "_evaluate", counting)


def test_rebuilt_rows_that_read_what_they_read_before_keep_their_verdicts_without_cel() -> None:
    """A rebuilt node whose devices read the same values (re-published, or a change to what no
    selector reads: a taint) keeps the previous mask itself and runs no CEL; the answer equals a
    fresh build's."""
    state = ClusterState.from_objects(copy.deepcopy(sample_objects()))
    selectors = ('device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA H100")',)
    index = build_index(state, FEATURES)
    mask = index.mask("gpu.nvidia.com", selectors)
    for change in ("same content", "taint"):
        raw = copy.deepcopy(
            next(s for s in state.list("ResourceSlice") if s["spec"].get("nodeName") == "h100-node-02")
        )
        raw["metadata"]["resourceVersion"] += "1"
        if change == "taint":
            raw["spec"]["devices"][0]["taints"] = [{"key": "example.com/broken", "effect": "NoSchedule"}]
        state.upsert(raw)
        index = build_index(state, FEATURES, previous=index)
        calls, patch = _counting_cel()
        with patch:  # type: ignore[attr-defined]
            after = index.mask("gpu.nvidia.com", selectors)
        assert after is mask and calls == [], change
        fresh = build_index(state, FEATURES).mask("gpu.nvidia.com", selectors)
        assert np.array_equal(after.match, fresh.match) and np.array_equal(after.error, fresh.error)


def test_a_one_node_change_evaluates_only_that_nodes_rows_and_equals_a_fresh_mask() -> None:
    state = ClusterState.from_objects(copy.deepcopy(sample_objects()))
    first = build_index(state, FEATURES)
    selectors = ('device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA")',)
    before = first.mask("gpu.nvidia.com", selectors)
    _rename_product(state, "h100-node-02", "NVIDIA H100 SXM5")  # a value the selector reads
    second = build_index(state, FEATURES, previous=first)
    position = second.node_pos["h100-node-02"]
    rows = int(second.node_start[position + 1] - second.node_start[position])
    calls = []
    real = snapshot.DeviceIndex._evaluate

    def counting(self, *args):
        calls.append(args)
        return real(self, *args)

    with mock.patch.object(snapshot.DeviceIndex, "_evaluate", counting):
        after = second.mask("gpu.nvidia.com", selectors)
    # The other nodes' rows were copied; the node's own devices are evaluated once per group
    # of equal product names (selector_groups), so fewer times than it has rows.
    evaluated = [args[1] for args in calls]
    node_devices = {
        second.row_device[r].id for r in range(second.node_start[position], second.node_start[position + 1])
    }
    assert 0 < len(calls) < rows
    assert {device.id for device in evaluated} <= node_devices
    fresh = build_index(state, FEATURES).mask("gpu.nvidia.com", selectors)
    assert np.array_equal(after.match, fresh.match) and np.array_equal(after.error, fresh.error)
    assert after.match.sum() == before.match.sum()  # same devices, new objects for one node


def test_a_changed_device_class_evaluates_everything_again() -> None:
    state = ClusterState.from_objects(copy.deepcopy(sample_objects()))
    first = build_index(state, FEATURES)
    first.mask("gpu.nvidia.com", ())
    raw = copy.deepcopy(state.get("DeviceClass", "gpu.nvidia.com"))
    raw["spec"]["selectors"] = [{"cel": {"expression": 'device.driver == "dra.net"'}}]
    state.upsert(raw)
    second = build_index(state, FEATURES, previous=first)
    after = second.mask("gpu.nvidia.com", ())
    fresh = build_index(state, FEATURES).mask("gpu.nvidia.com", ())
    assert np.array_equal(after.match, fresh.match)
    assert all(second.row_device[r].id.driver == "dra.net" for r in np.flatnonzero(after.match))


def test_a_republished_node_shares_masks_and_columns_and_a_changed_one_patches_a_copy() -> None:
    """A generation whose rebuilt node selects and reads as before keeps the previous mask and
    code column objects (nothing copied); a changed value gives new arrays equal to a fresh
    build's, and the previous generation's arrays stay as they were."""
    state = ClusterState.from_objects(copy.deepcopy(sample_objects()))
    selectors = ('device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA H100")',)
    attribute = "gpu.nvidia.com/productName"
    first = build_index(state, FEATURES)
    mask, codes = first.mask("gpu.nvidia.com", selectors), first.attribute_codes(attribute)
    _touch(state, "h100-node-02")
    second = build_index(state, FEATURES, previous=first)
    assert second.mask("gpu.nvidia.com", selectors) is mask
    assert second.attribute_codes(attribute) is codes
    kept = (mask.match.copy(), mask.error.copy(), codes.copy())

    raw = copy.deepcopy(
        next(s for s in state.list("ResourceSlice") if s["spec"].get("nodeName") == "h100-node-02")
    )
    raw["metadata"]["resourceVersion"] += "1"
    raw["spec"]["devices"][0]["attributes"]["productName"] = {"string": "NVIDIA A100"}
    state.upsert(raw)
    third = build_index(state, FEATURES, previous=second)
    after, after_codes = third.mask("gpu.nvidia.com", selectors), third.attribute_codes(attribute)
    assert after is not mask and after_codes is not codes
    fresh = build_index(state, FEATURES)
    expected = fresh.mask("gpu.nvidia.com", selectors)
    assert np.array_equal(after.match, expected.match) and np.array_equal(after.error, expected.error)
    assert after.match.sum() == mask.match.sum() - 1
    fresh_codes = fresh.attribute_codes(attribute)
    assert np.array_equal(after_codes == after_codes[:, None], fresh_codes == fresh_codes[:, None])
    assert (after_codes != snapshot.UNCOMPUTED).all()  # a whole column: nothing left to compute
    for before, now in zip(kept, (mask.match, mask.error, codes), strict=True):
        assert np.array_equal(before, now)  # readers of the older generations keep theirs


def test_union_sorted_is_the_sorted_union_and_keeps_a_superset_as_it_is() -> None:
    rng = np.random.default_rng(7)
    for _ in range(500):
        rows = np.unique(rng.integers(0, 60, rng.integers(0, 40))).astype(np.int64)
        more = np.unique(rng.integers(0, 60, rng.integers(0, 12))).astype(np.int64)
        union = snapshot.union_sorted(rows, more)
        assert np.array_equal(union, np.union1d(rows, more)) and union.dtype == np.int64
        if np.isin(more, rows).all():
            assert union is rows


def test_same_values_is_exact_about_what_the_code_columns_read() -> None:
    from extender.allocator.model import parse_slice

    def device(attributes: dict[str, object], **extra: object) -> object:
        raw = {
            "metadata": {"name": "s"},
            "spec": {
                "driver": "gpu.nvidia.com",
                "nodeName": "n",
                "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "d", "attributes": attributes, **extra}],
            },
        }
        return parse_slice(raw).devices[0]

    one, model = {"int": 1}, {"string": "H100"}
    base = device({"index": one, "model": model})
    assert snapshot._same_values(base, device({"index": one, "model": model}))  # the same objects
    assert not snapshot._same_values(
        base, device({"index": {"int": 1.0}, "model": model})
    )  # equal, not the same
    assert not snapshot._same_values(base, device({"index": {"int": 2}, "model": model}))
    assert not snapshot._same_values(base, device({"model": model, "index": one}))  # another order
    assert not snapshot._same_values(base, device({"index": one}))
    assert not snapshot._same_values(
        base, device({"index": one, "model": model}, capacity={"m": {"value": "1"}})
    )
