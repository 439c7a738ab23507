"""`parse_pod`: every field of the Pod record, absent fields, and wrong-typed fields that the wire
or validation let through (the parser never raises; `Pod.problem` carries validation's text)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from extender.core.evaluation import claims_key
from extender.pods import Pod, PodResourceClaim, PodResourceClaimStatus, WorkloadRef, parse_pod
from extender.validation import pod_problem

FULL: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "trainer-0",
        "namespace": "ml",
        "uid": "uid-trainer-0",
        "labels": {"jobset.sigs.k8s.io/jobset-name": "train", "app": "trainer"},
        "annotations": {"gang.dra-extender.io/size": "4", "note": "x"},
    },
    "spec": {
        "nodeName": "node-1",
        "schedulingGroup": {"podGroupName": "pg"},
        "workloadRef": {"name": "wl", "podGroup": "workers", "podGroupReplicaKey": "0"},
        "resourceClaims": [
            {"name": "gpus", "resourceClaimName": "trainer-gpus"},
            {"name": "nic", "resourceClaimTemplateName": "nic-template"},
        ],
        "containers": [{"name": "main", "resources": {"claims": [{"name": "gpus"}]}}],
    },
    "status": {"resourceClaimStatuses": [{"name": "nic", "resourceClaimName": "trainer-0-nic-abc"}]},
}


def test_every_field_is_read() -> None:
    pod = parse_pod(FULL)
    assert (pod.namespace, pod.name, pod.uid, pod.node_name) == ("ml", "trainer-0", "uid-trainer-0", "node-1")
    assert dict(pod.labels) == FULL["metadata"]["labels"]
    assert dict(pod.annotations) == FULL["metadata"]["annotations"]
    assert pod.resource_claims == (
        PodResourceClaim("gpus", "trainer-gpus", None),
        PodResourceClaim("nic", None, "nic-template"),
    )
    assert pod.resource_claim_statuses == (PodResourceClaimStatus("nic", "trainer-0-nic-abc"),)
    assert pod.pod_group_name == "pg"
    assert pod.workload_ref == WorkloadRef("wl", "workers", "0")
    assert (pod.ref, pod.key, pod.problem) == ("ml/trainer-0", "uid-trainer-0", "")
    assert pod.source is FULL


def test_the_record_is_frozen_and_its_mappings_read_only() -> None:
    pod = parse_pod(FULL)
    with pytest.raises(AttributeError):
        pod.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        pod.labels["app"] = "other"  # type: ignore[index]
    assert not hasattr(pod, "__dict__")


def test_absent_fields_have_their_defaults() -> None:
    pod = parse_pod({"metadata": {"name": "p"}})
    assert pod == Pod(namespace="default", name="p", uid="", node_name="")
    assert (dict(pod.labels), dict(pod.annotations)) == ({}, {})
    assert (pod.resource_claims, pod.resource_claim_statuses, pod.workload_ref) == ((), (), None)
    assert (pod.ref, pod.key, pod.problem) == ("default/p", "default/p", "")
    empty = parse_pod({})
    assert (empty.ref, empty.key, empty.problem) == ("default/", "default/", "")


def test_null_fields_count_as_absent() -> None:
    pod = parse_pod({"metadata": None, "spec": {"resourceClaims": None, "nodeName": None}, "status": None})
    assert (pod.name, pod.node_name, pod.resource_claims, pod.problem) == ("", "", (), "")


def test_wrong_types_are_read_as_absent_and_reported_by_problem() -> None:
    """What the wire lets through (containers are not checked there), and what explain or a pod
    read from the API may hold: the parser reads around it, `problem` is validation's text."""
    odd = {
        "metadata": {"name": "p", "namespace": 7, "labels": {"a": 1, "b": "ok"}, "annotations": ["x"]},
        "spec": {
            "nodeName": ["n"],
            "resourceClaims": ["not an object", {"name": 3, "resourceClaimName": "c"}],
            "containers": [{"name": "c", "resources": {"claims": "gpus"}}],
            "workloadRef": "wl",
            "schedulingGroup": [],
        },
        "status": {"resourceClaimStatuses": {"name": "x"}},
    }
    pod = parse_pod(odd)
    assert (pod.namespace, pod.node_name, dict(pod.labels), dict(pod.annotations)) == (
        "default",
        "",
        {"b": "ok"},
        {},
    )
    assert pod.resource_claims == (PodResourceClaim(None, "c", None),)
    assert (pod.resource_claim_statuses, pod.workload_ref, pod.pod_group_name) == ((), None, "")
    assert pod.problem == pod_problem(odd)
    assert pod.problem.startswith("Pod default/p: metadata.namespace: must be a string, got integer")


def test_container_claims_of_the_wrong_type_are_the_problem() -> None:
    """The case the wire passes: only validation (and so `problem`) reads containers."""
    pod = copy.deepcopy(FULL)
    pod["spec"]["containers"][0]["resources"]["claims"] = "gpus"
    assert parse_pod(pod).problem == (
        "Pod ml/trainer-0: spec.containers[0].resources.claims: must be a list, got string"
    )


@pytest.mark.parametrize("value", [None, 5, "pod", ["pod"]])
def test_a_pod_that_is_not_an_object_parses_to_an_empty_record_with_the_problem(value: Any) -> None:
    pod = parse_pod(value)
    assert (pod.ref, pod.resource_claims) == ("default/", ())
    assert pod.problem == pod_problem(value) != ""


def test_unquoted_numbers_in_annotations_are_read_as_their_text() -> None:
    """Hand-written YAML (`size: 4`): the gang size reads it as before; other types are left out."""
    pod = parse_pod({"metadata": {"annotations": {"size": 4, "ratio": 0.5, "flag": True, "list": [1]}}})
    assert dict(pod.annotations) == {"size": "4", "ratio": "0.5"}


def test_equal_pods_give_equal_records_and_evaluation_keys() -> None:
    """The evaluation cache re-uses an evaluation across calls (filter, prioritize, the dashboard's
    re-parse) only if equal pods give equal keys."""
    first, second = parse_pod(FULL), parse_pod(copy.deepcopy(FULL))
    assert first == second and hash(first) == hash(second)
    assert (first.key, claims_key(first)) == (second.key, claims_key(second))
    other = copy.deepcopy(FULL)
    other["spec"]["resourceClaims"][0]["resourceClaimName"] = "other-gpus"
    assert claims_key(parse_pod(other)) != claims_key(first)
