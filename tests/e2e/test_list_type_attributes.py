"""`matchAttribute` / `distinctAttribute` over list-valued attributes with DRAListTypeAttributes on,
against the real kube-scheduler in both modes (issue 30 finding 6).

kube-scheduler v1.36.3 gives the gate to CEL but not to its allocator (`AllocatorFeatures` in
pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go), so its constraints compare
scalars only: a list-valued device may be a constraint's first device and no later one, and a
claim of two such devices under one constraint fits nowhere. v1.37.2 passes the gate to both and
compares lists as sets. What users get is what the real scheduler does, in both modes:

- advisory: the in-tree plugin decides (it filters before the extender); the extender's own
  `/filter`, asked directly, must agree with it, so that it never ranks a node the plugin refuses;
- allocator: the extender decides, and must decide as the in-tree plugin would.

This module runs its own control plane with the gate on in kube-apiserver (which otherwise drops
list values from ResourceSlices), kube-scheduler and the extender, and one node with three
devices whose `numa` attribute is a list of ints.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.e2e import objects
from tests.e2e.cluster import EXTENDER_SERVICE, EXTENDERS, KUBERNETES_VERSIONS, ControlPlane, Process, running
from tests.e2e.conftest import ALLOCATOR_SCHEDULER, DEFAULT_SCHEDULER, wait_until

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning"),
]

GATE = "--feature-gates=DRAListTypeAttributes=true"
DRIVER = "lists.example.com"
CLASS = "numa-lists"
NAMESPACE = "list-attributes"
MODES = ("advisory", "allocator")
CASES = ("includes", "match-one", "match-two", "distinct-two")
#: device -> its `numa` list: gpu-0 and gpu-1 share NUMA 1; gpu-2 is disjoint from both.
NUMA = {"gpu-0": [0, 1], "gpu-1": [1, 2], "gpu-2": [3]}


def node_of(mode: str, case: str) -> str:
    """Each case has a node of its own (the pod selects it by hostname), so no case depends on
    devices an earlier one freed: after a claim the extender bound is deleted, its assumed
    allocation keeps counting until the extender's next bind prunes it or the assume TTL (60 s)
    ends, and a case scheduled in between would be refused for devices "in use"."""
    return f"lists-{mode}-{case}"


class _GatedPlane(ControlPlane):
    """The e2e control plane with DRAListTypeAttributes on where it matters."""

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Process:
        if name in ("kube-apiserver", "kube-scheduler", *EXTENDERS):
            argv = [*argv, GATE]
        return super()._spawn(name, argv, env)


def _node(name: str) -> list[dict[str, Any]]:
    """A Ready node and its ResourceSlice of three devices with list-valued `numa`."""
    resources = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    return [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            },
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{name}-{DRIVER}"},
            "spec": {
                "driver": DRIVER,
                "nodeName": name,
                "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {"name": device, "attributes": {"numa": {"ints": values}}}
                    for device, values in NUMA.items()
                ],
            },
        },
    ]


def _fleet() -> list[dict[str, Any]]:
    fleet: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": CLASS},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        },
    ]
    for mode in MODES:
        for case in CASES:
            fleet += _node(node_of(mode, case))
    return fleet


@pytest.fixture(scope="module", params=KUBERNETES_VERSIONS, ids=lambda v: f"k8s-{v}")
def gated(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """A control plane of its own per Kubernetes version, with DRAListTypeAttributes on."""
    with running(version=request.param, name="lists", kind=_GatedPlane) as plane:
        objects.publish(plane.kube, _fleet())
        for stored in objects.list_of(plane.kube, "ResourceSlice"):
            kept = {d["name"]: d.get("attributes", {}).get("numa") for d in stored["spec"]["devices"]}
            assert kept == {n: {"ints": v} for n, v in NUMA.items()}, (
                f"the API server dropped the lists: {kept}"
            )
        yield plane


def _claim(count: int, constraint: str | None, selector: str | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": CLASS, "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    devices: dict[str, Any] = {"requests": [{"name": "gpus", "exactly": exactly}]}
    if constraint:
        devices["constraints"] = [{constraint: f"{DRIVER}/numa"}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": NAMESPACE},
        "spec": {"devices": devices},
    }


def _extender_refusal(plane: ControlPlane, pod: dict[str, Any], node: str) -> str:
    """The extender's own `/filter` reason for refusing the node ('' if it passes), asked as
    kube-scheduler asks it."""
    response = requests.post(
        f"https://127.0.0.1:{plane.extender_port}/filter",
        json={"Pod": pod, "NodeNames": [node]},
        timeout=10,
        verify=str(plane.pki.ca_cert),
        cert=(str(plane.scheduler_tls[0]), str(plane.scheduler_tls[1])),
        headers={"Host": EXTENDER_SERVICE},
    )
    assert response.status_code == 200, response.text
    answer = response.json()
    assert not answer.get("Error"), answer
    print(f"extender /filter for {pod['metadata']['name']}: {answer}")
    if node in (answer.get("NodeNames") or []):
        return ""
    reasons = {**(answer.get("FailedNodes") or {}), **(answer.get("FailedAndUnresolvableNodes") or {})}
    return str(reasons.get(node, "(no reason)"))


def _outcome(plane: ControlPlane, name: str) -> tuple[str, str] | None:
    """("bound", node) or ("unschedulable", message), once kube-scheduler decided."""
    pod = objects.get(plane.kube, "Pod", name, NAMESPACE)
    if pod["spec"].get("nodeName"):
        return "bound", pod["spec"]["nodeName"]
    for condition in pod.get("status", {}).get("conditions", []):
        if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
            return "unschedulable", str(condition.get("message", ""))
    return None


def _run(plane: ControlPlane, mode: str, case: str, claim: dict[str, Any]) -> tuple[str, str, list[str], str]:
    """Schedule one pod with `claim` onto the case's node: kube-scheduler's outcome, the devices
    allocated, and the extender's own /filter refusal of the node ('' if it passes)."""
    scheduler = ALLOCATOR_SCHEDULER if mode == "allocator" else DEFAULT_SCHEDULER
    name, node = f"{case}-{mode}", node_of(mode, case)
    claim["metadata"]["name"] = name
    plane.kube.create(claim)
    pod = objects.pod(name, NAMESPACE, scheduler, {"gpus": name}, template=False)
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    objects.create_pods(plane.kube, [pod])
    verdict, detail = wait_until(f"{name} bound or unschedulable", lambda: _outcome(plane, name), 90)
    print(f"{name}: {verdict}: {detail}")
    stored = objects.get(plane.kube, "ResourceClaim", name, NAMESPACE)
    devices = sorted(d for _, _, d in objects.allocated_devices(stored))
    # Asked only while the claim is unallocated (a bound pod's claim is already decided).
    pod = objects.get(plane.kube, "Pod", name, NAMESPACE)
    refusal = "" if verdict == "bound" else _extender_refusal(plane, pod, node)
    return verdict, detail, devices, refusal


