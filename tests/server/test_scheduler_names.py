"""`scheduler_names`: pods of other profiles pass filter untouched, score 0, and bind allocates nothing.

Issue 22 item 6: the setting was accepted and ignored, so the extender filtered, ranked and bound
the pods of every profile. The HTTP side is tested with the placement double (it must not be
asked at all); bind in file mode over the sample cluster (extender/binder.py).
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from extender.cluster.sample import sample_objects
from extender.cluster.state import ClusterState
from extender.pods import DEFAULT_SCHEDULER, parse_pod
from extender.server import make_app
from extender.settings import Settings
from extender.wiring import build_services

OURS = "dra-topology-scheduler"
NODE_NAMES = ["gpu-node-01", "gpu-node-02", "gpu-node-03"]
ONLY_OURS = Settings(scheduler_names=(OURS,))


def _pod(scheduler: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"resourceClaims": [{"name": "gpu", "resourceClaimName": "trainer-0-gpu"}]}
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return {"metadata": {"name": "trainer-0", "namespace": "ml", "uid": "u-1"}, "spec": spec}


def _args(pod: dict[str, Any], **nodes: Any) -> bytes:
    return orjson.dumps({"Pod": pod, "NodeNames": NODE_NAMES, **nodes})


def test_a_pod_without_scheduler_name_is_the_default_schedulers():
    """The API server defaults spec.schedulerName to default-scheduler; the record reads the same."""
    assert parse_pod(_pod(None)).scheduler_name == DEFAULT_SCHEDULER == "default-scheduler"
    assert parse_pod(_pod("")).scheduler_name == DEFAULT_SCHEDULER
    assert parse_pod(_pod(OURS)).scheduler_name == OURS


async def test_filter_passes_every_node_for_another_profile_without_asking_placement(app_client, placement):
    """A pod of a profile not in scheduler_names passes on every node; placement is not called."""
    client = await app_client(ONLY_OURS)
    resp = await client.post("/filter", data=_args(_pod("default-scheduler")))
    assert resp.status == 200
    assert await resp.json() == {
        "Nodes": None,
        "NodeNames": NODE_NAMES,
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }
    assert placement.calls == []


async def test_filter_of_another_profile_echoes_a_node_list_and_does_not_wait_for_readiness(
    app_client, placement
):
    """Not ready does not matter for a pod the extender does not place; a NodeList comes back whole."""
    placement.is_ready = False
    items = [{"metadata": {"name": n}} for n in NODE_NAMES]
    client = await app_client(ONLY_OURS)
    body = orjson.dumps({"Pod": _pod(None), "Nodes": {"metadata": {}, "items": items}, "NodeNames": None})
    answer = await (await client.post("/filter", data=body)).json()
    assert answer["Error"] == "" and answer["Nodes"] == {"metadata": {}, "items": items}
    assert placement.calls == []


async def test_the_call_line_says_why_the_pod_was_skipped(app_client, caplog):
    """The one info line per call names the profile, so a skipped pod is not a silent pass."""
    client = await app_client(ONLY_OURS)
    with caplog.at_level(logging.INFO, logger="extender.server"):
        await client.post("/filter", data=_args(_pod("default-scheduler")))
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("filter ")]
    assert len(lines) == 1 and 'skipped="profile default-scheduler not in scheduler_names"' in lines[0]


async def test_prioritize_scores_0_for_another_profile(app_client, placement):
    """Every node scores 0 for a pod of another profile, and placement is not asked."""
    client = await app_client(ONLY_OURS)
    resp = await client.post("/prioritize", data=_args(_pod("default-scheduler")))
    assert resp.status == 200
    assert await resp.json() == [{"Host": n, "Score": 0} for n in NODE_NAMES]
    assert placement.calls == []


async def test_pods_of_a_listed_profile_are_placed(app_client, placement):
    """A pod whose schedulerName is listed goes to placement for filter and prioritize."""
    client = await app_client(ONLY_OURS)
    await client.post("/filter", data=_args(_pod(OURS)))
    await client.post("/prioritize", data=_args(_pod(OURS)))
    assert [verb for verb, _, _ in placement.calls] == ["filter", "prioritize"]


@pytest.mark.parametrize("scheduler", [None, "default-scheduler", OURS, "anything"])
async def test_empty_scheduler_names_places_every_profile(app_client, placement, scheduler):
    """The default (empty) places the pods of every profile, as the shipped configurations need."""
    client = await app_client(Settings())
    await client.post("/filter", data=_args(_pod(scheduler)))
    assert [verb for verb, _, _ in placement.calls] == ["filter"]


async def test_scheduler_name_of_the_wrong_type_is_a_400(app_client, placement):
    """spec.schedulerName is read now, so a non-string is refused naming the field."""
    client = await app_client(ONLY_OURS)
    resp = await client.post("/filter", data=_args(_pod(7)))  # type: ignore[arg-type]
    assert resp.status == 400
    assert "Pod.spec.schedulerName" in (await resp.json())["error"]


# ------------------------------------------------------------------ bind (file mode, sample cluster)
NS = "ml-training"
CLAIM = "gpu-training-devices-vbdcr"  # pending in the sample: 4 H100s plus a NIC


def _state_pod(name: str, scheduler: str | None, claims: list[dict[str, str]]) -> dict[str, Any]:
    pod = _pod(scheduler)
    pod["kind"], pod["apiVersion"] = "Pod", "v1"
    pod["metadata"] = {"name": name, "namespace": NS, "uid": f"uid-{name}"}
    pod["spec"]["resourceClaims"] = claims
    pod["spec"]["containers"] = [{"name": "main", "image": "busybox"}]
    return pod


async def _served(aiohttp_client: Any, settings: Settings, *pods: dict[str, Any]) -> tuple[Any, Any]:
    state = ClusterState.from_objects([*copy.deepcopy(sample_objects()), *pods])
    placement, binder = build_services(settings, state)
    app = make_app(settings, placement=placement, binder=binder, registry=CollectorRegistry())
    return await aiohttp_client(app), state


async def _bind(client: Any, name: str, node: str = "h100-node-01") -> str:
    body = {"PodName": name, "PodNamespace": NS, "PodUID": f"uid-{name}", "Node": node}
    resp = await client.post("/bind", data=orjson.dumps(body))
    assert resp.status == 200
    return str((await resp.json())["Error"])


async def test_bind_refuses_to_allocate_for_another_profile(aiohttp_client):
    """A pending claim of a pod of another profile is not allocated: bind refuses, naming the setting."""
    pod = _state_pod("trainer", "default-scheduler", [{"name": "devices", "resourceClaimName": CLAIM}])
    client, state = await _served(aiohttp_client, ONLY_OURS, pod)
    error = await _bind(client, "trainer")
    assert "schedulerName default-scheduler" in error and "scheduler_names" in error
    assert f"claim {NS}/{CLAIM} is not allocated" in error
    assert "allocation" not in (state.get("ResourceClaim", CLAIM, NS).get("status") or {})
    assert "nodeName" not in state.get("Pod", "trainer", NS)["spec"]


async def test_bind_of_the_same_pod_allocates_when_its_profile_is_listed(aiohttp_client):
    """The control for the refusal above: listed (or with the default), the claim is allocated."""
    pod = _state_pod("trainer", OURS, [{"name": "devices", "resourceClaimName": CLAIM}])
    client, state = await _served(aiohttp_client, ONLY_OURS, pod)
    assert await _bind(client, "trainer") == ""
    assert state.get("ResourceClaim", CLAIM, NS)["status"]["allocation"]
    assert state.get("Pod", "trainer", NS)["spec"]["nodeName"] == "h100-node-01"


async def test_bind_still_binds_a_pod_of_another_profile_with_nothing_to_allocate(aiohttp_client):
    """The extender is the scheduler's only binder: a pod of another profile is bound all the same."""
    pod = _state_pod("web", "default-scheduler", [])
    client, state = await _served(aiohttp_client, ONLY_OURS, pod)
    assert await _bind(client, "web", node="cpu-node-01") == ""
    assert state.get("Pod", "web", NS)["spec"]["nodeName"] == "cpu-node-01"
