"""A seeded heterogeneous accelerator cluster whose nodes differ in topology, for `bench.placement`.

Scope: plain Kubernetes objects (dicts shaped like `kubectl get -o yaml` output, as in
`extender/cluster/sample_cluster.yaml` and `loadtests/generate.py`): one Namespace, the
DeviceClasses, Nodes and one ResourceSlice per node and driver. No claims and no pods; the
simulator creates those as its trace runs. The device attributes are the ones the default
topology settings read (`extender.topology.DEFAULT_DRIVERS`), so locality tiers differ by node
type:

| type | devices | nvlink level | per pcie root | numa |
|---|---|---|---|---|
| `gpu8-islands` | 8 NVIDIA GPUs, 4 RDMA NICs | 2 islands of 4 (`nvlinkDomain`) | 2 GPUs, 1 NIC | island |
| `gpu8-nvswitch` | 8 NVIDIA GPUs, 4 RDMA NICs | 1 NVSwitch domain | 2 GPUs, 1 NIC | half |
| `gpu4-pcie` | 4 NVIDIA GPUs, 2 RDMA NICs | none (no attribute) | 2 GPUs, 1 NIC | 1 node |
| `a100-mig` | 4 A100 80GB, DynamicMIG (whole or 1g-7g MIG) | parent GPU (`parentUUID`) | 2 GPUs | half |
| `gaudi2` | 8 Gaudi2 | 1 RoCE domain (`roceDomain`) | 2 | half |
| `mi210` | 8 AMD MI210 | 2 xGMI hives of 4 (`xgmiHive`) | 2 | half |

The A100 nodes are partitionable (DynamicMIG, dra.md §6.2 and §3.6): per GPU one counter set
(`memorySlice0..7` of 1 each, `gpcs` of 7) in a slice of its own, and a device slice holding every
whole GPU (`a100.nvidia.com`, consuming all of its counters) and every MIG placement of the A100
80GB (`1g.10gb` at slices 0-6, `2g.20gb` at 0/2/4, `3g.40gb` at 0/4, `4g.40gb` and `7g.80gb` at 0),
each consuming its memory slices and compute slices. Overlapping placements and GPU-versus-MIG
conflicts are left to upstream's counter check. Only the whole GPUs publish `pcieRoot` and NUMA
(as the NVIDIA driver's MIG devices do not); the slices inherit them through `parentUUID`. Jobs
ask for a profile through its device class (`mig-1g.nvidia.com` ...). The family's capacity is
counted in compute slices (`A100_FAMILY`, 7 per GPU).

Node counts per type follow `NODE_TYPES` weights (largest remainder, every type at least once
when there are enough nodes), so the capacity depends on the node count only; the seed shuffles
the node order (which first-fit follows) and the generated uids.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

Obj = dict[str, Any]

NAMESPACE = "sim"
DRA_API = "resource.k8s.io/v1"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
NUMA_NODE = "resource.kubernetes.io/numaNode"

NVIDIA_DRIVER = "gpu.nvidia.com"
AMD_DRIVER = "gpu.amd.com"
GAUDI_DRIVER = "gaudi.intel.com"
NIC_DRIVER = "dra.net"

GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"
A100_CLASS = "a100.nvidia.com"
#: The A100 family's capacity unit: compute slices (7 per GPU), what a MIG profile's "Ng" counts.
A100_FAMILY = "a100-compute-slices"
A100_PRODUCT = "NVIDIA A100-SXM4-80GB"
#: A100 80GB MIG profiles: name -> (compute slices, memory slices, first memory slice of each placement).
MIG_PROFILES: dict[str, tuple[int, int, tuple[int, ...]]] = {
    "1g.10gb": (1, 1, (0, 1, 2, 3, 4, 5, 6)),
    "2g.20gb": (2, 2, (0, 2, 4)),
    "3g.40gb": (3, 4, (0, 4)),
    "4g.40gb": (4, 4, (0,)),
    "7g.80gb": (7, 8, (0,)),
}


def mig_class(profile: str) -> str:
    """The device class of one MIG profile, e.g. `mig-1g.nvidia.com`."""
    return f"mig-{profile.split('.')[0]}.nvidia.com"


NIC_CLASS = "rdma.dra.net"
GAUDI_CLASS = "gaudi.intel.com"
AMD_CLASS = "gpu.amd.com"

#: Label naming a node's type (a key of `NODE_TYPES`).
NODE_TYPE_LABEL = "sim.dra-extender.io/node-type"

_CLASS_SELECTORS: dict[str, tuple[str, ...]] = {
    GPU_CLASS: (
        f'device.driver == "{NVIDIA_DRIVER}"',
        f'device.attributes["{NVIDIA_DRIVER}"].type == "gpu"',
        f'device.attributes["{NVIDIA_DRIVER}"].productName != "{A100_PRODUCT}"',
    ),
    MIG_CLASS: (f'device.driver == "{NVIDIA_DRIVER}"', f'device.attributes["{NVIDIA_DRIVER}"].type == "mig"'),
    A100_CLASS: (
        f'device.driver == "{NVIDIA_DRIVER}"',
        f'device.attributes["{NVIDIA_DRIVER}"].type == "gpu"',
        f'device.attributes["{NVIDIA_DRIVER}"].productName == "{A100_PRODUCT}"',
    ),
    **{
        mig_class(profile): (
            f'device.driver == "{NVIDIA_DRIVER}"',
            f'device.attributes["{NVIDIA_DRIVER}"].type == "mig"',
            f'device.attributes["{NVIDIA_DRIVER}"].profile == "{profile}"',
        )
        for profile in MIG_PROFILES
    },
    NIC_CLASS: (
        f'device.driver == "{NIC_DRIVER}"',
        f'has(device.attributes["{NIC_DRIVER}"].rdma) && device.attributes["{NIC_DRIVER}"].rdma',
    ),
    GAUDI_CLASS: (f'device.driver == "{GAUDI_DRIVER}"', f'device.attributes["{GAUDI_DRIVER}"].healthy'),
    AMD_CLASS: (f'device.driver == "{AMD_DRIVER}"', f'device.attributes["{AMD_DRIVER}"].type == "amdgpu"'),
}
_BASE_TIME = datetime(2025, 11, 21, 8, 0, 0, tzinfo=UTC)
#: PCIe root bus numbers of an 8-GPU board (as in the sample cluster).
_ROOT_BUSES = (0x15, 0x37, 0x97, 0xB7)
A100_PER_NODE = 4

#: (driver, devices, shared counter sets) of one slice (a slice has devices or counter sets).
SliceSpec = tuple[str, list[Obj]] | tuple[str, list[Obj], list[Obj]]


@dataclass(frozen=True, slots=True)
class NodeType:
    """One kind of node: its share of the cluster, its labels and its device slices."""

    name: str
    weight: float
    instance_type: str
    product: str
    capacity: dict[str, int]  # device class -> devices per node
    slices: Callable[[str, random.Random], list[SliceSpec]]


@dataclass(frozen=True, slots=True)
class TopologyCluster:
    """A generated cluster: its objects, node order and capacity per device class."""

    objects: list[Obj]
    node_names: list[str]  # cluster order (the order first-fit walks)
    node_types: dict[str, str]  # node -> NodeType name
    capacity: dict[str, int]  # device class -> devices in the cluster


def _typed(value: Any) -> Obj:
    # bool before int: bool is a subclass of int.
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": str(value)}


def _device(name: str, attributes: dict[str, Any], memory: str) -> Obj:
    return {
        "attributes": {key: _typed(value) for key, value in attributes.items()},
        "capacity": {"memory": {"value": memory}},
        "name": name,
    }


def _root(index: int) -> str:
    return f"pci0000:{_ROOT_BUSES[index % len(_ROOT_BUSES)]:02x}"


def _uuid(rng: random.Random, prefix: str) -> str:
    return f"{prefix}-{uuid.UUID(int=rng.getrandbits(128), version=4)}"


def _nvidia_gpus(
    node: str, rng: random.Random, *, count: int, product: str, island: int | None, numa_size: int
) -> list[Obj]:
    """`island`: GPUs per NVLink domain (None: PCIe only, no nvlinkDomain attribute)."""
    devices = []
    for i in range(count):
        attributes: dict[str, Any] = {
            "type": "gpu",
            "productName": product,
            "index": i,
            "uuid": _uuid(rng, "GPU"),
            PCIE_ROOT: _root(i // 2),
            NUMA_NODE: i // numa_size,
        }
        if island:
            attributes["nvlinkDomain"] = f"{node}-nvlink-{i // island}"
        devices.append(_device(f"gpu-{i}", attributes, "80Gi"))
    return devices


def _nics(rng: random.Random, *, count: int, numa_of_root: Callable[[int], int]) -> list[Obj]:
    devices = []
    for j in range(count):
        bus = 0x1C + 0x24 * j
        mac = ":".join(f"{rng.getrandbits(8):02x}" for _ in range(6))
        attributes = {
            "dra.net/ifName": f"enp{bus}s0np0",
            "dra.net/mac": mac,
            "dra.net/rdma": True,
            "dra.net/numaNode": numa_of_root(j),
            PCIE_ROOT: _root(j),
            NUMA_NODE: numa_of_root(j),
        }
        devices.append(_device(f"enp{bus}s0np0", attributes, "0"))
    return devices


def _gpu8_islands(node: str, rng: random.Random) -> list[SliceSpec]:
    # Each island (4 GPUs on 2 PCIe roots) is one NUMA node.
    gpus = _nvidia_gpus(node, rng, count=8, product="NVIDIA H100 PCIe", island=4, numa_size=4)
    return [(NVIDIA_DRIVER, gpus), (NIC_DRIVER, _nics(rng, count=4, numa_of_root=lambda r: r // 2))]


def _gpu8_nvswitch(node: str, rng: random.Random) -> list[SliceSpec]:
    # One NVSwitch domain across both NUMA nodes: every GPU set is NVLink-local here.
    gpus = _nvidia_gpus(node, rng, count=8, product="NVIDIA H100 80GB HBM3", island=8, numa_size=4)
    return [(NVIDIA_DRIVER, gpus), (NIC_DRIVER, _nics(rng, count=4, numa_of_root=lambda r: r // 2))]


def _gpu4_pcie(node: str, rng: random.Random) -> list[SliceSpec]:
    # Single-socket PCIe box: GPUs on different roots still share the NUMA node.
    gpus = _nvidia_gpus(node, rng, count=4, product="NVIDIA L40S", island=None, numa_size=4)
    return [(NVIDIA_DRIVER, gpus), (NIC_DRIVER, _nics(rng, count=2, numa_of_root=lambda r: 0))]


def _a100_mig(node: str, rng: random.Random) -> list[SliceSpec]:
    counter_sets: list[Obj] = []
    devices: list[Obj] = []
    for g in range(A100_PER_NODE):
        parent = _uuid(rng, "GPU")
        counters = {f"memorySlice{i}": {"value": "1"} for i in range(8)} | {"gpcs": {"value": "7"}}
        counter_sets.append({"name": f"gpu-{g}", "counters": counters})
        whole = _device(
            f"gpu-{g}",
            {"type": "gpu", "productName": A100_PRODUCT, "index": g, "uuid": parent, PCIE_ROOT: _root(g // 2)}
            | {NUMA_NODE: g // 2},
            "80Gi",
        )
        whole["consumesCounters"] = [{"counterSet": f"gpu-{g}", "counters": counters}]
        devices.append(whole)
        for profile, (compute, memory, starts) in MIG_PROFILES.items():
            for start in starts:
                attributes = {
                    "type": "mig",
                    "productName": A100_PRODUCT,
                    "profile": profile,
                    "parentIndex": g,
                    "parentUUID": parent,
                    "placementStart": start,
                    "uuid": _uuid(rng, "MIG"),
                }
                name = f"gpu-{g}-mig-{profile.split('.')[0]}-{start}"
                device = _device(name, attributes, f"{10 * memory}Gi")
                used = {f"memorySlice{i}": {"value": "1"} for i in range(start, start + memory)}
                device["consumesCounters"] = [
                    {"counterSet": f"gpu-{g}", "counters": used | {"gpcs": {"value": str(compute)}}}
                ]
                devices.append(device)
    return [(NVIDIA_DRIVER, [], counter_sets), (NVIDIA_DRIVER, devices)]


def _gaudi2(node: str, rng: random.Random) -> list[SliceSpec]:
    devices = []
    for i in range(8):
        attributes = {
            "healthy": True,
            "model": "Gaudi2",
            "moduleId": i,
            "roceDomain": f"roce-{node}",
            PCIE_ROOT: _root(i // 2),
            NUMA_NODE: i // 4,
        }
        devices.append(_device(f"accel{i}", attributes, "96Gi"))
    return [(GAUDI_DRIVER, devices)]


def _mi210(node: str, rng: random.Random) -> list[SliceSpec]:
    devices = []
    for i in range(8):
        attributes = {
            "type": "amdgpu",
            "productName": "AMD Instinct MI210",
            "xgmiHive": f"{node}-hive-{i // 4}",
            PCIE_ROOT: _root(i // 2),
            NUMA_NODE: i // 4,
        }
        devices.append(_device(f"gpu-{i}", attributes, "64Gi"))
    return [(AMD_DRIVER, devices)]


NODE_TYPES: dict[str, NodeType] = {
    t.name: t
    for t in (
        NodeType(
            "gpu8-islands", 0.30, "gpu8-islands", "H100-PCIe", {GPU_CLASS: 8, NIC_CLASS: 4}, _gpu8_islands
        ),
        NodeType(
            "gpu8-nvswitch", 0.22, "a3-highgpu-8g", "H100-SXM", {GPU_CLASS: 8, NIC_CLASS: 4}, _gpu8_nvswitch
        ),
        NodeType("gpu4-pcie", 0.16, "g6e-12xlarge", "L40S", {GPU_CLASS: 4, NIC_CLASS: 2}, _gpu4_pcie),
        NodeType("a100-mig", 0.08, "a2-ultragpu-4g", "A100-MIG", {A100_FAMILY: 7 * A100_PER_NODE}, _a100_mig),
        NodeType("gaudi2", 0.12, "dl1.24xlarge", "Gaudi2", {GAUDI_CLASS: 8}, _gaudi2),
        NodeType("mi210", 0.12, "mi210-8x", "MI210", {AMD_CLASS: 8}, _mi210),
    )
}


def type_counts(nodes: int) -> dict[str, int]:
    """Nodes per type: largest remainder over the weights, every type at least once if possible."""
    types = list(NODE_TYPES.values())
    total = sum(t.weight for t in types)
    exact = [nodes * t.weight / total for t in types]
    counts = [int(x) for x in exact]
    by_remainder = sorted(range(len(types)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in by_remainder[: nodes - sum(counts)]:
        counts[i] += 1
    if nodes >= len(types):
        # A type rounded down to zero takes a node from the largest type, so every tier exists.
        for i in range(len(types)):
            if counts[i] == 0:
                counts[max(range(len(types)), key=lambda k: counts[k])] -= 1
                counts[i] = 1
    return {t.name: c for t, c in zip(types, counts, strict=True)}


def _time(offset_seconds: float) -> str:
    return (_BASE_TIME + timedelta(seconds=offset_seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _node(name: str, node_type: NodeType, rng: random.Random, number: int) -> Obj:
    allocatable = {"cpu": "95500m", "ephemeral-storage": "3000Gi", "memory": "1000Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "creationTimestamp": _time(300 + number),
            "labels": {
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": node_type.instance_type,
                "accelerator.sim.dra-extender.io/product": node_type.product,
                NODE_TYPE_LABEL: node_type.name,
            },
            "name": name,
            "resourceVersion": str(500_000 + number),
            "uid": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        },
        "spec": {"providerID": f"sim://{name}"},
        "status": {
            "allocatable": allocatable,
            "capacity": allocatable,
            "conditions": [
                {
                    "lastHeartbeatTime": _time(86_000),
                    "lastTransitionTime": _time(300 + number),
                    "message": "kubelet is posting ready status",
                    "reason": "KubeletReady",
                    "status": "True",
                    "type": "Ready",
                }
            ],
        },
    }


def _slice(node: Obj, spec: SliceSpec, rng: random.Random, *, slices: int = 1, part: int = 0) -> Obj:
    """One ResourceSlice of the node's pool for the driver (`slices` of them make the pool)."""
    name = node["metadata"]["name"]
    driver, devices = spec[0], spec[1]
    suffix = "".join(rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
    body: Obj = {"driver": driver, "nodeName": name}
    if len(spec) == 3:
        body["sharedCounters"] = spec[2]  # type: ignore[misc]
    else:
        body["devices"] = devices
    body["pool"] = {"generation": 1, "name": name, "resourceSliceCount": slices}
    return {
        "apiVersion": DRA_API,
        "kind": "ResourceSlice",
        "metadata": {
            "creationTimestamp": node["metadata"]["creationTimestamp"],
            "generateName": f"{name}-{driver}-",
            "name": f"{name}-{driver}-{part}{suffix}",
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "controller": True,
                    "kind": "Node",
                    "name": name,
                    "uid": node["metadata"]["uid"],
                }
            ],
            "resourceVersion": node["metadata"]["resourceVersion"],
            "uid": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        },
        "spec": body,
    }


