"""The read-only inputs of one allocation: DeviceClasses, the allocated state, CEL evaluation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from extender.allocator.model import Device, DeviceID
from extender.allocator.requests import Selector
from extender.quantity import Quantity


@dataclass(frozen=True, slots=True)
class DeviceClassSpec:
    """What the allocator needs of a DeviceClass."""

    name: str
    selectors: tuple[Selector, ...]
    config: tuple[dict[str, Any], ...] = ()


class ClassLookup(Protocol):
    def get_class(self, name: str) -> DeviceClassSpec | None:
        """The DeviceClass by name, or None if it does not exist."""
        ...


class SelectorEvaluator(Protocol):
    def evaluate(self, expression: str, device: Device) -> bool:
        """Evaluate one CEL selector; raises CelCompileError / CelRuntimeError with the detail."""
        ...


@dataclass(frozen=True, slots=True)
class AllocatedState:
    """Devices held by other claims (allocated or in flight), and shares of shared devices."""

    devices: frozenset[DeviceID] = frozenset()
    shared_ids: frozenset[tuple[DeviceID, str]] = frozenset()
    aggregated_capacity: dict[DeviceID, dict[str, Quantity]] = field(default_factory=dict)


def parse_device_class(raw: dict[str, Any]) -> DeviceClassSpec:
    """A DeviceClass object as the allocator needs it."""
    spec = raw.get("spec") or {}
    return DeviceClassSpec(
        name=(raw.get("metadata") or {}).get("name", ""),
        selectors=tuple(
            Selector((s.get("cel") or {}).get("expression")) for s in spec.get("selectors") or ()
        ),
        config=tuple(spec.get("config") or ()),
    )
