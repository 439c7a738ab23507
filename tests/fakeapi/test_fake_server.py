"""The fake API server against the real `kubernetes` client: the protocol facts other tests rely on.

Scope: list/watch resourceVersions, optimistic concurrency (409), NotFound (404), 410 after
compaction, bookmarks, stalls, status-subresource rules, finalizers, pods/binding, leases,
DeviceTaintRule versions, error injection, the on_request hook and the request log.
"""

from __future__ import annotations

import json
import threading
import time

import kubernetes.client as kc
import orjson
import pytest
from kubernetes import watch
from kubernetes.client.rest import ApiException

from tests.fakeapi.server import FakeApiServer

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1", "labels": {"zone": "a"}}}
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "trainer-0", "namespace": "ml"},
    "spec": {"containers": [{"name": "c", "image": "busybox"}]},
}
CLAIM = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "gpus", "namespace": "ml"},
    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}},
}
ALLOCATION = {
    "devices": {
        "results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "node-1", "device": "gpu-0"}]
    }
}


def _status(exc: ApiException) -> dict:
    return json.loads(exc.body)


def _stream_lines(response, limit: int) -> list[dict]:
    """Read up to `limit` JSON events from a raw watch response, then close it."""
    events: list[dict] = []
    try:
        for line in watch.watch.iter_resp_lines(response):
            if line:
                events.append(orjson.loads(line))
            if len(events) >= limit:
                break
    finally:
        response.close()
    return events


def test_list_carries_kind_api_version_and_the_global_resource_version(fake_api: FakeApiServer):
    """list answers a <Kind>List whose resourceVersion is the global counter after the last write."""
    fake_api.put_object(NODE)
    fake_api.put_object({**NODE, "metadata": {"name": "node-2"}})
    core = kc.CoreV1Api(fake_api.api_client())
    raw = orjson.loads(core.list_node(_preload_content=False).data)
    assert raw["kind"] == "NodeList"
    assert raw["apiVersion"] == "v1"
    assert raw["metadata"]["resourceVersion"] == "2" == str(fake_api.resource_version)
    assert [item["metadata"]["name"] for item in raw["items"]] == ["node-1", "node-2"]
    assert raw["items"][0]["metadata"]["resourceVersion"] == "1"
    typed = core.list_node(label_selector="zone=a")
    assert [n.metadata.name for n in typed.items] == ["node-1"]


