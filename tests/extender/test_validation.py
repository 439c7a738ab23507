"""Edge validation (extender.validation) through the file loader, the CLI and placement.

One test (or parametrised group) per finding of issue 12, each failing before the change:
1. a malformed claim allocation broke every pod's filter (AttributeError);
3. `count: 0` / `count: -1` passed on a node without devices;
4. malformed shapes gave tracebacks (exit 1) instead of exit 2 naming file/document/field,
   and `explain` on a malformed pod gave a traceback;
6. a 10,000-device ResourceSlice loaded silently;
8. duplicates passed silently (a same-named slice replaced another; duplicate device names
   gave an allocator reason naming neither pool nor device).
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.__main__ import main
from extender.allocator.features import Features
from extender.allocator.requests import parse_claim
from extender.cluster.loading import load_state_paths
from extender.cluster.sample import sample_objects
from extender.cluster.state import ClusterState
from extender.core.assumed import AssumeCache
from extender.core.placement import Placement
from extender.errors import StateLoadError
from extender.explaining import load_pods
from extender.objects import Obj
from extender.pods import parse_pod
from extender.validation import InvalidObject, problems, validate

DATA = Path(__file__).resolve().parents[1] / "data"
PODS = {p["metadata"]["name"]: p for p in load_pods(DATA / "pipeline_pods.yaml")}
TPU_POD = PODS["tpu-inference"]
TPU_NODES = TPU_POD["metadata"]["annotations"]["test.dra-extender.io/expected-nodes"].split(",")
FEATURES = Features.from_gates()


def _sample() -> list[Obj]:
    return copy.deepcopy(sample_objects())


def _first(objects: list[Obj], kind: str, **where: str) -> Obj:
    for obj in objects:
        if obj["kind"] == kind and all(obj["metadata"].get(k) == v for k, v in where.items()):
            return obj
    raise LookupError(kind)


def _write(tmp_path: Path, objects: list[Obj], name: str = "state.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    return path


def _load_error(tmp_path: Path, objects: list[Obj]) -> str:
    with pytest.raises(StateLoadError) as info:
        load_state_paths([_write(tmp_path, objects)])
    return str(info.value)


def _gpu_slice(objects: list[Obj]) -> Obj:
    return next(o for o in objects if o["kind"] == "ResourceSlice" and o["spec"].get("devices"))


def _claim(name: str, *, count: Any = 1, allocation: Any = None) -> Obj:
    claim: Obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "tpu", "exactly": {"deviceClassName": "tpu.google.com", "count": count}}
                ]
            }
        },
    }
    if allocation is not None:
        claim["status"] = {"allocation": allocation}
    return claim


def _pod_using(claim_name: str, pod_name: str = "user") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod_name, "namespace": "default", "uid": f"uid-pod-{pod_name}"},
        "spec": {
            "containers": [{"name": "main", "resources": {"claims": [{"name": "dev"}]}}],
            "resourceClaims": [{"name": "dev", "resourceClaimName": claim_name}],
        },
    }


def _placement(objects: list[Obj]) -> Placement:
    return Placement(ClusterState.from_objects(objects), features=FEATURES, assumed=AssumeCache())


# ---------------------------------------------------------------- finding 1: malformed allocations

MALFORMED_ALLOCATIONS = {
    "allocation-is-a-list": ([1, 2], "status.allocation: must be an object, got list"),
    "results-is-a-string": (
        {"devices": {"results": "x"}},
        "status.allocation.devices.results: must be a list",
    ),
    "result-is-a-string": (
        {"devices": {"results": ["x"]}},
        "status.allocation.devices.results[0]: must be an object, got string",
    ),
    "result-without-device": (
        {"devices": {"results": [{"request": "tpu", "driver": "d", "pool": "p"}]}},
        "status.allocation.devices.results[0].device: required",
    ),
}


@pytest.mark.parametrize(
    ("allocation", "needle"), list(MALFORMED_ALLOCATIONS.values()), ids=list(MALFORMED_ALLOCATIONS)
)
def test_malformed_allocation_stops_file_loading(tmp_path, allocation, needle):
    objects = [*_sample(), _claim("broken", allocation=allocation)]
    message = _load_error(tmp_path, objects)
    assert f"(ResourceClaim default/broken): {needle}" in message


#: Wrong types (claim resolution re-checks types only; a missing field is the loader's business).
WRONG_TYPED_ALLOCATIONS = {k: v for k, v in MALFORMED_ALLOCATIONS.items() if k != "result-without-device"}


@pytest.mark.parametrize(
    "allocation", [a for a, _ in WRONG_TYPED_ALLOCATIONS.values()], ids=list(WRONG_TYPED_ALLOCATIONS)
)
def test_malformed_allocation_in_the_state_fails_only_its_pods(allocation):
    """Defence in depth: a bad claim that got into the state (no loader) leaves other pods alone."""
    placement = _placement([*_sample(), _claim("broken", allocation=allocation), _pod_using("broken")])
    good = placement.filter(parse_pod(TPU_POD), [*TPU_NODES, "cpu-node-01"])
    assert not good.error
    assert sorted(good.passed) == sorted(TPU_NODES)
    bad = placement.filter(parse_pod(_pod_using("broken")), TPU_NODES)
    assert not bad.error and not bad.passed
    assert set(bad.unresolvable) == set(TPU_NODES)
    assert all("invalid ResourceClaim: ResourceClaim default/broken: status.allocation" in r
               for r in bad.unresolvable.values())  # fmt: skip


def test_refused_claim_gives_its_pods_the_reason():
    """A claim the kube source refused: its pods are unschedulable with the validation message."""
    state = ClusterState.from_objects(_sample())
    state.reject("ResourceClaim", ("default", "broken"), "ResourceClaim default/broken: spec: required")
    placement = Placement(state, features=FEATURES, assumed=AssumeCache())
    verdict = placement.filter(parse_pod(_pod_using("broken")), TPU_NODES)
    assert set(verdict.unresolvable) == set(TPU_NODES)
    assert (
        "invalid ResourceClaim: ResourceClaim default/broken: spec: required"
        in verdict.unresolvable[TPU_NODES[0]]
    )
    state.upsert(_claim("broken"))  # fixed: the rejection goes away
    assert state.rejection("ResourceClaim", "broken", "default") is None
    assert placement.filter(parse_pod(_pod_using("broken")), TPU_NODES).passed


# ---------------------------------------------------------------- finding 3: count < 1


@pytest.mark.parametrize("count", [0, -1, True, "2", 1.5])
def test_count_below_one_or_not_an_integer_is_refused(tmp_path, count):
    message = _load_error(tmp_path, [*_sample(), _claim("zero", count=count)])
    assert "(ResourceClaim default/zero): spec.devices.requests[0].exactly.count: must be" in message


@pytest.mark.parametrize("count", [0, -1])
def test_count_below_one_in_the_state_never_passes_a_node(count):
    """A node without any device must not pass a claim for 0 or -1 devices (defence in depth)."""
    placement = _placement([*_sample(), _claim("zero", count=count), _pod_using("zero")])
    verdict = placement.filter(parse_pod(_pod_using("zero")), ["cpu-node-01", *TPU_NODES])
    assert verdict.passed == []
    assert "exactly.count: must be at least 1" in verdict.unresolvable["cpu-node-01"]


@pytest.mark.parametrize("count", [0, -1, "1"])
def test_parse_claim_refuses_a_count_below_one(count):
    """The last line of defence: parse_claim with API defaults never yields a zero-device request."""
    with pytest.raises(ValueError, match="count must be an integer of at least 1"):
        parse_claim(_claim("zero", count=count))
    assert parse_claim(_claim("zero", count=count), apply_defaults=False).requests  # upstream cases: as is


def test_count_limits_of_the_api():
    """count >= 1 is valid whatever its size (the allocator reports > 32 per pod, as upstream)."""
    assert problems(_claim("many", count=33)) == []
    all_mode = _claim("all")
    all_mode["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] = "All"
    assert problems(all_mode) == [
        "spec.devices.requests[0].exactly.count: must not be set when allocationMode is All"
    ]
    del all_mode["spec"]["devices"]["requests"][0]["exactly"]["count"]
    assert problems(all_mode) == []


# ---------------------------------------------------------------- finding 4: shapes, exit 2


def _with_slice_device_field(objects: list[Obj], field: str, value: Any) -> tuple[list[Obj], str]:
    slice_ = _gpu_slice(objects)
    slice_["spec"]["devices"][3][field] = value
    return objects, slice_["metadata"]["name"]


def test_taints_as_a_map_names_kind_name_and_field(tmp_path):
    objects, name = _with_slice_device_field(_sample(), "taints", {"key": "x", "effect": "NoSchedule"})
    message = _load_error(tmp_path, objects)
    assert f"(ResourceSlice {name}): spec.devices[3].taints: must be a list, got object" in message


def test_consumes_counters_as_a_string(tmp_path):
    objects, name = _with_slice_device_field(_sample(), "consumesCounters", "memory")
    message = _load_error(tmp_path, objects)
    assert f"(ResourceSlice {name}): spec.devices[3].consumesCounters: must be a list, got string" in message


def test_node_selector_terms_as_a_string(tmp_path):
    objects = _sample()
    slice_ = _gpu_slice(objects)
    del slice_["spec"]["nodeName"]
    slice_["spec"]["nodeSelector"] = {"nodeSelectorTerms": "gpu=true"}
    message = _load_error(tmp_path, objects)
    assert "spec.nodeSelector.nodeSelectorTerms: must be a list, got string" in message


def test_claim_namespace_as_a_list(tmp_path):
    claim = _claim("ns-list")
    claim["metadata"]["namespace"] = ["a", "b"]
    message = _load_error(tmp_path, [*_sample(), claim])
    assert "(ResourceClaim default/ns-list): metadata.namespace: must be a string, got list" in message


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("taints", {"key": "x"}, "spec.devices[3].taints: must be a list"),
        ("consumesCounters", "memory", "spec.devices[3].consumesCounters: must be a list"),
        ("attributes", {"model": {"string": "x" * 65}}, "must be at most 64 characters"),
        ("attributes", {"bad name!": {"int": 1}}, "the name must be a C identifier"),
        ("attributes", {"v": {"version": "1.2"}}, "is not a semantic version"),
        ("attributes", {"n": {"int": 1, "bool": True}}, "exactly one of int, bool"),
        (
            "capacity",
            {"memory": {"value": "lots"}},
            "spec.devices[3].capacity[memory].value: invalid quantity",
        ),
        ("name", "GPU_0", "spec.devices[3].name: 'GPU_0' is not a DNS label"),
    ],
)
def test_serve_exits_2_naming_file_document_and_field(tmp_path, capsys, field, value, needle):
    """`serve --state` with a malformed object: exit 2, one line naming file, document and field."""
    objects, _ = _with_slice_device_field(_sample(), field, value)
    path = _write(tmp_path, objects)
    assert main(["serve", "--state", str(path)]) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"dra-extender: {path}: document ")
    assert needle in last
    assert "Traceback" not in err


MALFORMED_PODS = {
    "metadata-is-a-list": ({"metadata": ["x"]}, "metadata: must be an object, got list"),
    "claims-is-a-string": ({"spec": {"resourceClaims": "gpu"}}, "spec.resourceClaims: must be a list"),
    "claim-entry-is-a-number": (
        {"spec": {"resourceClaims": [3]}},
        "spec.resourceClaims[0]: must be an object",
    ),
    "statuses-is-an-object": (
        {"status": {"resourceClaimStatuses": {"name": "x"}}},
        "status.resourceClaimStatuses: must be a list",
    ),
    "container-claims-is-a-string": (
        {"spec": {"containers": [{"name": "c", "resources": {"claims": "x"}}]}},
        "spec.containers[0].resources.claims: must be a list",
    ),
}


@pytest.mark.parametrize(("patch", "needle"), list(MALFORMED_PODS.values()), ids=list(MALFORMED_PODS))
def test_explain_on_a_malformed_pod_exits_2(tmp_path, capsys, patch, needle):
    pod = {**copy.deepcopy(TPU_POD), **patch}
    pod_file = tmp_path / "pod.yaml"
    pod_file.write_text(yaml.safe_dump(pod))
    assert main(["explain", "--pod", str(pod_file)]) == 2
    err = capsys.readouterr().err
    assert f"{pod_file}: document 0: Pod" in err and needle in err
    assert "Traceback" not in err


def test_malformed_pod_in_filter_is_unschedulable_not_an_error():
    pod = {**copy.deepcopy(TPU_POD), "spec": {"resourceClaims": "gpu"}}
    verdict = _placement(_sample()).filter(parse_pod(pod), TPU_NODES)
    assert not verdict.error and not verdict.passed
    assert "spec.resourceClaims: must be a list" in verdict.unresolvable[TPU_NODES[0]]


# ---------------------------------------------------------------- finding 6: devices per slice


def test_ten_thousand_devices_in_one_slice_are_refused(tmp_path):
    objects = _sample()
    slice_ = _gpu_slice(objects)
    slice_["spec"]["devices"] = [{"name": f"gpu-{i}"} for i in range(10_000)]
    message = _load_error(tmp_path, objects)
    assert "spec.devices: must have at most 128 devices, got 10000" in message


def test_device_limits_128_plain_and_64_with_taints():
    def slice_with(devices: list[Obj]) -> Obj:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "s"},
            "spec": {"driver": "d.example.com", "nodeName": "n", "devices": devices,
                     "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1}},
        }  # fmt: skip

    assert problems(slice_with([{"name": f"d{i}"} for i in range(128)])) == []
    assert any("at most 128" in p for p in problems(slice_with([{"name": f"d{i}"} for i in range(129)])))
    tainted = [{"name": f"d{i}", "taints": [{"key": "k", "effect": "NoSchedule"}]} for i in range(65)]
    assert any("at most 64 devices when a device uses taints" in p for p in problems(slice_with(tainted)))
    assert problems(slice_with(tainted[:64])) == []


# ---------------------------------------------------------------- finding 8: duplicates


def test_two_different_slices_with_one_name_exit_2_naming_both(tmp_path, capsys):
    objects = _sample()
    slice_ = _gpu_slice(objects)
    other = copy.deepcopy(slice_)
    other["spec"]["devices"] = other["spec"]["devices"][:1]
    first = _write(tmp_path, objects, "a.yaml")
    second = _write(tmp_path, [other], "b.yaml")
    assert main(["serve", "--state", str(first), "--state", str(second)]) == 2
    err = capsys.readouterr().err
    name = slice_["metadata"]["name"]
    assert f"{second}: document 0 (ResourceSlice {name}): another ResourceSlice with the same name" in err
    assert f"is in {first}: document {objects.index(slice_)} (ResourceSlice {name})" in err


def test_identical_repeat_is_skipped_with_a_warning(tmp_path):
    objects = _sample()
    slice_ = _gpu_slice(objects)
    warnings: list[str] = []
    loaded = load_state_paths(
        [_write(tmp_path, objects, "a.yaml"), _write(tmp_path, [copy.deepcopy(slice_)], "b.yaml")],
        _warn=warnings.append,
    )
    assert len(loaded) == len(objects)
    assert any("b.yaml: document 0" in w and "identical to" in w and "a.yaml" in w for w in warnings)


def test_duplicate_device_name_in_one_slice_is_refused(tmp_path):
    objects = _sample()
    slice_ = _gpu_slice(objects)
    slice_["spec"]["devices"][1]["name"] = slice_["spec"]["devices"][0]["name"]
    message = _load_error(tmp_path, objects)
    dup = slice_["spec"]["devices"][0]["name"]
    assert f"spec.devices[1].name: duplicate device name {dup} (also spec.devices[0])" in message


def _split_pool(objects: list[Obj]) -> tuple[Obj, Obj]:
    """Split the GPU slice in two slices of one pool whose second repeats a device name."""
    slice_ = _gpu_slice(objects)
    second = copy.deepcopy(slice_)
    second["metadata"]["name"] = slice_["metadata"]["name"] + "-b"
    devices = slice_["spec"]["devices"]
    second["spec"]["devices"] = [copy.deepcopy(devices[0])]
    slice_["spec"]["pool"]["resourceSliceCount"] = second["spec"]["pool"]["resourceSliceCount"] = 2
    objects.append(second)
    return slice_, second


def test_duplicate_device_across_slices_of_a_pool_warns_at_load(tmp_path):
    objects = _sample()
    first, second = _split_pool(objects)
    warnings: list[str] = []
    load_state_paths([_write(tmp_path, objects)], _warn=warnings.append)
    pool = f"{first['spec']['driver']}/{first['spec']['pool']['name']}"
    device = first["spec"]["devices"][0]["name"]
    assert [w for w in warnings if "duplicate device name" in w] == [
        f"ResourceSlice {first['metadata']['name']} and {second['metadata']['name']}: pool {pool}: "
        f"duplicate device name {device}; the pool is invalid, none of its devices will be allocated"
    ]


def test_allocator_reason_names_the_invalid_pool_and_device():
    objects = _sample()
    first, _ = _split_pool(objects)
    node = first["spec"]["nodeName"]
    pod = next(
        p
        for p in PODS.values()
        if node in p["metadata"]["annotations"]["test.dra-extender.io/expected-nodes"]
    )
    verdict = _placement(objects).filter(parse_pod(pod), [node])
    reason = verdict.failed.get(node) or verdict.unresolvable.get(node) or verdict.error
    pool = f"{first['spec']['driver']}/{first['spec']['pool']['name']}"
    device = first["spec"]["devices"][0]["name"]
    assert f"invalid resource pools were encountered: pool {pool}: duplicate device name {device}" in reason


# ---------------------------------------------------------------- the module itself


def test_invalid_object_message_has_kind_ref_and_field():
    claim = _claim("c", count=0)
    with pytest.raises(InvalidObject) as info:
        validate(claim)
    assert str(info.value) == (
        "ResourceClaim default/c: spec.devices.requests[0].exactly.count: must be at least 1, got 0"
    )
    assert info.value.kind == "ResourceClaim" and info.value.ref == "default/c"


def test_several_problems_are_counted_in_the_message():
    slice_ = _gpu_slice(_sample())
    slice_["spec"]["driver"] = 3
    slice_["spec"]["devices"][0]["name"] = None
    with pytest.raises(InvalidObject) as info:
        validate(slice_)
    assert "spec.driver: must be a string, got integer (and 1 more problem(s))" in str(info.value)
    assert len(info.value.problems) == 2


def test_sample_cluster_and_pipeline_pods_are_valid():
    assert [problems(o) for o in _sample() if problems(o)] == []
    assert [problems(p) for p in PODS.values() if problems(p)] == []


@pytest.mark.parametrize(
    ("obj", "needle"),
    [
        ({"kind": "DeviceClass", "metadata": {"name": "c"},
          "spec": {"selectors": [{"cel": {"expression": "x" * 10241}}]}},
         "spec.selectors[0].cel.expression: must be at most 10240 characters"),
        ({"kind": "DeviceClass", "metadata": {"name": "c"},
          "spec": {"selectors": [{"cel": {"expression": 1}}]}},
         "spec.selectors[0].cel.expression: must be a string"),
        ({"kind": "DeviceTaintRule", "metadata": {"name": "r"}, "spec": {"taint": {"key": "k"}}},
         "spec.taint.effect: required"),
        ({"kind": "ResourceClaimTemplate", "metadata": {"name": "t", "namespace": "d"},
          "spec": {"spec": {"devices": {"requests": [{"name": "a"}, {"name": "a"}]}}}},
         "spec.spec.devices.requests[1].name: duplicate request name a"),
        ({"kind": "Node", "metadata": {"name": "n", "labels": {"a": 1}}},
         "metadata.labels[a]: must be a string"),
        ({"kind": "Namespace", "metadata": {"name": "Bad_NS"}}, "is not a DNS label"),
    ],
)  # fmt: skip
def test_rules_of_other_kinds(obj, needle):
    assert any(needle in p for p in problems(obj)), problems(obj)


def test_unknown_enum_values_are_left_to_the_allocator():
    """A newer API's request/selector/constraint type or mode: per-pod upstream errors, not refusal."""
    claim = _claim("future")
    request = claim["spec"]["devices"]["requests"][0]
    request["exactly"] = {
        "deviceClassName": "c",
        "allocationMode": "future-mode",
        "selectors": [{"future": {}}],
    }
    claim["spec"]["devices"]["constraints"] = [{"requests": ["tpu"]}]
    assert problems(claim) == []


