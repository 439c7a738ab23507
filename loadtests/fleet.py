"""A synthetic mixed accelerator fleet and claim shapes that cover every placement tier.

Scope: like `loadtests.generate` (whose object builders it uses), plain Kubernetes objects shaped
like `kubectl get -o yaml` output that load through `extender.cluster.loading` and
`ClusterState.from_objects` unchanged, and pending pods as kube-scheduler sends them. It knows
nothing about the extender's internals and imports none of it. Vendor attribute names follow
dra.md §6 and the embedded sample cluster (`extender/cluster/sample_cluster.yaml`).

The fleet (`FLEET`; node counts per type by largest remainder over the shares, so a node count
always gives the same composition; the seed shuffles the node order and every uid):

| type | share | devices |
|---|---:|---|
| `h100` | 35 % | 8 H100 (one `nvlinkDomain`), 4 RDMA NICs; 2 GPUs + 1 NIC per PCIe root, |
| | | GPUs 0-3 and NICs 0-1 on NUMA node 0, the rest on NUMA node 1 |
| `a100` | 25 % | 8 A100 80GB, partitionable: per GPU the full GPU and 14 MIG placements (7x 1g.10gb, |
| | | 3x 2g.20gb, 2x 3g.40gb, 1x 4g.40gb, 1x 7g.80gb) consuming one shared counter set per GPU |
| `l40s` | 15 % | 4 L40S (PCIe only, no `nvlinkDomain`), one NUMA node |
| `mi300x` | 10 % | 8 MI300X (`gpu.amd.com`, one `xgmiHive`) |
| `tpu` | 10 % | 4 TPU v5e chips (`tpu.google.com`, one `iciDomain`) |
| `cpu` | 5 % | no devices |

A100 pools: as the NVIDIA driver does with partitionable devices (dra.md §6.2, §3.6), every GPU
has a counter set `gpu-<i>-counter-set` (`memory` 80Gi, `memory-slice-0..7` = 1 each,
`multiprocessors` 108); the full GPU consumes all of it and each MIG placement the memory, the
memory slices it covers and its multiprocessors, so overlapping placements and GPU-vs-MIG
conflicts are excluded by the counter check. A slice holds devices or counters, never both, and at
most 64 devices when they consume counters (dra.md §1.3): the pool has one counters slice and two
device slices of 4 GPUs (60 devices) each.

Held devices (`held_fraction`, default 0.3): that share of the accelerators of each device
kind (H100, L40S, MI300X and TPU devices; A100 *physical GPUs*) is held by allocated claims of
running pods, grouped per node into claims of 1, 2 or 4 devices. A held A100 GPU is held either
whole (the full-GPU device, 40 %) or as 1-3 non-overlapping MIG partitions, each in its own
claim; either way the held devices consume their counters, within each set's capacity. NICs
are not held.

Claim shapes (`MIXED_SHAPES`), one per tier the extender distinguishes:
`mig-1g` (one 1g.10gb MIG), `mig-pair-same-gpu` (a 1g.10gb and a 2g.20gb on one GPU:
`matchAttribute gpu.nvidia.com/parentUUID`), `gpu-mem-40gi` (one GPU with memory >= 40Gi: H100,
A100 or L40S), `gpu-nic-pcie` (GPU + RDMA NIC on one PCIe root), `gpu4-nvlink-nic-numa` (4 GPUs on
one NVLink domain and a NIC on their NUMA node), `first-available` (H100, else MI300X, else an
A100 3g.40gb partition) and `tpu-all` (`allocationMode: All` of the TPU class).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from loadtests.generate import (
    GPU_CLASS,
    GPU_DRIVER,
    NIC_CLASS,
    NIC_DRIVER,
    NUMA_NODE,
    PCIE_ROOT,
    POD_CLAIM,
    Obj,
    _claim,
    _device_classes,
    _gpus,
    _Ids,
    _namespace,
    _nics,
    _pcie_root,
    _pod,
    _slice,
    _templates,
    node_object,
    pending_pods,
)

AMD_DRIVER = "gpu.amd.com"
TPU_DRIVER = "tpu.google.com"
MIG_CLASS = "mig.nvidia.com"
AMD_CLASS = "gpu.amd.com"
TPU_CLASS = "tpu.google.com"
#: Label on every generated Node naming its fleet type (a key of `FLEET`).
NODE_TYPE_LABEL = "loadtests.dra-extender.io/node-type"
PARENT_UUID = f"{GPU_DRIVER}/parentUUID"
NVLINK_DOMAIN = f"{GPU_DRIVER}/nvlinkDomain"

#: DeviceClass selectors, as in the sample cluster.
MIXED_CLASS_SELECTORS: dict[str, tuple[str, ...]] = {
    GPU_CLASS: (f'device.driver == "{GPU_DRIVER}"', f'device.attributes["{GPU_DRIVER}"].type == "gpu"'),
    MIG_CLASS: (f'device.driver == "{GPU_DRIVER}"', f'device.attributes["{GPU_DRIVER}"].type == "mig"'),
    NIC_CLASS: (
        f'device.driver == "{NIC_DRIVER}"',
        f'has(device.attributes["{NIC_DRIVER}"].rdma) && device.attributes["{NIC_DRIVER}"].rdma',
    ),
    AMD_CLASS: (f'device.driver == "{AMD_DRIVER}"', f'device.attributes["{AMD_DRIVER}"].type == "amdgpu"'),
    TPU_CLASS: (f'device.driver == "{TPU_DRIVER}"', f'device.attributes["{TPU_DRIVER}"].type == "tpu"'),
}


# ----------------------------------------------------------------- A100 MIG layout


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One MIG profile of an A100 80GB: its size and where it may be placed."""

    name: str  # e.g. "1g.10gb"
    slices: int  # memory slices one placement covers (placementSize)
    memory_gi: int
    multiprocessors: int
    starts: tuple[int, ...]  # valid placementStart values


