"""Placement-quality simulator: first-fit versus topology choice on a churning heterogeneous cluster.

Scope: replays one seeded trace of job arrivals and departures on a generated cluster
(`loadtests.topology_fleet`) once per policy, through the service's own placement code, and reports
how good the placements were. It measures placement quality, not latency under load
(`bench.filter_bench` does that) and not the HTTP layer.

- Trace: at every step each device family (NVIDIA GPU, A100, Gaudi, AMD) gets Poisson arrivals at
  the rate that offers `load` times its capacity for jobs of `mean_lifetime` steps (`SHAPES`
  gives the mix: 1/2/4/8 GPUs, GPU+NIC in one or two claims, Gaudi, AMD, and on the DynamicMIG
  A100s MIG profiles 1g-7g and whole A100s; the A100 family counts compute slices). A job's
  lifetime is drawn at arrival, so both policies see the same trace; a job that cannot be
  placed is dropped.
- A job is a Pod with 1-2 ResourceClaims (`resourceClaimName`), created in the ClusterState
  just before it is scheduled: `verdict = placement.filter(pod, all_nodes)`; no passed node means
  not placed. `first-fit` takes the first passed node in cluster order and upstream's first-fit
  devices (`Placement.allocations_on`); `topology` takes the node `Placement.prioritize` ranks
  highest (ties: cluster order) and the devices bind would write (`Placement.choose_allocations`).
  The claims are written as the binder writes them (finalizer, `status.allocation`,
  `reservedFor`) and deleted when the job departs. Each policy gets a fresh ClusterState and
  Placement.
- Metrics (over jobs arriving after `warmup` steps): (1) for every placed claim with >= 2
  devices, its tier (the most local level all its devices share: nvlink < pcie < numa < socket <
  node) against the best tier achievable at that moment (the most local level at which some
  passed node has one group of free devices sharing that level's coordinate that holds every
  request of the claim); (2) GPU-NIC jobs whose NIC shares a PCIe root with one of the job's
  GPUs; (3) jobs not placed; (4) after the trace, how many 8-GPU single-claim jobs can still be
  placed one after another with the same policy (fragmentation); (5) A100 jobs not placed, and at
  every measured step the A100s wholly free (for whole-GPU jobs) and the largest MIG profile each
  A100 can still create (from the counters allocated devices hold); also mean pairwise locality
  of multi-device claims and the time per decision (filter + node and device choice).

CLI: `python -m bench.placement --nodes 64 --steps 400 --seeds 1 2 3 [--markdown docs/placement.md]
[--plot docs/placement.png]` prints the table, the machine and the command; `--topology-weights L F P`
tries other scoring weights, `--partition-weights P H` the partition terms', `--probe-every N` sets the
8-GPU probe checkpoints (see `--help`).
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from extender.allocator.features import Features
from extender.allocator.model import DeviceID
from extender.claims import DELETE_PROTECTION_FINALIZER
from extender.cluster.state import ClusterState
from extender.core import scoring
from extender.core.assumed import AssumeCache
from extender.core.placement import Placement
from extender.index.topology import LEVELS, NO_COORD, NODE_LEVEL, TopologySettings
from extender.objects import Obj
from extender.pods import Pod, parse_pod
from kernels import topology as kernels
from loadtests import topology_fleet as tc

FIRST_FIT, TOPOLOGY = "first-fit", "topology"
POLICIES: tuple[str, ...] = (FIRST_FIT, TOPOLOGY)
TIERS: tuple[str, ...] = (*LEVELS, "node")
PCIE = LEVELS.index("pcie")
_UIDS = uuid.UUID("6f1d3c52-94a4-4d0c-9b0e-2f3c1a8e7d10")
_RESULTS_BEGIN, _RESULTS_END = "<!-- results:begin -->", "<!-- results:end -->"

#: (request name, device class, count)
Request = tuple[str, str, int]


@dataclass(frozen=True, slots=True)
class JobShape:
    """One kind of job: its claims, the family whose capacity sets its rate, its weight there."""

    name: str
    family: str  # device class (or `tc.A100_FAMILY`) whose capacity drives the arrival rate
    weight: float  # relative to the other shapes of the family
    claims: tuple[tuple[Request, ...], ...]
    units: float = 0.0  # capacity units of the family the job takes (0: its devices of the family)

    def devices(self, device_class: str) -> int:
        return sum(n for claim in self.claims for _, c, n in claim if c == device_class)

    def size(self) -> float:
        """What the job takes of its family's capacity (A100 jobs: compute slices)."""
        return self.units or float(self.devices(self.family))


def _one(name: str, family: str, weight: float, count: int, request: str = "devices") -> JobShape:
    return JobShape(name, family, weight, (((request, family, count),),))


