"""Memory kept per selector text, claim shape or pod is bounded by settings (issue 30 item 3).

15,000 claims, each with its own selector text, filtered once each on the sample grew the server
by 56 MiB over the last 10,000 (bench/selector_memory.py, docs/robustness.md). Two causes:

- each call that met a new selector froze the heap (`ClusterView.freeze_new_caches`) without
  collecting first, so the call's cyclic garbage (an allocator `_Search` and the bound methods it
  hands out, for one) was moved where the collector never looks again: about 5.5 KiB per claim,
  forever;
- the selector masks were bounded by bytes only (64 MiB), which a small cluster's masks (about
  1 KiB each on the sample) take tens of thousands of claims to reach.

These tests run the service as `serve` builds it (`wiring.build_services`, which freezes) with
small bounds from `Settings`, and check each table stops at its setting and that claims past the
bounds leave (almost) nothing behind.
"""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from extender import claims as claims_module
from extender.cel import footprint, selectors
from extender.cluster.state import ClusterState
from extender.core import evaluation, shapes
from extender.index import selecting, snapshot
from extender.settings import Settings
from extender.wiring import build_services
from tests.allocator import builders as b
from tests.core import small_cluster as c

NODES = 50
#: The bounds under test: small, so that a few hundred claims fill every table.
BOUNDS = {
    "cel_compile_cache_size": 20,
    "cel_result_cache_size": 8,
    "selector_mask_cache_size": 12,
    "claim_shape_cache_size": 4,
    "evaluation_cache_size": 6,
    "pods_seen_cache_size": 16,
}


def _claim(k: int) -> c.Obj:
    """Claim k: one GPU with a selector text only this claim has (as pinning by UUID gives)."""
    selector = {"cel": {"expression": f'device.attributes["{c.DRIVER}"].index in [0, {k + 1000}]'}}
    return {
        **b.claim(f"claim-{k}", [b.request("r", c.GPU, 1, selectors=[selector])]),
        "kind": "ResourceClaim",
    }


@pytest.fixture
def restore_module_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """`build_services` sets module-wide bounds from the settings: put them back afterwards."""
    for module, name in [
        (selectors, "COMPILE_CACHE_SIZE"),
        (selecting, "RESULT_CACHE_SIZE"),
        (snapshot, "MASK_CACHE_ENTRIES"),
        (snapshot, "MASK_CACHE_BYTES"),
        (shapes, "SHAPES"),
        (footprint, "CACHE_SIZE"),
        (footprint, "_remembered"),
        (claims_module, "_CHECKED_CLAIMS_MAX"),
    ]:
        monkeypatch.setattr(module, name, getattr(module, name))
    yield
    gc.unfreeze()  # build_services froze this test's heap


def _service(claims: int) -> tuple[object, list[c.Obj], list[str]]:
    made = [_claim(k) for k in range(claims)]
    objects: list[c.Obj] = [c.gpu_class(), *made]
    for n in range(NODES):
        objects += [c.node(f"n{n}"), *c.gpus(f"n{n}", 4)]
    settings = Settings(kernel_warmup="blocking", **BOUNDS)
    placement, binder = build_services(settings, ClusterState.from_objects(objects))
    binder.close() if hasattr(binder, "close") else None
    return placement, made, [f"n{n}" for n in range(NODES)]


def _filter(placement: object, claim: c.Obj, k: int, nodes: list[str]) -> None:
    pod = c.pod([claim], name=f"pod-{k}", uid=f"pod-{k}")
    assert placement.worker is not None  # type: ignore[attr-defined]
    verdict = placement.filter(pod, nodes)  # type: ignore[attr-defined]
    assert verdict.passed, verdict


@pytest.mark.usefixtures("restore_module_bounds")
def test_each_table_kept_per_selector_shape_or_pod_stops_at_its_setting() -> None:
    """120 distinct claims: every table holds exactly what its setting allows, not 120 entries
    (before: the compile cache kept up to 4,096 whatever the settings, the masks up to 64 MiB)."""
    placement, claims, nodes = _service(120)
    for k, claim in enumerate(claims):
        _filter(placement, claim, k, nodes)
    index = placement.index()  # type: ignore[attr-defined]
    assert len(selectors._CACHE) == BOUNDS["cel_compile_cache_size"]
    assert footprint._remembered.cache_info().currsize == BOUNDS["cel_compile_cache_size"]
    assert len(claims_module._checked_claims) <= BOUNDS["pods_seen_cache_size"]
    assert index.evaluator.cached_expressions == BOUNDS["cel_result_cache_size"]
    assert index.cached_masks == BOUNDS["selector_mask_cache_size"]
    assert 0 < len(shapes._SHAPES[index]) <= BOUNDS["claim_shape_cache_size"]
    assert 0 < len(shapes._LATEST) <= BOUNDS["claim_shape_cache_size"]
    evaluations = placement.evaluations  # type: ignore[attr-defined]
    assert len(evaluations) == BOUNDS["evaluation_cache_size"]
    assert len(evaluations._seen) == BOUNDS["pods_seen_cache_size"]
    assert evaluations.seen("pod-119") is not None and evaluations.seen("pod-0") is None


@pytest.mark.usefixtures("restore_module_bounds")
def test_claims_past_the_bounds_leave_nothing_behind_in_the_frozen_heap() -> None:
    """With the bounded tables full, 150 more distinct claims keep under 400 KiB (traced). Before,
    the freeze after each call kept that call's cyclic garbage: 896 KiB here (6 KiB a claim).
    What remains, about 200 KiB, is spread over small fixed tables still filling at this scale
    (validation's memo of 8,192 names, for one); the server levels off (bench/selector_memory.py)."""
    placement, claims, nodes = _service(300)
    for k in range(150):  # fill every bounded table first
        _filter(placement, claims[k], k, nodes)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for k in range(150, 300):
            _filter(placement, claims[k], k, nodes)
        gc.collect()  # what is not frozen and is garbage goes; frozen garbage would stay
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 400 * 1024, f"{grown / 1024:.0f} KiB kept by 150 more distinct claims"
    assert evaluation.EVALUATION_CACHE_SIZE == 256  # the module default is untouched by settings
