"""The real kube-scheduler placing a burst of DRA pods on a mixed fleet: its own DynamicResources
plugin alone (the upstream baseline), with the extender advisory, and with the extender as allocator.

    python -m bench.real_scheduler --nodes 500 2000 --pods 200 --json /tmp/real.json \\
        --markdown /tmp/real.md --plot docs/real_scheduler.png

Everything runs on this machine and is real: etcd, kube-apiserver, kube-controller-manager (the
resourceclaim controller creates each pod's claim from its template) and kube-scheduler v1.36.3
as `tests.gobuild` builds them from upstream's modules, with the shipped
`config/scheduler-{advisory,allocator}.yaml`; the baseline is the advisory config without its
`extenders` section. The fleet is `loadtests.fleet.generate_mixed_cluster` (H100 + NICs, A100 with
MIG on shared counters, L40S, MI300X, TPU, CPU nodes; 30 % of the accelerators held by running
pods), published through the API as drivers and kubelets would (Nodes Ready, ResourceSlices,
allocated claims reserved for bound pods). There are no kubelets: a bound pod stays bound.

Per run, M pods of the mixed claim shapes are created at once (8 client threads); a watch on the
namespace records when each pod gets `spec.nodeName` (bound) or its first
`PodScheduled=False/Unschedulable`; a run ends when every pod is bound, or when the rest have all
been found unschedulable and no pod was bound for 15 s. Reported per run: pods/s (bound pods over
the time from the first create to the last binding), p50/p99 of each bound pod's time from its
create call returning to its binding, the pods left unschedulable, and placement quality from the
claims' allocations in the API server: multi-GPU pods whose GPUs share one NVLink domain,
GPU+NIC pods whose GPU and NIC share a NUMA node, and how many A100 GPUs the run's MIG
partitions opened (GPUs that held no partition before; fewer is tighter packing). The three
runs use the same fleet; between runs the run's pods and claims are deleted and the devices are
free again.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.apiwatch import Watch
from loadtests.fleet import generate_mixed_cluster
from loadtests.generate import NAMESPACE, POD_CLAIM, SHAPE_LABEL, generate_cluster
from tests.e2e.cluster import ControlPlane, Kube, collection_path, object_path
from tests.e2e.objects import parallel as _parallel
from tests.e2e.objects import publish_fleet

Obj = dict[str, Any]

MODES = ("baseline", "advisory", "allocator")
SCHEDULER = {
    "baseline": "default-scheduler",
    "advisory": "default-scheduler",
    "allocator": "dra-topology-scheduler",
}
GPU_DRIVER = "gpu.nvidia.com"
NIC_DRIVER = "dra.net"
#: Seconds without a new binding after which pods that were all found unschedulable count as such.
SETTLE = 15.0


# ----------------------------------------------------------------------------- the fleet


def device_attributes(kube: Kube) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(driver, pool, device) -> attributes by short name (`nvlinkDomain`, `numaNode`, ...)."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    items = kube.get("/apis/resource.k8s.io/v1/resourceslices")["items"]
    for s in items:
        spec = s["spec"]
        for d in spec.get("devices", []):
            attrs = {
                k.rsplit("/", 1)[-1]: next(iter(v.values())) for k, v in (d.get("attributes") or {}).items()
            }
            out[(spec["driver"], spec["pool"]["name"], d["name"])] = attrs | {
                "_node": spec.get("nodeName", "")
            }
    return out


# ----------------------------------------------------------------------------- one run


@dataclass
class RunResult:
    fleet: str
    mode: str
    nodes: int
    pods: int
    bound: int
    unschedulable: int
    undecided: int
    seconds: float
    pods_per_second: float
    p50_ms: float
    p99_ms: float
    nvlink_multi_gpu: str
    gpu_nic_same_numa: str
    mig_gpus_opened: int
    mig_pods: int
    errors: list[str] = field(default_factory=list)


class PodWatch:
    """Record when each pod of the namespace is first bound or declared unschedulable."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.bound: dict[str, float] = {}
        self.unschedulable: dict[str, float] = {}
        self._watch = Watch(kube, f"/api/v1/namespaces/{namespace}/pods", self._event)

    def _event(self, kind: str, obj: Obj, now: float) -> None:
        name = obj.get("metadata", {}).get("name")
        if kind == "DELETED" or not name:
            return
        if obj.get("spec", {}).get("nodeName"):
            self.bound.setdefault(name, now)
        for c in obj.get("status", {}).get("conditions", []):
            if (
                c.get("type") == "PodScheduled"
                and c.get("status") == "False"
                and c.get("reason") == "Unschedulable"
            ):
                self.unschedulable.setdefault(name, now)

    def stop(self) -> None:
        self._watch.stop()


