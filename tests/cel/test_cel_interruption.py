"""A selector evaluation stops at its caller's deadline (issue 22 item 1).

Before: `CompiledSelector.evaluate` had no way to stop but the cost budget, and an expression
within upstream's cost limit (`L.all(a, L.all(b, L.all(c, a + b + c >= 0)))` over 46 numbers)
runs about 0.1-0.2 s in Python; a mask over many devices, or many such selectors, held the worker
for as long as it took. Now `should_stop` is polled every `CHECK_EVERY` cost units. Bounds are
counted in polls and budget units, not timed.
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.cel import compile_selector, comprehensions, interrupted
from extender.errors import SelectorsInterrupted

NUMBERS = "[" + ", ".join(str(i) for i in range(46)) + "]"
HEAVY = f"{NUMBERS}.all(a, {NUMBERS}.all(b, {NUMBERS}.all(c, a + b + c >= 0)))"


class Deadline:
    """`should_stop` that gives a cause from its `after`-th poll on; counts the polls."""

    def __init__(self, after: int) -> None:
        self.after = after
        self.polls = 0

    def __call__(self) -> str | None:
        self.polls += 1
        return "context deadline exceeded" if self.polls >= self.after else None


def test_a_heavy_selector_within_the_cost_limit_stops_at_the_deadline(gpu: Any) -> None:
    selector = compile_selector(HEAVY)  # within the limit: it compiles
    deadline = Deadline(after=3)
    with pytest.raises(SelectorsInterrupted) as caught:
        selector.evaluate(gpu, should_stop=deadline)
    assert str(caught.value) == interrupted("context deadline exceeded")
    assert str(caught.value).startswith("filter operation aborted: context deadline exceeded")
    assert deadline.polls == 3  # stopped at the first poll that said so, not at the end


def test_the_deadline_is_polled_every_check_interval_of_cost(gpu: Any) -> None:
    """An evaluation of about 900,000 cost units polls about 90 times: never far from the clock."""
    deadline = Deadline(after=10**9)
    assert compile_selector(HEAVY).evaluate(gpu, should_stop=deadline) is True
    units = 906_303  # HEAVY's estimate; the charge is at most that
    assert deadline.polls <= units // comprehensions.CHECK_EVERY + 1
    assert deadline.polls >= 50


def test_a_cheap_selector_never_polls_and_without_a_deadline_nothing_changes(gpu: Any) -> None:
    deadline = Deadline(after=1)
    assert compile_selector("[1, 2, 3].all(x, x > 0)").evaluate(gpu, should_stop=deadline) is True
    assert deadline.polls == 0
    assert compile_selector(HEAVY).evaluate(gpu) is True


def test_an_interruption_is_not_absorbed_by_logical_operators_or_macros(gpu: Any) -> None:
    """`||` and `exists` absorb CEL errors when another operand decides; an interruption is not one."""
    for expression in (f"{HEAVY} || true", f"[1].exists(x, {HEAVY} || x == 1)", f"true && {HEAVY}"):
        with pytest.raises(SelectorsInterrupted):
            compile_selector(expression).evaluate(gpu, should_stop=Deadline(after=1))
