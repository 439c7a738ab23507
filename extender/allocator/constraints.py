"""Claim constraints: `matchAttribute` and `distinctAttribute` (spec dra.md §3.4).

Both are monotonic, so the search may stop as soon as `add` fails. `add` and `remove` are
called in strict LIFO order by the depth-first search, so the state is a stack.

Attribute values are compared as sets of typed elements: a scalar is a one-element set. With
list-type attributes off every set has one element, which reduces to upstream's scalar rules
(same type and same value for match; different value for distinct), and a value those rules
cannot compare is UNTYPED (below). A constraint never raises on its own: upstream's only refuse a
device; a 1.37 derived attribute whose expression fails raises through the `lookup`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from extender.allocator.model import Device
from extender.allocator.requests import ConstraintSpec

_SCALAR_KINDS = ("int", "bool", "string", "version")
_LIST_KINDS = {"ints": "int", "bools": "bool", "strings": "string", "versions": "version"}

Element = tuple[str, Any]
#: (device, fully qualified attribute name) -> the raw attribute value, or None when absent.
Lookup = Callable[[Device, str], "dict[str, Any] | None"]


def lookup_attribute(device: Device, qualified_name: str) -> dict[str, Any] | None:
    """Upstream lookupAttribute: exact key, else the bare id when the domain is the device's driver."""
    value = device.attributes.get(qualified_name)
    if value is not None:
        return value
    domain, sep, ident = qualified_name.partition("/")
    if not sep or domain != device.id.driver:
        return None
    return device.attributes.get(ident)


# A value upstream's scalar rules (list-type attributes off) cannot compare: a list, or no value.
# Upstream accepts it as the first device of a constraint (it only stores it) and refuses it after
# that; as an empty set it matches nothing and conflicts with nothing, which gives exactly that.
UNTYPED: frozenset[Element] = frozenset()


def attribute_elements(value: dict[str, Any], *, list_types: bool) -> frozenset[Element] | None:
    """The typed elements of an attribute value, as upstream's constraints compare them.

    With list-type attributes on (upstream's attributeAsSet): a non-empty list or a scalar, else
    None (the constraint refuses the device). Off (upstream's scalar switch): a scalar, else
    UNTYPED. Neither is an error: upstream's constraints never fail the allocation.
    """
    for kind, element_kind in _LIST_KINDS.items():
        items = value.get(kind)
        if items:
            return frozenset((element_kind, item) for item in items) if list_types else UNTYPED
    for kind in _SCALAR_KINDS:
        if value.get(kind) is not None:
            return frozenset({(kind, value[kind])})
    return None if list_types else UNTYPED


class Constraint:
    """One claim constraint with its running state for the current search branch."""

    __slots__ = ("_attribute", "_distinct", "_list_types", "_requests", "_stack")

    def __init__(self, spec: ConstraintSpec, *, list_types: bool) -> None:
        self._requests = spec.requests
        self._distinct = spec.distinct_attribute is not None
        self._attribute: str = spec.distinct_attribute or spec.match_attribute or ""
        self._list_types = list_types
        # match: running intersections (one per added device); distinct: each device's set.
        self._stack: list[frozenset[Element]] = []

    @property
    def is_distinct(self) -> bool:
        return self._distinct

    @property
    def attribute(self) -> str:
        return self._attribute

    def elements_of(self, device: Device, lookup: Lookup | None = None) -> frozenset[Element] | None:
        """The device's typed elements of this constraint's attribute (None: it lacks it).

        `lookup` replaces the static lookup (1.37: a request's derived attributes come first);
        it may raise, which aborts the allocation as upstream's constraint error does.
        """
        raw = (lookup or lookup_attribute)(device, self._attribute)
        if raw is None:
            return None
        return attribute_elements(raw, list_types=self._list_types)

    def used_elements(self) -> frozenset[Element]:
        """Every element held by the devices added so far (for distinct: no new device may reuse one)."""
        return frozenset().union(*self._stack)

    def applies_to(self, request: str, subrequest: str) -> bool:
        """Empty `requests` covers all; a parent name covers its subrequests; `req/sub` covers one."""
        if not self._requests:
            return True
        return request in self._requests or (bool(subrequest) and f"{request}/{subrequest}" in self._requests)

    def add(self, request: str, subrequest: str, device: Device, lookup: Lookup | None = None) -> bool:
        """Try to add a device; True (and state updated) if the constraint still holds."""
        if not self.applies_to(request, subrequest):
            return True
        elements = self.elements_of(device, lookup)
        if elements is None or (not elements and self._stack):
            return False
        if self._distinct:
            if any(elements & previous for previous in self._stack):
                return False
            self._stack.append(elements)
            return True
        if self._stack:
            elements = elements & self._stack[-1]
            if not elements:
                return False
        self._stack.append(elements)
        return True

    def remove(self, request: str, subrequest: str) -> None:
        """Undo the matching successful `add` (always the most recent one that applied)."""
        if self.applies_to(request, subrequest):
            self._stack.pop()
