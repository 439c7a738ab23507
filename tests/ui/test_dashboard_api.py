"""The dashboard's JSON API over the real services on the embedded sample cluster.

Checks what the page shows (fleet totals, a node's drawing with MIG partitions inside their GPU
and the claims holding devices, the decisions after filter/prioritize/bind, explain), that the
dashboard changes nothing in the state, and that it is absent unless switched on.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from prometheus_client import CollectorRegistry

from extender.cluster.sample import sample_objects
from extender.cluster.state import ClusterState
from extender.explaining import load_pods
from extender.server import make_app
from extender.settings import Settings
from extender.ui import add_dashboard
from extender.ui.routes import CONTENT_SECURITY_POLICY
from extender.wiring import build_services

PODS = load_pods(Path(__file__).resolve().parents[1] / "data" / "pipeline_pods.yaml")
ALL_NODES = [
    "h100-node-01", "h100-node-02", "l40s-node-01", "a100-mig-node-01", "tpu-v5e-node-01",
    "gaudi2-node-01", "mi300x-node-01", "inf2-node-01", "fpga-node-01", "cpu-node-01",
    *(f"gb200-rack-{rack}-{tray:02d}" for rack in "ab" for tray in range(1, 5)),
]  # fmt: skip


def _pod(name: str) -> dict[str, Any]:
    return copy.deepcopy(next(p for p in PODS if p["metadata"]["name"] == name))


@pytest.fixture
def services() -> tuple[ClusterState, Any, Any]:
    state = ClusterState.from_objects(copy.deepcopy(sample_objects()))
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


async def test_fleet_summary_counts_every_node_and_held_device(client, services) -> None:
    _, placement, _ = services
    fleet = await _get(client, "/ui/api/fleet")
    index = placement.index()
    _, free = placement.allocated_state()
    assert [n["name"] for n in fleet["nodes"]] == ALL_NODES
    assert fleet["totals"] == {"nodes": 18, "devices": index.num_rows, "held": int((~free).sum())}
    by_name = {n["name"]: n for n in fleet["nodes"]}
    assert by_name["h100-node-02"]["held"] == 2  # gpu-0/1 held by llm-finetune-0 (tests/data/README.md)
    assert by_name["cpu-node-01"]["devices"] == 0
    kinds = {k["kind"]: k for k in fleet["kinds"]}
    assert kinds["a3-highgpu-8g"]["nodes"] == 2  # both H100 nodes share their instance type
    assert sum(k["devices"] for k in kinds.values()) == index.num_rows
    assert all(k["free"] == k["devices"] - k["held"] for k in kinds.values())


async def test_node_drawing_nests_mig_partitions_in_their_gpu_and_names_holders(client) -> None:
    node = await _get(client, "/ui/api/nodes/a100-mig-node-01")
    devices = [d for numa in node["numa"] for root in numa["pcie"] for d in root["devices"]]
    gpus = {d["name"]: d for d in devices}
    assert set(gpus) == {"gpu-0", "gpu-1"}  # partitions are drawn inside, not beside, their GPU
    partitions = {p["name"]: p for p in gpus["gpu-0"]["partitions"]}
    assert partitions["gpu-0-mig-1g10gb-0"]["claim"] == "ml-training/notebook-alice-mig"
    assert partitions["gpu-0-mig-1g10gb-0"]["held"] is True
    assert partitions["gpu-0-mig-1g10gb-1"]["held"] is False
    assert all(p["parent"] == "gpu-0" for p in partitions.values())
    counters = {c["set"]: c for c in node["counters"]}
    used = {c["name"]: c["used"] for c in counters["gpu-0-counter-set"]["counters"]}
    assert used["memory"] == "10Gi" and used["memory-slice-0"] == "1"  # what the held 1g.10gb consumes
    assert {c["name"]: c["used"] for c in counters["gpu-1-counter-set"]["counters"]}["memory"] == "0"


async def test_node_drawing_groups_by_numa_and_pcie_root(client) -> None:
    node = await _get(client, "/ui/api/nodes/h100-node-01")
    assert len(node["numa"]) == 2
    for numa in node["numa"]:
        for root in numa["pcie"]:
            assert all(d["numa"] == numa["id"] and d["pcie"] == root["id"] for d in root["devices"])
    nics = [
        d for numa in node["numa"] for r in numa["pcie"] for d in r["devices"] if d["driver"] == "dra.net"
    ]
    assert nics and all(n["pcie"] != "-" for n in nics)


async def test_unknown_node_is_404(client) -> None:
    response = await client.get("/ui/api/nodes/no-such-node")
    assert response.status == 404
    assert "no-such-node" in await response.text()


async def test_decisions_record_filter_prioritize_and_bind(client) -> None:
    pod = _pod("gpu-training")
    args = orjson.dumps({"Pod": pod, "NodeNames": ALL_NODES})
    assert (await client.post("/filter", data=args)).status == 200
    assert (await client.post("/prioritize", data=args)).status == 200
    meta = pod["metadata"]
    bind = {
        "PodName": meta["name"],
        "PodNamespace": meta["namespace"],
        "PodUID": meta["uid"],
        "Node": "h100-node-02",
    }
    assert (await (await client.post("/bind", data=orjson.dumps(bind))).json())["Error"] == ""
    listed = (await _get(client, "/ui/api/decisions"))["decisions"]
    assert [d["verb"] for d in listed] == ["bind", "prioritize", "filter"]
    filtered = await _get(client, f"/ui/api/decisions/{listed[2]['seq']}")
    assert (filtered["passed"], filtered["unresolvable"]) == (2, 16)
    rows = {row["name"]: row for row in filtered["nodes"]}
    assert rows["l40s-node-01"]["outcome"] == "unresolvable"
    assert "h100.nvidia.com" in rows["l40s-node-01"]["reason"]
    assert sorted(n for n, row in rows.items() if row["outcome"] == "passed") == [
        "h100-node-01",
        "h100-node-02",
    ]
    assert len(rows) == len(ALL_NODES) and filtered["left_out"] == 0
    ranked = await _get(client, f"/ui/api/decisions/{listed[1]['seq']}")
    best = ranked["nodes"][0]
    assert ranked["node"] == best["name"] == "h100-node-02" and best["score"] == 10
    assert set(best["terms"]) == {"score", "locality", "fragmentation", "packing"}
    assert [row["score"] for row in ranked["nodes"]] == sorted(
        (row["score"] for row in ranked["nodes"]), reverse=True
    )
    assert listed[0]["node"] == "h100-node-02" and listed[0]["error"] == ""
    status = await _get(client, "/ui/api/status")
    assert status["last_decision"] == listed[0]["seq"]


async def test_dashboard_reads_never_change_the_state(client, services) -> None:
    state, placement, _ = services
    before = (state.generation, placement.generation(), len(placement.assumed))
    for path in (
        "/ui",
        "/ui/api/status",
        "/ui/api/fleet",
        "/ui/api/nodes/a100-mig-node-01",
        "/ui/api/pending",
    ):
        assert (await client.get(path)).status == 200
    pod = yaml.safe_dump(_pod("mig-notebook"))
    answer = await (await client.post("/ui/api/explain", data=pod)).json()
    assert "a100-mig-node-01: PASSED" in answer["report"]
    assert (state.generation, placement.generation(), len(placement.assumed)) == before


@pytest.mark.parametrize(
    ("body", "status", "text"),
    [
        ("key: [unclosed", 400, "not YAML or JSON"),
        ("[1, 2]", 400, "paste one Pod object"),
        ('{"kind": "Node", "metadata": {}}', 400, "paste one Pod object"),
        ('{"metadata": [], "spec": {}}', 400, "metadata and spec"),
        ('{"pending": "nobody/nothing"}', 400, "no pending pod nobody/nothing"),
    ],
)
async def test_explain_rejects_what_is_not_a_pod(client, body: str, status: int, text: str) -> None:
    response = await client.post("/ui/api/explain", data=body)
    assert response.status == status
    assert text in (await response.json())["error"]


async def test_page_is_self_contained(client) -> None:
    response = await client.get("/ui")
    assert response.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    page = await response.text()
    for asset in ("/ui/static/dashboard.js", "/ui/static/dashboard.css"):
        assert asset in page
        body = await (await client.get(asset)).text()
        assert "http://" not in body and "https://" not in body  # nothing fetched from elsewhere
    assert "http://" not in page and "https://" not in page
    assert (await client.get("/ui/static/../routes.py")).status == 404


async def test_no_dashboard_unless_switched_on(aiohttp_client, services) -> None:
    _, placement, binder = services
    app = make_app(Settings(), placement=placement, binder=binder, registry=CollectorRegistry())
    client = await aiohttp_client(app)
    assert (await client.get("/ui")).status == 404
    assert (await client.get("/ui/api/fleet")).status == 404


def test_holders_follow_the_assumed_entry_rule() -> None:
    """An assumed entry whose claim visibly holds other devices still holds its own (claims.py)."""
    from extender.allocator.model import DeviceID
    from extender.ui.fleet import holders

    def allocation(device: str) -> dict[str, Any]:
        return {"devices": {"results": [{"request": "r", "driver": "d", "pool": "p", "device": device}]}}

    meta = {"name": "c", "namespace": "ns", "uid": "u"}
    claim = {"metadata": meta, "status": {"allocation": allocation("a")}}
    assert holders([claim], {"u": allocation("a")}) == {DeviceID("d", "p", "a"): ("ns/c", False)}
    assert holders([claim], {"u": allocation("b")}) == {
        DeviceID("d", "p", "a"): ("ns/c", False),
        DeviceID("d", "p", "b"): ("ns/c", True),
    }
