"""The objects the end-to-end tests put into the real API server: the embedded sample cluster's
fleet (namespaces, per-vendor DeviceClasses, Nodes, ResourceSlices, ResourceClaimTemplates and the
named claims nobody holds yet) and pods of the seeds' workloads.

Objects come from `extender/cluster/sample_cluster.yaml` as `kubectl get -o yaml` printed them;
what only the API server may set (uid, resourceVersion, creationTimestamp, status of claims) is
stripped before they are created. Claims the sample shows allocated are left out: their devices
start free, so every placement in the tests is one the scheduler made.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from loadtests.generate import POD_CLAIM
from tests.e2e.cluster import Kube, KubeError, collection_path, object_path

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "extender" / "cluster" / "sample_cluster.yaml"
GANG_PODS = ROOT / "tests" / "data" / "gang_pods.yaml"

Obj = dict[str, Any]

_SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "selfLink")
_ORDER = ("Namespace", "DeviceClass", "Node", "ResourceSlice", "ResourceClaimTemplate", "ResourceClaim")


def _items(path: Path) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for document in yaml.safe_load_all(path.read_text()):
        if document:
            items += document["items"] if document.get("kind") == "List" else [document]
    return items


def clean(obj: dict[str, Any]) -> dict[str, Any]:
    """A copy without the fields only the API server sets (and without a claim's status)."""
    obj = copy.deepcopy(obj)
    metadata = obj.setdefault("metadata", {})
    for key in _SERVER_FIELDS:
        metadata.pop(key, None)
    if obj["kind"] in ("ResourceClaim", "Pod"):
        obj.pop("status", None)
    return obj


def sample_fleet() -> list[dict[str, Any]]:
    """The sample cluster's fleet and unallocated named claims, in creation order."""
    keep: list[dict[str, Any]] = []
    for obj in _items(SAMPLE):
        kind = obj["kind"]
        if kind not in _ORDER:
            continue
        if kind == "ResourceClaim" and (
            obj.get("status", {}).get("allocation") or obj["metadata"].get("ownerReferences")
        ):
            continue  # held in the sample, or generated for a sample pod from a template
        keep.append(clean(obj))
    keep.sort(key=lambda o: _ORDER.index(o["kind"]))
    return keep


def publish(kube: Kube, objects: list[dict[str, Any]]) -> None:
    """Create every object; Nodes keep their status (Ready), as a kubelet would have posted it.

    A driver makes each node-local ResourceSlice owned by its Node (by uid), so the garbage
    collector removes the slices with the Node; the sample's owner uids are another cluster's,
    and the collector would delete those slices at once, so they are set to the new Nodes'."""
    kube.apply_all([o for o in objects if o["kind"] != "ResourceSlice"])
    for node in (o for o in objects if o["kind"] == "Node"):
        mark_ready(kube, node["metadata"]["name"])
    slices = [owned_by_node(kube, o) for o in objects if o["kind"] == "ResourceSlice"]
    kube.apply_all(slices)


def _unowned(obj: Obj) -> Obj:
    """`objects.clean` (no server-set fields) without owner references: the generator's owners
    are uids of no object here."""
    cleaned = clean(obj)
    cleaned["metadata"].pop("ownerReferences", None)
    return cleaned


def parallel(work: Iterable[Any], fn: Any, threads: int = 8) -> list[Any]:
    """`fn` over `work` on `threads` client threads (creating hundreds of objects one by one is slow)."""
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(fn, work))


