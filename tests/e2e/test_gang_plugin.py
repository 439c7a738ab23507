"""Gangs through upstream's own gang scheduling: PodGroups, the GangScheduling plugin and
TopologyAwareWorkloadScheduling in the real kube-scheduler, with the extender in allocator mode.

The fleet is three NVL72-style racks of six GB200 trays (4 GPUs each, one NVLink clique per rack,
the clique as node label and as device attribute: `bench.gang_placement.cluster_objects`). Each
gang is a PodGroup (`spec.schedulingPolicy.gang.minCount`, topology key = the clique label) whose
pods each claim one tray's four GPUs from a ResourceClaimTemplate and name the group in
`spec.schedulingGroup.podGroupName`. What upstream's programs must show with the extender in the
loop:
- all-or-nothing: below `minCount` no member binds and no claim is allocated; the last member
  admits the gang and every member binds, all in one clique;
- the extender's watch lists PodGroups from the version the API server serves;
- a claim the PodGroup shares (`DRAWorkloadResourceClaims`: the PodGroup's `spec.resourceClaims`
  names a template, the resourceclaim controller makes one claim owned by the group and names it
  in the group's and every member's status) is allocated once, from the NVLink domain of the
  clique the gang lands in (an IMEX-style channel every tray of that rack reaches), and reserved
  for the PodGroup, not for each pod, as upstream's `resourceclaim.BindTo` says.

- the pod-group cycle filters every member before any binds, and in allocator mode nothing in
  the scheduler counts an earlier member's devices: the extender's holds
  (extender/core/gang_cycle.py) keep each member on its own tray. Before them the scheduler
  stacked a 6-member gang on the 2 free trays of a partly used rack and a 7-member gang on a
  6-tray rack, and the binds admitted part of each gang. Now the 6-member gang takes a whole free
  rack, and the 7-member gang binds nothing, allocates nothing and leaves every tray free for
  the next gang.

Feature gates and API (pkg/features/kube_features.go of each version): 1.37 serves
`scheduling.k8s.io/v1beta1` with `GenericWorkload` (beta, off by default), which also enables the
GangScheduling plugin, and `TopologyAwareWorkloadScheduling` (alpha); 1.36 serves v1alpha2 and
needs `GenericWorkload`, `GangScheduling` and `TopologyAwareWorkloadScheduling` (all alpha).
`DRAWorkloadResourceClaims` (alpha in 1.36, beta but off in 1.37) is on in every component,
the extender included (`--feature-gates`). `WorkloadWithJob` (alpha in both) lets the Job
controller make the Workload and PodGroup of a Job: in 1.36 for an Indexed Job whose
completions equal its parallelism (a gang of that size, no constraint, no claims); in 1.37 from
the Job's `spec.scheduling` (gang policy, topology constraint, shared claims). Runs
against the newest version of `DRA_E2E_KUBERNETES` (1.37 in CI, where time is counted);
`DRA_E2E_KUBERNETES=1.36` runs it against 1.36.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from typing import Any

import pytest

from bench.gang_placement import DEVICE_CLASS, GPUS_PER_TRAY, cluster_objects
from extender.core.gang import CLIQUE_LABEL
from loadtests.generate import NAMESPACE
from tests.e2e import objects
from tests.e2e.cluster import EXTENDERS, KUBERNETES_VERSIONS, ControlPlane, Process, object_path, running
from tests.e2e.conftest import ALLOCATOR_SCHEDULER, DEFAULT_SCHEDULER, wait_until

pytestmark = pytest.mark.e2e

Obj = dict[str, Any]

#: Per version: (feature gates, the PodGroup API version served).
WORKLOAD_API: dict[str, tuple[dict[str, bool], str]] = {
    "1.36": (
        {
            "GenericWorkload": True,
            "GangScheduling": True,
            "TopologyAwareWorkloadScheduling": True,
            "DRAWorkloadResourceClaims": True,
            "WorkloadWithJob": True,
        },
        "scheduling.k8s.io/v1alpha2",
    ),
    "1.37": (
        {
            "GenericWorkload": True,
            "TopologyAwareWorkloadScheduling": True,
            "DRAWorkloadResourceClaims": True,
            "WorkloadWithJob": True,
        },
        "scheduling.k8s.io/v1beta1",
    ),
}
RACKS, TRAYS = 3, 6
TEMPLATE = "tray"
#: The shared claim's template, driver and class: one channel of the rack's NVLink (IMEX) domain.
CHANNEL_TEMPLATE, CHANNEL_DRIVER, CHANNEL_CLASS = (
    "domain-channel",
    "compute-domain.nvidia.com",
    "compute-domain",
)
CHANNELS_PER_DOMAIN = 4


class GangPlane(ControlPlane):
    """A control plane serving the Workload API with upstream's gang scheduling enabled."""

    def __post_init__(self) -> None:
        super().__post_init__()
        gates, api = WORKLOAD_API[self.version]
        self.feature_gates = dict(gates)
        self.runtime_config = (f"{api}=true",)
        # The API server's admission gives each PodGroup a protection finalizer; this controller
        # lifts it once the group has no pods, so a deleted group (and the claims it owns) goes.
        self.controllers = (*self.controllers, "podgroup-protection-controller")

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Process:
        if name in EXTENDERS:  # the extender knows the DRA gates only
            argv = [*argv, "--feature-gates=DRAWorkloadResourceClaims=true"]
        return super()._spawn(name, argv, env)


