"""Gangs declared through the Workload API: a PodGroup's `minCount` and topology constraint.

The embedded sample's two NVL72-style racks (rack a: 3 free GB200 trays, rack b: 4) and the four
whole-tray pods of tests/data/gang_pods.yaml, here pointed at a PodGroup through
`spec.schedulingGroup.podGroupName` instead of JobSet labels. What decides: a gang of 4 fits only
rack b, a gang of 2 fits rack a more tightly (best fit), so where the first member lands shows
which size the extender read.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from extender.cluster.loading import load_state_paths
from extender.cluster.sample import sample_objects
from extender.cluster.state import ClusterState
from extender.errors import StateLoadError
from extender.explaining import load_pods
from extender.podgroups import PodGroupClaim, parse_pod_group
from extender.pods import parse_pod
from extender.settings import Settings
from extender.wiring import build_services

GANG = load_pods(Path(__file__).resolve().parents[1] / "data" / "gang_pods.yaml")
RACK_A = [f"gb200-rack-a-{i:02d}" for i in range(1, 5)]
RACK_B = [f"gb200-rack-b-{i:02d}" for i in range(1, 5)]
RACK_LABEL = "example.com/rack"


def pod_group(
    name: str = "train", *, min_count: int | None = 4, topology: str | None = None, version: str = "v1beta1"
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulingPolicy": {"gang": {"minCount": min_count}} if min_count else {"basic": {}}
    }
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    return {
        "apiVersion": f"scheduling.k8s.io/{version}",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "nvl-racks"},
        "spec": spec,
    }


def member(i: int, *, group: str = "train", size_annotation: str | None = None) -> dict[str, Any]:
    """Gang pod i, in the PodGroup only (no JobSet labels); optionally with our size annotation."""
    pod = copy.deepcopy(GANG[i])
    pod["metadata"]["labels"] = {}
    pod["metadata"]["annotations"] = {"gang.dra-extender.io/size": size_annotation} if size_annotation else {}
    pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pod


def services(*extra: dict[str, Any], rack_labels: bool = False, settings: Settings | None = None) -> Any:
    objects = copy.deepcopy(sample_objects())
    if rack_labels:
        for obj in objects:
            name = obj.get("metadata", {}).get("name", "")
            if obj.get("kind") == "Node" and name.startswith("gb200-rack-"):
                obj["metadata"].setdefault("labels", {})[RACK_LABEL] = name.split("-")[2]
    placement, _ = build_services(settings or Settings(), ClusterState.from_objects([*objects, *extra]))
    return placement


def first_choice(placement: Any, pod: dict[str, Any]) -> str:
    """The node kube-scheduler would take for the pod: best score, ties in node order."""
    nodes = list(placement.index().node_names)
    passed = placement.filter(parse_pod(pod), nodes).passed
    scores = {s.host: s.score for s in placement.prioritize(parse_pod(pod), passed)}
    return max(passed, key=lambda n: (scores.get(n, 0), -passed.index(n)))


def test_the_pod_groups_min_count_is_the_gang_size() -> None:
    placement = services(pod_group(min_count=4))
    gang = placement.gangs.resolve(parse_pod(member(0)))
    assert gang is not None and gang.key == "nvl-racks/podgroup:train" and gang.size == 4
    assert first_choice(placement, member(0)) in RACK_B  # 4 fit only in rack b


def test_min_count_wins_over_the_size_annotation() -> None:
    # The control: size 2 from our annotation alone puts the first member in rack a (tightest fit).
    alone = services()
    assert first_choice(alone, member(0, size_annotation="2")) in RACK_A
    placement = services(pod_group(min_count=4))
    assert first_choice(placement, member(0, size_annotation="2")) in RACK_B


def test_a_basic_pod_group_leaves_the_size_to_the_fallbacks() -> None:
    placement = services(pod_group(min_count=None))
    gang = placement.gangs.resolve(parse_pod(member(0, size_annotation="2")))
    assert gang is not None and gang.size == 2


def test_the_whole_gang_follows_the_pod_group_into_one_clique() -> None:
    # As in upstream's pod-group cycle: every member is filtered before any is bound; each
    # member's filter holds its node for the next (extender/core/gang_cycle.py).
    placement = services(pod_group(min_count=4))
    chosen = [first_choice(placement, member(i)) for i in range(4)]
    assert sorted(chosen) == RACK_B


def test_a_topology_constraint_fails_the_other_domains_by_the_pod_groups_name() -> None:
    placement = services(pod_group(min_count=4, topology=RACK_LABEL), rack_labels=True)
    nodes = list(placement.index().node_names)
    # Member 0 bound (assumed) in rack a: the rest of the group must follow it there.
    placement.assumed.assume_pod(member(0)["metadata"]["uid"], "gb200-rack-a-02")
    placement.evaluate(parse_pod(member(0)), nodes)  # seen: the assumed uid is known as a member
    verdict = placement.filter(parse_pod(member(1)), nodes)
    assert len(verdict.passed) == 1 and verdict.passed[0] in RACK_A
    reason = verdict.unresolvable["gb200-rack-b-01"]
    assert "PodGroup nvl-racks/train" in reason
    assert f"{RACK_LABEL}=a" in reason and f"{RACK_LABEL}=b" in reason


def test_without_a_topology_constraint_no_domain_is_filtered() -> None:
    placement = services(pod_group(min_count=4), rack_labels=True)
    nodes = list(placement.index().node_names)
    placement.assumed.assume_pod(member(0)["metadata"]["uid"], "gb200-rack-a-02")
    placement.evaluate(parse_pod(member(0)), nodes)
    verdict = placement.filter(parse_pod(member(1)), nodes)
    reasons = [*verdict.failed.values(), *verdict.unresolvable.values()]
    assert len(verdict.passed) == 1  # its own node (gang_cycle), but no node failed for its domain
    assert not [r for r in reasons if "requires all its pods" in r], reasons


def test_the_clique_label_as_topology_key_uses_the_device_attribute_where_nodes_lack_it() -> None:
    placement = services(pod_group(min_count=4, topology="nvidia.com/gpu.clique"))
    gang = placement.gangs.resolve(parse_pod(member(0)))
    assert gang is not None
    assert placement.gangs.node_domains(gang) == placement.gangs.node_cliques()
    assert {placement.gangs.node_domains(gang)[n] for n in RACK_A} != {
        placement.gangs.node_domains(gang)[n] for n in RACK_B
    }


def test_parse_reads_size_topology_and_claims() -> None:
    obj = pod_group(min_count=3, topology=RACK_LABEL)
    obj["spec"]["resourceClaims"] = [
        {"name": "channel", "resourceClaimTemplateName": "imex-channel"},
        {"name": "shared", "resourceClaimName": "dataset"},
    ]
    obj["status"] = {"resourceClaimStatuses": [{"name": "channel", "resourceClaimName": "train-channel-x7"}]}
    group = parse_pod_group(obj)
    assert (group.ref, group.min_count, group.topology_key) == ("nvl-racks/train", 3, RACK_LABEL)
    assert group.claims == (
        PodGroupClaim("channel", "train-channel-x7", "imex-channel"),
        PodGroupClaim("shared", "dataset", None),
    )
    assert parse_pod_group({"spec": {"schedulingPolicy": {"gang": {"minCount": "4"}}}}).min_count is None


@pytest.mark.parametrize("version", ["v1beta1", "v1alpha2"])
def test_state_files_carry_pod_groups_of_either_version(tmp_path: Path, version: str) -> None:
    import yaml

    path = tmp_path / "groups.yaml"
    path.write_text(yaml.safe_dump(pod_group(version=version)))
    (loaded,) = load_state_paths([path])
    assert parse_pod_group(loaded).min_count == 4


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda g: g["spec"]["schedulingPolicy"]["gang"].update(minCount=0), "minCount: must be at least 1"),
        (
            lambda g: g["spec"].update(schedulingConstraints={"topology": [{"key": "a"}, {"key": "b"}]}),
            "topology",
        ),
        (lambda g: g["spec"].update(schedulingConstraints={"topology": [{"key": "bad key"}]}), "key"),
        (lambda g: g.update(apiVersion="scheduling.k8s.io/v1"), "not served for PodGroup"),
    ],
)
def test_a_malformed_pod_group_is_refused_with_its_field(tmp_path: Path, change: Any, message: str) -> None:
    import yaml

    group = pod_group()
    change(group)
    path = tmp_path / "groups.yaml"
    path.write_text(yaml.safe_dump(group))
    with pytest.raises(StateLoadError, match=message):
        load_state_paths([path])


def test_a_changed_pod_group_is_read_again() -> None:
    """The parse is kept per PodGroup object; the watch's update (a new object) replaces it."""
    placement = services(pod_group(min_count=4))
    gang = placement.gangs.resolve(parse_pod(member(0)))
    assert gang is not None and gang.size == 4
    assert placement.gangs.resolve(parse_pod(member(1))).group is gang.group  # the same parse
    placement.state.upsert(pod_group(min_count=2))
    changed = placement.gangs.resolve(parse_pod(member(0)))
    assert changed is not None and changed.size == 2
