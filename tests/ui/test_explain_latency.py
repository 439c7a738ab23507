"""A verb's latency with the dashboard on and explains running stays close to the verb alone.

Scope (issue 22, item 4): on the mixed fleet (`loadtests.fleet`: H100, A100 with MIG on shared
counters, L40S, MI300X, TPU, CPU-only; 30 % held), /filter of pending pods (each under a fresh UID,
so every call does a new pod's work) is timed alone, then while a dashboard client explains a pod
over the whole fleet back to back (a new explain as soon as one answers). The explain runs on the
same worker thread as the verbs, in steps of about 1 ms taken when no verb is in flight (or every
20 ms regardless); the old explain built a Placement and its index per call (seconds at this
size) and held every verb queued behind it: median 2.7 s.

The bound is absolute, not a sleep: the median with explains may exceed the median alone by at
most `SLACK_MS`, and no call may wait longer than `WORST_MS` more than the slowest call alone.
"""

from __future__ import annotations

import asyncio
import copy
import statistics
import time
from typing import Any

import orjson
import yaml
from prometheus_client import CollectorRegistry

from extender.cluster.state import ClusterState
from extender.server import make_app
from extender.settings import Settings
from extender.ui import add_dashboard
from extender.wiring import build_services
from loadtests.fleet import generate_mixed_cluster

NODES = 120
CALLS = 24
#: How much later the median filter may answer with explains running.
SLACK_MS = 5.0
#: How much later than the slowest call alone any call may answer with explains running.
WORST_MS = 60.0


def _fresh(pod: dict[str, Any], number: int) -> dict[str, Any]:
    copy_ = copy.deepcopy(pod)
    copy_["metadata"]["uid"] = f"latency-{number:04d}"
    copy_["metadata"]["name"] = f"latency-{number:04d}"
    return copy_


async def _filters(client: Any, pods: list[dict[str, Any]], nodes: list[str], first: int) -> list[float]:
    """Milliseconds per /filter call, one call at a time, as kube-scheduler sends them."""
    times = []
    for i in range(CALLS):
        body = orjson.dumps({"Pod": _fresh(pods[i % len(pods)], first + i), "NodeNames": nodes})
        started = time.perf_counter()
        response = await client.post("/filter", data=body)
        await response.read()
        times.append((time.perf_counter() - started) * 1000)
        assert response.status == 200
    return times


async def test_filter_latency_with_explains_running_stays_close_to_alone(aiohttp_client) -> None:
    objects, pending = generate_mixed_cluster(nodes=NODES, seed=7, pods=40)
    settings = Settings(kernel_warmup="blocking")
    placement, binder = build_services(settings, ClusterState.from_objects(objects))
    app = make_app(settings, placement=placement, binder=binder, registry=CollectorRegistry())
    add_dashboard(app, placement)
    client = await aiohttp_client(app)
    nodes = list(placement.index().node_names)
    pods = pending[:8]
    for number, pod in enumerate(pods):  # warm: each shape's selector masks, once
        await client.post(
            "/filter", data=orjson.dumps({"Pod": _fresh(pod, 9000 + number), "NodeNames": nodes})
        )
    explained = yaml.safe_dump(pending[-1])

    alone = await _filters(client, pods, nodes, 0)
    explains = 0
    stop = asyncio.Event()

    async def explain_back_to_back() -> None:
        nonlocal explains
        while not stop.is_set():
            response = await client.post("/ui/api/explain", data=explained)
            assert response.status == 200, await response.text()
            explains += 1

    task = asyncio.ensure_future(explain_back_to_back())
    try:
        while explains == 0:  # one explain through, so the next is surely running during the calls
            await asyncio.sleep(0.01)
            assert not task.done()
        together = await _filters(client, pods, nodes, 1000)
    finally:
        stop.set()
        await task
    print(
        f"filter on {NODES} nodes, ms: alone median {statistics.median(alone):.1f} max {max(alone):.1f}; "
        f"with explains median {statistics.median(together):.1f} max {max(together):.1f}; "
        f"{explains} explains"
    )
    assert statistics.median(together) <= statistics.median(alone) + SLACK_MS
    assert max(together) <= max(alone) + WORST_MS