@pytest.fixture(scope="module", params=KUBERNETES_VERSIONS[-1:], ids=lambda v: f"k8s-{v}")
def plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    with running(version=request.param, name="gangs", kind=GangPlane) as control:
        fleet, _, clique_of = cluster_objects(RACKS, TRAYS)
        fleet += _channel_domains(sorted(set(clique_of.values())))
        objects.publish(control.kube, [objects.clean(o) for o in fleet])
        control.kube.apply_all([_template(), _channel_template()])
        control.use("allocator")
        yield control


def _template() -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": TEMPLATE, "namespace": NAMESPACE},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "gpus", "exactly": {"deviceClassName": DEVICE_CLASS, "count": GPUS_PER_TRAY}}
                    ]
                }
            }
        },
    }


def _channel_domains(cliques: list[str]) -> list[Obj]:
    """The channel class and, per clique, a slice of channels every node of that clique reaches
    (`nodeSelector` on the clique label), as an IMEX/ComputeDomain driver publishes them."""
    found: list[Obj] = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": CHANNEL_CLASS},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{CHANNEL_DRIVER}"'}}]},
        }
    ]
    for clique in cliques:
        found.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"domain-{clique}"},
                "spec": {
                    "driver": CHANNEL_DRIVER,
                    "pool": {"name": f"domain-{clique}", "generation": 1, "resourceSliceCount": 1},
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": CLIQUE_LABEL, "operator": "In", "values": [clique]}
                                ]
                            }
                        ]
                    },
                    "devices": [{"name": f"channel-{i}"} for i in range(CHANNELS_PER_DOMAIN)],
                },
            }
        )
    return found


def _channel_template() -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": CHANNEL_TEMPLATE, "namespace": NAMESPACE},
        "spec": {
            "spec": {
                "devices": {"requests": [{"name": "channel", "exactly": {"deviceClassName": CHANNEL_CLASS}}]}
            }
        },
    }


def _pod_group(plane: ControlPlane, name: str, min_count: int) -> Obj:
    return {
        "apiVersion": WORKLOAD_API[plane.version][1],
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": min_count}},
            "schedulingConstraints": {"topology": [{"key": CLIQUE_LABEL}]},
        },
    }


def _member(group: str, index: int) -> Obj:
    pod = objects.pod(f"{group}-{index}", NAMESPACE, ALLOCATOR_SCHEDULER, {"gpus": TEMPLATE})
    pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    pod["spec"]["terminationGracePeriodSeconds"] = 0
    return pod


def _create_group(plane: ControlPlane, obj: Obj) -> None:
    api = obj["apiVersion"]
    plane.kube.request("POST", f"/apis/{api}/namespaces/{NAMESPACE}/podgroups", obj, ok=(201,))


def _pods(plane: ControlPlane, group: str) -> list[Obj]:
    return [
        p
        for p in objects.list_of(plane.kube, "Pod", NAMESPACE)
        if (p["spec"].get("schedulingGroup") or {}).get("podGroupName") == group
    ]


def _allocated_claims(plane: ControlPlane, pods: list[Obj]) -> list[Obj]:
    uids = {p["metadata"]["uid"] for p in pods}
    return [
        c
        for c in objects.list_of(plane.kube, "ResourceClaim", NAMESPACE)
        if c.get("status", {}).get("allocation")
        and any(o.get("uid") in uids for o in c["metadata"].get("ownerReferences", []))
    ]


