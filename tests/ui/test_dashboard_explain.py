"""The dashboard's explain: against the live placement, one at a time, agreeing with the verbs.

Scope (issue 22, items 4, 5 and 9): explain reads the live index (no new Placement or index),
leaves no trace the verbs would see, refuses a second explain while one runs (429), prints the
verdicts /filter gives and the priorities /prioritize gives for a gang member under non-default
gang settings, stops at `filter_timeout_seconds`, and answers a deeply nested paste with 400.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from prometheus_client import CollectorRegistry

from extender.cluster.sample import sample_objects
from extender.cluster.state import ClusterState
from extender.core import view
from extender.explaining import MAX_NESTING, load_pods
from extender.server import make_app
from extender.settings import Settings
from extender.ui import add_dashboard, routes
from extender.wiring import build_services

DATA = Path(__file__).resolve().parents[1] / "data"
PODS = load_pods(DATA / "pipeline_pods.yaml")
GANG = load_pods(DATA / "gang_pods.yaml")


def _pod(name: str) -> dict[str, Any]:
    return copy.deepcopy(next(p for p in PODS if p["metadata"]["name"] == name))


async def _client(aiohttp_client: Any, settings: Settings) -> tuple[Any, Any]:
    state = ClusterState.from_objects(copy.deepcopy(sample_objects()))
    placement, binder = build_services(settings, state)
    app = make_app(settings, placement=placement, binder=binder, registry=CollectorRegistry())
    add_dashboard(app, placement)
    return await aiohttp_client(app), placement


async def _explain(client: Any, pod: dict[str, Any]) -> str:
    response = await client.post("/ui/api/explain", data=yaml.safe_dump(pod))
    answer = await response.json()
    assert response.status == 200, answer
    return str(answer["report"])


def _verdicts(report: str) -> dict[str, tuple[str, str, int | None]]:
    """node -> (STATUS, reason, priority) from explain's report."""
    out: dict[str, tuple[str, str, int | None]] = {}
    node = ""
    for line in report.splitlines():
        if line.startswith("  ") and not line.startswith("   ") and ": " in line:
            name, _, rest = line.strip().partition(": ")
            status, _, reason = rest.partition(": ")
            if status in ("PASSED", "FAILED", "UNRESOLVABLE"):
                node = name
                out[node] = (status, reason, None)
        elif line.strip().startswith("priority ") and node:
            priority = int(line.strip().removeprefix("priority ").split("/", 1)[0])
            out[node] = (out[node][0], out[node][1], priority)
    return out


async def test_explain_reads_the_live_index_and_leaves_no_trace(aiohttp_client, monkeypatch) -> None:
    client, placement = await _client(aiohttp_client, Settings())
    builds = 0
    build_index = view.build_index

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal builds
        builds += 1
        return build_index(*args, **kwargs)

    monkeypatch.setattr(view, "build_index", counting)
    cached = len(placement.evaluations)
    pod = _pod("gpu-training")
    report = await _explain(client, pod)
    assert "h100-node-02: PASSED" in report and "cpu-node-01: UNRESOLVABLE" in report
    assert builds == 0  # the old explain built a Placement and its index per call
    assert len(placement.evaluations) == cached  # its evaluation is its own, not in the verbs' cache
    assert placement.seen_pod(pod["metadata"]["uid"]) is None  # bind does not learn the pod from it


async def test_a_second_explain_while_one_runs_is_refused_with_429(aiohttp_client) -> None:
    client, placement = await _client(aiohttp_client, Settings())
    release = threading.Event()
    placement.worker.call_soon_threadsafe(release.wait, 30)  # hold the worker: the first explain waits
    body = yaml.safe_dump(_pod("gpu-training"))
    first = asyncio.ensure_future(client.post("/ui/api/explain", data=body))
    gate = client.app[routes._EXPLAIN_GATE_KEY]
    try:
        for _ in range(500):  # until the first explain has started (it then waits for the worker)
            if gate.busy:
                break
            await asyncio.sleep(0.01)
        second = await asyncio.wait_for(client.post("/ui/api/explain", data=body), timeout=5)
        assert second.status == 429 and second.headers["Retry-After"] == "1"
        assert "another explain is running" in (await second.json())["error"]
        assert not first.done()
    finally:
        release.set()
    answer = await asyncio.wait_for(first, timeout=60)
    assert answer.status == 200 and "h100-node-02: PASSED" in (await answer.json())["report"]
    third = await client.post("/ui/api/explain", data=body)  # the gate is open again
    assert third.status == 200


