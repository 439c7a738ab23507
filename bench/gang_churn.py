"""Gang churn through the real kube-scheduler: PodGroups arrive on NVL72-style racks, run, finish.

    python -m bench.gang_churn --racks 6 --trays 18 --minutes 8 --modes upstream allocator \\
        --json /tmp/gang-churn.json --markdown /tmp/gang-churn.md --plot docs/gang-churn.png

Everything is real and on this machine, as in `bench.churn`: etcd, kube-apiserver,
kube-controller-manager (the resourceclaim controller creates each member's claim from its
template and releases it once the member has finished), kube-scheduler 1.37.2 (`tests.gobuild`)
with upstream's gang scheduling on (`GenericWorkload`, which brings the GangScheduling plugin,
and `TopologyAwareWorkloadScheduling`; `scheduling.k8s.io/v1beta1` served: the gates and
runtime config of `tests.e2e.test_gang_plugin.WORKLOAD_API`), and kwok v0.8.0 as the kubelets:
a bound member runs and, after its lifetime (`tests.e2e.kwok.RUN_FOR`), is Succeeded.

Fleet: `bench.gang_placement.cluster_objects(racks, trays)`: GB200 trays of 4 GPUs, one NVLink
clique per rack (node label `extender.core.gang.CLIQUE_LABEL`, device attribute `cliqueID`).
Trace: `bench.gang_placement.make_trace` (seeded Poisson gang arrivals per step offering `load`
times the fleet's GPUs; 2-18 members of 4 GPUs, a quarter of the gangs 2 GPUs a member;
exponential lifetimes in steps); `--step-seconds` maps a step to wall seconds. A gang larger than
a rack can never be admitted under a clique constraint, so such gangs are left out of the trace
(none at 18 trays a rack). Each gang is one PodGroup (`minCount` = its members, topology key =
the clique label, `tests.e2e.test_gang_plugin._pod_group`) and its members
(`tests.e2e.test_gang_plugin._member`), all created when the gang arrives.

Modes, one after another on the same fleet and trace:
- `upstream`: kube-scheduler alone; its in-tree DynamicResources plugin allocates, pods use the
  default scheduler (`bench.real_scheduler` baseline);
- `allocator`: the same scheduler and gates with the extender in allocator mode (the pods'
  scheduler name is the allocator profile's; the extender filters, holds and allocates).

Measured per mode, from the API server's watches on pods and on every ResourceClaim (one
monotonic clock): gangs arrived, admitted (every member bound) and completed (every member
Succeeded); admitted gangs whose members all landed in one clique; time to admit a gang (its
PodGroup created, or its first member if earlier, to its last member bound) p50/p99, and p50 of
the large gangs (at least half a rack); gangs pending and gangs partly bound at the end; racks
with every tray free ("cliques whole": a tray is free when no claim holds one of its GPUs) and
the largest block of free trays in one rack, sampled every `--sample-seconds` over the trace
after `--warmup-steps` (mean and min; and the mean at the moments a large gang was waiting);
GPUs busy; kube-scheduler's FailedScheduling messages by kind; and safety: every moment a device
was allocated to two claims at once (`bench.churn.ClaimLedger`, must stay empty) and the claims
still allocated after the clean-up (must be 0).
"""

from __future__ import annotations

import argparse
import bisect
import copy
import json
import math
import os
import platform
import re
import shlex
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.apiwatch import Watch
from bench.churn import (
    JOB_LABEL,
    RUN_LABEL,
    ClaimLedger,
    Device,
    PodLedger,
    PodRecord,
    clean_up,
    device_attributes,
    throttled,
    wait_released,
)
from bench.gang_placement import GPUS_PER_TRAY, Gang, cluster_objects, make_trace
from bench.real_scheduler import SCHEDULER, add_client_qps_option, apply_client_qps, percentile
from loadtests.generate import NAMESPACE, SHAPE_LABEL
from tests.e2e import kwok
from tests.e2e.cluster import ControlPlane, KwokPlane
from tests.e2e.test_gang_plugin import TEMPLATE, WORKLOAD_API, GangPlane, _member, _pod_group, _template