def _cliques(plane: ControlPlane, pods: list[Obj]) -> set[str]:
    nodes = {n["metadata"]["name"]: n for n in objects.list_of(plane.kube, "Node")}
    return {nodes[p["spec"]["nodeName"]]["metadata"]["labels"][CLIQUE_LABEL] for p in pods}


def _released(plane: ControlPlane, pods: list[Obj]) -> bool:
    return not _allocated_claims(plane, pods)


def _delete_group(plane: ControlPlane, group: str) -> None:
    for pod in _pods(plane, group):
        plane.kube.request("DELETE", object_path("Pod", pod["metadata"]["name"], NAMESPACE), ok=(200, 404))
    wait_until(f"{group}'s pods gone", lambda: not _pods(plane, group), 60)
    api = WORKLOAD_API[plane.version][1]
    plane.kube.request("DELETE", f"/apis/{api}/namespaces/{NAMESPACE}/podgroups/{group}", ok=(200, 404))


def test_a_gang_waits_for_its_quorum_then_lands_whole_in_one_clique(plane: ControlPlane) -> None:
    _create_group(plane, _pod_group(plane, "train-a", 4))
    created = [plane.kube.create(_member("train-a", i)) for i in range(3)]
    time.sleep(15)  # three of four: the gang plugin admits none, whatever the extender says
    pods = _pods(plane, "train-a")
    assert not [p for p in pods if p["spec"].get("nodeName")], "a member bound below minCount"
    assert not _allocated_claims(plane, created), "a claim was allocated below minCount"
    plane.kube.create(_member("train-a", 3))
    bound = wait_until(
        "the whole gang bound",
        lambda: (lambda ps: ps if len(ps) == 4 and all(p["spec"].get("nodeName") for p in ps) else None)(
            _pods(plane, "train-a")
        ),
        120,
    )
    assert len(_cliques(plane, bound)) == 1, f"the gang spans cliques {_cliques(plane, bound)}"
    assert len({p["spec"]["nodeName"] for p in bound}) == 4  # a tray each
    claims = _allocated_claims(plane, bound)
    assert len(claims) == 4, "every member's claim allocated"

    _delete_group(plane, "train-a")
    wait_until("every claim released", lambda: not _allocated_claims(plane, bound), 60)


def _create_members(
    plane: ControlPlane, group: str, count: int, scheduler: str = ALLOCATOR_SCHEDULER
) -> list[Obj]:
    members = [_member(group, i) for i in range(count)]
    for member in members:
        member["spec"]["schedulerName"] = scheduler
    return [plane.kube.create(member) for member in members]


def _all_bound(plane: ControlPlane, group: str, count: int) -> list[Obj] | None:
    pods = _pods(plane, group)
    return pods if len(pods) == count and all(p["spec"].get("nodeName") for p in pods) else None


def test_a_gang_after_another_takes_a_whole_free_rack(plane: ControlPlane) -> None:
    """A 4-member gang leaves 2 trays of its rack free; a 6-member gang then needs a whole rack."""
    _create_group(plane, _pod_group(plane, "first-4", 4))
    _create_members(plane, "first-4", 4)
    first = wait_until("the 4-member gang bound", lambda: _all_bound(plane, "first-4", 4), 120)
    _create_group(plane, _pod_group(plane, "next-6", 6))
    _create_members(plane, "next-6", 6)
    bound = wait_until("the 6-member gang bound", lambda: _all_bound(plane, "next-6", 6), 120)
    assert len(_cliques(plane, bound)) == 1, f"the gang spans cliques {_cliques(plane, bound)}"
    assert _cliques(plane, bound) != _cliques(plane, first), "stacked on the partly used rack"
    assert len({p["spec"]["nodeName"] for p in bound}) == 6  # a tray each
    assert len(_allocated_claims(plane, bound)) == 6
    for group, pods in (("first-4", first), ("next-6", bound)):
        _delete_group(plane, group)
        wait_until(f"{group}'s claims released", functools.partial(_released, plane, pods), 60)