SHAPES: tuple[JobShape, ...] = (
    _one("gpu-1", tc.GPU_CLASS, 28, 1, "gpus"),
    _one("gpu-2", tc.GPU_CLASS, 20, 2, "gpus"),
    _one("gpu-4", tc.GPU_CLASS, 10, 4, "gpus"),
    _one("gpu-8", tc.GPU_CLASS, 4, 8, "gpus"),
    JobShape("gpu+nic-1claim", tc.GPU_CLASS, 16, ((("gpu", tc.GPU_CLASS, 1), ("nic", tc.NIC_CLASS, 1)),)),
    JobShape(
        "gpu-2+nic-2claims", tc.GPU_CLASS, 8, ((("gpus", tc.GPU_CLASS, 2),), (("nic", tc.NIC_CLASS, 1),))
    ),
    *(
        JobShape(name, tc.A100_FAMILY, weight, (((request, cls, count),),), units)
        for name, weight, request, cls, count, units in (
            ("mig-1g", 30, "slice", tc.mig_class("1g.10gb"), 1, 1),
            ("mig-1g-x2", 10, "slices", tc.mig_class("1g.10gb"), 2, 2),
            ("mig-2g", 14, "slice", tc.mig_class("2g.20gb"), 1, 2),
            ("mig-3g", 10, "slice", tc.mig_class("3g.40gb"), 1, 3),
            ("mig-4g", 6, "slice", tc.mig_class("4g.40gb"), 1, 4),
            ("mig-7g", 4, "slice", tc.mig_class("7g.80gb"), 1, 7),
            ("a100-1", 12, "gpus", tc.A100_CLASS, 1, 7),
            ("a100-2", 4, "gpus", tc.A100_CLASS, 2, 14),
        )
    ),
    _one("gaudi-1", tc.GAUDI_CLASS, 30, 1),
    _one("gaudi-2", tc.GAUDI_CLASS, 40, 2),
    _one("gaudi-4", tc.GAUDI_CLASS, 30, 4),
    _one("amd-1", tc.AMD_CLASS, 30, 1),
    _one("amd-2", tc.AMD_CLASS, 40, 2),
    _one("amd-4", tc.AMD_CLASS, 30, 4),
)
PROBE_SHAPE = _one("probe-gpu-8", tc.GPU_CLASS, 0, 8, "gpus")


@dataclass(frozen=True, slots=True)
class Job:
    number: int
    shape: JobShape
    arrival: int  # step
    departure: int  # step at whose start it leaves (> arrival)

    @property
    def name(self) -> str:
        return f"job-{self.number:05d}" if self.number >= 0 else f"probe-{-self.number:03d}"


@dataclass(slots=True)
class ClaimRecord:
    devices: int
    tier: int  # index into TIERS
    best: int  # best tier achievable when it was placed
    locality: float


@dataclass(slots=True)
class JobRecord:
    job: Job
    node: str | None  # None: not placed
    claims: list[ClaimRecord] = field(default_factory=list)
    devices: list[DeviceID] = field(default_factory=list)
    gpu_nic_aligned: bool | None = None  # None: not a GPU-NIC job
    seconds: float = 0.0
    method: str = ""  # topology: how the chosen node's device set was found
    error: str = ""  # filter failed as a whole (counted as not placed, reported apart)


@dataclass(slots=True)
class PolicyRun:
    """One policy over one trace: measured records, the final state and the end probe."""

    policy: str
    seed: int
    records: list[JobRecord]
    live: list[JobRecord]  # placed jobs still running at the end (measured or not)
    placeable_8gpu: int
    placeable_8gpu_checkpoints: list[int]  # the probe every `probe_every` measured steps
    gpu_utilization: float  # mean share of NVIDIA GPUs in use over the measured steps
    a100_whole_free: float  # mean over measured steps of A100s with nothing allocated
    a100_largest: float  # mean over steps and A100s of the largest MIG profile creatable (g)
    a100_count: int
    kernel_fallbacks: int  # placement warnings: kernel choice rejected or no set found
    state: ClusterState
    placement: Placement


def make_trace(
    cluster: tc.TopologyCluster, *, steps: int, seed: int, load: float, mean_lifetime: float
) -> list[Job]:
    """The seeded arrival/departure trace (see module docstring), in arrival order."""
    rng = np.random.default_rng(seed)
    families: dict[str, list[JobShape]] = defaultdict(list)
    for shape in SHAPES:
        families[shape.family].append(shape)
    rates: dict[str, float] = {}
    for family, shapes in families.items():
        weights = np.array([s.weight for s in shapes])
        mean_size = float(weights @ np.array([s.size() for s in shapes]) / weights.sum())
        rates[family] = load * cluster.capacity.get(family, 0) / (mean_size * mean_lifetime)
    jobs: list[Job] = []
    for step in range(steps):
        arriving: list[JobShape] = []
        for family, shapes in families.items():
            weights = np.array([s.weight for s in shapes])
            picks = rng.choice(len(shapes), size=rng.poisson(rates[family]), p=weights / weights.sum())
            arriving.extend(shapes[i] for i in picks)
        for i in rng.permutation(len(arriving)):
            lifetime = max(1, round(rng.exponential(mean_lifetime)))
            jobs.append(Job(len(jobs) + 1, arriving[i], step, step + lifetime))
    return jobs


# ----------------------------------------------------------------------------- objects
def _claims(job: Job) -> list[Obj]:
    out = []
    for i, requests in enumerate(job.shape.claims):
        name = f"{job.name}-c{i}"
        out.append(
            {
                "apiVersion": tc.DRA_API,
                "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": tc.NAMESPACE, "uid": str(uuid.uuid5(_UIDS, name))},
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": r,
                                "exactly": {"deviceClassName": c, "allocationMode": "ExactCount", "count": n},
                            }
                            for r, c, n in requests
                        ]
                    }
                },
            }
        )
    return out


