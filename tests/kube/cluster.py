"""Builders and a replica harness for the kube-bind tests on the fake API server.

Builders: one driver, one DeviceClass, nodes with N GPUs each (pool = node name), claims
asking for `count` GPUs, pods using claims by name. Objects carry no uid or resourceVersion:
the fake server assigns them, as the real one does. `seed` puts such a cluster on the server;
`reserve_as_in_tree` writes what the in-tree plugin writes to a claim at PreBind.

Harness: one extender replica (real watch via KubeSource -> ClusterState -> Placement ->
KubeBinder) against a FakeApiServer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from extender.allocator.features import Features
from extender.claims import DELETE_PROTECTION_FINALIZER
from extender.cluster.state import ClusterState
from extender.core.assumed import AssumeCache
from extender.core.placement import Placement
from extender.kube.binder import KubeBinder, LeaderView
from extender.kube.watch import KubeSource
from extender.objects import Obj
from extender.settings import Settings
from tests.fakeapi.server import FakeApiServer

NAMESPACE = "ml"
DRIVER = "gpu.example.com"
GPU_CLASS = "gpu.example.com"
DRA = "resource.k8s.io/v1"
#: (verb, resource, subresource) of a Binding, as `writes` lists it.
BINDING = ("create", "pods", "binding")


def node(name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
    }


def device_class() -> Obj:
    return {
        "apiVersion": DRA,
        "kind": "DeviceClass",
        "metadata": {"name": GPU_CLASS},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }


def gpu_slice(node_name: str, count: int) -> Obj:
    return {
        "apiVersion": DRA,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-gpus"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}", "attributes": {"index": {"int": i}}} for i in range(count)],
        },
    }


def claim(name: str, *, count: int = 1, namespace: str = NAMESPACE) -> Obj:
    return {
        "apiVersion": DRA,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": GPU_CLASS,
                            "allocationMode": "ExactCount",
                            "count": count,
                        },
                    }
                ]
            }
        },
    }


def pod(name: str, claims: list[str], *, namespace: str = NAMESPACE, scheduler: str = "dra-extender") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedulerName": scheduler,
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"claims": [{"name": f"c{i}"} for i in range(len(claims))]},
                }
            ],
            "resourceClaims": [{"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)],
        },
    }


def allocation(node_name: str, devices: list[str], *, request: str = "gpu") -> Obj:
    """A `status.allocation` as another allocator (the in-tree plugin) would write it."""
    return {
        "devices": {
            "results": [
                {"request": request, "driver": DRIVER, "pool": node_name, "device": d} for d in devices
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
            ]
        },
    }


def seed(
    api: FakeApiServer,
    *,
    gpus: dict[str, int],
    claims: dict[str, int],
    pods: dict[str, list[str]],
    scheduler: str = "dra-extender",
) -> None:
    """Nodes with GPUs, claims asking for N GPUs, pods (of `scheduler`) using claims by name."""
    api.put_object(device_class())
    for name, count in gpus.items():
        api.put_object(node(name))
        api.put_object(gpu_slice(name, count))
    for name, count in claims.items():
        api.put_object(claim(name, count=count))
    for name, uses in pods.items():
        api.put_object(pod(name, uses, scheduler=scheduler))


def reserve_as_in_tree(
    api: FakeApiServer, *, claim_name: str, pod_name: str, node_name: str, devices: list[str]
) -> Obj:
    """Allocate the claim on `node_name` and reserve it for the pod, as the in-tree plugin does at
    PreBind (finalizer, `status.allocation`, `status.reservedFor`); returns the stored claim."""
    uid = api.get_object("Pod", pod_name, NAMESPACE)["metadata"]["uid"]
    current = api.get_object("ResourceClaim", claim_name, NAMESPACE)
    current["metadata"]["finalizers"] = [DELETE_PROTECTION_FINALIZER]
    current["status"] = {
        "allocation": allocation(node_name, devices),
        "reservedFor": [{"resource": "pods", "name": pod_name, "uid": uid}],
    }
    return api.put_object(current)


# ---------------------------------------------------------------------- harness
async def until(condition: Callable[[], object], *, timeout: float = 5.0, what: str = "condition") -> None:
    """Poll `condition` on the loop until it is truthy; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.01)


class Harness:
    """One extender replica against the fake API server: the real watch (KubeSource) feeding a
    ClusterState, a Placement over it, and a KubeBinder writing through the real client."""

    def __init__(
        self,
        api: FakeApiServer,
        *,
        elector: LeaderView | None = None,
        ttl: float = 60.0,
        features: Features | None = None,
    ) -> None:
        self.api = api
        self.state = ClusterState()
        self.placement = Placement(
            self.state,
            features=features or Features.from_gates(),
            assumed=AssumeCache(ttl_seconds=ttl),
            is_synced=lambda: self.source.synced(),
        )
        # As in production (wiring.build_kube_services): watch events are applied on the
        # placement's worker thread, the thread the binder's choose step runs on.
        worker: Any = self.placement.worker
        self.source = KubeSource(
            self.state, Settings(), api_client=api.api_client(), backoff_base=0.05, loop=worker
        )
        self.binder = KubeBinder(api.api_client(), self.state, self.placement, elector=elector)

    async def __aenter__(self) -> Harness:
        self.source.start()
        await until(self.source.synced, what="the watch to list every kind")
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.binder.close()
        await self.source.stop()
        self.placement.worker.close()

    async def caught_up(self) -> None:
        """Wait until the watched claims and pods in the state match the server's versions."""

        def same() -> bool:
            for kind in ("ResourceClaim", "Pod"):
                server = {
                    (o["metadata"]["namespace"], o["metadata"]["name"]): o["metadata"]["resourceVersion"]
                    for o in self.api.list_objects(kind)
                    if kind != "Pod" or (o.get("spec") or {}).get("resourceClaims")
                }
                mine = {
                    (o["metadata"]["namespace"], o["metadata"]["name"]): o["metadata"].get("resourceVersion")
                    for o in self.state.list(kind)
                }
                if server != mine:
                    return False
            return True

        await until(same, what="the watch to catch up with the server")

    def claim(self, name: str, namespace: str = NAMESPACE) -> Obj:
        stored = self.api.get_object("ResourceClaim", name, namespace)
        assert stored is not None, f"claim {namespace}/{name} does not exist"
        return stored

    def pod(self, name: str, namespace: str = NAMESPACE) -> Obj:
        stored = self.api.get_object("Pod", name, namespace)
        assert stored is not None, f"pod {namespace}/{name} does not exist"
        return stored

    async def bind(self, pod_name: str, node_name: str, *, namespace: str = NAMESPACE) -> tuple[str, str]:
        uid = self.pod(pod_name, namespace)["metadata"]["uid"]
        outcome = await self.binder.bind(namespace=namespace, name=pod_name, uid=uid, node=node_name)
        return outcome.error, outcome.reason


def reserved_uids(claim_obj: Obj) -> list[str]:
    return [r.get("uid", "") for r in (claim_obj.get("status") or {}).get("reservedFor") or ()]


def allocated_devices(claim_obj: Obj) -> list[str]:
    results = (((claim_obj.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")
    return [f"{r['pool']}/{r['device']}" for r in results or ()]


def writes(api: FakeApiServer) -> list[tuple[str, str, str]]:
    """(verb, resource, subresource) of every mutating request in the server's log."""
    return [(v, r, s) for v, _, r, s, _ in api.request_log() if v in ("create", "update", "patch", "delete")]
