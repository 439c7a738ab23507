"""A seeded heterogeneous accelerator cluster whose nodes differ in topology, for `bench.placement`.

Scope: like `loadtests.fleet` (whose node builder it uses, with `loadtests.generate`'s object
builders), plain Kubernetes objects shaped like `kubectl get -o yaml` output: the Namespace, the
DeviceClasses, Nodes and their ResourceSlices. No claims and no pods; the placement simulator
creates those as its trace runs. The device attributes are the ones the default topology settings
read (`extender.index.topology.DEFAULT_DRIVERS`), so locality tiers differ by node type:

| type | devices | nvlink level | per pcie root | numa |
|---|---|---|---|---|
| `gpu8-islands` | 8 NVIDIA GPUs, 4 RDMA NICs | 2 islands of 4 (`nvlinkDomain`) | 2 GPUs, 1 NIC | island |
| `gpu8-nvswitch` | 8 NVIDIA GPUs, 4 RDMA NICs | 1 NVSwitch domain | 2 GPUs, 1 NIC | half |
| `gpu4-pcie` | 4 NVIDIA GPUs, 2 RDMA NICs | none (no attribute) | 2 GPUs, 1 NIC | 1 node |
| `a100-mig` | 4 A100 80GB, DynamicMIG (whole or 1g-7g MIG) | parent GPU (`parentUUID`) | 2 GPUs | half |
| `gaudi2` | 8 Gaudi2 | 1 RoCE domain (`roceDomain`) | 2 | half |
| `mi210` | 8 AMD MI210 | 2 xGMI hives of 4 (`xgmiHive`) | 2 | half |

The A100 nodes are partitionable (DynamicMIG, dra.md §6.2 and §3.6): per GPU one counter set
(`memory-slice-0..7` of 1 each, `gpcs` of 7) in a slice of its own, and a device slice holding every
whole GPU (`a100.nvidia.com`, consuming all of its counters) and every MIG placement of the A100
80GB (`loadtests.fleet.MIG_PROFILES`: `1g.10gb` at slices 0-6, `2g.20gb` at 0/2/4, `3g.40gb` at
0/4, `4g.40gb` and `7g.80gb` at 0), each consuming its memory slices and compute slices.
Overlapping placements and GPU-versus-MIG conflicts are left to upstream's counter check. Only the
whole GPUs publish `pcieRoot` and NUMA (as the NVIDIA driver's MIG devices do not); the slices
inherit them through `parentUUID`. Jobs ask for a profile through its device class
(`mig-1g.nvidia.com` ...). The family's capacity is counted in compute slices (`A100_FAMILY`, 7
per GPU).

Node counts per type follow the `NODE_TYPES` shares (`loadtests.fleet.share_counts`: largest
remainder, every type at least once when there are enough nodes), so the capacity depends on the
node count only; the seed shuffles the node order (which first-fit follows) and the generated uids.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loadtests.fleet import (
    AMD_CLASS,
    AMD_DRIVER,
    MIG_CLASS,
    NODE_TYPE_LABEL,
    NodeType,
    SliceSpec,
    add_nodes,
    share_counts,
)
from loadtests.fleet import MIG_PROFILES as _MIG_PROFILES
from loadtests.generate import (
    DRA_API,
    GPU_CLASS,
    NAMESPACE,
    NIC_CLASS,
    NIC_DRIVER,
    NUMA_NODE,
    PCIE_ROOT,
    Obj,
    _device_classes,
    _Ids,
    _namespace,
)
from loadtests.generate import GPU_DRIVER as NVIDIA_DRIVER

__all__ = [
    "A100_CLASS",
    "A100_FAMILY",
    "A100_PER_NODE",
    "AMD_CLASS",
    "AMD_DRIVER",
    "DRA_API",
    "GAUDI_CLASS",
    "GAUDI_DRIVER",
    "GPU_CLASS",
    "MIG_CLASS",
    "MIG_PROFILES",
    "NAMESPACE",
    "NIC_CLASS",
    "NIC_DRIVER",
    "NODE_TYPES",
    "NODE_TYPE_LABEL",
    "NUMA_NODE",
    "NVIDIA_DRIVER",
    "PCIE_ROOT",
    "TopologyCluster",
    "generate",
    "mig_class",
    "type_counts",
]

GAUDI_DRIVER = "gaudi.intel.com"
GAUDI_CLASS = "gaudi.intel.com"
A100_CLASS = "a100.nvidia.com"
#: The A100 family's capacity unit: compute slices (7 per GPU), what a MIG profile's "Ng" counts.
A100_FAMILY = "a100-compute-slices"
A100_PRODUCT = "NVIDIA A100-SXM4-80GB"
A100_PER_NODE = 4
#: A100 80GB MIG profiles: name -> (compute slices, memory slices, first memory slice of each placement).
MIG_PROFILES: dict[str, tuple[int, int, tuple[int, ...]]] = {
    p.name: (int(p.name.split("g.")[0]), p.slices, p.starts) for p in _MIG_PROFILES
}
#: Label naming the product of a node's accelerators.
PRODUCT_LABEL = "accelerator.sim.dra-extender.io/product"


def mig_class(profile: str) -> str:
    """The device class of one MIG profile, e.g. `mig-1g.nvidia.com`."""
    return f"mig-{profile.split('.')[0]}.nvidia.com"


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
#: PCIe root bus numbers of an 8-GPU board (as in the sample cluster).
_ROOT_BUSES = (0x15, 0x37, 0x97, 0xB7)


@dataclass(frozen=True, slots=True)
class TopologyCluster:
    """A generated cluster: its objects, node order and capacity per device class."""

    objects: list[Obj]
    node_names: list[str]  # cluster order (the order first-fit walks)
    node_types: dict[str, str]  # node -> node type name
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


def _nvidia_gpus(
    ids: _Ids, node: str, *, count: int, product: str, island: int | None, numa_size: int
) -> list[Obj]:
    """`island`: GPUs per NVLink domain (None: PCIe only, no nvlinkDomain attribute)."""
    devices = []
    for i in range(count):
        attributes: dict[str, Any] = {
            "type": "gpu",
            "productName": product,
            "index": i,
            "uuid": f"GPU-{ids.uid()}",
            PCIE_ROOT: _root(i // 2),
            NUMA_NODE: i // numa_size,
        }
        if island:
            attributes["nvlinkDomain"] = f"{node}-nvlink-{i // island}"
        devices.append(_device(f"gpu-{i}", attributes, "80Gi"))
    return devices


def _nics(ids: _Ids, *, count: int, numa_of_root: Callable[[int], int]) -> list[Obj]:
    devices = []
    for j in range(count):
        bus = 0x1C + 0x24 * j
        mac = ":".join(f"{ids.rng.getrandbits(8):02x}" for _ in range(6))
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


def _gpu8_islands(ids: _Ids, node: str) -> list[SliceSpec]:
    # Each island (4 GPUs on 2 PCIe roots) is one NUMA node.
    gpus = _nvidia_gpus(ids, node, count=8, product="NVIDIA H100 PCIe", island=4, numa_size=4)
    return [(NVIDIA_DRIVER, gpus, []), (NIC_DRIVER, _nics(ids, count=4, numa_of_root=lambda r: r // 2), [])]


def _gpu8_nvswitch(ids: _Ids, node: str) -> list[SliceSpec]:
    # One NVSwitch domain across both NUMA nodes: every GPU set is NVLink-local here.
    gpus = _nvidia_gpus(ids, node, count=8, product="NVIDIA H100 80GB HBM3", island=8, numa_size=4)
    return [(NVIDIA_DRIVER, gpus, []), (NIC_DRIVER, _nics(ids, count=4, numa_of_root=lambda r: r // 2), [])]


def _gpu4_pcie(ids: _Ids, node: str) -> list[SliceSpec]:
    # Single-socket PCIe box: GPUs on different roots still share the NUMA node.
    gpus = _nvidia_gpus(ids, node, count=4, product="NVIDIA L40S", island=None, numa_size=4)
    return [(NVIDIA_DRIVER, gpus, []), (NIC_DRIVER, _nics(ids, count=2, numa_of_root=lambda r: 0), [])]


def _a100_mig(ids: _Ids, node: str) -> list[SliceSpec]:
    counter_sets: list[Obj] = []
    devices: list[Obj] = []
    for g in range(A100_PER_NODE):
        parent = f"GPU-{ids.uid()}"
        counters = {f"memory-slice-{i}": {"value": "1"} for i in range(8)} | {"gpcs": {"value": "7"}}
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
                    "uuid": f"MIG-{ids.uid()}",
                }
                name = f"gpu-{g}-mig-{profile.split('.')[0]}-{start}"
                device = _device(name, attributes, f"{10 * memory}Gi")
                used = {f"memory-slice-{i}": {"value": "1"} for i in range(start, start + memory)}
                device["consumesCounters"] = [
                    {"counterSet": f"gpu-{g}", "counters": used | {"gpcs": {"value": str(compute)}}}
                ]
                devices.append(device)
    return [(NVIDIA_DRIVER, [], counter_sets), (NVIDIA_DRIVER, devices, [])]


def _gaudi2(ids: _Ids, node: str) -> list[SliceSpec]:
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
    return [(GAUDI_DRIVER, devices, [])]


def _mi210(ids: _Ids, node: str) -> list[SliceSpec]:
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
    return [(AMD_DRIVER, devices, [])]


def _node_type(
    name: str,
    share: float,
    instance_type: str,
    product: str,
    capacity: dict[str, int],
    slices: Callable[[_Ids, str], list[SliceSpec]],
) -> NodeType:
    labels = {"node.kubernetes.io/instance-type": instance_type, PRODUCT_LABEL: product}
    return NodeType(name, share, labels, slices, capacity=capacity)


NODE_TYPES: dict[str, NodeType] = {
    t.name: t
    for t in (
        _node_type(
            "gpu8-islands", 0.30, "gpu8-islands", "H100-PCIe", {GPU_CLASS: 8, NIC_CLASS: 4}, _gpu8_islands
        ),
        _node_type(
            "gpu8-nvswitch", 0.22, "a3-highgpu-8g", "H100-SXM", {GPU_CLASS: 8, NIC_CLASS: 4}, _gpu8_nvswitch
        ),
        _node_type("gpu4-pcie", 0.16, "g6e-12xlarge", "L40S", {GPU_CLASS: 4, NIC_CLASS: 2}, _gpu4_pcie),
        _node_type(
            "a100-mig", 0.08, "a2-ultragpu-4g", "A100-MIG", {A100_FAMILY: 7 * A100_PER_NODE}, _a100_mig
        ),
        _node_type("gaudi2", 0.12, "dl1.24xlarge", "Gaudi2", {GAUDI_CLASS: 8}, _gaudi2),
        _node_type("mi210", 0.12, "mi210-8x", "MI210", {AMD_CLASS: 8}, _mi210),
    )
}


def type_counts(nodes: int) -> dict[str, int]:
    """Nodes per type: largest remainder over the shares, every type at least once if possible."""
    return share_counts(NODE_TYPES.values(), nodes, every_type=True)


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
    rng.shuffle(order)  # first, so the node order does not depend on how many uids come before
    ids = _Ids(rng)
    objects: list[Obj] = [_namespace(ids), *_device_classes(ids, _CLASS_SELECTORS)]
    named = [(f"n{number:03d}-{name}", NODE_TYPES[name]) for number, name in enumerate(order, start=1)]
    add_nodes(ids, objects, named)
    capacity: dict[str, int] = dict.fromkeys((*_CLASS_SELECTORS, A100_FAMILY), 0)
    for _, node_type in named:
        for device_class, count in node_type.capacity.items():
            capacity[device_class] += count
    return TopologyCluster(
        objects=objects,
        node_names=[name for name, _ in named],
        node_types={name: node_type.name for name, node_type in named},
        capacity=capacity,
    )
