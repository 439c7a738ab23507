"""Topology scoring through Placement on hand-built nodes (issue 4's acceptance cases).

Each case builds two nodes (or one node with two islands), runs the real filter/prioritize/bind
path (`Placement.prioritize`, `Placement.choose_allocations`) and checks the ranking or the
devices chosen.
"""

from __future__ import annotations

import numpy as np
import pytest

from extender.core import scoring
from extender.index.topology import TopologySettings
from extender.pods import parse_pod
from tests.index import topology_builders as b


def _scores(objects: list[dict], pod: dict, nodes: list[str], topology: TopologySettings | None = None):
    placement = b.placement(objects, topology)
    verdict = placement.filter(parse_pod(pod), nodes)
    assert verdict.passed == nodes, verdict
    ranked = {h.host: h.score for h in placement.prioritize(parse_pod(pod), nodes)}
    evaluation = placement.evaluate(parse_pod(pod), nodes)
    return placement, evaluation, ranked


def test_four_gpus_in_one_nvlink_domain_beat_two_plus_two() -> None:
    one_domain = [b.gpu(f"gpu-{i}", nvlink="d0", pcie=f"pci{i // 2}", numa=0) for i in range(4)]
    split = [b.gpu(f"gpu-{i}", nvlink=f"d{i // 2}", pcie=f"pci{i // 2}", numa=i // 2) for i in range(4)]
    objects = [
        b.node("together"),
        b.slice_("together", "gpu.nvidia.com", one_domain),
        b.node("split"),
        b.slice_("split", "gpu.nvidia.com", split),
        b.claim("four", [("gpus", b.GPU_CLASS, 4)]),
    ]
    _, evaluation, ranked = _scores(objects, b.pod("p", ["four"]), ["split", "together"])
    assert ranked["together"] > ranked["split"]
    assert evaluation.scores.get("together").locality == 1.0
    assert evaluation.scores.get("split").locality < 1.0


def test_gpu_and_nic_on_one_pcie_root_beat_different_numa_nodes() -> None:
    objects = [
        b.node("aligned"),
        b.slice_("aligned", "gpu.nvidia.com", [b.gpu("gpu-0", pcie="pci0", numa=0)]),
        b.slice_("aligned", "dra.net", [b.nic("eth0", pcie="pci0", numa=0)]),
        b.node("apart"),
        b.slice_("apart", "gpu.nvidia.com", [b.gpu("gpu-0", pcie="pci0", numa=0)]),
        b.slice_("apart", "dra.net", [b.nic("eth0", pcie="pci1", numa=1)]),
        b.claim("g", [("gpu", b.GPU_CLASS, 1)]),
        b.claim("n", [("nic", b.NIC_CLASS, 1)]),
    ]
    _, evaluation, ranked = _scores(objects, b.pod("p", ["g", "n"]), ["apart", "aligned"])
    assert ranked == {"aligned": 10, "apart": 0}
    assert evaluation.scores.get("aligned").locality > evaluation.scores.get("apart").locality


def test_gpu_and_nic_pair_is_chosen_on_the_same_root_within_a_node() -> None:
    gpus = [b.gpu(f"gpu-{i}", pcie=f"pci{i}", numa=i // 2) for i in range(4)]
    nics = [b.nic(f"eth{i}", pcie=f"pci{i}", numa=i // 2) for i in (3, 2)]
    objects = [
        b.node("n1"),
        b.slice_("n1", "gpu.nvidia.com", gpus),
        b.slice_("n1", "dra.net", nics),
        b.claim("pair", [("gpu", b.GPU_CLASS, 1), ("nic", b.NIC_CLASS, 1)]),
    ]
    placement, evaluation, _ = _scores(objects, b.pod("p", ["pair"]), ["n1"])
    (allocation,) = placement.choose_allocations(evaluation, "n1")
    chosen = {r.request: r.device.name for r in allocation.devices}
    # first-fit would take gpu-0 + eth3 (different roots and NUMA nodes)
    assert chosen["gpu"][-1] == chosen["nic"][-1], chosen


@pytest.mark.parametrize(("packing", "better"), [("binpack", "busy"), ("spread", "empty")])
def test_packing_policy_orders_busy_and_empty_nodes(packing: str, better: str) -> None:
    gpus = [b.gpu(f"gpu-{i}", nvlink="d0", pcie=f"pci{i // 2}", numa=0) for i in range(8)]
    objects = [
        b.node("busy"),
        b.slice_("busy", "gpu.nvidia.com", gpus),
        b.allocated_claim("running", "busy", "gpu.nvidia.com", [f"gpu-{i}" for i in range(6)]),
        b.node("empty"),
        b.slice_("empty", "gpu.nvidia.com", gpus),
        b.claim("one", [("gpu", b.GPU_CLASS, 1)]),
    ]
    topology = TopologySettings(packing=packing)
    _, _, ranked = _scores(objects, b.pod("p", ["one"]), ["empty", "busy"], topology)
    worse = "empty" if better == "busy" else "busy"
    assert ranked[better] > ranked[worse]


def test_two_gpus_fill_the_half_used_island_and_keep_the_whole_one_free() -> None:
    whole = [b.gpu(f"gpu-{i}", nvlink="island-a", pcie=f"pci{i // 2}", numa=0) for i in range(4)]
    half = [b.gpu(f"gpu-{i}", nvlink="island-b", pcie=f"pci{i // 2}", numa=1) for i in range(4, 8)]
    objects = [
        b.node("n1"),
        b.slice_("n1", "gpu.nvidia.com", whole + half),
        b.allocated_claim("running", "n1", "gpu.nvidia.com", ["gpu-4", "gpu-5"]),
        b.claim("two", [("gpus", b.GPU_CLASS, 2)]),
    ]
    placement, evaluation, _ = _scores(objects, b.pod("p", ["two"]), ["n1"])
    (allocation,) = placement.choose_allocations(evaluation, "n1")
    assert sorted(r.device.name for r in allocation.devices) == ["gpu-6", "gpu-7"]
    assert evaluation.scores.get("n1").fragmentation == 1.0


def test_devices_without_topology_attributes_are_still_placed() -> None:
    objects = [
        b.node("bare"),
        b.slice_("bare", "gpu.nvidia.com", [b.gpu("gpu-0"), b.gpu("gpu-1")]),
        b.claim("two", [("gpus", b.GPU_CLASS, 2)]),
    ]
    placement, evaluation, ranked = _scores(objects, b.pod("p", ["two"]), ["bare"])
    assert ranked == {"bare": 10}
    assert evaluation.scores.get("bare").locality == 0.0  # node-level pair: the farthest distance
    (allocation,) = placement.choose_allocations(evaluation, "bare")
    assert len(allocation.devices) == 2


def test_link_matrix_annotation_overrides_levels() -> None:
    import orjson

    from extender.index.topology import LINK_ANNOTATION

    gpus = [b.gpu(f"gpu-{i}", pcie=f"pci{i}", numa=0) for i in range(3)]
    links = {"gpu-1": {"gpu-2": 900}, "gpu-0": {"gpu-1": 50, "gpu-2": 50}}
    objects = [
        b.node("n1", {LINK_ANNOTATION: orjson.dumps(links).decode()}),
        b.slice_("n1", "gpu.nvidia.com", gpus),
        b.claim("two", [("gpus", b.GPU_CLASS, 2)]),
    ]
    placement, evaluation, _ = _scores(objects, b.pod("p", ["two"]), ["n1"])
    (allocation,) = placement.choose_allocations(evaluation, "n1")
    assert sorted(r.device.name for r in allocation.devices) == ["gpu-1", "gpu-2"]
    assert evaluation.scores.get("n1").locality == 1.0


def test_match_attribute_constraint_is_honoured_by_the_choice() -> None:
    gpus = [b.gpu(f"gpu-{i}", nvlink="d0", pcie=f"pci{i // 2}", numa=i // 4) for i in range(8)]
    objects = [
        b.node("n1"),
        b.slice_("n1", "gpu.nvidia.com", gpus),
        b.allocated_claim("running", "n1", "gpu.nvidia.com", ["gpu-0", "gpu-2"]),
        b.claim(
            "pair",
            [("gpus", b.GPU_CLASS, 2)],
            constraints=[{"matchAttribute": "resource.kubernetes.io/pcieRoot", "requests": ["gpus"]}],
        ),
    ]
    placement, evaluation, _ = _scores(objects, b.pod("p", ["pair"]), ["n1"])
    (allocation,) = placement.choose_allocations(evaluation, "n1")
    names = sorted(r.device.name for r in allocation.devices)
    # pci0 and pci1 each have one free GPU left, so the pair must be a wholly free root.
    assert names in (["gpu-4", "gpu-5"], ["gpu-6", "gpu-7"])
    assert evaluation.scores.get("n1").method == scoring.EXACT


def test_priorities_stretch_to_the_calls_range() -> None:
    assert scoring.priorities(np.array([0.5, 0.75, 1.0])).tolist() == [0, 5, 10]
    assert scoring.priorities(np.array([0.3, 0.3])).tolist() == [10, 10]
    assert scoring.priorities(np.array([])).tolist() == []