def _pod(job: Job, claims: list[Obj]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": job.name, "namespace": tc.NAMESPACE, "uid": str(uuid.uuid5(_UIDS, job.name))},
        "spec": {
            "containers": [{"name": "main", "image": "busybox"}],
            "resourceClaims": [
                {"name": f"c{i}", "resourceClaimName": c["metadata"]["name"]} for i, c in enumerate(claims)
            ],
        },
    }


def _allocated_claim(claim: Obj, allocation: Obj, pod: Obj) -> Obj:
    """What the binder writes: delete-protection finalizer, allocation, reservedFor the pod."""
    meta = pod["metadata"]
    return {
        **claim,
        "metadata": {**claim["metadata"], "finalizers": [DELETE_PROTECTION_FINALIZER]},
        "status": {
            "allocation": allocation,
            "reservedFor": [{"resource": "pods", "name": meta["name"], "uid": meta["uid"]}],
        },
    }


# ----------------------------------------------------------------------------- topology measures
def claim_tier(coords: np.ndarray) -> int:
    """The most local level all rows share (coords: int [k, levels]); NODE_LEVEL if none."""
    for level in range(NODE_LEVEL):
        column = coords[:, level]
        if column[0] != NO_COORD and (column == column[0]).all():
            return level
    return NODE_LEVEL


def claim_locality(coords: np.ndarray, distances: Sequence[float]) -> float:
    """1 - (mean pairwise level distance - d_min) / (d_max - d_min); 1 for a single device."""
    pairs = [claim_tier(coords[[i, j]]) for i in range(len(coords)) for j in range(i + 1, len(coords))]
    if not pairs:
        return 1.0
    mean = float(np.mean([distances[p] for p in pairs]))
    return 1.0 - (mean - distances[0]) / (distances[-1] - distances[0])


def best_tier(placement: Placement, passed: list[str], requests: Sequence[Request]) -> int:
    """The most local level at which one group of free devices on a passed node holds the claim.

    A group is the devices of one node sharing that level's coordinate; it holds the claim when
    every request finds its count among the group's free devices of its class (the classes of
    `SHAPES` never overlap, so per-request counts plus the total suffice). A device consuming
    shared counters counts as free when its own consumption fits what is left (a necessary
    condition: two such devices that fit alone may not fit together, so for multi-slice MIG
    claims the best tier may be optimistic, never pessimistic).
    """
    index = placement.index()
    _, free = placement.allocated_state()
    free = free & counters_fit(placement)
    on_passed = np.isin(index.row_node, [index.node_pos[n] for n in passed])
    masks = [(index.mask(c, ()).match & free & on_passed, n) for _, c, n in requests]
    union = np.logical_or.reduce([m for m, _ in masks])
    total = sum(n for _, n in masks)
    node = index.row_node.astype(np.int64)
    for level in range(NODE_LEVEL):
        coords = index.row_coords[:, level].astype(np.int64)
        chosen = union & (coords != NO_COORD)
        # coordinates are interned cluster-wide but only meaningful within a node: key by both
        _, group = np.unique(node[chosen] * (int(coords.max()) + 1) + coords[chosen], return_inverse=True)
        if group.size == 0:
            continue
        fits = np.bincount(group) >= total
        for mask, count in masks:
            fits &= np.bincount(group, weights=mask[chosen], minlength=len(fits)) >= count
        if fits.any():
            return level
    return NODE_LEVEL


def counters_fit(placement: Placement) -> np.ndarray:
    """Per row: False where the device consumes shared counters and its consumption does not fit."""
    index = placement.index()
    _, free = placement.allocated_state()
    groups = scoring.partitions(index)
    out = np.ones(index.num_rows, dtype=bool)
    rows = np.flatnonzero(groups.row_group >= 0)
    if len(rows):
        group_free, _ = scoring.group_state(groups, free)
        left = group_free[groups.row_group[rows]]
        out[rows] = np.all(groups.row_cost[rows] <= left + 1e-9, axis=1)
    return out


def a100_state(placement: Placement) -> tuple[int, float, int]:
    """(A100s wholly free, mean over A100s of the largest MIG profile still creatable in compute
    slices (7 for a free GPU, 0 for a full one), A100s): from the counters allocated devices hold."""
    index = placement.index()
    _, free = placement.allocated_state()
    groups = scoring.partitions(index)
    counted = groups.group_counters > 0
    if not counted.any():
        return 0, 0.0, 0
    group_free, _ = scoring.group_state(groups, free)
    whole = int(np.all(group_free[counted] >= 1.0 - 1e-9, axis=1).sum())
    rows = np.flatnonzero((groups.row_group >= 0) & free & counters_fit(placement))
    compute = np.array([_mig_compute(index.row_device[r]) for r in rows], dtype=float)
    largest = np.zeros(groups.num_groups)
    np.maximum.at(largest, groups.row_group[rows], compute)
    return whole, float(largest[counted].mean()), int(counted.sum())


