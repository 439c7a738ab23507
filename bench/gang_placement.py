"""Gang simulator: whole gangs on NVL72-style racks, first-fit vs node-local topology vs gang-aware.

Scope: replays one seeded trace of gang arrivals and departures on a cluster of racks (one
multi-node NVLink clique per rack, `trays` GB200 trays of 4 GPUs each, clique as the node label
`nvidia.com/gpu.clique`) once per policy, through the service's own `Placement`, and reports
placement quality for gangs. It measures quality, not latency (`bench.filter_bench` does that).

- Trace: every step, Poisson arrivals at the rate that offers `load` times the cluster's GPUs
  for gangs of `mean_lifetime` steps. A gang has 2-18 members (`GANG_SIZES`, weighted towards
  small gangs); each member is one pod with one claim of 4 GPUs (a whole tray) or, for a
  quarter of the gangs, 2 GPUs. Lifetimes are drawn at arrival, so all policies see one trace.
- Scheduling a gang: its members go one after another through `Placement.filter` over all
  nodes, then the policy's choice of node, then the devices bind would write (written into the
  ClusterState as the binder writes them, with the pod's `nodeName`, so later members see the
  earlier ones). All or nothing, like gang scheduling: if a member fits nowhere, the members
  already placed are released and the gang counts as not placed.
- Policies: `first-fit` takes the first node that passes (upstream's first-fit devices);
  `node-local` takes the node `prioritize` ranks highest with gang scoring off (only the topology
  inside each node: locality, fragmentation, binpack); `gang-aware` is the same with the
  service's default gang scoring (clique term, `extender/core/gang.py`). Ties: cluster order.
  `podgroup` declares each gang as a Workload API PodGroup (`minCount` = its members, topology
  key = the clique label) and takes the one node filter passes (`extender/core/gang_cycle.py`:
  the domain chosen over the fleet, each member's node held until its devices are written, the
  hold dropped first as the binder does); a gang the chosen clique cannot hold is not placed.
- Metrics (gangs arriving after `warmup` steps): gangs placed (%), placed gangs whole in one
  clique (%), mean cliques a placed gang spans, the largest block of untouched trays in one
  clique (mean over the measured steps: the biggest gang that could still land in one clique),
  and the mean time per member decision.

CLI: `python -m bench.gang_placement --racks 6 --trays 18 --steps 300 --seeds 1 2 3
[--markdown docs/gangs.md] [--plot docs/gangs.png]` prints the table, the machine and the command.
"""

from __future__ import annotations

import argparse
import logging
import random
import shlex
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.placement import FIRST_FIT, choose, plot, write_markdown
from extender.allocator.features import Features
from extender.claims import DELETE_PROTECTION_FINALIZER
from extender.cluster.state import ClusterState
from extender.core.assumed import AssumeCache
from extender.core.gang import CLIQUE_LABEL, SIZE_ANNOTATION, GangSettings
from extender.core.placement import Placement
from extender.objects import Obj
from extender.pods import parse_pod
from loadtests.generate import NAMESPACE, _device_classes, _Ids, _namespace, _slice, node_object
from loadtests.scenarios import machine_facts

NODE_LOCAL, GANG_AWARE, PODGROUP = "node-local", "gang-aware", "podgroup"
POLICIES: tuple[str, ...] = (FIRST_FIT, NODE_LOCAL, GANG_AWARE, PODGROUP)
#: (members, weight): small gangs are common, whole-rack gangs rare.
GANG_SIZES: tuple[tuple[int, float], ...] = (
    (2, 30),
    (4, 25),
    (6, 12),
    (8, 12),
    (9, 6),
    (12, 7),
    (16, 5),
    (18, 3),
)
DEVICE_CLASS = "gb200.nvidia.com"
GPUS_PER_TRAY = 4
_UIDS = uuid.UUID("0b6a2f53-7c1e-4d8a-9f3b-5e2d1c4a6b70")


@dataclass(frozen=True, slots=True)
class Gang:
    number: int
    members: int
    gpus: int  # per member
    arrival: int
    departure: int

    @property
    def name(self) -> str:
        return f"gang-{self.number:05d}"


