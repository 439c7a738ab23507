"""KubeBinder and pods asking for extended resources backed by DRA (KEP-5004), on the fake API
server with the real client and watch: what bind writes (the claim upstream's PreBind creates,
its allocation, the pod's `status.extendedResourceClaimStatus`, then the Binding), what it
writes on a node whose device plugin serves the resource (only the Binding), and the undo when
the Binding fails (the created claim is deleted)."""

from __future__ import annotations

import pytest

from extender.claims import DELETE_PROTECTION_FINALIZER
from extender.core import observed
from extender.core.extended import CLAIM_ANNOTATION
from extender.kube.binder import KubeBinder
from extender.objects import Obj
from extender.verdicts import API_ERROR, OK
from tests.fakeapi.server import FakeApiServer
from tests.kube.cluster import (
    GPU_CLASS,
    NAMESPACE,
    Harness,
    allocated_devices,
    allocation,
    device_class,
    gpu_slice,
    node,
    reserved_uids,
    writes,
)

RESOURCE = "example.com/gpu"
CREATE_CLAIM = ("create", "resourceclaims", "")
CLAIM_UPDATE = ("update", "resourceclaims", "")
STATUS_UPDATE = ("update", "resourceclaims", "status")
POD_STATUS = ("patch", "pods", "status")
BINDING = ("create", "pods", "binding")


