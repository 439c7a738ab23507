"""Expensive selectors cannot stall other pods (issue 22 item 1), through the real server.

Before: each selector passed upstream's estimated-cost check yet took about 0.1-0.2 s per device
in Python, and a mask had no deadline: one claim's selectors held the single worker for seconds,
and an unrelated pod's filter answered "did not finish within 10 s". Now a pod's selector
evaluation stops at its deadline, and a call's deadline counts the time it waited for the worker,
so each call stops by the time its own caller gives up. The bounds are the callers' deadlines
(an answer without Error arrived in time); the short waits between requests only order them.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from typing import Any

import orjson

from extender import worker
from extender.cluster.sample import sample_objects
from extender.cluster.state import ClusterState
from extender.server import make_app
from extender.settings import Settings
from extender.wiring import build_services

NS = "ml-training"
NUMBERS = "[" + ", ".join(str(i) for i in range(46)) + "]"
#: Within the cost limit, about 0.1-0.2 s per device in Python (8 AMD GPUs in the sample).
SELECTORS_PER_CLAIM = 8
TIMEOUT = 1.0


def _heavy(index: int) -> str:
    # `size(device.attributes)` reads a whole map: the selector has no footprint, so it runs on
    # every device (extender.index.selector_groups would otherwise run it once for all of them).
    heavy = f"{NUMBERS}.all(a, {NUMBERS}.all(b, {NUMBERS}.all(c, a + b + c >= -{index})))"
    return f"size(device.attributes) >= 0 && {heavy}"


def _heavy_claim(name: str, first: int) -> dict[str, Any]:
    selectors = [{"cel": {"expression": _heavy(first + i)}} for i in range(SELECTORS_PER_CLAIM)]
    request = {
        "name": "gpu",
        "exactly": {"deviceClassName": "gpu.amd.com", "count": 1, "selectors": selectors},
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": [request]}},
    }


def _body(pod: str, claim: str, nodes: list[str]) -> bytes:
    spec = {"resourceClaims": [{"name": "devices", "resourceClaimName": claim}]}
    return orjson.dumps(
        {
            "Pod": {"metadata": {"name": pod, "namespace": NS, "uid": f"uid-{pod}"}, "spec": spec},
            "NodeNames": nodes,
        }
    )


UNRELATED = _body("gpu-training", "gpu-training-devices-vbdcr", ["h100-node-01"])
AMD_NODES = ["amd-mi300x-node-01", "cpu-node-01"]


async def _client(aiohttp_client: Any) -> tuple[Any, Any]:
    objects = [*copy.deepcopy(sample_objects()), _heavy_claim("heavy-1", 0), _heavy_claim("heavy-2", 100)]
    settings = Settings(filter_timeout_seconds=TIMEOUT)
    placement, binder = build_services(settings, ClusterState.from_objects(objects))
    return await aiohttp_client(make_app(settings, placement=placement, binder=binder)), placement


async def _started(placement: Any, before: int) -> None:
    """Wait (bounded) until the worker has run a CEL evaluation past `before`."""
    evaluator = placement.index().evaluator
    for _ in range(500):
        if evaluator.evaluations > before:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the heavy filter never started evaluating")


async def _filter(client: Any, body: bytes) -> tuple[dict[str, Any], float]:
    started = time.perf_counter()
    resp = await client.post("/filter", data=body)
    answer = await resp.json()
    return answer, time.perf_counter() - started


async def test_an_unrelated_pod_is_answered_while_a_claim_with_heavy_selectors_is_evaluated(aiohttp_client):
    client, placement = await _client(aiohttp_client)
    before = placement.index().evaluator.evaluations
    heavy = asyncio.ensure_future(_filter(client, _body("heavy-1", "heavy-1", AMD_NODES)))
    await _started(placement, before)
    await asyncio.sleep(0.3)  # the unrelated pod arrives while the heavy one runs
    answer, seconds = await _filter(client, UNRELATED)
    assert answer["Error"] == "", f"the unrelated pod was not answered within its deadline: {answer['Error']}"
    assert answer["NodeNames"] == ["h100-node-01"]
    assert seconds < TIMEOUT
    heavy_answer, _ = await heavy
    assert heavy_answer["Error"], "the heavy pod's evaluation did not stop at its deadline"


async def test_work_queued_behind_heavy_work_stops_at_its_own_callers_deadline(aiohttp_client):
    """Two heavy pods, then an unrelated one: the second heavy pod waited in the queue, so it has
    only what is left of its caller's deadline, and the unrelated pod is still answered in time."""
    client, placement = await _client(aiohttp_client)
    before = placement.index().evaluator.evaluations
    first = asyncio.ensure_future(_filter(client, _body("heavy-1", "heavy-1", AMD_NODES)))
    await _started(placement, before)
    second = asyncio.ensure_future(_filter(client, _body("heavy-2", "heavy-2", AMD_NODES)))
    await asyncio.sleep(0.5)
    answer, seconds = await _filter(client, UNRELATED)
    assert answer["Error"] == "", f"the unrelated pod was not answered within its deadline: {answer['Error']}"
    assert seconds < TIMEOUT
    assert (await first)[0]["Error"] and (await second)[0]["Error"]


async def test_a_queued_call_knows_how_long_it_waited() -> None:
    pool = worker.PlacementWorker("test-worker")
    gate = threading.Event()
    blocker = asyncio.ensure_future(pool.run(gate.wait, 5.0))
    queued = asyncio.ensure_future(pool.run(worker.waited, timeout=5.0))
    await asyncio.sleep(0.2)
    gate.set()
    assert await blocker is True
    assert await queued >= 0.15  # submitted at about the start of the 0.2 s
    assert await pool.run(worker.waited) == 0.0  # no timeout: the caller waits however long it takes
    assert worker.waited() == 0.0  # outside the worker
    pool.close()