def _static_objects() -> list[Obj]:
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"labels": {"kubernetes.io/metadata.name": NAMESPACE}, "name": NAMESPACE},
        "status": {"phase": "Active"},
    }
    classes = [
        {
            "apiVersion": DRA_API,
            "kind": "DeviceClass",
            "metadata": {"creationTimestamp": _time(60), "name": name},
            "spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]},
        }
        for name, expressions in _CLASS_SELECTORS.items()
    ]
    return [namespace, *classes]


def generate(*, nodes: int, seed: int) -> TopologyCluster:
    """Generate the cluster (see module docstring); equal arguments give equal output.

    Args:
        nodes: number of nodes (>= 1).
        seed: seeds the node order and every uid.

    Returns:
        The cluster's objects (each with `apiVersion` and `kind`), the node names in cluster
        order, each node's type and the number of devices per device class.
    """
    if nodes < 1:
        raise ValueError(f"nodes must be >= 1, got {nodes}")
    rng = random.Random(f"topology-cluster-{seed}")
    order = [name for name, count in type_counts(nodes).items() for _ in range(count)]
    rng.shuffle(order)
    objects = _static_objects()
    node_names: list[str] = []
    node_types: dict[str, str] = {}
    capacity: dict[str, int] = dict.fromkeys((*_CLASS_SELECTORS, A100_FAMILY), 0)
    for number, type_name in enumerate(order, start=1):
        node_type = NODE_TYPES[type_name]
        name = f"n{number:03d}-{type_name}"
        node = _node(name, node_type, rng, number)
        objects.append(node)
        specs = node_type.slices(name, rng)
        for spec in specs:
            same = [other for other in specs if other[0] == spec[0]]
            objects.append(_slice(node, spec, rng, slices=len(same), part=same.index(spec)))
        node_names.append(name)
        node_types[name] = type_name
        for device_class, count in node_type.capacity.items():
            capacity[device_class] += count
    return TopologyCluster(objects=objects, node_names=node_names, node_types=node_types, capacity=capacity)
