"""Stored objects share their repeated parts (extender.cluster.compact): ResourceSlices' device
values and counters, pods' and claims' equal fields, key tables."""

from __future__ import annotations

import copy
import platform
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from extender.allocator.model import CapacitySpec, parse_slice
from extender.cluster import compact
from extender.cluster.compact import Compactor
from extender.cluster.loading import load_state_paths
from extender.cluster.state import ClusterState
from extender.pods import parse_pod
from extender.quantity import Quantity


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
        assert all(len(values) <= 8 for values in compactor._values.values())


def test_a_republished_slice_keeps_the_stored_devices_equal_values(monkeypatch: Any) -> None:
    """A slice replacing a stored one holds the stored device's very objects where its values
    are equal (the device index re-reads a republished device only where they are not), even
    after the tables were emptied; a changed value, and `{"int": True}` for `{"int": 1}`, are not."""
    monkeypatch.setattr(compact, "VALUE_LIMIT", 4)  # the tables empty all the time
    state = ClusterState()
    state.upsert(_slice("n1", "GPU-1"))
    stored = _device(state.get("ResourceSlice", "n1"))
    for i in range(20):  # other slices push the first one's values out of the tables
        state.upsert(_slice(f"other-{i}", f"GPU-other-{i}"))
    again = _slice("n1", "GPU-1", memory="40Gi")
    attributes = again["spec"]["devices"][0]["attributes"]
    attributes["index"] = {"int": 3}  # changed values
    attributes["mig"] = {"bool": False}
    content = copy.deepcopy(again)
    state.upsert(again)
    new = _device(state.get("ResourceSlice", "n1"))
    assert state.get("ResourceSlice", "n1") == content
    for name in ("productName", "uuid", "driverVersion"):
        assert new["attributes"][name] is stored["attributes"][name], name
    for name in ("index", "mig"):
        assert new["attributes"][name] is not stored["attributes"][name], name
    assert new["capacity"] is not stored["capacity"] and new["capacity"] == {"memory": {"value": "40Gi"}}
    twin = copy.deepcopy(content)
    state.upsert(twin)
    assert _device(state.get("ResourceSlice", "n1"))["capacity"] is new["capacity"]
    assert _device(state.get("ResourceSlice", "n1"))["consumesCounters"] is new["consumesCounters"]
    true_index = _slice("n2", "GPU-2")
    true_index["spec"]["devices"][0]["attributes"]["index"] = {"int": 1}
    state.upsert(true_index)
    flipped = copy.deepcopy(true_index)
    flipped["spec"]["devices"][0]["attributes"]["index"] = {"int": True}
    state.upsert(flipped)
    assert _device(state.get("ResourceSlice", "n2"))["attributes"]["index"] == {"int": True}
    assert _device(state.get("ResourceSlice", "n2"))["attributes"]["index"]["int"] is True


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


_CPYTHON = platform.python_implementation() == "CPython"


def test_keyshared_maps_are_equal_plain_dicts_in_the_same_order() -> None:
    compactor = Compactor()
    source = {f"attribute-{i}": {"string": str(i)} for i in range(13)}
    made = [compactor.keyshared(dict(source)) for _ in range(50)]
    assert all(type(m) is dict and m == source and list(m) == list(source) for m in made)
    assert made[0] is not made[1]
    assert orjson.dumps(made[-1]) == orjson.dumps(source)
    copied = copy.deepcopy(made[-1])
    copied["more"] = 1  # a copy is an ordinary dict: writable, and the maps made stay as they were
    assert made[-1] == source


@pytest.mark.skipif(not _CPYTHON, reason="key-sharing tables are a CPython layout")
def test_keyshared_maps_take_less_memory_than_plain_ones() -> None:
    compactor = Compactor()
    source = {f"attribute-{i}": {"string": str(i)} for i in range(13)}
    made = [compactor.keyshared(dict(source)) for _ in range(50)]
    assert sys.getsizeof(made[-1]) < sys.getsizeof(dict(source)) / 2
    values = [compactor.keyshared({"string": f"GPU-{i}"}) for i in range(50)]
    assert sys.getsizeof(values[-1]) < sys.getsizeof({"string": "GPU-x"}) / 2