def publish_fleet(kube: Kube, objects: list[Obj]) -> dict[str, int]:
    """Create a generated fleet (`loadtests.fleet`, `loadtests.generate`) as drivers and kubelets
    would have: Nodes Ready, ResourceSlices owned by their Node, and each running pod with its
    allocated claim reserved for it (the claim gets its status after the pod exists: its uid).
    Pending pods and their unallocated claims are left out. Returns the counts by kind."""
    by_kind: dict[str, list[Obj]] = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], []).append(obj)
    for kind in ("Namespace", "DeviceClass", "ResourceClaimTemplate", "Node"):
        parallel(
            by_kind.get(kind, []),
            lambda o: kube.request("POST", collection_path(o), _unowned(o), ok=(201, 409)),
        )
    parallel([n["metadata"]["name"] for n in by_kind.get("Node", [])], lambda name: mark_ready(kube, name))
    # Owned by their Node (its uid here), as a driver publishes them.
    parallel(
        by_kind.get("ResourceSlice", []),
        lambda o: kube.request("POST", collection_path(o), owned_by_node(kube, _unowned(o)), ok=(201, 409)),
    )
    claims = {
        c["metadata"]["name"]: c
        for c in by_kind.get("ResourceClaim", [])
        if c.get("status", {}).get("allocation")
    }
    running = [p for p in by_kind.get("Pod", []) if p["spec"].get("nodeName")]

    def hold(pod: Obj) -> None:
        ref = pod["spec"]["resourceClaims"][0]
        statuses = pod.get("status", {}).get("resourceClaimStatuses") or [{}]
        name = ref.get("resourceClaimName") or statuses[0]["resourceClaimName"]
        # A running pod names its claim directly (its template's claim was generated long ago).
        body = _unowned(pod) | {"status": {}}
        body["spec"]["resourceClaims"] = [{"name": POD_CLAIM, "resourceClaimName": name}]
        created = kube.request("POST", collection_path(pod), body, ok=(201,))
        claim = claims[name]
        made = kube.request("POST", collection_path(claim), _unowned(claim) | {"status": {}}, ok=(201,))
        status = json.loads(json.dumps(claim["status"]))
        status["reservedFor"] = [
            {"resource": "pods", "name": created["metadata"]["name"], "uid": created["metadata"]["uid"]}
        ]
        kube.request(
            "PUT",
            object_path("ResourceClaim", name, made["metadata"]["namespace"]) + "/status",
            made | {"status": status},
        )

    parallel(running, hold)
    return {kind: len(items) for kind, items in by_kind.items()} | {"HeldClaims": len(running)}


NOT_READY_TAINT = "node.kubernetes.io/not-ready"


def mark_ready(kube: Kube, name: str) -> None:
    """Drop the not-ready taint the API server's TaintNodesByCondition admission puts on every
    new Node: the node lifecycle controller removes it once the kubelet reports Ready, and here
    there are neither kubelets nor that controller (it would find no heartbeats). Where that
    controller runs (with kwok) it writes the Node too: a conflict is read again and retried."""
    for _ in range(10):
        node = kube.get(object_path("Node", name))
        taints = node["spec"].get("taints") or []
        kept = [t for t in taints if t.get("key") != NOT_READY_TAINT]
        if len(kept) == len(taints):
            return
        node["spec"]["taints"] = kept
        if kube.request("PUT", object_path("Node", name), node, ok=(200, 409)).get("kind") != "Status":
            return
    raise AssertionError(f"Node {name}: the not-ready taint could not be removed (10 conflicts)")


def owned_by_node(kube: Kube, resource_slice: dict[str, Any]) -> dict[str, Any]:
    """`resource_slice` with its ownerReferences pointing at its Node as the API server has it."""
    node = resource_slice["spec"].get("nodeName")
    if not node:
        return resource_slice
    uid = kube.get(object_path("Node", node))["metadata"]["uid"]
    owned = copy.deepcopy(resource_slice)
    owned["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid, "controller": True}
    ]
    return owned


