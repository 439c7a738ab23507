"""Filter (and filter+prioritize) latency of the extender on generated clusters.

Scope: measures the placement service behind `/filter` and `/prioritize` on clusters made by
`loadtests.generate`, in-process (`Placement.filter` called directly) and, with `--http`, over
HTTP through the real aiohttp app from `extender.server.make_app`, served on 127.0.0.1 inside
this process and driven by one aiohttp client connection. It does not measure bind or cluster
watches; rebuilds after changes only with `--update-calls N` (N filter calls, each right after
one ResourceClaim or Node update, measured last because they change the state).

How:
- every call asks about all nodes of the cluster (`NodeNames` = every node, as kube-scheduler
  sends with `percentageOfNodesToScore: 100`), for the generated pending pods in turn;
- placement caches one evaluation per pod UID and state generation, so the benchmark clears
  that cache (`Placement._evaluations`) before every measured filter call: each call does the
  full work of a new pod. In the filter+prioritize pairs prioritize then re-uses the evaluation
  of its filter, as in a real scheduling cycle, and gets the nodes that filter passed;
- calls are serial (the scheduling cycle is serial); `time.perf_counter` around each call
  (over HTTP: around the POST and reading the response body; the request body is encoded
  before the clock starts, as the scheduler would do it on its side);
- warm-up calls (one per claim shape, which fills the CEL selector masks and per-device
  caches, then `--warmup` more) are not counted; the cold first call per shape is reported.

CLI: `python -m bench.filter_bench --nodes 500 5000 --calls 200 --seed 1 [--http] [--json PATH]`
(`--cpu N` pins the process to one CPU, `--profile` prints a cProfile of the in-process filter
calls, `--gc-freeze` is a what-if experiment; see `--help`).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import json
import os
import platform
import pstats
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from extender.cluster.state import ClusterState
from extender.placement import Placement
from extender.settings import Settings
from extender.verdicts import FilterVerdict
from extender.wiring import build_services
from loadtests.generate import SHAPE_LABEL, SHAPES, generate_cluster

Obj = dict[str, Any]


@dataclass(slots=True)
class Result:
    """Latency figures of one (mode, cluster size) run."""

    mode: str
    nodes: int
    calls: int
    warmup_calls: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float
    calls_per_s: float
    last_passed: int
    last_failed: int
    last_unresolvable: int
    errors: int = 0
    by_shape: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass(slots=True)
class Cluster:
    """A generated cluster loaded into the extender's services."""

    nodes: int
    placement: Placement
    binder: Any
    node_names: list[str]
    pods: list[Obj]
    startup: dict[str, float]
    objects: dict[str, int]


def machine() -> dict[str, Any]:
    """CPU model, core counts, Python and numpy versions of this machine."""
    model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 0
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "numpy": np.__version__,
        "platform": platform.platform(),
    }


def _stats(samples: list[float]) -> dict[str, float]:
    ms = np.asarray(samples) * 1000.0
    return {
        "p50_ms": float(np.percentile(ms, 50)),
        "p90_ms": float(np.percentile(ms, 90)),
        "p99_ms": float(np.percentile(ms, 99)),
        "max_ms": float(ms.max()),
        "mean_ms": float(ms.mean()),
        "calls_per_s": float(len(ms) / (ms.sum() / 1000.0)) if ms.sum() else float("inf"),
    }


def _shape(pod: Obj) -> str:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(SHAPE_LABEL, "?")


def load_cluster(nodes: int, seed: int, pods: int) -> Cluster:
    """Generate a cluster, build the ClusterState and services, and time each step."""
    started = time.perf_counter()
    objects, pending = generate_cluster(nodes=nodes, seed=seed, pods=pods)
    generated = time.perf_counter()
    state = ClusterState.from_objects(objects)
    loaded = time.perf_counter()
    placement, binder = build_services(Settings(), state)
    built = time.perf_counter()
    counts: dict[str, int] = {}
    for obj in objects:
        counts[obj["kind"]] = counts.get(obj["kind"], 0) + 1
    return Cluster(
        nodes=nodes,
        placement=placement,
        binder=binder,
        node_names=list(placement.index().node_names),
        pods=pending,
        startup={
            "generate_s": generated - started,
            "cluster_state_ms": (loaded - generated) * 1000,
            "index_build_ms": (built - loaded) * 1000,
            "device_rows": placement.index().num_rows,
        },
        objects=counts,
    )


