"""`parse_resource_claim`: every field of the Claim record, absent, null and wrong-typed fields (the
parser never raises), an allocation with and without a nodeSelector; and the records
`resolve_pod_claims` hands on (one per claim, an in-flight allocation merged in)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from extender.claims import (
    RESERVED_FOR_MAX,
    Claim,
    allocation_fits_node,
    parse_resource_claim,
    resolve_pod_claims,
)
from extender.cluster.state import ClusterState
from tests.core import small_cluster as c

SELECTOR: dict[str, Any] = {
    "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]
}

FULL: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "trainer-gpus", "namespace": "ml", "uid": "uid-gpus"},
    "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}},
    "status": {
        "allocation": {
            "devices": {
                "results": [{"request": "r", "driver": "gpu.example.com", "pool": "p", "device": "d"}]
            },
            "nodeSelector": SELECTOR,
        },
        "reservedFor": [
            {"resource": "pods", "name": "trainer-0", "uid": "uid-pod-0"},
            {"resource": "pods", "name": "trainer-1", "uid": "uid-pod-1"},
        ],
    },
}


def _node(name: str) -> dict[str, Any]:
    return {"kind": "Node", "metadata": {"name": name}}


def test_every_field_is_read() -> None:
    claim = parse_resource_claim(FULL)
    assert (claim.namespace, claim.name, claim.uid, claim.ref) == (
        "ml",
        "trainer-gpus",
        "uid-gpus",
        "ml/trainer-gpus",
    )
    assert claim.allocated and claim.node_selector == SELECTOR
    assert claim.reserved_for == ("uid-pod-0", "uid-pod-1")
    assert claim.source is FULL


def test_the_record_is_frozen_and_the_source_is_left_out_of_equality_and_repr() -> None:
    claim = parse_resource_claim(FULL)
    with pytest.raises(AttributeError):
        claim.name = "other"  # type: ignore[misc]
    other = copy.deepcopy(FULL)
    other["spec"]["devices"]["requests"][0]["name"] = "changed"  # not a field of the record
    assert parse_resource_claim(other) == claim
    assert "spec" not in repr(claim) and "source" not in repr(claim)


def test_an_unallocated_claim_has_no_selector_and_no_consumers() -> None:
    bare = {"metadata": {"name": "c", "namespace": "ns"}, "spec": {}}
    assert parse_resource_claim(bare) == Claim("ns", "c", "", allocated=False)


@pytest.mark.parametrize(
    "obj",
    [
        None,
        "text",
        {},
        {"metadata": None, "status": None},
        {"metadata": {"name": None, "namespace": None, "uid": None}},
        {"metadata": {"name": 3, "namespace": ["x"], "uid": {}}, "status": {"allocation": "yes"}},
        {"status": {"allocation": None, "reservedFor": None}},
        {"status": {"allocation": {}, "reservedFor": "pods"}},
    ],
)
def test_absent_null_and_wrong_typed_fields_count_as_absent(obj: Any) -> None:
    claim = parse_resource_claim(obj)
    assert claim == Claim("default", "", "", allocated=False)
    assert claim.ref == "default/"
    assert claim.source == (obj if isinstance(obj, dict) else {})


def test_reserved_for_keeps_each_object_entry_and_a_missing_uid_as_none() -> None:
    obj = {"status": {"reservedFor": [{"uid": "a"}, {"name": "no-uid"}, {"uid": 7}, "not-an-object"]}}
    assert parse_resource_claim(obj).reserved_for == ("a", None, None)


def test_an_allocation_without_a_node_selector_fits_every_node() -> None:
    for allocation in (
        {"devices": {"results": []}},
        {"devices": {}, "nodeSelector": None},
        {"nodeSelector": {}},
    ):
        claim = parse_resource_claim({"metadata": {"name": "c"}, "status": {"allocation": allocation}})
        assert claim.allocated and claim.node_selector is None
        assert allocation_fits_node(claim, _node("anywhere")) and allocation_fits_node(claim, None)


def test_an_allocation_with_a_node_selector_fits_the_nodes_it_selects() -> None:
    claim = parse_resource_claim(FULL)
    assert allocation_fits_node(claim, _node("node-1"))
    assert not allocation_fits_node(claim, _node("node-2"))
    assert not allocation_fits_node(claim, None)


def test_resolution_hands_on_records_with_the_state_objects_as_source() -> None:
    pending, held = c.claim("pending", 1), c.held("held", "a", ["gpu-0"], pod_uid="pod-uid")
    state = ClusterState.from_objects([pending, held])
    claims = resolve_pod_claims(c.pod([pending, held]), state)
    assert [r.ref for r in claims.pending] == ["default/pending"] and not claims.pending[0].allocated
    assert claims.pending[0].source is state.get("ResourceClaim", "pending", "default")
    (allocated,) = claims.allocated
    assert (allocated.ref, allocated.allocated, allocated.reserved_for) == (
        "default/held",
        True,
        ("pod-uid",),
    )
    assert allocated.source is state.get("ResourceClaim", "held", "default")
    assert allocation_fits_node(allocated, c.node("a")) and not allocation_fits_node(allocated, c.node("b"))


def test_an_in_flight_allocation_is_merged_into_the_records_source() -> None:
    claim = c.claim("flying", 1)
    claim["metadata"]["uid"] = "uid-flying"
    state = ClusterState.from_objects([claim])
    allocation = copy.deepcopy(c.held("x", "b", ["gpu-0"])["status"]["allocation"])
    claims = resolve_pod_claims(c.pod([claim]), state, assumed={"uid-flying": allocation})
    assert claims.pending == []
    (record,) = claims.allocated
    assert record.allocated and record.source["status"]["allocation"] is allocation
    assert "status" not in claim  # the stored object is not edited
    assert allocation_fits_node(record, c.node("b")) and not allocation_fits_node(record, c.node("a"))


def test_a_claim_reserved_to_the_maximum_is_in_use_unless_the_pod_is_among_its_consumers() -> None:
    full = c.held("full", "a", ["gpu-0"])
    full["status"]["reservedFor"] = [
        {"resource": "pods", "name": f"p{i}", "uid": f"u{i}"} for i in range(RESERVED_FOR_MAX)
    ]
    state = ClusterState.from_objects([full])
    assert resolve_pod_claims(c.pod([full], uid="other"), state).problem == "resourceclaim in use"
    among = resolve_pod_claims(c.pod([full], uid="u7"), state)
    assert among.problem == "" and [r.name for r in among.allocated] == ["full"]
