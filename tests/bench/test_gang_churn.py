"""bench.gang_churn's parts that need no cluster: the trace it replays, the PodGroup members it
creates, and the figures it computes from pod and claim events (gangs admitted in one clique,
time to admit, cliques left whole, a device in two claims at once)."""

from __future__ import annotations

import math
from pathlib import Path

from bench import gang_churn
from bench.churn import JOB_LABEL, RUN_LABEL, ClaimLedger, Device, PodRecord
from bench.gang_placement import GPUS_PER_TRAY, Gang, cluster_objects, make_trace
from extender.core.gang import CLIQUE_LABEL
from tests.e2e import kwok

Obj = dict[str, object]

RACKS, TRAYS = 2, 3
_, NODES, CLIQUE_OF = cluster_objects(RACKS, TRAYS)  # rack-00-tray-00..02 in sim-cluster.1, rack-01-* in .2
DEVICE_NODE: dict[Device, str] = {
    ("gpu.nvidia.com", node, f"gpu-{i}"): node for node in NODES for i in range(GPUS_PER_TRAY)
}


def _gpu(node: str, i: int = 0) -> Device:
    return ("gpu.nvidia.com", node, f"gpu-{i}")


def test_the_trace_is_the_simulators_seeded_trace_cut_to_what_a_rack_holds() -> None:
    def trace(seed: int) -> list[Gang]:
        return make_trace(gpus=6 * 18 * 4, steps=240, load=0.9, mean_lifetime=30, seed=seed)

    assert trace(1) == trace(1) and trace(1) != trace(2)
    assert gang_churn.fitting(trace(1), 18) == trace(1)  # 18-tray racks hold every gang size
    small = gang_churn.fitting(trace(1), 6)
    assert small and all(g.members <= 6 for g in small)
    assert len(small) < len(trace(1))  # the 8- to 18-member gangs are gone
    assert {g.gpus for g in trace(1)} == {2, 4}


