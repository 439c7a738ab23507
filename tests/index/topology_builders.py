"""Small builders for hand-made topology clusters: nodes, GPU/NIC slices, claims, pods."""

from __future__ import annotations

from extender.allocator.features import Features
from extender.cluster.state import ClusterState
from extender.core.assumed import AssumeCache
from extender.core.placement import Placement
from extender.index.topology import TopologySettings
from extender.objects import Obj

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


# ----------------------------------------------------------------- DynamicMIG A100 nodes
MIG_CLASS = "mig.example.com"
WHOLE_GPU_CLASS = "whole-gpu.example.com"
#: A100 80GB MIG placements: (profile, first memory slice, memory slices, compute slices of 7).
A100_PROFILES = {"1g": "1g.10gb", "2g": "2g.20gb", "3g": "3g.40gb", "4g": "4g.40gb", "7g": "7g.80gb"}
A100_PLACEMENTS: tuple[tuple[str, int, int, int], ...] = (
    *(("1g", i, 1, 1) for i in range(7)),
    *(("2g", i, 2, 2) for i in (0, 2, 4)),
    ("3g", 0, 4, 3),
    ("3g", 4, 4, 3),
    ("4g", 0, 4, 4),
    ("7g", 0, 8, 7),
)


def mig_classes() -> list[Obj]:
    """A class for MIG placements and one for whole NVIDIA GPUs (by the driver's `type`)."""
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": 'device.driver == "gpu.nvidia.com" && '
                            f'device.attributes["gpu.nvidia.com"].type == "{kind}"'
                        }
                    }
                ]
            },
        }
        for name, kind in ((MIG_CLASS, "mig"), (WHOLE_GPU_CLASS, "gpu"))
    ]


def mig_name(gpu: int, profile: str, start: int) -> str:
    return f"gpu-{gpu}-mig-{profile}-{start}"


def a100_mig_slices(node_name: str, gpus: int, *, pcie_per_gpu: bool = True) -> list[Obj]:
    """One node's DynamicMIG pool: a counter set per GPU (8 memory slices, 7 compute slices), the
    whole GPUs and every MIG placement consuming them. Only whole GPUs publish pcieRoot and NUMA
    (as the NVIDIA driver's MIG devices do not); partitions inherit them through `parentUUID`."""
    pool = f"{node_name}-gpu.nvidia.com"
    counter_sets = []
    devices: list[Obj] = []
    for g in range(gpus):
        uuid = f"GPU-{node_name}-{g}"
        counters = {f"memory-slice-{i}": {"value": "1"} for i in range(8)} | {"gpcs": {"value": "7"}}
        counter_sets.append({"name": f"gpu-{g}-counters", "counters": counters})
        whole: Obj = {"type": {"string": "gpu"}, "uuid": {"string": uuid}, "productName": {"string": "A100"}}
        if pcie_per_gpu:
            whole["resource.kubernetes.io/pcieRoot"] = {"string": f"pci-{g // 2}"}
            whole["resource.kubernetes.io/numaNode"] = {"int": g // 2}
        devices.append(
            {
                "name": f"gpu-{g}",
                "attributes": whole,
                "consumesCounters": [{"counterSet": f"gpu-{g}-counters", "counters": counters}],
            }
        )
        for profile, start, memory, compute in A100_PLACEMENTS:
            used = {f"memory-slice-{i}": {"value": "1"} for i in range(start, start + memory)}
            used["gpcs"] = {"value": str(compute)}
            devices.append(
                {
                    "name": mig_name(g, profile, start),
                    "attributes": {
                        "type": {"string": "mig"},
                        "uuid": {"string": f"MIG-{node_name}-{g}-{profile}-{start}"},
                        "parentUUID": {"string": uuid},
                        "profile": {"string": A100_PROFILES[profile]},
                        "productName": {"string": "A100"},
                    },
                    "consumesCounters": [{"counterSet": f"gpu-{g}-counters", "counters": used}],
                }
            )
    meta = {"generation": 1, "resourceSliceCount": 2}
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{pool}-counters"},
            "spec": {
                "driver": "gpu.nvidia.com",
                "nodeName": node_name,
                "pool": {"name": pool, **meta},
                "sharedCounters": counter_sets,
            },
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{pool}-devices"},
            "spec": {
                "driver": "gpu.nvidia.com",
                "nodeName": node_name,
                "pool": {"name": pool, **meta},
                "devices": devices,
            },
        },
    ]


def mig_claim(name: str, profile: str, count: int = 1) -> Obj:
    """A claim for `count` MIG devices of one profile (e.g. "1g")."""
    expression = f'device.attributes["gpu.nvidia.com"].profile == "{A100_PROFILES[profile]}"'
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "mig",
                        "exactly": {
                            "deviceClassName": MIG_CLASS,
                            "count": count,
                            "selectors": [{"cel": {"expression": expression}}],
                        },
                    }
                ]
            }
        },
    }


def held(name: str, node_name: str, devices: list[str]) -> Obj:
    """A claim already holding these NVIDIA devices of the node's pool (allocated, reserved)."""
    return allocated_claim(name, node_name, "gpu.nvidia.com", devices)
