"""Gang identity and size from a pod, and the clique of a node (extender.core.gang)."""

from __future__ import annotations

from typing import Any

import pytest

from extender.allocator.model import DeviceID
from extender.core.gang import (
    CLIQUE_LABEL,
    SIZE_ANNOTATION,
    Gang,
    GangSettings,
    gang_of,
    node_cliques,
    placed_members,
)
from extender.pods import parse_pod


def _pod(
    *, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ml", "uid": "u", "labels": labels or {},
                     "annotations": annotations or {}},
        "spec": spec,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("pod", "key"),
    [
        (_pod(schedulingGroup={"podGroupName": "train-0"}), "ml/podgroup:train-0"),
        (_pod(workloadRef={"name": "job", "podGroup": "workers", "podGroupReplicaKey": "1"}),
         "ml/workload:job/workers/1"),
        (_pod(labels={"jobset.sigs.k8s.io/jobset-name": "js", "jobset.sigs.k8s.io/replicatedjob-name": "w"}),
         "ml/jobset:js/w"),
        (_pod(labels={"leaderworkerset.sigs.k8s.io/name": "lws",
                      "leaderworkerset.sigs.k8s.io/group-index": "3"}), "ml/leaderworkerset:lws/3"),
        (_pod(labels={"scheduling.x-k8s.io/pod-group": "pg"}), "ml/podgroup:pg"),
        (_pod(labels={"volcano.sh/job-name": "vj"}), "ml/volcano:vj"),
    ],
)  # fmt: skip
def test_gang_key_from_each_source(pod: dict[str, Any], key: str) -> None:
    gang = gang_of(parse_pod(pod))
    assert gang is not None and gang.key == key


def test_scheduling_group_wins_over_labels() -> None:
    pod = _pod(schedulingGroup={"podGroupName": "pg"}, labels={"volcano.sh/job-name": "vj"})
    assert gang_of(parse_pod(pod)) == Gang("ml/podgroup:pg", None)


@pytest.mark.parametrize(
    "pod",
    [
        _pod(),
        _pod(labels={"jobset.sigs.k8s.io/jobset-name": "js"}),  # half a JobSet pair names no gang
        _pod(schedulingGroup={"podGroupName": ""}),
        _pod(workloadRef="not-an-object"),
        {"metadata": [], "spec": "x"},
    ],
)
def test_no_gang(pod: dict[str, Any]) -> None:
    assert gang_of(parse_pod(pod)) is None


@pytest.mark.parametrize(
    ("annotations", "size"),
    [
        ({SIZE_ANNOTATION: "4"}, 4),
        ({"leaderworkerset.sigs.k8s.io/size": "8"}, 8),
        ({SIZE_ANNOTATION: "4", "leaderworkerset.sigs.k8s.io/size": "8"}, 4),
        ({SIZE_ANNOTATION: "four"}, None),
        ({SIZE_ANNOTATION: "0"}, None),
        ({}, None),
    ],
)
def test_gang_size_from_annotations(annotations: dict[str, str], size: int | None) -> None:
    gang = gang_of(parse_pod(_pod(labels={"volcano.sh/job-name": "vj"}, annotations=annotations)))
    assert gang is not None and gang.size == size


def test_size_annotation_is_configurable() -> None:
    pod = _pod(labels={"volcano.sh/job-name": "vj"}, annotations={"example.com/members": "6"})
    assert gang_of(parse_pod(pod), GangSettings(size_annotation="example.com/members")) == Gang(
        "ml/volcano:vj", 6
    )


class _Device:
    def __init__(self, driver: str, attributes: dict[str, Any]) -> None:
        self.id = DeviceID(driver, "pool", "d")
        self.attributes = attributes


def test_node_clique_from_label_then_device_attribute() -> None:
    nodes = {
        "labelled": {"metadata": {"labels": {CLIQUE_LABEL: "cluster-a.1"}}},
        "attribute": {"metadata": {"labels": {}}},
        "local-name": {"metadata": {}},
        "none": {"metadata": {}},
    }
    devices = {
        "labelled": [_Device("gpu.nvidia.com", {"cliqueID": {"string": "ignored"}})],
        "attribute": [
            _Device("dra.net", {}),
            _Device("x", {"gpu.nvidia.com/cliqueID": {"string": "cluster-a.2"}}),
        ],
        "local-name": [_Device("gpu.nvidia.com", {"cliqueID": {"string": "cluster-a.3"}})],
        "none": [_Device("dra.net", {"cliqueID": {"string": "not the gpu driver's"}})],
    }
    assert node_cliques(nodes, devices) == {
        "labelled": "cluster-a.1",
        "attribute": "cluster-a.2",
        "local-name": "cluster-a.3",
    }


def test_placed_members_counts_bound_and_assumed_members_of_the_same_gang_only() -> None:
    def member(uid: str, node: str | None, job: str = "vj") -> dict[str, Any]:
        pod = _pod(labels={"volcano.sh/job-name": job}, nodeName=node)
        pod["metadata"]["uid"] = uid
        return pod

    gang = Gang("ml/volcano:vj", 4)
    pods = [member("a", "n1"), member("b", None), member("c", "n2", job="other"), member("self", "n3")]
    records = [parse_pod(p) for p in pods]
    assert placed_members(gang, records, assumed={"d": "n4"}, exclude_uid="self") == {"a": "n1", "d": "n4"}
