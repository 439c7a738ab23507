"""Expensive CEL selectors through the HTTP server: refused or stopped with upstream's texts, and
the server keeps serving (real placement over the embedded sample, not a test double)."""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from extender.allocator.features import Features
from extender.cluster.sample import sample_objects
from extender.cluster.state import ClusterState
from extender.server import make_app
from extender.settings import Settings
from extender.wiring import build_services

POD = {
    "metadata": {
        "name": "gpu-training",
        "namespace": "ml-training",
        "uid": "261134f3-5a87-4a70-b229-44da91e6a9d2",
    },
    "spec": {
        "schedulerName": "dra-extender-scheduler",
        "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "devices"}]}}],
        "resourceClaims": [{"name": "devices", "resourceClaimName": "gpu-training-devices-vbdcr"}],
    },
}
NODES = ["h100-node-01", "l40s-node-01", "cpu-node-01"]
FILTER_BODY = orjson.dumps({"Pod": POD, "Nodes": None, "NodeNames": NODES})
MODELS = "device.attributes['gpu.nvidia.com'].models"


def _ints(n: int) -> str:
    return "[" + ", ".join(str(i) for i in range(n)) + "]"


Serve = Callable[..., Awaitable[Any]]


@pytest.fixture
def serve(aiohttp_client: Any) -> Serve:
    """Factory: the app over the sample, the pod's GPU request carrying `selector`.

    `oversized`: one H100 gets a list attribute of 2,000 values (upstream allows 48), which the
    compile-time estimate cannot foresee, so only the runtime budget stops the selector.
    """

    async def make(selector: str, *, oversized: bool = False) -> Any:
        objects = copy.deepcopy(sample_objects())
        for obj in objects:
            if obj["kind"] == "ResourceClaim" and obj["metadata"]["name"] == "gpu-training-devices-vbdcr":
                obj["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
                    {"cel": {"expression": selector}}
                ]
            if oversized and obj["kind"] == "ResourceSlice" and obj["spec"].get("nodeName") == "h100-node-01":
                obj["spec"]["devices"][0]["attributes"]["models"] = {
                    "strings": [f"m{i}" for i in range(2000)]
                }
        settings = Settings(features=Features.from_gates({"DRAListTypeAttributes": True}))
        placement, binder = build_services(settings, ClusterState.from_objects(objects))
        app = make_app(settings, placement=placement, binder=binder, registry=CollectorRegistry())
        return await aiohttp_client(app)

    return make


async def _filter(client: Any) -> dict[str, Any]:
    resp = await client.post("/filter", data=FILTER_BODY)
    assert resp.status == 200
    body: dict[str, Any] = await resp.json()
    return body


async def _still_serving(client: Any) -> None:
    assert (await client.get("/healthz")).status == 200


def _reasons(body: dict[str, Any]) -> list[str]:
    return [body["Error"], *body["FailedNodes"].values(), *body["FailedAndUnresolvableNodes"].values()]


async def test_a_too_complex_selector_is_refused_with_api_validations_text(serve: Serve) -> None:
    client = await serve(f"{_ints(1000)}.all(a, {_ints(1000)}.all(b, a + b >= 0))")
    for _ in range(2):  # and again: the verdict is cached, not recomputed
        body = await _filter(client)
        assert body["NodeNames"] == []
        assert any(
            "selector #0: CEL compile error: too complex, exceeds cost limit (estimated cost" in reason
            for reason in _reasons(body)
        ), body
    await _still_serving(client)


async def test_an_expensive_but_allowed_selector_runs_to_its_answer(serve: Serve) -> None:
    """About 160,000 of the 1,000,000 budget per device: allowed, evaluated, true everywhere."""
    client = await serve(f"{_ints(150)}.all(a, {_ints(150)}.all(b, a + b >= 0))")
    body = await _filter(client)
    assert body["Error"] == ""
    assert body["NodeNames"] == ["h100-node-01"]  # as without the selector
    await _still_serving(client)


async def test_a_selector_over_the_runtime_budget_stops_with_cel_gos_text(serve: Serve) -> None:
    client = await serve(f"!has({MODELS}) || {MODELS}.all(a, {MODELS}.all(b, a != ''))", oversized=True)
    body = await _filter(client)
    assert body["NodeNames"] == []
    assert any(
        "selector #0: CEL runtime error: operation cancelled: actual cost limit exceeded" in reason
        for reason in _reasons(body)
    ), body
    await _still_serving(client)
