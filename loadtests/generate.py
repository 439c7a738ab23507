"""Synthetic GPU cluster and pending pods for load tests and benchmarks.

Scope: produces plain Kubernetes objects (dicts shaped like `kubectl get -o yaml` output, the
same shapes as `extender/cluster/sample_cluster.yaml`) for a homogeneous H100 + RDMA fleet, and
pending pods shaped like kube-scheduler sends them to the extender (extender-protocol.md §7.1,
§8.1). It knows nothing about the extender's internals; everything it emits is meant to load
through `extender.cluster.loading` and `ClusterState.from_objects` unchanged.

What is generated (all deterministic for a given seed):
- Namespace `bench`; DeviceClasses `gpu.nvidia.com` and `rdma.dra.net`; one
  ResourceClaimTemplate per claim shape (see `SHAPES`).
- Nodes `gpu-node-00001`, ...; per node one ResourceSlice of `gpus_per_node` GPUs (driver
  `gpu.nvidia.com`; GPU pairs share a `resource.kubernetes.io/pcieRoot`, the first half of the
  GPUs is NUMA node 0, the second half NUMA node 1) and one slice of `nics_per_node` RDMA NICs
  (driver `dra.net`; NIC j sits on the PCIe root of GPU pair j).
- A random `allocated_fraction` of all GPUs held by allocated ResourceClaims in `bench`
  (allocation results plus a nodeSelector pinned to the node, reserved for a running Pod that
  is part of the objects too), in claims of 1, 2 or 4 GPUs of one node.
- `pods` pending Pods, each with one template-generated, unallocated ResourceClaim that the
  pod controls (the claim is in the objects, the pending pod is not: it is what the scheduler
  sends). Claim shapes are drawn by weight from `SHAPES` (from a stream that depends on the seed
  only, so every cluster size gets the same sequence of shapes); shapes without constraints take
  the placement's vectorised fast path, shapes with `matchAttribute` the exact search.

A second, heterogeneous fleet (H100, A100 with MIG partitions on shared counters, L40S, MI300X,
TPU, CPU-only) and claim shapes covering every placement tier are in `loadtests.fleet`, built
from the object builders here; `--fleet mixed` writes it.

CLI: `python -m loadtests.generate --nodes 500 --seed 1 --out DIR [--fleet mixed]` writes
`DIR/cluster.yaml` (multi-document YAML) and `DIR/pods.jsonl` (one JSON Pod per line).
"""

from __future__ import annotations

import argparse
import random
import sys
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import orjson
import yaml

#: A Kubernetes object as decoded YAML (the load tests run without the extender package installed).
Obj = dict[str, Any]

NAMESPACE = "bench"
GPU_DRIVER = "gpu.nvidia.com"
NIC_DRIVER = "dra.net"
GPU_CLASS = "gpu.nvidia.com"
NIC_CLASS = "rdma.dra.net"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
NUMA_NODE = "resource.kubernetes.io/numaNode"
POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"
SCHEDULER_NAME = "dra-extender-scheduler"
#: Label on generated pods and claims naming their claim shape (a key of `SHAPES`).
SHAPE_LABEL = "loadtests.dra-extender.io/shape"
#: The pod-level claim name of every generated pod (`spec.resourceClaims[0].name`).
POD_CLAIM = "devices"
DRA_API = "resource.k8s.io/v1"

_BASE_TIME = datetime(2025, 11, 21, 8, 0, 0, tzinfo=UTC)
#: Characters Kubernetes uses for generateName suffixes.
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
#: PCIe root bus numbers of an 8-GPU HGX board (as in the sample cluster), extended as needed.
_ROOT_BUSES = (0x15, 0x37, 0x97, 0xB7, 0x05, 0x25, 0x85, 0xA5)


class Shape(Protocol):
    """What the object builders need of a claim shape: its name and its claim spec."""

    @property
    def name(self) -> str: ...

    def claim_spec(self) -> Obj: ...