def _pod(name: str, shape: str, scheduler: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {SHAPE_LABEL: shape}},
        "spec": {
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"claims": [{"name": POD_CLAIM}]},
                }
            ],
            "resourceClaims": [{"name": POD_CLAIM, "resourceClaimTemplateName": shape}],
        },
    }


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def quality(
    kube: Kube,
    attrs: dict[tuple[str, str, str], dict[str, Any]],
    names: list[str],
    before_mig_gpus: set[tuple[str, str]],
) -> tuple[str, str, set[tuple[str, str]], int]:
    """(multi-GPU pods in one NVLink domain, GPU+NIC pods on one NUMA node, MIG parent GPUs the
    run's partitions use, MIG pods) over the bound pods `names`."""
    nvlink_ok = nvlink_all = numa_ok = numa_all = mig_pods = 0
    mig_gpus: set[tuple[str, str]] = set()
    for name in names:
        pod = kube.get(object_path("Pod", name, NAMESPACE))
        for status in pod.get("status", {}).get("resourceClaimStatuses", []):
            claim = kube.get(object_path("ResourceClaim", status["resourceClaimName"], NAMESPACE))
            results = claim.get("status", {}).get("allocation", {}).get("devices", {}).get("results", [])
            devices = [attrs.get((r["driver"], r["pool"], r["device"]), {}) for r in results]
            gpus = [d for d in devices if "nvlinkDomain" in d]
            nics = [d for d in devices if d.get("_driver") == NIC_DRIVER]
            if len(gpus) >= 2:
                nvlink_all += 1
                nvlink_ok += len({(g["_node"], g["nvlinkDomain"]) for g in gpus}) == 1
            if gpus and nics:
                numa_all += 1
                numa_ok += len({d.get("numaNode") for d in gpus + nics}) == 1
            migs = [d for d in devices if "parentUUID" in d]
            if migs:
                mig_pods += 1
                mig_gpus.update((m["_node"], m["parentUUID"]) for m in migs)
    opened = mig_gpus - before_mig_gpus
    return f"{nvlink_ok}/{nvlink_all}", f"{numa_ok}/{numa_all}", opened, mig_pods


def held_mig_gpus(kube: Kube, attrs: dict[tuple[str, str, str], dict[str, Any]]) -> set[tuple[str, str]]:
    held: set[tuple[str, str]] = set()
    for claim in kube.get("/apis/resource.k8s.io/v1/resourceclaims")["items"]:
        for r in claim.get("status", {}).get("allocation", {}).get("devices", {}).get("results", []):
            a = attrs.get((r["driver"], r["pool"], r["device"]), {})
            if "parentUUID" in a:
                held.add((a["_node"], a["parentUUID"]))
    return held


