"""API fields new in Kubernetes 1.37: read by the 1.37 allocator, ignored by 1.36's.

A 1.36 API server drops fields it does not know, so a 1.36 scheduler never sees them; the
extender, reading objects a 1.37 API server may have stored, ignores them when it answers as
1.36. The full semantics are held to upstream's v0.37.2 table (tests/conformance/test_dumped_tables.py).
"""

from __future__ import annotations

import pytest

from extender.allocator.features import Features
from extender.errors import AllocationError
from tests.allocator.builders import NODE, claim, device, device_class, pool_slices, request, run

DRIVER = "gpu.example.com"
DECLARING = {**NODE, "status": {"declaredFeatures": ["DRAOptionalNodeOperations"]}}


def _skipping_slices() -> list[dict]:
    slices = pool_slices(DRIVER, "pool", [device("gpu-0")])
    slices[0]["spec"]["skipNodeOperations"] = ["*"]
    return slices


def _allocate(features: Features, node: dict) -> list[dict] | None:
    result = run(
        _skipping_slices(),
        [device_class("gpu", DRIVER)],
        [claim("c", [request("r", "gpu")])],
        features=features,
        node=node,
    )
    return None if result is None else [r.allocation for r in result]


def test_136_ignores_skip_node_operations() -> None:
    allocations = _allocate(Features.from_gates(version="1.36"), NODE)
    assert allocations is not None
    assert "skipNodeOperations" not in allocations[0]["devices"]["results"][0]


@pytest.mark.parametrize(
    ("gate", "node", "allocated"),
    [(False, DECLARING, False), (True, NODE, False), (True, DECLARING, True)],
    ids=["gate-off", "node-does-not-declare", "gate-on-and-declared"],
)
def test_137_needs_the_gate_and_the_nodes_declaration(gate: bool, node: dict, allocated: bool) -> None:
    features = Features.from_gates({"DRAOptionalNodeOperations": gate}, version="1.37")
    allocations = _allocate(features, node)
    assert (allocations is not None) == allocated
    if allocations is not None:
        assert allocations[0]["devices"]["results"][0]["skipNodeOperations"] == ["*"]


def _grouped_pool() -> list[dict]:
    """Two partitions of one GPU whose compatibility groups do not intersect."""
    counters = {"gpu-0": {"memory": 8}}

    def part(name: str, group: str) -> dict:
        consumption = {"counterSet": "gpu-0", "counters": {"memory": {"value": "4"}}}
        return device(name, consumesCounters=[{**consumption, "compatibilityGroups": [group]}])

    return pool_slices(DRIVER, "pool", [part("p0", "small"), part("p1", "large")], counters)


def _two_partitions(features: Features) -> list[str] | None:
    result = run(
        _grouped_pool(),
        [device_class("gpu", DRIVER)],
        [claim("c", [request("r", "gpu", count=2)])],
        features=features,
    )
    return None if result is None else [d["device"] for d in result[0].allocation["devices"]["results"]]


def test_136_ignores_compatibility_groups() -> None:
    assert _two_partitions(Features.from_gates(version="1.36")) == ["p0", "p1"]


def test_137_compatibility_groups() -> None:
    # Gate on: the groups do not intersect, so the two partitions cannot go together.
    assert (
        _two_partitions(Features.from_gates({"DRADeviceCompatibilityGroups": True}, version="1.37")) is None
    )
    # Gate off (1.37's default): the slice using groups is ignored, its pool is incomplete.
    assert _two_partitions(Features.from_gates(version="1.37")) is None


def _derived_claim() -> dict:
    """Two GPUs whose `numa` attributes differ, matched on a derived attribute that ignores it."""
    derived = [{"name": "derived/same", "expression": '"one"'}]
    requests = [request("r", "gpu", count=2, derivedAttributes=derived)]
    return claim("c", requests, [{"matchAttribute": "derived/same"}])


def _derived(features: Features) -> list[str] | None:
    slices = pool_slices(DRIVER, "pool", [device("g0", attrs={"numa": 0}), device("g1", attrs={"numa": 1})])
    result = run(slices, [device_class("gpu", DRIVER)], [_derived_claim()], features=features)
    return None if result is None else [d["device"] for d in result[0].allocation["devices"]["results"]]


def test_136_ignores_derived_attributes() -> None:
    # 1.36 has no derived attributes: the devices lack `derived/same`, so none can be added.
    assert _derived(Features.from_gates(version="1.36")) is None


def test_137_derived_attributes() -> None:
    assert _derived(Features.from_gates({"DRADerivedAttributes": True}, version="1.37")) == ["g0", "g1"]
    with pytest.raises(AllocationError, match="cannot handle request with derived attributes"):
        _derived(Features.from_gates(version="1.37"))


@pytest.mark.parametrize(
    ("version", "declared", "passes"),
    [("1.36", False, True), ("1.37", False, False), ("1.37", True, True)],
    ids=["136-ignores", "137-node-does-not-declare", "137-node-declares"],
)
def test_allocated_claim_that_skips_node_operations(version: str, declared: bool, passes: bool) -> None:
    """1.37's scheduler keeps a pod whose claim is already allocated to such a device off nodes
    that do not declare DRAOptionalNodeOperations (v1.37.2 dynamicresources.go)."""
    from extender.cluster.state import ClusterState
    from extender.core.assumed import AssumeCache
    from extender.core.placement import Placement
    from extender.pods import parse_pod

    node: dict = {"kind": "Node", "metadata": {"name": "node-1"}}
    if declared:
        node["status"] = {"declaredFeatures": ["DRAOptionalNodeOperations"]}
    result = {
        "request": "r",
        "driver": DRIVER,
        "pool": "pool",
        "device": "gpu-0",
        "skipNodeOperations": ["*"],
    }
    held = {
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "default", "uid": "uid-c"},
        "spec": {"devices": {"requests": [request("r", "gpu")]}},
        "status": {"allocation": {"devices": {"results": [result]}}, "reservedFor": [{"uid": "pod-uid"}]},
    }
    slices = [{**s, "kind": "ResourceSlice"} for s in _skipping_slices()]
    objects = [node, *slices, {**device_class("gpu", DRIVER), "kind": "DeviceClass"}, held]
    pod = {
        "metadata": {"name": "p", "namespace": "default", "uid": "pod-uid"},
        "spec": {"resourceClaims": [{"name": "c", "resourceClaimName": "c"}]},
    }
    features = (
        Features.from_gates({"DRAOptionalNodeOperations": True}, version="1.37")
        if version == "1.37"
        else Features()
    )
    placement = Placement(ClusterState.from_objects(objects), features=features, assumed=AssumeCache())
    verdict = placement.filter(parse_pod(pod), ["node-1"])
    assert verdict.passed == (["node-1"] if passes else []), verdict
