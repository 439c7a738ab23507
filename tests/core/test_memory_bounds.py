"""What a call can leave behind is bounded by size, not only by entry count (issue 22 item 3).

Before: the evaluation LRU kept a verdict per requested name for each of 256 pods (12 filters
naming 100,000 unknown nodes each added 166 MB), pods-seen kept 4,096 whole pods however large,
every evaluation held its pod too, and each index kept one selector mask per distinct selector
set forever. Now each cache is a `SizedLRU` weighed in bytes. Memory is measured (tracemalloc),
not inferred from entry counts.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable

import pytest

from extender.core import evaluation as evaluations_module
from extender.core import shapes
from extender.index import snapshot
from extender.lru import SizedLRU, deep_size
from extender.pods import parse_pod
from tests.allocator import builders as b
from tests.core import small_cluster as c

MiB = 2**20


def _retained(work: Callable[[], None]) -> int:
    """Bytes still allocated after `work` returned and garbage was collected."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        work()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_filters_naming_many_unknown_nodes_leave_a_bounded_cache() -> None:
    """Five pods, each filtered against 100,000 names nobody knows: at most about one such
    evaluation stays (its estimate, 100 MB, fills most of the 128 MiB bound), not five."""
    claim = c.claim("two", 2)
    placement = c.placement([c.node("a"), *c.gpus("a", 2), c.gpu_class(), claim])

    def work() -> None:
        for k in range(5):
            names = [f"ghost-{k}-{i:06d}" for i in range(100_000)]
            verdict = placement.filter(c.pod([claim], uid=f"pod-{k}"), ["a", *names])
            assert verdict.passed == ["a"] and len(verdict.unresolvable) == len(names)

    kept = _retained(work)
    assert kept < 16 * MiB, f"{kept / MiB:.1f} MiB kept after five filters"
    assert len(placement.evaluations) <= 2
    assert placement.evaluations.bytes <= evaluations_module.EVALUATION_CACHE_BYTES


def test_pods_seen_are_bounded_by_their_size() -> None:
    """100 pods with 1 MiB of annotations each: at most the 64 MiB bound of them is kept (before:
    all of them, twice over with the evaluations), and the most recent are the ones kept."""
    placement = c.placement([c.node("a"), c.gpu_class()])

    def pod(k: int) -> c.Obj:
        meta = {
            "name": f"big-{k}",
            "namespace": "default",
            "uid": f"big-{k}",
            "annotations": {"note": "x" * MiB},
        }
        return {"metadata": meta, "spec": {}}

    def work() -> None:
        for k in range(100):
            assert placement.filter(parse_pod(pod(k)), ["a"]).passed == ["a"]

    kept = _retained(work)
    assert kept <= 64 * MiB + 4 * MiB, f"{kept / MiB:.1f} MiB kept"
    assert placement.seen_pod("big-99") is not None
    assert placement.seen_pod("big-0") is None
    assert 64 * MiB == evaluations_module.PODS_SEEN_BYTES


def test_masks_of_distinct_selectors_are_bounded_by_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """300 distinct selector sets over 2,000 rows: masks stay within the index's byte bound (before:
    one mask per set, forever), the newest kept, an evicted one rebuilt with the same rows."""
    monkeypatch.setattr(snapshot, "MASK_CACHE_BYTES", 256 * 1024, raising=False)
    objects: list[c.Obj] = [c.gpu_class()]
    for n in range(500):
        objects += [c.node(f"n{n}"), *c.gpus(f"n{n}", 4)]
    index = c.placement(objects).index()
    assert index.num_rows == 2000

    def selectors(k: int) -> tuple[str, ...]:
        return (f"device.attributes['{c.DRIVER}'].index != {k}",)

    first = index.mask(c.GPU, selectors(0)).match.copy()
    for k in range(1, 300):
        index.mask(c.GPU, selectors(k))
    kept = index._masks.values()
    assert sum(m.match.nbytes + m.error.nbytes for m in kept) <= 256 * 1024
    assert 0 < index.cached_masks < 300
    assert (index.mask(c.GPU, selectors(0)).match == first).all()


