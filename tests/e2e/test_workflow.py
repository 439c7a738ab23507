"""The seed's multi-accelerator pipeline on a real workflow engine, through the extender.

An Argo Workflows v4.0.5 pipeline (tests/e2e/argo.py: the real controller, a test-only program)
whose four stages need different accelerators through ResourceClaimTemplates: GPU training (4
H100 on one NVLink domain and an RDMA NIC on their NUMA node), TPU inference (4 TPUs on one ICI
domain), FPGA serving (one FPGA with the serving bitstream) and a custom-ASIC step (2 Inferentia2
on one NeuronLink group). The sample cluster's nodes, kwok as their kubelets (pods run and
finish), the extender in allocator mode behind the real kube-scheduler.

Before the workflow starts, a pod holds every FPGA with the serving bitstream for a while: the
serving stage's pod waits, Pending with the extender's reason, and is placed once the holder has
finished and the resourceclaim controller has released its claim. Checked from the API server:
every stage's claim allocated on its accelerator class (each stage's own claim, generated from
its template), in order, no device allocated twice at any moment, the Workflow Succeeded, and
every claim of the pipeline released and deleted afterwards.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest

from bench import churn
from bench.apiwatch import Watch
from tests.e2e import argo, kwok, objects
from tests.e2e.cluster import KUBERNETES_VERSIONS, ControlPlane, KwokPlane, running
from tests.e2e.conftest import wait_until

pytestmark = pytest.mark.e2e

Obj = dict[str, Any]

NAMESPACE = "pipeline"
#: stage -> (the sample's ResourceClaimTemplate it copies, namespace, the driver its devices are of)
STAGES = {
    "train": ("gpu-training-template", "ml-training", {"gpu.nvidia.com", "dra.net"}),
    "infer": ("tpu-inference-template", "ml-serving", {"tpu.google.com"}),
    "serve": ("fpga-serving-template", "ml-serving", {"fpga.intel.com"}),
    "asic": ("inferentia-template", "ml-serving", {"neuron.amazonaws.com"}),
}
STAGE_SECONDS = 2.0
HOLD_SECONDS = 20.0


@pytest.fixture(scope="module", params=KUBERNETES_VERSIONS[-1:], ids=lambda v: f"k8s-{v}")
def plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """The newest version under test only (1.37 in CI), as tests/e2e/test_lifecycle.py."""
    with running(version=request.param, name="workflow", kind=KwokPlane) as control:
        fleet = objects.sample_fleet()
        objects.publish(control.kube, fleet)
        control.kube.apply_all([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}])
        control.kube.apply_all(_templates(fleet))
        control.start_kwok()
        control.use("allocator")
        yield control


def _templates(fleet: list[Obj]) -> list[Obj]:
    """The stages' templates (copies of the sample's into the pipeline's namespace), and the
    holder's: every FPGA the serving stage could use (`allocationMode: All`, same selector)."""
    by_name = {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o
        for o in fleet
        if o["kind"] == "ResourceClaimTemplate"
    }
    out = []
    for stage, (name, namespace, _) in STAGES.items():
        template = copy.deepcopy(by_name[(namespace, name)])
        template["metadata"] = {"name": stage, "namespace": NAMESPACE}
        out.append(template)
    serving = copy.deepcopy(by_name[("ml-serving", "fpga-serving-template")])
    request = serving["spec"]["spec"]["devices"]["requests"][0]
    request["exactly"].pop("count")
    request["exactly"]["allocationMode"] = "All"
    serving["metadata"] = {"name": "all-serving-fpgas", "namespace": NAMESPACE}
    out.append(serving)
    return out


def _holder() -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "fpga-holder",
            "namespace": NAMESPACE,
            "annotations": kwok.run_for(HOLD_SECONDS),
        },
        "spec": {
            "schedulerName": "dra-topology-scheduler",
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"claims": [{"name": "fpgas"}]},
                }
            ],
            "resourceClaims": [{"name": "fpgas", "resourceClaimTemplateName": "all-serving-fpgas"}],
        },
    }


