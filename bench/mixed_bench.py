"""Mixed-fleet benchmark: the real `serve` from a state file to ready, per-shape latency over HTTP,
a steady filter -> prioritize -> bind cycle, and filter right after a ResourceSlice change.

Scope: one run, one CPU (the process pins itself with `sched_setaffinity` before it starts the
server, which inherits the pin, so server and client share one core as in `bench.filter_bench
--http`), at each of `--nodes`, on the mixed fleet of `loadtests.fleet` (H100, A100 with MIG
partitions on shared counters, L40S, MI300X, TPU, CPU-only; 30 % held) and its claim shapes,
one per placement tier. Per node count:

1. **start-up**: the generated objects are written as one JSON `List` (`--state-format yaml` for
   multi-document YAML), then `python -m extender serve --state FILE` is started and `/readyz`
   polled every 50 ms; reported: launch to the first 200, the index build time the server logs
   ("device index generation ... built in X ms") and the server's RSS once ready and the kernels'
   background warm-up has finished (the server logs it; nothing is measured before: until then
   their plain-Python twins answer, and a cold numba cache, e.g. a checkout at a new path, compiles).
2. **per shape over HTTP**: for each claim shape, one cold filter and its prioritize (reported
   apart as "cold": the shape's masks, kernel plan and per-node MIG choices are built by them), then
   `--calls` `/filter` calls, each with every node (`NodeNames`, as kube-scheduler sends them with
   `percentageOfNodesToScore: 100`) and each followed by `/prioritize` with the nodes that passed.
   Every call sends a pending pod under a fresh UID and name (`loadtests.scenarios.PodEntry`), so
   the server's per-pod evaluation cache never answers: each filter does a new pod's full work.
   Time is `perf_counter` around the POST and reading the answer; bodies are encoded before.
   The client is one keep-alive HTTP/1.1 socket (`Client`), as lean as kube-scheduler's Go
   client: its own cost counts in the cycle's pods/s.
3. **steady cycle**: `--cycles` pods in turn, filter -> prioritize -> `/bind` to the best-scored
   node (ties: first in node order), each filter sent right after the previous bind returned.
   Reported: pods/s (cycles / wall time, also counting cycles whose pod fit nowhere) and the
   latency of each step; filter here pays for the claim change the previous bind made.
4. **in-process** (after the server stopped): `ClusterState.from_objects` and
   `extender.wiring.build_services` in this process, timed, with the RSS delta of the build
   (the device index and the kernel warm-up, after `gc.collect` and `malloc_trim`); then
   `--slice-calls` pairs of filter calls with the evaluation cache cleared: one with nothing
   changed, then one right after a ResourceSlice update (the same slice content under a new
   resourceVersion, which moves the devices generation: the index is brought up to date first).

Not measured: YAML parsing of real dumps (unless `--state-format yaml`), kube mode and its watch,
concurrent requests. The numbers are for one machine at one moment; the machine, the command
and each table are printed (`--markdown FILE` writes them as a docs section, `--plot FILE` a PNG,
`--json FILE` everything). `--quick` is a bounded smoke run (50 nodes, a few calls) for tests.

CLI: `python -m bench.mixed_bench --nodes 1000 5000 10000 --cpu 1 --markdown /tmp/mixed.md`.
`--kernel-threads N` sets the server's `kernel_threads` (and the in-process part's); with
`--cpu 0 1` both cores are usable, for the comparison of 1 and 2 kernel threads in the docs.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import http.client
import json
import os
import random
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any

import orjson

from bench.filter_bench import release_memory, rss_mib
from extender.objects import Obj
from extender.pods import parse_pod
from loadtests.fleet import MIXED_SHAPES, NODE_TYPE_LABEL, fleet_counts, generate_mixed_cluster
from loadtests.generate import SHAPE_LABEL, write, write_json_state
from loadtests.scenarios import Bodies, PodEntry, machine_facts

REPO = Path(__file__).resolve().parents[1]
MiB = 1024 * 1024
#: What the server logs after building its device index (extender.core.view.ClusterView.index).
_INDEX_LOG = "device index generation"
#: What it logs when the kernels warm up in the background (extender.wiring.warm_kernels), and
#: when that is done (kernels.warming): until then their plain-Python twins answer, far slower.
_WARMING_LOG = "compiling the topology kernels in the background"
_WARMED_LOGS = ("numba kernels compiled in", "compiling the numba kernels failed")
QUICK = {"nodes": [50], "calls": 2, "cycles": 3, "slice_calls": 2, "pods": 40}


# ----------------------------------------------------------------- statistics


def percentiles(samples: Sequence[float]) -> dict[str, float]:
    """p50/p99/max/mean in ms of `samples` (seconds) and their count; NaN when empty."""
    ordered = sorted(s * 1000 for s in samples)
    if not ordered:
        nan = float("nan")
        return {"calls": 0, "p50_ms": nan, "p99_ms": nan, "max_ms": nan, "mean_ms": nan}

    def rank(q: float) -> float:  # linear interpolation, as numpy.percentile's default
        position = (len(ordered) - 1) * q
        low = int(position)
        high = min(low + 1, len(ordered) - 1)
        return ordered[low] + (ordered[high] - ordered[low]) * (position - low)

    return {
        "calls": len(ordered),
        "p50_ms": rank(0.50),
        "p99_ms": rank(0.99),
        "max_ms": ordered[-1],
        "mean_ms": sum(ordered) / len(ordered),
    }


# ----------------------------------------------------------------- the server


@dataclass(slots=True)
class Server:
    """A running `python -m extender serve` and what its log said."""

    process: subprocess.Popen[bytes]
    port: int
    lines: list[str] = field(default_factory=list)

    def index_build_ms(self) -> float | None:
        """The build time of the first device index, from the server's log line."""
        for line in self.lines:
            if _INDEX_LOG in line and "built in" in line:
                with contextlib.suppress(ValueError, IndexError):
                    return float(line.split("built in", 1)[1].split("ms", 1)[0])
        return None

    def kernels_settled(self) -> bool:
        """True unless the kernels' background warm-up was started and has not finished."""
        lines = list(self.lines)
        if not any(_WARMING_LOG in line for line in lines):
            return True
        return any(done in line for line in lines for done in _WARMED_LOGS)

    def rss_mib(self) -> float:
        """The server process's resident set size (VmRSS), MiB."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _drain(server: Server) -> None:
    assert server.process.stderr is not None
    for raw in server.process.stderr:
        server.lines.append(raw.decode("utf-8", "replace").rstrip())


@contextlib.contextmanager
def serving(
    state_file: Path, *, ready_timeout: float, extra: Sequence[str] = ()
) -> Iterator[tuple[Server, float]]:
    """Start `serve --state state_file` (and `extra` flags); yield it and the seconds from launch
    to /readyz 200."""
    port = _free_port()
    command = [sys.executable, "-m", "extender", "serve", "--listen", f"127.0.0.1:{port}"]
    command += ["--state", str(state_file), "--log-level", "info", *extra]
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    server = Server(process, port)
    threading.Thread(target=_drain, args=(server,), daemon=True).start()
    try:
        ready = _wait_ready(server, started, ready_timeout)
        _wait_kernels(server, started, ready_timeout)
        yield server, ready
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_ready(server: Server, started: float, timeout: float) -> float:
    while True:
        if server.process.poll() is not None:
            tail = "\n".join(server.lines[-20:])
            raise RuntimeError(f"serve exited with {server.process.returncode} before ready:\n{tail}")
        if time.perf_counter() - started > timeout:
            raise RuntimeError(f"serve not ready after {timeout:.0f} s")
        with contextlib.suppress(OSError, http.client.HTTPException):
            connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=2)
            try:
                connection.request("GET", "/readyz")
                if connection.getresponse().status == 200:
                    return time.perf_counter() - started
            finally:
                connection.close()
        time.sleep(0.05)


def _wait_kernels(server: Server, started: float, timeout: float) -> None:
    """Wait for the kernels' background warm-up (a cold numba cache compiles for a minute, and a
    checkout at a new path starts cold): measuring before would time their Python twins."""
    while not server.kernels_settled():
        if server.process.poll() is not None:
            raise RuntimeError(f"serve exited with {server.process.returncode} during the kernel warm-up")
        if time.perf_counter() - started > timeout:
            raise RuntimeError(f"the kernels were not warm after {timeout:.0f} s")
        time.sleep(0.05)


class Client:
    """One keep-alive HTTP/1.1 connection, serial calls, as kube-scheduler's extender client.

    A plain socket: each request goes out in one `sendall` (head and pre-encoded body) and the
    answer is read by its Content-Length. `http.client` parsed every answer's headers with the
    `email` package and cost the client side of the cycle about as much as the server's HTTP
    work; the Go client kube-scheduler uses does not. What is timed is the same: from the
    request leaving to the last byte of the answer; the answer is then decoded (untimed, as
    before, but counted in the cycle's wall time).
    """

    def __init__(self, port: int, timeout: float) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._pending = b""  # bytes read past the previous answer (none with serial calls)

    def post(self, verb: str, body: bytes) -> tuple[Any, float]:
        """POST `body` to `/verb`; the decoded answer and the seconds it took."""
        head = (
            b"POST /%s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % (verb.encode(), len(body))
        )
        started = time.perf_counter()
        self.sock.sendall(head + body)
        status, raw = self._answer()
        elapsed = time.perf_counter() - started
        if status != 200:
            raise RuntimeError(f"/{verb} answered HTTP {status}: {raw[:300]!r}")
        return orjson.loads(raw), elapsed

    def _answer(self) -> tuple[int, bytes]:
        data = self._pending
        while (end := data.find(b"\r\n\r\n")) < 0:
            data += self._recv()
        head, rest = data[:end].decode("latin-1"), data[end + 4 :]
        lines = head.split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = dict(line.split(":", 1) for line in lines[1:])
        fields = {name.strip().lower(): value.strip() for name, value in headers.items()}
        if "content-length" not in fields:
            raise RuntimeError(f"an answer without Content-Length: {head!r}")
        length = int(fields["content-length"])
        chunks = [rest]
        have = len(rest)
        while have < length:
            chunk = self._recv()
            chunks.append(chunk)
            have += len(chunk)
        data = b"".join(chunks)
        self._pending = data[length:]
        return status, data[:length]

    def _recv(self) -> bytes:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        return chunk

    def close(self) -> None:
        self.sock.close()


def best_host(scores: list[Obj]) -> str:
    """The highest-scored host of a prioritize answer; ties go to the first in the list (the
    scheduler picks at random)."""
    top = max(map(itemgetter("Score"), scores))
    host: str = next(entry["Host"] for entry in scores if entry["Score"] == top)
    return host


# ----------------------------------------------------------------- one cluster size


@dataclass(slots=True)
class Workload:
    """The pending pods of one run: per shape the pods to send, and the pods to bind."""

    entries: list[PodEntry]
    rng: random.Random
    seq: int = 0

    def fresh(self, entry: PodEntry) -> Obj:
        self.seq += 1
        return entry.instance("fresh", self.rng, self.seq)

    def by_shape(self) -> dict[str, list[PodEntry]]:
        shapes: dict[str, list[PodEntry]] = {}
        for entry in self.entries:
            shapes.setdefault(entry.shape, []).append(entry)
        return {name: shapes[name] for name in MIXED_SHAPES if name in shapes}


def _shape(pod: Obj) -> str:
    return str(((pod.get("metadata") or {}).get("labels") or {}).get(SHAPE_LABEL, "?"))


def measure_shapes(client: Client, bodies: Bodies, work: Workload, calls: int) -> dict[str, Obj]:
    """Per shape: the cold first filter and prioritize, then `calls` filter + prioritize pairs (see
    module docstring)."""
    results: dict[str, Obj] = {}
    for shape, entries in work.by_shape().items():
        first = work.fresh(entries[0])
        answer, cold = client.post("filter", bodies.filter(first))
        cold_prioritize = None
        if answer.get("NodeNames"):
            cold_prioritize = client.post("prioritize", bodies.prioritize(first, answer["NodeNames"]))[1]
        filters: list[float] = []
        prioritizes: list[float] = []
        passed = errors = 0
        for i in range(calls):
            pod = work.fresh(entries[i % len(entries)])
            answer, elapsed = client.post("filter", bodies.filter(pod))
            filters.append(elapsed)
            errors += bool(answer.get("Error"))
            names = answer.get("NodeNames") or []
            passed = len(names)
            if names:
                prioritizes.append(client.post("prioritize", bodies.prioritize(pod, names))[1])
        results[shape] = {
            "tier": MIXED_SHAPES[shape].tier,
            "cold_filter_ms": cold * 1000,
            "cold_prioritize_ms": None if cold_prioritize is None else cold_prioritize * 1000,
            "filter": percentiles(filters),
            "prioritize": percentiles(prioritizes),
            "last_passed": passed,
            "errors": errors,
        }
    return results


def measure_cycle(client: Client, bodies: Bodies, work: Workload, cycles: int) -> Obj:
    """`cycles` serial filter -> prioritize -> bind cycles over distinct pods (see module docstring)."""
    filters: list[float] = []
    prioritizes: list[float] = []
    binds: list[float] = []
    bound = unschedulable = errors = 0
    started = time.perf_counter()
    for entry in work.entries[:cycles]:
        pod = work.fresh(entry)
        answer, elapsed = client.post("filter", bodies.filter(pod))
        filters.append(elapsed)
        names = answer.get("NodeNames") or []
        if not names:
            unschedulable += 1
            continue
        scores, elapsed = client.post("prioritize", bodies.prioritize(pod, names))
        prioritizes.append(elapsed)
        result, elapsed = client.post("bind", bodies.bind(pod, best_host(scores)))
        binds.append(elapsed)
        if result.get("Error"):
            errors += 1
        else:
            bound += 1
    wall = time.perf_counter() - started
    done = min(cycles, len(work.entries))
    return {
        "cycles": done,
        "bound": bound,
        "unschedulable": unschedulable,
        "bind_errors": errors,
        "wall_s": wall,
        "pods_per_s": done / wall if wall else float("nan"),
        "filter": percentiles(filters),
        "prioritize": percentiles(prioritizes),
        "bind": percentiles(binds),
    }


def measure_in_process(objects: list[Obj], work: Workload, slice_calls: int) -> Obj:
    """Index build time and memory in this process, then filter unchanged vs after a slice change."""
    from extender import wiring
    from extender.cluster.state import ClusterState
    from extender.settings import Settings

    settings = Settings(kernel_threads=int(os.environ.get("DRA_EXTENDER_KERNEL_THREADS", "1")))
    release_memory()
    state = ClusterState.from_objects(objects)
    wiring.prepare_kernels(settings)
    release_memory()
    rss_before = rss_mib()
    started = time.perf_counter()
    placement, _ = wiring.build_services(settings, state)
    build = time.perf_counter() - started
    rss_after = rss_mib()  # build_services has just collected
    index = placement.index()
    names = list(index.node_names)
    slices = state.list("ResourceSlice")
    firsts = [entries[0] for entries in work.by_shape().values()]
    for entry in firsts:  # not counted: the first call per shape builds its CEL masks
        placement.filter(parse_pod(work.fresh(entry)), names)
    unchanged: list[float] = []
    changed: list[float] = []
    changes: list[Obj] = []  # which slice each change touched, for the slow ones
    by_shape: dict[str, dict[str, list[float]]] = {}
    for i in range(slice_calls):
        entry = firsts[i % len(firsts)]
        pod = work.fresh(entry)
        # Not counted: the previous slice change made a new index generation, whose selector
        # masks for this shape are built by its first filter; "nothing changed" is the call after.
        placement.evaluations.clear()
        placement.filter(parse_pod(pod), names)
        placement.evaluations.clear()  # as bench.filter_bench: every call does a new pod's work
        began = time.perf_counter()
        placement.filter(parse_pod(pod), names)
        unchanged.append(time.perf_counter() - began)
        target = slices[(i * 7919) % len(slices)]
        meta = target["metadata"]
        state.upsert({**target, "metadata": {**meta, "resourceVersion": f"{meta['resourceVersion']}{i}"}})
        placement.evaluations.clear()
        began = time.perf_counter()
        placement.filter(parse_pod(pod), names)
        changed.append(time.perf_counter() - began)
        changes.append(
            {
                "node_type": target["spec"]["nodeName"].rsplit("-", 1)[0],  # loadtests.fleet.mixed_node_name
                "driver": target["spec"]["driver"],
                "counters_slice": bool(target["spec"].get("sharedCounters")),
                "shape": entry.shape,
                "ms": changed[-1] * 1000,
            }
        )
        shape = by_shape.setdefault(entry.shape, {"unchanged": [], "after_slice_change": []})
        shape["unchanged"].append(unchanged[-1])
        shape["after_slice_change"].append(changed[-1])
    result = {
        "index_build_ms": build * 1000,
        "index_rss_mib": rss_after - rss_before,
        "device_rows": index.num_rows,
        "filter_unchanged": percentiles(unchanged),
        "filter_after_slice_change": percentiles(changed),
        "slice_changes": changes,
        "by_shape": {
            shape: {k: percentiles(v) for k, v in samples.items()} for shape, samples in by_shape.items()
        },
    }
    del placement, state, index
    release_memory()
    return result


def run_size(nodes: int, args: argparse.Namespace, scratch: Path) -> Obj:
    """Everything measured at one node count (see the module docstring)."""
    pods = max(args.pods, args.cycles)
    began = time.perf_counter()
    objects, pending = generate_mixed_cluster(nodes=nodes, seed=args.seed, pods=pods)
    generated = time.perf_counter() - began
    kinds: dict[str, int] = {}
    for obj in objects:
        kinds[obj["kind"]] = kinds.get(obj["kind"], 0) + 1
    node_objects = [
        {k: v for k, v in o.items() if k not in ("kind", "apiVersion")}
        for o in objects
        if o["kind"] == "Node"
    ]
    devices = sum(len(o["spec"].get("devices") or ()) for o in objects if o["kind"] == "ResourceSlice")
    if args.state_format == "json":
        state_file = write_json_state(objects, scratch / f"mixed-{nodes}" / "cluster.json")
    else:
        state_file = write(objects, [], scratch / f"mixed-{nodes}")[0]
    size_mib = state_file.stat().st_size / MiB
    work = Workload(
        [PodEntry(pod, _shape(pod)) for pod in pending], random.Random(f"mixed-bench-{args.seed}")
    )
    # The bind cycle consumes pods (their claims get allocated): latency calls use the others.
    bind_work = Workload(work.entries[: args.cycles], work.rng)
    shape_work = Workload(work.entries[args.cycles :] or work.entries, work.rng)
    bodies = Bodies(node_objects, node_cache_capable=True)
    with serving(state_file, ready_timeout=args.ready_timeout) as (server, ready):
        startup = {
            "ready_s": ready,
            "server_index_build_ms": server.index_build_ms(),
            "server_rss_ready_mib": server.rss_mib(),
        }
        client = Client(server.port, timeout=args.http_timeout)
        try:
            shapes = measure_shapes(client, bodies, shape_work, args.calls)
            cycle = measure_cycle(client, bodies, bind_work, args.cycles)
        finally:
            client.close()
        startup["server_rss_end_mib"] = server.rss_mib()
    state_file.unlink()
    in_process = measure_in_process(objects, shape_work, args.slice_calls)
    return {
        "nodes": nodes,
        "fleet": fleet_counts(nodes),
        "objects": kinds,
        "devices": devices,
        "generate_s": generated,
        "state_file": {"format": args.state_format, "mib": size_mib},
        "startup": startup,
        "shapes": shapes,
        "cycle": cycle,
        "in_process": in_process,
    }


# ----------------------------------------------------------------- report


def _ms(value: float | None) -> str:
    if value is None or value != value:  # NaN
        return "–"
    return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


def tables(report: Obj) -> str:
    """The report as markdown tables (also what the console shows)."""
    sizes = report["sizes"]
    head = "| | " + " | ".join(f"{s['nodes']:,} nodes" for s in sizes) + " |"
    rule = "|---|" + "---:|" * len(sizes)

    def row(label: str, values: list[str]) -> str:
        return f"| {label} | " + " | ".join(values) + " |"

    out = ["Start-up and memory:", "", head, rule]
    out.append(row("device rows (devices in slices)", [f"{s['devices']:,}" for s in sizes]))
    out.append(
        row(
            "state file (MiB, format)",
            [f"{s['state_file']['mib']:.0f} {s['state_file']['format']}" for s in sizes],
        )
    )
    out.append(row("`serve` launch to `/readyz` 200 (s)", [f"{s['startup']['ready_s']:.1f}" for s in sizes]))
    out.append(
        row("index build, server log (ms)", [_ms(s["startup"]["server_index_build_ms"]) for s in sizes])
    )
    out.append(
        row(
            "`build_services` in-process: index build, gc.freeze (ms)",
            [_ms(s["in_process"]["index_build_ms"]) for s in sizes],
        )
    )
    out.append(
        row("index RSS delta, in-process (MiB)", [f"{s['in_process']['index_rss_mib']:.0f}" for s in sizes])
    )
    out.append(
        row(
            "server RSS ready / at end (MiB)",
            [
                f"{s['startup']['server_rss_ready_mib']:.0f} / {s['startup']['server_rss_end_mib']:.0f}"
                for s in sizes
            ],
        )
    )
    out += [
        "",
        "Per claim shape over HTTP, every node in each call, p50 / p99 ms (the first filter and"
        " prioritize of each shape apart, as cold):",
        "",
    ]
    out.append("| shape | tier | verb | " + " | ".join(f"{s['nodes']:,} nodes" for s in sizes) + " |")
    out.append("|---|---|---|" + "---:|" * len(sizes))
    for shape, spec in MIXED_SHAPES.items():
        for verb in ("filter", "prioritize", "cold filter", "cold prioritize"):
            values = []
            for s in sizes:
                result = s["shapes"].get(shape)
                if result is None:
                    values.append("–")
                elif verb == "cold filter":
                    values.append(_ms(result["cold_filter_ms"]))
                elif verb == "cold prioritize":
                    values.append(_ms(result.get("cold_prioritize_ms")))
                else:
                    stats = result[verb]
                    values.append(f"{_ms(stats['p50_ms'])} / {_ms(stats['p99_ms'])}")
            out.append(f"| {shape} | {spec.tier} | {verb} | " + " | ".join(values) + " |")
    out += [
        "",
        "Steady cycle over HTTP (filter -> prioritize -> bind, serial), p50 / p99 ms:",
        "",
        head,
        rule,
    ]
    out.append(row("pods/s", [f"{s['cycle']['pods_per_s']:.2f}" for s in sizes]))
    out.append(
        row(
            "cycles (bound / fit nowhere / bind errors)",
            [
                f"{c['cycles']} ({c['bound']} / {c['unschedulable']} / {c['bind_errors']})"
                for c in (s["cycle"] for s in sizes)
            ],
        )
    )
    for verb in ("filter", "prioritize", "bind"):
        out.append(
            row(
                f"{verb} in the cycle",
                [f"{_ms(s['cycle'][verb]['p50_ms'])} / {_ms(s['cycle'][verb]['p99_ms'])}" for s in sizes],
            )
        )
    out += ["", "Filter in-process, evaluation cache cleared, p50 / p99 ms:", "", head, rule]
    for key, label in (
        ("filter_unchanged", "nothing changed"),
        ("filter_after_slice_change", "right after a ResourceSlice change"),
    ):
        out.append(
            row(
                label,
                [
                    f"{_ms(s['in_process'][key]['p50_ms'])} / {_ms(s['in_process'][key]['p99_ms'])}"
                    for s in sizes
                ],
            )
        )
    for s in sizes:
        changes = s["in_process"]["slice_changes"]
        if changes:
            slowest = max(changes, key=lambda c: c["ms"])
            kind = "counters" if slowest["counters_slice"] else "devices"
            out.append(
                f"\nSlowest filter after a slice change at {s['nodes']:,} nodes: {_ms(slowest['ms'])} ms "
                f"({slowest['shape']} pod; {kind} slice of {slowest['driver']} "
                f"on a {slowest['node_type']} node)."
            )
    return "\n".join(out)


def header(report: Obj) -> str:
    """Machine, command and method lines."""
    info = report["machine"]
    pinned = f", pinned to CPU {report['pinned_cpu']}" if report["pinned_cpu"] is not None else ", not pinned"
    pinned += f"; kernel_threads {report.get('kernel_threads', 1)}"
    return "\n".join(
        [
            f"command: `{report['command']}`",
            f"machine: {info['cpu']}, {info['cores']} cores ({info['usable_cores']} usable{pinned}), "
            f"{info['implementation']} {info['python']}, numpy {info['numpy']}; {report['date']}",
            f"method: server and client on the same core(s); {report['calls']} calls per shape, "
            f"{report['cycles']} bind cycles, {report['slice_calls']} slice-change pairs; "
            f"seed {report['seed']}",
        ]
    )


def markdown(report: Obj) -> str:
    """The docs/benchmarks.md section for `report`."""
    return f"## Mixed fleet (`bench/mixed_bench.py`)\n\n{header(report)}\n\n{tables(report)}\n"


def plot(report: Obj, path: Path) -> None:
    """p50 and p99 filter latency per shape against the node count (log scale), as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = report["sizes"]
    nodes = [s["nodes"] for s in sizes]
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for axis, verb in zip(axes, ("filter", "prioritize"), strict=True):
        for shape in MIXED_SHAPES:
            p50 = [s["shapes"].get(shape, {}).get(verb, {}).get("p50_ms", float("nan")) for s in sizes]
            p99 = [s["shapes"].get(shape, {}).get(verb, {}).get("p99_ms", float("nan")) for s in sizes]
            (line,) = axis.plot(nodes, p50, marker="o", label=f"{shape} p50")
            axis.plot(nodes, p99, marker="x", linestyle="--", color=line.get_color(), label=f"{shape} p99")
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("nodes (every node in each call)")
        axis.set_title(f"/{verb} over HTTP, mixed fleet")
        axis.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("ms")
    axes[1].legend(fontsize=7, ncol=2)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


# ----------------------------------------------------------------- CLI


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.mixed_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000, 10000], help="node counts")
    parser.add_argument("--calls", type=int, default=20, help="measured filter+prioritize calls per shape")
    parser.add_argument("--cycles", type=int, default=30, help="filter -> prioritize -> bind cycles")
    parser.add_argument(
        "--slice-calls", type=int, default=10, help="in-process filter pairs (unchanged / after)"
    )
    parser.add_argument("--pods", type=int, default=200, help="pending pods to generate (at least --cycles)")
    parser.add_argument("--seed", type=int, default=1, help="generator seed")
    parser.add_argument(
        "--cpu",
        type=int,
        nargs="+",
        help="pin this process and the server to these CPUs (one: a single core)",
    )
    parser.add_argument(
        "--kernel-threads", type=int, default=1, help="the server's kernel_threads setting (default 1)"
    )
    parser.add_argument("--state-format", choices=("json", "yaml"), default="json", help="state file format")
    parser.add_argument("--ready-timeout", type=float, default=3600.0, help="seconds to wait for /readyz")
    parser.add_argument("--http-timeout", type=float, default=600.0, help="seconds per HTTP call")
    parser.add_argument("--quick", action="store_true", help="smoke run: 50 nodes, few calls (for tests)")
    parser.add_argument("--markdown", type=Path, help="write the docs/benchmarks.md section here")
    parser.add_argument("--plot", type=Path, help="write a PNG of per-shape latency here")
    parser.add_argument("--json", type=Path, help="write the whole report as JSON here")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (see the module docstring)."""
    parser = _parser()
    given = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(given)
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value)
    if min(args.nodes) < 1 or args.calls < 1 or args.cycles < 0 or args.slice_calls < 0:
        parser.error("--nodes and --calls must be >= 1, --cycles and --slice-calls >= 0")
    if args.cpu is not None:
        os.sched_setaffinity(0, set(args.cpu))  # the server inherits it
    os.environ["DRA_EXTENDER_KERNEL_THREADS"] = str(args.kernel_threads)  # the server reads it
    report: Obj = {
        "command": shlex.join(["python", "-m", "bench.mixed_bench", *given]),
        "machine": machine_facts(),
        "pinned_cpu": None if args.cpu is None else ",".join(map(str, args.cpu)),
        "kernel_threads": args.kernel_threads,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "seed": args.seed,
        "calls": args.calls,
        "cycles": args.cycles,
        "slice_calls": args.slice_calls,
        "node_type_label": NODE_TYPE_LABEL,
        "sizes": [],
    }
    print(header(report), flush=True)
    with tempfile.TemporaryDirectory(prefix="mixed-bench-") as scratch:
        for nodes in args.nodes:
            print(f"\n== {nodes} nodes: {fleet_counts(nodes)}", flush=True)
            size = run_size(nodes, args, Path(scratch))
            report["sizes"].append(size)
            print(
                f"ready after {size['startup']['ready_s']:.1f} s; {size['devices']} devices; "
                f"{size['cycle']['pods_per_s']:.2f} pods/s in the bind cycle",
                flush=True,
            )
            gc.collect()
    text = tables(report)
    print("\n" + text)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(markdown(report))
        print(f"\nwrote {args.markdown}")
    if args.plot:
        plot(report, args.plot)
        print(f"wrote {args.plot}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
