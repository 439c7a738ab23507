"""Evaluating selectors against a device: the `device` variable's lookup rules, runtime errors,
the bool-result rule, and CEL's operators (error absorption, heterogeneous equality, overflow)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from extender.cel import build_device_input, compile_selector
from extender.errors import CelRuntimeError

DRIVER = "gpu.example.com"  # the driver of conftest's `gpu` device
Evaluate = Callable[..., bool]


def runtime_error(evaluate: Evaluate, expression: str) -> str:
    with pytest.raises(CelRuntimeError) as info:
        evaluate(expression)
    return str(info.value)


@pytest.mark.parametrize(
    "expression",
    [
        f'device.driver == "{DRIVER}"',
        f'device.attributes["{DRIVER}"].productName == "H100"',
        f'device.attributes["{DRIVER}"].index == 3 && !device.attributes["{DRIVER}"].mig',
        'device.attributes["resource.kubernetes.io"].pcieRoot == "pci0000:15"',
        f'device.capacity["{DRIVER}"].memory == quantity("80Gi")',
        'device.capacity["example.com"].bandwidth.isGreaterThan(quantity("99G"))',
        f'device.attributes["{DRIVER}"].driverVersion == semver("550.54.15")',
        "device.allowMultipleAllocations == false",
    ],
)
def test_device_fields_and_domains(evaluate: Evaluate, expression: str) -> None:
    assert evaluate(expression) is True


def test_unknown_domain_is_an_empty_map(evaluate: Evaluate) -> None:
    assert evaluate('device.attributes["nope.example.com"] == {}')
    assert evaluate('size(device.capacity["nope.example.com"]) == 0')
    assert evaluate('!("x" in device.attributes["nope.example.com"])')
    assert evaluate("device.attributes.nope == {}")


def test_in_on_the_domain_map_reports_only_real_domains(evaluate: Evaluate) -> None:
    assert evaluate(f'"{DRIVER}" in device.attributes && !("nope" in device.attributes)')


def test_unknown_id_is_a_no_such_key_error(evaluate: Evaluate) -> None:
    assert runtime_error(evaluate, f'device.attributes["{DRIVER}"].missing == 1') == "no such key: missing"
    assert runtime_error(evaluate, f'device.attributes["{DRIVER}"]["missing"] == 1') == "no such key: missing"


def test_has_and_in_test_ids_without_error(evaluate: Evaluate) -> None:
    assert evaluate(f'has(device.attributes["{DRIVER}"].index)')
    assert not evaluate(f'has(device.attributes["{DRIVER}"].missing)')
    assert evaluate(f'"index" in device.attributes["{DRIVER}"]')


def test_has_on_the_domain_map_is_true_like_upstreams_find(evaluate: Evaluate) -> None:
    """Upstream's default-returning map answers presence tests with "found" for every domain."""
    assert evaluate("has(device.attributes.nope)")


def test_result_must_be_a_bool(evaluate: Evaluate) -> None:
    assert (
        runtime_error(evaluate, "device.driver") == "CEL result of type string could not be converted to bool"
    )
    assert runtime_error(evaluate, "1") == "CEL result of type int could not be converted to bool"


def test_allow_multiple_allocations_is_absent_without_consumable_capacity() -> None:
    device = build_device_input(DRIVER, {}, {}, True, consumable_capacity=False, list_type_attributes=False)
    selector = compile_selector("device.allowMultipleAllocations")
    with pytest.raises(CelRuntimeError, match="no such key: allowMultipleAllocations"):
        selector.evaluate(device)
    assert compile_selector("!has(device.allowMultipleAllocations)").evaluate(device)
    shared = build_device_input(DRIVER, {}, {}, True, consumable_capacity=True, list_type_attributes=False)
    assert selector.evaluate(shared) is True


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1/0 == 1 || true", True),
        ("true || 1/0 == 1", True),
        ("1/0 == 1 && false", False),
        ("false && 1/0 == 1", False),
        ("true ? true : 1/0 == 1", True),
        ("false ? 1/0 == 1 : true", True),
    ],
)
def test_logical_operators_absorb_errors_like_cel_go(
    evaluate: Evaluate, expression: str, expected: bool
) -> None:
    assert evaluate(expression) is expected


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        ("1/0 == 1 || false", "division by zero"),
        ("1 % 0 == 0", "modulus by zero"),
        ("9223372036854775807 + 1 > 0", "integer overflow"),
        ("-9223372036854775808 - 1 < 0", "integer overflow"),
        ("0u - 1u > 0u", "unsigned integer overflow"),
        ("1 + 'a' == 2", "found no matching overload for '_+_' applied to '(int, string)'"),
        ("1 < 'a'", "found no matching overload for '_<_' applied to '(int, string)'"),
        ("'a' ? true : false", "found no matching overload for '_?_:_' applied to '(string)'"),
        ("[1][5] == 1", "index out of range: 5"),
        ("{'a': 1}['b'] == 1", "no such key: b"),
        ("!1", "found no matching overload for '!_' applied to '(int)'"),
        ("'abc'.charAt(10) == ''", "index out of range: 10"),
    ],
)
def test_runtime_errors(evaluate: Evaluate, expression: str, error: str) -> None:
    assert runtime_error(evaluate, expression) == error


