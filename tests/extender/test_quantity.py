"""Kubernetes resource.Quantity: parsing every suffix form exactly, Go's rounding and capping,
Value()/MilliValue() rounding, Go's String() (canonical form or the kept input), arithmetic,
ordering and hashing, and Go's errors for bad input."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from extender.quantity import (
    BINARY_SI,
    DECIMAL_EXPONENT,
    DECIMAL_SI,
    ERR_FORMAT_WRONG,
    ERR_SUFFIX,
    Quantity,
    QuantityError,
)

Q = Quantity.parse


@pytest.mark.parametrize(
    ("text", "exact", "fmt"),
    [
        ("1", Fraction(1), DECIMAL_SI),
        ("1.5", Fraction(3, 2), DECIMAL_SI),
        ("100m", Fraction(1, 10), DECIMAL_SI),
        ("3n", Fraction(3, 10**9), DECIMAL_SI),
        ("7u", Fraction(7, 10**6), DECIMAL_SI),
        ("5k", Fraction(5000), DECIMAL_SI),
        ("1M", Fraction(10**6), DECIMAL_SI),
        ("1G", Fraction(10**9), DECIMAL_SI),
        ("2T", Fraction(2 * 10**12), DECIMAL_SI),
        ("2P", Fraction(2 * 10**15), DECIMAL_SI),
        ("2E", Fraction(2 * 10**18), DECIMAL_SI),
        ("2Ki", Fraction(2048), BINARY_SI),
        ("3Mi", Fraction(3 * 2**20), BINARY_SI),
        ("1Gi", Fraction(2**30), BINARY_SI),
        ("1Ti", Fraction(2**40), BINARY_SI),
        ("1Pi", Fraction(2**50), BINARY_SI),
        ("1Ei", Fraction(2**60), BINARY_SI),
        ("1e3", Fraction(1000), DECIMAL_EXPONENT),
        ("1E3", Fraction(1000), DECIMAL_EXPONENT),
        ("1.5e-3", Fraction(3, 2000), DECIMAL_EXPONENT),
        ("2e+2", Fraction(200), DECIMAL_EXPONENT),
        ("-1.5Gi", Fraction(-3 * 2**29), BINARY_SI),
        ("+5", Fraction(5), DECIMAL_SI),
        (".5", Fraction(1, 2), DECIMAL_SI),
        ("0.5Gi", Fraction(2**29), BINARY_SI),
        ("123456789012345678901234567890", Fraction(123456789012345678901234567890), DECIMAL_SI),
    ],
)
def test_parse_suffix_forms_exactly(text: str, exact: Fraction, fmt: str) -> None:
    quantity = Q(text)
    assert (quantity.exact, quantity.fmt) == (exact, fmt)


def test_values_finer_than_a_nano_round_up_away_from_zero() -> None:
    assert Q("0.1n").exact == Fraction(1, 10**9)
    assert Q("-1.0000000001").exact == Fraction(-(10**9 + 1), 10**9)
    assert Q("1e-12").exact == Fraction(1, 10**9)


def test_binary_values_are_capped_at_int64() -> None:
    assert Q("9Ei").exact == 2**63 - 1
    assert Q("-16Ei").exact == -(2**63 - 1)


def test_binary_fraction_below_one_becomes_decimal() -> None:
    assert Q("0.0001Ki").fmt == DECIMAL_SI


@pytest.mark.parametrize(
    ("text", "value", "milli"),
    [("1.5", 2, 1500), ("100m", 1, 100), ("1n", 1, 1), ("-1.5", -2, -1500), ("2", 2, 2000), ("0.5m", 1, 1)],
)
def test_value_and_milli_value_round_up_away_from_zero(text: str, value: int, milli: int) -> None:
    assert (Q(text).value(), Q(text).milli_value()) == (value, milli)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("1536Mi", "1536Mi"),
        ("1.5Gi", "1536Mi"),
        ("0.5Gi", "512Mi"),
        ("4Gi", "4Gi"),
        ("1024Ki", "1Mi"),
        ("1.5", "1500m"),
        ("2", "2"),
        ("0", "0"),
        ("0.0", "0"),
        ("1000", "1k"),
        ("100m", "100m"),
        ("1000m", "1"),
        ("1e3", "1e3"),
        ("1E3", "1E3"),
        ("1.5e3", "1500"),
        ("1.5e0", "1500e-3"),
        ("1000000k", "1G"),
        ("0.1n", "1n"),
        ("1025", "1025"),
        ("1.1Ki", "1126400m"),
        ("-1.5Gi", "-1536Mi"),
        ("12e6", "12e6"),
        ("1200000", "1200k"),
        ("9Ei", "9223372036854775807"),
    ],
)
def test_string_is_gos(text: str, canonical: str) -> None:
    assert str(Q(text)) == canonical


def test_string_of_sums_is_canonical() -> None:
    assert str(Q("1Gi") + Q("1Gi")) == "2Gi"
    assert str(Q("1") - Q("1")) == "0"
    assert str(Q("500m") + Q("500m")) == "1"
    assert str(Q("1Ki") - Q("24")) == "1k"


def test_numbers_parse_from_their_json_text() -> None:
    assert Q(3) == Q("3")
    assert Q(1.5) == Q("1.5")
    assert str(Q(1e20)) == "100e18"


def test_arithmetic_keeps_the_left_format_unless_it_is_zero() -> None:
    assert (Q("1Gi") + Q("1k")).fmt == BINARY_SI
    assert (Q("0") + Q("1Ki")).fmt == BINARY_SI
    assert (Q("0") - Q("1Ki")).exact == -1024
    assert (Q("1k") - Q("1Ki")).exact == -24
    assert (-Q("1k")).exact == -1000


def test_comparisons_and_hash_are_by_value() -> None:
    assert Q("1Ki") == Q("1024") == Q("1.024k")
    assert hash(Q("1Ki")) == hash(Q("1024"))
    assert Q("50M") < Q("50Mi") and Q("1") <= Q("1000m") and Q("2") > Q("1.9")
    assert sorted([Q("1Gi"), Q("1G"), Q("1")]) == [Q("1"), Q("1G"), Q("1Gi")]
    assert Q("1") != 1


def test_sign_and_integer_checks() -> None:
    assert [Q("-2").sign(), Q("0").sign(), Q("3m").sign()] == [-1, 0, 1]
    assert Q("1000m").is_integer() and Q("5Gi").is_integer()
    assert not Q("1.5").is_integer() and not Q("10E").is_integer()


def test_from_fraction() -> None:
    assert str(Quantity.from_fraction(Fraction(3, 2))) == "1500m"
    assert str(Quantity.from_fraction(Fraction(3 * 2**30), BINARY_SI)) == "3Gi"
    with pytest.raises(ValueError, match="no finite decimal representation"):
        Quantity.from_fraction(Fraction(1, 3))
    with pytest.raises(ValueError, match="unknown quantity format"):
        Quantity.from_fraction(Fraction(1), "Hex")


def test_immutable() -> None:
    quantity = Q("1")
    with pytest.raises(AttributeError):
        quantity.fmt = BINARY_SI  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", ERR_FORMAT_WRONG),
        ("1 Gi", ERR_FORMAT_WRONG),
        ("abc", ERR_FORMAT_WRONG),
        ("1.5Gx", ERR_FORMAT_WRONG),
        ("10Mo", ERR_FORMAT_WRONG),
        ("200K", ERR_SUFFIX),
        ("1e", ERR_SUFFIX),
        ("1Ee3", ERR_SUFFIX),
        ("1Ki5", ERR_SUFFIX),
        ("10Mm", ERR_SUFFIX),
    ],
)
def test_bad_input_raises_with_gos_reason(text: str, reason: str) -> None:
    with pytest.raises(QuantityError) as info:
        Q(text)
    assert info.value.reason == reason
    assert repr(text) in str(info.value)


@pytest.mark.parametrize("value", [True, None, [1], float("nan"), float("inf")])
def test_bad_types_and_non_finite_numbers(value: object) -> None:
    with pytest.raises(ValueError):
        Q(value)  # type: ignore[arg-type]


def test_go_quirks_are_kept() -> None:
    """Go's scanner accepts a bare sign, a bare point or a bare suffix as zero."""
    assert Q("-").exact == Q(".").exact == Q("Mi").exact == 0


_suffix = st.sampled_from(["", "m", "n", "u", "k", "M", "G", "T", "Ki", "Mi", "Gi", "Ti", "e3", "e-2", "E6"])


@given(
    sign=st.sampled_from(["", "-", "+"]),
    whole=st.integers(0, 10**12),
    fraction=st.one_of(st.just(""), st.integers(0, 10**6).map(lambda n: f".{n}")),
    suffix=_suffix,
)
def test_round_trip_through_string(sign: str, whole: int, fraction: str, suffix: str) -> None:
    quantity = Q(f"{sign}{whole}{fraction}{suffix}")
    again = Q(str(quantity))
    assert again == quantity
    assert str(again) == str(quantity) or quantity.exact == 0


@given(a=st.integers(-(10**15), 10**15), b=st.integers(-(10**15), 10**15), suffix=_suffix)
def test_addition_is_exact(a: int, b: int, suffix: str) -> None:
    left, right = Q(f"{a}{suffix}"), Q(f"{b}{suffix}")
    assert (left + right).exact == left.exact + right.exact
    assert (left - right).exact == left.exact - right.exact
    if abs((left + right).exact) < 2**63 - 1:  # beyond that, parsing a BinarySI string caps it
        assert Q(str(left + right)) == left + right