@dataclass(frozen=True, slots=True)
class ClaimShape:
    """One kind of pending claim: its device requests, constraints and draw weight."""

    name: str
    weight: float
    requests: tuple[tuple[str, str, int], ...]  # (request name, device class, count)
    match_attribute: str | None = None  # a matchAttribute constraint over all requests

    @property
    def exact_search(self) -> bool:
        """True if placement must run the exact search (constraints), False for the fast path."""
        return self.match_attribute is not None

    def claim_spec(self) -> Obj:
        """`spec` of a ResourceClaim (and `spec.spec` of its template) for this shape."""
        devices: Obj = {
            "requests": [
                {
                    "name": request,
                    "exactly": {"allocationMode": "ExactCount", "count": count, "deviceClassName": cls},
                }
                for request, cls, count in self.requests
            ]
        }
        if self.match_attribute:
            devices["constraints"] = [
                {"matchAttribute": self.match_attribute, "requests": [r for r, _, _ in self.requests]}
            ]
        return {"devices": devices}


#: Pending-pod claim shapes and their weights (fast path: 65 %, exact search: 35 %).
SHAPES: dict[str, ClaimShape] = {
    shape.name: shape
    for shape in (
        ClaimShape("gpu-1", 30, (("gpus", GPU_CLASS, 1),)),
        ClaimShape("gpu-2", 20, (("gpus", GPU_CLASS, 2),)),
        ClaimShape("gpu-4", 10, (("gpus", GPU_CLASS, 4),)),
        ClaimShape("gpu-8", 5, (("gpus", GPU_CLASS, 8),)),
        ClaimShape("gpu-nic-pcie", 20, (("gpu", GPU_CLASS, 1), ("nic", NIC_CLASS, 1)), PCIE_ROOT),
        ClaimShape("gpu-2-numa", 15, (("gpus", GPU_CLASS, 2),), NUMA_NODE),
    )
}
#: Sizes (GPUs) of the already-allocated claims, with their weights.
_ALLOCATED_SIZES = ((1, 4), (2, 3), (4, 2))


def node_name(number: int) -> str:
    """Name of the node with 1-based `number`: gpu-node-00001, ..."""
    return f"gpu-node-{number:05d}"


