"""Partitions (MIG) in the topology model and score, through Placement on hand-built A100 nodes.

The nodes are DynamicMIG pools (`builders.a100_mig_slices`): per GPU a counter set of 8 memory
slices and 7 compute slices, the whole GPU and every MIG placement consuming from it. Such
devices go through upstream's search (first-fit path), so these cases check the node ranking and
the partition terms of upstream's choice on each node.
"""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from extender.allocator.features import Features
from extender.cluster.state import ClusterState
from extender.core import scoring
from extender.explaining import explain
from extender.index.topology import NO_COORD, UNFITTABLE_SHARE, TopologySettings
from extender.pods import parse_pod
from extender.settings import load_settings
from tests.index import topology_builders as b

ONLY_PACKING = TopologySettings(
    locality_weight=0, fragmentation_weight=0, packing_weight=0, preference_weight=0,
    partition_packing_weight=1, partition_headroom_weight=0,
)  # fmt: skip
ONLY_HEADROOM = TopologySettings(
    locality_weight=0, fragmentation_weight=0, packing_weight=0, preference_weight=0,
    partition_packing_weight=0, partition_headroom_weight=1,
)  # fmt: skip


def _ranked(objects: list[dict], pod: dict, nodes: list[str], topology: TopologySettings | None = None):
    placement = b.placement([*b.mig_classes(), *objects], topology)
    verdict = placement.filter(parse_pod(pod), nodes)
    assert verdict.passed == nodes, verdict
    ranked = {h.host: h.score for h in placement.prioritize(parse_pod(pod), nodes)}
    return placement, placement.evaluate(parse_pod(pod), nodes), ranked


def _row(placement, node: str, device: str) -> int:
    index = placement.index()
    lo = index.node_start[index.node_pos[node]]
    hi = index.node_start[index.node_pos[node] + 1]
    return next(r for r in range(lo, hi) if index.row_device[r].name == device)


def test_partitions_inherit_their_parent_gpus_coordinates_and_group() -> None:
    placement = b.placement([*b.mig_classes(), b.node("a100"), *b.a100_mig_slices("a100", 4)])
    index = placement.index()
    coords = index.row_coords
    for g in range(4):
        gpu = _row(placement, "a100", f"gpu-{g}")
        slice_ = _row(placement, "a100", b.mig_name(g, "1g", 3))
        assert coords[gpu, 1] != NO_COORD and coords[gpu, 2] != NO_COORD
        assert coords[slice_, 1] == coords[gpu, 1]  # PCIe root of the parent
        assert coords[slice_, 2] == coords[gpu, 2]  # NUMA node of the parent
        assert coords[slice_, 0] != NO_COORD  # its own nvlink level: the parent GPU (parentUUID)
    # GPUs 0 and 1 share a root, 2 and 3 another: a slice of GPU 0 is pcie-local to GPU 1's slices
    assert (
        coords[_row(placement, "a100", b.mig_name(0, "2g", 0)), 1]
        == coords[_row(placement, "a100", "gpu-1"), 1]
    )
    assert coords[_row(placement, "a100", "gpu-0"), 1] != coords[_row(placement, "a100", "gpu-2"), 1]
    groups = scoring.partitions(index)
    of = groups.row_group
    gpu0 = [_row(placement, "a100", d) for d in ("gpu-0", b.mig_name(0, "1g", 0), b.mig_name(0, "7g", 0))]
    assert len({int(of[r]) for r in gpu0}) == 1 and of[gpu0[0]] >= 0
    assert of[_row(placement, "a100", "gpu-1")] != of[gpu0[0]]
    assert groups.num_groups == 4 and groups.group_counters.tolist() == [9, 9, 9, 9]
    # the 4g costs 4 of 8 memory slices (one counter each, share 1) and 4 of 7 compute slices
    cost = groups.row_cost[_row(placement, "a100", b.mig_name(0, "4g", 0))]
    assert sorted(cost.tolist()) == pytest.approx(sorted([1.0] * 4 + [0.0] * 4 + [4 / 7]))