@dataclass(slots=True)
class GangRecord:
    gang: Gang
    nodes: list[str] = field(default_factory=list)  # empty: not placed
    seconds: float = 0.0


# ----------------------------------------------------------------------------- cluster and trace
def cluster_objects(racks: int, trays: int) -> tuple[list[Obj], list[str], dict[str, str]]:
    """Objects of `racks` racks of `trays` GB200 trays; node names in order; node -> clique.

    Built with the load tests' object builders (`loadtests.generate`), seeded, so equal arguments
    give equal objects.
    """
    ids = _Ids(random.Random(f"gang-cluster-{racks}x{trays}"))
    selectors: dict[str, tuple[str, ...]] = {DEVICE_CLASS: ('device.driver == "gpu.nvidia.com"',)}
    objects: list[Obj] = [_namespace(ids), *_device_classes(ids, selectors)]
    names: list[str] = []
    clique_of: dict[str, str] = {}
    for rack in range(racks):
        clique = f"sim-cluster.{rack + 1}"
        for tray in range(trays):
            name = f"rack-{rack:02d}-tray-{tray:02d}"
            names.append(name)
            clique_of[name] = clique
            node = node_object(ids, len(names), name, {CLIQUE_LABEL: clique})
            devices = [
                {
                    "name": f"gpu-{i}",
                    "attributes": {
                        "type": {"string": "gpu"},
                        "cliqueID": {"string": clique},
                        "resource.kubernetes.io/numaNode": {"int": i // 2},
                        "resource.kubernetes.io/pcieRoot": {"string": f"pci000{i // 2}:00"},
                    },
                    "capacity": {"memory": {"value": "186Gi"}},
                }
                for i in range(GPUS_PER_TRAY)
            ]
            objects += [node, _slice(ids, node, "gpu.nvidia.com", devices)]
    return objects, names, clique_of


def make_trace(*, gpus: int, steps: int, load: float, mean_lifetime: float, seed: int) -> list[Gang]:
    """Seeded gang arrivals offering `load` x `gpus` GPU-steps per step on average."""
    rng = random.Random(seed)
    sizes, weights = zip(*GANG_SIZES, strict=True)
    mean_gpus = sum(s * w for s, w in GANG_SIZES) / sum(weights) * (0.75 * 4 + 0.25 * 2)
    rate = load * gpus / (mean_gpus * mean_lifetime)
    trace: list[Gang] = []
    for step in range(steps):
        for _ in range(int(np.random.default_rng(rng.getrandbits(32)).poisson(rate))):
            members = rng.choices(sizes, weights)[0]
            per_member = 2 if rng.random() < 0.25 else 4
            lifetime = max(1, round(rng.expovariate(1.0 / mean_lifetime)))
            trace.append(Gang(len(trace), members, per_member, step, step + lifetime))
    return trace


# ----------------------------------------------------------------------------- scheduling
def _pod_group(gang: Gang) -> Obj:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": gang.name, "namespace": NAMESPACE, "uid": str(uuid.uuid5(_UIDS, gang.name))},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": gang.members}},
            "schedulingConstraints": {"topology": [{"key": CLIQUE_LABEL}]},
        },
    }


def _member(gang: Gang, index: int, *, pod_group: bool = False) -> tuple[Obj, Obj]:
    name = f"{gang.name}-{index:02d}"
    claim: Obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": f"{name}-gpus",
            "namespace": NAMESPACE,
            "uid": str(uuid.uuid5(_UIDS, name + "-c")),
        },
        "spec": {"devices": {"requests": [
            {"name": "gpus", "exactly": {"deviceClassName": DEVICE_CLASS, "allocationMode": "ExactCount",
                                         "count": gang.gpus}}]}},
    }  # fmt: skip
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": str(uuid.uuid5(_UIDS, name)),
            "labels": {"volcano.sh/job-name": gang.name},
            "annotations": {SIZE_ANNOTATION: str(gang.members)},
        },
        "spec": {"containers": [{"name": "main", "image": "busybox"}],
                 "resourceClaims": [{"name": "gpus", "resourceClaimName": claim["metadata"]["name"]}]},
    }  # fmt: skip
    if pod_group:
        pod["spec"]["schedulingGroup"] = {"podGroupName": gang.name}
    return pod, claim


