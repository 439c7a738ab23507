"""Loading state files (extender.cluster.loading): formats, Lists, directories, kind filtering,
and StateLoadError messages that name file, document and field."""

from __future__ import annotations

import json
import logging

import pytest

from extender.cluster.loading import load_state_paths
from extender.cluster.state import ClusterState
from extender.errors import StateLoadError

NODE = """\
apiVersion: v1
kind: Node
metadata:
  name: node-1
  creationTimestamp: 2025-06-02T09:14:03Z
"""
SLICE = """\
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata:
  name: node-1-gpus
spec:
  driver: gpu.example.com
  nodeName: node-1
  pool: {name: node-1, generation: 1, resourceSliceCount: 1}
  devices:
  - name: gpu-0
    attributes:
      model: {string: H100}
  - name: gpu-1
"""
CLASS = """\
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: gpu.example.com
spec:
  selectors:
  - cel: {expression: 'device.driver == "gpu.example.com"'}
"""
CLAIM = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: trainer-gpu
  namespace: ml
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.example.com, count: 2}
"""
CONFIGMAP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: ignored
"""


def _write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _kinds(objects) -> list[tuple[str, str]]:
    return [(o["kind"], o["metadata"]["name"]) for o in objects]


def _error(tmp_path, text: str, name: str = "state.yaml") -> str:
    with pytest.raises(StateLoadError) as info:
        load_state_paths([_write(tmp_path, name, text)])
    return str(info.value)


def test_multi_document_yaml(tmp_path):
    """Every document of a multi-document YAML file is loaded in order."""
    path = _write(tmp_path, "state.yaml", "---\n".join([NODE, SLICE, CLASS, CLAIM]))
    assert _kinds(load_state_paths([path])) == [
        ("Node", "node-1"),
        ("ResourceSlice", "node-1-gpus"),
        ("DeviceClass", "gpu.example.com"),
        ("ResourceClaim", "trainer-gpu"),
    ]


def test_empty_documents_are_skipped(tmp_path):
    """Empty documents (e.g. a leading or doubled ---) are skipped."""
    path = _write(tmp_path, "state.yaml", "---\n---\n" + NODE + "---\n# only a comment\n")
    assert _kinds(load_state_paths([path])) == [("Node", "node-1")]


def test_timestamps_stay_strings(tmp_path):
    """Unquoted YAML timestamps stay strings, as in API JSON."""
    (node,) = load_state_paths([_write(tmp_path, "node.yaml", NODE)])
    assert node["metadata"]["creationTimestamp"] == "2025-06-02T09:14:03Z"


def test_json_file(tmp_path):
    """A .json file holding one object is loaded."""
    obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-j"}}
    path = _write(tmp_path, "node.json", json.dumps(obj))
    assert load_state_paths([path]) == [obj]


