"""Small builders for hand-made topology clusters: nodes, GPU/NIC slices, claims, pods."""

from __future__ import annotations

from typing import Any

from extender.allocator.features import Features
from extender.assumed import AssumeCache
from extender.cluster.state import ClusterState
from extender.placement import Placement
from extender.topology import TopologySettings

Obj = dict[str, Any]

GPU_CLASS = "gpu.example.com"
NIC_CLASS = "nic.example.com"


def device_classes() -> list[Obj]:
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": GPU_CLASS},
            "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]},
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": NIC_CLASS},
            "spec": {"selectors": [{"cel": {"expression": 'device.driver == "dra.net"'}}]},
        },
    ]


def node(name: str, annotations: dict[str, str] | None = None) -> Obj:
    meta: Obj = {"name": name, "uid": f"uid-{name}", "labels": {"kubernetes.io/hostname": name}}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta}


def gpu(name: str, *, nvlink: str | None = None, pcie: str | None = None, numa: int | None = None) -> Obj:
    attributes: Obj = {"productName": {"string": "NVIDIA H100"}}
    if nvlink is not None:
        attributes["nvlinkDomain"] = {"string": nvlink}
    if pcie is not None:
        attributes["resource.kubernetes.io/pcieRoot"] = {"string": pcie}
    if numa is not None:
        attributes["resource.kubernetes.io/numaNode"] = {"int": numa}
    return {"name": name, "attributes": attributes}


def nic(name: str, *, pcie: str | None = None, numa: int | None = None) -> Obj:
    attributes: Obj = {"dra.net/rdma": {"bool": True}}
    if pcie is not None:
        attributes["resource.kubernetes.io/pcieRoot"] = {"string": pcie}
    if numa is not None:
        attributes["resource.kubernetes.io/numaNode"] = {"int": numa}
    return {"name": name, "attributes": attributes}


def slice_(node_name: str, driver: str, devices: list[Obj]) -> Obj:
    pool = f"{node_name}-{driver}"
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": pool},
        "spec": {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def claim(name: str, requests: list[tuple[str, str, int]], constraints: list[Obj] | None = None) -> Obj:
    """A claim with (request name, class, count) requests."""
    devices: Obj = {
        "requests": [
            {"name": r, "exactly": {"deviceClassName": c, "allocationMode": "ExactCount", "count": n}}
            for r, c, n in requests
        ]
    }
    if constraints:
        devices["constraints"] = constraints
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"devices": devices},
    }


def allocated_claim(name: str, node_name: str, driver: str, devices: list[str]) -> Obj:
    """A claim already holding devices on a node (what makes them not free)."""
    out = claim(name, [("r", GPU_CLASS if driver == "gpu.nvidia.com" else NIC_CLASS, len(devices))])
    out["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "r", "driver": driver, "pool": f"{node_name}-{driver}", "device": d}
                    for d in devices
                ]
            }
        },
        "reservedFor": [{"resource": "pods", "name": f"holder-{name}", "uid": f"holder-{name}"}],
    }
    return out


def pod(name: str, claim_names: list[str]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-pod-{name}"},
        "spec": {
            "containers": [{"name": "main", "image": "busybox"}],
            "resourceClaims": [{"name": c, "resourceClaimName": c} for c in claim_names],
        },
    }


def placement(objects: list[Obj], topology: TopologySettings | None = None) -> Placement:
    state = ClusterState.from_objects([*device_classes(), *objects])
    return Placement(state, features=Features(), assumed=AssumeCache(), topology=topology)
