"""CEL's standard conversion functions and `size`, with cel-go's range checks and texts.

`int()`, `uint()`, `double()`, `string()`, `bytes()`, `bool()`, `type()`, `timestamp()`,
`duration()` (the last two delegate to cel-python's time types) and `size()`. `string(double)`
follows Go's `%g`, which cel-go uses, so `string(1e6)` is `"1e+06"`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from celpy.celtypes import DurationType, TimestampType, UintType

from extender.cel import strings
from extender.cel.values import (
    CelEvalError,
    CelType,
    check_int,
    check_uint,
    is_list,
    is_number,
    no_overload,
    type_name,
)


def size(value: Any) -> int:
    if type(value) in (str, bytes) or is_list(value) or isinstance(value, dict):
        return len(value)
    raise no_overload("size", value)


def to_int(value: Any) -> int:
    if type(value) is int:
        return value
    if type(value) is UintType:
        return check_int(int(value))
    if type(value) is float:
        if not math.isfinite(value) or not -(2**63) < value < 2**63:
            raise CelEvalError("integer overflow")
        return int(value)
    if type(value) is str:
        try:
            return check_int(int(value, 10))
        except ValueError:
            raise CelEvalError(f"cannot convert string {value!r} to int") from None
    if type(value) is TimestampType:
        return int(value.timestamp())
    raise no_overload("int", value)


def to_uint(value: Any) -> UintType:
    if type(value) in (int, UintType):
        return check_uint(int(value))
    if type(value) is float:
        if not math.isfinite(value) or not -1 < value < 2**64:
            raise CelEvalError("unsigned integer overflow")
        return UintType(int(value))
    if type(value) is str:
        try:
            return check_uint(int(value, 10))
        except ValueError:
            raise CelEvalError(f"cannot convert string {value!r} to uint") from None
    raise no_overload("uint", value)


def to_double(value: Any) -> float:
    if is_number(value):
        return float(value)
    if type(value) is str:
        try:
            return float(value)
        except ValueError:
            raise CelEvalError(f"cannot convert string {value!r} to double") from None
    raise no_overload("double", value)


def to_string(value: Any) -> str:
    if type(value) is float:
        return _go_float(value)
    if type(value) is bytes:
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise CelEvalError("invalid UTF-8 in bytes, cannot convert to string") from None
    if type(value) in (str, int, UintType, bool, TimestampType, DurationType):
        return strings.to_display(value)
    raise no_overload("string", value)


def _go_float(value: float) -> str:
    """Go's `fmt.Sprintf("%g", f)` (shortest digits), which cel-go's `string(double)` uses."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    text = "".join(map(str, digits))
    point = len(text) + int(exponent)  # position of the decimal point
    lead = "-" if sign else ""
    if point - 1 < -4 or point - 1 >= 6:  # %g switches to an exponent from 1e+06 on
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        e = point - 1
        return f"{lead}{mantissa}e{'-' if e < 0 else '+'}{abs(e):02d}"
    if point <= 0:
        return f"{lead}0.{'0' * -point}{text}"
    if point >= len(text):
        return f"{lead}{text}{'0' * (point - len(text))}"
    return f"{lead}{text[:point]}.{text[point:]}"


def to_bytes(value: Any) -> bytes:
    if type(value) is bytes:
        return value
    if type(value) is str:
        return value.encode("utf-8")
    raise no_overload("bytes", value)


_BOOL_STRINGS = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True}
_BOOL_STRINGS |= {"0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False}


def to_bool(value: Any) -> bool:
    if type(value) is bool:
        return value
    if type(value) is str and value in _BOOL_STRINGS:
        return _BOOL_STRINGS[value]
    if type(value) is str:
        raise CelEvalError(f"type conversion error from 'string' to 'bool': {value!r}")
    raise no_overload("bool", value)


def time_constructor(kind: type, name: str) -> Callable[[Any], Any]:
    def construct(value: Any) -> Any:
        if type(value) is kind:
            return value
        if type(value) is not str:
            raise no_overload(name, value)
        try:
            return kind(value)
        except (ValueError, TypeError, OverflowError) as exc:
            raise CelEvalError(f"{name}: {exc}") from None

    return construct


def type_of(value: Any) -> CelType:
    return CelType(type_name(value))