def run_mode(
    plane: ControlPlane, fleet: str, mode: str, nodes: int, shapes: list[str], timeout: float
) -> RunResult:
    kube = plane.kube
    plane.use(mode)
    attrs = device_attributes(kube)
    for key, a in attrs.items():
        a["_driver"] = key[0]
    before = held_mig_gpus(kube, attrs)
    names = [f"{mode}-{i:05d}" for i in range(len(shapes))]
    watch = PodWatch(kube, NAMESPACE)
    created: dict[str, float] = {}
    errors: list[str] = []

    def create(item: tuple[str, str]) -> None:
        name, shape = item
        try:
            kube.request(
                "POST",
                collection_path({"kind": "Pod"}, namespace=NAMESPACE),
                _pod(name, shape, SCHEDULER[mode]),
            )
            created[name] = time.monotonic()
        except Exception as exc:  # a failed create is reported, the run goes on
            errors.append(f"{name}: {exc}")

    start = time.monotonic()
    _parallel(zip(names, shapes, strict=True), create)
    deadline = start + timeout
    # Done when every pod is bound, or when the rest have all been found unschedulable and no
    # pod was bound for SETTLE seconds (the scheduler retries them; a first Unschedulable is no
    # verdict: a pod whose claim the controller has not created yet gets one too).
    while time.monotonic() < deadline:
        unbound = [n for n in created if n not in watch.bound]
        last_bind = max(watch.bound.values(), default=start)
        if not unbound or (
            all(n in watch.unschedulable for n in unbound) and time.monotonic() - last_bind > SETTLE
        ):
            break
        time.sleep(0.2)
    watch.stop()
    bound = [n for n in created if n in watch.bound]
    latencies = [(watch.bound[n] - created[n]) * 1000 for n in bound]
    end = max((watch.bound[n] for n in bound), default=start)
    nvlink, numa, opened, mig_pods = quality(kube, attrs, bound, before)
    result = RunResult(
        fleet=fleet,
        mode=mode,
        nodes=nodes,
        pods=len(names),
        bound=len(bound),
        unschedulable=sum(1 for n in created if n not in watch.bound and n in watch.unschedulable),
        undecided=sum(1 for n in created if n not in watch.bound and n not in watch.unschedulable),
        seconds=round(end - start, 2),
        pods_per_second=round(len(bound) / max(end - start, 1e-9), 4),
        p50_ms=round(percentile(latencies, 0.5), 1),
        p99_ms=round(percentile(latencies, 0.99), 1),
        nvlink_multi_gpu=nvlink,
        gpu_nic_same_numa=numa,
        mig_gpus_opened=len(opened),
        mig_pods=mig_pods,
        errors=errors[:5],
    )
    cleanup(kube, names)
    return result


