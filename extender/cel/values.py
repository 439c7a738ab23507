"""CEL runtime values and the standard operators over them, with cel-go's semantics and error texts.

Values are plain Python objects, chosen for speed, plus a few CEL-specific classes:

| CEL type            | Python                                   |
|---------------------|------------------------------------------|
| bool/int/double     | `bool` / `int` (int64-checked) / `float` |
| uint                | `celpy.celtypes.UintType`                |
| string/bytes        | `str` / `bytes`                          |
| list/map            | `list` or `tuple` / `dict`               |
| null                | `None`                                   |
| kubernetes.Quantity | `extender.quantity.Quantity`             |
| kubernetes.Semver   | `extender.cel.semvers.Semver`            |
| optional_type       | `CelOptional`                            |
| type                | `CelType`                                |
| timestamp/duration  | celpy's `TimestampType` / `DurationType` |

`DomainMap` is the map behind `device.attributes` and `device.capacity`: looking up a domain it
lacks yields an empty map (upstream's `mapper.Find`), while `in` still reports the truth; the
lookups themselves (`in`, `[]`, `.`, `has()`, `.?`, `[?]`) live in `lookups.py`.

Errors are `CelEvalError` exceptions. CEL's error-absorbing operators (`&&`, `||`, `all`,
`exists`) catch them in `programs.py` and `comprehensions.py`; everything here just raises.
"""

from __future__ import annotations

import math
from typing import Any, Final

from celpy.celtypes import DurationType, TimestampType, UintType

from extender.cel.semvers import Semver
from extender.quantity import Quantity

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
UINT64_MAX: Final = 2**64 - 1


class CelEvalError(Exception):
    """A CEL runtime error; the message reads like cel-go's."""


#: Exceptions that an evaluation step may raise for a CEL-level failure. `CelEvalError` is the
#: normal one; the others can escape from celpy's time types and are translated by `as_cel_error`.
EVAL_ERRORS: Final = (CelEvalError, TypeError, ValueError, ArithmeticError, LookupError)

#: cel-go's text when a program exceeds its cost budget.
COST_EXCEEDED: Final = "operation cancelled: actual cost limit exceeded"


class CostExceeded(CelEvalError):
    """The evaluation ran over its budget; unlike other errors, `||`, `&&` and macros never absorb it."""

    def __init__(self) -> None:
        super().__init__(COST_EXCEEDED)


class Interrupted(Exception):
    """The caller's `should_stop` asked the evaluation to stop (its deadline passed); `cause` says
    why. Not a CEL error: nothing absorbs it, and it says nothing about the device."""

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


#: The largest string, bytes or list a concatenation may build: a memory guard behind the cost budget
#: (costs.py), for device data the compile-time estimate could not foresee.
MAX_CONCATENATION: Final = 10_000_000


def as_cel_error(exc: BaseException) -> CelEvalError:
    """The CEL error for an exception caught during evaluation."""
    if isinstance(exc, CelEvalError):
        return exc
    if isinstance(exc, ZeroDivisionError):
        return CelEvalError("division by zero")
    if isinstance(exc, OverflowError):
        return CelEvalError("integer overflow")
    if isinstance(exc, TypeError):
        return CelEvalError(f"no such overload: {exc}")
    return CelEvalError(str(exc) or type(exc).__name__)


class CelOptional:
    """CEL's `optional_type`: `optional.of(v)` or the `NONE` singleton."""

    __slots__ = ("has_value", "value")

    def __init__(self, value: Any = None, *, has_value: bool = True) -> None:
        self.value = value
        self.has_value = has_value

    def __repr__(self) -> str:
        return f"optional.of({self.value!r})" if self.has_value else "optional.none()"


NONE: Final = CelOptional(has_value=False)


class CelType:
    """A CEL type value, as returned by `type(x)` or named by `int`, `string`, ...."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CelType) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return self.name


class DomainMap(dict[str, Any]):
    """A map whose missing keys read as an empty map (not an error); `in` is unaffected."""

    __slots__ = ()


EMPTY_MAP: Final[dict[Any, Any]] = {}

#: Identifiers that name types in the standard environment (`type(x) == int`).
TYPE_IDENTIFIERS: Final = {
    name: CelType(name)
    for name in ("bool", "bytes", "double", "int", "list", "map", "null_type", "string", "type", "uint")
}

_NUMERIC_TYPES: Final = (int, float, UintType)
_TYPE_NAMES: Final[dict[type, str]] = {
    bool: "bool",
    int: "int",
    float: "double",
    UintType: "uint",
    str: "string",
    bytes: "bytes",
    list: "list",
    tuple: "list",
    dict: "map",
    DomainMap: "map",
    type(None): "null_type",
    Quantity: "kubernetes.Quantity",
    Semver: "kubernetes.Semver",
    CelOptional: "optional_type",
    CelType: "type",
    TimestampType: "google.protobuf.Timestamp",
    DurationType: "google.protobuf.Duration",
}


def type_name(value: Any) -> str:
    """The CEL type name of a runtime value."""
    return _TYPE_NAMES.get(type(value)) or type(value).__name__


def no_overload(function: str, *args: Any) -> CelEvalError:
    """cel-go's dispatch failure text for `function` applied to these arguments."""
    kinds = ", ".join(type_name(a) for a in args)
    return CelEvalError(f"found no matching overload for '{function}' applied to '({kinds})'")


def check_int(value: int) -> int:
    """Return `value` if it fits int64, else raise cel-go's overflow error."""
    if INT64_MIN <= value <= INT64_MAX:
        return value
    raise CelEvalError("integer overflow")


def check_uint(value: int) -> UintType:
    if 0 <= value <= UINT64_MAX:
        return UintType(value)
    raise CelEvalError("unsigned integer overflow")


