"""The function tables of the DRA CEL environment.

Three tables map CEL names to Python callables with the argument counts they accept:
`GLOBAL_FUNCTIONS` (`size(x)`, `quantity(s)`), `MEMBER_FUNCTIONS` (`x.size()`, `q.add(1)`, the
receiver comes first) and `NAMESPACED_FUNCTIONS` (`math.greatest(...)`, `optional.of(x)`).
`compiling.py` resolves every call against them at compile time, so an unknown function is an
undeclared reference there, as in cel-go, and the arity is checked once. Callables receive
evaluated arguments and raise `CelEvalError`; a `TypeError` escaping one is reported as
"no matching overload" by the caller. All of them are pure, so calls with constant arguments
are folded at compile time.

The implementations live in `conversions`, `strings`, `lists`, `quantities`; this module adds
the small ones: cel-go's math extension and the optional functions.
Not provided: the IP/CIDR, URL, authz and format-validation libraries.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from celpy.celtypes import DurationType, TimestampType

from extender.cel import conversions, lists, quantities, strings
from extender.cel.values import (
    NONE,
    CelEvalError,
    CelOptional,
    check_int,
    is_list,
    is_number,
    less,
    no_overload,
)


@dataclass(frozen=True, slots=True)
class Overload:
    """A callable and how many arguments (receiver not counted) it takes; None means one or more."""

    function: Callable[..., Any]
    arities: frozenset[int] | None


def _o(function: Callable[..., Any], *arities: int) -> Overload:
    return Overload(function, frozenset(arities) if arities else None)


def _math_extreme(function: str, pick_later: Callable[[Any, Any], bool]) -> Callable[..., Any]:
    def pick(*args: Any) -> Any:
        values = list(args[0]) if len(args) == 1 and is_list(args[0]) else list(args)
        if not values or not all(is_number(v) for v in values):
            raise no_overload(f"math.{function}", *args)
        best = values[0]
        for value in values[1:]:
            if pick_later(value, best):
                best = value
        return best

    return pick


def _math_double(function: str, op: Callable[[float], Any]) -> Callable[[Any], Any]:
    def apply(value: Any) -> Any:
        if type(value) is not float:
            raise no_overload(f"math.{function}", value)
        return op(value)

    return apply


def _math_abs(value: Any) -> Any:
    if type(value) is int:
        return check_int(abs(value))
    if is_number(value):
        return type(value)(abs(value))
    raise no_overload("math.abs", value)


def _math_sign(value: Any) -> Any:
    if not is_number(value):
        raise no_overload("math.sign", value)
    if type(value) is float and math.isnan(value):
        return value
    return type(value)((value > 0) - (value < 0))


def _bits(function: str, op: Callable[..., int]) -> Callable[..., Any]:
    def apply(*args: Any) -> Any:
        if not all(type(a) is int for a in args):
            raise no_overload(f"math.{function}", *args)
        return check_int(op(*args))

    return apply


def _round_half_away(value: float) -> float:
    if not math.isfinite(value):
        return value
    return float(math.floor(value + 0.5)) if value >= 0 else -float(math.floor(-value + 0.5))


def optional_of(value: Any) -> CelOptional:
    return CelOptional(value)


def optional_none() -> CelOptional:
    return NONE


def optional_of_non_zero(value: Any) -> CelOptional:
    zero = value is None or value is False or (is_number(value) and value == 0)
    zero = zero or (type(value) in (str, bytes, list, tuple, dict) and len(value) == 0)
    return NONE if zero else CelOptional(value)


def _optional(value: Any, function: str, *rest: Any) -> CelOptional:
    if type(value) is not CelOptional:
        raise no_overload(function, value, *rest)
    return value


def has_value(opt: Any) -> bool:
    return _optional(opt, "hasValue").has_value


def optional_value(opt: Any) -> Any:
    value = _optional(opt, "value")
    if not value.has_value:
        raise CelEvalError("optional.none() dereference")
    return value.value


def or_value(opt: Any, default: Any) -> Any:
    value = _optional(opt, "orValue", default)
    return value.value if value.has_value else default


def or_optional(opt: Any, other: Any) -> Any:
    value = _optional(opt, "or", other)
    if value.has_value:
        return value
    return _optional(other, "or", opt)


GLOBAL_FUNCTIONS: dict[str, Overload] = {
    "size": _o(conversions.size, 1),
    "int": _o(conversions.to_int, 1),
    "uint": _o(conversions.to_uint, 1),
    "double": _o(conversions.to_double, 1),
    "string": _o(conversions.to_string, 1),
    "bytes": _o(conversions.to_bytes, 1),
    "bool": _o(conversions.to_bool, 1),
    "dyn": _o(lambda value: value, 1),
    "type": _o(conversions.type_of, 1),
    "timestamp": _o(conversions.time_constructor(TimestampType, "timestamp"), 1),
    "duration": _o(conversions.time_constructor(DurationType, "duration"), 1),
    "matches": _o(strings.matches, 2),
    "quantity": _o(quantities.quantity, 1),
    "isQuantity": _o(quantities.is_quantity, 1),
    "sign": _o(quantities.sign, 1),
    "semver": _o(quantities.semver, 1, 2),
    "isSemver": _o(quantities.is_semver, 1, 2),
}

MEMBER_FUNCTIONS: dict[str, Overload] = {
    "size": _o(conversions.size, 0),
    "contains": _o(strings.contains, 1),
    "startsWith": _o(strings.starts_with, 1),
    "endsWith": _o(strings.ends_with, 1),
    "matches": _o(strings.matches, 1),
    "find": _o(strings.find, 1),
    "findAll": _o(strings.find_all, 1, 2),
    "charAt": _o(strings.char_at, 1),
    "indexOf": _o(lists.index_of, 1, 2),
    "lastIndexOf": _o(lists.last_index_of, 1, 2),
    "lowerAscii": _o(strings.lower_ascii, 0),
    "upperAscii": _o(strings.upper_ascii, 0),
    "replace": _o(strings.replace, 2, 3),
    "split": _o(strings.split, 1, 2),
    "join": _o(strings.join, 0, 1),
    "substring": _o(strings.substring, 1, 2),
    "trim": _o(strings.trim, 0),
    "reverse": _o(strings.reverse, 0),
    "format": _o(strings.format_string, 1),
    "isSorted": _o(lists.is_sorted, 0),
    "sum": _o(lists.list_sum, 0),
    "min": _o(lists.list_min, 0),
    "max": _o(lists.list_max, 0),
    "slice": _o(lists.list_slice, 2),
    "flatten": _o(lists.flatten, 0, 1),
    "distinct": _o(lists.distinct, 0),
    "sort": _o(lists.sort, 0),
    "includes": _o(lists.includes, 1),
    "compareTo": _o(quantities.compare_to, 1),
    "isGreaterThan": _o(quantities.is_greater_than, 1),
    "isLessThan": _o(quantities.is_less_than, 1),
    "add": _o(quantities.add, 1),
    "sub": _o(quantities.sub, 1),
    "mul": _o(quantities.mul, 1),
    "sign": _o(quantities.sign, 0),
    "isInteger": _o(quantities.is_integer, 0),
    "asInteger": _o(quantities.as_integer, 0),
    "asApproximateFloat": _o(quantities.as_approximate_float, 0),
    "major": _o(quantities.major, 0),
    "minor": _o(quantities.minor, 0),
    "patch": _o(quantities.patch, 0),
    "hasValue": _o(has_value, 0),
    "value": _o(optional_value, 0),
    "orValue": _o(or_value, 1),
    "or": _o(or_optional, 1),
}

NAMESPACED_FUNCTIONS: dict[str, Overload] = {
    "optional.of": _o(optional_of, 1),
    "optional.none": _o(optional_none, 0),
    "optional.ofNonZeroValue": _o(optional_of_non_zero, 1),
    "strings.quote": _o(strings.quote, 1),
    "lists.range": _o(lists.lists_range, 1),
    "sets.contains": _o(lists.sets_function("contains"), 2),
    "sets.equivalent": _o(lists.sets_function("equivalent"), 2),
    "sets.intersects": _o(lists.sets_function("intersects"), 2),
    "math.greatest": _o(_math_extreme("greatest", lambda a, b: less(b, a))),
    "math.least": _o(_math_extreme("least", less)),
    "math.abs": _o(_math_abs, 1),
    "math.sign": _o(_math_sign, 1),
    "math.ceil": _o(_math_double("ceil", lambda v: float(math.ceil(v)) if math.isfinite(v) else v), 1),
    "math.floor": _o(_math_double("floor", lambda v: float(math.floor(v)) if math.isfinite(v) else v), 1),
    "math.round": _o(_math_double("round", _round_half_away), 1),
    "math.trunc": _o(_math_double("trunc", lambda v: float(math.trunc(v)) if math.isfinite(v) else v), 1),
    "math.sqrt": _o(lambda v: math.sqrt(v) if v >= 0 else math.nan, 1),
    "math.isNaN": _o(_math_double("isNaN", math.isnan), 1),
    "math.isInf": _o(_math_double("isInf", math.isinf), 1),
    "math.isFinite": _o(_math_double("isFinite", math.isfinite), 1),
    "math.bitAnd": _o(_bits("bitAnd", lambda a, b: a & b), 2),
    "math.bitOr": _o(_bits("bitOr", lambda a, b: a | b), 2),
    "math.bitXor": _o(_bits("bitXor", lambda a, b: a ^ b), 2),
    "math.bitNot": _o(_bits("bitNot", lambda a: ~a), 1),
    "math.bitShiftLeft": _o(_bits("bitShiftLeft", lambda a, n: (a << n) if 0 <= n < 64 else 0), 2),
    "math.bitShiftRight": _o(_bits("bitShiftRight", lambda a, n: (a % 2**64) >> n if 0 <= n < 64 else 0), 2),
}

#: The first component of every namespaced function (`math` in `math.greatest`), plus `cel`.
NAMESPACES = frozenset({name.split(".", 1)[0] for name in NAMESPACED_FUNCTIONS} | {"cel"})