def _place_member(placement: Placement, nodes: list[str], pod: Obj, claim: Obj, policy: str) -> str | None:
    state = placement.state
    state.upsert(claim)
    record = parse_pod(pod)
    verdict = placement.filter(record, nodes)
    if verdict.error or not verdict.passed:
        state.delete("ResourceClaim", claim["metadata"]["name"], NAMESPACE)
        return None
    placement.holds.release(record.uid)  # a PodGroup member's hold: chosen for real now, as bind does
    node, allocations, _ = choose(placement, record, verdict.passed, policy)
    if not allocations:
        state.delete("ResourceClaim", claim["metadata"]["name"], NAMESPACE)
        return None
    meta = pod["metadata"]
    state.upsert(
        {
            **claim,
            "metadata": {**claim["metadata"], "finalizers": [DELETE_PROTECTION_FINALIZER]},
            "status": {
                "allocation": allocations[0].allocation,
                "reservedFor": [{"resource": "pods", "name": meta["name"], "uid": meta["uid"]}],
            },
        }
    )
    state.upsert({**pod, "spec": {**pod["spec"], "nodeName": node}})
    return node


def release(state: ClusterState, gang: Gang, members: int) -> None:
    for index in range(members):
        name = f"{gang.name}-{index:02d}"
        state.delete("ResourceClaim", f"{name}-gpus", NAMESPACE)
        state.delete("Pod", name, NAMESPACE)
    state.delete("PodGroup", gang.name, NAMESPACE)


def schedule_gang(placement: Placement, nodes: list[str], gang: Gang, policy: str) -> GangRecord:
    """Place every member or none (the members placed so far are released on failure)."""
    record = GangRecord(gang)
    started = time.perf_counter()
    if policy == PODGROUP:
        placement.state.upsert(_pod_group(gang))
    for index in range(gang.members):
        pod, claim = _member(gang, index, pod_group=policy == PODGROUP)
        node = _place_member(placement, nodes, pod, claim, policy)
        if node is None:
            release(placement.state, gang, index)
            record.nodes = []
            break
        record.nodes.append(node)
    record.seconds = (time.perf_counter() - started) / max(1, gang.members)
    return record


def simulate(
    *, racks: int, trays: int, trace: list[Gang], policy: str, steps: int, warmup: int
) -> tuple[list[GangRecord], float, dict[str, str]]:
    """Replay the trace under `policy`; returns the measured records, the mean over measured steps
    of the largest free block of trays in one clique, and node -> clique."""
    objects, nodes, clique_of = cluster_objects(racks, trays)
    state = ClusterState.from_objects(objects)
    weight = 0.0 if policy not in (GANG_AWARE, PODGROUP) else GangSettings().weight
    placement = Placement(
        state, features=Features(), assumed=AssumeCache(), gang_settings=GangSettings(weight=weight)
    )
    arrivals: dict[int, list[Gang]] = defaultdict(list)
    for gang in trace:
        arrivals[gang.arrival].append(gang)
    departures: dict[int, list[Gang]] = defaultdict(list)
    records: list[GangRecord] = []
    largest_free: list[int] = []
    for step in range(steps):
        for gang in departures.pop(step, []):
            release(state, gang, gang.members)
        for gang in arrivals.get(step, []):
            record = schedule_gang(placement, nodes, gang, policy)
            if record.nodes:
                departures[gang.departure].append(gang)
            if step >= warmup:
                records.append(record)
        if step >= warmup:
            largest_free.append(_largest_free_block(state, clique_of))
    return records, float(np.mean(largest_free)) if largest_free else 0.0, clique_of


def _largest_free_block(state: ClusterState, clique_of: dict[str, str]) -> int:
    """The most untouched trays one clique has: the biggest gang that still fits in one clique."""
    busy = {(p.get("spec") or {}).get("nodeName") for p in state.iter("Pod")}
    free: dict[str, int] = defaultdict(int)
    for node, clique in clique_of.items():
        free[clique] += node not in busy
    return max(free.values(), default=0)