def _mig_compute(device: Any) -> int:
    """Compute slices of a MIG device's profile (0 for a whole GPU: not a MIG profile)."""
    profile = (device.attributes.get("profile") or {}).get("string")
    return tc.MIG_PROFILES[profile][0] if profile in tc.MIG_PROFILES else 0


# ----------------------------------------------------------------------------- simulation
class _WarningCounter(logging.Handler):
    """Counts placement warnings that mean the kernel's choice was not used."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


def choose(placement: Placement, pod: Pod, passed: list[str], policy: str) -> tuple[str, Any, Any]:
    """(node, allocations, evaluation) `policy` picks among the nodes that passed filter.

    `first-fit`: the first passed node (cluster order) and upstream's first-fit devices there;
    any other policy: the node `prioritize` ranks highest (ties: cluster order) and the devices
    bind would write. `allocations` is None where the node has none (the job is not placed).
    """
    evaluation = placement.evaluate(pod, passed)
    if policy == FIRST_FIT:
        node = passed[0]
        return node, placement.allocations_on(evaluation, node), evaluation
    ranked = placement.prioritize(pod, passed)
    node = ranked[max(range(len(ranked)), key=lambda i: (ranked[i].score, -i))].host
    return node, placement.choose_allocations(evaluation, node), evaluation


def schedule(placement: Placement, nodes: list[str], job: Job, policy: str) -> JobRecord:
    """Create the job's claims, choose a node and devices by `policy`, write the allocation."""
    state = placement.state
    claims = _claims(job)
    for claim in claims:
        state.upsert(claim)
    pod = _pod(job, claims)
    record_of_pod = parse_pod(pod)
    started = time.perf_counter()
    verdict = placement.filter(record_of_pod, nodes)
    node, allocations, method = None, None, ""
    if not verdict.error and verdict.passed:
        node, allocations, evaluation = choose(placement, record_of_pod, verdict.passed, policy)
        if policy != FIRST_FIT:
            chosen = placement.scores(evaluation, [node]).get(node)
            method = chosen.method if chosen is not None else ""
    seconds = time.perf_counter() - started
    if node is None or allocations is None:
        for claim in claims:
            state.delete("ResourceClaim", claim["metadata"]["name"], tc.NAMESPACE)
        return JobRecord(job, None, seconds=seconds, error=verdict.error)
    # The best achievable tier is a property of the moment before this job's devices are taken.
    bests = [best_tier(placement, verdict.passed, requests) for requests in job.shape.claims]
    index = placement.index()
    start = index.node_start[index.node_pos[node]]
    stop = index.node_start[index.node_pos[node] + 1]
    distances = placement.topology.level_distance
    by_ref = {a.claim.ref: a for a in allocations}
    record = JobRecord(job, node, seconds=seconds, method=method)
    gpu_roots: set[int] = set()
    nic_roots: list[int] = []
    for claim, best in zip(claims, bests, strict=True):
        allocation = by_ref[f"{tc.NAMESPACE}/{claim['metadata']['name']}"]
        rows = []
        for result in allocation.devices:
            found = index.rows_of[result.device.id]
            row = int(found[(found >= start) & (found < stop)][0])
            rows.append(row)
            record.devices.append(result.device.id)
            root = int(index.row_coords[row, PCIE])
            if result.device.id.driver == tc.NVIDIA_DRIVER:
                gpu_roots.add(root)
            elif result.device.id.driver == tc.NIC_DRIVER:
                nic_roots.append(root)
        coords = index.row_coords[rows]
        record.claims.append(
            ClaimRecord(len(rows), claim_tier(coords), best, claim_locality(coords, distances))
        )
        state.upsert(_allocated_claim(claim, allocation.allocation, pod))
    if nic_roots and job.shape.devices(tc.GPU_CLASS):
        record.gpu_nic_aligned = any(r != NO_COORD and r in gpu_roots for r in nic_roots)
    state.upsert({**pod, "spec": {**pod["spec"], "nodeName": node}})
    return record


def release(state: ClusterState, job: Job) -> None:
    """The job departs: its pod and claims are deleted (freeing the devices)."""
    for i in range(len(job.shape.claims)):
        state.delete("ResourceClaim", f"{job.name}-c{i}", tc.NAMESPACE)
    state.delete("Pod", job.name, tc.NAMESPACE)