#: A100 80GB MIG profiles and placements (NVIDIA MIG user guide): 14 placements per GPU.
MIG_PROFILES: tuple[MigProfile, ...] = (
    MigProfile("1g.10gb", 1, 10, 14, (0, 1, 2, 3, 4, 5, 6)),
    MigProfile("2g.20gb", 2, 20, 28, (0, 2, 4)),
    MigProfile("3g.40gb", 4, 40, 42, (0, 4)),
    MigProfile("4g.40gb", 4, 40, 56, (0,)),
    MigProfile("7g.80gb", 8, 80, 98, (0,)),
)
A100_MEMORY_SLICES = 8
A100_MULTIPROCESSORS = 108
A100_MEMORY_GI = 80
#: GPUs per A100 device slice: 4 x 15 = 60 devices, under the 64-device limit with counters.
A100_GPUS_PER_SLICE = 4


@dataclass(frozen=True, slots=True)
class MigPlacement:
    """One MIG device of a GPU: profile, first memory slice and the slices it covers."""

    profile: MigProfile
    start: int

    @property
    def memory_slices(self) -> range:
        return range(self.start, self.start + self.profile.slices)

    def device_name(self, gpu: int) -> str:
        return f"gpu-{gpu}-mig-{self.profile.name.replace('.', '')}-{self.start}"


MIG_PLACEMENTS: tuple[MigPlacement, ...] = tuple(
    MigPlacement(profile, start) for profile in MIG_PROFILES for start in profile.starts
)


def counter_set_name(gpu: int) -> str:
    """Name of GPU `gpu`'s shared counter set."""
    return f"gpu-{gpu}-counter-set"


def _counters(memory_gi: int, slices: range, multiprocessors: int) -> Obj:
    counters: Obj = {"memory": {"value": f"{memory_gi}Gi"}}
    counters.update({f"memory-slice-{i}": {"value": "1"} for i in slices})
    counters["multiprocessors"] = {"value": str(multiprocessors)}
    return counters


