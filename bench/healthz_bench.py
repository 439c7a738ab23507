"""`/healthz` latency of `serve --kube` while it syncs and indexes a mixed fleet, and during a
burst of ResourceSlice changes.

Scope: the liveness probe of a real deployment. Kubernetes restarts a container whose probe
times out, so the event loop must answer it while the extender lists, watches and indexes
thousands of nodes, and while a burst of slice updates moves the device index (issue 21: under
100 ms). File mode is not measured: it listens only once its state is loaded and indexed.

How: the mixed fleet of `loadtests.fleet` (seed 1) is put on the in-process fake API server
(`tests/fakeapi`); `python -m extender serve --kube` is launched against it, pinned to one CPU
(`--server-cpu`) while this process (the fake API and the prober) runs on another
(`--bench-cpu`). A prober process GETs `/healthz` every `--interval` seconds (a new connection
each time, 5 s timeout) and records each latency with the phase it started in:

1. `start-up`: from the launch until a filter of a MIG pod over every node has been answered
   (the cache synced, `/readyz` 200, the index built by the warm-up or that filter);
2. `burst`: `--burst` slices of different nodes are updated on the fake API one after the other
   (a new label, so a new resourceVersion), then filters are sent until the index has settled
   (the `/metrics` `dra_extender_index_generation` after a filter equals the one half a second
   before, past where it started), so the probes cover the watch events and the index rebuilds.

Probes before the server listens (connection refused) are counted, not timed. Reported per
phase: probes, p50 / p99 / max latency in ms, and how long the phase took.

CLI: `python -m bench.healthz_bench --nodes 1000 5000 --server-cpu 1 --bench-cpu 0 --markdown
/tmp/healthz.md`; `--quick` is a smoke run for tests (50 nodes, a burst of 5).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import http.client
import multiprocessing
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.mixed_bench import percentiles
from extender.objects import Obj
from loadtests.fleet import generate_mixed_cluster
from loadtests.generate import SHAPE_LABEL
from loadtests.scenarios import machine_facts
from tests.fakeapi.server import FakeApiServer

REPO = Path(__file__).resolve().parent.parent
QUICK = {"nodes": [50], "burst": 5}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _call(
    port: int, method: str, path: str, body: bytes | None = None, timeout: float = 5.0
) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _probe(port: int, interval: float, stop: Any, results: Any) -> None:
    """The prober process: GET /healthz every `interval` s until `stop` is set; sends back
    (monotonic time, latency or None if refused, error text) per probe."""
    samples: list[tuple[float, float | None, str]] = []
    while not stop.is_set():
        began = time.monotonic()
        try:
            status, _ = _call(port, "GET", "/healthz")
        except ConnectionRefusedError:
            samples.append((began, None, ""))
        except OSError as exc:
            samples.append((began, None, str(exc) or type(exc).__name__))
        else:
            samples.append((began, time.monotonic() - began, "" if status == 200 else f"HTTP {status}"))
        stop.wait(interval)
    results.send(samples)


class Prober:
    """A separate process probing /healthz (in this process the fake API's thread would hold the
    GIL and delay the probes); phases are told apart by the time each probe started."""

    def __init__(self, port: int, interval: float) -> None:
        context = multiprocessing.get_context("fork")
        self._stop = context.Event()
        self._receive, send = context.Pipe(duplex=False)
        self._process = context.Process(target=_probe, args=(port, interval, self._stop, send), daemon=True)
        self.marks: list[tuple[float, str]] = []

    def start(self) -> None:
        self._process.start()

    def mark(self, phase: str) -> None:
        """Probes started from now on belong to `phase`."""
        self.marks.append((time.monotonic(), phase))

    def stop(self) -> tuple[dict[str, list[float]], int, list[str]]:
        """Samples per phase (seconds), refused probes, failed probes."""
        self._stop.set()
        samples: list[tuple[float, float | None, str]] = (
            self._receive.recv() if self._receive.poll(30) else []
        )
        self._process.join(10)
        by_phase: dict[str, list[float]] = {}
        refused, failed = 0, []
        for began, latency, error in samples:
            phase = "before"
            for at, name in self.marks:
                if began >= at:
                    phase = name
            if error:
                failed.append(f"{phase}: {error}")
            elif latency is None:
                refused += 1
            else:
                by_phase.setdefault(phase, []).append(latency)
        return by_phase, refused, failed


def _mig_filter(objects: list[Obj], pods: list[Obj]) -> bytes:
    names = [o["metadata"]["name"] for o in objects if o["kind"] == "Node"]
    pod = next(p for p in pods if (p["metadata"].get("labels") or {}).get(SHAPE_LABEL) == "mig-1g")
    return orjson.dumps({"Pod": pod, "NodeNames": names})


def _generation(port: int) -> int:
    _, body = _call(port, "GET", "/metrics", timeout=30)
    for line in body.decode().splitlines():
        if line.startswith("dra_extender_index_generation "):
            return int(float(line.split()[1]))
    return -1


def _until_answered(port: int, body: bytes, deadline: float) -> None:
    """Until a filter is answered without an error (before the first sync it answers "cluster
    state not ready")."""
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            status, answer = _call(port, "POST", "/filter", body, timeout=600)
            if status == 200 and not orjson.loads(answer).get("Error"):
                return
        time.sleep(0.2)
    raise TimeoutError("the extender did not answer a filter in time")


@contextlib.contextmanager
def _serving(
    api: FakeApiServer, scratch: Path, cpu: int | None
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    port = _free_port()
    argv = [sys.executable, "-m", "extender", "serve", "--kube", "--listen", f"127.0.0.1:{port}"]
    argv += ["--kubeconfig", str(api.write_kubeconfig(scratch / "kubeconfig")), "--log-level", "warning"]
    pin = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
    process = subprocess.Popen(
        argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=pin
    )
    try:
        yield port, process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run_size(nodes: int, args: argparse.Namespace, scratch: Path) -> Obj:
    """Both phases at one node count (see the module docstring)."""
    objects, pods = generate_mixed_cluster(nodes=nodes, seed=args.seed, pods=20)
    body = _mig_filter(objects, pods)
    slices = [o for o in objects if o["kind"] == "ResourceSlice" and o["spec"].get("nodeName")]
    by_node: dict[str, Obj] = {}
    for item in slices:
        by_node.setdefault(item["spec"]["nodeName"], item)
    changed = list(by_node.values())[: args.burst]
    with FakeApiServer() as api:
        api.put_objects(copy.deepcopy(objects))
        with _serving(api, scratch, args.server_cpu) as (port, process):
            prober = Prober(port, args.interval)
            launched = time.perf_counter()
            prober.mark("start-up")
            prober.start()
            try:
                _until_answered(port, body, time.monotonic() + args.timeout)
                started = time.perf_counter() - launched
                before = _generation(port)
                for _ in range(100):  # /metrics reports the index once the extender calls itself ready
                    if before >= 0:
                        break
                    time.sleep(0.1)
                    before = _generation(port)
                print(f"{nodes} nodes: answered after {started:.1f} s (generation {before})", file=sys.stderr)
                prober.mark("burst")
                burst_began = time.perf_counter()
                for i, item in enumerate(changed):
                    stored = api.get_object("ResourceSlice", item["metadata"]["name"]) or item
                    update = copy.deepcopy(stored)
                    update["metadata"].setdefault("labels", {})["bench/touch"] = str(i)
                    api.put_object(update)
                deadline = time.monotonic() + args.timeout
                # Settled: a filter (which brings the index up to date) leaves the index generation
                # where it was half a second before, past where it started. Not "before + burst":
                # a watch may deliver a burst as a relist, which moves the generation once.
                last = -2
                while time.monotonic() < deadline:
                    _until_answered(port, body, deadline)
                    now = _generation(port)
                    print(f"  generation {now} (from {before})", file=sys.stderr)
                    if now == last and now > before:
                        break
                    last = now
                    time.sleep(0.5)
                burst = time.perf_counter() - burst_began
            finally:
                phases, refused, failed = prober.stop()
            if process.poll() is not None:
                raise RuntimeError(f"the extender exited with code {process.returncode}")
    return {
        "nodes": nodes,
        "slices_changed": len(changed),
        "refused_probes": refused,
        "failed_probes": failed,
        "start_up_s": started,
        "burst_s": burst,
        "phases": {phase: percentiles(samples) for phase, samples in phases.items()},
    }


def _cpu(cpu: int | None) -> str:
    return "any" if cpu is None else str(cpu)


def markdown(report: Obj) -> str:
    info = report["machine"]
    lines = [
        "## `/healthz` during start-up and a slice burst (`bench/healthz_bench.py`)",
        "",
        f"command: `{report['command']}`",
        f"machine: {info['cpu']}, {info['cores']} cores; server on CPU {_cpu(report['server_cpu'])}, "
        f"fake API and prober on CPU {_cpu(report['bench_cpu'])}; {info['implementation']} "
        f"{info['python']}; {report['date']}",
        f"method: a /healthz probe every {report['interval'] * 1000:.0f} ms, new connection each",
        "",
        "| nodes | phase | seconds | probes | p50 / p99 / max ms |",
        "|---:|---|---:|---:|---:|",
    ]
    for size in report["sizes"]:
        for phase, seconds in (("start-up", size["start_up_s"]), ("burst", size["burst_s"])):
            stats = size["phases"].get(phase, {"calls": 0})
            timing = (
                f"{stats['p50_ms']:.1f} / {stats['p99_ms']:.1f} / {stats['max_ms']:.1f}"
                if stats["calls"]
                else "-"
            )
            label = phase if phase == "start-up" else f"burst of {size['slices_changed']} slice updates"
            lines.append(f"| {size['nodes']:,} | {label} | {seconds:.1f} | {stats['calls']} | {timing} |")
        if size["failed_probes"]:
            lines.append(f"| {size['nodes']:,} | failed probes | | {len(size['failed_probes'])} | |")
    return "\n".join(lines) + "\n"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.healthz_bench", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000], help="node counts")
    parser.add_argument("--burst", type=int, default=200, help="slices updated in the burst")
    parser.add_argument("--interval", type=float, default=0.02, help="seconds between probes")
    parser.add_argument("--seed", type=int, default=1, help="generator seed")
    parser.add_argument("--server-cpu", type=int, help="pin the extender to this CPU")
    parser.add_argument("--bench-cpu", type=int, help="pin this process (fake API, prober) to this CPU")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per phase at most")
    parser.add_argument("--quick", action="store_true", help="smoke run: 50 nodes, a burst of 5 (tests)")
    parser.add_argument("--markdown", type=Path, help="write the docs section here")
    parser.add_argument("--json", type=Path, help="write the whole report as JSON here")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (see the module docstring)."""
    given = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(given)
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value)
    if args.bench_cpu is not None:
        os.sched_setaffinity(0, {args.bench_cpu})
    report: dict[str, Any] = {
        "command": shlex.join(["python", "-m", "bench.healthz_bench", *given]),
        "machine": machine_facts(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "interval": args.interval,
        "server_cpu": args.server_cpu,
        "bench_cpu": args.bench_cpu,
        "sizes": [],
    }
    with tempfile.TemporaryDirectory(prefix="healthz-bench-") as scratch:
        for nodes in args.nodes:
            report["sizes"].append(run_size(nodes, args, Path(scratch)))
            print(markdown(report), flush=True)
    if args.markdown:
        args.markdown.write_text(markdown(report))
    if args.json:
        args.json.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
