"""`matchAttribute` / `distinctAttribute` over list-valued attributes, per Kubernetes version
(issue 30 finding 6).

kube-scheduler v1.36.3 gives DRAListTypeAttributes to CEL but not to its allocator
(`AllocatorFeatures` in pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go
lists neither it nor a stand-in; v1.37.2 passes it). So with the gate on, a 1.36 scheduler runs
the incubating allocator, whose constraints compare scalars only: a list-valued device may be a
constraint's first device and no later one. 1.37 compares lists as sets. The oracle feeds the
switch to upstream's allocator module itself, so a conformance case keeps list semantics.
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.allocator.features import Features
from tests.allocator.builders import claim, device, device_class, devices_of, pool_slices, request, run

DRIVER = "gpu.example.com"
ATTRIBUTE = f"{DRIVER}/numa"


def _slices() -> list[dict[str, Any]]:
    lists = {"gpu-0": [0, 1], "gpu-1": [1, 2], "gpu-2": [3]}
    return pool_slices(
        DRIVER, "pool", [device(n, attributes={"numa": {"ints": v}}) for n, v in lists.items()]
    )


def _allocate(features: Features, constraint: str, count: int) -> list[list[str]] | None:
    result = run(
        _slices(),
        [device_class("gpu", DRIVER)],
        [claim("c", [request("r", "gpu", count)], [{constraint: ATTRIBUTE}])],
        features=features,
    )
    return None if result is None else devices_of(result)


GATE_ON_136 = Features.from_gates({"DRAListTypeAttributes": True}, version="1.36")
GATE_ON_137 = Features.from_gates({"DRAListTypeAttributes": True}, version="1.37")
ORACLE_136 = Features.from_conformance(
    {"ListTypeAttributes": True, "PartitionableDevices": True, "PrioritizedList": True}, version="1.36"
)


def test_the_136_gate_reaches_cel_but_not_the_constraints() -> None:
    assert GATE_ON_136.list_type_attributes and not GATE_ON_136.list_type_constraints
    assert GATE_ON_137.list_type_attributes and GATE_ON_137.list_type_constraints
    assert ORACLE_136.list_type_constraints  # the allocator module's own switch


@pytest.mark.parametrize("constraint", ["matchAttribute", "distinctAttribute"])
def test_136_scheduler_takes_one_list_valued_device_per_constraint(constraint: str) -> None:
    """Two devices: at 1.36 no pair passes (the second list is an 'unknown' type upstream)."""
    assert _allocate(GATE_ON_136, constraint, 2) is None
    # One device is a first device, which upstream always takes.
    assert _allocate(GATE_ON_136, constraint, 1) == [["gpu-0"]]


@pytest.mark.parametrize("features", [GATE_ON_137, ORACLE_136], ids=["1.37-gate", "oracle-1.36-switch"])
def test_lists_compare_as_sets_where_the_allocator_has_the_switch(features: Features) -> None:
    assert _allocate(features, "matchAttribute", 2) == [["gpu-0", "gpu-1"]]  # share NUMA 1
    assert _allocate(features, "distinctAttribute", 2) == [["gpu-0", "gpu-2"]]  # disjoint
    assert _allocate(features, "matchAttribute", 3) is None  # {0,1} & {1,2} & {3} is empty