def pod(
    name: str,
    namespace: str,
    scheduler: str,
    claims: dict[str, str],
    *,
    template: bool = True,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod whose one container uses every claim; `claims` maps the pod's claim name to a
    ResourceClaimTemplate (template=True) or a ResourceClaim."""
    key = "resourceClaimTemplateName" if template else "resourceClaimName"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": {
            "schedulerName": scheduler,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"claims": [{"name": c} for c in claims]},
                }
            ],
            "resourceClaims": [{"name": c, key: t} for c, t in claims.items()],
            "terminationGracePeriodSeconds": 0,
        },
    }


#: The seeds' workloads, one pod each: (pod name, namespace, {pod claim name: template}).
SEED_WORKLOADS: tuple[tuple[str, str, dict[str, str]], ...] = (
    (
        "gpu-training",
        "ml-training",
        {"devices": "gpu-training-template"},
    ),  # 4 H100 on one NVLink domain + NIC on their NUMA node
    ("h100-pair", "ml-training", {"gpus": "h100-pair-template"}),
    ("gaudi-training", "ml-training", {"hpus": "gaudi-training-template"}),
    ("amd-mi300-training", "ml-training", {"gpus": "amd-mi300-template"}),
    ("mig-notebook", "ml-training", {"mig": "mig-1g-template"}),  # a MIG partition on shared counters
    ("tpu-inference", "ml-serving", {"tpus": "tpu-inference-template"}),
    ("fpga-serving", "ml-serving", {"fpga": "fpga-serving-template"}),
    ("flexible-accelerator", "ml-serving", {"accelerator": "flexible-accelerator"}),  # H100 -> A100 -> L40S
    ("inferentia-serving", "ml-serving", {"neuron": "inferentia-template"}),
)


def seed_pods(scheduler: str, suffix: str = "") -> list[dict[str, Any]]:
    pods = [pod(f"{n}{suffix}", ns, scheduler, claims) for n, ns, claims in SEED_WORKLOADS]
    pods.append(
        pod(f"shared-fpga-user{suffix}", "ml-serving", scheduler, {"fpga": "shared-fpga"}, template=False)
    )
    return pods


def gang_pods(scheduler: str) -> list[dict[str, Any]]:
    """The sample's 4-pod JobSet gang, each pod with its own named claim of one GB200 tray."""
    pods = []
    for obj in _items(GANG_PODS):
        obj = clean(obj)
        obj["spec"]["schedulerName"] = scheduler
        obj["spec"]["terminationGracePeriodSeconds"] = 0
        obj["spec"]["containers"][0]["image"] = "registry.k8s.io/pause:3.10"
        pods.append(obj)
    return pods


def create_pods(kube: Kube, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [kube.create(p) for p in pods]


def get(kube: Kube, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    result: dict[str, Any] = kube.get(object_path(kind, name, namespace))
    return result


def list_of(kube: Kube, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
    if namespace is None and kind in ("Pod", "ResourceClaim"):
        base = collection_path({"kind": kind}, namespace="x").split("/namespaces/")[0]
        plural = "pods" if kind == "Pod" else "resourceclaims"
        return list(kube.get(f"{base}/{plural}")["items"])
    return list(kube.get(collection_path({"kind": kind}, namespace=namespace))["items"])


def delete(kube: Kube, kind: str, name: str, namespace: str | None = None) -> None:
    kube.request("DELETE", object_path(kind, name, namespace), {"gracePeriodSeconds": 0}, ok=(200, 202, 404))


def pod_claims(kube: Kube, pod_obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The ResourceClaims a pod uses: named ones directly, generated ones by its status."""
    namespace = pod_obj["metadata"]["namespace"]
    names: list[str] = []
    statuses = {
        s["name"]: s.get("resourceClaimName")
        for s in pod_obj.get("status", {}).get("resourceClaimStatuses", [])
    }
    for ref in pod_obj["spec"].get("resourceClaims", []):
        name = ref.get("resourceClaimName") or statuses.get(ref["name"])
        if name:
            names.append(name)
    return [get(kube, "ResourceClaim", n, namespace) for n in names]


def allocated_devices(claim: dict[str, Any]) -> list[tuple[str, str, str]]:
    results = claim.get("status", {}).get("allocation", {}).get("devices", {}).get("results", [])
    return [(r["driver"], r["pool"], r["device"]) for r in results]


def unique_namespace(kube: Kube, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


__all__ = ["KubeError"]