def cleanup(kube: Kube, names: list[str]) -> None:
    """Delete the run's pods and their claims; wait until the claims are gone (the resourceclaim
    controller deallocates and drops its finalizer first)."""
    claim_names: list[str] = []
    for name in names:
        try:
            pod = kube.get(object_path("Pod", name, NAMESPACE))
        except Exception:
            continue
        claim_names += [
            s["resourceClaimName"]
            for s in pod.get("status", {}).get("resourceClaimStatuses", [])
            if s.get("resourceClaimName")
        ]
    _parallel(
        names,
        lambda n: kube.request(
            "DELETE", object_path("Pod", n, NAMESPACE), {"gracePeriodSeconds": 0}, ok=(200, 202, 404)
        ),
    )
    _parallel(
        claim_names,
        lambda n: kube.request("DELETE", object_path("ResourceClaim", n, NAMESPACE), ok=(200, 202, 404)),
    )
    deadline = time.monotonic() + 180
    remaining = set(claim_names)
    while remaining and time.monotonic() < deadline:
        items = kube.get(f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims")["items"]
        remaining = {c["metadata"]["name"] for c in items} & set(claim_names)
        time.sleep(0.5)
    if remaining:
        raise RuntimeError(f"{len(remaining)} claims of the run were not removed within 180 s")


# ----------------------------------------------------------------------------- reporting


def markdown(results: list[RunResult]) -> str:
    lines = [
        "| fleet | nodes | mode | pods | bound | unsched. | undecided | pods/s | x baseline | p50 ms "
        "| p99 ms "
        "| multi-GPU in 1 NVLink domain | GPU+NIC on 1 NUMA | MIG GPUs opened (MIG pods) |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    baseline = {(r.fleet, r.nodes): r.pods_per_second for r in results if r.mode == "baseline"}
    for r in results:
        base = baseline.get((r.fleet, r.nodes))
        ratio = f"{r.pods_per_second / base:.2f}" if base else "-"
        lines.append(
            f"| {r.fleet} | {r.nodes} | {r.mode} | {r.pods} | {r.bound} | {r.unschedulable} | {r.undecided} "
            f"| {r.pods_per_second} | {ratio} | {r.p50_ms} | {r.p99_ms} | {r.nvlink_multi_gpu} "
            f"| {r.gpu_nic_same_numa} | {r.mig_gpus_opened} ({r.mig_pods}) |"
        )
    return "\n".join(lines) + "\n"


def plot(results: list[RunResult], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted({r.nodes for r in results})
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    width = 0.8 / len(MODES)
    for i, mode in enumerate(MODES):
        runs = {r.nodes: r for r in results if r.mode == mode}
        xs = [j + i * width for j in range(len(sizes))]
        axes[0].bar(xs, [runs[s].pods_per_second if s in runs else 0 for s in sizes], width, label=mode)
        axes[1].bar(xs, [runs[s].p99_ms / 1000 if s in runs else 0 for s in sizes], width, label=mode)
    for ax, title in zip(
        axes, ("pods/s (higher is better)", "p99 per-pod latency, s (lower is better)"), strict=True
    ):
        ax.set_xticks([j + width for j in range(len(sizes))], [f"{s} nodes" for s in sizes])
        ax.set_title(title)
        ax.legend()
    fig.suptitle("Real kube-scheduler v1.36.3 on the mixed fleet: in-tree DRA vs the extender")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def add_client_qps_option(parser: argparse.ArgumentParser) -> None:
    """`--client-qps`, shared by the benchmarks that run the real control plane."""
    parser.add_argument(
        "--client-qps",
        type=float,
        default=0.0,
        help="kube-controller-manager's and kube-scheduler's client QPS (burst twice it); 0: their defaults",
    )


def apply_client_qps(plane: ControlPlane, qps: float) -> None:
    """Raise the plane's client limits to `qps` (burst twice it); 0 keeps the programs' defaults."""
    if qps:
        plane.client_qps = (qps, int(2 * qps))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.real_scheduler", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--fleet",
        choices=("mixed", "h100"),
        default="mixed",
        help="mixed: loadtests.fleet (MIG on shared counters, several vendors); h100: identical "
        "8-GPU nodes with NICs (loadtests.generate)",
    )
    parser.add_argument("--nodes", type=int, nargs="+", default=[500, 2000])
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a run may take")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args(argv)
    print(
        f"machine: {platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        flush=True,
    )
    results: list[RunResult] = []
    for nodes in args.nodes:
        if args.fleet == "mixed":
            objects, pending = generate_mixed_cluster(nodes=nodes, seed=args.seed, pods=args.pods)
        else:
            objects, pending = generate_cluster(nodes=nodes, seed=args.seed, pods=args.pods)
        shapes = [p["metadata"]["labels"][SHAPE_LABEL] for p in pending]
        with tempfile.TemporaryDirectory(prefix="dra-bench-") as work:
            plane = ControlPlane(Path(work))
            try:
                plane.start()
                started = time.monotonic()
                counts = publish_fleet(plane.kube, objects)
                print(f"{nodes} nodes: published {counts} in {time.monotonic() - started:.0f} s", flush=True)
                for mode in args.modes:
                    result = run_mode(plane, args.fleet, mode, nodes, shapes, args.timeout)
                    print(json.dumps(asdict(result)), flush=True)
                    results.append(result)
            finally:
                plane.stop()
    table = markdown(results)
    print(table)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    if args.markdown:
        args.markdown.write_text(table)
    if args.plot:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
