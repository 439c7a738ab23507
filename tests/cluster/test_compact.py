"""Stored ResourceSlices share their repeated device values (extender.cluster.compact)."""

from __future__ import annotations

import copy
from typing import Any

from extender.allocator.model import parse_slice
from extender.cluster import compact
from extender.cluster.compact import Compactor
from extender.cluster.state import ClusterState


def _slice(name: str, uuid: str, *, memory: str = "80Gi") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": name,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "gpu-0",
                    "attributes": {
                        "productName": {"string": "H100"},
                        "uuid": {"string": uuid},
                        "index": {"int": 0},
                        "mig": {"bool": True},
                        "driverVersion": {"version": "570.1.0"},
                    },
                    "capacity": {"memory": {"value": memory}},
                    "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": memory}}}],
                }
            ],
        },
    }


def _device(obj: dict[str, Any]) -> dict[str, Any]:
    device: dict[str, Any] = obj["spec"]["devices"][0]
    return device


def test_equal_values_are_one_object_and_objects_stay_equal() -> None:
    state = ClusterState()
    a, b = _slice("n1", "GPU-1"), _slice("n2", "GPU-2")
    before = copy.deepcopy([a, b])
    state.upsert(a)
    state.upsert(b)
    stored = state.list("ResourceSlice")
    assert stored == before  # content unchanged, objects stored as given
    assert stored[0] is a and stored[1] is b
    da, db = _device(a), _device(b)
    for name in ("productName", "index", "mig", "driverVersion"):
        assert da["attributes"][name] is db["attributes"][name], name
    assert da["attributes"]["uuid"] is not db["attributes"]["uuid"]
    assert da["capacity"] is db["capacity"]
    assert da["consumesCounters"] is db["consumesCounters"]


def test_different_values_and_types_are_not_merged() -> None:
    compactor = Compactor()
    a, b, c = _slice("n1", "GPU-1"), _slice("n2", "GPU-2", memory="40Gi"), _slice("n3", "GPU-3")
    _device(c)["attributes"]["index"] = {"int": True}  # equal to {"int": 1} in Python, not in JSON
    _device(a)["attributes"]["index"] = {"int": 1}
    for obj in (a, b, c):
        compactor.compact_slice(obj)
    assert _device(a)["capacity"] is not _device(b)["capacity"]
    assert _device(b)["capacity"] == {"memory": {"value": "40Gi"}}
    assert _device(a)["attributes"]["index"] is not _device(c)["attributes"]["index"]
    assert type(_device(c)["attributes"]["index"]["int"]) is bool


def test_relist_compacts_and_odd_shapes_are_left_alone() -> None:
    state = ClusterState()
    odd = _slice("n3", "GPU-3")
    _device(odd)["attributes"]["list"] = {"strings": ["a", "b"]}
    _device(odd)["capacity"] = {"memory": {"value": object()}}  # not JSON: kept as it is
    kept_capacity = _device(odd)["capacity"]
    objects = [_slice("n1", "GPU-1"), _slice("n2", "GPU-2"), odd, {"kind": "ResourceSlice", "spec": None}]
    state.replace_kind("ResourceSlice", objects)
    assert _device(objects[0])["capacity"] is _device(objects[1])["capacity"]
    assert _device(odd)["capacity"] is kept_capacity
    assert _device(odd)["attributes"]["list"] == {"strings": ["a", "b"]}


def test_tables_are_bounded(monkeypatch: Any) -> None:
    monkeypatch.setattr(compact, "VALUE_LIMIT", 8)
    compactor = Compactor()
    for i in range(50):
        compactor.compact_slice(_slice(f"n{i}", f"GPU-{i}"))
        assert len(compactor._values) <= 8


def test_devices_share_the_parse_of_a_shared_value() -> None:
    state = ClusterState()
    a, b = _slice("n1", "GPU-1"), _slice("n2", "GPU-2")
    state.upsert(a)
    state.upsert(b)
    (da,), (db,) = parse_slice(a).devices, parse_slice(b).devices
    assert da.attributes is _device(a)["attributes"]  # the stored map, not a copy
    assert da.capacity is db.capacity
    assert da.consumes_counters is db.consumes_counters
    assert str(da.capacity["memory"].value) == "80Gi"
    assert da.consumes_counters[0][0] == "gpu-0"
    assert str(da.consumes_counters[0][1]["memory"]) == "80Gi"


def test_the_state_skips_slices_the_loader_compacted() -> None:
    compactor = Compactor()
    loaded = _slice("n1", "GPU-1")
    compactor.compact_loaded(loaded)
    attributes = _device(loaded)["attributes"]
    compactor.compact_once(loaded)  # done by the loader: not walked again
    assert _device(loaded)["attributes"] is attributes
    compactor.compact_once(loaded)  # remembered once only: a later store compacts again
    assert _device(loaded)["attributes"] is not attributes
    assert _device(loaded)["attributes"] == attributes
