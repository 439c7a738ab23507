"""The dashboard and a pod asking for an extended resource backed by DRA (KEP-5004), file mode.

Scope: on the sample cluster (h100.nvidia.com maps `example.com/gpu`; `l40s-node-01` advertises
it through a device plugin):
- the prioritize decision keeps the score terms of every node scored, though the pod is
  evaluated once per kind of node (one evaluation for the DRA nodes, one for the device-plugin
  node);
- the bind decision names the claim bind created (its real name, not `<extended-resources>`)
  and its devices, as the state holds them, and the node drawing shows that claim on them;
- the pending list offers an unbound extended-resource pod, and explain (pasted or pending)
  prints the generated claim, the device-plugin node and the report the CLI prints.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
import yaml
from prometheus_client import CollectorRegistry

from extender.cluster.sample import sample_objects
from extender.cluster.state import ClusterState
from extender.core.extended import CLAIM_ANNOTATION
from extender.explaining import explain
from extender.server import make_app
from extender.settings import Settings
from extender.ui import add_dashboard
from extender.wiring import build_services
from tests.ui.test_dashboard_api import ALL_NODES, _pod

GPU = "example.com/gpu"


def _gpu_pod(name: str = "gpu-job", count: str = "2") -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"{name}-uid"},
        "spec": {"containers": [{"name": "main", "image": "busybox", "resources": {"limits": {GPU: count}}}]},
    }


def _state() -> ClusterState:
    state = ClusterState.from_objects(copy.deepcopy(sample_objects()))
    state.upsert(_gpu_pod("waiting-gpu-job", "1"))  # unbound: the pending list offers it
    return state


@pytest.fixture
def services() -> tuple[ClusterState, Any, Any]:
    state = _state()
    placement, binder = build_services(Settings(), state)
    return state, placement, binder


@pytest.fixture
async def client(aiohttp_client, services):
    _, placement, binder = services
    app = make_app(Settings(), placement=placement, binder=binder, registry=CollectorRegistry())
    add_dashboard(app, placement)
    return await aiohttp_client(app)


async def _get(client, path: str) -> Any:
    response = await client.get(path)
    assert response.status == 200, await response.text()
    return await response.json()


async def test_decisions_of_an_extended_resource_pod(client, services) -> None:
    state, _, _ = services
    pod = _gpu_pod()
    args = orjson.dumps({"Pod": pod, "NodeNames": ALL_NODES})
    filtered = await (await client.post("/filter", data=args)).json()
    assert set(filtered["NodeNames"]) == {"h100-node-01", "h100-node-02", "l40s-node-01"}
    answer = await (await client.post("/prioritize", data=args)).json()
    best = max(answer, key=lambda s: s["Score"])["Host"]
    bind = {"PodName": "gpu-job", "PodNamespace": "default", "PodUID": "gpu-job-uid", "Node": best}
    assert (await (await client.post("/bind", data=orjson.dumps(bind))).json())["Error"] == ""
    listed = (await _get(client, "/ui/api/decisions"))["decisions"]
    assert [d["verb"] for d in listed] == ["bind", "prioritize", "filter"]

    filter_rows = {
        r["name"]: r for r in (await _get(client, f"/ui/api/decisions/{listed[2]['seq']}"))["nodes"]
    }
    assert (
        "claim default/<extended-resources>, request container-0-request-0"
        in filter_rows["cpu-node-01"]["reason"]
    )

    ranked = {r["name"]: r for r in (await _get(client, f"/ui/api/decisions/{listed[1]['seq']}"))["nodes"]}
    # Both H100 nodes were scored (by the DRA nodes' evaluation, not the last one reported).
    for name in ("h100-node-01", "h100-node-02"):
        assert set(ranked[name]["terms"]) == {"score", "locality", "fragmentation", "packing"}
    assert ranked["l40s-node-01"]["score"] == 0 and ranked["l40s-node-01"]["terms"] is None

    bound = await _get(client, f"/ui/api/decisions/{listed[0]['seq']}")
    [made] = [
        x
        for x in state.list("ResourceClaim")
        if (x["metadata"].get("annotations") or {}).get(CLAIM_ANNOTATION) == "true"
    ]
    results = made["status"]["allocation"]["devices"]["results"]
    assert bound["node"] == best and bound["error"] == ""
    assert bound["claims"] == [
        {
            "claim": f"default/{made['metadata']['name']}",
            "created": True,
            "devices": [f"{r['driver']}/{r['pool']}/{r['device']}" for r in results],
        }
    ]
    assert made["metadata"]["name"].startswith("gpu-job-extended-resources-") and len(results) == 2

    drawing = await _get(client, f"/ui/api/nodes/{best}")
    held = {
        d["name"]: d["claim"]
        for numa in drawing["numa"]
        for root in numa["pcie"]
        for d in root["devices"]
        if d["claim"] == f"default/{made['metadata']['name']}"
    }
    assert sorted(held) == sorted(r["device"] for r in results)


async def test_the_bind_decision_of_a_plain_claim_names_it(client, services) -> None:
    """Not only created claims: a pod's own claim is listed with its devices, not marked created."""
    pod = _pod("gpu-training")
    args = orjson.dumps({"Pod": pod, "NodeNames": ["h100-node-01"]})
    assert (await client.post("/filter", data=args)).status == 200
    meta = pod["metadata"]
    bind = {
        "PodName": meta["name"],
        "PodNamespace": meta["namespace"],
        "PodUID": meta["uid"],
        "Node": "h100-node-01",
    }
    assert (await (await client.post("/bind", data=orjson.dumps(bind))).json())["Error"] == ""
    listed = (await _get(client, "/ui/api/decisions"))["decisions"]
    bound = await _get(client, f"/ui/api/decisions/{listed[0]['seq']}")
    written = services[0].get("ResourceClaim", "gpu-training-devices-vbdcr", "ml-training")
    results = written["status"]["allocation"]["devices"]["results"]
    assert bound["claims"] == [
        {
            "claim": "ml-training/gpu-training-devices-vbdcr",
            "created": False,
            "devices": [f"{r['driver']}/{r['pool']}/{r['device']}" for r in results],
        }
    ]


async def test_explain_shows_the_generated_claim_as_the_cli_does(client, services) -> None:
    _, placement, _ = services
    assert "default/waiting-gpu-job" in (await _get(client, "/ui/api/pending"))["pods"]
    for body, pod in (
        (yaml.safe_dump(_gpu_pod()), _gpu_pod()),
        (orjson.dumps({"pending": "default/waiting-gpu-job"}).decode(), _gpu_pod("waiting-gpu-job", "1")),
    ):
        response = await client.post("/ui/api/explain", data=body)
        answer = await response.json()
        assert response.status == 200, answer
        report = answer["report"]
        assert (
            f"DRA serves {GPU}: claim default/<extended-resources>, request container-0-request-0" in report
        )
        assert f"on 1 node(s) a device plugin advertises {GPU}" in report
        assert report == explain(_state(), pod, features=placement.features)
