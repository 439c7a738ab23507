"""Filter, prioritize and bind latency, index memory and start-up time on generated clusters.

Scope: measures the services behind `/filter`, `/prioritize` and `/bind` in file mode
(`extender.wiring.build_services`: `Placement` and `InMemoryBinder`) on clusters made by
`loadtests.generate`, in-process (the services called directly) and, with `--http`, over HTTP
through the real aiohttp app from `extender.server.make_app`, served on 127.0.0.1 inside this
process and driven by one aiohttp client connection. It does not measure cluster watches, the
kube-mode binder (API writes) or loading a state file (YAML); rebuilds after changes only with
`--update-calls N` (N filter calls, each right after one ResourceClaim or Node update, same
content; measured after the other filters and before the binds).

How:
- every call asks about all nodes of the cluster (`NodeNames` = every node, as kube-scheduler
  sends with `percentageOfNodesToScore: 100`), for the generated pending pods in turn;
- placement caches one evaluation per pod UID and state generation, so the benchmark clears
  that cache (`Placement.evaluations`) before every measured filter call: each call does the
  full work of a new pod. In the filter+prioritize pairs prioritize then re-uses the evaluation
  of its filter, as in a real scheduling cycle, and gets the nodes that filter passed;
- calls are serial (the scheduling cycle is serial); `time.perf_counter` around each call
  (over HTTP: around the POST and reading the response body; the request body is encoded
  before the clock starts, as the scheduler would do it on its side);
- warm-up calls (one per claim shape, which fills the CEL selector masks and per-device
  caches, then `--warmup` more) are not counted; the cold first call per shape is reported;
- bind is measured last, because every bind changes the state: per pod one full cycle, filter
  (cache cleared) then prioritize on the passed nodes, then bind to the best-scored node (ties:
  the first in node order). The filter of each cycle after the first is reported too ("filter
  after a bind"): it pays for the claim change the previous bind made. In-process binds and HTTP
  binds use different pending pods (`--bind-calls` each), so each pod is bound once;
- memory: resident set size from /proc/self/statm, read after `gc.collect()` and `malloc_trim`
  between the steps of start-up: the ClusterState (the generated objects it keeps plus its
  maps), the kernel warm-up, `build_services` (the device index) and the caches filled by the
  first calls (CEL masks). RSS deltas include allocator slack and only count pages touched; for
  the second and later `--nodes` of one run the allocator re-uses memory the previous cluster
  freed but kept mapped, so their deltas (the ClusterState's most) read low: run one size per
  process for memory figures.

CLI: `python -m bench.filter_bench --nodes 500 5000 --calls 200 --seed 1 [--http] [--json PATH]`
(`--cpu N` pins the process to one CPU, `--profile` prints a cProfile of the in-process filter
calls, `--freeze-after-warm-up` and `--no-gc-freeze` are what-if experiments; see `--help`).
`bench/plot_benchmarks.py` plots the `--json` output.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import ctypes
import ctypes.util
import gc
import io
import json
import os
import pstats
import shlex
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from extender import wiring
from extender.binder import InMemoryBinder
from extender.cluster.state import ClusterState
from extender.core.placement import Placement
from extender.objects import Obj
from extender.pods import parse_pod
from extender.settings import Settings
from extender.verdicts import FilterVerdict, HostScore
from loadtests.generate import SHAPE_LABEL, SHAPES, generate_cluster
from loadtests.scenarios import machine_facts

MiB = 1024 * 1024

#: What one bind does in file mode; printed with the results and stored in the JSON report.
BIND_NOTE = (
    "bind in file mode (InMemoryBinder): under one asyncio lock, re-evaluates the pod on the chosen "
    "node (re-using this cycle's cached evaluation), turns the device set prioritize scored into an "
    "allocation (upstream's allocator restricted to those devices), and upserts the claim "
    "(status.allocation, reservedFor, finalizer) and the pod (spec.nodeName) into the in-memory "
    "ClusterState; nothing is written to an API server or to the state file"
)


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
    skipped: int = 0
    by_shape: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass(slots=True)
class Cluster:
    """A generated cluster loaded into the extender's services."""

    nodes: int
    placement: Placement
    binder: InMemoryBinder
    node_names: list[str]
    pods: list[Obj]
    startup: dict[str, float]
    memory: dict[str, float]
    objects: dict[str, int]


