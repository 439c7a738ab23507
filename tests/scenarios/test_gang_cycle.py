"""A PodGroup's members through upstream's pod-group cycle: filter holds each member's node.

kube-scheduler filters every member of a PodGroup before any binds (`schedule_one_podgroup.go`),
and with one feasible node it skips prioritize; in allocator mode nothing in it counts an earlier
member's devices (extender/core/gang_cycle.py). These tests call filter the way that cycle does:
member after member, each with the candidate nodes, nothing bound in between. The fleet is the
embedded sample's two NVL72-style racks (rack a: 3 free GB200 trays, rack b: 4; one member per
tray).
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

from extender.cluster.sample import sample_objects
from extender.pods import parse_pod
from tests.scenarios.test_gang_podgroups import RACK_A, RACK_B, RACK_LABEL, member, pod_group, services

CLIQUE_LABEL = "nvidia.com/gpu.clique"


def extra_member(i: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Member i >= 4 of the group and its own claim (a copy of member 0's)."""
    pod = member(0)
    name = f"train-gang-worker-{i}"
    pod["metadata"].update(name=name, uid=str(uuid.uuid4()))
    pod["spec"]["resourceClaims"][0]["resourceClaimName"] = f"{name}-gpus"
    (claim,) = [
        copy.deepcopy(o)
        for o in sample_objects()
        if o.get("kind") == "ResourceClaim" and o["metadata"]["name"] == "train-gang-worker-0-gpus"
    ]
    claim["metadata"].update(name=f"{name}-gpus", uid=str(uuid.uuid4()))
    return pod, claim


def cycle(placement: Any, pods: list[dict[str, Any]], nodes: list[str] | None = None) -> list[Any]:
    """Filter each member in turn, as one placement of the pod-group cycle does."""
    names = nodes if nodes is not None else list(placement.index().node_names)
    return [placement.filter(parse_pod(pod), names) for pod in pods]


def test_every_member_gets_its_own_tray_in_the_tightest_clique() -> None:
    placement = services(pod_group(min_count=4, topology=CLIQUE_LABEL))
    verdicts = cycle(placement, [member(i) for i in range(4)])
    assert all(len(v.passed) == 1 for v in verdicts), [v.passed for v in verdicts]
    assert sorted(v.passed[0] for v in verdicts) == RACK_B
    # The nodes a member did not get fail by its PodGroup's name (preemption may help: failed).
    other = next(n for n in RACK_B if n != verdicts[0].passed[0])
    assert "PodGroup nvl-racks/train" in verdicts[0].failed[other]
    assert len(placement.holds) == 4


def test_without_a_constraint_members_still_never_share_a_tray() -> None:
    placement = services(pod_group(min_count=4))
    verdicts = cycle(placement, [member(i) for i in range(4)])
    taken = [v.passed[0] for v in verdicts]
    assert len(set(taken)) == 4, taken


def test_a_new_cycle_replaces_a_members_hold_and_keeps_the_others() -> None:
    placement = services(pod_group(min_count=4, topology=CLIQUE_LABEL))
    first = [v.passed[0] for v in cycle(placement, [member(i) for i in range(4)])]
    (again,) = cycle(placement, [member(0)])
    assert again.passed == [first[0]]  # the only tray the other members' holds leave it
    assert len(placement.holds) == 4


def test_a_gang_larger_than_every_domain_places_no_tray_twice_then_holds_nothing() -> None:
    extra = [extra_member(i) for i in (4, 5)]
    placement = services(pod_group(min_count=6, topology=CLIQUE_LABEL), *[c for _, c in extra])
    pods = [member(i) for i in range(4)] + [p for p, _ in extra]
    placed: list[str] = []
    for pod in pods:  # until the first member that finds no tray, where the scheduler stops
        (verdict,) = cycle(placement, [pod])
        if not verdict.passed:
            break
        placed.append(verdict.passed[0])
    assert 3 <= len(placed) == len(set(placed)) <= 4  # 6 members, at most 4 free trays in a rack
    assert len({n[: len("gb200-rack-a")] for n in placed}) == 1  # one rack
    assert any("in use" in reason or "PodGroup" in reason for reason in verdict.failed.values())
    # The placement failed for lack of room: the group holds nothing while it waits.
    assert len(placement.holds) == 0 and len(placement.assumed) == 0


def test_a_later_placement_of_the_cycle_keeps_the_chosen_placements_holds() -> None:
    placement = services(pod_group(min_count=4, topology=RACK_LABEL), rack_labels=True)
    chosen = [v.passed[0] for v in cycle(placement, [member(i) for i in range(4)], RACK_B)]
    assert sorted(chosen) == RACK_B
    later = cycle(placement, [member(i) for i in range(4)], RACK_A)  # rack a's placement
    assert not any(v.passed for v in later)
    assert len(placement.holds) == 4 and sorted(placement.assumed.pod_nodes().values()) == RACK_B


def test_another_placement_fails_at_its_first_member_naming_the_chosen_domain() -> None:
    """With TopologyAwareWorkloadScheduling the scheduler tries one placement per rack; the
    extender has chosen rack b (4 members fit only there), so rack a's placement fails."""
    placement = services(pod_group(min_count=4, topology=RACK_LABEL), rack_labels=True)
    (in_a,) = cycle(placement, [member(0)], RACK_A)
    assert not in_a.passed
    reason = in_a.failed[RACK_A[1]]
    assert "PodGroup nvl-racks/train" in reason
    assert f"{RACK_LABEL}=b" in reason and f"{RACK_LABEL}=a" in reason
    assert len(placement.holds) == 0
    (in_b,) = cycle(placement, [member(0)], RACK_B)
    assert len(in_b.passed) == 1 and in_b.passed[0] in RACK_B


def test_a_hold_ends_when_the_member_is_released_or_seen_bound() -> None:
    placement = services(pod_group(min_count=4, topology=CLIQUE_LABEL))
    held = [v.passed[0] for v in cycle(placement, [member(i) for i in range(2)])]
    assert len(placement.assumed) == 2
    uid0 = member(0)["metadata"]["uid"]
    placement.holds.release(uid0)  # what the binder does before it chooses for real
    assert len(placement.assumed) == 1 and uid0 not in placement.assumed.pod_nodes()
    bound = member(1)
    bound["spec"]["nodeName"] = held[1]
    placement.state.upsert(bound)  # bound by someone else (advisory: the in-tree plugin)
    cycle(placement, [member(2)])
    assert member(1)["metadata"]["uid"] not in placement.assumed.pod_nodes() or len(placement.holds) == 1
    assert set(placement.holds._holds) == {member(2)["metadata"]["uid"]}


def test_a_pod_of_no_pod_group_is_answered_as_before() -> None:
    placement = services(pod_group(min_count=4, topology=CLIQUE_LABEL))
    plain = member(0)
    del plain["spec"]["schedulingGroup"]
    (verdict,) = cycle(placement, [plain])
    assert set(RACK_A[1:] + RACK_B) <= set(verdict.passed)
    assert len(placement.holds) == 0 and len(placement.assumed) == 0