def simulate(
    cluster: tc.TopologyCluster,
    trace: list[Job],
    *,
    policy: str,
    steps: int,
    warmup: int,
    seed: int = 0,
    probe_every: int = 0,
    topology: TopologySettings | None = None,
) -> PolicyRun:
    """Replay `trace` for `steps` steps under `policy` on a fresh ClusterState and Placement.

    `probe_every` > 0 also runs the 8-GPU probe every that many measured steps (the end value
    alone depends much on the moment the trace stops). `topology`: the scoring settings
    (default: the service's defaults).
    """
    if policy not in POLICIES:
        raise ValueError(f"policy {policy!r} is unknown; allowed: {', '.join(POLICIES)}")
    state = ClusterState.from_objects(cluster.objects)
    placement = Placement(
        state, features=Features(), assumed=AssumeCache(), topology=topology or TopologySettings()
    )
    warnings = _WarningCounter()
    placement_log = logging.getLogger("extender.core")  # the ranking and the bind choice warn
    previous_level = placement_log.level
    if placement_log.getEffectiveLevel() > logging.WARNING:
        placement_log.setLevel(logging.WARNING)  # the counter must see them even when not printed
    placement_log.addHandler(warnings)
    try:
        arrivals: dict[int, list[Job]] = defaultdict(list)
        for job in trace:
            arrivals[job.arrival].append(job)
        departures: dict[int, list[JobRecord]] = defaultdict(list)
        records: list[JobRecord] = []
        gpus_in_use, utilization, probes = 0, [], []
        whole_free: list[int] = []
        largest: list[float] = []
        a100s = 0
        for step in range(steps):
            for record in departures.pop(step, []):
                release(state, record.job)
                gpus_in_use -= record.job.shape.devices(tc.GPU_CLASS)
            for job in arrivals.get(step, []):
                record = schedule(placement, cluster.node_names, job, policy)
                if record.node is not None:
                    departures[job.departure].append(record)
                    gpus_in_use += job.shape.devices(tc.GPU_CLASS)
                if step >= warmup:
                    records.append(record)
            if step >= warmup:
                utilization.append(gpus_in_use / max(1, cluster.capacity[tc.GPU_CLASS]))
                free_gpus, mean_largest, a100s = a100_state(placement)
                whole_free.append(free_gpus)
                largest.append(mean_largest)
                if probe_every > 0 and (step - warmup + 1) % probe_every == 0:
                    probes.append(probe_8gpu(placement, cluster.node_names, policy))
        live = [r for pending in departures.values() for r in pending]
        placeable = probe_8gpu(placement, cluster.node_names, policy)
    finally:
        placement_log.removeHandler(warnings)
        placement_log.setLevel(previous_level)
    return PolicyRun(
        policy=policy,
        seed=seed,
        records=records,
        live=live,
        placeable_8gpu=placeable,
        placeable_8gpu_checkpoints=probes,
        gpu_utilization=float(np.mean(utilization)) if utilization else 0.0,
        a100_whole_free=float(np.mean(whole_free)) if whole_free else 0.0,
        a100_largest=float(np.mean(largest)) if largest else 0.0,
        a100_count=a100s,
        kernel_fallbacks=warnings.count,
        state=state,
        placement=placement,
    )


def probe_8gpu(placement: Placement, nodes: list[str], policy: str) -> int:
    """How many 8-GPU jobs still fit, placed one after another; the state is restored after."""
    placed: list[Job] = []
    for number in range(1, len(nodes) + 1):
        job = Job(-number, PROBE_SHAPE, 0, 1)
        if schedule(placement, nodes, job, policy).node is None:
            break
        placed.append(job)
    for job in placed:
        release(placement.state, job)
    return len(placed)


# ----------------------------------------------------------------------------- metrics
#: (key, label, unit, decimals); `PLOTTED` are the quality metrics the plot shows.
METRICS: tuple[tuple[str, str, str, int], ...] = (
    ("best_tier_share", "multi-device claims at best tier", " %", 1),
    ("gpu_nic_share", "GPU-NIC jobs on one PCIe root", " %", 1),
    ("unplaced", "jobs not placed", "", 1),
    ("placeable_8gpu", "8-GPU jobs placeable at end", "", 1),
    ("placeable_8gpu_mean", "8-GPU jobs placeable (checkpoint mean)", "", 1),
    ("a100_unplaced", "A100 jobs not placed (MIG + whole)", "", 1),
    ("a100_whole_free", "whole A100s free (step mean)", "", 2),
    ("a100_largest", "largest MIG profile creatable per A100 (g, step mean)", "", 2),
    ("mean_locality", "mean locality (multi-device claims)", "", 3),
    ("decision_ms", "ms per decision (mean)", "", 2),
)


PLOTTED: tuple[str, ...] = (
    "best_tier_share",
    "gpu_nic_share",
    "unplaced",
    "placeable_8gpu",
    "a100_unplaced",
    "a100_whole_free",
    "a100_largest",
)
#: Metrics where a lower value is better (the plot says which way).
LOWER_IS_BETTER: frozenset[str] = frozenset({"unplaced", "a100_unplaced"})


