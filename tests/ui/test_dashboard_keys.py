"""Devices in a node's drawing are told apart by (driver, pool, device), not by name alone.

Scope (issue 22, item 10, the server half): two drivers may both publish a `gpu-0` on one node.
The MIG partitions of NVIDIA's `gpu-0` belong inside NVIDIA's `gpu-0`; keyed by bare name they
were drawn inside whichever `gpu-0` came last. (The page half, node names such as `constructor`,
is in test_dashboard_browser.py.)
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from extender.cluster.sample import sample_objects
from extender.cluster.state import ClusterState
from extender.settings import Settings
from extender.ui import fleet
from extender.wiring import build_services

NODE = "a100-mig-node-01"


def _other_drivers_gpu0(driver: str) -> dict[str, Any]:
    """A second driver's ResourceSlice on the MIG node, with a device named `gpu-0` too."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{NODE}-{driver}-x", "uid": "other-driver-slice"},
        "spec": {
            "driver": driver,
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0", "attributes": {"index": {"int": 0}}}],
        },
    }


@pytest.mark.parametrize("other", ["accel.example.com", "xpu.example.com"])  # before and after NVIDIA
def test_partitions_stay_in_their_own_drivers_gpu(other: str) -> None:
    state = ClusterState.from_objects([*copy.deepcopy(sample_objects()), _other_drivers_gpu0(other)])
    placement, _ = build_services(Settings(), state)
    index = placement.index()
    _, free = placement.allocated_state()
    detail = fleet.node_detail(index, free, NODE, held_by={}, topology=placement.topology)
    assert detail is not None
    devices = [d for numa in detail["numa"] for root in numa["pcie"] for d in root["devices"]]
    gpu0 = {d["driver"]: d for d in devices if d["name"] == "gpu-0"}
    assert set(gpu0) == {"gpu.nvidia.com", other}  # both drawn, neither swallowed
    nvidia = {p["name"] for p in gpu0["gpu.nvidia.com"].get("partitions", [])}
    assert "gpu-0-mig-1g10gb-0" in nvidia and all(name.startswith("gpu-0-") for name in nvidia)
    assert "partitions" not in gpu0[other]
    assert not any(d["name"].startswith("gpu-0-mig") for d in devices)  # none drawn loose either
