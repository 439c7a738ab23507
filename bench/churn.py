"""Churn through the real kube-scheduler: jobs arrive, run and finish on a mixed fleet for a while.

    python -m bench.churn --nodes 500 --minutes 30 --modes baseline advisory allocator \\
        --json /tmp/churn.json --markdown /tmp/churn.md --plot docs/churn.png

Everything is real and on this machine: etcd, kube-apiserver, kube-controller-manager (the
resourceclaim controller creates each pod's claims from its templates and releases them when the
pod has finished), kube-scheduler (`tests.gobuild`) and kwok v0.8.0, which plays the kubelets:
a bound pod runs, and after its duration (`tests.e2e.kwok.RUN_FOR`) it is Succeeded. The fleet is
`loadtests.fleet.generate_mixed_cluster` (H100 + NICs, A100 with MIG on shared counters, L40S,
MI300X, TPU and CPU nodes; 30 % of the accelerators held by long-running pods).

The trace (`make_trace`, seeded) is Poisson arrivals of jobs of the shapes in `SHAPES` (MIG
1g/2g/3g inference, 1/2/4/8-GPU training with and without NVLink/NUMA constraints, GPU+NIC,
`firstAvailable` fallbacks, gangs of two 4-GPU pods), with log-normal durations (heavy-tailed),
in trace seconds; `--speed` compresses them into wall seconds. Every mode replays the same trace
on the same fleet, one after another, with the fleet's devices as they were before.

Measured per run, from the API server (watches on pods and on every ResourceClaim):
jobs completed, accelerator-seconds used over available (whole GPUs: a MIG partition counts its
share of memory slices), queue wait (create to binding) p50/p99 per shape, jobs pending at the
end, multi-GPU pods inside one NVLink domain, GPU+NIC pods on one NUMA node, A100 GPUs holding a
MIG partition over time (fragmentation), every moment a device was allocated to two claims at
once (must stay empty), and the extender's share of each bound pod's scheduling latency from its
own `/metrics` (the verbs' time over the pods' queue-to-bound time).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
import platform
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import requests

from bench.apiwatch import Watch
from bench.real_scheduler import MODES, SCHEDULER, add_client_qps_option, apply_client_qps, percentile
from loadtests.fleet import (
    MIG_CLASS,
    MIXED_SHAPES,
    NVLINK_DOMAIN,
    _cel,
    _exactly,
    _profile_is,
    generate_mixed_cluster,
)
from loadtests.generate import GPU_CLASS, NAMESPACE, POD_CLAIM, SHAPE_LABEL
from tests.e2e import kwok
from tests.e2e.cluster import ControlPlane, Kube, collection_path

Obj = dict[str, Any]

RUN_LABEL = "churn.dra-extender.io/run"
JOB_LABEL = "churn.dra-extender.io/job"
GANG_SIZE_ANNOTATION = "gang.dra-extender.io/size"
#: The gang labels the extender reads (JobSet's), so a gang's pods are one gang to it.
JOBSET_NAME, REPLICATED_JOB = "jobset.sigs.k8s.io/jobset-name", "jobset.sigs.k8s.io/replicatedjob-name"


@dataclass(frozen=True)
class Shape:
    """A job shape: its claim template spec, how many pods (a gang when > 1), draw weight and
    mean duration in trace seconds."""

    name: str
    spec: Obj
    weight: float
    mean_seconds: float
    pods: int = 1


def _gpus(count: int, *, nvlink: bool = False) -> Obj:
    devices: Obj = {"requests": [_exactly("gpus", GPU_CLASS, count)]}
    if nvlink:
        devices["constraints"] = [{"matchAttribute": NVLINK_DOMAIN, "requests": ["gpus"]}]
    return {"devices": devices}


def _mig(profile: str) -> Obj:
    return {"devices": {"requests": [_exactly("mig", MIG_CLASS, 1, _cel(_profile_is(profile)))]}}


#: The churn's job shapes: short inference on MIG, longer training on whole GPUs.
SHAPES: dict[str, Shape] = {
    s.name: s
    for s in (
        Shape("mig-1g", _mig("1g.10gb"), 18, 120),
        Shape("mig-2g", _mig("2g.20gb"), 10, 180),
        Shape("mig-3g", _mig("3g.40gb"), 6, 240),
        Shape("gpu-1", _gpus(1), 12, 300),
        Shape("gpu-2-nvlink", _gpus(2, nvlink=True), 8, 600),
        Shape("gpu-4", _gpus(4), 5, 900),
        Shape("gpu-4-nvlink-nic-numa", MIXED_SHAPES["gpu4-nvlink-nic-numa"].spec, 6, 900),
        Shape("gpu-8", _gpus(8), 4, 1200),
        Shape("gpu-nic-pcie", MIXED_SHAPES["gpu-nic-pcie"].spec, 8, 300),
        Shape("first-available", MIXED_SHAPES["first-available"].spec, 8, 300),
        Shape("gang-2x4-nvlink", _gpus(4, nvlink=True), 3, 900, pods=2),
    )
}


@dataclass(frozen=True)
class Job:
    name: str
    shape: str
    arrival: float  # trace seconds from the start
    duration: float  # trace seconds


def make_trace(
    seed: int, seconds: float, jobs_per_minute: float, *, duration_scale: float = 1.0
) -> list[Job]:
    """Poisson arrivals over `seconds` of trace time; shapes by weight; durations log-normal
    around each shape's mean times `duration_scale` (sigma 1: a few jobs run many times the
    mean), at least one trace second."""
    rng = random.Random(f"churn-{seed}")
    names, weights = list(SHAPES), [s.weight for s in SHAPES.values()]
    jobs: list[Job] = []
    clock = 0.0
    while True:
        clock += rng.expovariate(jobs_per_minute / 60.0)
        if clock >= seconds:
            return jobs
        shape = SHAPES[rng.choices(names, weights)[0]]
        duration = shape.mean_seconds * duration_scale * rng.lognormvariate(-0.5, 1.0)  # factor's mean: 1
        jobs.append(Job(f"job-{len(jobs):05d}", shape.name, clock, max(duration, 1.0)))


def templates() -> list[Obj]:
    """The ResourceClaimTemplates of the shapes (`churn-<shape>`)."""
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": f"churn-{s.name}", "namespace": NAMESPACE},
            "spec": {"spec": copy.deepcopy(s.spec)},
        }
        for s in SHAPES.values()
    ]


def job_pods(job: Job, run: str, scheduler: str, speed: float) -> list[Obj]:
    """The pods of one job: one, or a gang's members (JobSet labels and our size annotation)."""
    shape = SHAPES[job.shape]
    out = []
    for member in range(shape.pods):
        labels = {SHAPE_LABEL: job.shape, RUN_LABEL: run, JOB_LABEL: job.name}
        annotations = kwok.run_for(job.duration / speed)
        if shape.pods > 1:
            labels |= {JOBSET_NAME: f"{run}-{job.name}", REPLICATED_JOB: "worker"}
            annotations[GANG_SIZE_ANNOTATION] = str(shape.pods)
        name = f"{run}-{job.name}" + (f"-{member}" if shape.pods > 1 else "")
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": NAMESPACE,
                    "labels": labels,
                    "annotations": annotations,
                },
                "spec": {
                    "schedulerName": scheduler,
                    "terminationGracePeriodSeconds": 0,
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"claims": [{"name": POD_CLAIM}]},
                        }
                    ],
                    "resourceClaims": [
                        {"name": POD_CLAIM, "resourceClaimTemplateName": f"churn-{job.shape}"}
                    ],
                },
            }
        )
    return out


