"""A device-plugin-style pod (`example.com/gpu: 2` in its limits, no ResourceClaim) scheduled by
the real kube-scheduler 1.36.3 onto a DRA node (KEP-5004, the DRAExtendedResource gate, beta and
on by default in 1.36): the sample's DeviceClass h100.nvidia.com maps `example.com/gpu`.

Allocator mode: the profile's DynamicResources plugin is disabled, so nothing in kube-scheduler
looks at the resource but NodeResourcesFit, which leaves a resource a class maps to DRA on nodes
that do not advertise it (`shouldDelegateResourceToDRA`; the DRA manager exists whenever the
DynamicResourceAllocation gate is on, whatever the profile). The extender filters and ranks, and
its bind creates the claim, allocates it and records it in the pod's status.

Advisory mode: the in-tree plugin handles the resource (and creates the claim at PreBind) on the
node our prioritize ranked highest.

l40s-node-01 advertises `example.com/gpu: 4` in the sample (a device plugin); these tests set it
to 0 for their duration, which makes the resource DRA's there too (upstream: allocatable 0 counts
as not served by a device plugin), and the node has no H100: so the pod must go to an H100 node.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e import objects
from tests.e2e.cluster import ControlPlane, object_path
from tests.e2e.conftest import ALLOCATOR_SCHEDULER, DEFAULT_SCHEDULER, wait_until
from tests.e2e.test_scheduling_modes import _decisions, _device_nodes, _our_best

pytestmark = pytest.mark.e2e

RESOURCE = "example.com/gpu"
PLUGIN_NODE = "l40s-node-01"
ANNOTATION = "resource.kubernetes.io/extended-resource-claim"


@pytest.fixture
def plugin_node_at_zero(plane: ControlPlane) -> Iterator[None]:
    """l40s-node-01 with `example.com/gpu: 0` in its status for the test, then as it was."""
    path = object_path("Node", PLUGIN_NODE) + "/status"
    before = plane.kube.get(object_path("Node", PLUGIN_NODE))
    assert before["status"]["allocatable"].get(RESOURCE) == "4", "the sample's device-plugin node"
    zero = copy.deepcopy(before)
    zero["status"]["allocatable"][RESOURCE] = "0"
    zero["status"]["capacity"][RESOURCE] = "0"
    plane.kube.request("PUT", path, zero)
    yield
    now = plane.kube.get(object_path("Node", PLUGIN_NODE))
    now["status"] = before["status"]
    plane.kube.request("PUT", path, now)


def gpu_pod(name: str, scheduler: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml-training"},
        "spec": {
            "schedulerName": scheduler,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"limits": {RESOURCE: "2"}},
                }
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }


def _bound(plane: ControlPlane, name: str) -> dict[str, Any] | None:
    pod = objects.get(plane.kube, "Pod", name, "ml-training")
    status = pod.get("status", {}).get("extendedResourceClaimStatus")
    return pod if pod["spec"].get("nodeName") and status else None


def _check(plane: ControlPlane, pod: dict[str, Any]) -> dict[str, Any]:
    """The pod is on a node we ranked highest, its status names the claim kube-scheduler's rules
    create, and that claim holds 2 H100s of that node for the pod."""
    node = pod["spec"]["nodeName"]
    assert node.startswith("h100-"), f"{RESOURCE} maps to h100.nvidia.com, but the pod is on {node}"
    assert node in _our_best(_decisions(plane), pod), f"bound to {node}, not a node we ranked highest"
    status = pod["status"]["extendedResourceClaimStatus"]
    assert status["requestMappings"] == [
        {"containerName": "main", "resourceName": RESOURCE, "requestName": "container-0-request-0"}
    ]
    claim = objects.get(plane.kube, "ResourceClaim", status["resourceClaimName"], "ml-training")
    meta = claim["metadata"]
    assert meta["name"].startswith(f"{pod['metadata']['name']}-extended-resources-")
    assert meta["annotations"][ANNOTATION] == "true"
    [owner] = meta["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "Pod",
        pod["metadata"]["name"],
        pod["metadata"]["uid"],
        True,
    )
    assert "resource.kubernetes.io/delete-protection" in meta["finalizers"]
    [request] = claim["spec"]["devices"]["requests"]
    exactly = request["exactly"]
    assert (request["name"], exactly["deviceClassName"], exactly["allocationMode"], exactly["count"]) == (
        "container-0-request-0",
        "h100.nvidia.com",
        "ExactCount",
        2,
    )
    devices = objects.allocated_devices(claim)
    assert len(devices) == 2
    where = _device_nodes(plane)
    assert {where[d] for d in devices} == {node}
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod["metadata"]["uid"]]
    return claim


def _cleanup_claim(plane: ControlPlane, claim: dict[str, Any]) -> None:
    """The pod's claim goes with the pod (garbage collector; the resourceclaim controller frees
    it): wait for that, so the next test finds every device free."""

    def gone() -> bool:
        names = {c["metadata"]["name"] for c in objects.list_of(plane.kube, "ResourceClaim", "ml-training")}
        return claim["metadata"]["name"] not in names

    wait_until("the extended-resource claim deleted with its pod", gone, timeout=60)


def test_allocator_mode_places_a_device_plugin_style_pod_on_a_dra_node(
    plane: ControlPlane, pods: list[dict[str, Any]], plugin_node_at_zero: None
) -> None:
    plane.use("allocator")
    pods.extend(objects.create_pods(plane.kube, [gpu_pod("gpu-by-resource", ALLOCATOR_SCHEDULER)]))
    pod = wait_until("the pod bound with its claim recorded", lambda: _bound(plane, "gpu-by-resource"), 120)
    claim = _check(plane, pod)
    # Our bind created it: kube-scheduler's plugin is off in this profile.
    assert claim["metadata"]["generateName"] == "gpu-by-resource-extended-resources-"
    objects.delete(plane.kube, "Pod", "gpu-by-resource", "ml-training")
    _cleanup_claim(plane, claim)


def test_advisory_mode_in_tree_plugin_serves_the_resource_on_our_node(
    plane: ControlPlane, pods: list[dict[str, Any]], plugin_node_at_zero: None
) -> None:
    plane.use("advisory")
    pods.extend(objects.create_pods(plane.kube, [gpu_pod("gpu-by-resource-adv", DEFAULT_SCHEDULER)]))
    pod = wait_until(
        "the pod bound with its claim recorded", lambda: _bound(plane, "gpu-by-resource-adv"), 120
    )
    claim = _check(plane, pod)
    objects.delete(plane.kube, "Pod", "gpu-by-resource-adv", "ml-training")
    _cleanup_claim(plane, claim)
