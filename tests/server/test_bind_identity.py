"""Bind checks what it binds (file mode, through HTTP over the sample cluster), and verdicts are
cached by what they depend on.

Issue 12 finding 7: a pod without claims bound to a node that does not exist with `Error: ""`;
a UID seen in filter made bind ignore PodName/PodNamespace (and log the other pod); after 260
other filters, binding an earlier pod failed with the untrue "this extender never saw it"; bind
did not check readiness. Finding 10: the same UID sent with a different claim got the old verdict.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from extender.cluster.sample import sample_objects
from extender.cluster.state import ClusterState
from extender.core.evaluation import PODS_SEEN_SIZE
from extender.pods import parse_pod
from extender.server import make_app
from extender.settings import Settings
from extender.wiring import build_services

NS = "ml-training"
GPU_POD = {
    "metadata": {"name": "gpu-training", "namespace": NS, "uid": "uid-gpu-training"},
    "spec": {"resourceClaims": [{"name": "devices", "resourceClaimName": "gpu-training-devices-vbdcr"}]},
}
NODES = ["h100-node-01", "l40s-node-01", "cpu-node-01"]


def plain_pod(name: str, uid: str, namespace: str = NS) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid}, "spec": {}}


@pytest.fixture
def services() -> tuple[Any, Any]:
    return build_services(Settings(), ClusterState.from_objects(copy.deepcopy(sample_objects())))


@pytest.fixture
async def client(aiohttp_client: Any, services: tuple[Any, Any]) -> Any:
    placement, binder = services
    return await aiohttp_client(
        make_app(Settings(), placement=placement, binder=binder, registry=CollectorRegistry())
    )


async def _filter(client: Any, pod: dict[str, Any], nodes: list[str] = NODES) -> dict[str, Any]:
    resp = await client.post("/filter", data=orjson.dumps({"Pod": pod, "NodeNames": nodes}))
    assert resp.status == 200
    return await resp.json()


async def _bind(client: Any, name: str, namespace: str, uid: str, node: str) -> str:
    body = {"PodName": name, "PodNamespace": namespace, "PodUID": uid, "Node": node}
    resp = await client.post("/bind", data=orjson.dumps(body))
    assert resp.status == 200
    return (await resp.json())["Error"]


def _node_of(services: tuple[Any, Any], name: str, namespace: str = NS) -> str | None:
    pod = services[0].state.get("Pod", name, namespace)
    return None if pod is None else (pod.get("spec") or {}).get("nodeName")


async def test_pod_without_claims_cannot_bind_to_a_node_that_does_not_exist(client, services):
    pod = plain_pod("web-0", "uid-web-0")
    assert (await _filter(client, pod))["Error"] == ""
    error = await _bind(client, "web-0", NS, "uid-web-0", "ghost-node")
    assert error == "node ghost-node does not exist in the cluster state"
    assert _node_of(services, "web-0") is None
    assert await _bind(client, "web-0", NS, "uid-web-0", "cpu-node-01") == ""
    assert _node_of(services, "web-0") == "cpu-node-01"


async def test_bind_with_a_seen_uid_but_another_name_is_refused_naming_both(client, services, caplog):
    assert (await _filter(client, plain_pod("web-a", "uid-shared")))["Error"] == ""
    error = await _bind(client, "web-b", "other-ns", "uid-shared", "cpu-node-01")
    assert "ml-training/web-a" in error and "other-ns/web-b" in error
    assert _node_of(services, "web-a") is None and _node_of(services, "web-b", "other-ns") is None
    assert not [r for r in caplog.records if "bound pod" in r.getMessage()]


async def test_a_pod_filtered_before_many_others_still_binds(client, services):
    """The seen-pods memory outlives a busy scheduler (260 filters in between failed before)."""
    first = plain_pod("early", "uid-early")
    assert (await _filter(client, first))["Error"] == ""
    placement = services[0]
    for i in range(300):  # direct calls: the same memory, without 300 HTTP round trips
        placement.filter(parse_pod(plain_pod(f"other-{i}", f"uid-other-{i}")), ["cpu-node-01"])
    assert await _bind(client, "early", NS, "uid-early", "cpu-node-01") == ""
    assert _node_of(services, "early") == "cpu-node-01"
    assert PODS_SEEN_SIZE >= 4096


async def test_an_unknown_pod_gets_a_true_message(client):
    error = await _bind(client, "never-seen", NS, "uid-never", "cpu-node-01")
    assert error == (
        f"pod {NS}/never-seen (uid uid-never) is not known: it is not in the cluster state and was not "
        f"filtered recently (this extender remembers the last {PODS_SEEN_SIZE} pods it filtered)"
    )


async def test_a_pod_in_the_state_under_another_uid_was_recreated(client, services):
    stored = services[0].state.get("Pod", "notebook-alice", NS)
    assert stored is not None
    error = await _bind(client, "notebook-alice", NS, "uid-new", "cpu-node-01")
    assert "has UID c444bc5b-e1e9-4366-a87a-b6f527a17a20, not uid-new" in error


async def test_bind_before_ready_is_refused(app_client, placement, binder, registry):
    placement.is_ready = False
    client = await app_client()
    body = {"PodName": "p", "PodNamespace": "ns", "PodUID": "u", "Node": "n"}
    resp = await client.post("/bind", data=orjson.dumps(body))
    assert resp.status == 200
    assert (await resp.json())["Error"].startswith("cluster state not ready")
    assert binder.calls == []
    assert registry.get_sample_value("dra_extender_bind_outcomes_total", {"reason": "not_ready"}) == 1


@pytest.mark.parametrize("first_claim", ["gpu-training-devices-vbdcr", "no-such-claim"])
async def test_same_uid_with_another_claim_is_evaluated_afresh(client, first_claim):
    """The evaluation cache key includes the pod's claims: no stale verdict for a changed pod."""
    good, bad = copy.deepcopy(GPU_POD), copy.deepcopy(GPU_POD)
    bad["spec"]["resourceClaims"][0]["resourceClaimName"] = "no-such-claim"
    pods = [good, bad] if first_claim != "no-such-claim" else [bad, good]
    answers = [await _filter(client, pod) for pod in pods]
    by_claim = {
        pod["spec"]["resourceClaims"][0]["resourceClaimName"]: a for pod, a in zip(pods, answers, strict=True)
    }
    assert by_claim["gpu-training-devices-vbdcr"]["NodeNames"] == ["h100-node-01"]
    assert by_claim["no-such-claim"]["NodeNames"] == []
    assert set(by_claim["no-such-claim"]["FailedAndUnresolvableNodes"]) == set(NODES)


async def test_bind_queued_behind_a_busy_worker_gives_up_before_it_starts(aiohttp_client):
    """A bind waits for the worker at most filter_timeout_seconds and then answers with an error,
    having changed nothing; a bind is never abandoned once started (it writes the state)."""
    settings = Settings(filter_timeout_seconds=0.3)
    placement, binder = build_services(settings, ClusterState.from_objects(copy.deepcopy(sample_objects())))
    client = await aiohttp_client(make_app(settings, placement=placement, binder=binder))
    assert (await _filter(client, plain_pod("web-q", "uid-web-q")))["Error"] == ""
    gate = threading.Event()
    busy = asyncio.ensure_future(placement.worker.run(gate.wait, 10.0))
    error = await _bind(client, "web-q", NS, "uid-web-q", "cpu-node-01")
    assert error.startswith(f"bind of pod {NS}/web-q did not start within 0.3 s")
    assert placement.state.get("Pod", "web-q", NS) is None  # nothing was written
    gate.set()
    await busy
    assert await _bind(client, "web-q", NS, "uid-web-q", "cpu-node-01") == ""
    assert (placement.state.get("Pod", "web-q", NS) or {}).get("spec", {}).get("nodeName") == "cpu-node-01"
