"""CEL's lookups: `in`, `x[k]`, `x.f`, `has(x.f)`, the optional forms `x.?f`/`x[?k]`, and
what comprehensions range over, with cel-go's error texts (`no such key: <key>`,
`index out of range: <i>`).

Two DRA rules live here. A `DomainMap` (`device.attributes`, `device.capacity`) answers a lookup
of a domain it lacks with an empty map, as upstream's `mapper.Find` does; since `has()` and
optional selection also go through `Find` upstream, they report such a domain as present, while
`in` reports the truth. And once a chain of selections meets an optional value, every further
selection or index tests presence and yields an optional (cel-go's `applyQualifiers`), so
`a.?b.c.orValue(x)` never fails on a missing `c`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Final

from celpy.celtypes import UintType

from extender.cel.values import (
    EMPTY_MAP,
    NONE,
    CelEvalError,
    CelOptional,
    DomainMap,
    equal,
    is_list,
    is_number,
    no_overload,
    plain,
    type_name,
)


def contains(container: Any, item: Any) -> bool:
    """The `in` operator: list membership by CEL equality, map key presence."""
    if is_list(container):
        return any(equal(item, element) for element in container)
    if isinstance(container, dict):
        try:
            return map_has(container, item)
        except TypeError:
            raise no_overload("@in", item, container) from None
    raise no_overload("@in", item, container)


def map_has(mapping: dict[Any, Any], key: Any) -> bool:
    if type(key) is bool:
        return any(type(k) is bool and k == key for k in mapping)
    if type(key) is UintType or (type(key) is int and key not in mapping):
        return any(is_number(k) and plain(k) == plain(key) for k in mapping)
    return key in mapping


def index(container: Any, key: Any) -> Any:
    """`container[key]` (and `container.key` for maps)."""
    if isinstance(container, dict):
        try:
            return container[key]
        except KeyError:
            if type(container) is DomainMap:
                return EMPTY_MAP
            raise CelEvalError(f"no such key: {_display(key)}") from None
        except TypeError:
            raise no_overload("_[_]", container, key) from None
    if is_list(container):
        position = _list_position(container, key)
        if not 0 <= position < len(container):
            raise CelEvalError(f"index out of range: {position}")
        return container[position]
    if type(container) is CelOptional:
        return optional_index(container, key)
    raise no_overload("_[_]", container, key)


def select(target: Any, field: str) -> Any:
    """`target.field`: a map lookup (DRA's `device` is a map here, too)."""
    if isinstance(target, dict):
        value = target.get(field, _MISSING)
        if value is not _MISSING:
            return value
        if type(target) is DomainMap:
            return EMPTY_MAP
        raise CelEvalError(f"no such key: {field}")
    if type(target) is CelOptional:
        return optional_index(target, field)
    raise CelEvalError(f"type '{type_name(target)}' does not support field selection")


def has_field(target: Any, field: str) -> bool:
    """The `has(target.field)` test (a `DomainMap` answers like upstream's `Find`: always)."""
    if type(target) is CelOptional:
        if not target.has_value:
            return False
        target = target.value
    if isinstance(target, dict):
        return type(target) is DomainMap or field in target
    raise CelEvalError(f"invalid type for field selection: {type_name(target)}")


def optional_index(target: Any, key: Any) -> CelOptional:
    """`target[?key]` / `target.?key`, and any select on an optional: absent keys give none."""
    if type(target) is CelOptional:
        if not target.has_value:
            return NONE
        target = target.value
    if isinstance(target, dict):
        try:
            if key in target:
                return CelOptional(target[key])
        except TypeError:
            raise no_overload("_[?_]", target, key) from None
        return CelOptional(EMPTY_MAP) if type(target) is DomainMap else NONE
    if is_list(target):
        position = _list_position(target, key)
        return CelOptional(target[position]) if 0 <= position < len(target) else NONE
    raise no_overload("_[?_]", target, key)


def _list_position(container: Any, key: Any) -> int:
    if type(key) is int or type(key) is UintType:
        return int(key)
    if type(key) is float and key.is_integer():
        return int(key)
    raise no_overload("_[_]", container, key)


def iterate(value: Any, macro: str) -> Iterator[Any]:
    """What a comprehension ranges over: list elements or map keys."""
    if is_list(value) or isinstance(value, dict):
        return iter(value)
    raise CelEvalError(f"expression of type '{type_name(value)}' cannot be the range of {macro}()")


def iterate_pairs(value: Any, macro: str) -> Iterable[tuple[Any, Any]]:
    """Two-variable comprehensions: (index, element) of a list or (key, value) of a map."""
    if is_list(value):
        return enumerate(value)
    if isinstance(value, dict):
        return value.items()
    raise CelEvalError(f"expression of type '{type_name(value)}' cannot be the range of {macro}()")


def _display(value: Any) -> str:
    if type(value) is bool:
        return "true" if value else "false"
    return str(value)


_MISSING: Final = object()
