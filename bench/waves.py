"""Wave to wave: where the time goes when a second burst of DRA pods arrives while the first is
being released, through the real kube-scheduler.

    python -m bench.waves --nodes 40 --pods 64 --json /tmp/waves.json
    python -m bench.waves --nodes 40 --pods 64 --modes allocator --client-qps 200

The control plane, fleet and pod shapes are `bench.real_scheduler`'s (etcd, kube-apiserver,
kube-controller-manager with the resourceclaim controller, kube-scheduler v1.36.3; the mixed fleet
with 30 % of its accelerators held). Per mode: wave 1 (M pods of the mixed shapes) is created at
once and waited for until bound or settled; then, at one instant, wave 1's pods are deleted
(grace 0, as a finished pod's claims are released) and wave 2 (the same shapes) is created. Watches on
the namespace's pods and on every ResourceClaim record, in etcd's order:
- per wave-1 claim: when its pod's deletion was sent, when the resourceclaim controller cleared
  its `reservedFor`, when the claim lost its allocation or was deleted (the devices are free in
  the API server from then on);
- per wave-2 pod: created, each `PodScheduled=False` update (a failed attempt), bound.
kube-scheduler's own `/metrics` is sampled every 0.2 s: `scheduler_pending_pods` by queue
(active, backoff, unschedulable), so the pod-seconds wave 2 spent waiting in each queue show
whether devices, the controller or the scheduler's back-off held it.

Reported per mode: wave 2's span (first create to last binding) and p50/max per pod; the release
of wave 1 (delete sent to devices free: p50, max); how much of wave 2's span came after the last
wave-1 device was free; failed attempts per wave-2 pod; pod-seconds per scheduler queue.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.apiwatch import Watch
from bench.real_scheduler import (
    MODES,
    SCHEDULER,
    SETTLE,
    _pod,
    add_client_qps_option,
    apply_client_qps,
    percentile,
)
from loadtests.fleet import generate_mixed_cluster
from loadtests.generate import NAMESPACE, SHAPE_LABEL
from tests.e2e.cluster import ControlPlane, Kube, collection_path, object_path
from tests.e2e.objects import parallel, publish_fleet

Obj = dict[str, Any]
QUEUES = ("active", "backoff", "unschedulable", "gated")


@dataclass
class PodTimes:
    created: float | None = None
    bound: float | None = None
    failures: int = 0
    delete_sent: float | None = None
    claim: str = ""


@dataclass
class ClaimTimes:
    allocated: float | None = None
    unreserved: float | None = None
    freed: float | None = None  # allocation gone or claim deleted, after it was allocated


class Recorder:
    """Watches of the namespace's pods and claims: the times above, by pod and claim name."""

    def __init__(self, kube: Kube) -> None:
        self.lock = threading.Lock()
        self.pods: dict[str, PodTimes] = {}
        self.claims: dict[str, ClaimTimes] = {}
        self._failed: dict[str, str] = {}  # pod -> last failed condition's transition time
        self._pods = Watch(kube, f"/api/v1/namespaces/{NAMESPACE}/pods", self._pod)
        self._claims = Watch(
            kube, f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims", self._claim
        )

    def _pod(self, kind: str, obj: Obj, now: float) -> None:
        name = obj.get("metadata", {}).get("name", "")
        with self.lock:
            times = self.pods.setdefault(name, PodTimes())
            if times.created is None and kind == "ADDED":
                times.created = now
            if obj.get("spec", {}).get("nodeName") and times.bound is None:
                times.bound = now
            for status in obj.get("status", {}).get("resourceClaimStatuses") or []:
                times.claim = status.get("resourceClaimName") or times.claim
            for c in obj.get("status", {}).get("conditions", []):
                if c.get("type") == "PodScheduled" and c.get("status") == "False":
                    stamp = f"{c.get('lastTransitionTime')}/{c.get('message', '')[:40]}"
                    if self._failed.get(name) != stamp:
                        self._failed[name] = stamp
                        times.failures += 1

    def _claim(self, kind: str, obj: Obj, now: float) -> None:
        name = obj.get("metadata", {}).get("name", "")
        status = obj.get("status", {})
        with self.lock:
            times = self.claims.setdefault(name, ClaimTimes())
            allocated = bool(status.get("allocation")) and kind != "DELETED"
            if allocated and times.allocated is None:
                times.allocated = now
            if times.allocated is None:
                return  # not allocated yet: nothing to release
            if times.unreserved is None and (kind == "DELETED" or not status.get("reservedFor")):
                times.unreserved = now
            if times.freed is None and not allocated:
                times.freed = now

    def stop(self) -> None:
        self._pods.stop()
        self._claims.stop()


class QueueSampler:
    """kube-scheduler's `scheduler_pending_pods` by queue, every `every` seconds, integrated into
    pod-seconds per queue between `start()` and `stop()`."""

    def __init__(self, plane: ControlPlane, every: float = 0.2) -> None:
        self.plane, self.every = plane, every
        self.pod_seconds = dict.fromkeys(QUEUES, 0.0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.is_set():
            try:
                text = self.plane.component_metrics("kube-scheduler")
            except Exception:  # a missed sample: the next one counts the interval
                text = ""
            now = time.monotonic()
            for line in text.splitlines():
                if line.startswith("scheduler_pending_pods{"):
                    queue = line.split('queue="', 1)[1].split('"', 1)[0]
                    if queue in self.pod_seconds:
                        self.pod_seconds[queue] += float(line.rsplit(" ", 1)[1]) * (now - last)
            last = now
            self._stop.wait(self.every)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)


