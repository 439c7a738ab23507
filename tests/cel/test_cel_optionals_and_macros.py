"""The syntax cel-python 0.5 lacks and we add: optional selection and indexing (`x.?f`,
`x[?k]`, optional list/map entries), the optional functions, `cel.bind`; plus the comprehension
macros (one- and two-variable forms) with cel-go's error semantics."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from extender.errors import CelRuntimeError

Evaluate = Callable[..., bool]
D = 'device.attributes["gpu.example.com"]'


@pytest.mark.parametrize(
    "expression",
    [
        f"{D}.?productName.orValue('none') == 'H100'",
        f"{D}.?missing.orValue('none') == 'none'",
        f"{D}[?'index'].orValue(-1) == 3 && {D}[?'missing'].orValue(-1) == -1",
        f"{D}.?index.hasValue() && !{D}.?missing.hasValue()",
        f"{D}.?index.value() == 3",
        "device.attributes['nope.example.com'].?x.orValue(7) == 7",
        "device.attributes.?nope.hasValue()",
        "{'a': {'b': 1}}.?a.?b.orValue(0) == 1 && {'a': {'b': 1}}.?a.b.orValue(0) == 1",
        "{'a': {'b': 1}}.?a.c.orValue(0) == 0 && {'a': {}}.?x.y.z.orValue(0) == 0",
        "[1, 2][?1].orValue(0) == 2 && [1, 2][?5].orValue(0) == 0",
        "optional.of(1).value() == 1 && !optional.none().hasValue() && optional.none() == optional.none()",
        "optional.of({'k': 2}).k.value() == 2 && optional.of({'k': 2})['k'].value() == 2",
        "optional.ofNonZeroValue(0) == optional.none() && optional.ofNonZeroValue('a').hasValue()",
        "optional.none().or(optional.of(2)).value() == 2 && optional.of(1).or(optional.of(2)).value() == 1",
        "optional.of(1).orValue(1/0) == 1",
        "[?optional.of(1), ?optional.none(), 3] == [1, 3]",
        "{?'a': optional.of(1), ?'b': optional.none(), 'c': 3} == {'a': 1, 'c': 3}",
    ],
)
def test_optional_syntax_and_functions(evaluate: Evaluate, expression: str) -> None:
    assert evaluate(expression) is True


def test_optional_value_of_none_is_an_error(evaluate: Evaluate) -> None:
    with pytest.raises(CelRuntimeError, match=r"optional.none\(\) dereference"):
        evaluate(f"{D}.?missing.value() == 1")


def test_optional_result_is_not_a_bool(evaluate: Evaluate) -> None:
    with pytest.raises(CelRuntimeError, match="CEL result of type optional_type"):
        evaluate(f"{D}.?mig")


@pytest.mark.parametrize(
    "expression",
    [
        f"cel.bind(a, {D}, a.productName == 'H100' && a.index == 3)",
        "cel.bind(x, 1, cel.bind(y, x + 1, x + y == 3))",
        "cel.bind(x, 1, cel.bind(x, 2, x == 2)) && cel.bind(x, 'shadow', x == 'shadow')",
        "cel.bind(vals, [1, 2, 3], vals.exists(v, v == 2) && size(vals) == 3)",
        "[1, 2].all(x, cel.bind(y, x * 2, y > x))",
    ],
)
def test_cel_bind(evaluate: Evaluate, expression: str) -> None:
    assert evaluate(expression) is True


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("[1, 2, 3].all(x, x > 0)", True),
        ("[1, 2, 3].all(x, x > 1)", False),
        ("[].all(x, x > 1) && ![].exists(x, x > 1)", True),
        ("[1, 2, 3].exists(x, x == 3)", True),
        ("[1, 2, 3].exists_one(x, x > 2)", True),
        ("[1, 2, 3].exists_one(x, x > 1)", False),
        ("[1, 2, 3].map(x, x * 2) == [2, 4, 6]", True),
        ("[1, 2, 3].map(x, x > 1, x * 10) == [20, 30]", True),
        ("[1, 2, 3].filter(x, x % 2 == 1) == [1, 3]", True),
        ("{'a': 1, 'b': 2}.all(k, k in ['a', 'b']) && {'a': 1}.map(k, k) == ['a']", True),
        ("[[1, 2], [3]].all(l, l.all(x, x > 0))", True),
        ("['a', 'b'].all(i, v, (i == 0) == (v == 'a'))", True),
        ("{'a': 1, 'b': 2}.exists(k, v, k == 'b' && v == 2)", True),
        ("[5, 6].exists_one(i, v, i == 1 && v == 6)", True),
        ("device.attributes['gpu.example.com'].exists(k, k == 'mig')", True),
        # Errors lose to a deciding element, as with && and ||.
        ("[0, 1].exists(x, 1 / x == 1)", True),
        ("[0, 1].all(x, 1 / x == 5)", False),
    ],
)
def test_macros(evaluate: Evaluate, expression: str, expected: bool) -> None:
    assert evaluate(expression) is expected


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        ("[0, 1].exists(x, 1 / x == 5)", "division by zero"),
        ("[0, 1].exists_one(x, 1 / x == 1)", "division by zero"),
        ("[1].map(x, 1 / 0) == []", "division by zero"),
        ("[1].filter(x, x) == []", "found no matching overload for 'filter' applied to '(int)'"),
        ("[1].all(x, 'a')", "found no matching overload for 'all' applied to '(string)'"),
        ("(1).all(x, true)", "expression of type 'int' cannot be the range of all()"),
    ],
)
def test_macro_errors(evaluate: Evaluate, expression: str, error: str) -> None:
    with pytest.raises(CelRuntimeError) as info:
        evaluate(expression)
    assert str(info.value) == error


@pytest.mark.parametrize(
    "expression",
    [
        "device.attributes['gpu.example.com'].models.includes('b')",
        "!device.attributes['gpu.example.com'].models.includes('z')",
        "device.attributes['gpu.example.com'].productName.includes('H100')",
        "!device.attributes['gpu.example.com'].productName.includes('A100')",
        "device.attributes['gpu.example.com'].ids.includes(2)",
        "'b' in device.attributes['gpu.example.com'].models",
        "device.attributes['gpu.example.com'].versions.includes(semver('2.0.0'))",
        "device.attributes['gpu.example.com'].flags == [true, false]",
    ],
)
def test_list_attributes_and_includes(expression: str) -> None:
    from extender.cel import build_device_input, compile_selector

    device = build_device_input(
        "gpu.example.com",
        {
            "productName": {"string": "H100"},
            "models": {"strings": ["a", "b"]},
            "ids": {"ints": [1, 2]},
            "flags": {"bools": [True, False]},
            "versions": {"versions": ["1.0.0", "2.0.0"]},
        },
        {},
        None,
        consumable_capacity=False,
        list_type_attributes=True,
    )
    assert compile_selector(expression).evaluate(device) is True