def _warm_pods(pods: list[Obj], extra: int) -> tuple[list[Obj], list[Obj]]:
    """The first pod of each shape (cold calls), then `extra` more pods (warm-up)."""
    firsts: dict[str, Obj] = {}
    for pod in pods:
        firsts.setdefault(_shape(pod), pod)
    return list(firsts.values()), [pods[i % len(pods)] for i in range(extra)]


def warm_up(cluster: Cluster, extra: int) -> dict[str, float]:
    """Run the uncounted warm-up calls in-process; returns the cold first-call ms per shape."""
    placement = cluster.placement
    cold: dict[str, float] = {}
    firsts, more = _warm_pods(cluster.pods, extra)
    for pod in firsts:
        placement._evaluations.clear()
        started = time.perf_counter()
        placement.filter(pod, cluster.node_names)
        cold[_shape(pod)] = (time.perf_counter() - started) * 1000
    for pod in more:
        placement._evaluations.clear()
        placement.prioritize(pod, placement.filter(pod, cluster.node_names).passed)
    return cold


def run_in_process(
    cluster: Cluster, calls: int, warmup: int, *, prioritize: bool, only_prioritize: bool = False
) -> Result:
    """`calls` serial filter (or filter+prioritize) calls on every node, cache cleared per call.

    `only_prioritize` times just the prioritize call of each cycle (its filter runs untimed first,
    so prioritize re-uses that evaluation as in a real scheduling cycle).
    """
    placement, names = cluster.placement, cluster.node_names
    samples: list[float] = []
    by_shape: dict[str, list[float]] = {}
    errors = 0
    verdict = None
    for i in range(calls):
        pod = cluster.pods[i % len(cluster.pods)]
        placement._evaluations.clear()
        started = time.perf_counter()
        verdict = placement.filter(pod, names)
        if only_prioritize:
            started = time.perf_counter()
        if (prioritize or only_prioritize) and verdict.passed:
            placement.prioritize(pod, verdict.passed)
        elapsed = time.perf_counter() - started
        samples.append(elapsed)
        by_shape.setdefault(_shape(pod), []).append(elapsed)
        errors += bool(verdict.error)
    assert verdict is not None
    result = _verdict_result(
        "in-process prioritize"
        if only_prioritize
        else ("in-process filter+prioritize" if prioritize else "in-process filter"),
        cluster,
        warmup,
        samples,
        verdict,
        errors,
    )
    result.by_shape = {shape: _stats(s) | {"calls": len(s)} for shape, s in sorted(by_shape.items())}
    return result


def _verdict_result(
    mode: str, cluster: Cluster, warmup: int, samples: list[float], verdict: FilterVerdict, errors: int
) -> Result:
    """A Result from timed samples and the last in-process filter verdict."""
    return Result(
        mode=mode,
        nodes=cluster.nodes,
        calls=len(samples),
        warmup_calls=warmup,
        **_stats(samples),
        last_passed=len(verdict.passed),
        last_failed=len(verdict.failed),
        last_unresolvable=len(verdict.unresolvable),
        errors=errors,
    )


def run_after_update(cluster: Cluster, kind: str, calls: int, warmup: int) -> Result:
    """Filter calls that each follow one update of a `kind` object (same content, new resourceVersion).

    An update of a ResourceClaim (what every bind does) bumps the claims generation; one of a Node
    (status heartbeats, labels) bumps the devices generation. The next filter pays for whatever
    placement derives from that generation; this measures it.
    """
    placement, names = cluster.placement, cluster.node_names
    state = placement.state
    targets = [
        obj
        for obj in state.list(kind)
        if kind != "ResourceClaim" or (obj.get("status") or {}).get("allocation")
    ]
    samples: list[float] = []
    errors = 0
    verdict = None
    for i in range(calls):
        target = targets[(i * 7919) % len(targets)]
        meta = target["metadata"]
        state.upsert({**target, "metadata": {**meta, "resourceVersion": f"{meta['resourceVersion']}{i}"}})
        pod = cluster.pods[i % len(cluster.pods)]
        placement._evaluations.clear()
        started = time.perf_counter()
        verdict = placement.filter(pod, names)
        samples.append(time.perf_counter() - started)
        errors += bool(verdict.error)
    assert verdict is not None
    return _verdict_result(
        f"in-process filter after {kind} update", cluster, warmup, samples, verdict, errors
    )


