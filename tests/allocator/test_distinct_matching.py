"""`distinctAttribute` searches are pruned by bipartite matching (extender/allocator/distinct.py).

The pruning must be exact (the same first solution, the same errors as the plain search) and
must make hopeless distinct searches short. Speed is asserted as search steps, never time.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.allocator.allocating import SearchStats
from extender.allocator.distinct import Demand, can_fill, viable_values
from extender.allocator.inputs import AllocatedState
from extender.allocator.model import DeviceID
from extender.errors import AllocationAborted, AllocationError
from tests.allocator.builders import claim, device, device_class, pool_slices, request, run

DRIVER = "gpu.example.com"
CLASSES = [device_class("gpu", DRIVER)]


def test_can_fill_is_a_matching_not_a_count() -> None:
    # Three slots, three values overall, but two slots can only use {a, b} and one {a}:
    assert not can_fill([Demand(2, frozenset("ab")), Demand(1, frozenset("a"))], frozenset())
    assert can_fill([Demand(2, frozenset("ab")), Demand(1, frozenset("ac"))], frozenset())
    assert not can_fill([Demand(2, frozenset("ab")), Demand(1, frozenset("ac"))], frozenset("c"))
    assert can_fill([Demand(0, frozenset())], frozenset())


def test_viable_values_leave_room_for_later_requests() -> None:
    current = Demand(1, frozenset("abc"))
    later = [Demand(2, frozenset("ab"))]
    assert viable_values(current, later, frozenset()) == frozenset("c")
    assert viable_values(current, later, frozenset("c")) == frozenset()


def _hopeless_cluster() -> tuple[list[dict], list[dict]]:
    """24 devices over 5 NUMA values; two requests of 3 distinct devices need 6 values."""
    slices = pool_slices(DRIVER, "pool", [device(f"gpu-{i}", attrs={"numa": i % 5}) for i in range(24)])
    claims = [
        claim(
            "c",
            [request("a", "gpu", count=3), request("b", "gpu", count=3)],
            [{"distinctAttribute": f"{DRIVER}/numa"}],
        )
    ]
    return slices, claims


def test_a_hopeless_distinct_claim_is_decided_without_searching() -> None:
    """The plain search needs 37,955 steps (about 4 s here) to say no; the matching says it at
    the first step. The plain search is run with a step budget so the test stays short."""
    slices, claims = _hopeless_cluster()
    pruned = SearchStats()
    assert run(slices, CLASSES, claims, stats=pruned) is None
    assert pruned.steps <= 2 and pruned.pruned >= 1

    plain = SearchStats()
    budget = 5_000
    with pytest.raises(AllocationAborted):
        run(
            slices,
            CLASSES,
            claims,
            stats=plain,
            prune_distinct=False,
            should_stop=lambda: "step budget spent" if plain.steps > budget else None,
        )
    assert plain.steps > budget  # the plain search had not finished: it needs many more


def test_a_satisfiable_distinct_claim_finds_upstreams_first_fit_in_few_steps() -> None:
    # gpu-0..4 carry numa 0..4, then gpu-5.. repeat. a takes gpu-0, gpu-1, gpu-2 (first fit);
    # b then needs 3 values from {3, 4} plus a third one: impossible with a = {0, 1, 2}, so the
    # first solution gives a two of the low values and leaves b room, in first-fit order.
    slices = pool_slices(DRIVER, "pool", [device(f"gpu-{i}", attrs={"numa": i % 6}) for i in range(24)])
    claims = [
        claim(
            "c",
            [request("a", "gpu", count=3), request("b", "gpu", count=3)],
            [{"distinctAttribute": f"{DRIVER}/numa"}],
        )
    ]
    plain, pruned = SearchStats(), SearchStats()
    expected = run(slices, CLASSES, claims, stats=plain, prune_distinct=False)
    got = run(slices, CLASSES, claims, stats=pruned)
    assert expected is not None and got is not None
    assert [[r.device.name for r in a.devices] for a in got] == [
        [r.device.name for r in a.devices] for a in expected
    ]
    assert pruned.steps <= plain.steps


# ----------------------------------------------------------------------------- exactness
_VALUES = st.integers(min_value=0, max_value=3)


@st.composite
def _cases(draw: Any) -> tuple[list[dict], list[dict], AllocatedState]:
    count = draw(st.integers(min_value=1, max_value=9))
    devices = []
    for i in range(count):
        attrs: dict[str, Any] = {"kind": draw(st.sampled_from(["x", "y"]))}
        if draw(st.integers(0, 9)) > 0:  # now and then a device lacks the attribute
            attrs["numa"] = draw(_VALUES)
        attrs["group"] = draw(st.integers(0, 1))
        extra: dict[str, Any] = {}
        if draw(st.integers(0, 5)) == 0:
            extra["taints"] = [{"key": "k", "value": "v", "effect": "NoSchedule"}]
        devices.append(device(f"d{i}", attrs=attrs, **extra))
    slices = pool_slices(DRIVER, "pool", devices)
    requests = []
    for j in range(draw(st.integers(min_value=1, max_value=3))):
        fields: dict[str, Any] = {}
        kind = draw(st.sampled_from(["x", "y", None]))
        if kind:
            fields["selectors"] = [{"cel": {"expression": f'device.attributes["{DRIVER}"].kind == "{kind}"'}}]
        if draw(st.booleans()):
            fields["tolerations"] = [{"operator": "Exists"}]
        if draw(st.integers(0, 4)) == 0:
            sub = {"name": "s0", "deviceClassName": "gpu", "count": draw(st.integers(1, 3))}
            requests.append(
                {"name": f"r{j}", "firstAvailable": [sub, {"name": "s1", "deviceClassName": "gpu"}]}
            )
        else:
            requests.append(request(f"r{j}", "gpu", count=draw(st.integers(1, 3)), **fields))
    names = [r["name"] for r in requests]
    constraints: list[dict] = [
        {
            "distinctAttribute": f"{DRIVER}/numa",
            "requests": draw(st.sampled_from([[], names[:1], names[-2:]])),
        }
    ]
    if draw(st.booleans()):
        constraints.append(
            {"matchAttribute": f"{DRIVER}/group", "requests": draw(st.sampled_from([[], names[:1]]))}
        )
    held = frozenset(DeviceID(DRIVER, "pool", f"d{i}") for i in range(count) if draw(st.integers(0, 4)) == 0)
    return slices, [claim("c", requests, constraints)], AllocatedState(devices=held)


def _outcome(slices: list[dict], claims: list[dict], allocated: AllocatedState, prune: bool) -> Any:
    try:
        result = run(slices, CLASSES, claims, allocated=allocated, prune_distinct=prune)
    except AllocationError as exc:
        return ("error", str(exc))
    if result is None:
        return None
    return [[(r.request, r.device.name) for r in a.devices] for a in result]


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(_cases())
def test_pruning_never_changes_the_outcome(case: tuple[list[dict], list[dict], AllocatedState]) -> None:
    """Same first-fit devices, same unschedulable, same error, with and without pruning."""
    slices, claims, allocated = case
    assert _outcome(slices, claims, allocated, True) == _outcome(slices, claims, allocated, False)