def test_static_mig_slices_group_by_parent_without_counters() -> None:
    slices = [
        {
            "name": f"mig-{g}-{i}",
            "attributes": {"parentUUID": {"string": f"GPU-{g}"}, "profile": {"string": "1g"}},
        }
        for g in range(2)
        for i in range(3)
    ]
    placement = b.placement([b.node("n"), b.slice_("n", "gpu.nvidia.com", slices)])
    groups = scoring.partitions(placement.index())
    assert groups.row_group.tolist() == [0, 0, 0, 1, 1, 1]
    assert groups.group_counters.tolist() == [0, 0]


def test_partly_used_parent_gpu_beats_a_fresh_one() -> None:
    """`partly` can put the 1g next to a running 1g; `fresh` only on an untouched GPU."""
    objects = [
        b.node("partly"),
        *b.a100_mig_slices("partly", 2),
        b.held("h1", "partly", [b.mig_name(0, "1g", 0)]),
        b.node("fresh"),
        *b.a100_mig_slices("fresh", 2),
        b.held("h2", "fresh", ["gpu-1"]),  # GPU 1 runs as a whole GPU: only GPU 0 is left
        b.mig_claim("one", "1g"),
    ]
    pod = b.pod("p", ["one"])
    for topology in (None, ONLY_PACKING):
        _, evaluation, ranked = _ranked(objects, pod, ["fresh", "partly"], topology)
        assert ranked == {"partly": 10, "fresh": 0}
        assert evaluation.scores.get("partly").partition_packing == 1.0
        assert evaluation.scores.get("fresh").partition_packing == 0.0


def test_within_a_node_the_slice_goes_to_the_partly_used_gpu_and_bind_writes_it() -> None:
    """First-fit takes GPU 0's first 1g; the topology choice (verified by upstream's search) the
    first 1g of GPU 1, which already runs one, that keeps GPU 1's 3g creatable."""
    objects = [
        b.node("n"),
        *b.a100_mig_slices("n", 2),
        b.held("h", "n", [b.mig_name(1, "1g", 0)]),
        b.mig_claim("one", "1g"),
    ]
    placement, evaluation, _ = _ranked(objects, b.pod("p", ["one"]), ["n"])
    score = evaluation.scores.get("n")
    assert [placement.index().row_device[r].name for r in score.rows] == [b.mig_name(1, "1g", 1)]
    assert (score.partition_packing, score.partition_headroom) == (1.0, 1.0)
    written = placement.choose_allocations(evaluation, "n")
    assert [r.device.name for a in written for r in a.devices] == [b.mig_name(1, "1g", 1)]
    first_fit = placement.search.run(
        evaluation.specs, placement.index(), "n", placement.allocated_state()[0], 1e18
    )
    assert [r.device.name for a in first_fit for r in a.devices] == [b.mig_name(0, "1g", 0)]


def test_on_a_fresh_gpu_the_slice_keeps_the_4g_placement_free() -> None:
    """A 1g at slice 0 (first-fit) breaks the A100's only 4g placement; one at slice 4 keeps it."""
    objects = [b.node("n"), *b.a100_mig_slices("n", 1), b.mig_claim("one", "1g")]
    placement, evaluation, _ = _ranked(objects, b.pod("p", ["one"]), ["n"])
    score = evaluation.scores.get("n")
    assert [placement.index().row_device[r].name for r in score.rows] == [b.mig_name(0, "1g", 4)]
    assert score.partition_headroom == pytest.approx(((4 + 4 / 7) / 9) / 1.0)


def test_choice_that_keeps_a_7g_creatable_beats_one_that_does_not() -> None:
    """A 3g next to a running 4g fills that GPU; on the other node it cuts the only fresh GPU."""
    objects = [
        b.node("fills"),
        *b.a100_mig_slices("fills", 2),
        b.held("h1", "fills", [b.mig_name(0, "4g", 0)]),
        b.node("cuts"),
        *b.a100_mig_slices("cuts", 1),
        b.mig_claim("three", "3g"),
    ]
    pod = b.pod("p", ["three"])
    for topology in (None, ONLY_HEADROOM):
        placement, evaluation, ranked = _ranked(objects, pod, ["cuts", "fills"], topology)
        assert ranked == {"fills": 10, "cuts": 0}
        fills, cuts = evaluation.scores.get("fills"), evaluation.scores.get("cuts")
        assert fills.partition_headroom == 1.0  # GPU 1 of `fills` still makes a 7g
        # the best 3g on the fresh GPU (at slice 4, not first-fit's 0) still leaves only a 4g
        assert cuts.partition_headroom == pytest.approx((4 + 4 / 7) / 9)
        assert [placement.index().row_device[r].name for r in cuts.rows] == [b.mig_name(0, "3g", 4)]
        assert [placement.index().row_device[r].name for r in fills.rows] == [b.mig_name(0, "3g", 4)]


