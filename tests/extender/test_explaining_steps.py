"""`explaining.Explanation`: explain in steps, as the dashboard runs it on the live placement.

Scope: a report made in many small steps is the report made in one go; a change of the cluster
between steps starts it over (a few times), after which a claims change is carried over with a
note and a devices change gives up with `StateChanging`; the time limit turns the report into a
timeout error.
"""

from __future__ import annotations

import copy
import itertools
from pathlib import Path
from typing import Any

import pytest

from extender.cluster.sample import sample_objects
from extender.cluster.state import ClusterState
from extender.core.placement import Placement
from extender.explaining import MAX_RESTARTS, Explanation, StateChanging, explain, load_pods
from extender.settings import Settings
from extender.wiring import build_services

PODS = load_pods(Path(__file__).resolve().parents[1] / "data" / "pipeline_pods.yaml")


def _pod(name: str) -> dict[str, Any]:
    return copy.deepcopy(next(p for p in PODS if p["metadata"]["name"] == name))


@pytest.fixture
def placement() -> Placement:
    state = ClusterState.from_objects(copy.deepcopy(sample_objects()))
    return build_services(Settings(), state)[0]


def _run(explanation: Explanation, between: Any = None) -> tuple[str, int]:
    """Step one piece at a time, calling `between()` after each step; (report, steps)."""
    for steps in itertools.count(1):
        if explanation.step(0.0):
            return explanation.report, steps
        if between is not None:
            between()
    raise AssertionError("unreachable")


def test_many_small_steps_give_the_report_of_one_go(placement: Placement) -> None:
    for name in ("gpu-training", "mig-notebook", "tpu-inference"):
        report, steps = _run(Explanation(placement, _pod(name)))
        assert steps > 3  # it did yield between pieces
        assert report == explain(placement.state, _pod(name), features=placement.features)


def _bump(placement: Placement, kind: str) -> None:
    obj = copy.deepcopy(next(iter(placement.state.iter(kind))))
    placement.state.upsert(obj)


def test_a_claims_change_restarts_then_carries_on_with_a_note(placement: Placement) -> None:
    report, _ = _run(Explanation(placement, _pod("gpu-training")), lambda: _bump(placement, "ResourceClaim"))
    assert "h100-node-02: PASSED" in report
    assert f"note: claims changed while explaining (more than {MAX_RESTARTS} times)" in report


def test_a_devices_change_after_the_restarts_gives_up(placement: Placement) -> None:
    with pytest.raises(StateChanging, match="devices changed while explaining"):
        _run(Explanation(placement, _pod("gpu-training")), lambda: _bump(placement, "ResourceSlice"))


def test_the_time_limit_turns_the_report_into_an_error(placement: Placement) -> None:
    ticks = itertools.count()
    explanation = Explanation(
        placement, _pod("gpu-training"), time_limit=5.0, clock=lambda: float(next(ticks))
    )
    report, _ = _run(explanation)
    assert "error: explain did not finish within 5 s (filter_timeout_seconds) of work" in report
    assert "PASSED" not in report