def is_list(value: Any) -> bool:
    return type(value) is list or type(value) is tuple


def is_number(value: Any) -> bool:
    return isinstance(value, _NUMERIC_TYPES) and type(value) is not bool


def require_bool(value: Any, function: str) -> bool:
    if type(value) is bool:
        return value
    raise no_overload(function, value)


def equal(a: Any, b: Any) -> bool:
    """CEL heterogeneous equality: values of unrelated types are simply unequal."""
    ta, tb = type(a), type(b)
    if ta is tb and (ta is str or ta is int or ta is bool or ta is float or ta is bytes):
        return bool(a == b)
    if ta is bool or tb is bool:
        return ta is tb and a == b
    if is_number(a) and is_number(b):
        return bool(plain(a) == plain(b))
    if is_list(a) and is_list(b):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return len(a) == len(b) and all(k in b and equal(v, b[k]) for k, v in a.items())
    if ta is CelOptional and tb is CelOptional:
        left: CelOptional = a
        right: CelOptional = b
        if left.has_value and right.has_value:
            return equal(left.value, right.value)
        return left.has_value == right.has_value
    if ta is tb and (a is None or ta in (Quantity, Semver, CelType, TimestampType, DurationType)):
        return bool(a == b)
    return False


def plain(value: Any) -> Any:
    """A uint as a plain int, for mixed-type numeric comparison."""
    return int(value) if type(value) is UintType else value


_ORDERED_SAME: Final = (str, bytes, bool, TimestampType, DurationType)


def _ordered(function: str, a: Any, b: Any) -> tuple[Any, Any]:
    if is_number(a) and is_number(b):
        return plain(a), plain(b)
    if type(a) is type(b) and type(a) in _ORDERED_SAME:
        return a, b
    raise no_overload(function, a, b)


def less(a: Any, b: Any) -> bool:
    x, y = _ordered("_<_", a, b)
    return bool(x < y)


def less_equal(a: Any, b: Any) -> bool:
    x, y = _ordered("_<=_", a, b)
    return bool(x <= y)


def greater(a: Any, b: Any) -> bool:
    x, y = _ordered("_>_", a, b)
    return bool(x > y)


def greater_equal(a: Any, b: Any) -> bool:
    x, y = _ordered("_>=_", a, b)
    return bool(x >= y)


def add(a: Any, b: Any) -> Any:
    ta, tb = type(a), type(b)
    if ta is tb:
        if ta is int:
            return check_int(a + b)
        if ta is float:
            return a + b
        if ta is str or ta is bytes:
            return _bounded(a + b)
        if ta is UintType:
            return check_uint(int(a) + int(b))
        if ta is DurationType:
            return _time_op("_+_", lambda: a + b, a, b)
    if is_list(a) and is_list(b):
        return _bounded([*a, *b])
    if (ta is TimestampType and tb is DurationType) or (ta is DurationType and tb is TimestampType):
        return _time_op("_+_", lambda: a + b, a, b)
    raise no_overload("_+_", a, b)


def _bounded(value: Any) -> Any:
    if len(value) > MAX_CONCATENATION:
        raise CostExceeded()
    return value


def subtract(a: Any, b: Any) -> Any:
    ta, tb = type(a), type(b)
    if ta is tb and ta is int:
        return check_int(a - b)
    if ta is tb and ta is float:
        return a - b
    if ta is tb and ta is UintType:
        return check_uint(int(a) - int(b))
    if (ta is TimestampType and tb in (TimestampType, DurationType)) or ta is tb is DurationType:
        return _time_op("_-_", lambda: a - b, a, b)
    raise no_overload("_-_", a, b)


def multiply(a: Any, b: Any) -> Any:
    ta, tb = type(a), type(b)
    if ta is tb and ta is int:
        return check_int(a * b)
    if ta is tb and ta is float:
        return a * b
    if ta is tb and ta is UintType:
        return check_uint(int(a) * int(b))
    raise no_overload("_*_", a, b)


def divide(a: Any, b: Any) -> Any:
    ta, tb = type(a), type(b)
    if ta is tb and (ta is int or ta is UintType):
        if b == 0:
            raise CelEvalError("division by zero")
        quotient = abs(int(a)) // abs(int(b))
        quotient = -quotient if (a < 0) != (b < 0) else quotient
        return check_int(quotient) if ta is int else check_uint(quotient)
    if ta is tb and ta is float:
        if b == 0.0:
            if a == 0.0 or math.isnan(a):
                return math.nan
            return math.copysign(math.inf, a) * math.copysign(1.0, b)
        return a / b
    raise no_overload("_/_", a, b)


def modulo(a: Any, b: Any) -> Any:
    ta, tb = type(a), type(b)
    if ta is tb and (ta is int or ta is UintType):
        if b == 0:
            raise CelEvalError("modulus by zero")
        if ta is int and a == INT64_MIN and b == -1:
            raise CelEvalError("integer overflow")
        remainder = abs(int(a)) % abs(int(b))
        remainder = -remainder if a < 0 else remainder
        return remainder if ta is int else UintType(remainder)
    raise no_overload("_%_", a, b)


def negate(a: Any) -> Any:
    if type(a) is int:
        return check_int(-a)
    if type(a) is float:
        return -a
    if type(a) is DurationType:
        return _time_op("-_", lambda: -a, a)
    raise no_overload("-_", a)


def logical_not(a: Any) -> bool:
    return not require_bool(a, "!_")


def _time_op(function: str, op: Any, *args: Any) -> Any:
    try:
        return op()
    except (TypeError, ValueError, OverflowError) as exc:
        raise CelEvalError(f"{function}: {exc}") from None
