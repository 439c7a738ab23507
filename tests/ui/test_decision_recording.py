"""The dashboard's decision record: it never holds a verb back, and it is bounded by size.

Scope: the recording middleware and `DecisionLog` over the real services on the embedded sample
(issue 22, items 3 and 4): prioritize answers without a second job on the worker (its score terms
come from its own evaluation), and what the last 50 decisions keep does not grow with the number
or the length of the node names a call sends.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from extender.cluster.sample import sample_objects
from extender.cluster.state import ClusterState
from extender.explaining import load_pods
from extender.server import make_app
from extender.settings import Settings
from extender.ui import add_dashboard
from extender.ui.decisions import MAX_NAME, MAX_ROWS, DecisionLog, VerbsInFlight, record_call
from extender.wiring import build_services

PODS = load_pods(Path(__file__).resolve().parents[1] / "data" / "pipeline_pods.yaml")
H100 = ["h100-node-01", "h100-node-02", "l40s-node-01", "cpu-node-01"]


def _pod(name: str) -> dict[str, Any]:
    return copy.deepcopy(next(p for p in PODS if p["metadata"]["name"] == name))


@pytest.fixture
def placement() -> Any:
    state = ClusterState.from_objects(copy.deepcopy(sample_objects()))
    return build_services(Settings(), state)


@pytest.fixture
async def client(aiohttp_client, placement):
    services, binder = placement
    app = make_app(Settings(), placement=services, binder=binder, registry=CollectorRegistry())
    decisions = add_dashboard(app, services)
    test_client = await aiohttp_client(app)
    test_client.decisions = decisions
    return test_client


def _deep_size(root: object) -> int:
    """Bytes held by an object graph (containers, slotted objects and their values), each once."""
    seen: set[int] = set()
    stack = [root]
    total = 0
    while stack:
        item = stack.pop()
        if id(item) in seen or item is None or isinstance(item, bool | type):
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset) or type(item).__name__ == "deque":
            stack.extend(item)
        elif dataclasses.is_dataclass(item):
            stack.extend(getattr(item, f.name) for f in dataclasses.fields(item))
        elif hasattr(item, "__dict__"):
            stack.append(vars(item))
    return total


async def test_prioritize_answers_while_the_worker_is_busy_with_later_work(client, placement) -> None:
    """The answer does not wait for a job queued on the worker after its own: the old recording
    asked the worker for score terms and so answered only after whatever was queued meanwhile."""
    services, _ = placement
    release = threading.Event()
    original = services.prioritize
    jobs = 0
    run = services.worker.run

    async def counting_run(fn: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal jobs
        jobs += 1
        return await run(fn, *args, **kwargs)

    def prioritize_then_queue_a_blocker(pod: Any, names: list[str]) -> Any:
        scores = original(pod, names)
        services.worker.call_soon_threadsafe(release.wait, 30)  # unrelated work, queued right behind
        return scores

    services.prioritize = prioritize_then_queue_a_blocker
    services.worker.run = counting_run
    try:
        args = orjson.dumps({"Pod": _pod("gpu-training"), "NodeNames": H100})
        response = await asyncio.wait_for(client.post("/prioritize", data=args), timeout=10)
        assert response.status == 200
        scores = {s["Host"]: s["Score"] for s in await response.json()}
        assert not release.is_set() and jobs == 1  # answered while the blocker holds the worker
    finally:
        release.set()
        services.prioritize = original
        services.worker.run = run
    await asyncio.sleep(0)  # the recording runs on the next turn of the loop, after the answer
    decision = client.decisions.recent()[0]
    assert decision.verb == "prioritize" and decision.node == "h100-node-02"
    rows = {row.name: row for row in decision.rows}
    assert rows["h100-node-02"].score == scores["h100-node-02"] == 10
    terms = rows["h100-node-02"].terms  # from the evaluation that produced the answer
    assert terms is not None and set(terms) == {"score", "locality", "fragmentation", "packing"}
    assert rows["cpu-node-01"].terms is None  # failed filter: nothing scored there


async def test_fifty_large_prioritize_calls_leave_a_bounded_record(client) -> None:
    """Each call names 5,000 nodes (one with a 100,000-character name); the ring keeps the best
    MAX_ROWS of each, names cut to MAX_NAME, and the counts of everything."""
    pod = _pod("gpu-training")
    del pod["spec"]["resourceClaims"]  # nothing to allocate: prioritize is cheap, every node scores 0
    for call in range(50):
        names = ["x" * 100_000] + [f"node-{call:02d}-{i:05d}-{'n' * 24}" for i in range(4_999)]
        body = orjson.dumps(
            {"Pod": {**pod, "metadata": {**pod["metadata"], "uid": f"u-{call}"}}, "NodeNames": names}
        )
        assert (await client.post("/prioritize", data=body)).status == 200
    await asyncio.sleep(0)
    recent = client.decisions.recent()
    assert len(recent) == 50 and all(d.nodes_in == 5_000 for d in recent)
    assert all(len(d.rows) == MAX_ROWS and d.left_out == 5_000 - MAX_ROWS for d in recent)
    assert max(len(row.name) for d in recent for row in d.rows) == MAX_NAME
    size = _deep_size(client.decisions)
    print(f"50 decisions of 5,000 nodes each: {size / 1e6:.2f} MB")
    assert size < 4_000_000  # keeping every score: 32 MB


def test_a_filter_of_200000_nodes_keeps_some_of_each_and_the_counts() -> None:
    decisions = DecisionLog()
    failed = {f"f-{i}": "claim ns/c, request r: in use " * 100 for i in range(100_000)}
    unresolvable = {f"u-{i}": "no such device" for i in range(50_000)}
    passed = [f"p-{i}" for i in range(50_000)]
    asked = orjson.dumps(
        {"Pod": {"metadata": {"name": "p", "namespace": "ns"}}, "NodeNames": [*passed, *failed]}
    )
    answer = {
        "NodeNames": passed,
        "FailedNodes": failed,
        "FailedAndUnresolvableNodes": unresolvable,
        "Error": "",
    }
    decision = record_call(decisions, "filter", asked, orjson.dumps(answer))
    assert decision is not None
    assert (decision.passed, decision.failed, decision.unresolvable) == (50_000, 100_000, 50_000)
    outcomes = [row.outcome for row in decision.rows]
    assert len(outcomes) == MAX_ROWS and outcomes.count("passed") == MAX_ROWS // 2
    assert decision.left_out == 200_000 - MAX_ROWS
    assert _deep_size(decisions) < 120_000  # reasons cut too


async def test_quiet_waits_for_the_verbs_in_flight_but_not_longer_than_asked() -> None:
    in_flight = VerbsInFlight()
    started = time.perf_counter()
    await in_flight.quiet(at_most=5.0)  # nothing in flight: about `settle`
    assert time.perf_counter() - started < 1.0
    with in_flight:
        started = time.perf_counter()
        await in_flight.quiet(at_most=0.05)  # a verb that does not end: give up after at_most
        assert 0.05 <= time.perf_counter() - started < 1.0
        loop = asyncio.get_running_loop()
        waiting = asyncio.ensure_future(in_flight.quiet(at_most=5.0))
        loop.call_later(0.05, in_flight.__exit__, None, None, None)
        await asyncio.wait_for(waiting, timeout=1.0)  # returns once the verb has ended
        in_flight.__enter__()  # balance the `with`
