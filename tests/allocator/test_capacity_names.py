"""Capacity names are matched literally in Kubernetes 1.36 (allocator v0.36.2).

A request for `gpu.example.com/memory` does not find a device capacity published as `memory`,
nor the reverse; Kubernetes 1.37.2 (v0.37.2) does the same. The qualified-name rule of 1.37
development code (dra.md §3.5) is `Features.capacity_names_1_37`, which no configuration sets
(the `Kubernetes137CapacityNames` switch is retired).
"""

from __future__ import annotations

import dataclasses

import pytest

from extender.allocator.features import Features
from extender.errors import AllocationError
from tests.allocator.builders import claim, device, device_class, devices_of, pool_slices, request, run

DRIVER = "gpu.example.com"
LITERAL = Features()
QUALIFIED = dataclasses.replace(Features(), capacity_names_1_37=True)


def _one_device_cluster(published: str, *, multi: bool = False) -> list[dict]:
    extra = {"allowMultipleAllocations": True} if multi else {}
    return pool_slices(DRIVER, "pool", [device("gpu-0", capacity={published: "40Gi"}, **extra)])


def _claim_for(requested: str) -> dict:
    return claim("c", [request("r", "gpu", capacity={"requests": {requested: "10Gi"}})])


@pytest.mark.parametrize("multi", [False, True], ids=["dedicated", "multi-allocatable"])
@pytest.mark.parametrize(
    ("published", "requested"),
    [("memory", f"{DRIVER}/memory"), (f"{DRIVER}/memory", "memory")],
    ids=["bare-on-device", "bare-in-request"],
)
def test_literal_rule_is_the_default(published: str, requested: str, multi: bool) -> None:
    """1.36: the two spellings name different capacities, so the device lacks the requested one."""
    result = run(
        _one_device_cluster(published, multi=multi), [device_class("gpu", DRIVER)], [_claim_for(requested)]
    )
    assert result is None


@pytest.mark.parametrize("multi", [False, True], ids=["dedicated", "multi-allocatable"])
def test_literal_rule_matches_identical_names(multi: bool) -> None:
    result = run(
        _one_device_cluster("memory", multi=multi), [device_class("gpu", DRIVER)], [_claim_for("memory")]
    )
    assert devices_of(result) == [["gpu-0"]]
    if multi:
        assert result is not None
        assert {k: str(v) for k, v in result[0].devices[0].consumed_capacity.items()} == {"memory": "10Gi"}


@pytest.mark.parametrize("multi", [False, True], ids=["dedicated", "multi-allocatable"])
@pytest.mark.parametrize(
    ("published", "requested"),
    [("memory", f"{DRIVER}/memory"), (f"{DRIVER}/memory", "memory")],
    ids=["bare-on-device", "bare-in-request"],
)
def test_qualified_rule_behind_the_1_37_switch(published: str, requested: str, multi: bool) -> None:
    result = run(
        _one_device_cluster(published, multi=multi),
        [device_class("gpu", DRIVER)],
        [_claim_for(requested)],
        features=QUALIFIED,
    )
    assert devices_of(result) == [["gpu-0"]]


def test_qualified_rule_rejects_one_capacity_named_twice() -> None:
    both = claim(
        "c", [request("r", "gpu", capacity={"requests": {"memory": "1Gi", f"{DRIVER}/memory": "1Gi"}})]
    )
    slices = _one_device_cluster("memory")
    with pytest.raises(AllocationError, match="requested both as"):
        run(slices, [device_class("gpu", DRIVER)], [both], features=QUALIFIED)
    # 1.36 sees two different names, one of which the device lacks: no error, no fit.
    assert run(slices, [device_class("gpu", DRIVER)], [both]) is None


def test_no_version_turns_the_qualified_rule_on() -> None:
    """v0.37.2 matches capacity names literally too (checked with the 1.37 oracle), so neither
    version sets the development-code rule, and the retired switch says what replaced it."""
    for version in ("1.36", "1.37"):
        assert Features.from_gates(version=version).capacity_names_1_37 is False
    with pytest.raises(ValueError, match=r"Kubernetes137CapacityNames is retired.*--kubernetes-version"):
        Features.from_gates({"Kubernetes137CapacityNames": True})


@pytest.mark.parametrize("multi", [False, True], ids=["dedicated", "multi-allocatable"])
def test_literal_rule_in_137(multi: bool) -> None:
    """1.37 (v0.37.2): a bare name on the device and a qualified one in the request still differ."""
    features = Features.from_gates(version="1.37")
    result = run(
        _one_device_cluster("memory", multi=multi),
        [device_class("gpu", DRIVER)],
        [_claim_for(f"{DRIVER}/memory")],
        features=features,
    )
    assert result is None
