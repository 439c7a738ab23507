"""/metrics after real verb calls: histograms, result counters, state gauges, naming conventions."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from extender.errors import KubeAPIError
from extender.server import make_app
from extender.settings import Settings
from extender.verdicts import BIND_REASONS, BindOutcome, PlacementStats

from .conftest import BIND_BODY, FILTER_BODY, NODES, PRIORITIZE_BODY


async def _scrape(client: Any) -> dict[str, Any]:
    resp = await client.get("/metrics")
    assert resp.status == 200
    return {family.name: family for family in text_string_to_metric_families(await resp.text())}


def _value(families: dict[str, Any], name: str, sample: str | None = None, **labels: str) -> float:
    matches = [
        s.value
        for s in families[name].samples
        if s.name == (sample or name) and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(matches) == 1, (name, labels, families[name].samples)
    return matches[0]


async def test_verb_calls_show_up_in_histograms_and_result_counters(serve, services):
    """filter/prioritize/bind on the sample: durations per verb, node results, bind outcome."""
    client = await serve()
    await client.post("/filter", data=FILTER_BODY)
    await client.post("/prioritize", data=PRIORITIZE_BODY)
    await client.post("/bind", data=BIND_BODY)
    families = await _scrape(client)
    name = "dra_extender_request_duration_seconds"
    assert families[name].type == "histogram"
    for verb in ("filter", "prioritize", "bind"):
        assert _value(families, name, f"{name}_count", verb=verb) == 1
        assert _value(families, name, f"{name}_bucket", verb=verb, le="10.0") == 1
        _value(families, name, f"{name}_bucket", verb=verb, le="0.0001")  # the 100 µs bucket exists
    nodes = "dra_extender_filter_nodes"
    assert _value(families, nodes, f"{nodes}_total", result="passed") == 1
    rejected = sum(_value(families, nodes, f"{nodes}_total", result=r) for r in ("failed", "unresolvable"))
    assert rejected == len(NODES) - 1
    scored = "dra_extender_prioritize_nodes"
    assert sum(_value(families, scored, f"{scored}_total", result=r) for r in ("scored", "zero")) == 2
    binds = "dra_extender_bind_outcomes"
    assert _value(families, binds, f"{binds}_total", reason="ok") == 1
    assert _value(families, binds, f"{binds}_total", reason="conflict") == 0  # fixed set, exported at 0
    assert (
        _value(families, "dra_extender_requests", "dra_extender_requests_total", verb="bind", code="200") == 1
    )


async def test_state_gauges_are_read_from_placement_at_scrape_time(serve, services):
    """Index size and generation, assumed allocations and the CEL counters come from placement."""
    placement = services[0]
    client = await serve()
    before = await _scrape(client)
    index = placement.index()
    assert _value(before, "dra_extender_index_nodes") == len(index.node_names)
    assert _value(before, "dra_extender_index_device_rows") == index.num_rows > 0
    assert _value(before, "dra_extender_index_generation") == index.generation
    assert _value(before, "dra_extender_assumed_allocations") == 0
    assert _value(before, "dra_extender_ready") == 1
    cel = "dra_extender_cel_evaluations"
    # Start-up (Placement.warm) already evaluated every DeviceClass's CEL on every device.
    assert _value(before, cel, f"{cel}_total") == index.evaluator.evaluations > 0
    await client.post("/filter", data=FILTER_BODY)
    await client.post("/prioritize", data=PRIORITIZE_BODY)
    after = await _scrape(client)
    assert _value(after, cel, f"{cel}_total") == index.evaluator.evaluations > 0
    hits = "dra_extender_cel_cache_hits"
    assert _value(after, hits, f"{hits}_total") == index.evaluator.hits
    # The same selector on the same device twice: one more evaluation, then one more hit.
    device = index.row_device[0]
    for _ in range(2):
        index.evaluator.evaluate('device.driver != ""', device)
    again = await _scrape(client)
    assert _value(again, cel, f"{cel}_total") == _value(after, cel, f"{cel}_total") + 1
    assert _value(again, hits, f"{hits}_total") == _value(after, hits, f"{hits}_total") + 1


async def test_assumed_allocations_and_kernel_time_are_reported(serve, services):
    """len(placement.assumed) and the kernel totals the placement keeps (0 until it has them)."""
    placement = services[0]
    client = await serve()
    families = await _scrape(client)
    assert _value(families, "dra_extender_kernel_seconds", "dra_extender_kernel_seconds_total") >= 0
    placement.assumed.assume("claim-uid", {"devices": {"results": []}}, pod_uid="pod-uid")
    placement.kernels.seconds_total, placement.kernels.calls_total = 0.25, 7
    families = await _scrape(client)
    assert _value(families, "dra_extender_assumed_allocations") == 1
    assert _value(families, "dra_extender_kernel_seconds", "dra_extender_kernel_seconds_total") == 0.25
    assert _value(families, "dra_extender_kernel_calls", "dra_extender_kernel_calls_total") == 7


class _WatchingPlacement:
    """A placement double that reports watch health like the kube source will."""

    def __init__(self) -> None:
        self.synced = False

    def ready(self) -> bool:
        return self.synced

    worker = None

    def generation(self) -> tuple[int, int, int]:
        return (0, 0, 0)

    def stats(self) -> PlacementStats:
        return PlacementStats(index=_Unbuilt(), assumed=None, source=self.source_stats())

    def source_stats(self) -> dict[str, Any]:
        return {
            "relists": {"ResourceSlice": 2, "Node": 1},
            "watch_restarts": {"ResourceSlice": 5},
            "last_event_age_seconds": {"ResourceSlice": 1.5, "Node": 30.0},
            "synced": self.synced,
        }


class _Unbuilt:
    """An index that must not be read while the placement is not ready."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError("the index must not be read while not ready")