def test_a_list_with_a_limit_is_paged_from_one_snapshot(fake_api: FakeApiServer):
    """`limit` pages the list as the API server does: `continue` leads to the next page, served
    from the first page's snapshot (a write in between is not in it), and an unknown token is 410."""
    for i in range(5):
        fake_api.put_object({**NODE, "metadata": {"name": f"node-{i}"}})
    core = kc.CoreV1Api(fake_api.api_client())
    first = orjson.loads(core.list_node(limit=2, _preload_content=False).data)
    assert [n["metadata"]["name"] for n in first["items"]] == ["node-0", "node-1"]
    fake_api.put_object({**NODE, "metadata": {"name": "node-9"}})
    names, token = [], first["metadata"]["continue"]
    while token:
        page = orjson.loads(core.list_node(limit=2, _continue=token, _preload_content=False).data)
        assert page["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
        names += [n["metadata"]["name"] for n in page["items"]]
        token = page["metadata"].get("continue")
    assert names == ["node-2", "node-3", "node-4"]
    with pytest.raises(ApiException) as gone:
        core.list_node(limit=2, _continue="page-unknown")
    assert gone.value.status == 410


def test_create_sets_uid_timestamp_and_rv_and_rejects_duplicates(fake_api: FakeApiServer):
    """create fills uid, creationTimestamp and resourceVersion; a taken name is 409 AlreadyExists."""
    resource = kc.ResourceV1Api(fake_api.api_client())
    created = resource.create_namespaced_resource_claim("ml", CLAIM)
    assert created.metadata.uid and created.metadata.creation_timestamp
    assert created.metadata.resource_version == "1"
    with pytest.raises(ApiException) as info:
        resource.create_namespaced_resource_claim("ml", CLAIM)
    assert info.value.status == 409
    assert _status(info.value)["reason"] == "AlreadyExists"
    assert _status(info.value)["message"] == 'resourceclaims.resource.k8s.io "gpus" already exists'


def test_stale_update_is_409_conflict_with_the_upstream_message(fake_api: FakeApiServer):
    """PUT with an old resourceVersion is refused; with the current one it succeeds and bumps the RV."""
    fake_api.put_object(CLAIM)
    resource = kc.ResourceV1Api(fake_api.api_client())
    claim = resource.read_namespaced_resource_claim("gpus", "ml")
    fake_api.put_object({**CLAIM, "metadata": {**CLAIM["metadata"], "labels": {"changed": "yes"}}})
    with pytest.raises(ApiException) as info:
        resource.replace_namespaced_resource_claim("gpus", "ml", claim)
    status = _status(info.value)
    assert (info.value.status, status["kind"], status["reason"], status["code"]) == (
        409,
        "Status",
        "Conflict",
        409,
    )
    assert status["message"] == (
        'Operation cannot be fulfilled on resourceclaims.resource.k8s.io "gpus": the object has been '
        "modified; please apply your changes to the latest version and try again"
    )
    fresh = resource.read_namespaced_resource_claim("gpus", "ml")
    fresh.metadata.labels = {"mine": "yes"}
    updated = resource.replace_namespaced_resource_claim("gpus", "ml", fresh)
    assert int(updated.metadata.resource_version) == int(fresh.metadata.resource_version) + 1
    assert updated.metadata.labels == {"mine": "yes"}


def test_missing_objects_are_404_not_found(fake_api: FakeApiServer):
    """get, replace, delete and binding of an absent object answer a NotFound Status."""
    core = kc.CoreV1Api(fake_api.api_client())
    with pytest.raises(ApiException) as info:
        core.read_namespaced_pod("nope", "ml")
    assert info.value.status == 404
    assert _status(info.value)["reason"] == "NotFound"
    assert _status(info.value)["message"] == 'pods "nope" not found'
    with pytest.raises(ApiException) as info:
        kc.ResourceV1Api(fake_api.api_client()).delete_namespaced_resource_claim("nope", "ml")
    assert _status(info.value)["message"] == 'resourceclaims.resource.k8s.io "nope" not found'
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod_binding(
            "nope", "ml", {"metadata": {"name": "nope"}, "target": {"kind": "Node", "name": "node-1"}}
        )
    assert info.value.status == 404


def test_status_subresource_rules(fake_api: FakeApiServer):
    """PUT on the claim ignores status; PUT on /status ignores everything but status."""
    fake_api.put_object(CLAIM)
    resource = kc.ResourceV1Api(fake_api.api_client())
    claim = fake_api.api_client().sanitize_for_serialization(
        resource.read_namespaced_resource_claim("gpus", "ml")
    )
    claim["status"] = {"allocation": ALLOCATION}
    claim["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    main = resource.replace_namespaced_resource_claim("gpus", "ml", claim)
    assert main.status is None and main.metadata.finalizers == ["resource.kubernetes.io/delete-protection"]
    claim["metadata"]["resourceVersion"] = main.metadata.resource_version
    claim["metadata"]["finalizers"] = []
    claim["metadata"]["labels"] = {"ignored": "yes"}
    status = resource.replace_namespaced_resource_claim_status("gpus", "ml", claim)
    assert status.status.allocation.devices.results[0].device == "gpu-0"
    assert status.metadata.finalizers == ["resource.kubernetes.io/delete-protection"]
    assert status.metadata.labels is None
    assert fake_api.request_log()[-2:] == [
        ("update", "resource.k8s.io", "resourceclaims", "", "ml"),
        ("update", "resource.k8s.io", "resourceclaims", "status", "ml"),
    ]
    # The status update that writes an allocation is authorized again as resourceclaims/binding
    # (what kube-apiserver 1.36 does).
    assert fake_api.authorization_log()[-3:] == [
        *fake_api.request_log()[-2:],
        ("update", "resource.k8s.io", "resourceclaims", "binding", "ml"),
    ]


def test_delete_with_finalizers_waits_for_them(fake_api: FakeApiServer):
    """Delete of an object with finalizers sets deletionTimestamp; clearing them removes it."""
    fake_api.put_object({**CLAIM, "metadata": {**CLAIM["metadata"], "finalizers": ["x/y"]}})
    resource = kc.ResourceV1Api(fake_api.api_client())
    resource.delete_namespaced_resource_claim("gpus", "ml")
    pending = resource.read_namespaced_resource_claim("gpus", "ml")
    assert pending.metadata.deletion_timestamp is not None
    pending.metadata.finalizers = []
    resource.replace_namespaced_resource_claim("gpus", "ml", pending)
    assert fake_api.get_object("ResourceClaim", "gpus", "ml") is None


def test_watch_from_the_list_rv_streams_later_events(fake_api: FakeApiServer):
    """A watch from a list's resourceVersion sees exactly the writes after it, in order."""
    fake_api.put_object(NODE)
    core = kc.CoreV1Api(fake_api.api_client())
    rv = core.list_node().metadata.resource_version
    fake_api.put_object({**NODE, "metadata": {"name": "node-2"}})
    fake_api.put_object({**NODE, "metadata": {**NODE["metadata"], "labels": {"zone": "b"}}})
    fake_api.delete_object("Node", "node-2")
    response = core.list_node(watch=True, resource_version=rv, timeout_seconds=5, _preload_content=False)
    events = _stream_lines(response, 3)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "node-2"),
        ("MODIFIED", "node-1"),
        ("DELETED", "node-2"),
    ]
    assert [e["object"]["metadata"]["resourceVersion"] for e in events] == ["2", "3", "4"]
    assert events[0]["object"]["kind"] == "Node" and events[0]["object"]["apiVersion"] == "v1"