def test_a_gang_larger_than_every_rack_binds_nothing_and_holds_nothing(plane: ControlPlane) -> None:
    _create_group(plane, _pod_group(plane, "too-big-7", 7))
    created = _create_members(plane, "too-big-7", 7)
    time.sleep(20)  # several pod-group cycles and their retries
    pods = _pods(plane, "too-big-7")
    assert not [p for p in pods if p["spec"].get("nodeName")], "a member of a 7-gang bound on 6-tray racks"
    assert not _allocated_claims(plane, created), "a claim was allocated for a gang that cannot fit"
    for pod in pods:  # every waiting member says why
        (condition,) = [c for c in pod["status"].get("conditions") or () if c["type"] == "PodScheduled"]
        assert condition["status"] == "False" and condition.get("message"), condition
    # While it waits, its cycles leave no device held: a 6-member gang still gets a whole rack.
    _create_group(plane, _pod_group(plane, "beside-6", 6))
    _create_members(plane, "beside-6", 6)
    beside = wait_until("the 6-member gang bound", lambda: _all_bound(plane, "beside-6", 6), 120)
    assert len(_cliques(plane, beside)) == 1
    for group in ("too-big-7", "beside-6"):
        _delete_group(plane, group)
    wait_until("every claim released", lambda: not _allocated_claims(plane, [*created, *beside]), 60)


def test_the_extender_reads_the_served_pod_group_api(plane: ControlPlane) -> None:
    """Its watch listed PodGroups from the served version and never found the API unserved."""
    log = (plane.work / "extender.log").read_text(errors="replace")
    assert "PodGroup: listed" in log and "PodGroup: the API is not served" not in log, log[-2000:]