@dataclass
class WaveResult:
    mode: str
    nodes: int
    pods: int
    wave1_bound: int
    wave2_bound: int
    wave2_span_s: float
    wave2_p50_s: float
    wave2_max_s: float
    release_p50_s: float  # wave-1 delete sent -> its devices free in the API server
    release_max_s: float
    after_last_release_s: float  # wave-2 span left after the last wave-1 device was free
    failed_attempts_p50: float
    failed_attempts_max: int
    queue_pod_seconds: dict[str, float] = field(default_factory=dict)


def _create(kube: Kube, names: list[str], shapes: list[str], scheduler: str) -> None:
    parallel(
        zip(names, shapes, strict=True),
        lambda item: kube.request(
            "POST", collection_path({"kind": "Pod"}, namespace=NAMESPACE), _pod(item[0], item[1], scheduler)
        ),
    )


def _settled(recorder: Recorder, names: list[str], timeout: float) -> None:
    """Until every pod is bound, or none was bound for SETTLE seconds (the rest wait for devices)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with recorder.lock:
            times = [recorder.pods.get(n, PodTimes()) for n in names]
        if all(t.bound for t in times):
            return
        last = max((t.bound or 0.0 for t in times), default=0.0)
        if last and time.monotonic() - last > SETTLE:
            return
        time.sleep(0.2)


def run_mode(plane: ControlPlane, mode: str, nodes: int, shapes: list[str], timeout: float) -> WaveResult:
    kube = plane.kube
    plane.use(mode)
    recorder = Recorder(kube)
    first = [f"{mode[:5]}-w1-{i:04d}" for i in range(len(shapes))]
    second = [f"{mode[:5]}-w2-{i:04d}" for i in range(len(shapes))]
    _create(kube, first, shapes, SCHEDULER[mode])
    _settled(recorder, first, timeout)
    sampler = QueueSampler(plane)
    sampler.start()
    sent = time.monotonic()
    with recorder.lock:
        for name in first:
            recorder.pods[name].delete_sent = sent

    def delete(name: str) -> None:
        kube.request(
            "DELETE", object_path("Pod", name, NAMESPACE), {"gracePeriodSeconds": 0}, ok=(200, 202, 404)
        )

    threads = [
        threading.Thread(target=parallel, args=(first, delete)),
        threading.Thread(target=_create, args=(kube, second, shapes, SCHEDULER[mode])),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    _settled(recorder, second, timeout)
    sampler.stop()
    recorder.stop()
    with recorder.lock:
        w1 = [recorder.pods[n] for n in first if n in recorder.pods]
        w2 = [recorder.pods[n] for n in second if n in recorder.pods]
        freed = [recorder.claims[t.claim].freed for t in w1 if t.bound and t.claim in recorder.claims]
    releases = [f - sent for f in freed if f is not None]
    created = [t.created for t in w2 if t.created is not None]
    bound = [t for t in w2 if t.bound is not None and t.created is not None]
    start = min(created, default=sent)
    end = max((t.bound for t in bound if t.bound), default=start)
    last_free = max((f for f in freed if f is not None), default=sent)
    result = WaveResult(
        mode=mode,
        nodes=nodes,
        pods=len(shapes),
        wave1_bound=sum(1 for t in w1 if t.bound),
        wave2_bound=len(bound),
        wave2_span_s=round(end - start, 2),
        wave2_p50_s=round(percentile([t.bound - t.created for t in bound], 0.5), 2),  # type: ignore[operator]
        wave2_max_s=round(max((t.bound - t.created for t in bound), default=0.0), 2),  # type: ignore[operator]
        release_p50_s=round(percentile(releases, 0.5), 2),
        release_max_s=round(max(releases, default=0.0), 2),
        after_last_release_s=round(max(end - last_free, 0.0), 2),
        failed_attempts_p50=percentile([float(t.failures) for t in w2], 0.5),
        failed_attempts_max=max((t.failures for t in w2), default=0),
        queue_pod_seconds={q: round(v, 1) for q, v in sampler.pod_seconds.items()},
    )
    parallel(
        second,
        lambda n: kube.request(
            "DELETE", object_path("Pod", n, NAMESPACE), {"gracePeriodSeconds": 0}, ok=(200, 202, 404)
        ),
    )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.waves", description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=40)
    parser.add_argument("--pods", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--timeout", type=float, default=300.0)
    add_client_qps_option(parser)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    print(f"machine: {platform.platform()}, {os.cpu_count()} cores", flush=True)
    objects, pending = generate_mixed_cluster(nodes=args.nodes, seed=args.seed, pods=args.pods)
    shapes = [p["metadata"]["labels"][SHAPE_LABEL] for p in pending]
    results = []
    with tempfile.TemporaryDirectory(prefix="dra-waves-") as work:
        plane = ControlPlane(Path(work))
        apply_client_qps(plane, args.client_qps)
        try:
            plane.start()
            publish_fleet(plane.kube, objects)
            for mode in args.modes:
                result = run_mode(plane, mode, args.nodes, shapes, args.timeout)
                print(json.dumps(asdict(result)), flush=True)
                results.append(result)
                time.sleep(10)  # wave 2's pods and claims gone before the next mode
        finally:
            plane.stop()
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