def test_a_sized_lru_keeps_both_bounds_and_drops_what_cannot_fit() -> None:
    lru: SizedLRU[str, str] = SizedLRU(max_entries=3, max_bytes=100)
    for key, size in [("a", 10), ("b", 20), ("c", 30), ("d", 40)]:
        lru.put(key, key, size)
    assert lru.items() == [("b", "b"), ("c", "c"), ("d", "d")] and lru.bytes == 90
    assert lru.get("b") == "b"  # now the most recent
    lru.put("e", "e", 50)  # 140 > 100: the least recently used go first (c, then d)
    assert [k for k, _ in lru.items()] == ["b", "e"] and lru.bytes == 70
    lru.resize("b", 60)  # b grew: 110 > 100, and b is the least recently used, so b goes
    assert [k for k, _ in lru.items()] == ["e"] and lru.bytes == 50
    lru.put("huge", "huge", 101)  # larger than the bound: not kept, and pushes nothing out
    assert "huge" not in lru and lru.items() == [("e", "e")] and lru.bytes == 50
    assert lru.evictions == 4


def test_deep_size_counts_what_a_decoded_object_holds() -> None:
    big = {"metadata": {"annotations": {"note": "x" * MiB}}, "spec": {"list": [1, 2, 3]}}
    assert MiB < deep_size(big) < MiB + 4096
    nested: c.Obj = {}
    for _ in range(100_000):  # deeper than the stack: walked without recursion
        nested = {"a": nested}
    assert deep_size(nested) > 100_000 * 64


def test_distinct_claims_leave_nothing_behind_once_the_bounded_caches_are_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What grew per distinct claim (issue 22: 280 MiB for the first 5,000 claims on the sample,
    36 MiB for the next 10,000). The first figure was mostly numba compiling the kernels in the
    background while those claims were filtered (a one-time 55-200 MiB, docs/robustness.md); the
    rest was the caches each distinct selector fills: the compiled selector (LRU of 4,096), its
    results on the devices (LRU of expressions), and one selector mask per distinct selector set,
    which nothing evicted. With every cache bounded, claims past the bounds leave nothing."""
    from extender.cel import selectors as compiled

    monkeypatch.setattr(compiled, "COMPILE_CACHE_SIZE", 50)
    monkeypatch.setattr(snapshot, "MASK_CACHE_BYTES", 64 * 1024, raising=False)
    # The per-shape table (one entry per distinct claim here, each with row- and node-sized
    # arrays) is bounded by its entry count: small, so that 50 claims fill it too, and the
    # measurement does not depend on where its clearing cycle stands.
    monkeypatch.setattr(shapes, "SHAPES", 4)
    claims = [
        {
            **b.claim(
                f"claim-{k}",
                [
                    b.request(
                        "r",
                        c.GPU,
                        1,
                        selectors=[{"cel": {"expression": f"device.attributes['{c.DRIVER}'].index != {k}"}}],
                    )
                ],
            ),
            "kind": "ResourceClaim",
        }
        for k in range(150)
    ]
    objects: list[c.Obj] = [c.gpu_class(), *claims]
    for n in range(1000):
        objects += [c.node(f"n{n}"), *c.gpus(f"n{n}", 4)]
    tracemalloc.start()  # before anything: what the caches free later was traced too
    placement = c.placement(objects)
    placement.evaluations = evaluations_module.Evaluations(size=8, pods_seen=8)
    placement.index().evaluator.cache_size = 8
    nodes = [f"n{n}" for n in range(1000)]

    def run(first: int, last: int) -> None:
        for k in range(first, last):
            pod = c.pod([claims[k]], name=f"pod-{k}", uid=f"pod-{k}")
            assert placement.filter(pod, nodes).passed

    try:
        live = []
        for first in (0, 50, 100):
            run(first, first + 50)
            gc.collect()
            live.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    # The first 50 filled every bounded cache. Before, each distinct claim kept an 8 KB mask
    # (4,000 rows): about 420 KiB per 50; what remains now is churn in module-level caches.
    grown = live[2] - live[1]
    assert grown < 150 * 1024, f"{grown / 1024:.0f} KiB kept by 50 more distinct claims ({live})"
