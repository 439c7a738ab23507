"""An unschedulable node is searched once: the reason is worded from that search.

The allocator notes (`SearchStats.held_back`) whether it refused a device, counters or capacity
only because other claims hold them. When it did not, the search with nothing in use is the
same search and fails the same way, so the node is unresolvable without a second search.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import extender.core.searching
from extender.allocator.allocating import SearchStats
from extender.allocator.counters import PoolCounters, nano_units
from extender.allocator.features import Features
from extender.allocator.inputs import AllocatedState
from extender.allocator.model import DeviceID, parse_slice
from extender.allocator.pools import gather_pools
from extender.core.tiers import FirstFitTier
from extender.pods import parse_pod
from extender.quantity import Quantity
from tests.allocator.builders import (
    NODE,
    claim,
    device,
    device_class,
    placement_and_pod,
    pool_slices,
    request,
    run,
)

DRIVER = "gpu.example.com"
CLASSES = [device_class("gpu", DRIVER)]


def _partitions(count: int) -> list[dict]:
    """`count` partitions of one GPU, each needing 1 of the GPU's 2 memory slices."""
    devices = [device(f"part-{i}", counters={"gpu-0": {"mem": 1}}) for i in range(count)]
    return pool_slices(DRIVER, "pool", devices, counter_sets={"gpu-0": {"mem": 2}})


def _holder(devices: list[str]) -> dict:
    results = [{"request": "r", "driver": DRIVER, "pool": "pool", "device": d} for d in devices]
    return {
        "metadata": {"name": "holder", "namespace": "default", "uid": "holder-uid"},
        "spec": {"devices": {"requests": []}},
        "status": {"allocation": {"devices": {"results": results}}, "reservedFor": [{"uid": "x"}]},
    }


def _filter_counting_searches(monkeypatch: Any, claims: list[dict], held: list[dict]) -> tuple[Any, int]:
    calls = 0
    real = extender.core.searching.allocate

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(extender.core.searching, "allocate", counting)
    # These tests are about the search's own reasons: keep the first-fit kernel tier (which
    # decides such nodes with no search at all) out of the way, so the search sees the node.
    placement, pod = placement_and_pod(_partitions(3), CLASSES, claims, held=held)
    placement.tiers = tuple(tier for tier in placement.tiers if not isinstance(tier, FirstFitTier))
    return placement.filter(parse_pod(pod), ["node-1"]), calls


def test_counters_held_by_others_make_the_node_failed_after_one_search(monkeypatch: Any) -> None:
    claims = [claim("c", [request("r", "gpu", count=2)])]
    verdict, calls = _filter_counting_searches(monkeypatch, claims, [_holder(["part-0"])])
    assert calls == 1
    assert "are in use" in verdict.failed["node-1"]


def test_a_node_that_cannot_serve_the_claim_is_unresolvable_after_one_search(monkeypatch: Any) -> None:
    claims = [claim("c", [request("r", "gpu", count=3)])]  # 3 partitions, counters for 2
    verdict, calls = _filter_counting_searches(monkeypatch, claims, [])
    assert calls == 1
    assert "no combination" in verdict.unresolvable["node-1"]


# ----------------------------------------------------------------------------- the promise
@st.composite
def _cases(draw: Any) -> tuple[list[dict], list[dict], AllocatedState]:
    count = draw(st.integers(1, 6))
    devices = []
    for i in range(count):
        fields: dict[str, Any] = {"attrs": {"numa": draw(st.integers(0, 2))}}
        if draw(st.booleans()):
            fields["counters"] = {"cs": {"mem": draw(st.integers(1, 3))}}
        if draw(st.integers(0, 3)) == 0:
            fields["allowMultipleAllocations"] = True
            fields["capacity"] = {"bw": "10"}
        devices.append(device(f"d{i}", **fields))
    slices = pool_slices(DRIVER, "pool", devices, counter_sets={"cs": {"mem": draw(st.integers(1, 6))}})
    requests = []
    for j in range(draw(st.integers(1, 2))):
        extra: dict[str, Any] = {}
        if draw(st.booleans()):
            extra["capacity"] = {"requests": {"bw": str(draw(st.integers(1, 10)))}}
        requests.append(request(f"r{j}", "gpu", count=draw(st.integers(1, 3)), **extra))
    constraints = [{"distinctAttribute": f"{DRIVER}/numa"}] if draw(st.booleans()) else []
    held = frozenset(DeviceID(DRIVER, "pool", f"d{i}") for i in range(count) if draw(st.integers(0, 2)) == 0)
    shared = {
        DeviceID(DRIVER, "pool", f"d{i}"): {"bw": Quantity.parse(draw(st.integers(1, 10)))}
        for i in range(count)
        if draw(st.integers(0, 3)) == 0
    }
    allocated = AllocatedState(
        devices=frozenset(d for d in held if d not in shared),
        shared_ids=frozenset((d, f"share-{d.device}") for d in shared),
        aggregated_capacity=shared,
    )
    return slices, [claim("c", requests, constraints)], allocated


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(_cases())
def test_a_failure_without_held_back_fails_with_nothing_in_use(
    case: tuple[list[dict], list[dict], AllocatedState],
) -> None:
    slices, claims, allocated = case
    stats = SearchStats()
    if run(slices, CLASSES, claims, allocated=allocated, stats=stats) is None and not stats.held_back:
        assert run(slices, CLASSES, claims) is None


def test_held_back_is_set_when_only_others_block() -> None:
    slices = _partitions(2)
    held = AllocatedState(devices=frozenset({DeviceID(DRIVER, "pool", "part-0")}))
    stats = SearchStats()
    assert (
        run(slices, CLASSES, [claim("c", [request("r", "gpu", count=2)])], allocated=held, stats=stats)
        is None
    )
    assert stats.held_back


# ----------------------------------------------------------------------------- integer counters
def test_counters_are_exact_integers_for_fractional_quantities() -> None:
    assert nano_units(Quantity.parse("500m")) == 500_000_000
    assert nano_units(Quantity.parse("1.5Gi")) == 3 * 2**29 * 10**9
    assert nano_units(Quantity.parse("1n")) == 1
    slices = pool_slices(
        DRIVER,
        "pool",
        [device(f"p{i}", counters={"cs": {"mem": "333m"}}) for i in range(4)],
        counter_sets={"cs": {"mem": "1"}},
    )
    parsed = [parse_slice(s) for s in slices]
    (pool,) = gather_pools(parsed, NODE, Features(), all_slices_of_pool={parsed[0].pool_id: parsed})
    counters = PoolCounters(pool, lambda _: False)
    costs = [counters.cost(d) for s in pool.slices for d in s.devices]
    assert [counters.take(c) for c in costs] == [True, True, True, False]  # 3 x 0.333 <= 1 < 4 x
    counters.give_back(costs[0])
    assert counters.take(costs[3]) and counters.violations == 0


def test_counters_held_by_others_are_subtracted_and_can_go_negative() -> None:
    slices = _partitions(3)
    parsed = [parse_slice(s) for s in slices]
    (pool,) = gather_pools(parsed, NODE, Features(), all_slices_of_pool={parsed[0].pool_id: parsed})
    counters = PoolCounters(pool, lambda device_id: device_id.device in ("part-0", "part-1", "part-2"))
    assert counters.available == [-1 * 10**9]
    cost = counters.cost(pool.slices[0].devices[0])
    assert not counters.take(cost) and counters.fits_without_others(cost)