def test_whole_gpu_jobs_are_not_charged_for_opening_a_gpu() -> None:
    """A whole GPU takes its parent whole: packing and headroom 1, like a whole NVLink island."""
    claim = b.claim("whole", [("gpu", b.WHOLE_GPU_CLASS, 1)])
    objects = [b.node("a"), *b.a100_mig_slices("a", 2), claim]
    _, evaluation, _ = _ranked(objects, b.pod("p", ["whole"]), ["a"])
    score = evaluation.scores.get("a")
    assert (score.partition_packing, score.partition_headroom) == (1.0, 1.0)


def test_pods_without_partitions_keep_their_scores() -> None:
    """A plain GPU pod gets no partition terms, and its score is the four-term score."""
    objects = [
        b.node("n"),
        b.slice_("n", "gpu.nvidia.com", [b.gpu(f"gpu-{i}", pcie="p0", numa=0) for i in range(2)]),
        b.claim("c", [("gpu", b.GPU_CLASS, 1)]),
    ]
    _, evaluation, _ = _ranked(objects, b.pod("p", ["c"]), ["n"])
    score = evaluation.scores.get("n")
    assert score.partition_packing is None and score.partition_headroom is None
    settings = TopologySettings()
    want = scoring.combine(
        np.array([[score.locality, score.fragmentation, score.packing]]), np.array([1.0]), settings
    )
    assert score.score == pytest.approx(float(want[0]))


def test_combine_weighs_partition_terms_only_where_they_apply() -> None:
    settings = TopologySettings(
        locality_weight=1, fragmentation_weight=1, packing_weight=1, preference_weight=1,
        partition_packing_weight=2, partition_headroom_weight=2,
    )  # fmt: skip
    parts = np.array([[1.0, 1.0, 1.0, np.nan, np.nan], [1.0, 1.0, 1.0, 0.0, 0.5]])
    got = scoring.combine(parts, np.ones(2), settings)
    assert got.tolist() == [1.0, pytest.approx((4 + 0 + 1) / 8)]
    spread = TopologySettings(packing="spread", partition_packing_weight=2, partition_headroom_weight=2)
    got = scoring.combine(parts, np.ones(2), spread)
    assert got[0] == got[1]  # spread: partition terms (fragmentation of GPUs) do not rank nodes


def test_partition_weights_are_settings(tmp_path) -> None:
    """File and environment set the two weights; a negative weight is a clear error."""
    config = tmp_path / "settings.yaml"
    config.write_text("partitionPackingWeight: 3\npartitionHeadroomWeight: 0.5\n", encoding="utf-8")
    flags = argparse.Namespace(config=config)
    topology = load_settings(flags, {}).topology()
    assert (topology.partition_packing_weight, topology.partition_headroom_weight) == (3.0, 0.5)
    topology = load_settings(flags, {"DRA_EXTENDER_PARTITION_HEADROOM_WEIGHT": "7"}).topology()
    assert topology.partition_headroom_weight == 7.0
    with pytest.raises(ValueError, match="PARTITION_PACKING_WEIGHT: '-1' is out of range"):
        load_settings(argparse.Namespace(config=None), {"DRA_EXTENDER_PARTITION_PACKING_WEIGHT": "-1"})
    with pytest.raises(ValueError, match="weights must be finite"):
        TopologySettings(partition_headroom_weight=float("nan"))