def test_load_warning_logger_is_used(tmp_path, caplog):
    objects = _sample()
    _split_pool(objects)
    with caplog.at_level(logging.WARNING, logger="extender.cluster.loading"):
        load_state_paths([_write(tmp_path, objects)])
    assert any("duplicate device name" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("name", "valid"),
    [("memory-slice-0", True), ("other-memory", True), ("memorySlice0", False), ("bad name!", False)],
)
def test_counter_names_are_dns_labels_as_the_api_server_validates(name, valid):
    slice_ = {
        "kind": "ResourceSlice",
        "metadata": {"name": "s"},
        "spec": {
            "driver": "d.example.com",
            "nodeName": "n",
            "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
            "sharedCounters": [{"name": "set", "counters": {name: {"value": "1"}}}],
        },
    }
    assert (problems(slice_) == []) is valid


def _claim_with_derived(derived: Any) -> Obj:
    request = {"name": "r", "exactly": {"deviceClassName": "gpu", "derivedAttributes": derived}}
    return {
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {"devices": {"requests": [request], "constraints": [{"matchAttribute": "x.example.com/a"}]}},
    }


def test_derived_attributes_are_checked_at_the_edge() -> None:
    """Kubernetes 1.37's derivedAttributes: fully qualified unique names, an expression each."""
    good = [{"name": "x.example.com/a", "expression": "device.driver"}]
    assert problems(_claim_with_derived(good)) == []
    bad = [
        {"name": "a", "expression": "1"},
        {"name": "x.example.com/b"},
        {"name": "x.example.com/b", "expression": "2"},
    ]
    found = problems(_claim_with_derived(bad))
    assert any("derivedAttributes[0].name" in p and "fully qualified" in p for p in found), found
    assert any("derivedAttributes[1].expression" in p and "required" in p for p in found), found
    assert any("duplicate derived attribute x.example.com/b" in p for p in found), found
    found = problems(_claim_with_derived("not a list"))
    assert any("derivedAttributes" in p for p in found), found


def test_attribute_fast_path_still_reports_bad_values_and_names() -> None:
    """Valid scalar attributes under names seen valid before skip the path text
    (`validation._plain_scalar`); a bad value under such a name, or a bad name, is still
    reported with its path."""
    slice_ = copy.deepcopy(_gpu_slice(sample_objects()))
    assert problems(slice_) == []  # the names are now known to be valid
    attributes = slice_["spec"]["devices"][0]["attributes"]
    name = next(iter(attributes))
    attributes[name] = {"int": "not a number"}
    attributes["bad name!"] = {"string": "x"}
    found = problems(slice_)
    assert any(f"spec.devices[0].attributes[{name}].int" in p for p in found), found
    assert any("spec.devices[0].attributes[bad name!]" in p for p in found), found