def test_maps_that_cannot_share_keys_are_copied_plain(monkeypatch: Any) -> None:
    compactor = Compactor()
    wide = {f"k{i}": i for i in range(40)}  # more keys than CPython shares
    odd = {1: "a", "b": 2}  # not all string keys
    for source in (wide, odd):
        made = compactor.keyshared(source)
        assert made == source and made is not source and list(made) == list(source)
    monkeypatch.setattr(compact, "CLASS_LIMIT", 2)
    bounded = Compactor()
    for i in range(5):
        assert bounded.keyshared({f"key-{i}": i}) == {f"key-{i}": i}
    assert len(bounded._classes) == 2


def test_counter_sets_share_their_counters() -> None:
    state = ClusterState()
    a, b = _counter_slice("n1"), _counter_slice("n2")
    before = copy.deepcopy([a, b])
    state.upsert(a)
    state.upsert(b)
    assert [a, b] == before
    assert a["spec"]["sharedCounters"][0]["counters"] is b["spec"]["sharedCounters"][1]["counters"]
    parsed_a, parsed_b = parse_slice(a), parse_slice(b)
    assert parsed_a.shared_counters[0][1] is parsed_b.shared_counters[1][1]  # one parse
    assert str(parsed_a.shared_counters[0][1]["memory"]) == "80Gi"


def _counter_slice(node: str) -> dict[str, Any]:
    counters = {"memory": {"value": "80Gi"}, "multiprocessors": {"value": "132"}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-counters"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 2},
            "sharedCounters": [{"name": f"gpu-{i}", "counters": copy.deepcopy(counters)} for i in range(2)],
        },
    }


def _pod(name: str, claim: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "labels": {"app": "train"}},
        "spec": {
            "schedulerName": "dra-extender",
            "containers": [
                {"name": "main", "image": "trainer:1", "resources": {"claims": [{"name": "gpus"}]}}
            ],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "resourceClaims": [{"name": "gpus", "resourceClaimName": claim}],
        },
        "status": {"phase": "Pending"},
    }


def _claim(name: str, node: str, device: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "finalizers": ["f"]},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu"}}]}},
        "status": {
            "allocation": {
                "devices": {"results": [{"request": "gpus", "driver": "d", "pool": node, "device": device}]},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                    ]
                },
            }
        },
    }


def test_pods_and_claims_share_equal_parts_and_keep_their_own() -> None:
    state = ClusterState()
    objects = [
        _pod("a", "claim-a"),
        _pod("b", "claim-b"),
        _claim("claim-a", "n1", "gpu-0"),
        _claim("claim-b", "n1", "gpu-1"),
    ]
    before = copy.deepcopy(objects)
    for obj in objects:
        state.upsert(obj)
    assert state.list("Pod") + state.list("ResourceClaim") == before
    assert [type(o["metadata"]) for o in objects] == [dict] * 4
    pod_a, pod_b, claim_a, claim_b = objects
    for field in ("containers", "tolerations"):
        assert pod_a["spec"][field] is pod_b["spec"][field], field
    assert pod_a["metadata"]["labels"] is pod_b["metadata"]["labels"]
    assert pod_a["spec"]["schedulerName"] is pod_b["spec"]["schedulerName"]
    assert pod_a["spec"]["resourceClaims"] is not pod_b["spec"]["resourceClaims"]
    assert pod_a["spec"]["resourceClaims"] == [{"name": "gpus", "resourceClaimName": "claim-a"}]
    allocation_a, allocation_b = claim_a["status"]["allocation"], claim_b["status"]["allocation"]
    assert allocation_a["nodeSelector"] is allocation_b["nodeSelector"]  # one level down
    assert allocation_a["devices"] is not allocation_b["devices"]
    assert allocation_b["devices"]["results"][0]["device"] == "gpu-1"
    assert claim_a["spec"] is not claim_b["spec"] and claim_a["spec"]["devices"] is claim_b["spec"]["devices"]