async def test_an_explain_the_busy_worker_never_reaches_is_503(aiohttp_client, monkeypatch) -> None:
    client, placement = await _client(aiohttp_client, Settings())
    monkeypatch.setattr(routes, "_READ_TIMEOUT", 0.2)
    release = threading.Event()
    placement.worker.call_soon_threadsafe(release.wait, 30)
    try:
        response = await asyncio.wait_for(
            client.post("/ui/api/explain", data=yaml.safe_dump(_pod("gpu-training"))), timeout=10
        )
    finally:
        release.set()
    assert response.status == 503
    assert "did not finish within 0.2 s" in (await response.json())["error"]
    assert (await client.post("/ui/api/explain", data=yaml.safe_dump(_pod("gpu-training")))).status == 200


@pytest.mark.parametrize(
    "settings",
    [Settings(gang_weight=0.0), Settings(gang_weight=10.0, gang_filter_other_cliques=True)],
    ids=["no-gang-term", "strong-gang-term-and-clique-filter"],
)
async def test_explain_agrees_with_filter_and_prioritize_for_a_gang_member(
    aiohttp_client, settings: Settings
) -> None:
    """With a member bound in rack a, the next member's verdicts and priorities in explain are
    /filter's and /prioritize's (the old explain used default gang settings of its own)."""
    client, placement = await _client(aiohttp_client, settings)
    nodes = list(placement.index().node_names)
    first, second = copy.deepcopy(GANG[0]), copy.deepcopy(GANG[1])
    assert (await client.post("/filter", data=orjson.dumps({"Pod": first, "NodeNames": nodes}))).status == 200
    meta = first["metadata"]
    bind = {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"]}
    answer = await client.post("/bind", data=orjson.dumps({**bind, "Node": "gb200-rack-a-02"}))
    assert (await answer.json())["Error"] == ""

    filtered = await (
        await client.post("/filter", data=orjson.dumps({"Pod": second, "NodeNames": nodes}))
    ).json()
    passed = filtered["NodeNames"]
    asked = orjson.dumps({"Pod": second, "NodeNames": passed})
    priorities = {s["Host"]: s["Score"] for s in await (await client.post("/prioritize", data=asked)).json()}
    explained = _verdicts(await _explain(client, second))

    assert sorted(n for n, v in explained.items() if v[0] == "PASSED") == sorted(passed)
    assert {n: explained[n][2] for n in passed} == priorities
    refused = {n: v[1] for n, v in explained.items() if v[0] == "UNRESOLVABLE"}
    assert refused == filtered["FailedAndUnresolvableNodes"]
    if settings.gang_filter_other_cliques:
        assert all(n.startswith("gb200-rack-a-") for n in passed)  # the clique rule bit
    else:
        assert set(priorities.values()) == {10}  # identical trays tie without the gang term


async def test_explain_stops_at_filter_timeout_seconds(aiohttp_client) -> None:
    client, _ = await _client(aiohttp_client, Settings(filter_timeout_seconds=1e-6))
    report = await _explain(client, _pod("gpu-training"))
    assert "  error: " in report and "PASSED" not in report


DEEP = {
    "flow-lists": "[" * 50_000 + "]" * 50_000,
    "json-objects": '{"a": ' * 50_000 + "1" + "}" * 50_000,
    "block-sequences": "- " * 50_000 + "x",
    "brackets-in-strings": "".join('["' + "]" * 5 + '", ' for _ in range(5_000)) + "1" + "]" * 5_000,
    "indented-mappings": "".join("  " * i + "a:\n" for i in range(150)) + "  " * 150 + "b: 1\n",
    "unclosed": "[" * 500_000,
}


@pytest.mark.parametrize("text", list(DEEP.values()), ids=list(DEEP))
async def test_deeply_nested_pod_text_is_a_400_at_once(aiohttp_client, text: str) -> None:
    client, _ = await _client(aiohttp_client, Settings())
    started = time.perf_counter()
    response = await client.post("/ui/api/explain", data=text)
    elapsed = time.perf_counter() - started
    assert response.status == 400
    assert f"nested deeper than {MAX_NESTING} levels" in (await response.json())["error"]
    assert elapsed < 2.0  # PyYAML alone spends 2.5 s on 2,000 levels of `[` before failing