def metrics(records: list[GangRecord], largest_free: float, clique_of: dict[str, str]) -> dict[str, float]:
    placed = [r for r in records if r.nodes]
    spans = [len({clique_of[n] for n in r.nodes}) for r in placed]
    return {
        "placed": 100.0 * len(placed) / max(1, len(records)),
        "one_clique": 100.0 * sum(1 for s in spans if s == 1) / max(1, len(placed)),
        "cliques": float(np.mean(spans)) if spans else 0.0,
        "largest_free": largest_free,
        "ms_per_member": 1000.0 * float(np.mean([r.seconds for r in records])) if records else 0.0,
        "gangs": float(len(records)),
    }


METRICS: tuple[tuple[str, str, str, int], ...] = (
    ("placed", "gangs placed", "%", 1),
    ("one_clique", "placed gangs in one clique", "%", 1),
    ("cliques", "cliques per placed gang", "", 2),
    ("largest_free", "largest free block in one clique (trays)", "", 1),
    ("ms_per_member", "time per member decision", " ms", 1),
)


# ----------------------------------------------------------------------------- report
def machine() -> str:
    found = machine_facts()
    python = f"{found['implementation']} {found['python']}"
    return f"{found['cpu']} ({found['usable_cores']} usable cores), {python}"


def table(all_metrics: dict[str, list[dict[str, float]]], seeds: list[int]) -> str:
    head = "| policy | " + " | ".join(label for _, label, _, _ in METRICS) + " |"
    lines = [head, "|---|" + "---:|" * len(METRICS)]
    for policy, runs in all_metrics.items():
        cells = []
        for key, _, unit, decimals in METRICS:
            values = [m[key] for m in runs]
            spread = f" ± {np.std(values):.{decimals}f}" if len(values) > 1 else ""
            cells.append(f"{np.mean(values):.{decimals}f}{unit}{spread}")
        lines.append(f"| {policy} | " + " | ".join(cells) + " |")
    gangs = int(np.mean([m["gangs"] for m in next(iter(all_metrics.values()))]))
    lines.append("")
    lines.append(
        f"Mean ± standard deviation over seeds {', '.join(map(str, seeds))}; "
        f"about {gangs} measured gangs per run."
    )
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.gang_placement", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--racks", type=int, default=6, help="racks (NVLink cliques), default 6")
    parser.add_argument("--trays", type=int, default=18, help="trays (nodes) per rack, default 18")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--load", type=float, default=0.9, help="offered GPU load, default 0.9")
    parser.add_argument("--mean-lifetime", type=float, default=20.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--markdown", type=Path, help="write the results block into this file")
    parser.add_argument("--plot", type=Path, help="write a PNG of the metrics")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    command = "python -m bench.gang_placement " + shlex.join(sys.argv[1:] if argv is None else list(argv))
    all_metrics: dict[str, list[dict[str, float]]] = {p: [] for p in POLICIES}
    for seed in args.seeds:
        trace = make_trace(
            gpus=args.racks * args.trays * GPUS_PER_TRAY,
            steps=args.steps,
            load=args.load,
            mean_lifetime=args.mean_lifetime,
            seed=seed,
        )
        for policy in POLICIES:
            records, largest_free, clique_of = simulate(
                racks=args.racks,
                trays=args.trays,
                trace=trace,
                policy=policy,
                steps=args.steps,
                warmup=args.warmup,
            )
            all_metrics[policy].append(metrics(records, largest_free, clique_of))
            print(f"seed {seed} {policy}: {all_metrics[policy][-1]}", file=sys.stderr)
    block = "\n".join(
        [
            f"Command: `{command}`  ",
            f"Machine: {machine()}, one process.  ",
            f"Cluster: {args.racks} racks x {args.trays} GB200 trays (4 GPUs each), "
            "one NVLink clique per rack; "
            f"offered load {args.load}, mean lifetime {args.mean_lifetime} steps, {args.steps} steps "
            f"({args.warmup} warm-up).",
            "",
            table(all_metrics, args.seeds),
        ]
    )
    print(block)
    if args.markdown:
        write_markdown(args.markdown, block)
    if args.plot:
        title = f"Gangs on {args.racks} NVL72-style racks: {' vs '.join(POLICIES)}"
        plot(all_metrics, args.plot, title, shown=METRICS[:4], lower_is_better=("cliques",))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