def _workflow() -> Obj:
    def stage_template(stage: str) -> Obj:
        patch = {
            "resourceClaims": [{"name": "accel", "resourceClaimTemplateName": stage}],
            "terminationGracePeriodSeconds": 0,
        }
        return {
            "name": stage,
            "podSpecPatch": json.dumps(patch),
            "container": {
                "image": "registry.k8s.io/pause:3.10",
                "command": ["/pause"],  # else the controller asks the registry for the entrypoint
                "resources": {"claims": [{"name": "accel"}]},
            },
        }

    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "seed-pipeline", "namespace": NAMESPACE},
        "spec": {
            "entrypoint": "pipeline",
            "schedulerName": "dra-topology-scheduler",
            "podMetadata": {"annotations": kwok.run_for(STAGE_SECONDS)},
            "templates": [
                {"name": "pipeline", "steps": [[{"name": stage, "template": stage}] for stage in STAGES]},
                *(stage_template(stage) for stage in STAGES),
            ],
        },
    }


def _pods(plane: ControlPlane) -> dict[str, Obj]:
    items = plane.kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
    return {p["metadata"]["name"]: p for p in items}


def _stage_of(pod: Obj) -> str:
    return str(pod["metadata"].get("annotations", {}).get("workflows.argoproj.io/node-name", "")).rsplit(
        ".", 1
    )[-1]


def test_the_seed_pipeline_runs_stage_by_stage_on_its_accelerators(plane: ControlPlane) -> None:
    kube = plane.kube
    attrs = churn.device_attributes(kube)
    claims = churn.ClaimLedger()
    watch = Watch(kube, "/apis/resource.k8s.io/v1/resourceclaims", claims.on_event)
    try:
        with argo.running(plane, NAMESPACE) as controller:
            listening = argo.listening_addresses(controller.popen.pid)
            assert all(ip == "127.0.0.1" for ip, _ in listening), listening
            kube.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", _holder())
            wait_until(
                "the holder runs", lambda: _pods(plane)["fpga-holder"]["status"].get("phase") == "Running", 60
            )
            kube.request("POST", argo.WORKFLOWS.format(namespace=NAMESPACE), _workflow())

            # The serving stage waits for the FPGAs with the extender's reason ...
            def serving_waits() -> str:
                for pod in _pods(plane).values():
                    if _stage_of(pod) == "serve" and not pod["spec"].get("nodeName"):
                        for c in pod.get("status", {}).get("conditions", []):
                            if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("message"):
                                return str(c["message"])
                return ""

            reason = wait_until(
                "the serving stage waits for an FPGA", serving_waits, timeout=HOLD_SECONDS, every=0.5
            )
            print(f"\nthe serving stage waits: {reason}")
            assert "fpga" in reason.lower() and ("in use" in reason or "not free" in reason), reason
            assert _pods(plane)["fpga-holder"]["status"]["phase"] == "Running"

            # ... and proceeds once the holder has finished; the Workflow succeeds.
            def done() -> Obj | None:
                wf: Obj = kube.get(argo.WORKFLOWS.format(namespace=NAMESPACE) + "/seed-pipeline")
                phase = wf.get("status", {}).get("phase")
                assert phase not in ("Failed", "Error"), wf.get("status")
                return wf if phase == "Succeeded" else None

            workflow = wait_until("the Workflow Succeeded", done, timeout=HOLD_SECONDS + 120, every=1.0)
        steps = [n for n in workflow["status"]["nodes"].values() if n["type"] == "Pod"]
        assert sorted(n["displayName"] for n in steps) == sorted(STAGES)
        assert all(n["phase"] == "Succeeded" for n in steps)
        finished = {n["displayName"]: n["finishedAt"] for n in steps}
        started = {n["displayName"]: n["startedAt"] for n in steps}
        order = list(STAGES)
        assert all(finished[a] <= started[b] for a, b in itertools.pairwise(order))

        # Each stage's own claim on its accelerators; the holder's released before serving's.
        pods = _pods(plane)
        by_stage: dict[str, list[tuple[str, str, str]]] = {}
        for uid, devices in claims.first_allocation.items():
            owner = claims.owner_pod.get(uid, "")
            if owner in pods and _stage_of(pods[owner]) in STAGES:
                by_stage[_stage_of(pods[owner])] = devices
        assert set(by_stage) == set(STAGES), by_stage
        for stage, devices in by_stage.items():
            assert {driver for driver, _, _ in devices} == STAGES[stage][2], (stage, devices)
        assert {attrs[d]["_node"] for d in by_stage["train"]} == {attrs[by_stage["train"][0]]["_node"]}
        assert claims.double == []
        wait_until("every claim of the pipeline released", lambda: not _pipeline_claims(plane), timeout=60)
    finally:
        watch.stop()


def _pipeline_claims(plane: ControlPlane) -> list[str]:
    items = plane.kube.get(f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims")["items"]
    return [c["metadata"]["name"] for c in items]
