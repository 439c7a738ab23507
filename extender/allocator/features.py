"""Allocator feature switches and the Kubernetes version, separate from how they are configured.

Like upstream's `structured/internal.Features`, this is a plain struct so that the allocator
does not depend on how gates are parsed. `from_gates` maps Kubernetes feature-gate names
(as given to `--feature-gates`) onto it, starting from the defaults of the chosen Kubernetes
version (`--kubernetes-version`); the version itself also selects behaviour and error texts
that no gate controls (docs/kubernetes-versions.md).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

#: The Kubernetes versions whose allocator this service reproduces, oldest first.
SUPPORTED_VERSIONS: tuple[str, ...] = ("1.36", "1.37")
DEFAULT_VERSION = "1.36"

#: Kubernetes feature gates this service understands, with their Kubernetes 1.36 defaults
#: (k8s.io/kubernetes v1.36.3 pkg/features/kube_features.go).
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
    #: Alpha in 1.36, beta but off in 1.37; kube components need GenericWorkload with it.
    "DRAWorkloadResourceClaims": False,
}

#: Kubernetes 1.37's, as a default kube-scheduler v1.37.2 runs them (its `kubernetes_feature_enabled`
#: metric; `tests/e2e/test_feature_gates.py` compares): DRADeviceTaintRules goes GA (on), and four
#: new gates are off. DRAFractionalCapacityRange is beta but off: kube_features.go turns it on only
#: "if --min-compatibility-version>=1.37", and kube-scheduler's default minimum compatibility
#: version is its emulated version minus one (1.36; component-base `SetEmulationVersion`). Built
#: from 1.36's so that a gate both versions share needs one entry.
GATE_DEFAULTS_137: dict[str, bool] = {
    **GATE_DEFAULTS,
    "DRADerivedAttributes": False,
    "DRADeviceCompatibilityGroups": False,
    "DRADeviceTaintRules": True,
    "DRAFractionalCapacityRange": False,
    "DRAOptionalNodeOperations": False,
}

#: Gate defaults per supported Kubernetes version.
VERSION_GATE_DEFAULTS: dict[str, dict[str, bool]] = {"1.36": GATE_DEFAULTS, "1.37": GATE_DEFAULTS_137}

#: GA gates locked to their default per version (`LockToDefault: true` in kube_features.go of
#: v1.36.3 / v1.37.2): kube components refuse to set them otherwise, and so does this service.
LOCKED_GATES: dict[str, frozenset[str]] = {
    "1.36": frozenset({"DRAAdminAccess"}),
    "1.37": frozenset(
        {"DRAAdminAccess", "DRAExtendedResource", "DRAPrioritizedList", "DRAResourceClaimDeviceStatus"}
    ),
}

#: Retired entries, with what replaces them (a clear error rather than silently ignoring them).
RETIRED_GATES: dict[str, str] = {
    "Kubernetes137CapacityNames": (
        "Kubernetes137CapacityNames is retired: it turned on a capacity-name rule of 1.37 "
        "development code that no released version ships (k8s.io/dynamic-resource-allocation "
        "v0.37.2 matches capacity names literally, as 1.36 does); choose the Kubernetes version "
        "with --kubernetes-version instead"
    ),
}


def check_version(version: str) -> str:
    """`version` if supported, else ValueError naming the supported ones."""
    if version not in SUPPORTED_VERSIONS:
        raise ValueError(
            f"unsupported Kubernetes version {version!r}; supported: {', '.join(SUPPORTED_VERSIONS)}"
        )
    return version


@dataclass(frozen=True, slots=True)
class Features:
    """Which optional allocator behaviours are on (fields sorted, as upstream keeps them)."""

    admin_access: bool = True
    #: A capacity-name rule of 1.37 development code (bare names mean `<driver>/<name>`) that no
    #: released version ships; kept for tests of `extender.allocator.capacity`, never set by
    #: configuration (`RETIRED_GATES`). Off: capacity names are matched literally (1.36, 1.37).
    capacity_names_1_37: bool = False
    compatibility_groups: bool = False  # 1.37 DRADeviceCompatibilityGroups
    consumable_capacity: bool = True
    derived_attributes: bool = False  # 1.37 DRADerivedAttributes
    device_binding_and_status: bool = True
    #: KEP-5004: pods may ask for extended resources a DeviceClass maps (`core/extended.py`).
    extended_resource: bool = True
    device_taint_rules: bool = False
    device_taints: bool = True
    fractional_capacity_range: bool = False  # 1.37 DRAFractionalCapacityRange
    #: The Kubernetes version whose allocator semantics (error texts, rules no gate controls) apply.
    kubernetes_version: str = DEFAULT_VERSION
    #: DRAListTypeAttributes as CEL sees it: attribute values may be lists (`extender.cel.devices`).
    list_type_attributes: bool = False
    #: DRAListTypeAttributes as the allocator's `matchAttribute`/`distinctAttribute` see it: lists
    #: compare as sets (upstream's attributeAsSet); off, only scalars compare (a list-valued
    #: device may be a constraint's first device and no other). kube-scheduler v1.36.3 passes the
    #: gate to CEL but not to its allocator (`AllocatorFeatures` in dynamicresources.go; 1.37
    #: passes both), so on 1.36 this stays off whatever the gate says (issue 30 finding 6).
    list_type_constraints: bool = False
    optional_node_operations: bool = False  # 1.37 DRAOptionalNodeOperations
    partitionable_devices: bool = True
    prioritized_list: bool = True
    #: DRAWorkloadResourceClaims: a pod's claim that is also its PodGroup's is reserved for the
    #: group, and a claim the PodGroup owns serves its members (`extender.claims`).
    workload_resource_claims: bool = False

    @property
    def v137(self) -> bool:
        """Kubernetes 1.37 semantics (allocator v0.37.x)."""
        return self.kubernetes_version == "1.37"

    @classmethod
    def from_gates(cls, gates: dict[str, bool] | None = None, version: str = DEFAULT_VERSION) -> Features:
        """Build from Kubernetes gate names over `version`'s defaults.

        Raises ValueError for an unsupported version, a retired entry, a gate the version does
        not know (listing the known ones), or a locked gate set away from its default.
        """
        defaults = VERSION_GATE_DEFAULTS[check_version(version)]
        merged = dict(defaults)
        for name, value in (gates or {}).items():
            if name in RETIRED_GATES:
                raise ValueError(RETIRED_GATES[name])
            if name not in defaults:
                known = ", ".join(sorted(defaults))
                raise ValueError(
                    f"unknown feature gate {name!r} for Kubernetes {version}; known gates: {known}"
                )
            if name in LOCKED_GATES[version] and value != defaults[name]:
                # component-base's text for a locked gate
                raise ValueError(
                    f"cannot set feature gate {name} to {str(value).lower()}, feature is locked to "
                    f"{str(defaults[name]).lower()} (Kubernetes {version})"
                )
            merged[name] = value
        return cls(
            admin_access=merged["DRAAdminAccess"],
            compatibility_groups=merged.get("DRADeviceCompatibilityGroups", False)
            and merged["DRAPartitionableDevices"],
            consumable_capacity=merged["DRAConsumableCapacity"],
            derived_attributes=merged.get("DRADerivedAttributes", False),
            device_binding_and_status=merged["DRADeviceBindingConditions"]
            and merged["DRAResourceClaimDeviceStatus"],
            extended_resource=merged["DRAExtendedResource"],
            device_taint_rules=merged["DRADeviceTaintRules"] and merged["DRADeviceTaints"],
            device_taints=merged["DRADeviceTaints"],
            fractional_capacity_range=merged.get("DRAFractionalCapacityRange", False)
            and merged["DRAConsumableCapacity"],
            kubernetes_version=version,
            list_type_attributes=merged["DRAListTypeAttributes"],
            list_type_constraints=merged["DRAListTypeAttributes"] and version != "1.36",
            optional_node_operations=merged.get("DRAOptionalNodeOperations", False),
            partitionable_devices=merged["DRAPartitionableDevices"],
            prioritized_list=merged["DRAPrioritizedList"],
            workload_resource_claims=merged["DRAWorkloadResourceClaims"],
        )

    @classmethod
    def from_conformance(cls, switches: dict[str, bool], version: str = DEFAULT_VERSION) -> Features:
        """Build from the allocator switch names used by the upstream test table of `version`.

        Switches the version's allocator does not have are ignored, as its `Features` struct
        ignores them (the oracle decodes the same JSON into the version's struct).
        """
        v137 = check_version(version) == "1.37"
        return cls(
            admin_access=switches.get("AdminAccess", False),
            compatibility_groups=v137 and switches.get("CompatibilityGroups", False),
            consumable_capacity=switches.get("ConsumableCapacity", False),
            derived_attributes=v137 and switches.get("DerivedAttributes", False),
            device_binding_and_status=switches.get("DeviceBindingAndStatus", False),
            device_taint_rules=False,
            device_taints=switches.get("DeviceTaints", False),
            fractional_capacity_range=v137 and switches.get("FractionalCapacityRange", False),
            kubernetes_version=version,
            list_type_attributes=switches.get("ListTypeAttributes", False),
            # The table's switch is the allocator's own (the oracle passes it to the allocator).
            list_type_constraints=switches.get("ListTypeAttributes", False),
            optional_node_operations=v137 and switches.get("OptionalNodeOperations", False),
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
