"""GET /healthz, /readyz and /metrics, and the metrics the verbs record."""

from __future__ import annotations

import orjson
from prometheus_client import CollectorRegistry

from extender.server import make_app
from extender.settings import Settings
from extender.verdicts import FilterVerdict

POD = {"metadata": {"name": "p", "namespace": "default"}, "spec": {}}


async def test_healthz_is_ok(app_client):
    """/healthz answers 200 "ok" while the process serves."""
    client = await app_client()
    resp = await client.get("/healthz")
    assert resp.status == 200
    assert await resp.text() == "ok"


async def test_healthz_is_ok_while_not_ready(app_client, placement):
    """Liveness does not depend on readiness."""
    placement.is_ready = False
    client = await app_client()
    assert (await client.get("/healthz")).status == 200


async def test_readyz_is_503_with_reason_until_placement_is_ready(app_client, placement):
    """/readyz is 503 with a JSON reason until placement.ready() flips, then 200."""
    placement.is_ready = False
    client = await app_client()
    resp = await client.get("/readyz")
    assert resp.status == 503
    body = await resp.json()
    assert body["ready"] is False
    assert body["reason"].startswith("cluster state not ready")
    placement.is_ready = True
    resp = await client.get("/readyz")
    assert resp.status == 200
    assert (await resp.json())["ready"] is True


async def test_metrics_are_prometheus_text(app_client):
    """/metrics serves the Prometheus text format."""
    client = await app_client()
    resp = await client.get("/metrics")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/plain")
    assert "# TYPE dra_extender_request_duration_seconds histogram" in await resp.text()


async def test_requests_are_counted_by_verb_and_code(app_client, registry):
    """Each verb request increments dra_extender_requests_total{verb,code}."""
    client = await app_client()
    await client.post("/filter", data=orjson.dumps({"Pod": POD, "NodeNames": []}))
    await client.post("/filter", data=b"nope")
    assert registry.get_sample_value("dra_extender_requests_total", {"verb": "filter", "code": "200"}) == 1
    assert registry.get_sample_value("dra_extender_requests_total", {"verb": "filter", "code": "400"}) == 1


async def test_prefixed_routes_are_labelled_with_the_plain_verb(app_client, registry):
    """/scheduler/filter counts under verb="filter"."""
    client = await app_client()
    await client.post("/scheduler/filter", data=orjson.dumps({"Pod": POD, "NodeNames": []}))
    assert registry.get_sample_value("dra_extender_requests_total", {"verb": "filter", "code": "200"}) == 1


async def test_duration_histogram_spans_100us_to_10s(app_client, registry):
    """The duration histogram has buckets from 0.0001 s to 10 s and observes each request."""
    client = await app_client()
    await client.post("/prioritize", data=orjson.dumps({"Pod": POD, "NodeNames": []}))
    name = "dra_extender_request_duration_seconds"
    assert registry.get_sample_value(f"{name}_bucket", {"verb": "prioritize", "le": "0.0001"}) is not None
    assert registry.get_sample_value(f"{name}_bucket", {"verb": "prioritize", "le": "10.0"}) is not None
    assert registry.get_sample_value(f"{name}_count", {"verb": "prioritize"}) == 1


async def test_filter_nodes_are_counted_by_result(app_client, placement, registry):
    """dra_extender_filter_nodes_total counts passed, failed and unresolvable nodes."""
    placement.verdict = FilterVerdict(passed=["a", "b"], failed={"c": "full"}, unresolvable={"d": "no gpu"})
    client = await app_client()
    await client.post("/filter", data=orjson.dumps({"Pod": POD, "NodeNames": ["a", "b", "c", "d"]}))
    counts = {
        result: registry.get_sample_value("dra_extender_filter_nodes_total", {"result": result})
        for result in ("passed", "failed", "unresolvable")
    }
    assert counts == {"passed": 2, "failed": 1, "unresolvable": 1}


async def test_health_endpoints_are_not_counted_as_verbs(app_client, registry):
    """Probes and scrapes do not show up in the verb request counter."""
    client = await app_client()
    await client.get("/healthz")
    await client.get("/metrics")
    samples = [s for m in registry.collect() if m.name == "dra_extender_requests" for s in m.samples]
    assert samples == []


async def test_apps_without_a_registry_get_private_ones(aiohttp_client, placement, binder):
    """make_app without a registry can be called twice (no duplicate registration)."""
    for _ in range(2):
        client = await aiohttp_client(make_app(Settings(), placement=placement, binder=binder))
        assert (await client.get("/metrics")).status == 200


def test_registry_is_per_app(placement, binder):
    """Two apps given different registries keep separate metrics."""
    first, second = CollectorRegistry(), CollectorRegistry()
    make_app(Settings(), placement=placement, binder=binder, registry=first)
    make_app(Settings(), placement=placement, binder=binder, registry=second)
    assert first.get_sample_value("dra_extender_prioritize_errors_total") == 0