def test_watch_without_rv_starts_with_the_current_objects(fake_api: FakeApiServer):
    """resourceVersion unset or "0": synthetic ADDED events for what exists, as the real server does."""
    fake_api.put_object(NODE)
    core = kc.CoreV1Api(fake_api.api_client())
    response = core.list_node(watch=True, timeout_seconds=5, _preload_content=False)
    assert [e["type"] for e in _stream_lines(response, 1)] == ["ADDED"]


def test_watch_from_a_compacted_rv_gets_410_and_ends(fake_api: FakeApiServer):
    """After compact(), a watch from an older RV gets one ERROR Status 410 (Expired) and the stream ends."""
    fake_api.put_object(NODE)
    fake_api.put_object({**NODE, "metadata": {"name": "node-2"}})
    fake_api.compact()
    core = kc.CoreV1Api(fake_api.api_client())
    response = core.list_node(watch=True, resource_version="1", timeout_seconds=5, _preload_content=False)
    events = _stream_lines(response, 10)
    assert len(events) == 1
    assert events[0]["type"] == "ERROR"
    assert events[0]["object"]["code"] == 410
    assert events[0]["object"]["reason"] == "Expired"
    assert "too old resource version" in events[0]["object"]["message"]
    # The client library's own watch helper turns it into ApiException(410) when timeouts are set.
    with pytest.raises(ApiException) as info:
        for _ in watch.Watch().stream(core.list_node, resource_version="1", timeout_seconds=5):
            pass
    assert info.value.status == 410


def test_bookmarks_carry_the_current_rv_and_stop_while_stalled(fake_api: FakeApiServer):
    """Bookmarks arrive every bookmark_interval; a stalled stream sends nothing until unstalled."""
    fake_api.put_object(NODE)
    core = kc.CoreV1Api(fake_api.api_client())
    response = core.list_node(
        watch=True,
        resource_version="1",
        allow_watch_bookmarks=True,
        timeout_seconds=5,
        _preload_content=False,
    )
    bookmark = _stream_lines(response, 1)[0]
    assert bookmark == {
        "type": "BOOKMARK",
        "object": {"kind": "Node", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}},
    }
    fake_api.stall_watches("Node")
    response = core.list_node(
        watch=True,
        resource_version="1",
        allow_watch_bookmarks=True,
        timeout_seconds=5,
        _preload_content=False,
        _request_timeout=(2, 0.5),
    )
    with pytest.raises(Exception, match="timed out"):
        _stream_lines(response, 1)
    fake_api.unstall("Node")
    response = core.list_node(
        watch=True,
        resource_version="1",
        allow_watch_bookmarks=True,
        timeout_seconds=5,
        _preload_content=False,
    )
    assert _stream_lines(response, 1)[0]["type"] == "BOOKMARK"


def test_timeout_seconds_and_end_watches_close_the_stream(fake_api: FakeApiServer):
    """timeoutSeconds ends a quiet stream; end_watches() ends open ones at once."""
    core = kc.CoreV1Api(fake_api.api_client())
    started = time.monotonic()
    response = core.list_node(watch=True, resource_version="0", timeout_seconds=1, _preload_content=False)
    assert _stream_lines(response, 10) == []
    assert 0.9 <= time.monotonic() - started < 3
    response = core.list_node(watch=True, resource_version="0", timeout_seconds=30, _preload_content=False)
    timer = threading.Timer(0.2, fake_api.end_watches, args=("Node",))
    timer.start()
    started = time.monotonic()
    assert _stream_lines(response, 10) == []
    assert time.monotonic() - started < 3


def test_binding_sets_node_name_once(fake_api: FakeApiServer):
    """pods/binding sets spec.nodeName; binding again is 409; a wrong pod UID is 409."""
    pod = fake_api.put_object(POD)
    core = kc.CoreV1Api(fake_api.api_client())
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "trainer-0", "namespace": "ml", "uid": "not-the-uid"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"},
    }
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod_binding("trainer-0", "ml", binding, _preload_content=False)
    assert info.value.status == 409 and "Precondition failed: UID" in _status(info.value)["message"]
    binding["metadata"]["uid"] = pod["metadata"]["uid"]
    # The real server answers a Status, not a Binding: read it raw.
    response = core.create_namespaced_pod_binding("trainer-0", "ml", binding, _preload_content=False)
    assert response.status == 201 and orjson.loads(response.data)["status"] == "Success"
    assert core.read_namespaced_pod("trainer-0", "ml").spec.node_name == "node-1"
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod_binding("trainer-0", "ml", binding, _preload_content=False)
    assert info.value.status == 409
    assert _status(info.value)["message"] == (
        'Operation cannot be fulfilled on pods/binding "trainer-0": '
        'pod trainer-0 is already assigned to node "node-1"'
    )
    assert ("create", "", "pods", "binding", "ml") in fake_api.request_log()


