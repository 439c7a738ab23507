"""List and set functions: Kubernetes' lists library (`isSorted`, `sum`, `min`, `max`,
`indexOf`, `lastIndexOf`), cel-go's sets extension (`sets.contains/equivalent/intersects`) and
DRA's `includes`. cel-go's lists extension (`slice`, `flatten`, `sort`, `lists.range`, ...) is not
part of Kubernetes' environment, so it is not here (see docs/cel.md).

Membership and set tests use CEL equality (so `[1].includes(1.0)` holds), and ordering uses CEL's
`<`, which refuses mixed types instead of guessing an order.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import Any

from celpy.celtypes import DurationType

from extender.cel import strings
from extender.cel.values import (
    CelEvalError,
    add,
    equal,
    is_list,
    is_number,
    less,
    no_overload,
)


def _comparable_list(items: Any, function: str) -> list[Any]:
    if not is_list(items):
        raise no_overload(function, items)
    return list(items)


def is_sorted(items: Any) -> bool:
    values = _comparable_list(items, "isSorted")
    return all(not less(b, a) for a, b in itertools.pairwise(values))


def list_sum(items: Any) -> Any:
    values = _comparable_list(items, "sum")
    if not values:
        return 0
    total = values[0]
    for item in values[1:]:
        total = add(total, item)
    if not (is_number(total) or type(total) is DurationType):
        raise no_overload("sum", items)
    return total


def _extreme(items: Any, function: str, pick_later: Callable[[Any, Any], bool]) -> Any:
    values = _comparable_list(items, function)
    if not values:
        raise CelEvalError(f"{function} called on empty list")
    best = values[0]
    for item in values[1:]:
        if pick_later(item, best):
            best = item
    return best


def list_min(items: Any) -> Any:
    return _extreme(items, "min", less)


def list_max(items: Any) -> Any:
    return _extreme(items, "max", lambda a, b: less(b, a))


def index_of(target: Any, item: Any, *rest: Any) -> int:
    if is_list(target) and not rest:
        return next((i for i, element in enumerate(target) if equal(element, item)), -1)
    return strings.index_of(target, item, *rest)


def last_index_of(target: Any, item: Any, *rest: Any) -> int:
    if is_list(target) and not rest:
        return next((i for i in range(len(target) - 1, -1, -1) if equal(target[i], item)), -1)
    return strings.last_index_of(target, item, *rest)


def includes(value: Any, item: Any) -> bool:
    """DRA: on a list attribute, membership; on a scalar attribute, equality."""
    if is_list(value):
        return any(equal(element, item) for element in value)
    return equal(value, item)


def _has(items: Iterable[Any], x: Any) -> bool:
    return any(equal(x, y) for y in items)


def sets_function(function: str) -> Callable[[Any, Any], bool]:
    def check(a: Any, b: Any) -> bool:
        if not (is_list(a) and is_list(b)):
            raise no_overload(f"sets.{function}", a, b)
        if function == "contains":
            return all(_has(a, x) for x in b)
        if function == "equivalent":
            return all(_has(a, x) for x in b) and all(_has(b, x) for x in a)
        return any(_has(b, x) for x in a)

    return check