def metrics(run: PolicyRun) -> dict[str, float]:
    """The reported figures of one run, computed from its job records."""
    placed = [r for r in run.records if r.node is not None]
    multi = [c for r in placed for c in r.claims if c.devices >= 2]
    gpu_nic = [r.gpu_nic_aligned for r in placed if r.gpu_nic_aligned is not None]
    seconds = [r.seconds for r in run.records] or [0.0]
    return {
        "jobs": len(run.records),
        "unplaced": len(run.records) - len(placed),
        "unplaced_devices": sum(
            n for r in run.records if r.node is None for claim in r.job.shape.claims for _, _, n in claim
        ),
        "multi_claims": len(multi),
        "best_tier_share": 100.0 * sum(c.tier == c.best for c in multi) / max(1, len(multi)),
        "gpu_nic_jobs": len(gpu_nic),
        "gpu_nic_share": 100.0 * sum(gpu_nic) / max(1, len(gpu_nic)),
        "placeable_8gpu": run.placeable_8gpu,
        "a100_unplaced": sum(r.node is None for r in run.records if r.job.shape.family == tc.A100_FAMILY),
        "a100_mig_unplaced": sum(
            r.node is None
            for r in run.records
            if r.job.shape.devices(tc.A100_CLASS) == 0 and r.job.shape.family == tc.A100_FAMILY
        ),
        "a100_whole_unplaced": sum(r.node is None for r in run.records if r.job.shape.devices(tc.A100_CLASS)),
        "a100_whole_free": run.a100_whole_free,
        "a100_largest": run.a100_largest,
        "a100_count": run.a100_count,
        "placeable_8gpu_mean": float(np.mean(run.placeable_8gpu_checkpoints or [run.placeable_8gpu])),
        "mean_locality": float(np.mean([c.locality for c in multi])) if multi else 1.0,
        "decision_ms": 1000.0 * float(np.mean(seconds)),
        "decision_p95_ms": 1000.0 * float(np.percentile(seconds, 95)),
        "gpu_utilization": 100.0 * run.gpu_utilization,
        "kernel_fallbacks": run.kernel_fallbacks,
        "bounded_choices": sum(r.method == "bounded" for r in placed),
        "first_fit_choices": sum(r.method == "first-fit" for r in placed),
        "filter_errors": sum(bool(r.error) for r in run.records),
    }


def by_shape(runs: list[PolicyRun]) -> dict[str, dict[str, tuple[int, int, int]]]:
    """policy -> shape -> (multi-device claims, of them at best tier, jobs not placed), pooled."""
    out: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0, 0]))
    for run in runs:
        for r in run.records:
            entry = out[run.policy][r.job.shape.name]
            entry[2] += r.node is None
            for c in r.claims:
                if c.devices >= 2:
                    entry[0] += 1
                    entry[1] += c.tier == c.best
    return {p: {s: (v[0], v[1], v[2]) for s, v in shapes.items()} for p, shapes in out.items()}


def summarize(all_metrics: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, tuple[float, float]]]:
    """policy -> metric -> (mean, sample standard deviation over seeds; 0 for one seed)."""
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for policy, per_seed in all_metrics.items():
        out[policy] = {}
        for key in per_seed[0]:
            values = np.array([m[key] for m in per_seed], dtype=float)
            out[policy][key] = (float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else 0.0)
    return out


