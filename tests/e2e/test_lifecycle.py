"""Pods that run and finish: kwok plays the kubelets, the real Job controller runs Jobs, and the
extender in allocator mode places a churn of jobs arriving, running and finishing.

A control plane of its own, of the newest version under test (kwok changes every Node and pod it sees, and
the node lifecycle controller runs: tests/e2e/cluster.py KWOK_CONTROLLERS), with a small mixed
fleet (`loadtests.fleet`, nothing held: every device is the churn's) and the
churn shapes' claim templates (`bench.churn`). Checked from the API server:
- kwok keeps every Node Ready and untainted, through its Lease, while the node lifecycle
  controller watches;
- a churn of at least 100 pods of the mixed shapes (MIG, 1-8 GPUs with and without NVLink and
  NUMA constraints, GPU+NIC, firstAvailable, gangs) arrives over time on a fleet too small to
  hold them at once: every pod is bound, runs and Succeeds; a watch on every ResourceClaim never
  sees a device allocated to two claims at the same moment; afterwards every claim the pods had
  is released and deleted by the resourceclaim controller;
- an Indexed Job (completions 6, parallelism 3, a 4-GPU NVLink claim per pod from its template)
  is run by the Job controller to Complete, each pod's GPUs inside one NVLink domain of its node.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import pytest

from bench import churn
from bench.apiwatch import Watch
from loadtests.generate import NAMESPACE
from tests.e2e import kwok
from tests.e2e.cluster import KUBERNETES_VERSIONS, ControlPlane, KwokPlane, running
from tests.e2e.conftest import wait_until

pytestmark = pytest.mark.e2e

Obj = dict[str, Any]

#: A fleet small enough that the churn has to wait for devices that finishing pods release, with
#: nothing held throughout (a pod that runs forever on an H100 would leave 8-GPU jobs no node).
NODES = 10
SEED = 7


#: The newest version of `DRA_E2E_KUBERNETES` only (1.37 in CI): what runs here is the control
#: plane's lifecycle around the extender, the same at both versions, and CI's time is counted
#: (the fault tests take the oldest).
@pytest.fixture(scope="module", params=KUBERNETES_VERSIONS[-1:], ids=lambda v: f"k8s-{v}")
def plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    with running(version=request.param, name="lifecycle", kind=KwokPlane) as control:
        churn.prepare(control, NODES, SEED, held_fraction=0.0)
        control.use("allocator")
        yield control


def _nodes(plane: ControlPlane) -> list[Obj]:
    items: list[Obj] = plane.kube.get("/api/v1/nodes")["items"]
    return items


def _ready(node: Obj) -> bool:
    conditions = node.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def test_kwok_keeps_every_node_ready_through_its_lease(plane: ControlPlane) -> None:
    nodes = _nodes(plane)
    assert len(nodes) == NODES
    assert all(_ready(n) and n["status"]["phase"] == "Running" for n in nodes)
    leases = plane.kube.get("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases")["items"]
    renewed = {lease["metadata"]["name"]: lease["spec"]["renewTime"] for lease in leases}
    assert set(renewed) == {n["metadata"]["name"] for n in nodes}
    # Renewed again later: kwok heartbeats, it did not only create them.
    wait_until(
        "every node Lease renewed",
        lambda: all(
            lease["spec"]["renewTime"] != renewed[lease["metadata"]["name"]]
            for lease in plane.kube.get("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases")[
                "items"
            ]
        ),
        timeout=90,
        every=2.0,
    )
    for node in _nodes(plane):
        assert _ready(node), node["metadata"]["name"]
        taints = [t["key"] for t in node.get("spec", {}).get("taints", [])]
        assert not [t for t in taints if t.startswith("node.kubernetes.io/")], (
            node["metadata"]["name"],
            taints,
        )


def test_a_churn_of_pods_runs_finishes_and_releases_every_claim(plane: ControlPlane) -> None:
    # Half a minute of arrivals and short runs (1 % of the shapes' means): CI's time is counted.
    trace = churn.make_trace(SEED, seconds=30, jobs_per_minute=220, duration_scale=0.01)
    pods = sum(churn.SHAPES[j.shape].pods for j in trace)
    assert pods >= 100, pods
    result = churn.run_mode(plane, "allocator", trace, speed=1.0, nodes=NODES, drain=240)
    shown = {k: v for k, v in asdict(result).items() if k != "mig_gpus_open"}
    print(f"\nchurn smoke ({plane.version}): {shown}")
    assert result.double_allocations == []
    assert result.jobs_completed == len(trace), result
    assert result.pods_pending_at_end == 0
    assert result.claims_left_allocated == 0
    # The fleet was too small for the trace at once: pods waited for released devices.
    assert max(result.queue_wait_p99_s.values()) > 2.0, result.queue_wait_p99_s
    # Every multi-GPU claim of the churn inside one NVLink domain (the extender's choice).
    good, total = map(int, result.nvlink_multi_gpu.split("/"))
    assert total > 0 and good == total, result.nvlink_multi_gpu
    # The pods' generated claims are gone (the resourceclaim controller deletes a finished pod's).
    wait_until("the churn's claims deleted", lambda: not _churn_claims(plane), timeout=120, every=1.0)


def _churn_claims(plane: ControlPlane) -> list[str]:
    claims = plane.kube.get(f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims")["items"]
    return [c["metadata"]["name"] for c in claims if c["metadata"]["name"].startswith("alloc-")]


def _indexed_job(name: str) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "completionMode": "Indexed",
            "completions": 6,
            "parallelism": 3,
            "backoffLimit": 2,
            "template": {
                "metadata": {"annotations": kwok.run_for(3)},
                "spec": {
                    "schedulerName": "dra-topology-scheduler",
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "train",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"claims": [{"name": "gpus"}]},
                        }
                    ],
                    "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "churn-gpu-2-nvlink"}],
                },
            },
        },
    }


def test_an_indexed_job_runs_to_completion_through_the_extender(plane: ControlPlane) -> None:
    kube = plane.kube
    job = _indexed_job("train-indexed")
    claims = churn.ClaimLedger()
    watch = Watch(kube, "/apis/resource.k8s.io/v1/resourceclaims", claims.on_event)
    attrs = churn.device_attributes(kube)
    try:
        kube.request("POST", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs", job)

        def complete() -> Obj | None:
            current: Obj = kube.get(f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/train-indexed")
            done = any(
                c["type"] == "Complete" and c["status"] == "True"
                for c in current["status"].get("conditions", [])
            )
            return current if done else None

        finished = wait_until("the Indexed Job Complete", complete, timeout=180, every=1.0)
        assert finished["status"]["succeeded"] == 6 and not finished["status"].get("failed")
        pods = kube.get(
            f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector=batch.kubernetes.io/job-name%3Dtrain-indexed"
        )
        indexes = sorted(
            int(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])
            for p in pods["items"]
        )
        assert indexes == list(range(6))
        assert all(p["spec"]["schedulerName"] == "dra-topology-scheduler" for p in pods["items"])
        time.sleep(1.0)  # the watch has seen the last releases
        job_claims = {
            uid: d
            for uid, d in claims.first_allocation.items()
            if claims.owner_pod.get(uid, "").startswith("train-indexed-")
        }
        assert len(job_claims) == 6, job_claims
        for devices in job_claims.values():
            domains = {(attrs[d]["_node"], attrs[d]["nvlinkDomain"]) for d in devices}
            assert len(domains) == 1, devices
        assert claims.double == []
        wait_until("the Job's claims released", lambda: not (set(claims.held) & set(job_claims)), timeout=60)
    finally:
        watch.stop()
        kube.request(
            "DELETE",
            f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/train-indexed?propagationPolicy=Background",
            ok=(200, 202, 404),
        )