async def run_http(cluster: Cluster, calls: int, warmup: int) -> list[Result]:
    """Filter, then filter+prioritize, over HTTP against the real app on an ephemeral port."""
    import aiohttp
    from aiohttp import web
    from prometheus_client import CollectorRegistry

    from extender.server import make_app

    settings = Settings()
    app = make_app(settings, placement=cluster.placement, binder=cluster.binder, registry=CollectorRegistry())
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    base = f"http://{host}:{port}"
    headers = {"Content-Type": "application/json"}
    placement, names = cluster.placement, cluster.node_names
    results: list[Result] = []
    try:
        connector = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def post(verb: str, body: bytes) -> Any:
                async with session.post(f"{base}/{verb}", data=body, headers=headers) as response:
                    payload = await response.read()
                    if response.status != 200:
                        raise RuntimeError(f"{verb}: HTTP {response.status}: {payload[:300]!r}")
                    return payload

            def body(pod: Obj, node_names: list[str]) -> bytes:
                return orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": node_names})

            for pod in [cluster.pods[i % len(cluster.pods)] for i in range(warmup)]:
                placement._evaluations.clear()
                result = orjson.loads(await post("filter", body(pod, names)))
                if result["NodeNames"]:
                    await post("prioritize", body(pod, result["NodeNames"]))
            for with_prioritize in (False, True):
                samples: list[float] = []
                errors = 0
                last: Obj = {}
                for i in range(calls):
                    pod = cluster.pods[i % len(cluster.pods)]
                    request = body(pod, names)
                    placement._evaluations.clear()
                    started = time.perf_counter()
                    raw = await post("filter", request)
                    elapsed = time.perf_counter() - started
                    last = orjson.loads(raw)
                    passed = last.get("NodeNames") or []
                    if with_prioritize and passed:
                        second = body(pod, passed)
                        started = time.perf_counter()
                        await post("prioritize", second)
                        elapsed += time.perf_counter() - started
                    samples.append(elapsed)
                    errors += bool(last.get("Error"))
                results.append(
                    Result(
                        mode="HTTP filter+prioritize" if with_prioritize else "HTTP filter",
                        nodes=cluster.nodes,
                        calls=calls,
                        warmup_calls=warmup,
                        **_stats(samples),
                        last_passed=len(last.get("NodeNames") or []),
                        last_failed=len(last.get("FailedNodes") or {}),
                        last_unresolvable=len(last.get("FailedAndUnresolvableNodes") or {}),
                        errors=errors,
                    )
                )
    finally:
        await runner.cleanup()
    return results


def profile_filter(cluster: Cluster, calls: int, top: int = 15) -> str:
    """cProfile of `calls` in-process filter calls (cache cleared per call), top functions by cumtime."""
    placement, names = cluster.placement, cluster.node_names
    profiler = cProfile.Profile()
    for i in range(calls):
        pod = cluster.pods[i % len(cluster.pods)]
        placement._evaluations.clear()
        profiler.enable()
        placement.filter(pod, names)
        profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).strip_dirs().sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def _table(results: list[Result]) -> str:
    w = max(30, *(len(r.mode) for r in results))
    header = (
        f"{'mode':<{w}} {'nodes':>6} {'calls':>5} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} "
        f"{'max ms':>8} {'calls/s':>8} {'passed':>6} {'failed':>6} {'unres.':>6} {'errors':>6}"
    )
    lines = [header, "-" * len(header)]
    for r in results:
        lines.append(
            f"{r.mode:<{w}} {r.nodes:>6} {r.calls:>5} {r.p50_ms:>8.2f} {r.p90_ms:>8.2f} {r.p99_ms:>8.2f} "
            f"{r.max_ms:>8.2f} {r.calls_per_s:>8.1f} {r.last_passed:>6} {r.last_failed:>6} "
            f"{r.last_unresolvable:>6} {r.errors:>6}"
        )
    return "\n".join(lines)


