"""What a selector reads of `device`: its footprint, found once per expression text.

A selector's result depends only on the values it reads. When every use of `device` in an
expression is a fixed path to one value, `device.driver`, `device.allowMultipleAllocations`,
`device.attributes["<domain>"].<name>` or `device.capacity["<domain>"].<name>` (also with
`[...]`, `.?name`, `[?...]` or inside `has()`), two devices that agree on those values (present or
absent, type and value) get the same result, the same runtime error included, and the same cost
charge: evaluation is a deterministic function of what it reads. The index then evaluates one
device per group of equal values instead of every device (`extender.index.selector_groups`).

Anything else, `device` as a whole, a whole attribute or capacity map (`"x" in
device.attributes["d"]`, a comprehension over it), a computed key, a macro or `cel.bind` variable
named `device`, the leading-dot `.device`, gives no footprint (None): such selectors are evaluated
device by device, as before. So does an expression that does not compile (its error is the
caller's to raise).
"""

from __future__ import annotations

import functools
from typing import Any, Final

import lark

from extender.cel.literals import InvalidLiteral, literal_value
from extender.cel.parsing import Branch, SyntaxIssues, ident_name, parse, unwrap

#: One value an expression reads: ("driver",), ("allowMultipleAllocations",), or
#: (map, domain, name) with map "attributes" or "capacity".
Read = tuple[str, ...]

_ROOT_FIELDS: Final = frozenset({"driver", "allowMultipleAllocations"})
_MAPS: Final = frozenset({"attributes", "capacity"})
_MACROS: Final = frozenset({"all", "exists", "exists_one", "existsOne", "filter", "map"})
_STRINGS: Final = frozenset({"STRING_LIT", "MLSTRING_LIT"})


class _NoFootprint(Exception):
    """`device` is used in a way a fixed set of values does not describe."""


#: Footprints remembered (an LRU by text); wiring sets it to `Settings.cel_compile_cache_size`,
#: the bound of everything kept per selector text (`set_cache_size`).
CACHE_SIZE = 4096


def device_reads(expression: str) -> frozenset[Read] | None:
    """The values `expression` reads of `device`, or None when they are not a fixed set."""
    return _remembered(expression)


def set_cache_size(size: int) -> None:
    """Remember at most `size` footprints from now on (the ones remembered so far are dropped)."""
    global CACHE_SIZE, _remembered
    if size < 1:
        raise ValueError(f"footprint cache size must be at least 1, not {size}")
    CACHE_SIZE = size
    _remembered = functools.lru_cache(maxsize=size)(_device_reads)


def _device_reads(expression: str) -> frozenset[Read] | None:
    try:
        tree = parse(expression)
    except (SyntaxIssues, RecursionError):
        return None
    reads: set[Read] = set()
    try:
        _walk(tree, reads)
    except (_NoFootprint, RecursionError):
        return None
    return frozenset(reads)


_remembered = functools.lru_cache(maxsize=CACHE_SIZE)(_device_reads)


def union_of_reads(expressions: tuple[str, ...]) -> frozenset[Read] | None:
    """Everything any of `expressions` reads, or None when one of them has no footprint."""
    union: set[Read] = set()
    for expression in expressions:
        reads = device_reads(expression)
        if reads is None:
            return None
        union |= reads
    return frozenset(union)


def _walk(branch: Branch, reads: set[Read]) -> None:
    if not isinstance(branch, lark.Tree):
        return
    read = _value_path(branch)
    if read is not None:
        reads.add(read)
        return
    node = unwrap(branch)
    if not isinstance(node, lark.Tree):
        return
    if node.data in ("ident", "dot_ident") and str(node.children[0]) == "device":
        raise _NoFootprint  # `device` reached other than as a fixed path to one value
    if node.data == "member_dot_arg" and _binds_device(node):
        raise _NoFootprint
    for child in node.children:
        _walk(child, reads)


def _value_path(branch: Branch) -> Read | None:
    """The read when `branch` is a fixed path from `device` to one value, else None."""
    node = unwrap(branch)
    if not isinstance(node, lark.Tree):
        return None
    if node.data in ("member_dot", "member_dot_opt"):
        target, field = node.children
        if _is_device(target):
            return (str(field),) if str(field) in _ROOT_FIELDS else None
        domain = _domain(target)
        return None if domain is None else (*domain, str(field))
    if node.data in ("member_index", "member_index_opt"):
        target, key = node.children
        domain, name = _domain(target), _string(key)
        return None if domain is None or name is None else (*domain, name)
    return None


def _domain(branch: Branch) -> tuple[str, str] | None:
    """(map, domain) when `branch` is `device.attributes["<domain>"]` or the capacity form."""
    node = unwrap(branch)
    if not isinstance(node, lark.Tree) or node.data != "member_index":
        return None
    target, key = node.children
    inner = unwrap(target)
    if not isinstance(inner, lark.Tree) or inner.data != "member_dot":
        return None
    owner, field = inner.children
    domain = _string(key)
    if not _is_device(owner) or str(field) not in _MAPS or domain is None:
        return None
    return str(field), domain


def _is_device(branch: Branch) -> bool:
    node = unwrap(branch)
    return isinstance(node, lark.Tree) and node.data == "ident" and ident_name(node) == "device"


def _string(branch: Branch) -> str | None:
    """The value of a string literal, else None."""
    node = unwrap(branch)
    if not isinstance(node, lark.Tree) or node.data != "literal":
        return None
    token = node.children[0]
    if not isinstance(token, lark.Token) or token.type not in _STRINGS:
        return None
    try:
        value = literal_value(token)
    except InvalidLiteral:
        return None
    return value if isinstance(value, str) else None


def _binds_device(node: lark.Tree[Any]) -> bool:
    """A macro or `cel.bind` whose variable is named `device` (it would shadow the root)."""
    name = str(node.children[1])
    if name not in _MACROS and not (name == "bind" and ident_name(node.children[0]) == "cel"):
        return False
    if len(node.children) < 3 or not isinstance(node.children[2], lark.Tree):
        return False
    variables = node.children[2].children[:2]
    return any(ident_name(variable) == "device" for variable in variables)