def rss_mib() -> float:
    """Resident set size of this process in MiB (/proc/self/statm); NaN where that is missing."""
    try:
        resident = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return float("nan")
    return resident * os.sysconf("SC_PAGE_SIZE") / MiB


def release_memory() -> None:
    """Collect garbage (frozen objects included) and hand free heap pages back to the OS.

    `build_services` freezes the heap; unfreezing first lets the collector free the cycles of a
    cluster the benchmark dropped. `malloc_trim` (glibc) returns free pages, so the next RSS
    delta is not hidden by memory the previous cluster left behind.
    """
    gc.unfreeze()
    gc.collect()
    name = ctypes.util.find_library("c")
    if name:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(name).malloc_trim(0)


def _settled_rss() -> float:
    gc.collect()
    name = ctypes.util.find_library("c")
    if name:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(name).malloc_trim(0)
    return rss_mib()


def _index_array_mib(placement: Placement) -> float:
    """MiB held by the numpy arrays that are direct attributes of the device index."""
    arrays = [v for v in vars(placement.index()).values() if isinstance(v, np.ndarray)]
    return sum(a.nbytes for a in arrays) / MiB


def _stats(samples: list[float]) -> dict[str, float]:
    ms = np.asarray(samples) * 1000.0
    if not ms.size:
        nan = float("nan")
        return dict.fromkeys(("p50_ms", "p90_ms", "p99_ms", "max_ms", "mean_ms"), nan) | {"calls_per_s": nan}
    return {
        "p50_ms": float(np.percentile(ms, 50)),
        "p90_ms": float(np.percentile(ms, 90)),
        "p99_ms": float(np.percentile(ms, 99)),
        "max_ms": float(ms.max()),
        "mean_ms": float(ms.mean()),
        "calls_per_s": float(len(ms) / (ms.sum() / 1000.0)) if ms.sum() else float("inf"),
    }


