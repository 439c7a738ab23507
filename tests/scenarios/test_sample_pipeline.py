"""The embedded sample cluster and the seed pipeline pods, through filter, explain and bind.

Each pipeline pod in tests/data/pipeline_pods.yaml names, in the annotation
`test.dra-extender.io/expected-nodes`, the nodes where the DRA rules let it run (reasoned out
by hand in tests/data/README.md). Filter must pass exactly those nodes; bind must record the
allocation so that later pods see the devices as taken.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from extender.allocator.features import Features
from extender.binder import InMemoryBinder
from extender.claims import DELETE_PROTECTION_FINALIZER
from extender.cluster.sample import sample_objects
from extender.cluster.state import ClusterState
from extender.core.assumed import AssumeCache
from extender.core.placement import Placement
from extender.explaining import explain, load_pods
from extender.pods import parse_pod

PODS_FILE = Path(__file__).resolve().parents[1] / "data" / "pipeline_pods.yaml"
EXPECTED = "test.dra-extender.io/expected-nodes"
PODS = load_pods(PODS_FILE)


def _services(features: Features | None = None) -> tuple[ClusterState, Placement, InMemoryBinder]:
    state = ClusterState.from_objects(copy.deepcopy(sample_objects()))
    placement = Placement(state, features=features or Features.from_gates(), assumed=AssumeCache())
    return state, placement, InMemoryBinder(state, placement)


def _pod(name: str) -> dict[str, Any]:
    return copy.deepcopy(next(p for p in PODS if p["metadata"]["name"] == name))


@pytest.mark.parametrize("pod", PODS, ids=[p["metadata"]["name"] for p in PODS])
def test_pipeline_pod_fits_expected_nodes(pod: dict[str, Any]) -> None:
    """Filter passes exactly the nodes the sample documents for this pod."""
    state, placement, _ = _services()
    nodes = [n["metadata"]["name"] for n in state.list("Node")]
    verdict = placement.filter(parse_pod(pod), nodes)
    expected = set(pod["metadata"]["annotations"][EXPECTED].split(","))
    assert verdict.error == ""
    assert set(verdict.passed) == expected
    rejected = set(verdict.failed) | set(verdict.unresolvable)
    assert rejected == set(nodes) - expected
    assert all("claim" in reason for reason in verdict.unresolvable.values())


def test_mig_pod_needs_partitionable_devices() -> None:
    """With DRAPartitionableDevices off, MIG slices (counter consumers) are unusable everywhere."""
    state, placement, _ = _services(Features.from_gates({"DRAPartitionableDevices": False}))
    nodes = [n["metadata"]["name"] for n in state.list("Node")]
    verdict = placement.filter(parse_pod(_pod("mig-notebook")), nodes)
    assert verdict.passed == []


def test_cpu_node_rejects_with_reason_naming_claim_and_request() -> None:
    """A node without the devices is unresolvable and the reason names claim, request and class."""
    _, placement, _ = _services()
    verdict = placement.filter(parse_pod(_pod("fpga-serving")), ["cpu-node-01"])
    reason = verdict.unresolvable["cpu-node-01"]
    assert "request" in reason and "fpga" in reason and "do not exist on the node" in reason


def _replica(state: ClusterState, name: str, number: int) -> dict[str, Any]:
    """A copy of pipeline pod `name` with its own (unallocated) generated claim in `state`."""
    pod = _pod(name)
    meta = pod["metadata"]
    meta["name"], meta["uid"] = f"{name}-{number}", f"{name}-uid-{number}"
    status = pod["status"]["resourceClaimStatuses"][0]
    claim = copy.deepcopy(state.get("ResourceClaim", status["resourceClaimName"], meta["namespace"]))
    claim["metadata"].update(name=f"{name}-claim-{number}", uid=f"{name}-claim-uid-{number}")
    claim["metadata"]["ownerReferences"] = [{"kind": "Pod", "uid": meta["uid"], "controller": True}]
    claim["status"] = {}
    state.upsert(claim)
    status["resourceClaimName"] = claim["metadata"]["name"]
    return pod


async def _bind(binder: InMemoryBinder, pod: dict[str, Any], node: str) -> str:
    meta = pod["metadata"]
    outcome = await binder.bind(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"], node=node)
    return outcome.error


async def test_bind_records_allocation_and_blocks_the_devices() -> None:
    """Bind writes allocation, reservedFor, finalizer and nodeName; the devices are then taken."""
    state, placement, binder = _services()
    pod = _pod("gpu-training")
    meta = pod["metadata"]
    assert placement.filter(parse_pod(pod), ["h100-node-01"]).passed == ["h100-node-01"]
    assert await _bind(binder, pod, "h100-node-01") == ""
    claim_name = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    claim = state.get("ResourceClaim", claim_name, meta["namespace"])
    assert claim is not None
    allocation = claim["status"]["allocation"]
    assert len({r["device"] for r in allocation["devices"]["results"]}) == 5  # 4 GPUs and one NIC
    assert allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["h100-node-01"]
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": meta["name"], "uid": meta["uid"]}]
    assert DELETE_PROTECTION_FINALIZER in claim["metadata"]["finalizers"]
    assert state.get("Pod", meta["name"], meta["namespace"])["spec"]["nodeName"] == "h100-node-01"

    # A second replica takes the other NUMA half of node-01; a third no longer fits there.
    second = _replica(state, "gpu-training", 2)
    assert placement.filter(parse_pod(second), ["h100-node-01"]).passed == ["h100-node-01"]
    assert await _bind(binder, second, "h100-node-01") == ""
    third = _replica(state, "gpu-training", 3)
    verdict = placement.filter(parse_pod(third), ["h100-node-01", "h100-node-02"])
    assert verdict.passed == ["h100-node-02"]
    assert "in use" in verdict.failed["h100-node-01"]  # preemption could free them
    assert "cannot be bound" in await _bind(binder, third, "h100-node-01")


async def test_bind_is_idempotent_and_rejects_other_node() -> None:
    """Binding twice to the same node succeeds; to another node it fails cleanly."""
    _, placement, binder = _services()
    pod = _pod("fpga-serving")
    meta = pod["metadata"]
    placement.filter(parse_pod(pod), ["fpga-node-01"])
    kwargs = {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]}
    assert (await binder.bind(**kwargs, node="fpga-node-01")).error == ""
    assert (await binder.bind(**kwargs, node="fpga-node-01")).error == ""
    assert "already bound" in (await binder.bind(**kwargs, node="h100-node-01")).error


async def test_concurrent_binds_never_share_the_last_device() -> None:
    """Three pods race for two free FPGAs: exactly two binds win and no device is shared."""
    import asyncio

    state, placement, binder = _services()
    pods = [_replica(state, "fpga-serving", n) for n in range(3)]
    for pod in pods:
        assert placement.filter(parse_pod(pod), ["fpga-node-01"]).passed == ["fpga-node-01"]
    results = await asyncio.gather(*(_bind(binder, pod, "fpga-node-01") for pod in pods))
    assert sorted(r == "" for r in results) == [False, True, True]
    taken = [
        r["device"]
        for c in state.list("ResourceClaim")
        for r in ((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", [])
        if r["driver"] == "fpga.intel.com"
    ]
    assert len(taken) == len(set(taken)) == 2


def test_explain_prints_verdicts_and_devices() -> None:
    """explain names every node, the passing ones with the devices bind would choose."""
    state = ClusterState.from_objects(copy.deepcopy(sample_objects()))
    text = explain(state, _pod("tpu-inference"), features=Features.from_gates())
    assert "tpu-v5e-node-01: PASSED" in text
    assert "cpu-node-01: UNRESOLVABLE" in text
    assert "tpu.google.com/tpu-v5e-node-01/tpu-0" in text
    assert "1 of 18 node(s) pass" in text


def test_prioritize_ranks_by_chosen_subrequest() -> None:
    """Upstream's DRA preference (8 - index of the chosen firstAvailable subrequest) is a term of
    the score; with the other weights at 0 the ranking is upstream's."""
    from extender.index.topology import TopologySettings

    state = ClusterState.from_objects(copy.deepcopy(sample_objects()))
    only_preference = TopologySettings(locality_weight=0, fragmentation_weight=0, packing_weight=0)
    placement = Placement(
        state, features=Features.from_gates(), assumed=AssumeCache(), topology=only_preference
    )
    nodes = ["h100-node-01", "l40s-node-01", "mi300x-node-01", "gaudi2-node-01", "cpu-node-01"]
    pod = _pod("flexible-accelerator")
    scores = {s.host: s.score for s in placement.prioritize(parse_pod(pod), nodes)}
    preference = {n: s.preference for n, s in placement.evaluate(parse_pod(pod), nodes).scores.items()}
    # raw 8 (H100), 7 (L40S), 6 (MI300X), 5 (Gaudi2) of at most 8; the failing CPU node gets 0
    assert preference == {
        "h100-node-01": 1.0,
        "l40s-node-01": 7 / 8,
        "mi300x-node-01": 6 / 8,
        "gaudi2-node-01": 5 / 8,
    }
    # four preference levels: one band of two values each, best on top (scoring.by_preference)
    assert scores == {
        "h100-node-01": 10,
        "l40s-node-01": 8,
        "mi300x-node-01": 5,
        "gaudi2-node-01": 3,
        "cpu-node-01": 0,
    }


