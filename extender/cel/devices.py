"""The CEL `device` variable, built once per device from its ResourceSlice entry.

Mirrors upstream's `DeviceMatches` conversion (dynamic-resource-allocation/cel/compile.go):
attribute and capacity names are split into domain and id (`a.b/c` -> `a.b`, `c`; a bare name
belongs to the driver's domain); each attribute must carry exactly the value kinds the enabled
features allow, else the device cannot be used in CEL at all and every evaluation against it is a
runtime error `attribute <name>: unsupported attribute value`. We raise that error when the
input is built, which callers do once per device and cache (the device is immutable while it
sits in an index snapshot), so it surfaces at the same point: the first selector evaluated.

The result is read-only by convention: CEL cannot mutate it and nothing else gets at the maps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extender.cel.semvers import SemverError, parse_version_attribute
from extender.cel.values import DomainMap
from extender.errors import CelRuntimeError
from extender.quantity import Quantity, QuantityError

_SCALAR_KINDS = ("int", "bool", "string", "version")
_LIST_KINDS = {"ints": "int", "bools": "bool", "strings": "string", "versions": "version"}
UNSUPPORTED = "unsupported attribute value"


@dataclass(frozen=True, slots=True)
class DeviceInput:
    """CEL's `device` for one device: driver, attributes, capacity [, allowMultipleAllocations]."""

    root: Mapping[str, Any]

    @property
    def driver(self) -> str:
        return str(self.root["driver"])


def build_device_input(
    driver: str,
    attributes: Mapping[str, Mapping[str, Any]],
    capacity: Mapping[str, Mapping[str, Any]],
    allow_multiple_allocations: bool | None,
    *,
    consumable_capacity: bool,
    list_type_attributes: bool,
) -> DeviceInput:
    """Convert one ResourceSlice device's attributes and capacity into CEL's `device`.

    Args:
        driver: the slice's `spec.driver`; the domain of unqualified names.
        attributes: raw `attributes` JSON, e.g. `{"index": {"int": 0}, "models": {"strings": [...]}}`.
        capacity: raw `capacity` JSON, e.g. `{"memory": {"value": "80Gi"}}`.
        allow_multiple_allocations: the device's flag; `None` reads as false.
        consumable_capacity: DRAConsumableCapacity; only then is `device.allowMultipleAllocations` set.
        list_type_attributes: DRAListTypeAttributes; only then may attributes hold lists.

    Raises:
        CelRuntimeError: an attribute without a usable value (upstream's text), an unparsable
            version, or an unparsable capacity quantity.
    """
    attribute_domains = DomainMap()
    for name, raw in attributes.items():
        domain, ident = _split(name, driver)
        attribute_domains.setdefault(domain, {})[ident] = _attribute_value(name, raw, list_type_attributes)
    capacity_domains = DomainMap()
    for name, raw in capacity.items():
        domain, ident = _split(name, driver)
        capacity_domains.setdefault(domain, {})[ident] = _capacity_value(name, raw)
    root: dict[str, Any] = {"driver": driver, "attributes": attribute_domains, "capacity": capacity_domains}
    if consumable_capacity:
        root["allowMultipleAllocations"] = bool(allow_multiple_allocations)
    return DeviceInput(root)


def _split(name: str, driver: str) -> tuple[str, str]:
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (driver, name)


def _attribute_value(name: str, raw: Mapping[str, Any], list_type_attributes: bool) -> Any:
    for kind in _SCALAR_KINDS:
        value = raw.get(kind)
        if value is not None:
            return _scalar(name, kind, value)
    for list_kind, kind in _LIST_KINDS.items():
        items = raw.get(list_kind)
        if items is None:
            continue
        if not list_type_attributes or not isinstance(items, list | tuple) or not items:
            break
        return tuple(_scalar(name, kind, item) for item in items)
    raise CelRuntimeError(f"attribute {name}: {UNSUPPORTED}")


def _scalar(name: str, kind: str, value: Any) -> Any:
    if type(value) is {"int": int, "bool": bool, "string": str}.get(kind):
        return value
    if kind == "version" and type(value) is str:
        try:
            return parse_version_attribute(value)
        except SemverError as exc:
            raise CelRuntimeError(f"attribute {name}: parse semantic version: {exc}") from None
    raise CelRuntimeError(f"attribute {name}: {UNSUPPORTED}")


def _capacity_value(name: str, raw: Mapping[str, Any] | Quantity) -> Quantity:
    value = raw if isinstance(raw, Quantity) else raw.get("value")
    if isinstance(value, Quantity):
        return value
    try:
        return Quantity.parse(value)
    except QuantityError as exc:
        raise CelRuntimeError(f"capacity {name}: {exc.reason}") from None