def test_json_content_in_a_yaml_named_file_is_read_as_json(tmp_path, monkeypatch):
    """`kubectl get -o json > state.yaml`: the content decides, not the name, so the YAML parser
    (about 4x slower on JSON) is not used; flow-style YAML that is no JSON still loads."""
    from extender.cluster import loading

    obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-j"}}
    path = _write(tmp_path, "state.yaml", "\n  " + json.dumps(obj))

    def no_yaml(*args, **kwargs):
        raise AssertionError("JSON content went through the YAML parser")

    monkeypatch.setattr(loading.yaml, "load_all", no_yaml)
    assert load_state_paths([path]) == [obj]
    monkeypatch.undo()
    flow = _write(tmp_path, "flow.yaml", "{apiVersion: v1, kind: Node, metadata: {name: node-f}}")
    assert load_state_paths([flow]) == [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-f"}}]
    deep = _write(tmp_path, "deep.yaml", "[" * 50_000 + "]" * 50_000)
    # 50,000 levels crash the YAML parser's C loader; as JSON they are a clear error (older
    # orjson releases read them and find a list, newer ones stop at their depth limit)
    clear = r"deep\.yaml: document 0: (must be an object|not valid JSON: depth)"
    with pytest.raises(StateLoadError, match=clear):
        load_state_paths([deep])


@pytest.mark.parametrize(
    "text",
    ["kind: " + "[" * 50_000 + "]" * 50_000, "".join(" " * (2 * i) + "a:\n" for i in range(20_000))],
    ids=["flow", "block"],
)
def test_deeply_nested_yaml_is_a_clear_error(tmp_path, text):
    """A state file nested tens of thousands deep is refused with the file named, not a crash
    (PyYAML >= 6.0.4's loader limits the depth; older C loaders segfaulted)."""
    path = _write(tmp_path, "deep.yml", text)
    with pytest.raises(StateLoadError, match=r"deep\.yml: document 0: not valid YAML: .*nesting depth"):
        load_state_paths([path])


def test_generic_list_is_unpacked(tmp_path):
    """`kind: List` (kubectl get -o json) yields its items."""
    items = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a"}},
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "b"}},
    ]
    path = _write(tmp_path, "dump.json", json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    assert _kinds(load_state_paths([path])) == [("Node", "a"), ("Node", "b")]


def test_typed_list_items_get_kind_and_api_version(tmp_path):
    """Items of a `*List` without kind/apiVersion inherit them from the list."""
    text = """\
apiVersion: resource.k8s.io/v1
kind: DeviceClassList
items:
- metadata: {name: gpu.example.com}
  spec: {}
"""
    (obj,) = load_state_paths([_write(tmp_path, "classes.yaml", text)])
    assert (obj["kind"], obj["apiVersion"]) == ("DeviceClass", "resource.k8s.io/v1")


def test_directory_is_searched_recursively_in_sorted_order(tmp_path):
    """Directories yield *.yaml, *.yml and *.json files recursively, sorted by path."""
    _write(tmp_path, "b/slice.yml", SLICE)
    _write(tmp_path, "a/node.yaml", NODE)
    _write(
        tmp_path, "c.json", json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
    )
    _write(tmp_path, "README.md", "not: state")
    assert _kinds(load_state_paths([tmp_path])) == [
        ("Node", "node-1"),
        ("ResourceSlice", "node-1-gpus"),
        ("Namespace", "ml"),
    ]


def test_several_paths_are_concatenated(tmp_path):
    """Objects from several paths come back in path order."""
    first, second = _write(tmp_path, "1.yaml", CLAIM), _write(tmp_path, "2.yaml", NODE)
    assert _kinds(load_state_paths([second, first])) == [("Node", "node-1"), ("ResourceClaim", "trainer-gpu")]


def test_unknown_kinds_are_skipped_with_one_warning_per_kind(tmp_path):
    """Unknown kinds are dropped, and each kind is warned about once."""
    warnings: list[str] = []
    path = _write(tmp_path, "state.yaml", "---\n".join([CONFIGMAP, NODE, CONFIGMAP]))
    assert _kinds(load_state_paths([path], _warn=warnings.append)) == [("Node", "node-1")]
    assert len(warnings) == 1
    assert "ConfigMap" in warnings[0]


def test_unknown_kind_warning_is_logged(tmp_path, caplog):
    """Without the test hook the warning goes to the module logger."""
    with caplog.at_level(logging.WARNING, logger="extender.cluster.loading"):
        load_state_paths([_write(tmp_path, "state.yaml", CONFIGMAP)])
    assert "ConfigMap" in caplog.text


def test_loaded_objects_build_a_cluster_state(tmp_path):
    """The loaded objects feed ClusterState.from_objects."""
    path = _write(tmp_path, "state.yaml", "---\n".join([NODE, SLICE, CLAIM]))
    state = ClusterState.from_objects(load_state_paths([path]))
    assert state.get("ResourceClaim", "trainer-gpu", "ml") is not None
    assert state.count("ResourceSlice") == 1


def test_missing_path_is_an_error(tmp_path):
    """A path that does not exist raises StateLoadError naming it."""
    with pytest.raises(StateLoadError, match=r"nope\.yaml: no such file or directory"):
        load_state_paths([tmp_path / "nope.yaml"])


def test_invalid_yaml_names_file_and_document(tmp_path):
    """A YAML syntax error names the file and the bad document."""
    message = _error(tmp_path, NODE + "---\nkind: [unclosed\n")
    assert message.startswith(f"{tmp_path / 'state.yaml'}: document 1: not valid YAML")


def test_invalid_json_names_file(tmp_path):
    """A JSON syntax error names the file."""
    assert "bad.json: document 0: not valid JSON" in _error(tmp_path, '{"kind": ', name="bad.json")


def test_document_that_is_not_an_object(tmp_path):
    """A document that is a list or scalar is rejected."""
    assert "document 0: must be an object" in _error(tmp_path, "- a\n- b\n")


def test_document_without_kind(tmp_path):
    """A document without kind is rejected."""
    assert "document 0: kind: required" in _error(tmp_path, "metadata: {name: x}\n")


def test_device_without_name_names_the_field_path(tmp_path):
    """The message has file, document index, kind/name and the field path."""
    text = "---\n".join([NODE, NODE, NODE, SLICE.replace("  - name: gpu-1\n", "  - attributes: {}\n")])
    expected = "document 3 (ResourceSlice node-1-gpus): spec.devices[1].name: required"
    assert _error(tmp_path, text) == f"{tmp_path / 'state.yaml'}: {expected}"


def test_list_item_errors_name_the_item(tmp_path):
    """A malformed List member is reported with its item index."""
    text = json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "v1", "kind": "Node", "metadata": {}}]}
    )
    assert "document 0 item 0 (Node): metadata.name: required" in _error(tmp_path, text, name="dump.json")


