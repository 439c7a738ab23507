"""The placement-quality simulator (`bench.placement`) on a small seeded run.

Scope: one short trace (12 nodes, 150 jobs) replayed under both policies. Checks that both go
through `Placement` (filter, then prioritize + choose_allocations or allocations_on), that what
the simulator reports can be recomputed from the final ClusterState without the device index
(claim tiers, GPU-NIC alignment, the 8-GPU probe), and that no device is handed out twice. No
result numbers are asserted: they belong in docs/placement.md, not in a test.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from bench import placement as sim
from extender.core.placement import Placement
from loadtests import topology_fleet as tc

NODES, JOBS, SEED = 12, 150, 3
#: Attributes that put devices in one `nvlink` group in the generated cluster, per DEFAULT_DRIVERS.
NVLINK_ATTRIBUTES = ("nvlinkDomain", "parentUUID", "xgmiHive", "roceDomain")
VERBS = ("filter", "prioritize", "choose_allocations", "allocations_on")


@pytest.fixture(scope="module")
def runs() -> Iterator[tuple[dict[str, sim.PolicyRun], dict[str, Counter[str]], list[sim.Job]]]:
    cluster = tc.generate(nodes=NODES, seed=SEED)
    trace = sim.make_trace(cluster, steps=200, seed=SEED, load=0.9, mean_lifetime=30)[:JOBS]
    steps = trace[-1].arrival + 1
    calls: dict[int, Counter[str]] = {}
    with pytest.MonkeyPatch.context() as patch:
        for verb in VERBS:
            original = getattr(Placement, verb)

            def counted(self: Placement, *args: Any, _verb: str = verb, _original: Any = original) -> Any:
                calls.setdefault(id(self), Counter())[_verb] += 1
                return _original(self, *args)

            patch.setattr(Placement, verb, counted)
        results = {
            policy: sim.simulate(cluster, trace, policy=policy, steps=steps, warmup=0, seed=SEED)
            for policy in sim.POLICIES
        }
    by_policy = {policy: calls.get(id(run.placement), Counter()) for policy, run in results.items()}
    yield results, by_policy, trace


def _value(attributes: dict[str, Any], name: str) -> Any:
    typed = attributes.get(name)
    return None if typed is None else next(iter(typed.values()))


def _device_levels(run: sim.PolicyRun) -> dict[tuple[str, str, str], tuple[Any, Any, Any]]:
    """(driver, pool, device) -> (nvlink, pcie root, numa) straight from the ResourceSlices.

    A MIG slice publishes no PCIe root or NUMA node: it sits on its parent GPU's (the device whose
    `uuid` its `parentUUID` names), which is what the topology model reads too.
    """
    out = {}
    by_uuid: dict[tuple[str, str], dict[str, Any]] = {}
    devices = []
    for slice_ in run.state.list("ResourceSlice"):
        spec = slice_["spec"]
        for device in spec.get("devices", ()):
            devices.append((spec, device))
            if "uuid" in device["attributes"]:
                by_uuid[(spec["pool"]["name"], _value(device["attributes"], "uuid"))] = device["attributes"]
    for spec, device in devices:
        attributes = device["attributes"]
        parent = by_uuid.get((spec["pool"]["name"], _value(attributes, "parentUUID")), {})
        nvlink = next((_value(attributes, n) for n in NVLINK_ATTRIBUTES if n in attributes), None)
        levels = (
            nvlink,
            _value(attributes, tc.PCIE_ROOT) or _value(parent, tc.PCIE_ROOT),
            _value(attributes, tc.NUMA_NODE) if tc.NUMA_NODE in attributes else _value(parent, tc.NUMA_NODE),
        )
        out[(spec["driver"], spec["pool"]["name"], device["name"])] = levels
    return out


def _tier(levels: list[tuple[Any, Any, Any]]) -> int:
    for level in range(3):
        values = {entry[level] for entry in levels}
        if None not in values and len(values) == 1:
            return level
    return sim.TIERS.index("node")  # the generated cluster publishes no socket attribute


def _results(claim: dict[str, Any]) -> list[dict[str, Any]]:
    return claim["status"]["allocation"]["devices"]["results"]


def test_both_policies_replay_the_same_trace(runs) -> None:
    results, _, trace = runs
    for run in results.values():
        assert [r.job.number for r in run.records] == [job.number for job in trace]


def test_both_policies_go_through_placement(runs) -> None:
    results, calls, trace = runs
    for policy, run in results.items():
        placed = sum(r.node is not None for r in run.records) + run.placeable_8gpu
        assert calls[policy]["filter"] >= len(trace) + run.placeable_8gpu
        if policy == sim.TOPOLOGY:
            assert calls[policy]["prioritize"] == placed
            assert calls[policy]["choose_allocations"] == placed
        else:
            assert calls[policy]["prioritize"] == 0
            assert calls[policy]["choose_allocations"] == 0
            assert calls[policy]["allocations_on"] == placed


def test_claim_tiers_match_the_final_cluster_state(runs) -> None:
    results, _, _ = runs
    for run in results.values():
        levels = _device_levels(run)
        assert run.live, "the trace should leave running jobs to check"
        for record in run.live:
            assigned: list[tuple[str, str, str]] = []
            for i, claim_record in enumerate(record.claims):
                claim = run.state.get("ResourceClaim", f"{record.job.name}-c{i}", tc.NAMESPACE)
                assert claim is not None and claim["status"]["reservedFor"][0]["name"] == record.job.name
                devices = [(r["driver"], r["pool"], r["device"]) for r in _results(claim)]
                assert {pool for _, pool, _ in devices} == {record.node}
                assert len(devices) == claim_record.devices
                assert _tier([levels[d] for d in devices]) == claim_record.tier
                assigned.extend(devices)
            assert sorted(assigned) == sorted(tuple(d) for d in record.devices)
            if record.gpu_nic_aligned is not None:
                gpu_roots = {levels[d][1] for d in assigned if d[0] == tc.NVIDIA_DRIVER}
                nic_roots = {levels[d][1] for d in assigned if d[0] == tc.NIC_DRIVER}
                assert record.gpu_nic_aligned == bool(gpu_roots & nic_roots)


def test_no_claim_beats_the_best_achievable_tier(runs) -> None:
    results, _, _ = runs
    for run in results.values():
        claims = [c for r in run.records for c in r.claims if c.devices >= 2]
        assert claims
        assert all(c.best <= c.tier for c in claims)


def test_metrics_are_computed_from_the_records(runs) -> None:
    results, _, _ = runs
    for run in results.values():
        figures = sim.metrics(run)
        placed = [r for r in run.records if r.node is not None]
        multi = [c for r in placed for c in r.claims if c.devices >= 2]
        aligned = [r.gpu_nic_aligned for r in placed if r.gpu_nic_aligned is not None]
        assert figures["unplaced"] == len(run.records) - len(placed)
        assert figures["best_tier_share"] == pytest.approx(
            100 * sum(c.tier == c.best for c in multi) / len(multi)
        )
        assert figures["gpu_nic_share"] == pytest.approx(100 * sum(aligned) / len(aligned))
        assert figures["placeable_8gpu"] == run.placeable_8gpu


def test_no_device_is_allocated_twice(runs) -> None:
    results, _, _ = runs
    for run in results.values():
        taken = [
            (r["driver"], r["pool"], r["device"])
            for claim in run.state.list("ResourceClaim")
            if (claim.get("status") or {}).get("allocation")
            for r in _results(claim)
        ]
        assert len(taken) == len(set(taken))


def test_eight_gpu_probe_counts_whole_free_nodes(runs) -> None:
    results, _, _ = runs
    for run in results.values():
        assert not any(c["metadata"]["name"].startswith("probe-") for c in run.state.list("ResourceClaim"))
        busy = {
            r["pool"]
            for claim in run.state.list("ResourceClaim")
            if (claim.get("status") or {}).get("allocation")
            for r in _results(claim)
            if r["driver"] == tc.NVIDIA_DRIVER
        }
        eight_gpu_nodes = {
            node["metadata"]["name"]
            for node in run.state.list("Node")
            if tc.NODE_TYPES[node["metadata"]["labels"][tc.NODE_TYPE_LABEL]].capacity.get(tc.GPU_CLASS) == 8
        }
        # An 8-GPU claim needs a whole 8-GPU node, so the probe places one per idle such node.
        assert run.placeable_8gpu == len(eight_gpu_nodes - busy)


def test_a100_measures_follow_the_final_claims(runs) -> None:
    """Whole A100s free and the largest creatable MIG profile, recomputed from the claims by hand."""
    results, _, _ = runs
    for run in results.values():
        a100_nodes = [
            node["metadata"]["name"]
            for node in run.state.list("Node")
            if node["metadata"]["labels"][tc.NODE_TYPE_LABEL] == "a100-mig"
        ]
        assert a100_nodes
        memory: dict[tuple[str, int], set[int]] = {
            (n, g): set() for n in a100_nodes for g in range(tc.A100_PER_NODE)
        }
        compute: Counter[tuple[str, int]] = Counter()
        for claim in run.state.list("ResourceClaim"):
            for r in _results(claim) if (claim.get("status") or {}).get("allocation") else ():
                if r["pool"] not in a100_nodes:
                    continue
                parts = r["device"].split("-")  # gpu-<g> or gpu-<g>-mig-<Ng>-<start>
                key = (r["pool"], int(parts[1]))
                if len(parts) == 2:
                    memory[key] |= set(range(8))
                    compute[key] += 7
                else:
                    profile = next(p for p in tc.MIG_PROFILES if p.startswith(parts[3] + "."))
                    slices, span, _ = tc.MIG_PROFILES[profile]
                    memory[key] |= set(range(int(parts[4]), int(parts[4]) + span))
                    compute[key] += slices
        largest = []
        for key, taken in memory.items():
            fitting = [
                slices
                for slices, span, starts in tc.MIG_PROFILES.values()
                for start in starts
                if not taken & set(range(start, start + span)) and compute[key] + slices <= 7
            ]
            largest.append(max(fitting, default=0))
        whole, mean_largest, count = sim.a100_state(run.placement)
        assert count == len(memory)
        assert whole == sum(1 for key, taken in memory.items() if not taken and compute[key] == 0)
        assert mean_largest == pytest.approx(sum(largest) / len(largest))
        figures = sim.metrics(run)
        a100_jobs = [r for r in run.records if r.job.shape.family == tc.A100_FAMILY]
        assert a100_jobs and figures["a100_unplaced"] == sum(r.node is None for r in a100_jobs)
