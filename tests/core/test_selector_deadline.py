"""A pod's selector evaluation stops at its deadline, and the retry continues (issue 22 item 1).

Before: masks (`DeviceIndex.mask`) ran every device's CEL to the end whatever the deadline; one
claim with two heavy selectors held the worker 19 s. Now the tiers evaluate selectors under the
search deadline: past it, filter answers the timeout error, and the evaluation is not kept, so
the retry re-uses the results reached so far and evaluates the rest. The clock is a counter
(one tick per read), so "time" is the number of deadline checks, not wall time.
"""

from __future__ import annotations

import itertools

import pytest

from extender.core.placement import Placement
from extender.verdicts import FilterVerdict
from tests.allocator import builders as b
from tests.core import small_cluster as c

NODES = ["a", "b", "c", "d"]
# Read as a whole map (`in`), so CEL runs device by device; the same test with a fixed-path
# selector, evaluated once per group of equal values (extender.index.selector_groups), follows.
PER_DEVICE = f"'index' in device.attributes['{c.DRIVER}'] && device.attributes['{c.DRIVER}'].index >= 1"
GROUPED = f"device.attributes['{c.DRIVER}'].index >= 1"


def _claim(expression: str) -> c.Obj:
    selectors = [{"cel": {"expression": expression}}]
    return {**b.claim("picky", [b.request("r", c.GPU, 2, selectors=selectors)]), "kind": "ResourceClaim"}


CLAIM = _claim(PER_DEVICE)
TIMED_OUT = "timed out trying to allocate devices: filter operation aborted: context deadline exceeded"


def _objects(claim: c.Obj = CLAIM) -> list[c.Obj]:
    objects: list[c.Obj] = [c.gpu_class(), claim]
    for name, count in zip(NODES, (3, 2, 3, 1), strict=True):
        objects += [c.node(name), *c.gpus(name, count)]
    return objects


def _ticking(timeout: float, claim: c.Obj = CLAIM) -> Placement:
    ticks = itertools.count()
    return c.placement(_objects(claim), clock=lambda: float(next(ticks)), filter_timeout_seconds=timeout)


def _outcome(verdict: FilterVerdict) -> tuple[list[str], dict[str, str], dict[str, str]]:
    return verdict.passed, verdict.failed, verdict.unresolvable


def test_selectors_stop_at_the_deadline_and_each_retry_gets_further() -> None:
    reference = c.placement(_objects())
    expected = reference.filter(c.pod([CLAIM]), NODES)
    assert expected.passed == ["a", "c"]  # two devices with index >= 1: the selector matters

    placement = _ticking(timeout=2)
    attempts: list[FilterVerdict] = []
    while len(attempts) < 20:
        attempts.append(placement.filter(c.pod([CLAIM]), NODES))
        if not attempts[-1].error:
            break
    assert len(attempts) > 2, "the evaluation never hit its deadline"
    assert all(v.error.startswith(TIMED_OUT) for v in attempts[:-1])
    assert "while evaluating CEL selectors" in attempts[0].error
    assert _outcome(attempts[-1]) == _outcome(expected)
    # Nothing evaluated twice: every attempt kept what it had reached.
    assert placement.index().evaluator.evaluations == reference.index().evaluator.evaluations


@pytest.mark.parametrize("timeout", [1, 3])
def test_a_stopped_evaluation_leaves_no_verdict_behind(timeout: float) -> None:
    """The interrupted evaluation is not cached: the next call evaluates again."""
    placement = _ticking(timeout)
    first = placement.filter(c.pod([CLAIM]), NODES)
    assert first.error.startswith(TIMED_OUT)
    assert len(placement.evaluations) == 0
