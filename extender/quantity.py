"""Kubernetes `resource.Quantity`: parsing, exact arithmetic and Go's canonical string form.

This module owns the numeric side of device capacity and of CEL's `quantity()` values. It follows
`k8s.io/apimachinery/pkg/api/resource` (`quantity.go`, `suffix.go`):

- parsing uses Go's own scanner, so the same strings are accepted and rejected, with Go's error
  texts as `QuantityError.reason`;
- values are exact (`fractions.Fraction`); like Go, a parsed value finer than 1n is rounded away
  from zero to a multiple of 1n, and a `BinarySI` value is capped at 2^63-1 in magnitude;
- the format (`DecimalSI`, `BinarySI`, `DecimalExponent`) is remembered from the suffix, and
  `str()` emits Go's `Quantity.String()`: Go's canonical form, or the parsed text itself when
  Go's parser would have kept it (Go keeps `"1e3"`, `"100m"`, `"2Ki"` verbatim).

It leaves out Go's int64/inf.Dec split: `is_integer()` is mathematical (an integer that fits in
int64), where Go also answers false for integral values it happens to hold with a negative scale
(`"1000m"`) or as inf.Dec (`"1.5Gi"`). Decimal exponents are limited to +/-10000 so that a
hostile string cannot make us build a gigantic integer.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache, total_ordering
from typing import Any

DECIMAL_SI = "DecimalSI"
BINARY_SI = "BinarySI"
DECIMAL_EXPONENT = "DecimalExponent"
FORMATS = (DECIMAL_SI, BINARY_SI, DECIMAL_EXPONENT)

#: Go's error texts (`resource.ErrFormatWrong`, `ErrNumeric`, `ErrSuffix`).
ERR_FORMAT_WRONG = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
ERR_NUMERIC = "unable to parse numeric part of quantity"
ERR_SUFFIX = "unable to parse quantity's suffix"

_MAX_INT64 = 2**63 - 1
_NANO = Fraction(1, 10**9)
_MAX_EXPONENT = 10_000
_DIGITS = frozenset("0123456789")
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_NAMES = {exp: name for name, exp in _DECIMAL_SUFFIXES.items()}
_BINARY_NAMES = {exp: name for name, exp in _BINARY_SUFFIXES.items()}


class QuantityError(ValueError):
    """A string is not a Kubernetes quantity; `reason` is Go's error text for it."""

    def __init__(self, value: object, reason: str) -> None:
        super().__init__(f"invalid quantity {value!r}: {reason}")
        self.reason = reason


@total_ordering
class Quantity:
    """An immutable, hashable, exact Kubernetes quantity; equality and order are by value only."""

    __slots__ = ("_text", "exact", "fmt")

    exact: Fraction
    fmt: str
    _text: str | None

    def __init__(self, exact: Fraction, fmt: str = DECIMAL_SI, *, _text: str | None = None) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"unknown quantity format {fmt!r}; known formats: {', '.join(FORMATS)}")
        object.__setattr__(self, "exact", exact)
        object.__setattr__(self, "fmt", fmt)
        object.__setattr__(self, "_text", _text)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Quantity is immutable")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.exact, self.fmt, self._text))

    @classmethod
    def parse(cls, value: object) -> Quantity:
        """Parse like Go's `resource.ParseQuantity`; numbers are parsed from their JSON text.

        Any decoded JSON value is accepted: what is not a string or a number is a QuantityError.

        Raises:
            QuantityError: (a ValueError) naming the input and Go's reason.
        """
        if type(value) is str and len(value) <= CACHED_TEXT_LENGTH:  # the common case, first
            return _parse_once(value)
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise QuantityError(value, f"expected a string or a number, not {type(value).__name__}")
        text = value if isinstance(value, str) else repr(value)
        return _parse_once(text) if len(text) <= CACHED_TEXT_LENGTH else _parse(text)

    @classmethod
    def from_fraction(cls, value: Fraction | int, fmt: str = DECIMAL_SI) -> Quantity:
        """Wrap an exact value; it must have a finite decimal expansion, as every Go quantity has."""
        exact = Fraction(value)
        if _decimal_scale(exact.denominator) is None:
            raise ValueError(f"{exact} has no finite decimal representation, so it is not a quantity")
        return cls(exact, fmt)

    def value(self) -> int:
        """Go's `Value()`: the value rounded up, away from zero, to an integer."""
        return _round_away(self.exact)

    def milli_value(self) -> int:
        """Go's `MilliValue()`: the value in thousandths, rounded up away from zero."""
        return _round_away(self.exact * 1000)

    def sign(self) -> int:
        """-1, 0 or 1."""
        return (self.exact > 0) - (self.exact < 0)

    def is_integer(self) -> bool:
        """True when the value is an integer that fits in int64 (see the module docstring)."""
        return self.exact.denominator == 1 and -_MAX_INT64 - 1 <= self.exact <= _MAX_INT64

    def as_approximate_float(self) -> float:
        """The value as the nearest float (+/-inf when out of range)."""
        try:
            return float(self.exact)
        except OverflowError:
            return float("inf") if self.exact > 0 else float("-inf")

    def __add__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity(self.exact + other.exact, other.fmt if self.exact == 0 else self.fmt)

    def __sub__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity(self.exact - other.exact, other.fmt if self.exact == 0 else self.fmt)

    def __neg__(self) -> Quantity:
        return Quantity(-self.exact, self.fmt)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.exact == other.exact

    def __lt__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.exact < other.exact

    def __hash__(self) -> int:
        return hash(self.exact)

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"

    def __str__(self) -> str:
        if self._text is not None:
            return self._text
        return _canonical(self.exact, self.fmt)


