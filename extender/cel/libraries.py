"""The function tables of the DRA CEL environment: exactly the functions upstream declares.

Upstream is Kubernetes 1.36's `k8s.io/dynamic-resource-allocation/cel`: the Kubernetes base
environment (`environment.MustBaseEnvSet`, k8s.io/apiserver/pkg/cel/environment/base.go) plus
`ext.Bindings` (`cel.bind`) and DRA's `includes`. docs/cel.md has the audit table (function,
upstream library, ours). Not declared upstream, so rejected here at compile time with cel-go's
"undeclared reference" error: cel-go's math extension (`math.greatest`, ...), its lists extension
(`slice`, `flatten`, `distinct`, `sort`, `reverse`, `lists.range`, ...), strings v3+ (`reverse`)
and a quantity `mul`.

Three tables map CEL names to Python callables with the argument counts they accept:
`GLOBAL_FUNCTIONS` (`size(x)`, `quantity(s)`), `MEMBER_FUNCTIONS` (`x.size()`, `q.add(1)`, the
receiver comes first) and `NAMESPACED_FUNCTIONS` (`sets.contains(a, b)`, `optional.of(x)`).
`compiling.py` resolves every call against them at compile time, so an unknown function is an
undeclared reference there, as in cel-go, and the arity is checked once. Callables receive
evaluated arguments and raise `CelEvalError`; a `TypeError` escaping one is reported as
"no matching overload" by the caller. All of them are pure, so calls with constant arguments
are folded at compile time.

`NOT_IMPLEMENTED` lists what upstream declares but this extender does not implement (URL, IP/CIDR,
image, named-format and authorizer libraries, timestamp accessors, a few optional and two-variable
macros): a selector using one gets a compile error that says so, not a misleading "undeclared".
The implementations live in `conversions`, `strings`, `lists`, `quantities`; this module adds the
optional functions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from celpy.celtypes import DurationType, TimestampType

from extender.cel import conversions, lists, quantities, strings
from extender.cel.values import (
    NONE,
    CelEvalError,
    CelOptional,
    is_number,
    no_overload,
)


@dataclass(frozen=True, slots=True)
class Overload:
    """A callable and how many arguments (receiver not counted) it takes; None means one or more."""

    function: Callable[..., Any]
    arities: frozenset[int] | None


def _o(function: Callable[..., Any], *arities: int) -> Overload:
    return Overload(function, frozenset(arities) if arities else None)


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
    "format": _o(strings.format_string, 1),
    "isSorted": _o(lists.is_sorted, 0),
    "sum": _o(lists.list_sum, 0),
    "min": _o(lists.list_min, 0),
    "max": _o(lists.list_max, 0),
    "includes": _o(lists.includes, 1),
    "compareTo": _o(quantities.compare_to, 1),
    "isGreaterThan": _o(quantities.is_greater_than, 1),
    "isLessThan": _o(quantities.is_less_than, 1),
    "add": _o(quantities.add, 1),
    "sub": _o(quantities.sub, 1),
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
    "sets.contains": _o(lists.sets_function("contains"), 2),
    "sets.equivalent": _o(lists.sets_function("equivalent"), 2),
    "sets.intersects": _o(lists.sets_function("intersects"), 2),
}

#: The first component of every namespaced function (`math` in `math.greatest`), plus `cel`.
NAMESPACES = frozenset({name.split(".", 1)[0] for name in NAMESPACED_FUNCTIONS} | {"cel"})

#: Declared by upstream's environment but not implemented here: name -> the upstream library. Only
#: the entry points: the member functions of URL, IP, CIDR, image and authorizer values cannot be
#: reached without them (and the authorizer library has no variable in DRA's environment).
NOT_IMPLEMENTED: dict[str, str] = {
    **dict.fromkeys(("url", "isURL"), "Kubernetes URL library"),
    **dict.fromkeys(("ip", "isIP", "cidr", "isCIDR"), "Kubernetes IP/CIDR library"),
    **dict.fromkeys(("image", "isImage"), "Kubernetes image library"),
    "validate": "Kubernetes format library",
    **dict.fromkeys(
        (
            *("getFullYear", "getMonth", "getDate", "getDayOfMonth", "getDayOfWeek", "getDayOfYear"),
            *("getHours", "getMinutes", "getSeconds", "getMilliseconds"),
        ),
        "CEL standard timestamp/duration accessors",
    ),
    **dict.fromkeys(("optMap", "optFlatMap", "unwrapOpt"), "CEL optional types"),
    **dict.fromkeys(("transformList", "transformMap", "transformMapEntry"), "cel-go two-variable macros"),
}

#: Namespaces upstream declares functions in that this extender does not implement.
NOT_IMPLEMENTED_NAMESPACES: dict[str, str] = {"format": "Kubernetes format library"}