def _shape_table(result: Result) -> str:
    lines = [f"  per claim shape ({result.mode}, {result.nodes} nodes):"]
    for shape, s in result.by_shape.items():
        path = "exact search" if shape in SHAPES and SHAPES[shape].exact_search else "fast path"
        lines.append(
            f"    {shape:<13} {path:<12} calls {int(s['calls']):>4}  p50 {s['p50_ms']:>8.2f} ms  "
            f"p99 {s['p99_ms']:>8.2f} ms  max {s['max_ms']:>8.2f} ms"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m bench.filter_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[500, 5000], help="cluster sizes")
    parser.add_argument("--calls", type=int, default=200, help="measured calls per mode and size")
    parser.add_argument("--seed", type=int, default=1, help="generator seed")
    parser.add_argument("--pods", type=int, default=200, help="pending pods to generate per cluster")
    parser.add_argument("--warmup", type=int, default=5, help="extra warm-up calls after one per shape")
    parser.add_argument("--http", action="store_true", help="also measure over HTTP (aiohttp app)")
    parser.add_argument(
        "--update-calls",
        type=int,
        default=0,
        help="also measure N filter calls that each follow a ResourceClaim / a Node update (default 0)",
    )
    parser.add_argument("--json", type=Path, help="write the results as JSON to this path")
    parser.add_argument("--cpu", type=int, help="pin the process to this one CPU (sched_setaffinity)")
    parser.add_argument(
        "--profile", action="store_true", help="print a cProfile (top 15 by cumulative time) of filter"
    )
    parser.add_argument(
        "--gc-freeze",
        action="store_true",
        help="experiment: gc.freeze() after start-up (the extender does not do this today)",
    )
    args = parser.parse_args(argv)
    if args.calls < 1 or args.pods < 1:
        parser.error("--calls and --pods must be >= 1")
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    given = list(sys.argv[1:] if argv is None else argv)
    command = shlex.join(["python", "-m", "bench.filter_bench", *given])
    info = machine()
    print(f"command: {command}")
    print(
        f"machine: {info['cpu']}, {info['cores']} cores ({info['usable_cores']} usable"
        f"{f', pinned to CPU {args.cpu}' if args.cpu is not None else ''}), "
        f"{info['implementation']} {info['python']}, numpy {info['numpy']}"
    )
    print(
        f"method: serial calls over all nodes, evaluation cache cleared before every filter; "
        f"not counted: 1 cold call per claim shape + {args.warmup} warm-up calls"
        + ("; gc.freeze() after start-up (experiment)" if args.gc_freeze else "")
    )
    report: dict[str, Any] = {
        "command": command,
        "machine": info,
        "pinned_cpu": args.cpu,
        "gc_freeze": args.gc_freeze,
        "clusters": [],
    }
    all_results: list[Result] = []
    for nodes in args.nodes:
        cluster = load_cluster(nodes, args.seed, args.pods)
        s = cluster.startup
        mix: dict[str, int] = {}
        for pod in cluster.pods:
            mix[_shape(pod)] = mix.get(_shape(pod), 0) + 1
        print(
            f"\n== {nodes} nodes: {s['device_rows']} device rows, "
            + ", ".join(f"{n} {k}" for k, n in cluster.objects.items())
        )
        print(
            f"start-up: generate {s['generate_s']:.2f} s, ClusterState {s['cluster_state_ms']:.0f} ms, "
            f"index build (build_services) {s['index_build_ms']:.0f} ms"
        )
        print("pending pod shapes: " + ", ".join(f"{k}={n}" for k, n in sorted(mix.items())))
        gc.collect()
        cold = warm_up(cluster, args.warmup)
        print(
            "cold first call per shape (CEL masks, not counted): "
            + ", ".join(f"{k} {v:.0f} ms" for k, v in cold.items())
        )
        warmup = len(cold) + args.warmup
        if args.gc_freeze:
            gc.collect()
            gc.freeze()  # move the loaded cluster out of the collector's reach (what-if experiment)
            print(f"gc.freeze(): {gc.get_freeze_count()} objects frozen")
        results = [
            run_in_process(cluster, args.calls, warmup, prioritize=False),
            run_in_process(cluster, args.calls, warmup, prioritize=True),
            run_in_process(cluster, args.calls, warmup, prioritize=False, only_prioritize=True),
        ]
        if args.http:
            results.extend(asyncio.run(run_http(cluster, args.calls, args.warmup)))
        print(_table(results))
        print(_shape_table(results[0]))
        profile = profile_filter(cluster, args.calls) if args.profile else ""
        if args.update_calls:  # last: these change the state (same content, new generations)
            updates = [
                run_after_update(cluster, k, args.update_calls, warmup) for k in ("ResourceClaim", "Node")
            ]
            print(_table(updates))
            results.extend(updates)
        if profile:
            print(f"\ncProfile of {args.calls} in-process filter calls, {nodes} nodes:\n{profile}")
        all_results.extend(results)
        report["clusters"].append(
            {
                "nodes": nodes,
                "startup": s,
                "objects": cluster.objects,
                "shapes": mix,
                "cold_first_call_ms": cold,
                "results": [asdict(r) for r in results],
            }
        )
        del cluster
        if args.gc_freeze:
            gc.unfreeze()
        gc.collect()
    if len(args.nodes) > 1:
        print("\n== all sizes")
        print(_table(all_results))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
