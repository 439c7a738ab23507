"""The gang simulator (bench/gang_placement.py) on a tiny seeded cluster: its mechanics, not figures."""

from __future__ import annotations

from bench import gang_placement as gp
from extender.allocator.features import Features
from extender.cluster.state import ClusterState
from extender.core.assumed import AssumeCache
from extender.core.gang import GangSettings
from extender.core.placement import Placement


def _placement(racks: int, trays: int, weight: float = 3.0) -> tuple[Placement, list[str], dict[str, str]]:
    objects, nodes, cliques = gp.cluster_objects(racks, trays)
    state = ClusterState.from_objects(objects)
    placement = Placement(
        state, features=Features(), assumed=AssumeCache(), gang_settings=GangSettings(weight=weight)
    )
    return placement, nodes, cliques


def test_trace_is_seeded_and_offers_the_sizes_it_claims() -> None:
    one = gp.make_trace(gpus=144, steps=80, load=0.9, mean_lifetime=10, seed=5)
    assert one == gp.make_trace(gpus=144, steps=80, load=0.9, mean_lifetime=10, seed=5)
    assert one != gp.make_trace(gpus=144, steps=80, load=0.9, mean_lifetime=10, seed=6)
    sizes = {size for size, _ in gp.GANG_SIZES}
    assert one and all(g.members in sizes and g.gpus in (2, 4) and g.departure > g.arrival for g in one)


def test_a_gang_is_placed_whole_or_not_at_all() -> None:
    placement, nodes, _ = _placement(racks=2, trays=3)
    too_big = gp.Gang(0, members=7, gpus=4, arrival=0, departure=5)  # 6 trays for 7 whole-tray members
    record = gp.schedule_gang(placement, nodes, too_big, gp.GANG_AWARE)
    assert record.nodes == []
    assert not any(p for p in placement.state.iter("Pod")) and not list(placement.state.iter("ResourceClaim"))
    fits = gp.Gang(1, members=3, gpus=4, arrival=0, departure=5)
    record = gp.schedule_gang(placement, nodes, fits, gp.GANG_AWARE)
    assert len(set(record.nodes)) == 3


def test_gang_aware_keeps_a_gang_in_one_clique_where_first_fit_splits_it() -> None:
    # Rack 0 has one tray taken by a 1-member gang, so a 3-member gang fits only in rack 1.
    for policy, expect_one_clique in ((gp.FIRST_FIT, False), (gp.GANG_AWARE, True)):
        placement, nodes, cliques = _placement(racks=2, trays=3)
        gp.schedule_gang(placement, nodes, gp.Gang(0, members=1, gpus=4, arrival=0, departure=9), policy)
        record = gp.schedule_gang(
            placement, nodes, gp.Gang(1, members=3, gpus=4, arrival=0, departure=9), policy
        )
        assert len(record.nodes) == 3
        assert (len({cliques[n] for n in record.nodes}) == 1) is expect_one_clique, policy


def test_cli_writes_the_results_block(tmp_path) -> None:
    out = tmp_path / "gangs.md"
    out.write_text("# Gangs\n\nintro\n")
    assert gp.main(["--racks", "2", "--trays", "4", "--steps", "12", "--warmup", "2", "--seeds", "1",
                    "--markdown", str(out)]) == 0  # fmt: skip
    text = out.read_text()
    assert (
        text.startswith("# Gangs\n\nintro\n") and "| gang-aware |" in text and "<!-- results:end -->" in text
    )


def test_a_pod_group_waits_rather_than_span_cliques() -> None:
    """The podgroup policy: a gang no clique can hold is not placed (gang-aware would split it);
    one that fits takes the tightest clique, a tray per member, and leaves nothing held."""
    placement, nodes, cliques = _placement(racks=2, trays=3)
    gp.schedule_gang(placement, nodes, gp.Gang(0, members=1, gpus=4, arrival=0, departure=9), gp.PODGROUP)
    split = gp.schedule_gang(
        placement, nodes, gp.Gang(1, members=4, gpus=4, arrival=0, departure=9), gp.GANG_AWARE
    )
    assert len({cliques[n] for n in split.nodes}) == 2  # the control: gang-aware spans both racks
    gp.release(placement.state, gp.Gang(1, members=4, gpus=4, arrival=0, departure=9), 4)
    waits = gp.schedule_gang(
        placement, nodes, gp.Gang(2, members=4, gpus=4, arrival=0, departure=9), gp.PODGROUP
    )
    assert waits.nodes == [] and placement.state.get("PodGroup", "gang-00002", gp.NAMESPACE) is None
    fits = gp.schedule_gang(
        placement, nodes, gp.Gang(3, members=3, gpus=4, arrival=0, departure=9), gp.PODGROUP
    )
    assert len(set(fits.nodes)) == 3 and len({cliques[n] for n in fits.nodes}) == 1
    assert len(placement.holds) == 0 and len(placement.assumed) == 0