def test_leases_create_get_replace(fake_api: FakeApiServer):
    """coordination.k8s.io/v1 Leases support the calls leader election makes."""
    coordination = kc.CoordinationV1Api(fake_api.api_client())
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "dra-topology-extender", "namespace": "kube-system"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
    }
    coordination.create_namespaced_lease("kube-system", lease)
    current = coordination.read_namespaced_lease("dra-topology-extender", "kube-system")
    current.spec.holder_identity = "b"
    replaced = coordination.replace_namespaced_lease("dra-topology-extender", "kube-system", current)
    assert replaced.spec.holder_identity == "b"
    assert fake_api.request_log() == [
        ("create", "coordination.k8s.io", "leases", "", "kube-system"),
        ("get", "coordination.k8s.io", "leases", "", "kube-system"),
        ("update", "coordination.k8s.io", "leases", "", "kube-system"),
    ]


def test_device_taint_rules_in_every_client_version_and_unserving(fake_api: FakeApiServer):
    """DeviceTaintRule is served as v1, v1beta2 and v1alpha3 until set_served(False) makes it 404."""
    fake_api.put_object(
        {
            "apiVersion": "resource.k8s.io/v1beta2",
            "kind": "DeviceTaintRule",
            "metadata": {"name": "maintenance"},
            "spec": {
                "deviceSelector": {"driver": "gpu.example.com"},
                "taint": {"key": "k", "effect": "NoSchedule"},
            },
        }
    )
    client = fake_api.api_client()
    for api in (kc.ResourceV1Api(client), kc.ResourceV1beta2Api(client), kc.ResourceV1alpha3Api(client)):
        raw = orjson.loads(api.list_device_taint_rule(_preload_content=False).data)
        assert [i["metadata"]["name"] for i in raw["items"]] == ["maintenance"]
    fake_api.set_served("DeviceTaintRule", False, version="v1")
    with pytest.raises(ApiException) as info:
        kc.ResourceV1Api(client).list_device_taint_rule()
    assert info.value.status == 404
    assert kc.ResourceV1beta2Api(client).list_device_taint_rule().items


def test_fail_next_injects_errors_for_matching_requests_only(fake_api: FakeApiServer):
    """fail_next(n) fails exactly n matching requests with a Status of the given code."""
    core = kc.CoreV1Api(fake_api.api_client())
    fake_api.fail_next(2, 503, verb="list", resource="Node")
    assert core.list_namespace().items == []
    for _ in range(2):
        with pytest.raises(ApiException) as info:
            core.list_node()
        assert info.value.status == 503 and _status(info.value)["reason"] == "ServiceUnavailable"
    assert core.list_node().items == []


def test_on_request_hook_runs_between_read_and_answer(fake_api: FakeApiServer):
    """A hook can change the object under a request: the client's PUT then loses with 409."""
    fake_api.put_object(CLAIM)
    resource = kc.ResourceV1Api(fake_api.api_client())
    claim = resource.read_namespaced_resource_claim("gpus", "ml")
    seen = []

    def allocate_elsewhere(info):
        seen.append((info.verb, info.resource, info.subresource, info.name))
        if info.verb == "update":
            current = fake_api.get_object("ResourceClaim", "gpus", "ml")
            current["status"] = {"allocation": ALLOCATION}
            fake_api.put_object(current)

    fake_api.on_request = allocate_elsewhere
    claim.status = {"allocation": ALLOCATION}
    with pytest.raises(ApiException) as info:
        resource.replace_namespaced_resource_claim_status("gpus", "ml", claim)
    assert info.value.status == 409
    assert seen == [("update", "resourceclaims", "status", "gpus")]


def test_merge_patch_and_unserved_paths(fake_api: FakeApiServer):
    """patch merges a dict body; unknown paths are 404 Status objects."""
    fake_api.put_object(NODE)
    core = kc.CoreV1Api(fake_api.api_client())
    patched = core.patch_node("node-1", {"metadata": {"labels": {"zone": None, "rack": "r1"}}})
    assert patched.metadata.labels == {"rack": "r1"}
    assert fake_api.request_log()[-1] == ("patch", "", "nodes", "", "")
    response = fake_api.api_client().rest_client.pool_manager.request(
        "GET", fake_api.url + "/apis/nope.io/v1/things"
    )
    assert response.status == 404 and orjson.loads(response.data)["reason"] == "NotFound"