Obj = dict[str, Any]

#: mode -> (`ControlPlane.use` mode, the members' scheduler name).
MODES: dict[str, tuple[str, str]] = {
    "upstream": ("baseline", SCHEDULER["baseline"]),
    "allocator": ("allocator", SCHEDULER["allocator"]),
}
#: The template of members that ask half a tray (`TEMPLATE` asks a whole one).
HALF_TEMPLATE = "half-tray"
TEMPLATES = {GPUS_PER_TRAY: TEMPLATE, GPUS_PER_TRAY // 2: HALF_TEMPLATE}


class GangKwokPlane(GangPlane, KwokPlane):
    """kwok's controllers (KwokPlane) and the Workload API's gates and runtime config
    (GangPlane) on one control plane: each `__post_init__` calls the next in the MRO."""


# ----------------------------------------------------------------------------- the workload


def fitting(trace: list[Gang], trays: int) -> list[Gang]:
    """The gangs one rack can hold: a larger one never satisfies a required clique."""
    return [g for g in trace if g.members <= trays]


def templates() -> list[Obj]:
    """The members' ResourceClaimTemplates: a whole tray (`TEMPLATE`) and half a tray."""
    whole = _template()
    half = copy.deepcopy(whole)
    half["metadata"]["name"] = HALF_TEMPLATE
    half["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = GPUS_PER_TRAY // 2
    return [whole, half]


def group_name(run: str, gang: Gang) -> str:
    return f"{run}-{gang.name}"


def pod_group(plane: ControlPlane, gang: Gang, run: str) -> Obj:
    """The gang's PodGroup as the e2e test builds it, labelled with the run (for clean-up)."""
    group = _pod_group(plane, group_name(run, gang), gang.members)
    group["metadata"]["labels"] = {RUN_LABEL: run}
    return group


def member_pods(gang: Gang, run: str, scheduler: str, step_seconds: float) -> list[Obj]:
    """The gang's members as the e2e test builds them, with the run's scheduler, the template of
    the gang's GPUs per member, the ledger's labels and kwok's lifetime."""
    pods = []
    for index in range(gang.members):
        pod = _member(group_name(run, gang), index)
        pod["metadata"]["labels"] = {
            RUN_LABEL: run,
            JOB_LABEL: gang.name,
            SHAPE_LABEL: f"{gang.members}x{gang.gpus}",
        }
        pod["metadata"]["annotations"] = kwok.run_for((gang.departure - gang.arrival) * step_seconds)
        spec = pod["spec"]
        spec["schedulerName"] = scheduler
        spec["restartPolicy"] = "Never"  # kwok's Succeeded is final, as a finished Job pod's
        spec["resourceClaims"][0]["resourceClaimTemplateName"] = TEMPLATES[gang.gpus]
        pods.append(pod)
    return pods


# ----------------------------------------------------------------------------- metrics (pure)


@dataclass
class GangState:
    """One arrived gang as the pod watch saw it."""

    gang: Gang
    created: float  # PodGroup (or first member) created
    bound: int = 0
    succeeded: int = 0
    nodes: list[str] = field(default_factory=list)
    admitted_at: float | None = None  # when its last member was bound, once all are

    @property
    def admitted(self) -> bool:
        return self.admitted_at is not None

    @property
    def completed(self) -> bool:
        return self.succeeded == self.gang.members


def gang_states(
    trace: list[Gang], group_created: dict[str, float], records: dict[str, PodRecord]
) -> list[GangState]:
    """Every gang whose PodGroup was created, with its members' bindings and completions
    (records by pod name, their `job` the gang's name)."""
    members: dict[str, list[PodRecord]] = defaultdict(list)
    for record in records.values():
        members[record.job].append(record)
    states = []
    for gang in trace:
        if gang.name not in group_created:
            continue
        pods = members.get(gang.name, [])
        created = min([group_created[gang.name], *(r.created for r in pods if r.created is not None)])
        bound = [r for r in pods if r.bound is not None]
        state = GangState(gang, created, len(bound), sum(1 for r in pods if r.succeeded is not None))
        state.nodes = [r.node for r in bound]
        if len(bound) == gang.members:
            state.admitted_at = max(r.bound for r in bound if r.bound is not None)
        states.append(state)
    return states


def large(gang: Gang, trays: int) -> bool:
    """At least half a rack: the gangs a fragmented fleet keeps waiting."""
    return gang.members * 2 >= trays


@dataclass(frozen=True)
class GangSummary:
    arrived: int
    admitted: int
    one_clique_pct: float
    completed: int
    admit_p50_s: float
    admit_p99_s: float
    admit_p50_large_s: float
    pending: int
    partly_bound: int


def summarise(states: list[GangState], clique_of: dict[str, str], trays: int) -> GangSummary:
    """The gang figures of the module docstring from `gang_states`."""
    admitted = [s for s in states if s.admitted_at is not None]
    whole = sum(1 for s in admitted if len({clique_of[n] for n in s.nodes}) == 1)
    waits = [s.admitted_at - s.created for s in admitted if s.admitted_at is not None]
    large_waits = [
        s.admitted_at - s.created for s in admitted if s.admitted_at is not None and large(s.gang, trays)
    ]
    return GangSummary(
        arrived=len(states),
        admitted=len(admitted),
        one_clique_pct=round(100.0 * whole / len(admitted), 1) if admitted else math.nan,
        completed=sum(1 for s in states if s.completed),
        admit_p50_s=round(percentile(waits, 0.5), 2),
        admit_p99_s=round(percentile(waits, 0.99), 2),
        admit_p50_large_s=round(percentile(large_waits, 0.5), 2),
        pending=sum(1 for s in states if not s.admitted),
        partly_bound=sum(1 for s in states if 0 < s.bound < s.gang.members),
    )


def free_trays(
    held: Iterable[Device], device_node: dict[Device, str], clique_of: dict[str, str]
) -> dict[str, int]:
    """Trays of each clique on which no claim holds a GPU."""
    busy = {device_node[d] for d in held if d in device_node}
    free: dict[str, int] = dict.fromkeys(sorted(set(clique_of.values())), 0)
    for node, clique in clique_of.items():
        free[clique] += node not in busy
    return free


def cliques_whole(held: Iterable[Device], device_node: dict[Device, str], clique_of: dict[str, str]) -> int:
    """Racks with every tray free: where a whole-rack gang could still land."""
    free = free_trays(held, device_node, clique_of)
    size = Counter(clique_of.values())
    return sum(1 for clique, n in free.items() if n == size[clique])


@dataclass(frozen=True)
class Sample:
    t: float  # monotonic seconds
    whole: int  # cliques with every tray free
    largest_free: int  # free trays in the freest clique
    gpus_busy: int


def sample_times(start: float, end: float, every: float) -> list[float]:
    """`start`, `start + every`, ... up to `end` included."""
    return [start + i * every for i in range(math.floor((end - start) / every + 1e-9) + 1)]


def fleet_samples(
    timeline: list[tuple[float, frozenset[Device]]],
    device_node: dict[Device, str],
    clique_of: dict[str, str],
    times: Iterable[float],
) -> list[Sample]:
    """The fleet at each of `times`, from the claim ledger's timeline (the devices held after
    each change, in time order; nothing held before its first entry)."""
    changes = [t for t, _ in timeline]
    size = Counter(clique_of.values())
    out = []
    for t in times:
        at = bisect.bisect_right(changes, t)
        held = timeline[at - 1][1] if at else frozenset()
        free = free_trays(held, device_node, clique_of)
        out.append(
            Sample(
                t,
                sum(1 for c, n in free.items() if n == size[c]),
                max(free.values(), default=0),
                sum(1 for d in held if d in device_node),
            )
        )
    return out


def waiting(states: list[GangState], trays: int, end: float) -> list[tuple[float, float]]:
    """When each large gang waited: from its creation to its admission (or `end`)."""
    return [
        (s.created, s.admitted_at if s.admitted_at is not None else end)
        for s in states
        if large(s.gang, trays)
    ]


def waiting_times(
    times: list[float], intervals: list[tuple[float, float]], start: float, end: float
) -> list[float]:
    """The moments a large gang was waiting, within [start, end]: each of `times` inside an
    interval, and each interval's start, so a wait shorter than the sampling period still
    counts (once, at its arrival: what the gang found)."""
    inside = {t for t in times if any(a <= t < b for a, b in intervals)}
    inside |= {a for a, _ in intervals if start <= a <= end}
    return sorted(inside)


def mean_whole(samples: list[Sample]) -> float | None:
    """Mean cliques whole over `samples` (None: no sample)."""
    return round(sum(s.whole for s in samples) / len(samples), 2) if samples else None


def failure_kinds(events: list[Obj], prefix: str, top: int = 6) -> dict[str, int]:
    """kube-scheduler's FailedScheduling messages on pods named `prefix`*, by their event counts
    (most frequent first). Object names (`namespace/name`, with the claims' random suffixes) read
    `<object>` and digits `#`, so one kind of message counts once."""
    counts: Counter[str] = Counter()
    for event in events:
        name = (event.get("involvedObject") or {}).get("name", "")
        if event.get("reason") != "FailedScheduling" or not name.startswith(prefix):
            continue
        message = re.sub(r"\b[a-z][\w.-]*/[\w.-]+", "<object>", str(event.get("message", "")))
        message = re.sub(r"\d+", "#", message)[:240]
        counts[message] += int(event.get("count") or 1)
    return dict(counts.most_common(top))


# ----------------------------------------------------------------------------- a run


@dataclass
class GangChurnResult:
    mode: str
    racks: int
    trays: int
    seed: int
    step_seconds: float
    steps: int
    gangs: int  # arrived: PodGroups created
    pods: int
    admitted: int
    one_clique_pct: float
    completed: int
    admit_p50_s: float
    admit_p99_s: float
    admit_p50_large_s: float
    pending_at_end: int
    partly_bound_at_end: int
    cliques_whole_mean: float
    cliques_whole_min: int
    cliques_whole_while_large_waits: float | None
    largest_free_block_mean: float
    gpus_busy_mean: float
    #: (wall seconds from the trace's start, cliques whole), thinned to at most 300 points.
    cliques_whole_over_time: list[tuple[float, int]]
    failed_scheduling: dict[str, int] = field(default_factory=dict)
    double_allocations: list[str] = field(default_factory=list)
    claims_left_allocated: int = -1  # -1: not counted (the clean-up failed)
    throttled_seconds: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def run_mode(
    plane: ControlPlane,
    mode: str,
    trace: list[Gang],
    *,
    racks: int,
    trays: int,
    seed: int,
    step_seconds: float,
    steps: int,
    warmup_steps: int,
    drain: float,
    sample_seconds: float,
) -> GangChurnResult:
    """Replay `trace` in `mode`, wait up to `drain` wall seconds for its gangs to finish, read
    the module docstring's figures, delete what the run made and wait its claims released."""
    kube = plane.kube
    use, scheduler = MODES[mode]
    plane.use(use)
    api = WORKLOAD_API[plane.version][1]
    device_node = {d: str(a["_node"]) for d, a in device_attributes(kube).items()}
    _, _, clique_of = cluster_objects(racks, trays)
    run = mode[:5]
    claims, pods = ClaimLedger(), PodLedger(run)
    claim_watch = Watch(kube, "/apis/resource.k8s.io/v1/resourceclaims", claims.on_event)
    pod_watch = Watch(kube, f"/api/v1/namespaces/{NAMESPACE}/pods", pods.on_event)
    with claims.lock:
        held_before = set(claims.held)
    throttled_before = throttled(plane)
    errors: list[str] = []
    group_created: dict[str, float] = {}
    start = time.monotonic()
    for gang in trace:
        delay = start + gang.arrival * step_seconds - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        try:
            # The PodGroup first: a member naming a group that does not exist yet waits at PreEnqueue.
            kube.request("POST", f"/apis/{api}/namespaces/{NAMESPACE}/podgroups", pod_group(plane, gang, run))
            group_created[gang.name] = time.monotonic()
            for pod in member_pods(gang, run, scheduler, step_seconds):
                kube.create(pod)
        except Exception as exc:  # reported; the run goes on
            errors.append(f"{gang.name}: {exc}")
    end_of_trace = time.monotonic()
    deadline = end_of_trace + drain
    expected = sum(g.members for g in trace if g.name in group_created)
    while time.monotonic() < deadline:
        with pods.lock:
            done = sum(1 for r in pods.pods.values() if r.succeeded is not None)
        if done >= expected:
            break
        time.sleep(1.0)
    pod_watch.stop()
    with pods.lock:
        records = dict(pods.pods)
    with claims.lock:
        timeline = list(claims.timeline)
    states = gang_states(trace, group_created, records)
    summary = summarise(states, clique_of, trays)
    # The fleet from the end of the warm-up (at most half the trace) to the end of the arrivals:
    # the drain empties it, which would flatter every mode alike.
    sampled_from = start + min(warmup_steps * step_seconds, 0.5 * (end_of_trace - start))
    times = sample_times(sampled_from, end_of_trace, sample_seconds)
    samples = fleet_samples(timeline, device_node, clique_of, times)
    waits = waiting_times(times, waiting(states, trays, end_of_trace), sampled_from, end_of_trace)
    thin = max(1, len(samples) // 300)
    events = kube.get(f"/api/v1/namespaces/{NAMESPACE}/events")["items"]
    after = throttled(plane)
    result = GangChurnResult(
        mode=mode,
        racks=racks,
        trays=trays,
        seed=seed,
        step_seconds=step_seconds,
        steps=steps,
        gangs=summary.arrived,
        pods=expected,
        admitted=summary.admitted,
        one_clique_pct=summary.one_clique_pct,
        completed=summary.completed,
        admit_p50_s=summary.admit_p50_s,
        admit_p99_s=summary.admit_p99_s,
        admit_p50_large_s=summary.admit_p50_large_s,
        pending_at_end=summary.pending,
        partly_bound_at_end=summary.partly_bound,
        cliques_whole_mean=round(sum(s.whole for s in samples) / max(1, len(samples)), 2),
        cliques_whole_min=min((s.whole for s in samples), default=0),
        cliques_whole_while_large_waits=mean_whole(fleet_samples(timeline, device_node, clique_of, waits)),
        largest_free_block_mean=round(sum(s.largest_free for s in samples) / max(1, len(samples)), 2),
        gpus_busy_mean=round(
            sum(s.gpus_busy for s in samples) / max(1, len(samples)) / max(1, len(device_node)), 4
        ),
        cliques_whole_over_time=[(round(s.t - start, 1), s.whole) for s in samples[::thin]],
        failed_scheduling=failure_kinds(events, f"{run}-"),
        throttled_seconds={k: round(v - throttled_before.get(k, 0.0), 2) for k, v in after.items()},
        errors=errors[:5],
    )
    # Printed before the clean-up: a run's figures are kept whatever the clean-up meets.
    print(json.dumps({"before_clean_up": _brief(result)}), flush=True)
    clean_up(kube, run)
    kube.request("DELETE", f"/apis/{api}/namespaces/{NAMESPACE}/podgroups?labelSelector={RUN_LABEL}%3D{run}")
    wait_released(claims, held_before, timeout=120)
    claim_watch.stop()
    with claims.lock:
        result.claims_left_allocated = len(set(claims.held) - held_before)
        result.double_allocations = claims.double[:20]
    return result


def _brief(result: GangChurnResult) -> Obj:
    return asdict(result) | {"cliques_whole_over_time": result.cliques_whole_over_time[-3:]}


# ----------------------------------------------------------------------------- report


def markdown(results: list[GangChurnResult]) -> str:
    rows = [
        "| mode | fleet | gangs | admitted | one clique | completed | admit p50 / p99 s | large p50 s "
        "| cliques whole mean / min / large waiting | largest free block | GPUs busy | pending at end "
        "| partly bound | double | left allocated |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        waiting_mean = "-" if r.cliques_whole_while_large_waits is None else r.cliques_whole_while_large_waits
        rows.append(
            f"| {r.mode} | {r.racks}x{r.trays} | {r.gangs} | {r.admitted} | {r.one_clique_pct}% "
            f"| {r.completed} | {r.admit_p50_s} / {r.admit_p99_s} | {r.admit_p50_large_s} "
            f"| {r.cliques_whole_mean} / {r.cliques_whole_min} / {waiting_mean} "
            f"| {r.largest_free_block_mean} | {r.gpus_busy_mean:.1%} | {r.pending_at_end} "
            f"| {r.partly_bound_at_end} | {len(r.double_allocations)} | {r.claims_left_allocated} |"
        )
    return "\n".join(rows)


def _number(value: float) -> float:
    return 0.0 if math.isnan(value) else value


def plot(results: list[GangChurnResult], out: Path) -> None:
    """Cliques whole over time per mode; the gang shares (admitted, one clique, completed); the
    times to admit. Percentages and seconds on separate axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5), gridspec_kw={"width_ratios": [2, 1.2, 1.2]})
    for r in results:
        if r.cliques_whole_over_time:
            times, whole = zip(*r.cliques_whole_over_time, strict=True)
            axes[0].step([t / 60 for t in times], whole, where="post", label=r.mode)
    axes[0].set_xlabel("wall minutes")
    axes[0].set_ylabel("racks with every tray free")
    axes[0].yaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0].set_title("Cliques left whole (more: room for whole-rack gangs)")
    axes[0].legend()
    panels: tuple[tuple[int, str, tuple[tuple[str, Callable[[GangChurnResult], float]], ...]], ...] = (
        (
            1,
            "% of arrived gangs (one clique: of admitted)",
            (
                ("admitted", lambda r: 100.0 * r.admitted / max(1, r.gangs)),
                ("one clique", lambda r: _number(r.one_clique_pct)),
                ("completed", lambda r: 100.0 * r.completed / max(1, r.gangs)),
            ),
        ),
        (
            2,
            "time to admit a gang (wall s)",
            (
                ("p50", lambda r: _number(r.admit_p50_s)),
                ("p99", lambda r: _number(r.admit_p99_s)),
                ("p50 large", lambda r: _number(r.admit_p50_large_s)),
            ),
        ),
    )
    width = 0.8 / max(1, len(results))
    for axis, title, figures in panels:
        for i, r in enumerate(results):
            xs = [j + i * width for j in range(len(figures))]
            axes[axis].bar(xs, [f(r) for _, f in figures], width, label=r.mode)
        axes[axis].set_xticks([j + 0.4 - width / 2 for j in range(len(figures))], [n for n, _ in figures])
        axes[axis].set_title(title)
        axes[axis].legend(fontsize=8)
    fleet = f" ({results[0].racks} racks x {results[0].trays} trays)" if results else ""
    fig.suptitle(f"Gang churn through the real kube-scheduler with kwok{fleet}: upstream vs the extender")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def machine() -> str:
    return f"{platform.platform()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs"


def main(argv: list[str] | None = None) -> int:
    from tests.e2e.cluster import running
    from tests.e2e.objects import publish_fleet

    parser = argparse.ArgumentParser(prog="python -m bench.gang_churn", description=__doc__.split("\n")[0])
    parser.add_argument("--racks", type=int, default=6)
    parser.add_argument("--trays", type=int, default=18, help="trays (nodes, 4 GPUs each) per rack")
    parser.add_argument("--minutes", type=float, default=8.0, help="wall minutes of arrivals per mode")
    parser.add_argument("--step-seconds", type=float, default=2.0, help="wall seconds per trace step")
    parser.add_argument("--load", type=float, default=0.9, help="offered GPU load (of the fleet)")
    parser.add_argument("--mean-lifetime", type=float, default=30.0, help="mean gang lifetime in steps")
    parser.add_argument("--warmup-steps", type=int, default=30, help="steps before the fleet is sampled")
    parser.add_argument("--sample-seconds", type=float, default=1.0)
    parser.add_argument("--drain", type=float, default=120.0, help="wall seconds to wait after the trace")
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--version", choices=list(WORKLOAD_API), default="1.37")
    add_client_qps_option(parser)
    parser.add_argument("--node-lease-seconds", type=int, default=40)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args(argv)
    steps = max(1, round(args.minutes * 60 / args.step_seconds))
    offered = make_trace(
        gpus=args.racks * args.trays * GPUS_PER_TRAY,
        steps=steps,
        load=args.load,
        mean_lifetime=args.mean_lifetime,
        seed=args.seed,
    )
    trace = fitting(offered, args.trays)
    command = "python -m bench.gang_churn " + shlex.join(sys.argv[1:] if argv is None else argv)
    how = (
        f"Command: `{command}`  \n"
        f"Machine: {machine()}.  \n"
        f"Trace: seed {args.seed}, {len(trace)} gangs ({sum(g.members for g in trace)} pods; "
        f"{len(offered) - len(trace)} larger than a rack left out) over {steps} steps of "
        f"{args.step_seconds:g} wall s ({args.minutes:g} min), offered load {args.load:g}, mean lifetime "
        f"{args.mean_lifetime:g} steps; fleet {args.racks} racks x {args.trays} trays "
        f"({args.racks * args.trays * GPUS_PER_TRAY} GPUs); drain {args.drain:g} s; cliques sampled every "
        f"{args.sample_seconds:g} s after {args.warmup_steps} steps; Kubernetes {args.version}; "
        + (
            f"client QPS {args.client_qps:g} (burst {int(2 * args.client_qps)}) for kube-controller-manager "
            "and kube-scheduler."
            if args.client_qps
            else "client limits the programs' defaults (kube-controller-manager 20 QPS, burst 30; "
            "kube-scheduler 50 QPS, burst 100)."
        )
    )
    print(how, flush=True)

    class _Plane(GangKwokPlane):
        def __post_init__(self) -> None:
            super().__post_init__()
            apply_client_qps(self, args.client_qps)
            self.node_lease_seconds = args.node_lease_seconds

    results: list[GangChurnResult] = []
    with running(version=args.version, name="gang-churn", kind=_Plane) as plane:
        fleet, _, _ = cluster_objects(args.racks, args.trays)
        publish_fleet(plane.kube, fleet)
        plane.kube.apply_all(templates())
        plane.start_kwok()
        for mode in args.modes:
            result = run_mode(
                plane,
                mode,
                trace,
                racks=args.racks,
                trays=args.trays,
                seed=args.seed,
                step_seconds=args.step_seconds,
                steps=steps,
                warmup_steps=args.warmup_steps,
                drain=args.drain,
                sample_seconds=args.sample_seconds,
            )
            print(json.dumps(_brief(result)), flush=True)
            results.append(result)
            if args.json:  # after each mode: a later failure keeps the runs done
                args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    table = markdown(results)
    print(table)
    if args.markdown:
        args.markdown.write_text(how + "\n\n" + table + "\n")
    if args.plot:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
