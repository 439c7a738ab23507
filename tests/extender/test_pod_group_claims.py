"""`resolve_pod_claims` with `DRAWorkloadResourceClaims` (`pod_groups=True`): claims a pod shares
with its PodGroup, as k8s.io/dynamic-resource-allocation v0.37.2 `resourceclaim` decides them
(`BindTo`, `IsForPod`, `IsReservedForPod`), and the same pods with the gate off."""

from __future__ import annotations

import asyncio
from typing import Any

from extender.allocator.features import Features
from extender.binder import InMemoryBinder
from extender.claims import RESERVED_FOR_MAX, consumer_for, resolve_pod_claims
from extender.cluster.state import ClusterState
from extender.core.assumed import AssumeCache
from extender.core.placement import Placement
from extender.pods import parse_pod
from tests.core import small_cluster as c

GROUP = "train"
GROUP_UID = "uid-train"
GROUP_ENTRY = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": GROUP, "uid": GROUP_UID}


def _pod_group(claims: list[dict[str, Any]], statuses: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    group: dict[str, Any] = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": GROUP, "namespace": "default", "uid": GROUP_UID},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, "resourceClaims": claims},
    }
    if statuses is not None:
        group["status"] = {"resourceClaimStatuses": statuses}
    return group


def _member(
    entries: list[dict[str, Any]], statuses: list[dict[str, Any]] | None = None, uid: str = "pod-uid"
) -> Any:
    obj: dict[str, Any] = {
        "kind": "Pod",
        "metadata": {"name": "member-0", "namespace": "default", "uid": uid},
        "spec": {"schedulingGroup": {"podGroupName": GROUP}, "resourceClaims": entries},
    }
    if statuses is not None:
        obj["status"] = {"resourceClaimStatuses": statuses}
    return parse_pod(obj)


def _owned_by_group(claim: dict[str, Any], name: str = GROUP, api: str = "scheduling.k8s.io/v1beta1") -> None:
    claim["metadata"]["ownerReferences"] = [
        {"apiVersion": api, "kind": "PodGroup", "name": name, "uid": GROUP_UID, "controller": True}
    ]


def test_a_claim_named_by_pod_and_group_is_reserved_for_the_group_the_pods_own_for_the_pod() -> None:
    shared, own = c.claim("domain", 1), c.claim("own", 1)
    state = ClusterState.from_objects(
        [shared, own, _pod_group([{"name": "d", "resourceClaimName": "domain"}])]
    )
    pod = _member([{"name": "d", "resourceClaimName": "domain"}, {"name": "g", "resourceClaimName": "own"}])
    claims = resolve_pod_claims(pod, state, pod_groups=True)
    assert claims.problem == ""
    assert [(r.name, r.for_group) for r in claims.pending] == [("domain", True), ("own", False)]
    assert claims.group == GROUP_ENTRY
    pod_entry = {"resource": "pods", "name": "member-0", "uid": "pod-uid"}
    assert [consumer_for(r, claims, pod_entry) for r in claims.pending] == [GROUP_ENTRY, pod_entry]
    # Gate off: the same pod's claims are all its own (upstream passes no PodGroup to BindTo).
    off = resolve_pod_claims(pod, state)
    assert [r.for_group for r in off.pending] == [False, False] and off.group is None


def test_the_entry_must_match_the_group_claim_by_name_and_claim_name() -> None:
    state = ClusterState.from_objects(
        [c.claim("domain", 1), _pod_group([{"name": "other-name", "resourceClaimName": "domain"}])]
    )
    claims = resolve_pod_claims(
        _member([{"name": "d", "resourceClaimName": "domain"}]), state, pod_groups=True
    )
    assert [r.for_group for r in claims.pending] == [False] and claims.group is None


def test_a_template_claim_owned_by_the_pods_group_serves_the_pod_only_with_the_gate() -> None:
    made = c.claim("train-domain-x7", 1)
    _owned_by_group(made)
    group = _pod_group(
        [{"name": "d", "resourceClaimTemplateName": "domain"}],
        [{"name": "d", "resourceClaimName": "train-domain-x7"}],
    )
    state = ClusterState.from_objects([made, group])
    pod = _member(
        [{"name": "d", "resourceClaimTemplateName": "domain"}],
        [{"name": "d", "resourceClaimName": "train-domain-x7"}],
    )
    claims = resolve_pod_claims(pod, state, pod_groups=True)
    assert claims.problem == "" and [(r.name, r.for_group) for r in claims.pending] == [
        ("train-domain-x7", True)
    ]
    assert resolve_pod_claims(pod, state).problem == (
        "ResourceClaim default/train-domain-x7 was not created for pod default/member-0 (pod is not owner)"
    )