def gpu_pod(name: str, count: int, *, scheduler: str = "dra-extender") -> Obj:
    """A device-plugin-style pod: `example.com/gpu` in a container's limits, no claims."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "schedulerName": scheduler,
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"limits": {RESOURCE: str(count)}}}
            ],
        },
        "status": {"phase": "Pending"},
    }


def seed(api: FakeApiServer, *, plugin_node: bool = False) -> None:
    cls = device_class()
    cls["spec"]["extendedResourceName"] = RESOURCE
    api.put_object(cls)
    api.put_object(node("n1"))
    api.put_object(gpu_slice("n1", 4))
    if plugin_node:
        plugin = node("dp")
        plugin["status"] = {"allocatable": {RESOURCE: "8", "cpu": "8"}}
        api.put_object(plugin)
    api.put_object(gpu_pod("p1", 2))


def extended_claims(api: FakeApiServer) -> list[Obj]:
    return [
        c
        for c in api.list_objects("ResourceClaim")
        if (c["metadata"].get("annotations") or {}).get(CLAIM_ANNOTATION) == "true"
    ]


async def test_bind_creates_the_claim_allocates_it_records_it_on_the_pod_then_binds(fake_api: FakeApiServer):
    seed(fake_api)
    async with Harness(fake_api) as h:
        fake_api.clear_request_log()
        assert await h.bind("p1", "n1") == ("", OK)
        assert writes(fake_api) == [CREATE_CLAIM, CLAIM_UPDATE, STATUS_UPDATE, POD_STATUS, BINDING]
        pod = h.pod("p1")
        [made] = extended_claims(fake_api)
        meta = made["metadata"]
        assert meta["name"].startswith("p1-extended-resources-")
        assert meta["generateName"] == "p1-extended-resources-"
        assert meta["ownerReferences"] == [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": "p1",
                "uid": pod["metadata"]["uid"],
                "controller": True,
            }
        ]
        assert meta["finalizers"] == [DELETE_PROTECTION_FINALIZER]
        assert made["spec"]["devices"]["requests"] == [
            {
                "name": "container-0-request-0",
                "exactly": {"deviceClassName": GPU_CLASS, "allocationMode": "ExactCount", "count": 2},
            }
        ]
        assert len(allocated_devices(made)) == 2
        assert {r["request"] for r in made["status"]["allocation"]["devices"]["results"]} == {
            "container-0-request-0"
        }
        assert reserved_uids(made) == [pod["metadata"]["uid"]]
        assert pod["status"]["extendedResourceClaimStatus"] == {
            "requestMappings": [
                {"containerName": "main", "resourceName": RESOURCE, "requestName": "container-0-request-0"}
            ],
            "resourceClaimName": meta["name"],
        }
        assert pod["spec"]["nodeName"] == "n1"
        # The assumed allocation moved to the created claim's UID, then left with the watch.
        await h.caught_up()


async def test_bind_reports_the_created_claim_under_its_real_name(fake_api: FakeApiServer):
    """What the dashboard's bind decision shows (`observed.report_bound`): the claim the API
    server named, marked created, with the devices written; a device-plugin node: nothing."""
    seed(fake_api, plugin_node=True)
    fake_api.put_object(gpu_pod("p2", 1))
    async with Harness(fake_api) as h:
        with observed.collecting_binds() as bound:
            assert await h.bind("p1", "n1") == ("", OK)
        [made] = extended_claims(fake_api)
        results = made["status"]["allocation"]["devices"]["results"]
        assert bound == [
            observed.Bound(
                f"{NAMESPACE}/{made['metadata']['name']}",
                tuple(f"{r['driver']}/{r['pool']}/{r['device']}" for r in results),
                created=True,
            )
        ]
        with observed.collecting_binds() as bound:
            assert await h.bind("p2", "dp") == ("", OK)
        assert bound == []


async def test_a_second_pod_gets_the_devices_the_first_did_not_take(fake_api: FakeApiServer):
    seed(fake_api)
    fake_api.put_object(gpu_pod("p2", 2))
    fake_api.put_object(gpu_pod("p3", 1))
    async with Harness(fake_api) as h:
        assert await h.bind("p1", "n1") == ("", OK)
        assert await h.bind("p2", "n1") == ("", OK)
        error, _ = await h.bind("p3", "n1")  # the node's 4 GPUs are taken
        assert "cannot be bound to node n1" in error
        taken = [d for c in extended_claims(fake_api) for d in allocated_devices(c)]
        assert sorted(taken) == ["n1/gpu-0", "n1/gpu-1", "n1/gpu-2", "n1/gpu-3"]


async def test_a_device_plugin_node_gets_only_the_binding(fake_api: FakeApiServer):
    seed(fake_api, plugin_node=True)
    async with Harness(fake_api) as h:
        fake_api.clear_request_log()
        assert await h.bind("p1", "dp") == ("", OK)
        assert writes(fake_api) == [BINDING]
        assert extended_claims(fake_api) == []
        assert "extendedResourceClaimStatus" not in h.pod("p1")["status"]


async def test_a_failed_binding_deletes_the_created_claim(fake_api: FakeApiServer):
    seed(fake_api)
    async with Harness(fake_api) as h:
        fake_api.fail_next(1, 500, verb="create", resource="pods", subresource="binding")
        error, reason = await h.bind("p1", "n1")
        assert reason == API_ERROR, error
        assert extended_claims(fake_api) == []
        assert not h.pod("p1")["spec"].get("nodeName")
        # Nothing stays assumed: the retry finds the devices free and succeeds.
        assert await h.bind("p1", "n1") == ("", OK)
        [made] = extended_claims(fake_api)
        assert len(allocated_devices(made)) == 2


@pytest.mark.parametrize("places", [False, True])
async def test_another_profiles_pod_gets_no_claim_from_us(fake_api: FakeApiServer, places: bool):
    """A pod of a profile whose DynamicResources plugin creates the claim at PreBind is only
    bound; with the profile in scheduler_names the extender creates the claim itself."""
    seed(fake_api)
    async with Harness(fake_api) as h:
        names = ("dra-extender",) if places else ("another-scheduler",)
        h.binder.close()
        h.binder = KubeBinder(fake_api.api_client(), h.state, h.placement, scheduler_names=names)
        fake_api.clear_request_log()
        assert await h.bind("p1", "n1") == ("", OK)
        assert (CREATE_CLAIM in writes(fake_api)) == places
        assert len(extended_claims(fake_api)) == (1 if places else 0)


@pytest.mark.parametrize("watch_lags", [False, True])
async def test_a_claim_the_in_tree_plugin_made_at_prebind_is_not_made_twice(
    fake_api: FakeApiServer, watch_lags: bool
):
    """A default-scheduler pod in allocator mode: its DynamicResources plugin created, allocated
    and recorded the claim at PreBind, then the scheduler calls our bind. Whether or not the
    watch shows that claim yet, the bind creates nothing and only binds."""
    seed(fake_api)
    async with Harness(fake_api) as h:
        if watch_lags:
            fake_api.stall_watches("ResourceClaim")
        uid = h.pod("p1")["metadata"]["uid"]
        made = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "name": "p1-extended-resources-x7k2p",
                "namespace": NAMESPACE,
                "annotations": {CLAIM_ANNOTATION: "true"},
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Pod", "name": "p1", "uid": uid, "controller": True}
                ],
                "finalizers": [DELETE_PROTECTION_FINALIZER],
            },
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "container-0-request-0",
                            "exactly": {"deviceClassName": GPU_CLASS, "count": 2},
                        }
                    ]
                }
            },
            "status": {
                "allocation": allocation("n1", ["gpu-2", "gpu-3"], request="container-0-request-0"),
                "reservedFor": [{"resource": "pods", "name": "p1", "uid": uid}],
            },
        }
        fake_api.put_object(made)
        recorded = h.pod("p1")
        recorded["status"]["extendedResourceClaimStatus"] = {
            "requestMappings": [
                {"containerName": "main", "resourceName": RESOURCE, "requestName": "container-0-request-0"}
            ],
            "resourceClaimName": made["metadata"]["name"],
        }
        fake_api.put_object(recorded)
        if not watch_lags:
            await h.caught_up()
        fake_api.clear_request_log()
        assert await h.bind("p1", "n1") == ("", OK)
        assert writes(fake_api) == [BINDING]
        assert [c["metadata"]["name"] for c in extended_claims(fake_api)] == [made["metadata"]["name"]]
        if watch_lags:
            fake_api.unstall("ResourceClaim")