def test_a_counter_of_value_zero_makes_its_consumers_unfittable() -> None:
    """A device consuming a counter whose value is 0 never fits (upstream's check says the same)."""
    slices = b.a100_mig_slices("n", 1)
    slices[0]["spec"]["sharedCounters"][0]["counters"]["gpcs"] = {"value": "0"}
    placement = b.placement([*b.mig_classes(), b.node("n"), *slices])
    groups = scoring.partitions(placement.index())
    row = _row(placement, "n", b.mig_name(0, "1g", 2))
    assert UNFITTABLE_SHARE in groups.row_cost[row].tolist()
    pod = b.pod("p", ["one"])
    placement.state.upsert(b.mig_claim("one", "1g"))
    assert placement.filter(parse_pod(pod), ["n"]).passed == []


def test_explain_prints_the_partition_terms_only_for_partitions() -> None:
    objects = [*b.device_classes(), *b.mig_classes(), b.node("n"), *b.a100_mig_slices("n", 1)]
    state = ClusterState.from_objects([*objects, b.mig_claim("one", "1g")])
    text = explain(state, b.pod("p", ["one"]), features=Features())
    # The better slice is scored in prioritize and checked by upstream's search at bind.
    assert "partition packing 0.000, partition headroom 0.508 (device choice: partition)" in text
    assert f"mig={'gpu.nvidia.com/n-gpu.nvidia.com/' + b.mig_name(0, '1g', 4)}" in text
    plain = [
        b.node("m"),
        b.slice_("m", "gpu.nvidia.com", [b.gpu("gpu-0")]),
        b.claim("c", [("gpu", b.GPU_CLASS, 1)]),
    ]
    text = explain(
        ClusterState.from_objects([*b.device_classes(), *plain]), b.pod("q", ["c"]), features=Features()
    )
    assert "partition" not in text


def test_a_choice_upstream_rejects_leaves_first_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    """If the partition choice were wrong (here: a 1g overlapping a running 4g), upstream's search
    over that device alone fails and the node keeps first-fit's allocation."""
    objects = [b.node("n"), *b.a100_mig_slices("n", 1), b.held("h", "n", [b.mig_name(0, "4g", 0)])]
    placement = b.placement([*b.mig_classes(), *objects, b.mig_claim("one", "1g")])
    wrong = _row(placement, "n", b.mig_name(0, "1g", 0))
    monkeypatch.setattr(scoring, "partition_choices", lambda *args: np.array([wrong]))
    pod = b.pod("p", ["one"])
    assert placement.filter(parse_pod(pod), ["n"]).passed == ["n"]
    evaluation = placement.evaluate(parse_pod(pod), ["n"])
    score = placement.scores(evaluation, ["n"]).get("n")
    assert score.method == scoring.PARTITION  # scored as chosen; upstream's search checks it at bind
    written = placement.choose_allocations(evaluation, "n")
    assert [r.device.name for a in written for r in a.devices] == [b.mig_name(0, "1g", 4)]


def test_partitions_regroup_only_changed_nodes_and_equal_a_fresh_grouping() -> None:
    """scoring.partitions keeps each node's grouping per node block: after a change to one node's
    slice the result equals grouping every node afresh, and the other nodes are not regrouped."""
    from unittest import mock

    from extender.index import topology

    objects = [*b.mig_classes(), b.node("n"), *b.a100_mig_slices("n", 2)]
    objects += [b.node("m"), *b.a100_mig_slices("m", 1)]
    placement = b.placement(objects)

    def fresh(index):
        pools = [index.pools[name] for name in index.node_names]
        return topology.partition_groups(index.topology, index.row_device, index.node_start, pools)

    def same(a, b) -> bool:
        return (
            np.array_equal(a.row_group, b.row_group)
            and np.array_equal(a.row_cost, b.row_cost)
            and np.array_equal(a.group_counters, b.group_counters)
            and np.array_equal(a.row_counters_only, b.row_counters_only)
        )

    first = scoring.partitions(placement.index())
    assert first.num_groups > 0 and same(first, fresh(placement.index()))
    state = placement.state
    changed = next(s for s in state.list("ResourceSlice") if s["spec"].get("nodeName") == "m")
    meta = changed["metadata"]
    state.upsert({**changed, "metadata": {**meta, "resourceVersion": meta.get("resourceVersion", "1") + "0"}})
    index = placement.index()
    with mock.patch.object(scoring, "node_partitions", wraps=scoring.node_partitions) as grouped:
        again = scoring.partitions(index)
    assert same(again, fresh(index))
    assert grouped.call_count == 1  # node m only
