"""The per-device selector result cache is an LRU by expression (extender/index/selecting.py).

Before: every distinct selector text ever evaluated stayed on every device (+18 MiB after 5,000
texts), so a stream of distinct selectors grew the process without bound.
"""

from __future__ import annotations

import tracemalloc
from types import SimpleNamespace
from typing import Any

import pytest

from extender.allocator.features import Features
from extender.allocator.model import Device, DeviceID
from extender.cel import selectors
from extender.index import selecting
from extender.index.selecting import CachingEvaluator
from extender.settings import load_settings
from extender.telemetry import StateCollector
from extender.verdicts import PlacementStats


def device(i: int) -> Device:
    return Device(
        id=DeviceID("gpu.example.com", "pool", f"gpu-{i}"),
        slice_name="slice",
        attributes={"index": {"int": i}},
        capacity={},
        consumes_counters=(),
        taints=(),
        binding_conditions=(),
        binding_failure_conditions=(),
        binds_to_node=False,
        allow_multiple_allocations=False,
        node_name="node",
        node_selector=None,
        all_nodes=False,
    )


def selector(n: int) -> str:
    return f"device.attributes['gpu.example.com'].index != {n}"


def test_results_are_kept_for_the_most_recent_expressions_only() -> None:
    evaluator = CachingEvaluator(Features(), cache_size=4)
    devices = [device(i) for i in range(20)]
    for n in range(100):
        for d in devices:
            assert evaluator.evaluate(selector(n), d) is (n != d.attributes["index"]["int"])
    assert evaluator.cached_expressions == 4
    assert evaluator.evictions == 96
    assert all(len(d.selector_results or {}) <= 2 * 4 for d in devices)
    assert all(selector(99) in (d.selector_results or {}) for d in devices)


def test_an_evicted_expression_is_evaluated_again_with_the_same_result() -> None:
    evaluator = CachingEvaluator(Features(), cache_size=2)
    d = device(1)
    assert evaluator.evaluate(selector(1), d) is False
    for n in range(2, 10):
        evaluator.evaluate(selector(n), d)
    runs = evaluator.evaluations
    assert evaluator.evaluate(selector(1), d) is False
    assert evaluator.evaluations in (runs, runs + 1)  # recomputed once pruned, else served stale-but-true
    assert evaluator.cached_expressions == 2


def test_use_keeps_an_expression_recent() -> None:
    """LRU, not FIFO: a selector used on every round survives a stream of one-off selectors."""
    evaluator = CachingEvaluator(Features(), cache_size=3)
    devices = [device(i) for i in range(5)]
    for n in range(50):
        for d in devices:
            evaluator.evaluate(selector(-1), d)
            evaluator.evaluate(selector(n), d)
    runs = evaluator.evaluations
    for d in devices:
        evaluator.evaluate(selector(-1), d)
    assert evaluator.evaluations == runs  # every device still had its result


def test_memory_stays_bounded_under_thousands_of_distinct_selectors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(selectors, "COMPILE_CACHE_SIZE", 16)  # measure the result cache alone

    def growth(evaluator: CachingEvaluator, devices: list[Device], texts: range) -> int:
        tracemalloc.start()
        start = tracemalloc.take_snapshot()
        for n in texts:
            for d in devices:
                evaluator.evaluate(selector(n), d)
        grown = sum(stat.size_diff for stat in tracemalloc.take_snapshot().compare_to(start, "filename"))
        tracemalloc.stop()
        return grown

    bounded = CachingEvaluator(Features(), cache_size=16)
    unbounded = CachingEvaluator(Features(), cache_size=10**9)
    ours, theirs = [device(i) for i in range(50)], [device(i) for i in range(50)]
    growth(bounded, ours, range(200))  # past the bounded cache's steady state
    growth(unbounded, theirs, range(200))
    # A thousand more distinct selectors: the bounded cache replaces results, the unbounded adds them.
    extra = growth(bounded, ours, range(200, 1200))
    unbounded_extra = growth(unbounded, theirs, range(200, 1200))
    assert unbounded_extra > 2_000_000  # 50,000 more results: what happened before the bound
    assert extra < unbounded_extra / 10, (extra, unbounded_extra)
    assert all(len(d.selector_results or {}) <= 32 for d in ours)


def test_cache_size_setting_reaches_new_evaluators(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(selecting, "RESULT_CACHE_SIZE", selecting.RESULT_CACHE_SIZE)
    settings = load_settings(SimpleNamespace(), {"DRA_EXTENDER_CEL_RESULT_CACHE_SIZE": "7"})
    assert settings.cel_result_cache_size == 7
    selecting.set_result_cache_size(settings.cel_result_cache_size)
    assert CachingEvaluator(Features()).cache_size == 7
    with pytest.raises(ValueError, match="an integer from 1 to 65536"):
        load_settings(SimpleNamespace(), {"DRA_EXTENDER_CEL_RESULT_CACHE_SIZE": "0"})
    with pytest.raises(ValueError, match="at least 1"):
        CachingEvaluator(Features(), cache_size=0)


def test_metrics_report_cached_expressions_and_evictions() -> None:
    evaluator = CachingEvaluator(Features(), cache_size=2)
    for n in range(5):
        evaluator.evaluate(selector(n), device(0))
    index: Any = SimpleNamespace(node_names=[], num_rows=0, generation=1, evaluator=evaluator)
    collector = StateCollector(ready=lambda: True, stats=lambda: PlacementStats(index=index, assumed=None))
    samples = {s.name: s.value for family in collector.collect() for s in family.samples}
    assert samples["dra_extender_cel_result_cache_expressions"] == 2
    assert samples["dra_extender_cel_result_cache_evictions_total"] == 3