class _Ids:
    """Seeded uids, name suffixes, timestamps and resourceVersions."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self._version = 400_000

    def uid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def suffix(self) -> str:
        return "".join(self.rng.choice(_SUFFIX_ALPHABET) for _ in range(5))

    def version(self) -> str:
        self._version += 1
        return str(self._version)

    @staticmethod
    def time(offset_seconds: float) -> str:
        return (_BASE_TIME + timedelta(seconds=offset_seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pcie_root(pair: int) -> str:
    bus = _ROOT_BUSES[pair] if pair < len(_ROOT_BUSES) else 0xC0 + pair
    return f"pci{pair // 256:04x}:{bus % 256:02x}"


def _gpu_numa(index: int, gpus_per_node: int) -> int:
    return 0 if index < (gpus_per_node + 1) // 2 else 1


def _namespace(ids: _Ids) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "creationTimestamp": ids.time(0),
            "labels": {"kubernetes.io/metadata.name": NAMESPACE},
            "name": NAMESPACE,
            "resourceVersion": ids.version(),
            "uid": ids.uid(),
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


#: CEL selectors of the H100 fleet's DeviceClasses.
CLASS_SELECTORS: dict[str, tuple[str, ...]] = {
    GPU_CLASS: (
        f'device.driver == "{GPU_DRIVER}"',
        f'device.attributes["{GPU_DRIVER}"].type == "gpu"',
    ),
    NIC_CLASS: (
        f'device.driver == "{NIC_DRIVER}"',
        f'has(device.attributes["{NIC_DRIVER}"].rdma) && device.attributes["{NIC_DRIVER}"].rdma',
    ),
}


def _device_classes(ids: _Ids, selectors: dict[str, tuple[str, ...]] = CLASS_SELECTORS) -> list[Obj]:
    return [
        {
            "apiVersion": DRA_API,
            "kind": "DeviceClass",
            "metadata": {
                "creationTimestamp": ids.time(60),
                "name": name,
                "resourceVersion": ids.version(),
                "uid": ids.uid(),
            },
            "spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]},
        }
        for name, expressions in selectors.items()
    ]


def _templates(ids: _Ids, shapes: Iterable[Shape] | None = None) -> list[Obj]:
    return [
        {
            "apiVersion": DRA_API,
            "kind": "ResourceClaimTemplate",
            "metadata": {
                "creationTimestamp": ids.time(120),
                "name": shape.name,
                "namespace": NAMESPACE,
                "resourceVersion": ids.version(),
                "uid": ids.uid(),
            },
            "spec": {"metadata": {"labels": {SHAPE_LABEL: shape.name}}, "spec": shape.claim_spec()},
        }
        for shape in (SHAPES.values() if shapes is None else shapes)
    ]


def _node(ids: _Ids, number: int, gpus_per_node: int) -> Obj:
    labels = {
        "node.kubernetes.io/instance-type": "a3-highgpu-8g",
        "nvidia.com/gpu.count": str(gpus_per_node),
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "feature.node.kubernetes.io/rdma.available": "true",
    }
    return node_object(ids, number, node_name(number), labels)


def node_object(ids: _Ids, number: int, name: str, labels: dict[str, str]) -> Obj:
    """A Ready v1 Node `name` (the `number`-th of the cluster) with `labels` beyond the standard ones."""
    zone = "abc"[number % 3]
    cidr = f"10.{64 + number // 256}.{number % 256}.0/24"
    address = f"10.{number // 65536}.{number // 256 % 256}.{number % 256}"
    allocatable = {"cpu": "207500m", "ephemeral-storage": "6000Gi", "memory": "1917632Mi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "creationTimestamp": ids.time(300 + number),
            "labels": {
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                **labels,
                "topology.kubernetes.io/region": "us-central1",
                "topology.kubernetes.io/zone": f"us-central1-{zone}",
            },
            "name": name,
            "resourceVersion": ids.version(),
            "uid": ids.uid(),
        },
        "spec": {"podCIDR": cidr, "podCIDRs": [cidr], "providerID": f"gce://bench/us-central1-{zone}/{name}"},
        "status": {
            "addresses": [{"address": address, "type": "InternalIP"}, {"address": name, "type": "Hostname"}],
            "allocatable": allocatable,
            "capacity": {**allocatable, "cpu": "208", "memory": "1921728Mi"},
            "conditions": [
                {
                    "lastHeartbeatTime": ids.time(86_000),
                    "lastTransitionTime": ids.time(300 + number),
                    "message": "kubelet is posting ready status",
                    "reason": "KubeletReady",
                    "status": "True",
                    "type": "Ready",
                }
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "containerRuntimeVersion": "containerd://2.0.5",
                "kernelVersion": "6.8.0-1028-nvidia",
                "kubeletVersion": "v1.36.0",
                "operatingSystem": "linux",
                "osImage": "Ubuntu 24.04.2 LTS",
            },
        },
    }


def _slice(
    ids: _Ids,
    node: Obj,
    driver: str,
    devices: list[Obj],
    *,
    pool_slices: int = 1,
    shared_counters: list[Obj] | None = None,
) -> Obj:
    """One ResourceSlice of `node`'s pool for `driver` (pool name = node name, generation 1).

    `pool_slices`: how many slices the pool has (`resourceSliceCount`). A slice carries devices
    or `shared_counters`, never both (dra.md §1.3), so a counters-only slice passes no devices.
    """
    name = node["metadata"]["name"]
    spec: Obj = {
        "driver": driver,
        "nodeName": name,
        "pool": {"generation": 1, "name": name, "resourceSliceCount": pool_slices},
    }
    if shared_counters:
        spec["sharedCounters"] = shared_counters
    if devices or not shared_counters:
        spec["devices"] = devices
    return {
        "apiVersion": DRA_API,
        "kind": "ResourceSlice",
        "metadata": {
            "creationTimestamp": node["metadata"]["creationTimestamp"],
            "generateName": f"{name}-{driver}-",
            "name": f"{name}-{driver}-{ids.suffix()}",
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "controller": True,
                    "kind": "Node",
                    "name": name,
                    "uid": node["metadata"]["uid"],
                }
            ],
            "resourceVersion": ids.version(),
            "uid": ids.uid(),
        },
        "spec": spec,
    }


def _gpus(ids: _Ids, name: str, gpus_per_node: int) -> list[Obj]:
    devices = []
    for i in range(gpus_per_node):
        devices.append(
            {
                "attributes": {
                    "architecture": {"string": "Hopper"},
                    "brand": {"string": "Nvidia"},
                    "cudaComputeCapability": {"version": "9.0.0"},
                    "cudaDriverVersion": {"version": "12.8.0"},
                    "driverVersion": {"version": "570.124.6"},
                    "index": {"int": i},
                    "nvlinkDomain": {"string": f"nvswitch-{name}"},
                    "productName": {"string": "NVIDIA H100 80GB HBM3"},
                    NUMA_NODE: {"int": _gpu_numa(i, gpus_per_node)},
                    "resource.kubernetes.io/pciBusID": {"string": f"0000:{(0x18 + 0x12 * i) % 256:02x}:00.0"},
                    PCIE_ROOT: {"string": _pcie_root(i // 2)},
                    "type": {"string": "gpu"},
                    "uuid": {"string": f"GPU-{ids.uid()}"},
                },
                "capacity": {"memory": {"value": "80Gi"}},
                "name": f"gpu-{i}",
            }
        )
    return devices


def _nics(ids: _Ids, gpus_per_node: int, nics_per_node: int) -> list[Obj]:
    pairs = max(1, (gpus_per_node + 1) // 2)
    devices = []
    for j in range(nics_per_node):
        pair = j % pairs
        bus = (0x1C + 0x24 * j) % 256
        numa = _gpu_numa(2 * pair, gpus_per_node)
        mac = ":".join(f"{ids.rng.getrandbits(8):02x}" for _ in range(6))
        devices.append(
            {
                "attributes": {
                    "dra.net/ifName": {"string": f"enp{bus}s0np0"},
                    "dra.net/kind": {"string": "network"},
                    "dra.net/mac": {"string": mac},
                    "dra.net/mtu": {"int": 9000},
                    "dra.net/numaNode": {"int": numa},
                    "dra.net/pciAddress": {"string": f"0000:{bus:02x}:00.0"},
                    "dra.net/pciVendor": {"string": "Mellanox Technologies"},
                    "dra.net/rdma": {"bool": True},
                    "dra.net/sriov": {"bool": False},
                    "dra.net/virtual": {"bool": False},
                    NUMA_NODE: {"int": numa},
                    PCIE_ROOT: {"string": _pcie_root(pair)},
                },
                "name": f"enp{bus}s0np0",
            }
        )
    return devices


def _pod_spec(template: str, *, node: str | None = None) -> Obj:
    spec: Obj = {
        "containers": [
            {
                "image": "nvcr.io/nvidia/pytorch:25.04-py3",
                "imagePullPolicy": "IfNotPresent",
                "name": "main",
                "resources": {
                    "claims": [{"name": POD_CLAIM}],
                    "limits": {"memory": "64Gi"},
                    "requests": {"cpu": "8", "memory": "64Gi"},
                },
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
            }
        ],
        "dnsPolicy": "ClusterFirst",
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
        "resourceClaims": [{"name": POD_CLAIM, "resourceClaimTemplateName": template}],
        "restartPolicy": "Never",
        "schedulerName": SCHEDULER_NAME,
        "securityContext": {},
        "serviceAccount": "default",
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
        "tolerations": [
            {"effect": "NoExecute", "key": key, "operator": "Exists", "tolerationSeconds": 300}
            for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
        ],
    }
    if node is not None:
        spec["nodeName"] = node
    return spec


def _pod(ids: _Ids, name: str, shape: str, claim_name: str, uid: str, created: str, node: str | None) -> Obj:
    status: Obj = {
        "phase": "Running" if node else "Pending",
        "qosClass": "Burstable",
        "resourceClaimStatuses": [{"name": POD_CLAIM, "resourceClaimName": claim_name}],
    }
    if node:
        status["startTime"] = created
    return {
        "metadata": {
            "creationTimestamp": created,
            "labels": {"app": name.rsplit("-", 1)[0], SHAPE_LABEL: shape},
            "name": name,
            "namespace": NAMESPACE,
            "resourceVersion": ids.version(),
            "uid": uid,
        },
        "spec": _pod_spec(shape, node=node),
        "status": status,
    }


def _claim(
    ids: _Ids, pod_name: str, pod_uid: str, shape: Shape, created: str, spec: Obj | None = None
) -> Obj:
    return {
        "apiVersion": DRA_API,
        "kind": "ResourceClaim",
        "metadata": {
            "annotations": {POD_CLAIM_NAME: POD_CLAIM},
            "creationTimestamp": created,
            "generateName": f"{pod_name}-{POD_CLAIM}-",
            "labels": {SHAPE_LABEL: shape.name},
            "name": f"{pod_name}-{POD_CLAIM}-{ids.suffix()}",
            "namespace": NAMESPACE,
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "blockOwnerDeletion": True,
                    "controller": True,
                    "kind": "Pod",
                    "name": pod_name,
                    "uid": pod_uid,
                }
            ],
            "resourceVersion": ids.version(),
            "uid": ids.uid(),
        },
        "spec": spec if spec is not None else shape.claim_spec(),
        "status": {},
    }


def _allocated(
    ids: _Ids, gpus_per_node: int, num_nodes: int, allocated_fraction: float
) -> tuple[list[Obj], list[Obj]]:
    """Running pods and their allocated claims holding `allocated_fraction` of all GPUs."""
    rng = ids.rng
    total = gpus_per_node * num_nodes
    taken = sorted(rng.sample(range(total), round(total * allocated_fraction)))
    by_node: dict[int, list[int]] = {}
    for gpu in taken:
        by_node.setdefault(gpu // gpus_per_node, []).append(gpu % gpus_per_node)
    claims: list[Obj] = []
    pods: list[Obj] = []
    for position, gpus in by_node.items():
        node = node_name(position + 1)
        while gpus:
            fitting = [(size, weight) for size, weight in _ALLOCATED_SIZES if size <= len(gpus)]
            size = rng.choices([s for s, _ in fitting], [w for _, w in fitting])[0]
            held, gpus = gpus[:size], gpus[size:]
            shape = SHAPES[f"gpu-{size}"]
            pod_name = f"running-{len(pods) + 1:05d}"
            pod_uid = ids.uid()
            created = ids.time(40_000 + len(pods))
            claim = _claim(ids, pod_name, pod_uid, shape, created)
            claim["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
            claim["status"] = {
                "allocation": {
                    "devices": {
                        "results": [
                            {"device": f"gpu-{i}", "driver": GPU_DRIVER, "pool": node, "request": "gpus"}
                            for i in held
                        ]
                    },
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                        ]
                    },
                },
                "reservedFor": [{"name": pod_name, "resource": "pods", "uid": pod_uid}],
            }
            pod = _pod(ids, pod_name, shape.name, claim["metadata"]["name"], pod_uid, created, node)
            pods.append({"apiVersion": "v1", "kind": "Pod", **pod})
            claims.append(claim)
    return claims, pods


def generate_cluster(
    *,
    nodes: int,
    seed: int,
    gpus_per_node: int = 8,
    nics_per_node: int = 4,
    allocated_fraction: float = 0.3,
    pods: int = 200,
) -> tuple[list[Obj], list[Obj]]:
    """Generate a cluster and pending pods (see the module docstring for what is in them).

    Args:
        nodes: number of GPU nodes.
        seed: seed of every random choice; equal arguments give equal output.
        gpus_per_node: GPUs per node (pairs share a PCIe root, halves a NUMA node).
        nics_per_node: RDMA NICs per node (NIC j on the PCIe root of GPU pair j).
        allocated_fraction: share of all GPUs already held by allocated claims (0..1).
        pods: number of pending pods.

    Returns:
        `(objects, pending_pods)`: the cluster's objects, each with `apiVersion` and `kind`,
        including the pending pods' unallocated claims; and the pending pods as the scheduler
        sends them (no `kind`/`apiVersion`), in generation order.
    """
    if nodes < 0 or pods < 0 or gpus_per_node < 1 or nics_per_node < 0:
        raise ValueError("nodes, pods and nics_per_node must be >= 0 and gpus_per_node >= 1")
    if not 0.0 <= allocated_fraction <= 1.0:
        raise ValueError(f"allocated_fraction must be within [0, 1], got {allocated_fraction}")
    rng = random.Random(seed)
    ids = _Ids(rng)
    objects: list[Obj] = [_namespace(ids), *_device_classes(ids), *_templates(ids)]
    for number in range(1, nodes + 1):
        node = _node(ids, number, gpus_per_node)
        name = node["metadata"]["name"]
        objects.append(node)
        objects.append(_slice(ids, node, GPU_DRIVER, _gpus(ids, name, gpus_per_node)))
        if nics_per_node:
            objects.append(_slice(ids, node, NIC_DRIVER, _nics(ids, gpus_per_node, nics_per_node)))
    claims, running = _allocated(ids, gpus_per_node, nodes, allocated_fraction)
    objects.extend(running)
    objects.extend(claims)
    claims, pending = pending_pods(ids, list(SHAPES.values()), pods, random.Random(f"pod-shapes-{seed}"))
    objects.extend(claims)
    return objects, pending


def pending_pods(
    ids: _Ids, shapes: Sequence[Any], count: int, shape_rng: random.Random
) -> tuple[list[Obj], list[Obj]]:
    """`count` pending pods with their unallocated claims, shapes drawn by weight from `shapes`
    (a `ClaimShape` here, a `loadtests.fleet.MixedShape` for the mixed fleet: anything with the
    `name`, `weight` and claim spec `_claim` reads).

    Shapes come from their own stream (`shape_rng`, seeded from the seed alone), so every cluster
    size gets the same pod mix for a seed. Returns (claims, pods).
    """
    weights = [s.weight for s in shapes]
    claims: list[Obj] = []
    pending: list[Obj] = []
    for number in range(1, count + 1):
        shape = shape_rng.choices(shapes, weights)[0]
        name = f"job-{number:05d}"
        uid = ids.uid()
        created = ids.time(80_000 + number)
        claim = _claim(ids, name, uid, shape, created)
        claims.append(claim)
        pending.append(_pod(ids, name, shape.name, claim["metadata"]["name"], uid, created, None))
    return claims, pending


def write(objects: list[Obj], pods: list[Obj], out: Path) -> tuple[Path, Path]:
    """Write `out/cluster.yaml` (multi-document YAML) and `out/pods.jsonl`; returns both paths."""
    out.mkdir(parents=True, exist_ok=True)
    cluster, pods_file = out / "cluster.yaml", out / "pods.jsonl"
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    with cluster.open("w", encoding="utf-8") as stream:
        stream.write("# Generated by loadtests.generate; do not edit.\n")
        yaml.dump_all(objects, stream, Dumper=dumper, explicit_start=True, sort_keys=True)
    with pods_file.open("wb") as stream:
        for pod in pods:
            stream.write(orjson.dumps(pod) + b"\n")
    return cluster, pods_file


def write_json_state(objects: list[Obj], path: Path) -> Path:
    """Write `objects` as one JSON `List` (what `serve --state x.json` reads, far faster than YAML)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    return path


