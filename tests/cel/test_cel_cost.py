"""The cost budget: upstream's limits and texts, cel-go's cost model (extender/cel/costs.py).

Estimated at compile time (over the limit: API validation's "too complex, exceeds cost limit"),
charged per comprehension element at run time (over the budget: cel-go's "operation cancelled:
actual cost limit exceeded").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from extender.cel import build_device_input, compile_selector, costs
from extender.cel.compiling import compile_tree
from extender.cel.comprehensions import budget_cell
from extender.cel.parsing import parse
from extender.errors import CelCompileError, CelRuntimeError

Evaluate = Callable[..., bool]
TOO_COMPLEX = "too complex, exceeds cost limit"
EXCEEDED = "operation cancelled: actual cost limit exceeded"
THOUSAND = "[" + ", ".join(str(i) for i in range(1000)) + "]"


def compile_error(expression: str) -> str:
    with pytest.raises(CelCompileError) as info:
        compile_selector(expression)
    return str(info.value)


def estimate(expression: str) -> int:
    return costs.Estimator().estimate(parse(expression))


def spent(expression: str, device: Any) -> int:
    """The budget one evaluation actually charges (the runtime side of the model)."""
    program, slots, _ = compile_tree(expression, parse(expression))
    env: list[Any] = [None] * slots
    env[0], env[1] = device.root, budget_cell(costs.MAX_COST, None)
    program(env)
    return costs.MAX_COST - env[1][0]


def test_a_million_comprehension_steps_is_too_complex() -> None:
    """Before: compiled, then ran ~2 s per device (measured) until an iteration cap stopped it."""
    expression = f"{THOUSAND}.all(a, {THOUSAND}.all(b, a + b >= 0))"
    assert len(expression) < 10240
    message = compile_error(expression)
    assert message.startswith(TOO_COMPLEX + " (estimated cost ")
    assert message.endswith(", limit 1000000)")


def test_map_doubling_a_list_22_times_is_too_complex() -> None:
    """Before: compiled, then ran ~1.8 s and grew to ~290 MB (measured) before a size cap stopped it."""
    expression = "[[0, 0, 0, 0, 0, 0, 0, 0]]" + ".map(l, l + l)" * 22 + ".size() == 1"
    assert compile_error(expression).startswith(TOO_COMPLEX)


def test_string_doubling_through_bind_is_too_complex() -> None:
    expression = "'" + "x" * 64 + "'"
    for i in range(20):
        expression = f"cel.bind(v{i}, {expression}, v{i} + v{i})"
    assert compile_error(f"size({expression}) > 0").startswith(TOO_COMPLEX)


def test_the_rejection_is_cached_like_any_compile_error() -> None:
    expression = f"{THOUSAND}.exists(a, {THOUSAND}.exists(b, a == b + 1))"
    assert compile_error(expression) == compile_error(expression)


@pytest.mark.parametrize(
    "expression",
    [
        "device.driver == 'gpu.example.com'",
        "device.attributes['gpu.example.com'].productName.matches('^H1[0-9]+$')",
        "device.capacity['gpu.example.com'].memory.compareTo(quantity('40Gi')) >= 0",
        "cel.bind(a, device.attributes['gpu.example.com'], a.index > 1 && a.driverVersion.major() >= 500)",
        "device.attributes.exists(d, device.attributes[d].exists(k, k.startsWith('pcie')))",
    ],
)
def test_ordinary_selectors_are_cheap(expression: str) -> None:
    assert estimate(expression) < 10_000
    assert compile_selector(expression).expression == expression


def test_nested_list_attribute_comprehensions_stay_allowed() -> None:
    """Two list attributes of upstream's maximum size, iterated two deep: well under the limit."""
    models = "device.attributes['gpu.example.com'].models"
    assert estimate(f"{models}.all(a, {models}.exists(b, a == b))") < 100_000


def test_costs_follow_cel_go_unit_prices() -> None:
    assert estimate("true") == 0
    assert estimate("device.driver") == 2  # identifier + selection
    assert estimate("device.driver == 'a'") == 3  # + comparison (ceil(1 * 0.1))
    assert estimate("[1, 2]") == costs.LIST_CREATE
    assert estimate("{'a': 1}") == costs.MAP_CREATE
    # `&&` is free; a conditional counts its dearer branch.
    assert estimate("device.driver == 'a' && device.driver == 'b'") == 6
    assert estimate("true ? device.driver == 'a' : false") == 3
    # A comprehension: its range once, then per element the overhead and the body.
    assert estimate("[1, 2, 3].all(x, x > 0)") == costs.LIST_CREATE + 1 + 3 * (3 + 2)
    # cel.bind: a comprehension over an empty list in cel-go.
    assert estimate("cel.bind(v, device.driver, v == 'a')") == 2 + 2 + costs.LIST_CREATE


def test_string_costs_grow_with_length() -> None:
    short, long = "'" + "a" * 10 + "'", "'" + "a" * 1000 + "'"
    assert estimate(f"{long}.contains('a')") > estimate(f"{short}.contains('a')")
    assert estimate(f"{long}.matches('a+')") > estimate(f"{short}.matches('a+')")
    assert estimate(f"{long} + {long} == ''") > estimate(f"{short} + {short} == ''")
    assert estimate(f"{long}.split('').size() > 0") > estimate(f"{short}.split('').size() > 0")


def test_runtime_charge_never_exceeds_the_estimate(gpu: Any) -> None:
    """Runtime charges the static body per element, so what passed the estimate never stops."""
    for expression in [
        "[1, 2, 3].all(x, x > 0)",
        "['a', 'b'].exists(s, s.matches('^b$'))",
        "[[1, 2], [3]].map(l, l.filter(x, x > 1)) == [[2], [3]]",
        "device.attributes.all(d, device.attributes[d].all(k, k != ''))",
        "{'a': 1}.exists(k, v, v == 1)",
    ]:
        charged = spent(expression, gpu)
        assert 0 < charged <= estimate(expression), expression


def test_runtime_charge_is_per_element_and_counts_the_body(gpu: Any) -> None:
    cheap, dear = "[1, 2, 3, 4].all(x, true)", "[1, 2, 3, 4].all(x, x > 0 && x < 9 && x != 5)"
    assert spent(cheap, gpu) == 4 * 3
    assert spent(dear, gpu) == 4 * (3 + 6)


def test_exceeding_the_runtime_budget_is_an_error_nothing_absorbs() -> None:
    # Device data over upstream's limits (2,000 list values; upstream allows 48) defeats the
    # estimate, which trusts those limits; the runtime budget still stops the evaluation.
    big = build_device_input(
        "gpu.example.com",
        {"models": {"strings": [f"m{i}" for i in range(2000)]}},
        {},
        None,
        consumable_capacity=False,
        list_type_attributes=True,
    )
    models = "device.attributes['gpu.example.com'].models"
    for expression in [
        f"{models}.all(a, {models}.all(b, a != ''))",
        f"{models}.exists(a, {models}.exists(b, a == 'x')) || true",
        f"!{models}.map(a, {models}.filter(b, a == b)).exists(l, size(l) == 0)",
    ]:
        with pytest.raises(CelRuntimeError) as info:
            compile_selector(expression).evaluate(big)
        assert str(info.value) == EXCEEDED