@pytest.mark.parametrize("mode", MODES)
def test_list_valued_constraints_as_the_real_scheduler_decides(gated: ControlPlane, mode: str) -> None:
    gated.use(mode)
    v136 = gated.version == "1.36"
    # CEL sees the lists in both versions: a selector on a list finds the one device with NUMA 3.
    verdict, detail, devices, _ = _run(
        gated, mode, "includes", _claim(1, None, f'device.attributes["{DRIVER}"].numa.includes(3)')
    )
    assert (verdict, devices) == ("bound", ["gpu-2"]), detail
    # One list-valued device under a constraint: upstream always takes a constraint's first device.
    verdict, detail, devices, _ = _run(gated, mode, "match-one", _claim(1, "matchAttribute"))
    assert verdict == "bound" and len(devices) == 1, detail

    verdict, detail, devices, refusal = _run(gated, mode, "match-two", _claim(2, "matchAttribute"))
    if v136:
        assert verdict == "unschedulable", f"1.36 scheduler compares scalars only: {verdict} {devices}"
        assert refusal, "the extender's /filter passes a node the 1.36 scheduler refuses"
        assert "no combination of the node's devices satisfies" in refusal, refusal
    else:
        assert (verdict, devices) == ("bound", ["gpu-0", "gpu-1"]), detail  # they share NUMA 1

    verdict, detail, devices, refusal = _run(gated, mode, "distinct-two", _claim(2, "distinctAttribute"))
    if v136:
        assert verdict == "unschedulable", f"1.36 scheduler compares scalars only: {verdict} {devices}"
        assert refusal, "the extender's /filter passes a node the 1.36 scheduler refuses"
        assert "no combination of the node's devices satisfies" in refusal, refusal
    else:
        assert verdict == "bound", detail
        first, second = (set(NUMA[d]) for d in devices)
        assert not first & second, devices