def _full_gpu_counters() -> Obj:
    return _counters(A100_MEMORY_GI, range(A100_MEMORY_SLICES), A100_MULTIPROCESSORS)


def _a100_common(gpu: int) -> Obj:
    root = _pcie_root(gpu // 2)
    return {
        "architecture": {"string": "Ampere"},
        "brand": {"string": "Nvidia"},
        "cudaComputeCapability": {"version": "8.0.0"},
        "cudaDriverVersion": {"version": "12.8.0"},
        "driverVersion": {"version": "570.124.6"},
        "productName": {"string": "NVIDIA A100-SXM4-80GB"},
        NUMA_NODE: {"int": gpu // 4},
        "resource.kubernetes.io/pciBusID": {"string": f"0000:{(0x07 + 0x10 * gpu) % 256:02x}:00.0"},
        PCIE_ROOT: {"string": root},
    }


def _a100_devices(ids: _Ids, gpu: int) -> list[Obj]:
    """The full GPU `gpu` and its 14 MIG placements, all consuming the GPU's counter set."""
    parent = f"GPU-{ids.uid()}"
    common = _a100_common(gpu)
    devices: list[Obj] = [
        {
            "attributes": {
                **common,
                "addressingMode": {"string": "None"},
                "index": {"int": gpu},
                "type": {"string": "gpu"},
                "uuid": {"string": parent},
            },
            "capacity": {"memory": {"value": f"{A100_MEMORY_GI}Gi"}},
            "consumesCounters": [{"counterSet": counter_set_name(gpu), "counters": _full_gpu_counters()}],
            "name": f"gpu-{gpu}",
        }
    ]
    for placement in MIG_PLACEMENTS:
        profile = placement.profile
        devices.append(
            {
                "attributes": {
                    **common,
                    "parentIndex": {"int": gpu},
                    "parentUUID": {"string": parent},
                    "placementSize": {"int": profile.slices},
                    "placementStart": {"int": placement.start},
                    "profile": {"string": profile.name},
                    "type": {"string": "mig"},
                    "uuid": {"string": f"MIG-{ids.uid()}"},
                },
                "capacity": {
                    "memory": {"value": f"{profile.memory_gi}Gi"},
                    "multiprocessors": {"value": str(profile.multiprocessors)},
                },
                "consumesCounters": [
                    {
                        "counterSet": counter_set_name(gpu),
                        "counters": _counters(
                            profile.memory_gi, placement.memory_slices, profile.multiprocessors
                        ),
                    }
                ],
                "name": placement.device_name(gpu),
            }
        )
    return devices


# ----------------------------------------------------------------- node types


#: (driver, devices, shared counters) of one slice of a node's pool.
SliceSpec = tuple[str, list[Obj], list[Obj]]


@dataclass(frozen=True, slots=True)
class NodeType:
    """One kind of node: share of the fleet, node labels and what its driver(s) publish."""

    name: str
    share: float
    labels: dict[str, str]
    slices: Callable[[_Ids, str], list[SliceSpec]]
    #: (driver, class of a held claim, device names that can be held one by one); A100 is separate.
    holdable: Callable[[], list[tuple[str, str, list[str]]]] = list
    #: Devices per node by device class (or capacity family), where a generator counts capacity.
    capacity: dict[str, int] = field(default_factory=dict)


def _h100_slices(ids: _Ids, node: str) -> list[SliceSpec]:
    return [(GPU_DRIVER, _gpus(ids, node, 8), []), (NIC_DRIVER, _nics(ids, 8, 4), [])]


def _a100_slices(ids: _Ids, node: str) -> list[SliceSpec]:
    gpus = 8
    counters = [{"counters": _full_gpu_counters(), "name": counter_set_name(g)} for g in range(gpus)]
    slices: list[SliceSpec] = [(GPU_DRIVER, [], counters)]
    for first in range(0, gpus, A100_GPUS_PER_SLICE):
        devices = [d for g in range(first, first + A100_GPUS_PER_SLICE) for d in _a100_devices(ids, g)]
        slices.append((GPU_DRIVER, devices, []))
    return slices


def _l40s_slices(ids: _Ids, node: str) -> list[SliceSpec]:
    devices = []
    for i in range(4):
        devices.append(
            {
                "attributes": {
                    "addressingMode": {"string": "None"},
                    "architecture": {"string": "Ada Lovelace"},
                    "brand": {"string": "Nvidia"},
                    "cudaComputeCapability": {"version": "8.9.0"},
                    "cudaDriverVersion": {"version": "12.8.0"},
                    "driverVersion": {"version": "570.124.6"},
                    "index": {"int": i},
                    "productName": {"string": "NVIDIA L40S"},
                    NUMA_NODE: {"int": 0},
                    "resource.kubernetes.io/pciBusID": {"string": f"0000:{0x16 + 0x20 * i:02x}:00.0"},
                    PCIE_ROOT: {"string": _pcie_root(i // 2)},
                    "type": {"string": "gpu"},
                    "uuid": {"string": f"GPU-{ids.uid()}"},
                },
                "capacity": {"memory": {"value": "48Gi"}},
                "name": f"gpu-{i}",
            }
        )
    return [(GPU_DRIVER, devices, [])]


def _mi300x_slices(ids: _Ids, node: str) -> list[SliceSpec]:
    hive = f"xgmi-{ids.uid()[:13]}"
    devices = []
    for i in range(8):
        devices.append(
            {
                "attributes": {
                    "cardIndex": {"int": i + 1},
                    "computePartitionType": {"string": "spx"},
                    "deviceID": {"string": "0x74a1"},
                    "driverVersion": {"version": "6.10.5"},
                    "family": {"string": "CDNA3"},
                    "memoryPartitionType": {"string": "nps1"},
                    "productName": {"string": "AMD Instinct MI300X"},
                    "renderIndex": {"int": 128 + i},
                    NUMA_NODE: {"int": i // 4},
                    "resource.kubernetes.io/pciBusID": {"string": f"0000:{0x0C + 0x20 * i:02x}:00.0"},
                    PCIE_ROOT: {"string": _pcie_root(i // 2)},
                    "type": {"string": "amdgpu"},
                    "xgmiHive": {"string": hive},
                },
                "capacity": {"memory": {"value": "192Gi"}},
                "name": f"gpu-{i}",
            }
        )
    return [(AMD_DRIVER, devices, [])]


def _tpu_slices(ids: _Ids, node: str) -> list[SliceSpec]:
    domain = f"ici-{ids.uid()[:8]}"
    devices = []
    for i in range(4):
        devices.append(
            {
                "attributes": {
                    "acceleratorType": {"string": "v5litepod-4"},
                    "coords": {"string": f"{i % 2},{i // 2},0"},
                    "generation": {"string": "v5e"},
                    "iciDomain": {"string": domain},
                    "index": {"int": i},
                    NUMA_NODE: {"int": 0},
                    "resource.kubernetes.io/pciBusID": {"string": f"0000:00:{5 + i:02x}.0"},
                    PCIE_ROOT: {"string": "pci0000:00"},
                    "topology": {"string": "2x2"},
                    "type": {"string": "tpu"},
                },
                "capacity": {"hbm": {"value": "16Gi"}},
                "name": f"tpu-{i}",
            }
        )
    return [(TPU_DRIVER, devices, [])]


def _named(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{i}" for i in range(count)]


FLEET: dict[str, NodeType] = {
    t.name: t
    for t in (
        NodeType(
            "h100",
            0.35,
            {
                "node.kubernetes.io/instance-type": "a3-highgpu-8g",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "feature.node.kubernetes.io/rdma.available": "true",
            },
            _h100_slices,
            lambda: [(GPU_DRIVER, GPU_CLASS, _named("gpu", 8))],
        ),
        NodeType(
            "a100",
            0.25,
            {
                "node.kubernetes.io/instance-type": "a2-ultragpu-8g",
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                "nvidia.com/mig.capable": "true",
            },
            _a100_slices,
            list,  # A100 GPUs are held by `_hold_a100`
        ),
        NodeType(
            "l40s",
            0.15,
            {"node.kubernetes.io/instance-type": "g6e.12xlarge", "nvidia.com/gpu.product": "NVIDIA-L40S"},
            _l40s_slices,
            lambda: [(GPU_DRIVER, GPU_CLASS, _named("gpu", 4))],
        ),
        NodeType(
            "mi300x",
            0.10,
            {
                "node.kubernetes.io/instance-type": "Standard_ND96isr_MI300X_v5",
                "amd.com/gpu.product-name": "AMD_Instinct_MI300X",
            },
            _mi300x_slices,
            lambda: [(AMD_DRIVER, AMD_CLASS, _named("gpu", 8))],
        ),
        NodeType(
            "tpu",
            0.10,
            {
                "node.kubernetes.io/instance-type": "ct5lp-hightpu-4t",
                "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                "cloud.google.com/gke-tpu-topology": "2x2",
            },
            _tpu_slices,
            lambda: [(TPU_DRIVER, TPU_CLASS, _named("tpu", 4))],
        ),
        NodeType(
            "cpu", 0.05, {"node.kubernetes.io/instance-type": "m7i.4xlarge"}, lambda ids, node: [], list
        ),
    )
}


def share_counts(node_types: Iterable[NodeType], nodes: int, *, every_type: bool = False) -> dict[str, int]:
    """Nodes per type: largest remainder over the shares (ties: the given order).

    `every_type`: when there are at least as many nodes as types, a type rounded down to zero
    takes a node from the largest type, so every type exists.
    """
    types = list(node_types)
    total = sum(t.share for t in types)
    exact = [nodes * t.share / total for t in types]
    counts = [int(x) for x in exact]
    by_remainder = sorted(range(len(types)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in by_remainder[: nodes - sum(counts)]:
        counts[i] += 1
    if every_type and nodes >= len(types):
        for i in range(len(types)):
            if counts[i] == 0:
                counts[max(range(len(types)), key=lambda k: counts[k])] -= 1
                counts[i] = 1
    return {t.name: c for t, c in zip(types, counts, strict=True)}


def fleet_counts(nodes: int) -> dict[str, int]:
    """Nodes per type of `FLEET`: largest remainder over the shares (ties: `FLEET` order)."""
    return share_counts(FLEET.values(), nodes)


def mixed_node_name(type_name: str, number: int) -> str:
    """Name of the `number`-th node (1-based, cluster order) of type `type_name`: h100-00001, ..."""
    return f"{type_name}-{number:05d}"


# ----------------------------------------------------------------- claim shapes


@dataclass(frozen=True, slots=True)
class MixedShape:
    """A pending-claim shape of the mixed fleet: its spec, draw weight and the tier it exercises."""

    name: str
    weight: float
    tier: str
    spec: Obj

    @property
    def exact_search(self) -> bool:
        """True if the claim has constraints (the extender cannot decide it per device)."""
        return bool(self.spec["devices"].get("constraints"))

    def claim_spec(self) -> Obj:
        """`spec` of a ResourceClaim (and `spec.spec` of its template): a fresh copy."""
        return copy.deepcopy(self.spec)


def _cel(expression: str) -> list[Obj]:
    return [{"cel": {"expression": expression}}]


_H100_PRODUCT = f'device.attributes["{GPU_DRIVER}"].productName.startsWith("NVIDIA H100")'


def _profile_is(profile: str) -> str:
    return f'device.attributes["{GPU_DRIVER}"].profile == "{profile}"'


def _exactly(name: str, device_class: str, count: int = 1, selectors: list[Obj] | None = None) -> Obj:
    exactly: Obj = {"allocationMode": "ExactCount", "count": count, "deviceClassName": device_class}
    if selectors:
        exactly["selectors"] = selectors
    return {"name": name, "exactly": exactly}


#: Pending-pod claim shapes of the mixed fleet, one per placement tier, with draw weights.
MIXED_SHAPES: dict[str, MixedShape] = {
    shape.name: shape
    for shape in (
        MixedShape(
            "mig-1g",
            20,
            "MIG profile",
            {"devices": {"requests": [_exactly("mig", MIG_CLASS, 1, _cel(_profile_is("1g.10gb")))]}},
        ),
        MixedShape(
            "mig-pair-same-gpu",
            10,
            "two partitions on one GPU",
            {
                "devices": {
                    "requests": [
                        _exactly("small", MIG_CLASS, 1, _cel(_profile_is("1g.10gb"))),
                        _exactly("medium", MIG_CLASS, 1, _cel(_profile_is("2g.20gb"))),
                    ],
                    "constraints": [{"matchAttribute": PARENT_UUID, "requests": ["small", "medium"]}],
                }
            },
        ),
        MixedShape(
            "gpu-mem-40gi",
            20,
            "GPU by capacity",
            {
                "devices": {
                    "requests": [
                        _exactly(
                            "gpu",
                            GPU_CLASS,
                            1,
                            _cel(f'device.capacity["{GPU_DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0'),
                        )
                    ]
                }
            },
        ),
        MixedShape(
            "gpu-nic-pcie",
            15,
            "GPU + NIC on one PCIe root",
            {
                "devices": {
                    "requests": [_exactly("gpu", GPU_CLASS), _exactly("nic", NIC_CLASS)],
                    "constraints": [{"matchAttribute": PCIE_ROOT, "requests": ["gpu", "nic"]}],
                }
            },
        ),
        MixedShape(
            "gpu4-nvlink-nic-numa",
            10,
            "4 GPUs, one NVLink domain, NIC on their NUMA",
            {
                "devices": {
                    "requests": [_exactly("gpus", GPU_CLASS, 4), _exactly("nic", NIC_CLASS)],
                    "constraints": [
                        {"matchAttribute": NVLINK_DOMAIN, "requests": ["gpus"]},
                        {"matchAttribute": NUMA_NODE, "requests": ["gpus", "nic"]},
                    ],
                }
            },
        ),
        MixedShape(
            "first-available",
            15,
            "firstAvailable across vendors",
            {
                "devices": {
                    "requests": [
                        {
                            "name": "accel",
                            "firstAvailable": [
                                {
                                    "name": "h100",
                                    "deviceClassName": GPU_CLASS,
                                    "selectors": _cel(_H100_PRODUCT),
                                },
                                {"name": "mi300x", "deviceClassName": AMD_CLASS},
                                {
                                    "name": "a100-3g",
                                    "deviceClassName": MIG_CLASS,
                                    "selectors": _cel(_profile_is("3g.40gb")),
                                },
                            ],
                        }
                    ]
                }
            },
        ),
        MixedShape(
            "tpu-all",
            10,
            "allocationMode All",
            {
                "devices": {
                    "requests": [
                        {"name": "tpus", "exactly": {"allocationMode": "All", "deviceClassName": TPU_CLASS}}
                    ]
                }
            },
        ),
    )
}


# ----------------------------------------------------------------- held devices


@dataclass(frozen=True, slots=True)
class _HeldShape:
    """The spec of a running pod's claim (what it asked for, now allocated)."""

    name: str
    spec: Obj

    def claim_spec(self) -> Obj:
        return copy.deepcopy(self.spec)


def _held_shape(device_class: str, count: int, selectors: list[Obj] | None = None) -> _HeldShape:
    tag = device_class.split(".")[0]
    return _HeldShape(
        f"held-{tag}-{count}",
        {"devices": {"requests": [_exactly("devices", device_class, count, selectors)]}},
    )


#: Sizes of held claims (devices per claim) and their weights.
_HELD_SIZES = ((1, 4), (2, 3), (4, 2))
#: Probability that a held A100 GPU is held whole rather than as MIG partitions.
_WHOLE_GPU_SHARE = 0.4


def _split(rng: random.Random, names: list[str]) -> list[list[str]]:
    """Split held device names of one node and kind into claims of 1, 2 or 4 devices."""
    groups = []
    while names:
        fitting = [(size, weight) for size, weight in _HELD_SIZES if size <= len(names)]
        size = rng.choices([s for s, _ in fitting], [w for _, w in fitting])[0]
        groups.append(names[:size])
        names = names[size:]
    return groups


def _mig_packing(rng: random.Random) -> list[MigPlacement]:
    """1-3 random MIG placements of one GPU whose memory slices do not overlap."""
    wanted = rng.choice((1, 2, 3))
    chosen: list[MigPlacement] = []
    used: set[int] = set()
    for placement in rng.sample(MIG_PLACEMENTS, len(MIG_PLACEMENTS)):
        if len(chosen) == wanted:
            break
        if placement.profile.name == "7g.80gb" and chosen:
            continue
        if used.isdisjoint(placement.memory_slices):
            chosen.append(placement)
            used.update(placement.memory_slices)
    return chosen


@dataclass(frozen=True, slots=True)
class Hold:
    """One allocated claim to create: node, driver, its shape and the devices it holds."""

    node: str
    driver: str
    shape: _HeldShape
    devices: tuple[str, ...]


def _holds(rng: random.Random, nodes: list[tuple[str, NodeType]], held_fraction: float) -> list[Hold]:
    """The allocated claims holding `held_fraction` of each device kind (see the module docstring)."""
    units: dict[tuple[str, str], list[tuple[str, str]]] = {}  # (driver, class) -> (node, device)
    for name, node_type in nodes:
        for driver, device_class, devices in node_type.holdable():
            units.setdefault((driver, device_class), []).extend((name, d) for d in devices)
        if node_type.name == "a100":
            units.setdefault((GPU_DRIVER, MIG_CLASS), []).extend((name, f"gpu-{g}") for g in range(8))
    holds: list[Hold] = []
    for (driver, device_class), candidates in units.items():
        taken = sorted(rng.sample(range(len(candidates)), round(len(candidates) * held_fraction)))
        by_node: dict[str, list[str]] = {}
        for i in taken:
            node, device = candidates[i]
            by_node.setdefault(node, []).append(device)
        for node, devices in by_node.items():
            if device_class == MIG_CLASS:  # A100 GPUs: whole, or 1-3 MIG partitions in claims of one
                for gpu in devices:
                    if rng.random() < _WHOLE_GPU_SHARE:
                        holds.append(Hold(node, driver, _held_shape(GPU_CLASS, 1), (gpu,)))
                        continue
                    index = int(gpu.removeprefix("gpu-"))
                    for placement in _mig_packing(rng):
                        shape = _held_shape(MIG_CLASS, 1, _cel(_profile_is(placement.profile.name)))
                        holds.append(Hold(node, driver, shape, (placement.device_name(index),)))
                continue
            for group in _split(rng, devices):
                holds.append(Hold(node, driver, _held_shape(device_class, len(group)), tuple(group)))
    return holds


def _allocated_claim(ids: _Ids, hold: Hold, number: int) -> tuple[Obj, Obj]:
    """The allocated claim of `hold` and the running pod it is reserved for."""
    pod_name = f"running-{number:05d}"
    pod_uid = ids.uid()
    created = ids.time(40_000 + number)
    claim = _claim(ids, pod_name, pod_uid, hold.shape, created)
    claim["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"device": device, "driver": hold.driver, "pool": hold.node, "request": "devices"}
                    for device in hold.devices
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [hold.node]}]}
                ]
            },
        },
        "reservedFor": [{"name": pod_name, "resource": "pods", "uid": pod_uid}],
    }
    pod = _pod(ids, pod_name, hold.shape.name, claim["metadata"]["name"], pod_uid, created, hold.node)
    # The running pod names its claim directly: its "template" is no object of this cluster.
    pod["spec"]["resourceClaims"] = [{"name": POD_CLAIM, "resourceClaimName": claim["metadata"]["name"]}]
    del pod["status"]["resourceClaimStatuses"]
    return claim, {"apiVersion": "v1", "kind": "Pod", **pod}


# ----------------------------------------------------------------- the cluster


def add_nodes(ids: _Ids, objects: list[Obj], nodes: list[tuple[str, NodeType]]) -> list[tuple[str, NodeType]]:
    """Append each (name, type) node in cluster order to `objects`: the Node (labelled with its
    type's labels and `NODE_TYPE_LABEL`) and one ResourceSlice per slice its type publishes (a
    driver's slices form one pool). Returns `nodes`."""
    for number, (name, node_type) in enumerate(nodes, start=1):
        node = node_object(ids, number, name, {**node_type.labels, NODE_TYPE_LABEL: node_type.name})
        objects.append(node)
        specs = node_type.slices(ids, name)
        for driver, devices, counters in specs:
            pool_slices = sum(1 for d, _, _ in specs if d == driver)
            objects.append(
                _slice(ids, node, driver, devices, pool_slices=pool_slices, shared_counters=counters)
            )
    return nodes


def generate_mixed_cluster(
    *, nodes: int, seed: int, held_fraction: float = 0.3, pods: int = 200
) -> tuple[list[Obj], list[Obj]]:
    """Generate the mixed fleet and pending pods (see the module docstring).

    Args:
        nodes: number of nodes (all types; `fleet_counts` says how many of each).
        seed: seed of every random choice; equal arguments give equal output.
        held_fraction: share of each accelerator kind held by allocated claims (0..1).
        pods: number of pending pods, shapes drawn by weight from `MIXED_SHAPES` (from a
            stream that depends on the seed only, so every cluster size gets the same shapes).

    Returns:
        `(objects, pending_pods)` as `loadtests.generate.generate_cluster` returns them.

    Raises:
        ValueError: a negative count or `held_fraction` outside [0, 1].
    """
    if nodes < 0 or pods < 0:
        raise ValueError(f"nodes and pods must be >= 0, got nodes={nodes}, pods={pods}")
    if not 0.0 <= held_fraction <= 1.0:
        raise ValueError(f"held_fraction must be within [0, 1], got {held_fraction}")
    rng = random.Random(f"mixed-fleet-{seed}")
    ids = _Ids(rng)
    objects: list[Obj] = [
        _namespace(ids),
        *_device_classes(ids, MIXED_CLASS_SELECTORS),
        *_templates(ids, MIXED_SHAPES.values()),
    ]
    order = [name for name, count in fleet_counts(nodes).items() for _ in range(count)]
    rng.shuffle(order)
    placed = add_nodes(
        ids, objects, [(mixed_node_name(t, n), FLEET[t]) for n, t in enumerate(order, start=1)]
    )
    for number, hold in enumerate(_holds(rng, placed, held_fraction), start=1):
        claim, pod = _allocated_claim(ids, hold, number)
        objects.extend((pod, claim))
    shape_rng = random.Random(f"mixed-pod-shapes-{seed}")
    claims, pending = pending_pods(ids, list(MIXED_SHAPES.values()), pods, shape_rng)
    objects.extend(claims)
    return objects, pending