def test_members_are_the_e2e_members_with_the_runs_scheduler_template_and_lifetime() -> None:
    gang = Gang(7, members=3, gpus=2, arrival=10, departure=40)
    pods = gang_churn.member_pods(gang, "upstr", "default-scheduler", step_seconds=2.0)
    assert [p["metadata"]["name"] for p in pods] == [f"upstr-gang-00007-{i}" for i in range(3)]
    for pod in pods:
        spec = pod["spec"]
        assert spec["schedulingGroup"] == {"podGroupName": "upstr-gang-00007"}
        assert spec["schedulerName"] == "default-scheduler"
        assert spec["resourceClaims"][0]["resourceClaimTemplateName"] == gang_churn.HALF_TEMPLATE
        assert pod["metadata"]["annotations"][kwok.RUN_FOR] == "60000ms"  # 30 steps of 2 s
        assert pod["metadata"]["labels"][RUN_LABEL] == "upstr"
        assert pod["metadata"]["labels"][JOB_LABEL] == "gang-00007"
    whole = gang_churn.member_pods(Gang(8, 2, 4, 0, 1), "alloc", "dra-topology-scheduler", 1.0)
    assert whole[0]["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == "tray"
    counts = {
        t["metadata"]["name"]: t["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"]
        for t in gang_churn.templates()
    }
    assert counts == {"tray": 4, gang_churn.HALF_TEMPLATE: 2}


def _record(
    gang: str, created: float, bound: float | None, node: str = "", done: float | None = None
) -> PodRecord:
    return PodRecord(gang, "", created=created, bound=bound, node=node, succeeded=done)


def _states() -> list[gang_churn.GangState]:
    """Four gangs on 2 racks of 3 trays: one admitted inside rack 0 and finished, one admitted
    across both racks, one bound in part, one not yet created."""
    trace = [Gang(0, 2, 4, 0, 5), Gang(1, 3, 4, 1, 9), Gang(2, 3, 4, 2, 9), Gang(3, 2, 4, 3, 9)]
    records = {
        "a0": _record("gang-00000", 10.5, 12.0, "rack-00-tray-00", done=20.0),
        "a1": _record("gang-00000", 10.6, 13.0, "rack-00-tray-01", done=20.0),
        "b0": _record("gang-00001", 11.2, 30.0, "rack-00-tray-02"),
        "b1": _record("gang-00001", 11.2, 31.0, "rack-01-tray-00"),
        "b2": _record("gang-00001", 11.3, 41.0, "rack-01-tray-01"),
        "c0": _record("gang-00002", 12.1, 14.0, "rack-01-tray-02"),
        "c1": _record("gang-00002", 12.1, None),
        "c2": _record("gang-00002", 12.2, None),
    }
    created = {"gang-00000": 10.0, "gang-00001": 11.0, "gang-00002": 12.0}
    return gang_churn.gang_states(trace, created, records)


def test_gang_states_admit_a_gang_when_its_last_member_is_bound() -> None:
    states = _states()
    assert [s.gang.number for s in states] == [0, 1, 2]  # gang 3's PodGroup was never created
    first, second, third = states
    assert first.admitted_at == 13.0 and first.created == 10.0 and first.completed
    assert second.admitted_at == 41.0 and not second.completed
    assert third.admitted_at is None and third.bound == 1


def test_the_summary_counts_one_clique_gangs_and_admission_percentiles() -> None:
    summary = gang_churn.summarise(_states(), CLIQUE_OF, TRAYS)
    assert (summary.arrived, summary.admitted, summary.completed) == (3, 2, 1)
    assert summary.one_clique_pct == 50.0  # gang 0 in rack 0; gang 1 spans both racks
    assert summary.pending == 1 and summary.partly_bound == 1
    # Admission times 3 s and 30 s: p50 takes the lower of two, p99 the higher.
    assert (summary.admit_p50_s, summary.admit_p99_s) == (3.0, 30.0)
    # Large (at least half a rack of 3: 2 members and up) are all three; admitted: 3 s, 30 s.
    assert summary.admit_p50_large_s == 3.0
    empty = gang_churn.summarise([], CLIQUE_OF, TRAYS)
    assert empty.arrived == 0 and math.isnan(empty.one_clique_pct) and math.isnan(empty.admit_p50_s)


def test_a_gang_of_one_rack_but_spread_over_two_is_not_in_one_clique() -> None:
    trace = [Gang(0, 2, 4, 0, 5)]
    records = {
        "x": _record("gang-00000", 1.0, 2.0, "rack-00-tray-00"),
        "y": _record("gang-00000", 1.0, 2.0, "rack-01-tray-00"),
    }
    summary = gang_churn.summarise(
        gang_churn.gang_states(trace, {"gang-00000": 1.0}, records), CLIQUE_OF, TRAYS
    )
    assert summary.admitted == 1 and summary.one_clique_pct == 0.0


def test_a_clique_is_whole_only_while_every_tray_is_free() -> None:
    assert gang_churn.cliques_whole([], DEVICE_NODE, CLIQUE_OF) == 2
    # One GPU of one tray held: rack 0 is no longer whole, and two of its trays are free.
    held = [_gpu("rack-00-tray-01", 3)]
    assert gang_churn.cliques_whole(held, DEVICE_NODE, CLIQUE_OF) == 1
    assert gang_churn.free_trays(held, DEVICE_NODE, CLIQUE_OF) == {"sim-cluster.1": 2, "sim-cluster.2": 3}
    every_rack = [_gpu("rack-00-tray-00"), _gpu("rack-01-tray-02", 1)]
    assert gang_churn.cliques_whole(every_rack, DEVICE_NODE, CLIQUE_OF) == 0


def test_fleet_samples_replay_the_claim_ledgers_timeline() -> None:
    ledger = ClaimLedger()

    def claim(uid: str, devices: list[Device]) -> dict[str, object]:
        results = [{"driver": d[0], "pool": d[1], "device": d[2], "request": "gpus"} for d in devices]
        status = {"allocation": {"devices": {"results": results}}} if devices else {}
        return {"metadata": {"uid": uid, "name": uid, "namespace": "bench"}, "status": status}

    ledger.on_event("ADDED", claim("a", [_gpu("rack-00-tray-00")]), 102.0)  # rack 0 broken at 102
    ledger.on_event("ADDED", claim("b", [_gpu("rack-01-tray-00"), _gpu("rack-01-tray-00", 1)]), 104.5)
    ledger.on_event("MODIFIED", claim("a", []), 106.0)  # rack 0 whole again at 106
    times = gang_churn.sample_times(100.0, 108.0, 2.0)
    assert times == [100.0, 102.0, 104.0, 106.0, 108.0]
    samples = gang_churn.fleet_samples(ledger.timeline, DEVICE_NODE, CLIQUE_OF, times)
    assert [s.whole for s in samples] == [2, 1, 1, 1, 1]
    assert [s.largest_free for s in samples] == [3, 3, 3, 3, 3]
    assert [s.gpus_busy for s in samples] == [0, 1, 1, 2, 2]
    assert gang_churn.mean_whole(samples) == 1.2 and gang_churn.mean_whole([]) is None
    # A large gang waited from 101 to 105: the samples at 102 and 104, and its arrival at 101.
    assert gang_churn.waiting_times(times, [(101.0, 105.0)], 100.0, 108.0) == [101.0, 102.0, 104.0]
    waits = gang_churn.fleet_samples(ledger.timeline, DEVICE_NODE, CLIQUE_OF, [101.0, 102.0, 104.0])
    assert [s.whole for s in waits] == [2, 1, 1]
    # A wait shorter than the sampling period counts once, at its arrival; one outside not at all.
    assert gang_churn.waiting_times(times, [(106.5, 107.0), (200.0, 300.0)], 100.0, 108.0) == [106.5]


def test_a_large_gang_waits_from_its_creation_to_its_admission_or_the_end() -> None:
    intervals = gang_churn.waiting(_states(), TRAYS, end=50.0)
    assert intervals == [(10.0, 13.0), (11.0, 41.0), (12.0, 50.0)]
    assert gang_churn.waiting(_states(), trays=18, end=50.0) == []  # none is half of 18 trays
    # Large: at least half a rack.
    assert gang_churn.large(Gang(0, 9, 4, 0, 1), 18) and not gang_churn.large(Gang(0, 8, 4, 0, 1), 18)
    assert gang_churn.large(Gang(0, 3, 4, 0, 1), 6) and not gang_churn.large(Gang(0, 2, 4, 0, 1), 6)


def test_two_claims_on_one_device_are_caught_and_reported() -> None:
    ledger = ClaimLedger()
    ok = {
        "allocation": {"devices": {"results": [{"driver": "gpu.nvidia.com", "pool": "n", "device": "gpu-0"}]}}
    }
    ledger.on_event("ADDED", {"metadata": {"uid": "a", "name": "a"}, "status": ok}, 1.0)
    assert ledger.double == []
    ledger.on_event("ADDED", {"metadata": {"uid": "b", "name": "b"}, "status": ok}, 2.0)
    assert len(ledger.double) == 1 and "claim a holds it" in ledger.double[0]


def test_failed_scheduling_messages_are_counted_by_kind_for_the_runs_pods() -> None:
    def event(name: str, message: str, count: int, reason: str = "FailedScheduling") -> Obj:
        return {"reason": reason, "involvedObject": {"name": name}, "message": message, "count": count}

    events = [
        event("alloc-gang-00001-0", "0/18 nodes are available: 18 Insufficient gpus.", 3),
        event("alloc-gang-00002-1", "0/18 nodes are available: 12 Insufficient gpus.", 2),
        event("alloc-gang-00002-2", "pod group rejected at Permit", 1),
        event(
            "alloc-gang-00004-0",
            "0/18 nodes are available: claim bench/alloc-gang-00004-0-gpus-x7kqp busy",
            1,
        ),
        event(
            "alloc-gang-00005-3",
            "0/18 nodes are available: claim bench/alloc-gang-00005-3-gpus-ab1cd busy",
            2,
        ),
        event("upstr-gang-00001-0", "0/18 nodes are available: 18 Insufficient gpus.", 7),  # other run
        event("alloc-gang-00003-0", "Successfully assigned", 1, reason="Scheduled"),
    ]
    assert gang_churn.failure_kinds(events, "alloc-") == {
        "#/# nodes are available: # Insufficient gpus.": 5,
        "#/# nodes are available: claim <object> busy": 3,  # two claims, one kind
        "pod group rejected at Permit": 1,
    }


def test_the_plane_combines_kwoks_controllers_with_the_workload_apis_gates(tmp_path: Path) -> None:
    from tests.e2e.cluster import KWOK_CONTROLLERS
    from tests.e2e.test_gang_plugin import WORKLOAD_API

    plane = gang_churn.GangKwokPlane(tmp_path, "1.37")
    assert set(KWOK_CONTROLLERS) <= set(plane.controllers)  # kwok's node lifecycle, and what GangPlane adds
    # The e2e test's gates, whatever it adds; upstream's gang scheduling among them.
    assert plane.feature_gates == WORKLOAD_API["1.37"][0]
    assert plane.feature_gates["GenericWorkload"] and plane.feature_gates["TopologyAwareWorkloadScheduling"]
    assert plane.runtime_config == ("scheduling.k8s.io/v1beta1=true",)


def test_the_fleets_clique_label_is_what_gangs_are_measured_by() -> None:
    objects, _, _ = cluster_objects(RACKS, TRAYS)
    labels = {
        o["metadata"]["name"]: o["metadata"]["labels"][CLIQUE_LABEL] for o in objects if o["kind"] == "Node"
    }
    assert labels == CLIQUE_OF


def test_the_markdown_row_shows_the_safety_figures() -> None:
    result = gang_churn.GangChurnResult(
        mode="allocator", racks=2, trays=3, seed=1, step_seconds=2.0, steps=10, gangs=3, pods=8,
        admitted=2, one_clique_pct=50.0, completed=1, admit_p50_s=3.0, admit_p99_s=30.0,
        admit_p50_large_s=3.0, pending_at_end=1, partly_bound_at_end=1, cliques_whole_mean=1.2,
        cliques_whole_min=0, cliques_whole_while_large_waits=None, largest_free_block_mean=2.5,
        gpus_busy_mean=0.5, cliques_whole_over_time=[(0.0, 2)], double_allocations=["x"],
        claims_left_allocated=0,
    )  # fmt: skip
    row = gang_churn.markdown([result]).splitlines()[-1]
    assert row.startswith(
        "| allocator | 2x3 | 3 | 2 | 50.0% | 1 | 3.0 / 30.0 | 3.0 | 1.2 / 0 / - | 2.5 | 50.0% |"
    )
    assert row.endswith("| 1 | 1 | 1 | 0 |")
