"""Fuzzing the state edge: wrong types and out-of-range values in every field of every kind.

A small, rich cluster (every kind the extender reads, most optional fields set) is mutated by
hypothesis: one to three fields anywhere in one object get a wrong-typed or out-of-range value,
are deleted, or get a junk list entry. Properties:
- validation and file loading either accept the state or refuse it with `InvalidObject` /
  `StateLoadError` (file, document, field) — never another exception;
- the kube source turns any such object into an upsert or a refusal, never an exception;
- on an accepted state (loaded, or, for claims and pods, injected without validation to test
  defence in depth), /filter over HTTP answers 200 for a good pod with every node classified
  and no error, and the good pod still passes its node when the mutated object cannot concern it.

Seeded (derandomized) and bounded for CI. A longer run, e.g. before a release:
    FUZZ_EXAMPLES=5000 python -m pytest tests/scenarios/test_state_fuzz.py -q -p no:cacheprovider
"""

from __future__ import annotations

import asyncio
import copy
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, assume, given
from hypothesis import strategies as st

from extender.allocator.features import Features
from extender.binder import InMemoryBinder
from extender.cluster.loading import load_state_paths
from extender.cluster.state import ClusterState
from extender.core.assumed import AssumeCache
from extender.core.placement import Placement
from extender.errors import StateLoadError
from extender.kube import watch as kube
from extender.objects import Obj
from extender.pods import parse_pod
from extender.server import make_app
from extender.settings import Settings
from extender.validation import InvalidObject, problems, validate
from tests.conftest import JSON_HEADERS
from tests.fuzzing import fuzz_settings

FUZZ = fuzz_settings("FUZZ_EXAMPLES", 120, HealthCheck.function_scoped_fixture)
V1 = "resource.k8s.io/v1"
GPU = "gpu.example.com"
NODES = ["node-1", "node-2"]


def _cluster() -> list[Obj]:
    """Every kind, most fields. `good-pod` (claim `good`) fits node-1 only."""
    gpu_device = {
        "name": "gpu-0",
        "attributes": {
            "model": {"string": "h100"},
            "index": {"int": 0},
            "healthy": {"bool": True},
            "driverVersion": {"version": "1.2.3"},
            "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
        },
        "capacity": {"memory": {"value": "80Gi"}},
        "taints": [{"key": "example.com/maintenance", "value": "soon", "effect": "None"}],
    }
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default", "labels": {"team": "ml"}}},
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1", "labels": {"zone": "a"}},
         "spec": {"unschedulable": False}, "status": {"capacity": {"cpu": "8"}}},
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-2", "labels": {"zone": "b"}}},
        {"apiVersion": V1, "kind": "ResourceSlice", "metadata": {"name": "node-1-gpus"},
         "spec": {"driver": GPU, "nodeName": "node-1",
                  "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 1},
                  "devices": [gpu_device, {**copy.deepcopy(gpu_device), "name": "gpu-1", "taints": []}]}},
        {"apiVersion": V1, "kind": "ResourceSlice", "metadata": {"name": "node-2-shared"},
         "spec": {"driver": "nic.example.com",
                  "nodeSelector": {"nodeSelectorTerms": [
                      {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}],
                       "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-2"]}]}]},
                  "pool": {"name": "zone-b", "generation": 2, "resourceSliceCount": 1},
                  "devices": [{"name": "nic-0", "allowMultipleAllocations": True,
                               "attributes": {"speed": {"int": 100}},
                               "capacity": {"bandwidth": {"value": "100G", "requestPolicy": {
                                   "default": "10G", "validRange": {"min": "1G", "step": "1G"}}}},
                               "bindingConditions": ["ready"], "bindingFailureConditions": ["failed"],
                               "bindsToNode": True}]}},
        {"apiVersion": V1, "kind": "ResourceSlice", "metadata": {"name": "parts-counters"},
         "spec": {"driver": "part.example.com", "nodeName": "node-2",
                  "pool": {"name": "parts", "generation": 1, "resourceSliceCount": 2},
                  "sharedCounters": [{"name": "mem", "counters": {"memory": {"value": "40Gi"}}}]}},
        {"apiVersion": V1, "kind": "ResourceSlice", "metadata": {"name": "parts-devices"},
         "spec": {"driver": "part.example.com", "perDeviceNodeSelection": True,
                  "pool": {"name": "parts", "generation": 1, "resourceSliceCount": 2},
                  "devices": [{"name": "part-0", "nodeName": "node-2",
                               "consumesCounters": [{"counterSet": "mem",
                                                     "counters": {"memory": {"value": "20Gi"}}}]}]}},
        {"apiVersion": V1, "kind": "DeviceClass", "metadata": {"name": GPU},
         "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{GPU}"'}}],
                  "config": [{"opaque": {"driver": GPU, "parameters": {"mode": "fast"}}}]}},
        {"apiVersion": V1, "kind": "ResourceClaim",
         "metadata": {"name": "good", "namespace": "default", "uid": "uid-good"},
         "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
             "deviceClassName": GPU, "count": 1,
             "selectors": [{"cel": {"expression": 'device.attributes["gpu.example.com"].model == "h100"'}}],
             "tolerations": [{"key": "example.com/maintenance", "operator": "Exists"}]}}]}}},
        {"apiVersion": V1, "kind": "ResourceClaim",
         "metadata": {"name": "other", "namespace": "default", "uid": "uid-other",
                      "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "other-pod",
                                           "uid": "uid-other-pod", "controller": True}]},
         "spec": {"devices": {
             "requests": [{"name": "nic", "firstAvailable": [
                 {"name": "fast", "deviceClassName": "nic.example.com", "allocationMode": "All"},
                 {"name": "any", "deviceClassName": "nic.example.com", "count": 1,
                  "capacity": {"requests": {"bandwidth": "10G"}}}]}],
             "constraints": [{"requests": ["nic"], "matchAttribute": "nic.example.com/speed"}],
             "config": [{"requests": ["nic"], "opaque": {"driver": "nic.example.com", "parameters": {}}}]}},
         "status": {"allocation": {
             "devices": {"results": [{"request": "nic/any", "driver": "nic.example.com", "pool": "zone-b",
                                      "device": "nic-0", "shareID": "6f0c", "consumedCapacity": {
                                          "bandwidth": "10G"}}],
                         "config": [{"source": "FromClaim", "requests": ["nic"],
                                     "opaque": {"driver": "nic.example.com", "parameters": {}}}]},
             "nodeSelector": {"nodeSelectorTerms": [
                 {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-2"]}]}]}},
             "reservedFor": [{"resource": "pods", "name": "other-pod", "uid": "uid-other-pod"}]}},
        {"apiVersion": V1, "kind": "ResourceClaimTemplate",
         "metadata": {"name": "tmpl", "namespace": "default"},
         "spec": {"metadata": {"labels": {"a": "b"}}, "spec": {"devices": {"requests": [
             {"name": "gpu",
              "exactly": {"deviceClassName": GPU, "allocationMode": "All", "adminAccess": False}}]}}}},
        {"apiVersion": V1, "kind": "DeviceTaintRule", "metadata": {"name": "drain-parts"},
         "spec": {"deviceSelector": {"driver": "part.example.com", "pool": "parts", "device": "part-0"},
                  "taint": {"key": "example.com/drain", "effect": "NoSchedule",
                            "timeAdded": "2025-01-01T00:00:00Z"}}},
        _good_pod(),
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "other-pod", "namespace": "default", "uid": "uid-other-pod"},
         "spec": {"nodeName": "node-2", "containers": [{"name": "c", "resources": {"claims": [
             {"name": "nic", "request": "nic"}]}}],
                  "initContainers": [{"name": "init"}],
                  "resourceClaims": [{"name": "nic", "resourceClaimTemplateName": "tmpl"}]},
         "status": {"resourceClaimStatuses": [{"name": "nic", "resourceClaimName": "other"}]}},
    ]  # fmt: skip