FLEETS = ("h100", "mixed")


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m loadtests.generate", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, required=True, help="number of nodes")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--pods", type=int, default=200, help="pending pods (default 200)")
    parser.add_argument(
        "--fleet",
        choices=FLEETS,
        default="h100",
        help="h100: homogeneous 8xH100 + 4 RDMA NICs (default); mixed: the fleet of loadtests.fleet "
        "(H100, A100 with MIG partitions, L40S, MI300X, TPU, CPU-only) and its claim shapes",
    )
    parser.add_argument("--gpus-per-node", type=int, default=8, help="h100 fleet only")
    parser.add_argument("--nics-per-node", type=int, default=4, help="h100 fleet only")
    parser.add_argument(
        "--allocated-fraction",
        type=float,
        default=0.3,
        help="share of the accelerators held by allocated claims (mixed: per device kind; default 0.3)",
    )
    args = parser.parse_args(argv)
    try:
        if args.fleet == "mixed":
            from loadtests.fleet import generate_mixed_cluster  # fleet imports this module

            objects, pods = generate_mixed_cluster(
                nodes=args.nodes, seed=args.seed, held_fraction=args.allocated_fraction, pods=args.pods
            )
        else:
            objects, pods = generate_cluster(
                nodes=args.nodes,
                seed=args.seed,
                gpus_per_node=args.gpus_per_node,
                nics_per_node=args.nics_per_node,
                allocated_fraction=args.allocated_fraction,
                pods=args.pods,
            )
    except ValueError as exc:
        parser.error(str(exc))
    cluster, pods_file = write(objects, pods, args.out)
    kinds: dict[str, int] = {}
    for obj in objects:
        kinds[obj["kind"]] = kinds.get(obj["kind"], 0) + 1
    shapes: dict[str, int] = {}
    for pod in pods:
        shape = pod["metadata"]["labels"][SHAPE_LABEL]
        shapes[shape] = shapes.get(shape, 0) + 1
    print(f"wrote {cluster}: " + ", ".join(f"{n} {k}" for k, n in kinds.items()))
    mix = ", ".join(f"{k}={n}" for k, n in shapes.items())
    print(f"wrote {pods_file}: {len(pods)} pending pods; shapes {mix}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