def test_loaded_items_are_compacted_once(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    items = [_pod("a", "claim-a"), _pod("b", "claim-b")]
    for item in items:
        del item["kind"]  # a PodList's items may leave it out
    path.write_bytes(orjson.dumps({"apiVersion": "v1", "kind": "PodList", "items": items}))
    loaded = load_state_paths([path])
    assert loaded[0]["spec"]["containers"] is loaded[1]["spec"]["containers"]
    state = ClusterState.from_objects(loaded)
    assert [p["metadata"]["name"] for p in state.list("Pod")] == ["a", "b"]
    assert state.get("Pod", "b", "ml") == {**_pod("b", "claim-b"), "apiVersion": "v1"}


async def test_binding_one_pod_leaves_the_pods_it_shares_parts_with_unchanged() -> None:
    """The in-memory binder writes copies: a stored pod or claim sharing parts with the bound
    one keeps its content, and so do the objects the bind replaced and the pod as filter
    received it (the binder copies only what it writes; tests/scenarios binds the same sample
    pods end to end)."""
    from extender.allocator.features import Features
    from extender.binder import InMemoryBinder
    from extender.cluster.sample import sample_objects
    from extender.core.assumed import AssumeCache
    from extender.core.placement import Placement
    from extender.explaining import load_pods

    state = ClusterState.from_objects(copy.deepcopy(sample_objects()))
    pods = load_pods(Path(__file__).resolve().parents[1] / "data" / "pipeline_pods.yaml")
    template = next(p for p in pods if p["metadata"]["name"] == "gpu-training")
    twin = copy.deepcopy(template)  # the same pod under another name (its claim is not its own)
    twin["metadata"].update(name="twin", uid="twin-uid")
    for pod in (template, twin):
        state.upsert(pod)
    assert template["spec"]["containers"] is twin["spec"]["containers"]
    namespace, name, uid = (template["metadata"][key] for key in ("namespace", "name", "uid"))
    untouched = copy.deepcopy(state.get("Pod", "twin", namespace))
    placement = Placement(state, features=Features.from_gates(), assumed=AssumeCache())
    binder = InMemoryBinder(state, placement)
    nodes = [n["metadata"]["name"] for n in state.list("Node")]
    received = copy.deepcopy(template)
    verdict = placement.filter(parse_pod(received), nodes)
    assert verdict.passed, verdict
    stored = [(obj, copy.deepcopy(obj)) for kind in ("Pod", "ResourceClaim") for obj in state.list(kind)]
    outcome = await binder.bind(namespace=namespace, name=name, uid=uid, node=verdict.passed[0])
    assert outcome.error == ""
    assert state.get("Pod", name, namespace)["spec"]["nodeName"] == verdict.passed[0]
    assert state.get("Pod", "twin", namespace) == untouched
    written = [c for c in state.list("ResourceClaim") if c.get("status", {}).get("reservedFor")]
    assert written and all(c["metadata"]["finalizers"] for c in written)
    for obj, before in stored:  # replaced or not, no object that was stored was written into
        assert obj == before, obj["metadata"]["name"]
    assert received == template


def test_no_value_is_shared_twice_within_one_object() -> None:
    """Equal parts of one object stay separate objects: a writer deep-copies a claim and appends
    a finalizer, which must not land in an equal (empty) `reservedFor` as well."""
    state = ClusterState()
    claims = [_claim(f"c{i}", "n1", "gpu-0") for i in range(2)]
    for claim in claims:
        claim["metadata"]["finalizers"] = []
        claim["status"]["reservedFor"] = []
        state.upsert(claim)
    first, second = claims
    assert first["metadata"]["finalizers"] is second["metadata"]["finalizers"]  # between objects
    assert first["metadata"]["finalizers"] is not first["status"]["reservedFor"]  # not within one
    updated = copy.deepcopy(first)
    updated["metadata"]["finalizers"].append("f")
    assert updated["status"]["reservedFor"] == []


def test_a_value_shared_as_capacity_and_as_counters_parses_as_each() -> None:
    """`{"memory": {"value": "80Gi"}}` is one shared object when a device states it as capacity
    and a counter set as counters: each use gets its own parse (a capacity spec, a quantity)."""
    state = ClusterState()
    devices, counters = _slice("n1", "GPU-1"), _counter_slice("n1")
    counters["spec"]["sharedCounters"][0]["counters"] = {"memory": {"value": "80Gi"}}
    state.upsert(devices)
    state.upsert(counters)
    assert _device(devices)["capacity"] is counters["spec"]["sharedCounters"][0]["counters"]
    (device,) = parse_slice(devices).devices
    counter_set = parse_slice(counters).shared_counters[0][1]
    assert isinstance(device.capacity["memory"], CapacitySpec)
    assert str(device.capacity["memory"].value) == "80Gi"
    assert isinstance(counter_set["memory"], Quantity) and str(counter_set["memory"]) == "80Gi"