# ----------------------------------------------------------------------------- watches


Device = tuple[str, str, str]  # driver, pool, device


class ClaimLedger:
    """Every ResourceClaim's allocation as the API server's watch shows it, event by event (one
    collection's events come in etcd's order, so replaying them gives each moment's state).
    Records each device held by two claims at the same moment, each claim's devices when first
    allocated, and the claims allocated and released."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holders: dict[Device, str] = {}  # device -> claim uid holding it now
        self.held: dict[str, list[Device]] = {}  # claim uid -> its devices now
        self.first_allocation: dict[str, list[Device]] = {}  # claim uid -> devices, kept after release
        self.owner_pod: dict[str, str] = {}  # claim uid -> owning pod name
        self.double: list[str] = []
        self.timeline: list[tuple[float, frozenset[Device]]] = []  # (time, devices held) on change

    def on_event(self, kind: str, claim: Obj, now: float) -> None:
        uid = claim["metadata"]["uid"]
        results = (claim.get("status", {}).get("allocation") or {}).get("devices", {}).get("results", [])
        devices = [(r["driver"], r["pool"], r["device"]) for r in results] if kind != "DELETED" else []
        owners = [o["name"] for o in claim["metadata"].get("ownerReferences", []) if o.get("kind") == "Pod"]
        with self.lock:
            if owners:
                self.owner_pod[uid] = owners[0]
            before = self.held.pop(uid, [])
            for device in before:
                if self.holders.get(device) == uid:
                    del self.holders[device]
            for device in devices:
                other = self.holders.get(device)
                if other is not None and other != uid:
                    self.double.append(
                        f"{'/'.join(device)} allocated to claim {uid} while claim {other} holds it "
                        f"({claim['metadata'].get('namespace')}/{claim['metadata']['name']})"
                    )
                self.holders[device] = uid
            if devices:
                self.held[uid] = devices
                self.first_allocation.setdefault(uid, devices)
            if before != devices:
                self.timeline.append((now, frozenset(self.holders)))

    def allocated_now(self) -> int:
        with self.lock:
            return len(self.held)


@dataclass
class PodRecord:
    job: str
    shape: str
    created: float | None = None
    bound: float | None = None
    node: str = ""
    succeeded: float | None = None


class PodLedger:
    """When each pod of a run was created, bound and Succeeded (from the pod watch)."""

    def __init__(self, run: str) -> None:
        self.run = run
        self.lock = threading.Lock()
        self.pods: dict[str, PodRecord] = {}

    def on_event(self, kind: str, pod: Obj, now: float) -> None:
        labels = pod["metadata"].get("labels") or {}
        if labels.get(RUN_LABEL) != self.run:
            return
        with self.lock:
            record = self.pods.setdefault(
                pod["metadata"]["name"], PodRecord(labels.get(JOB_LABEL, ""), labels.get(SHAPE_LABEL, ""))
            )
            if record.created is None:
                record.created = now
            node = pod.get("spec", {}).get("nodeName")
            if node and record.bound is None:
                record.bound, record.node = now, node
            if pod.get("status", {}).get("phase") == "Succeeded" and record.succeeded is None:
                record.succeeded = now


# ----------------------------------------------------------------------------- a run


@dataclass
class ChurnResult:
    mode: str
    nodes: int
    trace_seconds: float
    speed: float
    jobs: int
    pods: int
    jobs_completed: int
    jobs_completed_by_shape: dict[str, int]
    pods_pending_at_end: int
    accelerator_utilisation: float
    queue_wait_p50_s: dict[str, float]
    queue_wait_p99_s: dict[str, float]
    nvlink_multi_gpu: str
    gpu_nic_same_numa: str
    mig_gpus_open: list[tuple[float, int]]
    double_allocations: list[str]
    claims_left_allocated: int
    extender_share_of_latency: float | None
    #: Seconds kube-controller-manager's and kube-scheduler's API clients waited on their own
    #: client-side rate limiter during the run (`rest_client_rate_limiter_duration_seconds_sum`).
    throttled_seconds: dict[str, float] = field(default_factory=dict)
    client_qps: str = "defaults"
    errors: list[str] = field(default_factory=list)


def device_attributes(kube: Kube) -> dict[Device, dict[str, Any]]:
    """(driver, pool, device) -> attributes by short name, plus `_node`, `_driver` and, for MIG,
    `_slices` (memory slices of its GPU's 8 it uses)."""
    out: dict[Device, dict[str, Any]] = {}
    for s in kube.get("/apis/resource.k8s.io/v1/resourceslices")["items"]:
        spec = s["spec"]
        for d in spec.get("devices", []):
            attrs = {
                k.rsplit("/", 1)[-1]: next(iter(v.values())) for k, v in (d.get("attributes") or {}).items()
            }
            attrs |= {"_node": spec.get("nodeName", ""), "_driver": spec["driver"]}
            profile = str(attrs.get("profile", ""))
            if profile[:1].isdigit() and "g." in profile:
                attrs["_slices"] = {"1g": 1, "2g": 2, "3g": 4, "4g": 4, "7g": 8}.get(profile.split(".")[0], 1)
            out[(spec["driver"], spec["pool"]["name"], d["name"])] = attrs
    return out


def _accelerators(attrs: dict[Device, dict[str, Any]]) -> float:
    """Whole accelerators of the fleet (GPUs of every vendor and TPUs; not NICs, not MIG)."""
    return float(sum(1 for a in attrs.values() if a.get("type") in ("gpu", "amdgpu", "tpu")))


def _weight(a: dict[str, Any]) -> float:
    """What one allocated device counts in accelerators: 1, a MIG partition its share of slices."""
    if "_slices" in a:
        return float(a["_slices"]) / 8.0
    return 1.0 if a.get("type") in ("gpu", "amdgpu", "tpu") else 0.0


def _extender_seconds(plane: ControlPlane) -> float | None:
    """Seconds the extender spent answering filter/prioritize/bind (its `/metrics` histograms)."""
    try:
        text = plane.extender_get("/metrics").text
    except Exception:
        return None
    total = 0.0
    for line in text.splitlines():
        if line.startswith("dra_extender_request_duration_seconds_sum{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def throttled(plane: ControlPlane) -> dict[str, float]:
    """Seconds each control-plane client has waited on its client-side rate limiter so far."""
    out: dict[str, float] = {}
    for name in ("kube-controller-manager", "kube-scheduler"):
        try:
            text = plane.component_metrics(name)
        except Exception:  # reported as missing, the run goes on
            continue
        out[name] = sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("rest_client_rate_limiter_duration_seconds_sum")
        )
    return out


def run_mode(
    plane: ControlPlane, mode: str, trace: list[Job], *, speed: float, nodes: int, drain: float
) -> ChurnResult:
    """Replay `trace` in `mode` (compressed by `speed`), then wait up to `drain` wall seconds for
    the last jobs; read everything the module docstring lists; delete what is left."""
    kube = plane.kube
    plane.use(mode)
    attrs = device_attributes(kube)
    run = mode[:5]
    claims, pods = ClaimLedger(), PodLedger(run)
    claim_watch = Watch(kube, "/apis/resource.k8s.io/v1/resourceclaims", claims.on_event)
    pod_watch = Watch(kube, f"/api/v1/namespaces/{NAMESPACE}/pods", pods.on_event)
    with claims.lock:
        held_before = set(claims.held)
    extender_before = _extender_seconds(plane) if mode != "baseline" else None
    throttled_before = throttled(plane)
    errors: list[str] = []
    start = time.monotonic()
    for job in trace:
        delay = start + job.arrival / speed - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        for pod in job_pods(job, run, SCHEDULER[mode], speed):
            try:
                kube.request("POST", collection_path(pod), pod)
            except Exception as exc:  # reported; the run goes on
                errors.append(f"{pod['metadata']['name']}: {exc}")
    end_of_trace = time.monotonic()
    deadline = end_of_trace + drain
    while time.monotonic() < deadline:
        with pods.lock:
            if all(r.succeeded is not None for r in pods.pods.values()):
                break
        time.sleep(0.5)
    ended = time.monotonic()
    extender_after = _extender_seconds(plane) if mode != "baseline" else None
    pod_watch.stop()
    result = _result(mode, nodes, trace, speed, attrs, claims, pods, held_before, start, ended)
    if extender_before is not None and extender_after is not None:
        waits = [r.bound - r.created for r in pods.pods.values() if r.bound and r.created]
        result.extender_share_of_latency = round(
            (extender_after - extender_before) / max(sum(waits), 1e-9), 4
        )
    after = throttled(plane)
    result.throttled_seconds = {k: round(v - throttled_before.get(k, 0.0), 2) for k, v in after.items()}
    result.client_qps = (
        "defaults" if plane.client_qps is None else f"{plane.client_qps[0]:g}/{plane.client_qps[1]}"
    )
    result.errors = errors[:5]
    # Printed before the clean-up: a run's figures are kept whatever the clean-up meets.
    print(
        json.dumps({"before_clean_up": asdict(result) | {"mig_gpus_open": result.mig_gpus_open[-3:]}}),
        flush=True,
    )
    clean_up(kube, run)
    wait_released(claims, held_before, timeout=120)
    claim_watch.stop()
    result.claims_left_allocated = len(set(claims.held) - held_before)
    result.double_allocations = claims.double[:20]
    return result


def _result(
    mode: str,
    nodes: int,
    trace: list[Job],
    speed: float,
    attrs: dict[Device, dict[str, Any]],
    claims: ClaimLedger,
    pods: PodLedger,
    held_before: set[str],
    start: float,
    ended: float,
) -> ChurnResult:
    # The watches keep running until the clean-up: read copies taken under their locks.
    with pods.lock:
        records = dict(pods.pods)
    with claims.lock:
        first_allocation, owner_pod = dict(claims.first_allocation), dict(claims.owner_pod)
        claim_timeline = list(claims.timeline)
    by_job: dict[str, list[PodRecord]] = defaultdict(list)
    for record in records.values():
        by_job[record.job].append(record)
    completed = [j for j, rs in by_job.items() if all(r.succeeded is not None for r in rs)]
    waits: dict[str, list[float]] = defaultdict(list)
    for r in records.values():
        if r.created is not None and r.bound is not None:
            waits[r.shape].append((r.bound - r.created) * speed)  # in trace seconds
    nvlink_ok = nvlink_all = numa_ok = numa_all = 0
    for uid, devices in first_allocation.items():
        if uid in held_before or owner_pod.get(uid) not in records:
            continue
        found = [attrs.get(d, {}) for d in devices]
        gpus = [a for a in found if "nvlinkDomain" in a and a.get("type") == "gpu"]
        nics = [a for a in found if a.get("_driver") == "dra.net"]
        if len(gpus) >= 2:
            nvlink_all += 1
            nvlink_ok += len({(g["_node"], g["nvlinkDomain"]) for g in gpus}) == 1
        if gpus and nics:
            numa_all += 1
            numa_ok += len({a.get("numaNode") for a in gpus + nics}) == 1

    # Utilisation: accelerator-seconds held by this run's claims over the fleet's free ones.
    def weight(held: Iterable[Device]) -> float:
        return sum(_weight(attrs.get(d, {})) for d in held)

    baseline = frozenset(d for uid in held_before for d in first_allocation.get(uid, []))
    timeline = [(t, held) for t, held in claim_timeline if start <= t <= ended]
    used, previous_t, previous_held = 0.0, start, frozenset[Device]()
    for t, held in timeline:
        used += (t - previous_t) * weight(previous_held - baseline)
        previous_t, previous_held = t, held
    used += (ended - previous_t) * weight(previous_held - baseline)
    capacity = (_accelerators(attrs) - weight(baseline)) * (ended - start)
    mig_open: list[tuple[float, int]] = []
    for t, held in timeline:
        parents = {
            (attrs[d]["_node"], attrs[d].get("parentUUID")) for d in held if "_slices" in attrs.get(d, {})
        }
        mig_open.append((round((t - start) * speed, 1), len(parents)))
    return ChurnResult(
        mode=mode,
        nodes=nodes,
        trace_seconds=round(max((j.arrival for j in trace), default=0.0), 1),
        speed=speed,
        jobs=len(trace),
        pods=sum(SHAPES[j.shape].pods for j in trace),
        jobs_completed=len(completed),
        jobs_completed_by_shape=dict(Counter(by_job[j][0].shape for j in completed)),
        pods_pending_at_end=sum(1 for r in records.values() if r.bound is None),
        accelerator_utilisation=round(used / capacity, 4) if capacity > 0 else 0.0,
        queue_wait_p50_s={s: round(percentile(w, 0.5), 1) for s, w in sorted(waits.items())},
        queue_wait_p99_s={s: round(percentile(w, 0.99), 1) for s, w in sorted(waits.items())},
        nvlink_multi_gpu=f"{nvlink_ok}/{nvlink_all}",
        gpu_nic_same_numa=f"{numa_ok}/{numa_all}",
        mig_gpus_open=mig_open[:: max(1, len(mig_open) // 200)],
        double_allocations=[],
        claims_left_allocated=0,
        extender_share_of_latency=None,
    )


def clean_up(kube: Kube, run: str, timeout: float = 900) -> None:
    """Delete the run's pods (kwok removes them; the garbage collector their claims) and wait
    until none is left. Thousands of pods take the API server longer than a request's timeout
    at 500 nodes: it answers 504 after 60 s (or drops the connection) and stops deleting, so the
    delete is sent again until none is left."""
    path = f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={RUN_LABEL}%3D{run}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(requests.exceptions.Timeout, requests.exceptions.ConnectionError):
            kube.request("DELETE", path, ok=(200, 504), timeout=90)
        if not kube.request("GET", path + "&limit=1")["items"]:
            break
        time.sleep(2)
    else:
        raise TimeoutError(f"run {run}: pods still there {timeout:g} s after their deletion")
    # The pods' generated claims (named after them) gone too, so the next mode's window of the
    # controller's client-side throttling holds none of this run's deletes.
    claims = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
    while time.monotonic() < deadline:
        names = [c["metadata"]["name"] for c in kube.request("GET", claims, timeout=90)["items"]]
        if not any(name.startswith(f"{run}-") for name in names):
            return
        time.sleep(2)
    raise TimeoutError(f"run {run}: generated claims still there {timeout:g} s after the pods' deletion")


def wait_released(claims: ClaimLedger, held_before: set[str], timeout: float) -> bool:
    """True once no claim but those held before the run is allocated (within `timeout`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with claims.lock:
            if not set(claims.held) - held_before:
                return True
        time.sleep(0.5)
    return False


# ----------------------------------------------------------------------------- the command


def prepare(plane: ControlPlane, nodes: int, seed: int, *, held_fraction: float = 0.3) -> None:
    """Publish the fleet (`held_fraction` of its accelerators held by pods that run throughout)
    and the shapes' templates, then let kwok take the Nodes over."""
    from tests.e2e.objects import publish_fleet

    generated, _ = generate_mixed_cluster(nodes=nodes, seed=seed, pods=0, held_fraction=held_fraction)
    publish_fleet(plane.kube, generated)
    plane.kube.apply_all(templates())
    plane.start_kwok()


def markdown(results: list[ChurnResult]) -> str:
    rows = [
        "| mode | nodes | client QPS | jobs | completed | 8-GPU completed | pending at end | accel. used | "
        "NVLink | GPU+NIC NUMA | p99 wait gpu-4/gpu-8 (trace s) | extender share | throttled s (kcm/sched) "
        "| double |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        rows.append(
            f"| {r.mode} | {r.nodes} | {r.client_qps} | {r.jobs} | {r.jobs_completed} "
            f"| {r.jobs_completed_by_shape.get('gpu-8', 0)} "
            f"| {r.pods_pending_at_end} | {r.accelerator_utilisation:.1%} | {r.nvlink_multi_gpu} "
            f"| {r.gpu_nic_same_numa} | {r.queue_wait_p99_s.get('gpu-4', math.nan)} / "
            f"{r.queue_wait_p99_s.get('gpu-8', math.nan)} | "
            f"{'-' if r.extender_share_of_latency is None else f'{r.extender_share_of_latency:.1%}'} "
            f"| {r.throttled_seconds.get('kube-controller-manager', math.nan)} / "
            f"{r.throttled_seconds.get('kube-scheduler', math.nan)} "
            f"| {len(r.double_allocations)} |"
        )
    return "\n".join(rows)


def plot(results: list[ChurnResult], out: Path) -> None:
    """MIG GPUs open over trace time per mode (fragmentation), and p99 queue wait per shape."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    for r in results:
        if r.mig_gpus_open:
            times, opened = zip(*r.mig_gpus_open, strict=True)
            axes[0].step([t / 60 for t in times], opened, where="post", label=f"{r.mode} ({r.nodes} nodes)")
    axes[0].set_xlabel("trace minutes")
    axes[0].set_title("A100 GPUs holding a MIG partition (fewer: tighter packing)")
    axes[0].legend()
    shapes = sorted({s for r in results for s in r.queue_wait_p99_s})
    width = 0.8 / max(1, len(results))
    for i, r in enumerate(results):
        xs = [j + i * width for j in range(len(shapes))]
        axes[1].bar(
            xs, [r.queue_wait_p99_s.get(s, 0.0) for s in shapes], width, label=f"{r.mode} ({r.nodes})"
        )
    axes[1].set_xticks([j + 0.4 for j in range(len(shapes))], shapes, rotation=45, ha="right")
    axes[1].set_ylabel("trace seconds")
    axes[1].set_yscale("symlog")
    axes[1].set_title("p99 queue wait per shape (lower is better)")
    axes[1].legend(fontsize=7)
    fig.suptitle("Churn through the real kube-scheduler with kwok: in-tree DRA vs the extender")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main(argv: list[str] | None = None) -> int:
    from tests.e2e.cluster import KwokPlane, running

    parser = argparse.ArgumentParser(prog="python -m bench.churn", description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--minutes", type=float, default=30.0, help="trace minutes")
    parser.add_argument("--jobs-per-minute", type=float, default=40.0, help="offered load (trace time)")
    parser.add_argument("--speed", type=float, default=10.0, help="trace seconds per wall second")
    parser.add_argument("--drain", type=float, default=120.0, help="wall seconds to wait after the trace")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--version", default="1.36")
    add_client_qps_option(parser)
    parser.add_argument(
        "--held-fraction",
        type=float,
        default=0.3,
        help="share of the fleet's accelerators held by pods that run throughout",
    )
    parser.add_argument(
        "--node-lease-seconds",
        type=int,
        default=40,
        help="kwok's node Lease duration (renewed every quarter of it; a kubelet's is 40)",
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args(argv)
    trace = make_trace(args.seed, args.minutes * 60, args.jobs_per_minute)
    print(
        f"trace: {len(trace)} jobs over {args.minutes} trace minutes at speed {args.speed}x "
        f"on {args.nodes} nodes, {args.held_fraction:.0%} of the accelerators held throughout "
        f"({platform.node()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs)",
        flush=True,
    )

    class _Plane(KwokPlane):
        def __post_init__(self) -> None:
            super().__post_init__()
            apply_client_qps(self, args.client_qps)
            self.node_lease_seconds = args.node_lease_seconds

    results = []
    with running(version=args.version, name="churn", kind=_Plane) as plane:
        prepare(plane, args.nodes, args.seed, held_fraction=args.held_fraction)
        for mode in args.modes:
            result = run_mode(plane, mode, trace, speed=args.speed, nodes=args.nodes, drain=args.drain)
            print(json.dumps(asdict(result) | {"mig_gpus_open": result.mig_gpus_open[-3:]}), flush=True)
            results.append(result)
            if args.json:  # after each mode: a later failure keeps the runs done
                args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    table = markdown(results)
    print(table)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    if args.markdown:
        args.markdown.write_text(table + "\n")
    if args.plot:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