@pytest.mark.parametrize(
    "expression",
    [
        "1 == 1.0 && 1u == 1 && 2.0 == 2u",
        "1 != 'a' && 'a' != b'a' && [1] != {} && null == null",
        "true != 1",
        "[1, 'a'] == [1.0, 'a'] && {'k': [1]} == {'k': [1u]}",
        "1 < 1.5 && 2u > 1 && 'a' < 'b' && b'a' < b'b' && false < true",
        "7 / 2 == 3 && -7 / 2 == -3 && -7 % 3 == -1 && 7.0 / 2.0 == 3.5",
        "1.0 / 0.0 > 1e308 && 'ab' + 'c' == 'abc' && [1] + [2] == [1, 2]",
        "2 in [1, 2] && 'a' in {'a': 1} && !(3 in [1, 2])",
        "-(-1) == 1 && !!true && 0x10 == 16 && 1e3 == 1000.0",
        "'\\x41\\u00e9' == 'Aé' && r'\\n' == '\\\\n' && b'\\xff' == bytes(b'\\xff')",
        "{'a': 1}.a == 1 && {1: 'x'}[1] == 'x' && [1, 2, 3,][2] == 3",
        "type(device) == map && type(1u) == uint && type(null) == null_type && dyn(1) == 1",
    ],
)
def test_operator_semantics(evaluate: Evaluate, expression: str) -> None:
    assert evaluate(expression) is True


def test_long_or_chain_evaluates_without_recursion(evaluate: Evaluate) -> None:
    chain = " || ".join(f"device.driver == 'd{i}'" for i in range(300)) + f" || device.driver == '{DRIVER}'"
    assert evaluate(chain)


def test_selectors_are_reusable_across_devices() -> None:
    selector = compile_selector('device.attributes[device.driver].model == "a"')
    a = build_device_input(
        "a.example.com",
        {"model": {"string": "a"}},
        {},
        None,
        consumable_capacity=False,
        list_type_attributes=False,
    )
    b = build_device_input(
        "b.example.com",
        {"model": {"string": "b"}},
        {},
        None,
        consumable_capacity=False,
        list_type_attributes=False,
    )
    assert [selector.evaluate(a), selector.evaluate(b), selector.evaluate(a)] == [True, False, True]


def test_comprehension_budget_stops_runaway_evaluation(evaluate: Evaluate) -> None:
    # A list attribute of 2,000 values: far over upstream's 48, so the compile-time estimate
    # (which trusts upstream's limits) lets the selector through and the runtime budget must stop
    # it: four million steps iterated two deep.
    big = build_device_input(
        "gpu.example.com",
        {"models": {"strings": [f"m{i}" for i in range(2000)]}},
        {},
        None,
        consumable_capacity=False,
        list_type_attributes=True,
    )
    models = "device.attributes['gpu.example.com'].models"
    expression = f"{models}.all(i, {models}.all(j, i + j != ''))"
    exceeded = "operation cancelled: actual cost limit exceeded"
    assert runtime_error(lambda e: evaluate(e, big), expression) == exceeded
    # Exceeding the budget is final: a deciding operand does not rescue the evaluation.
    assert runtime_error(lambda e: evaluate(e, big), f"{expression} || true") == exceeded