MALFORMED = {
    "missing-name": (NODE.replace("  name: node-1\n", ""), "metadata.name: required"),
    "wrong-api-version": (
        SLICE.replace("resource.k8s.io/v1", "resource.k8s.io/v1beta1"),
        "apiVersion: 'resource.k8s.io/v1beta1'",
    ),
    "slice-without-driver": (SLICE.replace("  driver: gpu.example.com\n", ""), "spec.driver: required"),
    "slice-without-pool-name": (SLICE.replace("{name: node-1, ", "{"), "spec.pool.name: required"),
    "slice-without-node-selection": (
        SLICE.replace("  nodeName: node-1\n", ""),
        "spec: exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection is required, got none",
    ),
    "slice-with-two-node-selections": (
        SLICE.replace("  nodeName: node-1\n", "  nodeName: node-1\n  allNodes: true\n"),
        "is required, got nodeName, allNodes",
    ),
    "devices-not-a-list": (
        SLICE.split("  devices:")[0] + "  devices: {gpu-0: {}}\n",
        "spec.devices: must be a list",
    ),
    "attribute-not-an-object": (
        SLICE.replace("{string: H100}", "H100"),
        "spec.devices[0].attributes[model]: must be an object",
    ),
    "class-selectors-not-a-list": (
        CLASS.split("  selectors:")[0] + "  selectors: {cel: {}}\n",
        "spec.selectors: must be a list",
    ),
    "claim-requests-not-a-list": (
        CLAIM.split("    requests:")[0] + "    requests: gpu\n",
        "spec.devices.requests: must be a list",
    ),
    "claim-request-without-name": (
        CLAIM.replace("- name: gpu\n      exactly", "- exactly"),
        "spec.devices.requests[0].name: required",
    ),
    "template-without-inner-spec": (
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: t}\nspec: {}\n",
        "spec.spec: required",
    ),
    "node-wrong-api-version": (NODE.replace("apiVersion: v1", "apiVersion: apps/v1"), "allowed: v1"),
}


@pytest.mark.parametrize(("text", "needle"), list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_known_kind_objects_are_rejected(tmp_path, text, needle):
    """Each structural problem in a known kind raises StateLoadError naming the field."""
    message = _error(tmp_path, text)
    assert message.startswith(f"{tmp_path / 'state.yaml'}: document 0 (")
    assert needle in message
