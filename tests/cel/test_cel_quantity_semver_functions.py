"""Kubernetes' CEL quantity and semver libraries: every function, their overloads and errors,
and version attributes compared through them."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from extender.cel import build_device_input
from extender.errors import CelRuntimeError

Evaluate = Callable[..., bool]


@pytest.mark.parametrize(
    "expression",
    [
        'quantity("1Gi") == quantity("1024Mi")',
        'quantity("200M") == quantity("0.2G") && quantity("2000k") == quantity("2M")',
        'quantity("200M") != quantity("0.3G")',
        'isQuantity("1.3Gi") && isQuantity("10000k") && !isQuantity("200K") && !isQuantity("1,3G")',
        'quantity("200M").compareTo(quantity("0.2G")) == 0',
        'quantity("50M").compareTo(quantity("50Mi")) == -1',
        'quantity("50Mi").compareTo(quantity("50M")) == 1',
        'quantity("150Mi").isGreaterThan(quantity("100Mi"))',
        '!quantity("50Mi").isGreaterThan(quantity("100Mi"))',
        'quantity("50M").isLessThan(quantity("100M")) && !quantity("100M").isLessThan(quantity("50M"))',
        'quantity("50k").add(quantity("20")) == quantity("50.02k")',
        'quantity("50k").add(20) == quantity("50020")',
        'quantity("50k").sub(quantity("20")) == quantity("49.98k")',
        'quantity("50k").sub(20000) == quantity("30k")',
        'quantity("50k").add(20).sub(quantity("100k")).sub(-50000) == quantity("20")',
        'quantity("5").sign() == 1 && quantity("-5m").sign() == -1 && quantity("0").sign() == 0',
        'quantity("50000000G").isInteger() && quantity("50k").isInteger() && !quantity("1.5").isInteger()',
        '!quantity("9999999999999999999999999999999999999G").isInteger()',
        'quantity("50k").asInteger() == 50000',
        'quantity("50k").add(20).sub(quantity("100k")).asInteger() == -49980',
        'quantity("50.703k").asApproximateFloat() == 50703.0',
        'quantity("50k").sub(20000).asApproximateFloat() == 30000.0',
    ],
)
def test_quantity_library(evaluate: Evaluate, expression: str) -> None:
    assert evaluate(expression) is True


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        ('quantity("10Mm") == quantity("1")', "unable to parse quantity's suffix"),
        (
            'quantity("10Mo") == quantity("1")',
            "quantities must match the regular expression '^([+-]?[0-9.]+)",
        ),
        (
            'quantity("9999999999999999999999999999999999999G").asInteger() == 0',
            "cannot convert value to integer",
        ),
        ('quantity("1.5").asInteger() == 1', "cannot convert value to integer"),
        ('quantity("1").add("1") == quantity("2")', "found no matching overload for 'add'"),
        ('quantity("1").compareTo(semver("1.0.0")) == 0', "found no matching overload for 'compareTo'"),
        ("isQuantity(1)", "found no matching overload for 'isQuantity' applied to '(int)'"),
    ],
)
def test_quantity_library_errors(evaluate: Evaluate, expression: str, error: str) -> None:
    with pytest.raises(CelRuntimeError) as info:
        evaluate(expression)
    assert str(info.value).startswith(error)


@pytest.mark.parametrize(
    "expression",
    [
        'semver("1.2.3").major() == 1 && semver("1.2.3").minor() == 2 && semver("1.2.3").patch() == 3',
        'isSemver("1.0.0") && isSemver("0.1.0-alpha.1+build.5") && !isSemver("v1.0.0") && !isSemver("1.0")',
        'isSemver("v1.0", true) && semver("v1.0", true) == semver("1.0.0")',
        'semver("01.01.01", true) == semver("1.1.1")',
        'semver("1.2.3").compareTo(semver("1.2.3")) == 0',
        'semver("1.2.3").compareTo(semver("2.0.0")) == -1 && semver("1.2.3").compareTo(semver("0.1.2")) == 1',
        'semver("1.10.0").isGreaterThan(semver("1.9.9")) && semver("1.0.0-rc.1").isLessThan(semver("1.0.0"))',
        'semver("1.0.0-alpha").isLessThan(semver("1.0.0-alpha.1"))',
        'semver("1.0.0-2").isLessThan(semver("1.0.0-10"))',
        'semver("1.0.0-10").isLessThan(semver("1.0.0-a"))',
        'semver("1.0.0+a") == semver("1.0.0+b")',
        'device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("535.0.0"))',
        'device.attributes["gpu.example.com"].driverVersion.major() == 550',
    ],
)
def test_semver_library(evaluate: Evaluate, expression: str) -> None:
    assert evaluate(expression) is True


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("1.0", "No Major.Minor.Patch elements found"),
        ("v1.0.0", 'Invalid character(s) found in major number "v1"'),
        ("01.0.0", 'Major number must not contain leading zeroes "01"'),
        ("1.0.0-01", 'Numeric PreRelease version must not contain leading zeroes "01"'),
        ("1.0.0+", "Build meta data is empty"),
        ("", "Version string empty"),
    ],
)
def test_bad_semver_is_a_runtime_error_with_blangs_message(evaluate: Evaluate, text: str, error: str) -> None:
    with pytest.raises(CelRuntimeError) as info:
        evaluate(f'semver("{text}").major() == 1')
    assert str(info.value) == error


def test_version_attribute_that_does_not_parse_makes_the_device_unusable() -> None:
    with pytest.raises(CelRuntimeError) as info:
        build_device_input(
            "d", {"fw": {"version": "1.2"}}, {}, None, consumable_capacity=False, list_type_attributes=False
        )
    assert str(info.value) == "attribute fw: parse semantic version: No Major.Minor.Patch elements found"
