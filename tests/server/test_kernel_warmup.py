"""Answers during the kernels' background warm-up equal answers after it, and /metrics says which.

Scope: the sample's pipeline pods (tests/data/pipeline_pods.yaml) through HTTP, each filtered on
every node, prioritized on the nodes that passed and bound to the best of them (so later pods see
the devices taken), once with the kernels' plain-Python twins forced (what answers while the
kernels compile, `kernels.warming`) and once with the numba kernels forced: every response body
must be byte for byte the same. Both runs must really take their path (the twins are counted).
Also the `dra_extender_kernels_compiled` gauge and the `kernel_warmup` setting's two modes.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
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
from extender.wiring import build_services
from kernels import counters, warming
from kernels.topology import partition, score, search

PODS = load_pods(Path(__file__).resolve().parents[1] / "data" / "pipeline_pods.yaml")
TWINS = (
    (search, "best_sets"),
    (score, "score_sets"),
    (partition, "partition_terms"),
    (counters, "first_fit"),
)


def _count_twins(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    seen = dict.fromkeys((name for _, name in TWINS), 0)
    for module, name in TWINS:
        twin = getattr(module, f"{name}_reference")

        def counting(*args: Any, _twin: Any = twin, _name: str = name, **kwargs: Any) -> Any:
            seen[_name] += 1
            return _twin(*args, **kwargs)

        monkeypatch.setattr(module, f"{name}_reference", counting)
    return seen


def _best(scores: list[dict[str, Any]]) -> str:
    top = max(s["Score"] for s in scores)
    return next(s["Host"] for s in scores if s["Score"] == top)


async def _pipeline(aiohttp_client: Callable[..., Any]) -> list[bytes]:
    """Every response body of filter -> prioritize -> bind for each pipeline pod, in order."""
    state = ClusterState.from_objects(copy.deepcopy(sample_objects()))
    placement, binder = build_services(Settings(kernel_warmup="blocking"), state)
    nodes = [n["metadata"]["name"] for n in state.list("Node")]
    client = await aiohttp_client(
        make_app(Settings(), placement=placement, binder=binder, registry=CollectorRegistry())
    )
    bodies: list[bytes] = []
    for pod in PODS:
        resp = await client.post("/filter", data=orjson.dumps({"Pod": pod, "NodeNames": nodes}))
        bodies.append(await resp.read())
        passed = orjson.loads(bodies[-1])["NodeNames"] or []
        if not passed:
            continue
        resp = await client.post("/prioritize", data=orjson.dumps({"Pod": pod, "NodeNames": passed}))
        bodies.append(await resp.read())
        meta = pod["metadata"]
        bind = {
            "PodName": meta["name"],
            "PodNamespace": meta["namespace"],
            "PodUID": meta["uid"],
            "Node": _best(orjson.loads(bodies[-1])),
        }
        resp = await client.post("/bind", data=orjson.dumps(bind))
        bodies.append(await resp.read())
    return bodies


async def test_twins_and_kernels_give_identical_answers(
    aiohttp_client: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Filter, prioritize and bind answer byte for byte the same during the warm-up and after it."""
    seen = _count_twins(monkeypatch)
    with warming.forced(use_kernels=True):
        kernels = await _pipeline(aiohttp_client)
    assert set(seen.values()) == {0}, seen
    with warming.forced(use_kernels=False):
        twins = await _pipeline(aiohttp_client)
    # Every entry point the sample reaches answered with its twin; the sample exercises all four.
    assert all(seen.values()), seen
    assert len(kernels) > 2 * len(PODS)
    assert twins == kernels


def _gauge(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value("dra_extender_kernels_compiled")


async def test_metrics_gauge_says_whether_the_kernels_are_compiled(
    aiohttp_client: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert warming.wait(timeout=600)
    state = ClusterState.from_objects(copy.deepcopy(sample_objects()))
    placement, binder = build_services(Settings(kernel_warmup="blocking"), state)
    registry = CollectorRegistry()
    client = await aiohttp_client(make_app(Settings(), placement=placement, binder=binder, registry=registry))
    assert _gauge(registry) == 1.0
    monkeypatch.setattr(warming, "_state", warming.WARMING)
    assert _gauge(registry) == 0.0
    resp = await client.get("/readyz")
    assert resp.status == 200, "readiness does not wait for the kernels"
    text = await (await client.get("/metrics")).text()
    assert "dra_extender_kernels_compiled 0.0" in text


def test_background_mode_starts_the_warm_up_and_blocking_mode_compiles_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`kernel_warmup: background` only starts the thread; `blocking` returns with them compiled."""
    assert warming.wait(timeout=600)
    started: list[int] = []
    monkeypatch.setattr(warming, "_state", warming.IDLE)
    monkeypatch.setattr(warming, "start", lambda *, threads=0: started.append(threads) or True)
    state = ClusterState.from_objects(copy.deepcopy(sample_objects()))
    build_services(Settings(kernel_threads=2), state)
    assert started == [2] and warming.state() == warming.IDLE
    build_services(
        Settings(kernel_warmup="blocking"), ClusterState.from_objects(copy.deepcopy(sample_objects()))
    )
    assert started == [2] and warming.compiled()