def test_a_claim_owned_by_another_group_or_kind_is_refused_naming_both_owners() -> None:
    expected = (
        "ResourceClaim default/train-domain-x7 was not created for pod default/member-0 "
        "(neither pod nor PodGroup train is the owner)"
    )
    pod = _member(
        [{"name": "d", "resourceClaimTemplateName": "domain"}],
        [{"name": "d", "resourceClaimName": "train-domain-x7"}],
    )
    for name, api in (("other-group", "scheduling.k8s.io/v1beta1"), (GROUP, "example.com/v1")):
        made = c.claim("train-domain-x7", 1)
        _owned_by_group(made, name, api)
        state = ClusterState.from_objects([made, _pod_group([])])
        assert resolve_pod_claims(pod, state, pod_groups=True).problem == expected
    # Another version of the scheduling API is the same group (upstream ignores the version).
    made = c.claim("train-domain-x7", 1)
    _owned_by_group(made, GROUP, "scheduling.k8s.io/v1alpha2")
    state = ClusterState.from_objects([made, _pod_group([])])
    assert resolve_pod_claims(pod, state, pod_groups=True).problem == ""


def test_a_missing_pod_group_makes_a_pod_with_claims_unschedulable() -> None:
    state = ClusterState.from_objects([c.claim("own", 1)])
    pod = _member([{"name": "g", "resourceClaimName": "own"}])
    assert resolve_pod_claims(pod, state, pod_groups=True).problem == (
        'podgroup.scheduling.k8s.io "train" not found'
    )
    assert resolve_pod_claims(pod, state).problem == ""  # gate off: the group is not read


def test_a_full_claim_reserved_for_the_group_is_not_in_use_for_its_members() -> None:
    full = c.held("domain", "a", ["gpu-0"])
    full["status"]["reservedFor"] = [GROUP_ENTRY] + [
        {"resource": "pods", "name": f"p{i}", "uid": f"u{i}"} for i in range(RESERVED_FOR_MAX - 1)
    ]
    state = ClusterState.from_objects([full, _pod_group([{"name": "d", "resourceClaimName": "domain"}])])
    pod = _member([{"name": "d", "resourceClaimName": "domain"}], uid="newcomer")
    claims = resolve_pod_claims(pod, state, pod_groups=True)
    assert claims.problem == "" and [(r.name, r.for_group) for r in claims.allocated] == [("domain", True)]
    assert claims.allocated[0].reserved_for_groups == (GROUP,)
    assert resolve_pod_claims(pod, state).problem == "resourceclaim in use"


def _file_bind(gates: dict[str, bool]) -> dict[str, Any]:
    """Two members bound in file mode, each with its own claim and the group's: the group claim."""
    objects = [
        c.node("a"),
        c.gpu_class(),
        *c.gpus("a", 4),
        c.claim("domain", 1),
        c.claim("own-0", 1),
        c.claim("own-1", 1),
        _pod_group([{"name": "d", "resourceClaimName": "domain"}]),
    ]
    for index in range(2):
        objects.append(
            {
                "kind": "Pod",
                "metadata": {"name": f"member-{index}", "namespace": "default", "uid": f"uid-{index}"},
                "spec": {
                    "schedulingGroup": {"podGroupName": GROUP},
                    "resourceClaims": [
                        {"name": "d", "resourceClaimName": "domain"},
                        {"name": "g", "resourceClaimName": f"own-{index}"},
                    ],
                },
            }
        )
    placement = Placement(
        ClusterState.from_objects(objects),
        features=Features.from_gates(gates, "1.37"),
        assumed=AssumeCache(clock=lambda: 0.0),
    )
    binder = InMemoryBinder(placement.state, placement)
    try:
        for index in range(2):
            outcome = asyncio.run(
                binder.bind(namespace="default", name=f"member-{index}", uid=f"uid-{index}", node="a")
            )
            assert outcome.error == ""
    finally:
        placement.worker.close()
    domain = placement.state.get("ResourceClaim", "domain", "default")
    assert domain is not None
    for index in range(2):
        own = placement.state.get("ResourceClaim", f"own-{index}", "default")
        assert own is not None and [r["uid"] for r in own["status"]["reservedFor"]] == [f"uid-{index}"]
    return domain


def test_file_mode_binds_reserve_the_shared_claim_for_the_group_once() -> None:
    assert _file_bind({"DRAWorkloadResourceClaims": True})["status"]["reservedFor"] == [GROUP_ENTRY]
    off = _file_bind({})["status"]["reservedFor"]
    assert [r["uid"] for r in off] == ["uid-0", "uid-1"]
