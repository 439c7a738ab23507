"""A small cluster for the core parts' own tests: nodes with a few GPUs, claims, a pod.

Objects are plain dicts as the API serves them (built with `tests.allocator.builders`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from extender.allocator.features import Features
from extender.cluster.state import ClusterState
from extender.core.assumed import AssumeCache
from extender.core.placement import Placement
from extender.objects import Obj
from extender.pods import Pod, parse_pod
from tests.allocator import builders as b

DRIVER = "gpu.example.com"
GPU = "gpu"


def node(name: str) -> Obj:
    return {"kind": "Node", "metadata": {"name": name, "labels": {}}}


def gpus(node_name: str, count: int, *, numa: Sequence[int] | None = None) -> list[Obj]:
    """One complete pool of `count` GPUs on the node (`numa`: each GPU's NUMA attribute)."""
    devices = [
        b.device(f"gpu-{i}", attrs={"numa": numa[i]} if numa is not None else {"index": i})
        for i in range(count)
    ]
    return [{**s, "kind": "ResourceSlice"} for s in b.pool_slices(DRIVER, node_name, devices, node=node_name)]


def gpu_class() -> Obj:
    return {**b.device_class(GPU, DRIVER), "kind": "DeviceClass"}


def claim(name: str, count: int, *, constraints: Sequence[Obj] = ()) -> Obj:
    """A pending claim for `count` GPUs (request "r")."""
    return {**b.claim(name, [b.request("r", GPU, count)], constraints), "kind": "ResourceClaim"}


def held(name: str, node_name: str, devices: Sequence[str], *, pod_uid: str = "other-pod") -> Obj:
    """A claim allocated to another pod, holding `devices` of the node's pool."""
    made = claim(name, len(devices))
    made["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "r", "driver": DRIVER, "pool": node_name, "device": device}
                    for device in devices
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
                ]
            },
        },
        "reservedFor": [{"resource": "pods", "name": "other", "uid": pod_uid}],
    }
    return made


def pod(claims: Sequence[Obj], *, name: str = "pod", uid: str = "pod-uid") -> Pod:
    """A pod using `claims`, parsed as the edges parse it (the core takes records)."""
    return parse_pod(
        {
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": uid},
            "spec": {
                "resourceClaims": [
                    {"name": f"c{i}", "resourceClaimName": c["metadata"]["name"]}
                    for i, c in enumerate(claims)
                ]
            },
        }
    )


def placement(objects: Sequence[Obj], *, assumed: AssumeCache | None = None, **options: Any) -> Placement:
    return Placement(
        ClusterState.from_objects(list(objects)),
        features=Features.from_gates(),
        assumed=assumed if assumed is not None else AssumeCache(clock=lambda: 0.0),
        **options,
    )