def test_prioritized_list_order_outranks_topology_with_default_weights() -> None:
    """With the default weights too, a node that gives an earlier firstAvailable subrequest ranks
    above every node that gives a later one (the real kube-scheduler 1.36 with its DynamicResources
    Score bound flexible-accelerator to an H100 node where the blended score had preferred MI300X)."""
    state = ClusterState.from_objects(copy.deepcopy(sample_objects()))
    placement = Placement(state, features=Features.from_gates(), assumed=AssumeCache())
    nodes = ["gaudi2-node-01", "mi300x-node-01", "l40s-node-01", "h100-node-01", "h100-node-02"]
    scores = {s.host: s.score for s in placement.prioritize(parse_pod(_pod("flexible-accelerator")), nodes)}
    h100 = min(scores["h100-node-01"], scores["h100-node-02"])
    assert h100 > scores["l40s-node-01"] > scores["mi300x-node-01"] > scores["gaudi2-node-01"], scores


def test_by_preference_gives_each_level_its_band() -> None:
    from extender.core.scoring import by_preference

    priorities = np.array([3, 10, 9, 6, 0])
    preference = np.array([1.0, 0.75, 0.875, 1.0, 0.75])
    # three levels, bands of three values: 8..10, 5..7, 2..4; topology places inside the band
    assert by_preference(priorities, preference).tolist() == [9, 4, 7, 9, 2]
    assert by_preference(priorities, np.ones(5)).tolist() == priorities.tolist()


def test_prioritize_ranks_gpu_nic_pairs_by_topology() -> None:
    """gpu-training (4 H100 + 1 RDMA NIC on one NUMA node): h100-node-02 has gpu-0/1 in use, so
    the free GPUs there are fewer; both nodes pass and get a topology score with its terms."""
    _, placement, _ = _services()
    nodes = ["h100-node-01", "h100-node-02"]
    pod = _pod("gpu-training")
    scores = {s.host: s.score for s in placement.prioritize(parse_pod(pod), nodes)}
    assert set(scores) == set(nodes) and max(scores.values()) == 10
    for _, score in placement.evaluate(parse_pod(pod), nodes).scores.items():
        assert 0.0 <= score.locality <= 1.0 and 0.0 <= score.fragmentation <= 1.0
