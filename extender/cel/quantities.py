"""Kubernetes' CEL `quantity` and `semver` libraries (k8s.io/apiserver/pkg/cel/library).

`quantity.go`: `quantity()`, `isQuantity()`, `sign`, `isInteger`, `asInteger`,
`asApproximateFloat`, `add`/`sub` (quantity or int), `compareTo`,
`isGreaterThan`, `isLessThan`. `semverlib.go`: `semver()`, `isSemver()` (both with the optional
`normalize` flag), `major`/`minor`/`patch` and the same three comparisons. The comparison
functions are shared by name between the two types, so each dispatches on its receiver.
Error texts are the libraries' own (`cannot convert value to integer`, Go's parse errors).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from extender.cel.semvers import Semver, SemverError, parse_semver
from extender.cel.values import INT64_MAX, CelEvalError, no_overload
from extender.quantity import DECIMAL_EXPONENT, Quantity, QuantityError


def quantity(s: Any) -> Quantity:
    if type(s) is not str:
        raise no_overload("quantity", s)
    try:
        return Quantity.parse(s)
    except QuantityError as exc:
        raise CelEvalError(exc.reason) from None


def is_quantity(s: Any) -> bool:
    if type(s) is not str:
        raise no_overload("isQuantity", s)
    try:
        Quantity.parse(s)
    except QuantityError:
        return False
    return True


def _quantity(q: Any, function: str, *rest: Any) -> Quantity:
    if type(q) is not Quantity:
        raise no_overload(function, q, *rest)
    return q


def sign(q: Any) -> int:
    return _quantity(q, "sign").sign()


def is_integer(q: Any) -> bool:
    return _quantity(q, "isInteger").is_integer()


def as_integer(q: Any) -> int:
    value = _quantity(q, "asInteger")
    if not value.is_integer():
        raise CelEvalError("cannot convert value to integer")
    return int(value.exact)


def as_approximate_float(q: Any) -> float:
    return _quantity(q, "asApproximateFloat").as_approximate_float()


def _operand(q: Quantity, other: Any, function: str) -> Quantity:
    if type(other) is Quantity:
        return other
    if type(other) is int:
        return Quantity(Fraction(other), DECIMAL_EXPONENT)
    raise no_overload(function, q, other)


def add(q: Any, other: Any) -> Quantity:
    value = _quantity(q, "add", other)
    return value + _operand(value, other, "add")


def sub(q: Any, other: Any) -> Quantity:
    value = _quantity(q, "sub", other)
    return value - _operand(value, other, "sub")


def semver(s: Any, normalize: Any = False) -> Semver:
    if type(s) is not str or type(normalize) is not bool:
        raise no_overload("semver", s, normalize)
    try:
        return parse_semver(s, normalize=normalize)
    except SemverError as exc:
        raise CelEvalError(str(exc)) from None


def is_semver(s: Any, normalize: Any = False) -> bool:
    if type(s) is not str or type(normalize) is not bool:
        raise no_overload("isSemver", s, normalize)
    try:
        parse_semver(s, normalize=normalize)
    except SemverError:
        return False
    return True


def _semver(v: Any, function: str) -> Semver:
    if type(v) is not Semver:
        raise no_overload(function, v)
    return v


def major(v: Any) -> int:
    return _int64(_semver(v, "major").major)


def minor(v: Any) -> int:
    return _int64(_semver(v, "minor").minor)


def patch(v: Any) -> int:
    return _int64(_semver(v, "patch").patch)


def _int64(value: int) -> int:
    # Go converts the uint64 component with types.Int(v.Major), which wraps around.
    return value - 2**64 if value > INT64_MAX else value


def compare_to(a: Any, b: Any) -> int:
    if type(a) is Quantity and type(b) is Quantity:
        return (a.exact > b.exact) - (a.exact < b.exact)
    if type(a) is Semver and type(b) is Semver:
        return a.compare(b)
    raise no_overload("compareTo", a, b)


def is_greater_than(a: Any, b: Any) -> bool:
    if type(a) is type(b) and type(a) in (Quantity, Semver):
        return compare_to(a, b) == 1
    raise no_overload("isGreaterThan", a, b)


def is_less_than(a: Any, b: Any) -> bool:
    if type(a) is type(b) and type(a) in (Quantity, Semver):
        return compare_to(a, b) == -1
    raise no_overload("isLessThan", a, b)
