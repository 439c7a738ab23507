"""The JSON shrinker keeps only what a failure needs, and never deletes required fields."""

from __future__ import annotations

from typing import Any

from tests.oracle.shrinking import shrink


def _case() -> dict[str, Any]:
    devices = [
        {"name": f"gpu-{i}", "attributes": {"model": {"string": "x"}, "numa": {"int": i}}} for i in range(4)
    ]
    return {
        "name": "case",
        "features": {"PartitionableDevices": True},
        "resourceSlices": [
            {"metadata": {"name": "s"}, "spec": {"driver": "d", "pool": {"name": "p"}, "devices": devices}}
        ],
        "claims": [{"metadata": {"name": "c"}}],
    }


def _has_numa_2(case: dict[str, Any]) -> bool:
    return any(
        d.get("attributes", {}).get("numa") == {"int": 2}
        for s in case.get("resourceSlices", [])
        for d in s["spec"].get("devices", [])
    )


def test_shrinks_to_what_the_failure_needs() -> None:
    """Only the device the predicate needs stays, without its other attributes; claims go."""
    small = shrink(_case(), _has_numa_2)
    assert small["resourceSlices"][0]["spec"]["devices"] == [
        {"name": "gpu-2", "attributes": {"numa": {"int": 2}}}
    ]
    assert "claims" not in small


def test_keeps_required_fields() -> None:
    """Names, the slice's driver and pool, and the case's features are never deleted."""
    small = shrink(_case(), _has_numa_2)
    assert small["name"] == "case" and small["features"] == {"PartitionableDevices": True}
    assert small["resourceSlices"][0]["metadata"] == {"name": "s"}
    assert small["resourceSlices"][0]["spec"]["pool"] == {"name": "p"}
