"""The seeds' workloads scheduled by the real kube-scheduler with the shipped configs, against the
real API server and resourceclaim controller, in allocator mode (the extender allocates and binds)
and advisory mode (the in-tree DynamicResources plugin allocates on the node we ranked).

What is checked against the real programs, per pod: it is bound; the node is one our prioritize
ranked highest (the extender's own decision record, `/ui/api/decisions`); its claims' devices are
on that node; in allocator mode `reservedFor` names the pod and the finalizer is ours; no device is
allocated twice; a pod that fits nowhere stays Pending with our reason in `PodScheduled`.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.e2e import objects
from tests.e2e.cluster import ControlPlane
from tests.e2e.conftest import ALLOCATOR_SCHEDULER, DEFAULT_SCHEDULER, wait_until

pytestmark = pytest.mark.e2e


def _bound(plane: ControlPlane, created: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    fresh = [
        objects.get(plane.kube, "Pod", p["metadata"]["name"], p["metadata"]["namespace"]) for p in created
    ]
    return fresh if all(p["spec"].get("nodeName") for p in fresh) else None


def _decisions(plane: ControlPlane) -> list[dict[str, Any]]:
    listing = plane.extender_get("/ui/api/decisions").json()
    entries = listing["decisions"] if isinstance(listing, dict) else listing
    return [plane.extender_get(f"/ui/api/decisions/{d['seq']}").json() for d in entries]


def _our_best(decisions: list[dict[str, Any]], pod: dict[str, Any]) -> set[str]:
    """The nodes our last prioritize for `pod` scored highest, or, when kube-scheduler skipped
    scoring because one node was feasible, the one node our last filter passed (the decision
    record keeps the best-scored and the passed nodes of each call)."""
    key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
    mine = [d for d in decisions if d["pod"] == key]
    prioritized = [d for d in mine if d["verb"] == "prioritize" and d["nodes"]]
    if prioritized:
        rows = max(prioritized, key=lambda d: d["seq"])["nodes"]
        top = max(r["score"] for r in rows)
        return {r["name"] for r in rows if r["score"] == top}
    filtered = [d for d in mine if d["verb"] == "filter"]
    assert filtered, f"the extender never saw {key}"
    return {r["name"] for r in max(filtered, key=lambda d: d["seq"])["nodes"] if r["outcome"] == "passed"}


def _device_nodes(plane: ControlPlane) -> dict[tuple[str, str, str], str]:
    """(driver, pool, device) -> node, from the ResourceSlices in the API server."""
    where: dict[tuple[str, str, str], str] = {}
    for s in objects.list_of(plane.kube, "ResourceSlice"):
        spec = s["spec"]
        for d in spec.get("devices", []):
            where[(spec["driver"], spec["pool"]["name"], d["name"])] = spec.get("nodeName", "")
    return where


def _check_placements(plane: ControlPlane, bound: list[dict[str, Any]], *, allocator: bool) -> None:
    decisions = _decisions(plane)
    where = _device_nodes(plane)
    taken: Counter[tuple[str, str, str]] = Counter()
    for pod in bound:
        node = pod["spec"]["nodeName"]
        name = pod["metadata"]["name"]
        assert node in _our_best(decisions, pod), f"{name} bound to {node}, not a node we ranked highest"
        claims = objects.pod_claims(plane.kube, pod)
        assert claims, f"{name}: no claims found"
        for claim in claims:
            devices = objects.allocated_devices(claim)
            assert devices, f"{name}: claim {claim['metadata']['name']} not allocated"
            assert {where[d] for d in devices} == {node}, f"{name}: devices {devices} not all on {node}"
            reserved = [r["uid"] for r in claim["status"].get("reservedFor", [])]
            assert pod["metadata"]["uid"] in reserved
            assert "resource.kubernetes.io/delete-protection" in claim["metadata"].get("finalizers", [])
            if not claim["status"]["allocation"]["devices"]["results"][0].get("adminAccess"):
                taken.update(devices)
    doubled = [d for d, n in taken.items() if n > 1]
    assert not doubled, f"devices allocated twice: {doubled}"


def test_allocator_mode_places_the_seed_workloads_and_the_gang(
    plane: ControlPlane, pods: list[dict[str, Any]]
) -> None:
    plane.use("allocator")
    batch = objects.seed_pods(ALLOCATOR_SCHEDULER) + objects.gang_pods(ALLOCATOR_SCHEDULER)
    pods.extend(objects.create_pods(plane.kube, batch))
    bound = wait_until("every seed pod bound", lambda: _bound(plane, pods), timeout=180)
    _check_placements(plane, bound, allocator=True)

    by_name = {p["metadata"]["name"]: p for p in bound}
    nodes = {n["metadata"]["name"]: n for n in objects.list_of(plane.kube, "Node")}
    cliques = {
        nodes[by_name[f"train-gang-worker-{i}"]["spec"]["nodeName"]]["metadata"]["labels"][
            "nvidia.com/gpu.clique"
        ]
        for i in range(4)
    }
    assert len(cliques) == 1, f"the gang spans NVL72 cliques {cliques}"
    assert by_name["flexible-accelerator"]["spec"]["nodeName"].startswith("h100-"), (
        "prioritized list: H100 first"
    )


def test_allocator_mode_unschedulable_pod_carries_our_reason(
    plane: ControlPlane, pods: list[dict[str, Any]]
) -> None:
    plane.use("allocator")
    namespace = "ml-training"
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "nine-h100", "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [{"name": "gpus", "exactly": {"deviceClassName": "h100.nvidia.com", "count": 9}}]
            }
        },
    }
    plane.kube.apply_all([claim])
    pending = objects.pod("nine-h100", namespace, ALLOCATOR_SCHEDULER, {"gpus": "nine-h100"}, template=False)
    pods.extend(objects.create_pods(plane.kube, [pending]))

    def unschedulable() -> str:
        p = objects.get(plane.kube, "Pod", "nine-h100", namespace)
        for c in p.get("status", {}).get("conditions", []):
            if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable":
                return str(c.get("message", ""))
        return ""

    message = wait_until("PodScheduled=False/Unschedulable", unschedulable, timeout=60)
    assert "h100.nvidia.com" in message, message
    assert not objects.get(plane.kube, "Pod", "nine-h100", namespace)["spec"].get("nodeName")
    objects.delete(plane.kube, "ResourceClaim", "nine-h100", namespace)


def test_advisory_mode_in_tree_plugin_allocates_on_our_node(
    plane: ControlPlane, pods: list[dict[str, Any]]
) -> None:
    plane.use("advisory")
    pods.extend(objects.create_pods(plane.kube, objects.seed_pods(DEFAULT_SCHEDULER, suffix="-adv")))
    bound = wait_until("every seed pod bound", lambda: _bound(plane, pods), timeout=180)
    _check_placements(plane, bound, allocator=False)
    # The plugin filters before us, so every node we passed had passed its Filter; had it then
    # refused one at Reserve or PreBind, the pod would carry a FailedScheduling event.
    names = {p["metadata"]["name"] for p in bound}
    failures = [
        e
        for ns in ("ml-training", "ml-serving")
        for e in plane.kube.get(f"/api/v1/namespaces/{ns}/events")["items"]
        if e["involvedObject"].get("name") in names and e.get("reason") == "FailedScheduling"
    ]
    assert not failures, [f"{e['involvedObject']['name']}: {e.get('message')}" for e in failures]


def test_deploy_second_scheduler_places_pods_under_its_own_identity(
    plane: ControlPlane, pods: list[dict[str, Any]]
) -> None:
    """deploy/scheduler-config.yaml run by kube-scheduler as deploy/scheduler.yaml's account:
    its RBAC suffices, its Lease lives in dra-system, and it binds through the extender."""
    plane.use("deploy")
    batch = [
        p
        for p in objects.seed_pods(ALLOCATOR_SCHEDULER, suffix="-dep")
        if p["metadata"]["name"].startswith(("h100-pair", "mig-notebook", "fpga-serving"))
    ]
    pods.extend(objects.create_pods(plane.kube, batch))
    bound = wait_until("the pods bound by the second scheduler", lambda: _bound(plane, pods), timeout=120)
    _check_placements(plane, bound, allocator=True)
    lease = objects.get(plane.kube, "Lease", "dra-topology-scheduler", "dra-system")
    assert lease["spec"].get("holderIdentity"), "the second scheduler holds no Lease in dra-system"
