"""Allocator feature switches, separate from how they are configured.

Like upstream's `structured/internal.Features`, this is a plain struct so that the allocator
does not depend on how gates are parsed. `from_gates` maps Kubernetes feature-gate names
(as given to `--feature-gates`) onto it; defaults are Kubernetes 1.36's.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

#: Kubernetes feature gates this service understands, with their Kubernetes 1.36 defaults.
GATE_DEFAULTS: dict[str, bool] = {
    "DRAAdminAccess": True,
    "DRAConsumableCapacity": True,
    "DRADeviceBindingConditions": True,
    "DRAExtendedResource": True,  # beta in 1.36 (GA and locked on in 1.37)
    "DRADeviceTaintRules": False,
    "DRADeviceTaints": True,
    "DRAListTypeAttributes": False,
    "DRAPartitionableDevices": True,
    "DRAPrioritizedList": True,
    "DRAResourceClaimDeviceStatus": True,
    # Not a Kubernetes gate: selects the Kubernetes 1.37 capacity-name rule (see
    # `Features.capacity_names_1_37`). Named after the version whose behaviour it turns on.
    "Kubernetes137CapacityNames": False,
}


@dataclass(frozen=True, slots=True)
class Features:
    """Which optional allocator behaviours are on (fields sorted, as upstream keeps them)."""

    admin_access: bool = True
    #: Kubernetes 1.37's capacity-name rule: a bare name in a request or on a device means
    #: `<driver>/<name>`. Off (1.36, allocator v0.36.2): capacity names are matched literally.
    capacity_names_1_37: bool = False
    consumable_capacity: bool = True
    device_binding_and_status: bool = True
    #: KEP-5004: pods may ask for extended resources a DeviceClass maps (`core/extended.py`).
    extended_resource: bool = True
    device_taint_rules: bool = False
    device_taints: bool = True
    list_type_attributes: bool = False
    partitionable_devices: bool = True
    prioritized_list: bool = True

    @classmethod
    def from_gates(cls, gates: dict[str, bool] | None = None) -> Features:
        """Build from Kubernetes gate names; unknown names raise ValueError listing the known ones."""
        merged = dict(GATE_DEFAULTS)
        for name, value in (gates or {}).items():
            if name not in GATE_DEFAULTS:
                known = ", ".join(sorted(GATE_DEFAULTS))
                raise ValueError(f"unknown feature gate {name!r}; known gates: {known}")
            merged[name] = value
        return cls(
            admin_access=merged["DRAAdminAccess"],
            capacity_names_1_37=merged["Kubernetes137CapacityNames"],
            consumable_capacity=merged["DRAConsumableCapacity"],
            device_binding_and_status=merged["DRADeviceBindingConditions"]
            and merged["DRAResourceClaimDeviceStatus"],
            extended_resource=merged["DRAExtendedResource"],
            device_taint_rules=merged["DRADeviceTaintRules"] and merged["DRADeviceTaints"],
            device_taints=merged["DRADeviceTaints"],
            list_type_attributes=merged["DRAListTypeAttributes"],
            partitionable_devices=merged["DRAPartitionableDevices"],
            prioritized_list=merged["DRAPrioritizedList"],
        )

    @classmethod
    def from_conformance(cls, switches: dict[str, bool]) -> Features:
        """Build from the allocator switch names used by the upstream test table."""
        return cls(
            admin_access=switches.get("AdminAccess", False),
            consumable_capacity=switches.get("ConsumableCapacity", False),
            device_binding_and_status=switches.get("DeviceBindingAndStatus", False),
            device_taint_rules=False,
            device_taints=switches.get("DeviceTaints", False),
            list_type_attributes=switches.get("ListTypeAttributes", False),
            partitionable_devices=switches.get("PartitionableDevices", False),
            prioritized_list=switches.get("PrioritizedList", False),
        )

    def describe(self) -> str:
        """One line for start-up logs."""
        return ", ".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self))


def parse_feature_gates(text: str) -> dict[str, bool]:
    """Parse `Name=bool,Name=bool` as kube components accept it; raises ValueError on bad input."""
    gates: dict[str, bool] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep or value.strip().lower() not in ("true", "false"):
            raise ValueError(f"feature gate {item!r} must look like Name=true or Name=false")
        gates[name.strip()] = value.strip().lower() == "true"
    return gates