async def test_watch_lag_and_relists_come_from_source_stats(aiohttp_client, binder):
    """source_stats() becomes relist/restart counters and a last-event-age gauge, by kind."""
    placement = _WatchingPlacement()
    client = await aiohttp_client(make_app(Settings(), placement=placement, binder=binder))
    families = await _scrape(client)
    relists = "dra_extender_watch_relists"
    assert families[relists].type == "counter"
    assert _value(families, relists, f"{relists}_total", kind="ResourceSlice") == 2
    restarts = "dra_extender_watch_restarts"
    assert _value(families, restarts, f"{restarts}_total", kind="ResourceSlice") == 5
    lag = "dra_extender_watch_last_event_age_seconds"
    assert families[lag].type == "gauge"
    assert _value(families, lag, kind="Node") == 30.0
    assert _value(families, "dra_extender_synced") == 0
    assert "dra_extender_index_nodes" not in families  # not ready: the index is left alone


async def test_a_failing_state_read_does_not_fail_the_scrape(aiohttp_client, binder):
    """If placement raises while being read, that metric is skipped and /metrics still answers."""

    class Broken(_WatchingPlacement):
        def source_stats(self) -> dict[str, Any]:
            raise RuntimeError("watch state unavailable")

    client = await aiohttp_client(make_app(Settings(), placement=Broken(), binder=binder))
    families = await _scrape(client)
    assert "dra_extender_watch_relists" not in families
    assert _value(families, "dra_extender_ready") == 0


@pytest.mark.parametrize(
    ("outcome", "reason"),
    [
        (BindOutcome("", "ok"), "ok"),
        (BindOutcome("not the leader", "not_leader"), "not_leader"),
        (BindOutcome("odd", "made_up_reason"), "error"),
        (BindOutcome("claim was allocated concurrently", ""), "error"),
        (KubeAPIError("conflict", status=409), "conflict"),
        (KubeAPIError("gone", status=404), "not_found"),
        (TimeoutError(), "timeout"),
        (ZeroDivisionError(), "error"),
    ],
    ids=["ok", "reason-attr", "unknown-reason", "plain-string", "409", "404", "timeout", "bug"],
)
async def test_bind_outcomes_are_counted_by_a_bounded_reason(app_client, binder, registry, outcome, reason):
    """Reasons come from a fixed set; anything unknown is "error" (no unbounded label values)."""
    if isinstance(outcome, BaseException):
        binder.raises = outcome
    else:
        binder.outcome = outcome
    client = await app_client()
    await client.post("/bind", data=BIND_BODY)
    assert registry.get_sample_value("dra_extender_bind_outcomes_total", {"reason": reason}) == 1
    assert reason in BIND_REASONS


async def test_filter_errors_are_counted_by_reason(app_client, placement, registry):
    """A filter answered with Error is counted: not_ready while the state is not synced."""
    placement.is_ready = False
    client = await app_client()
    body = orjson.loads(await (await client.post("/filter", data=FILTER_BODY)).read())
    assert body["Error"].startswith("cluster state not ready")
    assert registry.get_sample_value("dra_extender_filter_errors_total", {"reason": "not_ready"}) == 1
    assert registry.get_sample_value("dra_extender_filter_errors_total", {"reason": "error"}) == 0


async def test_metric_names_follow_prometheus_conventions(serve):
    """Counters end in _total (once), and whatever measures time is in _seconds."""
    client = await serve()
    await client.post("/filter", data=FILTER_BODY)
    families = await _scrape(client)
    ours = {
        name: f
        for name, f in families.items()
        # prometheus-client also exposes `<counter>_created` timestamps as separate gauges
        if name.startswith("dra_extender_") and not name.endswith("_created")
    }
    assert len(ours) >= 15
    for name, family in ours.items():
        if family.type == "counter":
            assert all(s.name == f"{name}_total" for s in family.samples), name
        if "duration" in name or "age" in name or "kernel_seconds" in name:
            assert name.endswith("_seconds"), name
        assert not name.endswith("_total"), name  # the parser strips it: a doubled suffix would show


async def test_each_app_has_its_own_registry(aiohttp_client, services):
    """Two apps over the same services keep separate counters (and can both be built)."""
    placement, binder = services
    first, second = CollectorRegistry(), CollectorRegistry()
    client = await aiohttp_client(make_app(Settings(), placement=placement, binder=binder, registry=first))
    make_app(Settings(), placement=placement, binder=binder, registry=second)
    await client.post("/filter", data=FILTER_BODY)
    labels = {"verb": "filter", "code": "200"}
    assert first.get_sample_value("dra_extender_requests_total", labels) == 1
    assert second.get_sample_value("dra_extender_requests_total", labels) is None
    assert second.get_sample_value("dra_extender_index_nodes") == first.get_sample_value(
        "dra_extender_index_nodes"
    )