def _rebuild(exact: Fraction, fmt: str, text: str | None) -> Quantity:
    return Quantity(exact, fmt, _text=text)


def _round_away(value: Fraction) -> int:
    """Round to an integer away from zero (Go's `RoundUp` on scaled amounts)."""
    if value >= 0:
        return -((-value.numerator) // value.denominator)
    return value.numerator // value.denominator


def _decimal_scale(denominator: int) -> int | None:
    """Smallest k with denominator | 10^k, or None if the denominator has other prime factors."""
    twos = fives = 0
    while denominator % 2 == 0:
        denominator //= 2
        twos += 1
    while denominator % 5 == 0:
        denominator //= 5
        fives += 1
    return max(twos, fives) if denominator == 1 else None


def _scan(text: str) -> tuple[bool, str, str, str]:
    """Go's `parseQuantityString`: (positive, numerator digits, denominator digits, suffix)."""
    positive, pos, end = True, 0, len(text)
    if pos < end and text[0] in "+-":
        positive = text[0] == "+"
        pos += 1
    while pos < end and text[pos] == "0":
        pos += 1
    if pos >= end:
        return positive, "0", "", ""
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    num = text[start:pos] or "0"
    denom = ""
    if pos < end and text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise QuantityError(text, ERR_FORMAT_WRONG)
    return positive, num, denom, text[suffix_start:]


def _interpret(text: str, suffix: str) -> tuple[int, int, str]:
    """Go's `suffixHandler.interpret`: (base, exponent, format)."""
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], DECIMAL_SI
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE":
        digits = suffix[1:].lstrip("+-")
        if digits and digits.isdigit() and suffix[1:].count("+") + suffix[1:].count("-") <= 1:
            exponent = int(suffix[1:])
            if abs(exponent) > _MAX_EXPONENT:
                raise QuantityError(text, f"exponent {exponent} is outside +/-{_MAX_EXPONENT}")
            return 10, exponent, DECIMAL_EXPONENT
    raise QuantityError(text, ERR_SUFFIX)


#: Distinct quantity texts remembered (a fleet repeats a handful: "80Gi", "1", "108", ...).
PARSED_TEXTS = 4096
#: Longer texts are parsed each time, so that the remembered texts stay small.
CACHED_TEXT_LENGTH = 64


@lru_cache(maxsize=PARSED_TEXTS)
def _parse_once(text: str) -> Quantity:
    """`_parse`, once per distinct text: a Quantity is immutable, so one object serves every
    device that states the same text (start-up parses about ten per device; errors are not kept)."""
    return _parse(text)


def _parse(text: str) -> Quantity:
    if not text:
        raise QuantityError(text, ERR_FORMAT_WRONG)
    if text == "0":
        return Quantity(Fraction(0), DECIMAL_SI, _text="0")
    positive, num, denom, suffix = _scan(text)
    base, exponent, fmt = _interpret(text, suffix)
    digits = int(num + denom)
    magnitude = Fraction(digits, 10 ** len(denom)) * Fraction(base) ** exponent
    kept = _kept_text(text, num, denom, digits, base, exponent)
    if magnitude.denominator != 1 and (magnitude / _NANO).denominator != 1:
        magnitude = Fraction(_round_away(magnitude / _NANO)) * _NANO
    if fmt == BINARY_SI:
        magnitude = min(magnitude, Fraction(_MAX_INT64))
        if 0 < magnitude < 1:
            fmt = DECIMAL_SI
    return Quantity(magnitude if positive else -magnitude, fmt, _text=kept)


def _kept_text(text: str, num: str, denom: str, digits: int, base: int, exponent: int) -> str | None:
    """The input text, if Go's fast path would keep it as the quantity's string; else None."""
    if base == 2:
        if denom or exponent < 0 or 15 - len(num) - int(exponent * 3 / 10) - 1 < 0:
            return None
        if digits << exponent > _MAX_INT64:
            return None
        return text if digits & 0x07 != 0 else None
    scale = exponent - len(denom)
    if 18 - len(num) - len(denom) < 0 or scale < -9:
        return None
    shifted = num + denom
    if scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0":
        return text
    return None


def _canonical(exact: Fraction, fmt: str) -> str:
    """Go's `CanonicalizeBytes`: largest suffix/exponent with an integer mantissa."""
    if exact == 0:
        return "0"
    if fmt == BINARY_SI and (-1024 < exact < 1024 or exact.denominator != 1):
        fmt = DECIMAL_SI
    if fmt == BINARY_SI:
        mantissa, times = abs(exact.numerator), 0
        while mantissa >= 1024 and mantissa % 1024 == 0 and times < 6:
            mantissa //= 1024
            times += 1
        sign = "-" if exact < 0 else ""
        return f"{sign}{mantissa}{_BINARY_NAMES.get(times * 10, '')}"
    scale = _decimal_scale(exact.denominator)
    if scale is None:
        raise ValueError(f"{exact} has no finite decimal representation")
    mantissa, exponent = exact.numerator * 10**scale // exact.denominator, -scale
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    shift = exponent % 3
    mantissa, exponent = mantissa * 10**shift, exponent - shift
    if fmt == DECIMAL_SI and exponent in _DECIMAL_NAMES:
        return f"{mantissa}{_DECIMAL_NAMES[exponent]}"
    # DecimalExponent, or a DecimalSI value beyond the SI table (Go would drop the exponent there).
    return f"{mantissa}e{exponent}" if exponent else str(mantissa)