def _good_pod() -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "good-pod", "namespace": "default", "uid": "uid-good-pod"},
        "spec": {
            "containers": [{"name": "main", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "good"}],
        },
    }


#: Mutating these cannot change where good-pod fits (none of them holds or selects its devices).
UNRELATED = {("Pod", "other-pod"), ("ResourceClaimTemplate", "tmpl"), ("Node", "node-2")}

WRONG_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 129, 2**63, 1.5, float("inf")]),
    st.text(max_size=12),
    st.sampled_from(
        ["", "x" * 300, "-1", "1Gi", "NotAQuantity", "All", "None", "UPPER_case", "a/b/c", "1.2"]
    ),
    st.lists(st.integers(max_value=5), max_size=3),
    st.just([1, 2]),
    st.dictionaries(st.sampled_from(["a", "name", "value", "key"]), st.integers(max_value=3), max_size=2),
    st.just({"key": "x", "effect": "NoSchedule"}),
)

#: What a JSON request body can carry (no inf, integers within int64: orjson's range).
JSON_WRONG_VALUES = WRONG_VALUES.filter(
    lambda v: (
        not (isinstance(v, float) and not math.isfinite(v))
        and not (isinstance(v, int) and not -(2**63) <= v < 2**63)
    )
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path to a field or list entry below `value` (not the root)."""
    if isinstance(value, dict):
        for key, child in value.items():
            yield (*prefix, key)
            yield from _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield (*prefix, i)
            yield from _paths(child, (*prefix, i))


def _mutate(obj: Obj, path: tuple[Any, ...], action: str, value: Any) -> None:
    value = copy.deepcopy(value)  # st.just() hands out one object: never share it between places
    parent: Any = obj
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if action == "delete" and isinstance(parent, dict):
        del parent[last]
    elif action == "append" and isinstance(parent[last], list):
        parent[last].append(value)
    else:
        parent[last] = value


@st.composite
def mutated_clusters(draw: st.DrawFn, kinds: tuple[str, ...] = ()) -> tuple[list[Obj], int]:
    """The cluster with one object (of `kinds`, default any) mutated in 1-3 places.

    Returns (objects, index of the mutant).
    """
    objects = _cluster()
    index = draw(st.sampled_from([i for i, o in enumerate(objects) if not kinds or o["kind"] in kinds]))
    target = objects[index]
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = [p for p in _paths(target) if p[0] != "kind"]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        _mutate(
            target,
            path,
            draw(st.sampled_from(["replace", "replace", "delete", "append"])),
            draw(WRONG_VALUES),
        )
    return objects, index


def test_the_base_cluster_is_valid_and_good_pod_fits_node_1():
    objects = _cluster()
    assert [(o["kind"], problems(o)) for o in objects if problems(o)] == []
    verdict = _placement(objects).filter(parse_pod(_good_pod()), NODES)
    assert verdict.passed == ["node-1"] and not verdict.error


def _placement(objects: list[Obj]) -> Placement:
    return Placement(
        ClusterState.from_objects(objects), features=Features.from_gates(), assumed=AssumeCache()
    )


async def _filter_over_http(objects: list[Obj], pod: Obj) -> tuple[int, Obj]:
    state = ClusterState.from_objects(objects)
    placement = Placement(state, features=Features.from_gates(), assumed=AssumeCache())
    app = make_app(Settings(), placement=placement, binder=InMemoryBinder(state, placement))
    async with TestClient(TestServer(app), headers=JSON_HEADERS) as client:
        resp = await client.post("/filter", json={"Pod": pod, "NodeNames": NODES})
        return resp.status, await resp.json()


def _check_filter(objects: list[Obj], mutant: Obj) -> None:
    status, body = asyncio.run(_filter_over_http(objects, _good_pod()))
    assert status == 200
    assert not body.get("Error"), body
    failed = {**(body.get("FailedNodes") or {}), **(body.get("FailedAndUnresolvableNodes") or {})}
    assert sorted([*(body.get("NodeNames") or []), *failed]) == NODES
    if (mutant.get("kind"), _name(mutant)) in UNRELATED:
        assert body["NodeNames"] == ["node-1"], body


def _name(obj: Obj) -> Any:
    meta = obj.get("metadata")
    return meta.get("name") if isinstance(meta, dict) else None


@FUZZ
@given(mutated_clusters())
def test_validation_accepts_or_names_the_problem(case):
    objects, index = case
    mutant = objects[index]
    try:
        validate(mutant)
    except InvalidObject as exc:
        assert str(exc).startswith(mutant["kind"])
        assert exc.problems and all(isinstance(p, str) and p for p in exc.problems)


@FUZZ
@given(mutated_clusters())
def test_file_loading_accepts_or_refuses_and_accepted_states_filter(tmp_path_factory, case):
    objects, index = case
    path: Path = tmp_path_factory.mktemp("fuzz") / "state.yaml"
    path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    try:
        loaded = load_state_paths([path], _warn=lambda _: None)
    except StateLoadError as exc:
        assert str(exc).startswith(f"{path}: document {index} ("), str(exc)
        return
    _check_filter(loaded, objects[index])


@FUZZ
@given(mutated_clusters(kinds=("ResourceClaim", "Pod", "Namespace")))
def test_unvalidated_claims_and_pods_never_break_filter(case):
    """Defence in depth: claims and pods that skipped validation fail only the pods that use them.

    (Slices, classes and nodes are guarded by validation alone: the index reads them as valid.)
    """
    objects, index = case
    meta = objects[index].get("metadata")
    # ClusterState keys objects by namespace/name: one without string ones cannot be stored at all.
    assume(isinstance(meta, dict) and all(isinstance(meta.get(f, ""), str) for f in ("name", "namespace")))
    _check_filter(objects, objects[index])


@FUZZ
@given(mutated_clusters())
def test_kube_source_upserts_or_refuses(case):
    objects, index = case
    mutant = objects[index]
    watch = kube._KindWatch(next(k for k in kube.WATCHED_KINDS if k.kind == mutant["kind"]))
    source = kube.KubeSource(ClusterState(), Settings(), api_client=None)
    op = source._event_op(watch, "MODIFIED", copy.deepcopy(mutant))
    assert op is None or op[0] in ("upsert", "reject", "delete")
    if op is not None and op[0] == "reject":
        assert watch.invalid_total == 1 and op[2][1].startswith(mutant["kind"])
    elif op is not None and op[0] == "upsert":
        assert problems(op[2]) == []


@FUZZ
@given(st.data())
def test_malformed_request_pod_is_unschedulable_not_an_error(data):
    """The pod in a /filter request, mutated in spec/status: an answer for it, never an error.

    A wrong type in a field the extender reads is refused by the request decoder with 400 and
    the field path (README "Errors and limits"); anything else gets a filter answer.
    """
    pod = _good_pod()
    paths = [p for p in _paths(pod) if p[0] in ("spec", "status")]
    path = data.draw(st.sampled_from(paths))
    action = data.draw(st.sampled_from(["replace", "delete", "append"]))
    _mutate(pod, path, action, data.draw(JSON_WRONG_VALUES))
    status, body = asyncio.run(_filter_over_http(_cluster(), pod))
    if status == 400:  # the decoder refused a wrong type, naming the field
        assert body["error"].startswith("Pod."), body
    else:
        assert status == 200 and not body.get("Error"), body