# ----------------------------------------------------------------------------- reporting
def results_table(summary: dict[str, dict[str, tuple[float, float]]], seeds: int) -> str:
    """The per-policy results as a Markdown table (mean ± standard deviation over seeds)."""
    lines = ["| policy | " + " | ".join(m[1] for m in METRICS) + " |", "|---|" + "---:|" * len(METRICS)]
    for policy, values in summary.items():
        cells = []
        for key, _, unit, decimals in METRICS:
            mean, spread = values[key]
            cell = f"{mean:.{decimals}f}{unit}"
            cells.append(f"{cell} ± {spread:.{decimals}f}" if seeds > 1 else cell)
        lines.append(f"| {policy} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def seed_table(all_metrics: dict[str, list[dict[str, float]]], seeds: list[int]) -> str:
    """The quality metrics (all but locality and time) per seed and policy."""
    shown = [m for m in METRICS if m[0] not in ("mean_locality", "decision_ms")]
    lines = [
        "| seed | policy | " + " | ".join(m[1] for m in shown) + " |",
        "|---|---|" + "---:|" * len(shown),
    ]
    for i, seed in enumerate(seeds):
        for policy, per_seed in all_metrics.items():
            cells = [f"{per_seed[i][k]:.{d}f}{u}" for k, _, u, d in shown]
            lines.append(f"| {seed} | {policy} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def shape_table(shapes: dict[str, dict[str, tuple[int, int, int]]]) -> str:
    """Per job shape and policy: share of multi-device claims at best tier, and jobs not placed."""
    policies = list(shapes)
    header = "| shape | " + " | ".join(f"{p}: at best tier | {p}: not placed" for p in policies) + " |"
    lines = [header, "|---|" + "---:|---:|" * len(policies)]
    for shape in SHAPES:
        cells = []
        for policy in policies:
            multi, best, unplaced = shapes[policy].get(shape.name, (0, 0, 0))
            cells.extend([f"{100.0 * best / multi:.1f} % of {multi}" if multi else "-", str(unplaced)])
        lines.append(f"| {shape.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(
    all_metrics: dict[str, list[dict[str, float]]],
    path: Path,
    title: str,
    *,
    shown: Sequence[tuple[str, str, str, int]] | None = None,
    lower_is_better: Collection[str] = (),
) -> None:
    """Bar chart of quality metrics per policy: mean over seeds, dots for each seed.

    `shown` (key, label, unit, decimals): default the `PLOTTED` ones of `METRICS`; units with a
    "%" get a 0-105 axis. `lower_is_better`: keys labelled so (default `LOWER_IS_BETTER`).
    Also draws bench.gang_placement's figure.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = list(shown) if shown is not None else [m for m in METRICS if m[0] in PLOTTED]
    lower = set(lower_is_better) or LOWER_IS_BETTER
    columns = 4
    rows = (len(shown) + columns - 1) // columns
    figure, grid = plt.subplots(rows, columns, figsize=(14, 3.9 * rows), squeeze=False)
    axes = grid.ravel()
    for axis in axes[len(shown) :]:
        axis.set_visible(False)
    policies = list(all_metrics)
    colors = ["#9e9e9e", "#1f77b4", "#ff7f0e"]
    for axis, (key, label, unit, decimals) in zip(axes, shown, strict=False):
        per_seed = [[m[key] for m in all_metrics[p]] for p in policies]
        means = [float(np.mean(v)) for v in per_seed]
        bars = axis.bar(policies, means, color=colors[: len(policies)], width=0.6)
        for x, values in enumerate(per_seed):
            axis.scatter([x] * len(values), values, color="black", s=12, zorder=3)
        axis.bar_label(bars, labels=[f"{m:.{decimals}f}{unit}" for m in means], padding=3, fontsize=8)
        top = max(max(v) for v in per_seed)
        axis.set_ylim(0, 105 if "%" in unit else max(1.0, top) * 1.2)
        better = "lower is better" if key in lower else "higher is better"
        axis.set_title(f"{label}\n({better})", fontsize=9)
        axis.tick_params(labelsize=8)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write_markdown(path: Path, block: str) -> None:
    """Put `block` between the results markers of `path` (the rest of the file is left alone)."""
    wrapped = f"{_RESULTS_BEGIN}\n{block.rstrip()}\n{_RESULTS_END}"
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if _RESULTS_BEGIN in text and _RESULTS_END in text:
        head, rest = text.split(_RESULTS_BEGIN, 1)
        text = f"{head}{wrapped}{rest.split(_RESULTS_END, 1)[1]}"
    else:
        text = f"{text.rstrip()}\n\n{wrapped}\n" if text else f"# Placement quality\n\n{wrapped}\n"
    path.write_text(text, encoding="utf-8")


def report(
    all_metrics: dict[str, list[dict[str, float]]],
    runs: list[PolicyRun],
    *,
    args: argparse.Namespace,
    seeds: list[int],
    command: str,
    elapsed: float,
) -> str:
    """The Markdown results block: command, machine, cluster, tables."""
    from loadtests.scenarios import machine_facts

    info = machine_facts()
    summary = summarize(all_metrics)
    counts = tc.type_counts(args.nodes)
    jobs = np.mean([m["jobs"] for m in all_metrics[POLICIES[0]]])
    context = "; ".join(
        f"**{p}**: NVIDIA GPUs in use {summary[p]['gpu_utilization'][0]:.1f} %, "
        f"devices of unplaced jobs {summary[p]['unplaced_devices'][0]:.1f}, "
        f"p95 decision {summary[p]['decision_p95_ms'][0]:.1f} ms, "
        f"multi-device claims {summary[p]['multi_claims'][0]:.0f}, "
        f"GPU-NIC jobs {summary[p]['gpu_nic_jobs'][0]:.0f}"
        for p in POLICIES
    )
    topology = summary[TOPOLOGY]
    default = TopologySettings()
    settings = args.topology_weights or (
        default.locality_weight,
        default.fragmentation_weight,
        default.packing_weight,
    )
    weights = " ".join(f"{w:g}" for w in settings)
    partition = args.partition_weights or (
        default.partition_packing_weight,
        default.partition_headroom_weight,
    )
    weights += "; partition packing, headroom " + " ".join(f"{w:g}" for w in partition)
    a100 = "; ".join(
        f"**{p}**: A100 MIG jobs not placed {summary[p]['a100_mig_unplaced'][0]:.1f}, "
        f"whole-A100 jobs not placed {summary[p]['a100_whole_unplaced'][0]:.1f}"
        for p in POLICIES
    )
    return "\n".join(
        [
            f"Command: `{command}` ({elapsed:.0f} s wall in all).",
            "",
            f"Machine: {info['cpu']}, {info['usable_cores']} usable cores; Python {info['python']}, "
            f"numpy {info['numpy']}; {info['platform']}.",
            "",
            f"Cluster: {args.nodes} nodes (" + ", ".join(f"{n} {t}" for t, n in counts.items()) + "); "
            f"{args.steps} steps of which the first {args.warmup} are not measured; offered load "
            f"{args.load:g}; mean lifetime {args.lifetime:g} steps; seeds {' '.join(map(str, seeds))}; "
            f"{jobs:.0f} measured jobs per seed; 8-GPU probe also every {args.probe_every} measured steps; "
            f"topology weights (locality, fragmentation, packing) {weights}. "
            "Mean ± sample standard deviation over the seeds:",
            "",
            results_table(summary, len(seeds)),
            "",
            f"Context (means over seeds): {context}. Topology decisions whose node's device set came "
            f"from the bounded search {topology['bounded_choices'][0]:.0f}, from first-fit scoring "
            f"{topology['first_fit_choices'][0]:.0f}; kernel choices rejected by upstream's search "
            f"(logged warnings) {topology['kernel_fallbacks'][0]:.0f}; filter errors "
            + ", ".join(f"{p} {summary[p]['filter_errors'][0]:.0f}" for p in POLICIES)
            + ".",
            "",
            f"A100s ({summary[TOPOLOGY]['a100_count'][0]:.0f} per cluster, DynamicMIG): {a100}.",
            "",
            "Per seed:",
            "",
            seed_table(all_metrics, seeds),
            "",
            "By job shape (all seeds pooled; a claim's best tier counts each claim alone):",
            "",
            shape_table(by_shape(runs)),
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m bench.placement", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=64, help="cluster nodes (default 64)")
    parser.add_argument("--steps", type=int, default=400, help="trace steps (default 400)")
    parser.add_argument("--seed", type=int, help="one seed (same as --seeds N)")
    parser.add_argument("--seeds", type=int, nargs="+", help="seeds, one cluster+trace each (default 1 2 3)")
    parser.add_argument(
        "--load", type=float, default=0.9, help="offered load per device family (default 0.9)"
    )
    parser.add_argument(
        "--lifetime", type=float, default=30.0, help="mean job lifetime in steps (default 30)"
    )
    parser.add_argument("--warmup", type=int, default=60, help="steps not measured at the start (default 60)")
    parser.add_argument(
        "--probe-every",
        type=int,
        default=40,
        help="also probe 8-GPU jobs every N measured steps (default 40)",
    )
    parser.add_argument(
        "--topology-weights",
        type=float,
        nargs=3,
        metavar=("LOCALITY", "FRAGMENTATION", "PACKING"),
        help="scoring weights of the topology policy (default: the service's, 4 4 1)",
    )
    parser.add_argument(
        "--partition-weights",
        type=float,
        nargs=2,
        metavar=("PACKING", "HEADROOM"),
        help="partition packing and headroom weights of the topology policy (default: the service's, 4 4)",
    )
    parser.add_argument("--markdown", type=Path, help="write the results block into this Markdown file")
    parser.add_argument("--plot", type=Path, help="write the bar chart (PNG) here")
    args = parser.parse_args(argv)
    seeds = args.seeds or ([args.seed] if args.seed is not None else [1, 2, 3])
    if args.nodes < 1 or args.steps < 1 or not 0 <= args.warmup < args.steps:
        parser.error("need --nodes >= 1, --steps >= 1 and 0 <= --warmup < --steps")
    if args.load <= 0 or args.lifetime < 1 or args.probe_every < 0:
        parser.error("need --load > 0, --lifetime >= 1 and --probe-every >= 0")
    default = TopologySettings()
    locality, fragmentation, packing = args.topology_weights or (
        default.locality_weight,
        default.fragmentation_weight,
        default.packing_weight,
    )
    partition_packing, headroom = args.partition_weights or (
        default.partition_packing_weight,
        default.partition_headroom_weight,
    )
    try:
        topology = TopologySettings(
            locality_weight=locality,
            fragmentation_weight=fragmentation,
            packing_weight=packing,
            partition_packing_weight=partition_packing,
            partition_headroom_weight=headroom,
        )
    except ValueError as exc:
        parser.error(str(exc))
    logging.basicConfig(level=logging.ERROR)
    kernels.set_threads(1)  # the service's default `kernel_threads`: no thread pool per kernel call
    started = time.perf_counter()
    all_metrics: dict[str, list[dict[str, float]]] = {p: [] for p in POLICIES}
    runs: list[PolicyRun] = []
    for seed in seeds:
        cluster = tc.generate(nodes=args.nodes, seed=seed)
        trace = make_trace(cluster, steps=args.steps, seed=seed, load=args.load, mean_lifetime=args.lifetime)
        if seed == seeds[0] and trace:
            # Compile (or load) the numba kernels before anything is timed.
            head = trace[:30]
            simulate(cluster, head, policy=TOPOLOGY, steps=head[-1].arrival + 1, warmup=0)
        for policy in POLICIES:
            run = simulate(
                cluster,
                trace,
                policy=policy,
                steps=args.steps,
                warmup=args.warmup,
                seed=seed,
                probe_every=args.probe_every,
                topology=topology,
            )
            runs.append(run)
            all_metrics[policy].append(metrics(run))
            print(
                f"seed {seed} {policy}: "
                + ", ".join(
                    f"{label} {all_metrics[policy][-1][key]:.{d}f}{u}" for key, label, u, d in METRICS
                ),
                file=sys.stderr,
            )
    command = "python -m bench.placement " + shlex.join(sys.argv[1:] if argv is None else list(argv))
    block = report(
        all_metrics, runs, args=args, seeds=seeds, command=command, elapsed=time.perf_counter() - started
    )
    print(block)
    if args.plot:
        title = (
            f"{args.nodes} nodes, {args.steps} steps, load {args.load:g}, seeds {' '.join(map(str, seeds))} "
            "(bars: mean over seeds, dots: one seed each)"
        )
        plot(all_metrics, args.plot, title)
        print(f"wrote {args.plot}")
    if args.markdown:
        image = f"\n\n![placement metrics per policy]({args.plot.name})" if args.plot else ""
        write_markdown(args.markdown, block + image)
        print(f"wrote {args.markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