def test_a_claim_the_pod_group_shares_is_allocated_once_and_reserved_for_the_group(
    plane: ControlPlane,
) -> None:
    group = _pod_group(plane, "shared-3", 3)
    group["spec"]["resourceClaims"] = [{"name": "domain", "resourceClaimTemplateName": CHANNEL_TEMPLATE}]
    _create_group(plane, group)
    for index in range(3):
        member = _member("shared-3", index)
        member["spec"]["resourceClaims"].append(
            {"name": "domain", "resourceClaimTemplateName": CHANNEL_TEMPLATE}
        )
        member["spec"]["containers"][0]["resources"]["claims"].append({"name": "domain"})
        plane.kube.apply_all([member])
    bound = wait_until("the 3-member gang bound", lambda: _all_bound(plane, "shared-3", 3), 120)
    (clique,) = _cliques(plane, bound)
    api = WORKLOAD_API[plane.version][1]
    stored = plane.kube.request("GET", f"/apis/{api}/namespaces/{NAMESPACE}/podgroups/shared-3")
    (made,) = stored["status"]["resourceClaimStatuses"]
    name = made["resourceClaimName"]
    for pod in bound:  # every member uses the group's claim, none has one of its own for it
        statuses = {s["name"]: s.get("resourceClaimName") for s in pod["status"]["resourceClaimStatuses"]}
        assert statuses["domain"] == name, statuses
    claim = plane.kube.request("GET", object_path("ResourceClaim", name, NAMESPACE))
    (owner,) = claim["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner.get("controller")) == ("PodGroup", "shared-3", True)
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert result["pool"] == f"domain-{clique}", "the channel is not from the gang's NVLink domain"
    assert claim["status"]["reservedFor"] == [
        {
            "apiGroup": "scheduling.k8s.io",
            "resource": "podgroups",
            "name": "shared-3",
            "uid": stored["metadata"]["uid"],
        }
    ]
    own = _allocated_claims(plane, bound)  # the trays: each reserved for its own member
    assert len(own) == 3
    assert {c["status"]["reservedFor"][0]["uid"] for c in own} == {p["metadata"]["uid"] for p in bound}
    _delete_group(plane, "shared-3")
    wait_until("the trays released", lambda: not _allocated_claims(plane, bound), 60)
    try:
        wait_until("the group's claim deleted with its PodGroup", lambda: _claim(plane, name) is None, 60)
    except AssertionError as exc:
        pod_group = plane.kube.request(
            "GET", f"/apis/{api}/namespaces/{NAMESPACE}/podgroups/shared-3", ok=(200, 404)
        )
        raise AssertionError(f"{exc}; claim {_claim(plane, name)}; PodGroup {pod_group}") from None


def _claim(plane: ControlPlane, name: str) -> Obj | None:
    found = plane.kube.request("GET", object_path("ResourceClaim", name, NAMESPACE), ok=(200, 404))
    return found if found and found.get("kind") == "ResourceClaim" else None


def test_the_job_controller_makes_the_gang_of_a_batch_job(plane: ControlPlane) -> None:
    """An Indexed Job of 4 tray-sized pods: the Job controller (`WorkloadWithJob`) creates its
    Workload and PodGroup and names the group in every pod; the gang lands whole in one clique.
    On 1.37 the Job's `spec.scheduling` also gives the topology key and a claim shared by the
    group (`job_scheduling_manager.go` of each version)."""
    template = _member("job", 0)["spec"]
    template.pop("schedulingGroup")
    template["restartPolicy"] = "Never"
    job: Obj = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "trainer", "namespace": NAMESPACE},
        "spec": {
            "completionMode": "Indexed",
            "completions": 4,
            "parallelism": 4,
            "template": {"metadata": {"labels": {"app": "trainer"}}, "spec": template},
        },
    }
    shares = plane.version != "1.36"  # 1.36's Job has no spec.scheduling
    if shares:
        domain = {"name": "domain", "resourceClaimTemplateName": CHANNEL_TEMPLATE}
        template["resourceClaims"].append(domain)
        template["containers"][0]["resources"]["claims"].append({"name": "domain"})
        job["spec"]["scheduling"] = {
            "schedulingPolicy": {"gang": {"minCount": 4}},
            "schedulingConstraints": {"topology": [{"key": CLIQUE_LABEL}]},
            "resourceClaims": [domain],
        }
    plane.kube.request("POST", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs", job)

    def bound() -> list[Obj] | None:
        pods = [
            p
            for p in objects.list_of(plane.kube, "Pod", NAMESPACE)
            if p["metadata"]["name"].startswith("trainer-")
        ]
        return pods if len(pods) == 4 and all(p["spec"].get("nodeName") for p in pods) else None

    pods = wait_until("the Job's 4 pods bound", bound, 120)
    (group_name,) = {p["spec"].get("schedulingGroup", {}).get("podGroupName") for p in pods}
    assert group_name, "the Job controller named no PodGroup in the pods"
    api = WORKLOAD_API[plane.version][1]
    group = plane.kube.request("GET", f"/apis/{api}/namespaces/{NAMESPACE}/podgroups/{group_name}")
    assert group["spec"]["schedulingPolicy"]["gang"]["minCount"] == 4
    assert len(_cliques(plane, pods)) == 1, f"the Job's gang spans cliques {_cliques(plane, pods)}"
    assert len({p["spec"]["nodeName"] for p in pods}) == 4
    assert len(_allocated_claims(plane, pods)) == 4  # a tray each, reserved for its pod
    if shares:
        (made,) = group["status"]["resourceClaimStatuses"]
        claim = plane.kube.request("GET", object_path("ResourceClaim", made["resourceClaimName"], NAMESPACE))
        assert claim["status"]["reservedFor"] == [
            {
                "apiGroup": "scheduling.k8s.io",
                "resource": "podgroups",
                "name": group_name,
                "uid": group["metadata"]["uid"],
            }
        ]
    plane.kube.request(
        "DELETE",
        f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/trainer?propagationPolicy=Foreground",
        ok=(200, 202),
    )
    wait_until("the Job's claims released", functools.partial(_released, plane, pods), 90)


def test_advisory_mode_gangs_land_whole_with_the_in_tree_plugin_allocating(plane: ControlPlane) -> None:
    """Advisory mode: the in-tree DynamicResources plugin allocates in the pod-group cycle and
    the extender only filters and scores (its holds pick each member's node). A 4-member gang
    binds in one clique; a 6-member gang after it takes a whole free rack, as in allocator mode."""
    plane.use("advisory")
    try:
        _create_group(plane, _pod_group(plane, "adv-4", 4))
        _create_members(plane, "adv-4", 4, DEFAULT_SCHEDULER)
        first = wait_until("the 4-member gang bound", lambda: _all_bound(plane, "adv-4", 4), 120)
        _create_group(plane, _pod_group(plane, "adv-6", 6))
        _create_members(plane, "adv-6", 6, DEFAULT_SCHEDULER)
        bound = wait_until("the 6-member gang bound", lambda: _all_bound(plane, "adv-6", 6), 120)
        assert len(_cliques(plane, first)) == 1 and len(_cliques(plane, bound)) == 1
        assert _cliques(plane, bound) != _cliques(plane, first), "stacked on the partly used rack"
        assert len({p["spec"]["nodeName"] for p in [*first, *bound]}) == 10  # a tray each
        assert len(_allocated_claims(plane, [*first, *bound])) == 10  # by the in-tree plugin
        for group, pods in (("adv-4", first), ("adv-6", bound)):
            _delete_group(plane, group)
            wait_until(f"{group}'s claims released", functools.partial(_released, plane, pods), 60)
    finally:
        plane.use("allocator")