def _by_shape(samples: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    return {shape: _stats(s) | {"calls": len(s)} for shape, s in sorted(samples.items())}


def _shape(pod: Obj) -> str:
    return str(((pod.get("metadata") or {}).get("labels") or {}).get(SHAPE_LABEL, "?"))


def load_cluster(nodes: int, seed: int, pods: int, *, freeze: bool = True) -> Cluster:
    """Generate a cluster, build the ClusterState and services; time and measure each step.

    The kernel warm-up that `build_services` does is run (and timed) once just before it, so the
    build's own warm-up finds the kernels ready; the first cluster of a process pays the compile
    or cache load, later ones about nothing. `freeze=False` undoes build_services' gc.freeze().
    """
    settings = Settings()
    release_memory()
    rss_start = rss_mib()
    started = time.perf_counter()
    objects, pending = generate_cluster(nodes=nodes, seed=seed, pods=pods)
    generated = time.perf_counter()
    state = ClusterState.from_objects(objects)
    loaded = time.perf_counter()
    counts: dict[str, int] = {}
    for obj in objects:
        counts[obj["kind"]] = counts.get(obj["kind"], 0) + 1
    del objects  # the state keeps the objects themselves
    rss_state = _settled_rss()
    warm_started = time.perf_counter()
    wiring.prepare_kernels(settings)
    warmed = time.perf_counter()
    rss_kernels = _settled_rss()
    build_started = time.perf_counter()
    placement, binder = wiring.build_services(settings, state)
    built = time.perf_counter()
    if not freeze:
        gc.unfreeze()
    rss_index = rss_mib()  # build_services has just collected; a trim would not change much
    return Cluster(
        nodes=nodes,
        placement=placement,
        binder=binder,
        node_names=list(placement.index().node_names),
        pods=pending,
        startup={
            "generate_s": generated - started,
            "cluster_state_ms": (loaded - generated) * 1000,
            "kernel_warm_up_ms": (warmed - warm_started) * 1000,
            "index_build_ms": (built - build_started) * 1000,
            "device_rows": placement.index().num_rows,
        },
        memory={
            "rss_start_mib": rss_start,
            "cluster_state_mib": rss_state - rss_start,
            "kernel_warm_up_mib": rss_kernels - rss_state,
            "index_mib": rss_index - rss_kernels,
            "index_numpy_mib": _index_array_mib(placement),
            "rss_after_build_mib": rss_index,
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
    """Run the uncounted warm-up calls in-process; returns the cold first-call ms per shape.

    Also records in `cluster.memory` the RSS the first calls added (CEL masks, per-device caches).
    """
    placement = cluster.placement
    cold: dict[str, float] = {}
    firsts, more = _warm_pods(cluster.pods, extra)
    for pod in firsts:
        placement.evaluations.clear()
        started = time.perf_counter()
        placement.filter(parse_pod(pod), cluster.node_names)
        cold[_shape(pod)] = (time.perf_counter() - started) * 1000
    for pod in more:
        placement.evaluations.clear()
        placement.prioritize(parse_pod(pod), placement.filter(parse_pod(pod), cluster.node_names).passed)
    placement.evaluations.clear()
    rss = _settled_rss()
    cluster.memory["first_calls_mib"] = rss - cluster.memory["rss_after_build_mib"]
    cluster.memory["rss_after_warm_up_mib"] = rss
    cluster.memory["gc_frozen_objects"] = gc.get_freeze_count()
    cluster.memory["gc_tracked_objects"] = len(gc.get_objects())  # what a full collection walks
    return cold


def _result(
    mode: str,
    cluster: Cluster,
    warmup: int,
    samples: list[float],
    *,
    last: tuple[int, int, int],
    errors: int,
    skipped: int = 0,
    by_shape: dict[str, list[float]] | None = None,
) -> Result:
    return Result(
        mode=mode,
        nodes=cluster.nodes,
        calls=len(samples),
        warmup_calls=warmup,
        **_stats(samples),
        last_passed=last[0],
        last_failed=last[1],
        last_unresolvable=last[2],
        errors=errors,
        skipped=skipped,
        by_shape=_by_shape(by_shape or {}),
    )


def _counts(verdict: FilterVerdict) -> tuple[int, int, int]:
    return len(verdict.passed), len(verdict.failed), len(verdict.unresolvable)


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
    verdict = FilterVerdict()
    for i in range(calls):
        pod = cluster.pods[i % len(cluster.pods)]
        placement.evaluations.clear()
        started = time.perf_counter()
        verdict = placement.filter(parse_pod(pod), names)
        if only_prioritize:
            started = time.perf_counter()
        if (prioritize or only_prioritize) and verdict.passed:
            placement.prioritize(parse_pod(pod), verdict.passed)
        elapsed = time.perf_counter() - started
        samples.append(elapsed)
        by_shape.setdefault(_shape(pod), []).append(elapsed)
        errors += bool(verdict.error)
    mode = "prioritize" if only_prioritize else ("filter+prioritize" if prioritize else "filter")
    return _result(
        f"in-process {mode}",
        cluster,
        warmup,
        samples,
        last=_counts(verdict),
        errors=errors,
        by_shape=by_shape,
    )


def best_node(scores: Sequence[HostScore] | list[Obj]) -> str:
    """The highest-scored node; ties go to the first in the list (the scheduler picks at random)."""
    pairs = [(s.host, s.score) if isinstance(s, HostScore) else (s["Host"], s["Score"]) for s in scores]
    top = max(score for _, score in pairs)
    return next(host for host, score in pairs if score == top)


def _pod_ids(pod: Obj) -> tuple[str, str, str]:
    meta = pod["metadata"]
    return meta.get("namespace") or "default", meta["name"], meta.get("uid") or ""


async def run_binds_in_process(cluster: Cluster, pods: list[Obj], warmup: int) -> list[Result]:
    """One full cycle per pod (filter, prioritize, `await binder.bind(...)`); see the module docstring.

    Returns the "filter after a bind" and the bind results. Changes the cluster state.
    """
    placement, binder, names = cluster.placement, cluster.binder, cluster.node_names
    filters: list[float] = []
    binds: list[float] = []
    by_shape: dict[str, list[float]] = {}
    errors = skipped = 0
    verdict = FilterVerdict()
    bound_before = False
    for pod in pods:
        placement.evaluations.clear()
        started = time.perf_counter()
        verdict = placement.filter(parse_pod(pod), names)
        if bound_before:
            filters.append(time.perf_counter() - started)
        if not verdict.passed:
            skipped += 1
            continue
        node = best_node(placement.prioritize(parse_pod(pod), verdict.passed))
        namespace, name, uid = _pod_ids(pod)
        started = time.perf_counter()
        error = (await binder.bind(namespace=namespace, name=name, uid=uid, node=node)).error
        elapsed = time.perf_counter() - started
        binds.append(elapsed)
        by_shape.setdefault(_shape(pod), []).append(elapsed)
        errors += bool(error)
        bound_before = True
    last = _counts(verdict)
    return [
        _result("in-process filter after a bind", cluster, warmup, filters, last=last, errors=0),
        _result(
            "in-process bind",
            cluster,
            warmup,
            binds,
            last=last,
            errors=errors,
            skipped=skipped,
            by_shape=by_shape,
        ),
    ]


Post = Callable[[str, bytes], Awaitable[bytes]]


@contextlib.asynccontextmanager
async def serving(cluster: Cluster) -> AsyncIterator[Post]:
    """Serve the real app on an ephemeral 127.0.0.1 port; yields `post(verb, body) -> response body`."""
    import aiohttp
    from aiohttp import web, web_app
    from prometheus_client import CollectorRegistry

    from extender.server import make_app

    app = make_app(
        Settings(), placement=cluster.placement, binder=cluster.binder, registry=CollectorRegistry()
    )
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        base = f"http://{host}:{port}"
        headers = {"Content-Type": "application/json"}
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as session:

            async def post(verb: str, body: bytes) -> bytes:
                async with session.post(f"{base}/{verb}", data=body, headers=headers) as response:
                    payload = await response.read()
                    if response.status != 200:
                        raise RuntimeError(f"{verb}: HTTP {response.status}: {payload[:300]!r}")
                    return payload

            yield post
    finally:
        await runner.cleanup()
        # aiohttp keeps every app it served in a module-level LRU of middleware chains
        # (aiohttp.web_app._cached_build_middleware); without this the cluster outlives the run.
        cached = getattr(web_app, "_cached_build_middleware", None)
        if cached is not None:
            cached.cache_clear()


def _args(pod: Obj, node_names: list[str]) -> bytes:
    return orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": node_names})


def _wire_counts(answer: Obj) -> tuple[int, int, int]:
    return (
        len(answer.get("NodeNames") or []),
        len(answer.get("FailedNodes") or {}),
        len(answer.get("FailedAndUnresolvableNodes") or {}),
    )


async def run_http(cluster: Cluster, calls: int, warmup: int) -> list[Result]:
    """Filter, filter+prioritize and prioritize alone over HTTP against the real app."""
    placement, names = cluster.placement, cluster.node_names
    results: list[Result] = []
    async with serving(cluster) as post:
        for pod in [cluster.pods[i % len(cluster.pods)] for i in range(warmup)]:
            placement.evaluations.clear()
            answer = orjson.loads(await post("filter", _args(pod, names)))
            if answer["NodeNames"]:
                await post("prioritize", _args(pod, answer["NodeNames"]))
        for with_prioritize in (False, True):
            samples: list[float] = []
            prioritize_samples: list[float] = []
            by_shape: dict[str, list[float]] = {}
            errors = 0
            answer = {}
            for i in range(calls):
                pod = cluster.pods[i % len(cluster.pods)]
                request = _args(pod, names)
                placement.evaluations.clear()
                started = time.perf_counter()
                raw = await post("filter", request)
                elapsed = time.perf_counter() - started
                answer = orjson.loads(raw)
                passed = answer.get("NodeNames") or []
                if with_prioritize and passed:
                    second = _args(pod, passed)
                    started = time.perf_counter()
                    await post("prioritize", second)
                    prioritized = time.perf_counter() - started
                    prioritize_samples.append(prioritized)
                    elapsed += prioritized
                samples.append(elapsed)
                by_shape.setdefault(_shape(pod), []).append(elapsed)
                errors += bool(answer.get("Error"))
            mode = "HTTP filter+prioritize" if with_prioritize else "HTTP filter"
            last = _wire_counts(answer)
            results.append(
                _result(mode, cluster, warmup, samples, last=last, errors=errors, by_shape=by_shape)
            )
            if with_prioritize:
                results.append(
                    _result("HTTP prioritize", cluster, warmup, prioritize_samples, last=last, errors=0)
                )
    return results


async def run_http_binds(cluster: Cluster, pods: list[Obj], warmup: int) -> list[Result]:
    """The bind cycle of `run_binds_in_process` over HTTP (filter, prioritize, `/bind`)."""
    names = cluster.node_names
    filters: list[float] = []
    binds: list[float] = []
    by_shape: dict[str, list[float]] = {}
    errors = skipped = 0
    answer: Obj = {}
    bound_before = False
    async with serving(cluster) as post:
        for pod in pods:
            request = _args(pod, names)
            cluster.placement.evaluations.clear()
            started = time.perf_counter()
            answer = orjson.loads(await post("filter", request))
            if bound_before:
                filters.append(time.perf_counter() - started)
            passed = answer.get("NodeNames") or []
            if not passed:
                skipped += 1
                continue
            node = best_node(orjson.loads(await post("prioritize", _args(pod, passed))))
            namespace, name, uid = _pod_ids(pod)
            body = orjson.dumps({"PodName": name, "PodNamespace": namespace, "PodUID": uid, "Node": node})
            started = time.perf_counter()
            result = orjson.loads(await post("bind", body))
            elapsed = time.perf_counter() - started
            binds.append(elapsed)
            by_shape.setdefault(_shape(pod), []).append(elapsed)
            errors += bool(result.get("Error"))
            bound_before = True
    last = _wire_counts(answer)
    return [
        _result("HTTP filter after a bind", cluster, warmup, filters, last=last, errors=0),
        _result(
            "HTTP bind", cluster, warmup, binds, last=last, errors=errors, skipped=skipped, by_shape=by_shape
        ),
    ]


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
    verdict = FilterVerdict()
    for i in range(calls):
        target = targets[(i * 7919) % len(targets)]
        meta = target["metadata"]
        state.upsert({**target, "metadata": {**meta, "resourceVersion": f"{meta['resourceVersion']}{i}"}})
        pod = cluster.pods[i % len(cluster.pods)]
        placement.evaluations.clear()
        started = time.perf_counter()
        verdict = placement.filter(parse_pod(pod), names)
        samples.append(time.perf_counter() - started)
        errors += bool(verdict.error)
    return _result(
        f"in-process filter after {kind} update",
        cluster,
        warmup,
        samples,
        last=_counts(verdict),
        errors=errors,
    )


def profile_filter(cluster: Cluster, calls: int, top: int = 15) -> str:
    """cProfile of `calls` in-process filter calls (cache cleared per call), top functions by cumtime."""
    placement, names = cluster.placement, cluster.node_names
    profiler = cProfile.Profile()
    for i in range(calls):
        pod = cluster.pods[i % len(cluster.pods)]
        placement.evaluations.clear()
        profiler.enable()
        placement.filter(parse_pod(pod), names)
        profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).strip_dirs().sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def _table(results: list[Result]) -> str:
    w = max(30, *(len(r.mode) for r in results))
    header = (
        f"{'mode':<{w}} {'nodes':>6} {'calls':>5} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} "
        f"{'max ms':>8} {'calls/s':>8} {'passed':>6} {'failed':>6} {'unres.':>6} {'errors':>6} {'skip':>4}"
    )
    lines = [header, "-" * len(header)]
    for r in results:
        lines.append(
            f"{r.mode:<{w}} {r.nodes:>6} {r.calls:>5} {r.p50_ms:>8.2f} {r.p90_ms:>8.2f} {r.p99_ms:>8.2f} "
            f"{r.max_ms:>8.2f} {r.calls_per_s:>8.1f} {r.last_passed:>6} {r.last_failed:>6} "
            f"{r.last_unresolvable:>6} {r.errors:>6} {r.skipped:>4}"
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.filter_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[500, 5000], help="cluster sizes")
    parser.add_argument("--calls", type=int, default=200, help="measured calls per mode and size")
    parser.add_argument(
        "--bind-calls",
        type=int,
        help="binds per mode and size (default: --calls; 0 skips bind); each binds its own pending pod",
    )
    parser.add_argument("--seed", type=int, default=1, help="generator seed")
    parser.add_argument(
        "--pods",
        type=int,
        default=200,
        help="pending pods to generate per cluster (raised to the number of pods the binds need)",
    )
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
        "--freeze-after-warm-up",
        action="store_true",
        help="experiment: gc.collect(); gc.freeze() again after the warm-up calls (the extender does not)",
    )
    parser.add_argument(
        "--no-gc-freeze",
        action="store_true",
        help="experiment: gc.unfreeze() right after build_services (which freezes the loaded heap)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (see the module docstring)."""
    parser = _parser()
    args = parser.parse_args(argv)
    bind_calls = args.calls if args.bind_calls is None else args.bind_calls
    if args.calls < 1 or args.pods < 1 or bind_calls < 0:
        parser.error("--calls and --pods must be >= 1, --bind-calls >= 0")
    pods = max(args.pods, bind_calls * (2 if args.http else 1))
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    given = list(sys.argv[1:] if argv is None else argv)
    command = shlex.join(["python", "-m", "bench.filter_bench", *given])
    info = machine_facts()
    print(f"command: {command}")
    print(
        f"machine: {info['cpu']}, {info['cores']} cores ({info['usable_cores']} usable"
        f"{f', pinned to CPU {args.cpu}' if args.cpu is not None else ''}), "
        f"{info['implementation']} {info['python']}, numpy {info['numpy']}"
    )
    print(
        f"method: serial calls over all nodes, evaluation cache cleared before every filter; "
        f"not counted: 1 cold call per claim shape + {args.warmup} warm-up calls; {pods} pending pods"
        + ("; gc.unfreeze() after build_services (experiment)" if args.no_gc_freeze else "")
        + ("; gc.freeze() again after the warm-up calls (experiment)" if args.freeze_after_warm_up else "")
    )
    if bind_calls:
        print(f"{BIND_NOTE}; measured last, {bind_calls} binds per mode, each of its own pending pod")
    report: dict[str, Any] = {
        "command": command,
        "machine": info,
        "pinned_cpu": args.cpu,
        "gc_freeze": not args.no_gc_freeze,
        "freeze_after_warm_up": args.freeze_after_warm_up,
        "memory_method": "RSS from /proc/self/statm after gc.collect() and malloc_trim(0), in MiB",
        "bind_note": BIND_NOTE,
        "clusters": [],
    }
    all_results: list[Result] = []
    for position, nodes in enumerate(args.nodes):
        cluster = load_cluster(nodes, args.seed, pods, freeze=not args.no_gc_freeze)
        s, m = cluster.startup, cluster.memory
        mix: dict[str, int] = {}
        for pod in cluster.pods:
            mix[_shape(pod)] = mix.get(_shape(pod), 0) + 1
        print(
            f"\n== {nodes} nodes: {s['device_rows']} device rows, "
            + ", ".join(f"{n} {k}" for k, n in cluster.objects.items())
        )
        print(
            f"start-up: generate {s['generate_s']:.2f} s (not part of a real start-up), "
            f"ClusterState {s['cluster_state_ms']:.0f} ms, kernel warm-up {s['kernel_warm_up_ms']:.0f} ms, "
            f"build_services (index build, gc.freeze) {s['index_build_ms']:.0f} ms"
        )
        cold = warm_up(cluster, args.warmup)
        print(
            f"memory (RSS deltas): ClusterState {m['cluster_state_mib']:.0f} MiB, kernel warm-up "
            f"{m['kernel_warm_up_mib']:.0f} MiB, index {m['index_mib']:.0f} MiB (numpy arrays "
            f"{m['index_numpy_mib']:.1f} MiB), first calls {m['first_calls_mib']:.0f} MiB; "
            f"RSS {m['rss_after_warm_up_mib']:.0f} MiB; GC: {m['gc_frozen_objects']} objects frozen, "
            f"{m['gc_tracked_objects']} tracked (a full collection walks these)"
            + ("" if position == 0 else "; not the first size: RSS deltas may read low (re-used memory)")
        )
        if args.freeze_after_warm_up:
            gc.collect()
            gc.freeze()  # the CEL masks and caches the first calls built (what-if experiment)
        print("pending pod shapes: " + ", ".join(f"{k}={n}" for k, n in sorted(mix.items())))
        print(
            "cold first call per shape (CEL masks, not counted): "
            + ", ".join(f"{k} {v:.0f} ms" for k, v in cold.items())
        )
        warmup = len(cold) + args.warmup
        results = [
            run_in_process(cluster, args.calls, warmup, prioritize=False),
            run_in_process(cluster, args.calls, warmup, prioritize=True),
            run_in_process(cluster, args.calls, warmup, prioritize=False, only_prioritize=True),
        ]
        if args.http:
            results.extend(asyncio.run(run_http(cluster, args.calls, args.warmup)))
        profile = profile_filter(cluster, args.calls) if args.profile else ""
        if args.update_calls:  # new generations, same content: allocations do not change
            results.extend(
                run_after_update(cluster, k, args.update_calls, warmup) for k in ("ResourceClaim", "Node")
            )
        if bind_calls:  # last: binds allocate devices
            results.extend(asyncio.run(run_binds_in_process(cluster, cluster.pods[:bind_calls], warmup)))
            if args.http:
                http_pods = cluster.pods[bind_calls : 2 * bind_calls]
                results.extend(asyncio.run(run_http_binds(cluster, http_pods, warmup)))
        print(_table(results))
        for r in results:
            if r.by_shape and (r.mode.endswith(" filter") or r.mode.endswith(" bind")):
                print(_shape_table(r))
        if profile:
            print(f"\ncProfile of {args.calls} in-process filter calls, {nodes} nodes:\n{profile}")
        all_results.extend(results)
        report["clusters"].append(
            {
                "nodes": nodes,
                "startup": s,
                "memory": m,
                "objects": cluster.objects,
                "shapes": mix,
                "cold_first_call_ms": cold,
                "results": [asdict(r) for r in results],
            }
        )
        del cluster
        release_memory()
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
