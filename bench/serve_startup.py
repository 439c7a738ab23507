"""Seconds from `dra-extender serve` to `/readyz` 200 on the embedded sample, and to compiled kernels.

Scope: the whole start of the service as a process (Python imports, settings, the sample cluster's
index, the kernels' warm-up) until `/readyz` answers 200, and until `/metrics` reports
`dra_extender_kernels_compiled 1`, with `NUMBA_CACHE_DIR` set to a fresh temporary directory: the
first start compiles every kernel and writes the cache, each later start in the same directory
should only load it. With `kernel_warmup: background` (the default) readiness does not wait for the
kernels (their plain-Python twins answer meanwhile, kernels/warming.py); with `--kernel-warmup
blocking` it does, as before. Also reports whether the later starts loaded the kernels (the cache
files written by the first start keep their modification times: nothing was compiled and written
again), and the latency of filter calls on the sample while the twins answer and after.

How: `time.perf_counter` from `Popen` to the first 200 of `/readyz` and to the gauge at 1 (each
polled every 20 ms); between the two, filter calls of the README's pod over the sample's nodes are
timed in turn, each followed by a timed `/readyz` (probes wait for the GIL too), and counted as
"while the twins answered" if the gauge still read 0 after them; then as many filter calls
again (at most 50) on the kernels.
Then SIGTERM and wait. CLI: `python -m bench.serve_startup [--warm-starts 2] [--kernel-warmup
blocking]`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from loadtests.scenarios import machine_facts

REPO = Path(__file__).resolve().parent.parent
READY_WITHIN_SECONDS = 300.0
COMPILED_GAUGE = "dra_extender_kernels_compiled"
#: The README's example pod (one claim of 4 H100 GPUs and an RDMA NIC) over the sample's nodes;
#: `{n}` makes each call's pod new (name and UID), so no call is answered from the evaluation cache.
FILTER_BODY = (
    '{{"Pod":{{"metadata":{{"name":"gpu-training-{n}","namespace":"ml-training",'
    '"uid":"261134f3-5a87-4a70-b229-{n:012d}"}},"spec":{{"schedulerName":"dra-extender-scheduler",'
    '"containers":[{{"name":"main","image":"busybox","resources":{{"claims":[{{"name":"devices"}}]}}}}],'
    '"resourceClaims":[{{"name":"devices","resourceClaimName":"gpu-training-devices-vbdcr"}}]}}}},'
    '"Nodes":null,"NodeNames":["h100-node-01","h100-node-02","l40s-node-01","a100-mig-node-01",'
    '"tpu-v5e-node-01","gaudi2-node-01","mi300x-node-01","inf2-node-01","fpga-node-01","cpu-node-01"]}}'
)
#: Filter calls timed after the kernels are compiled (at most).
AFTER_CALLS = 50
_calls = 0


@dataclass(slots=True)
class Start:
    """One start: seconds to ready and to compiled kernels, and filter latencies before/after."""

    ready_s: float
    compiled_s: float
    while_warming_ms: list[float] = field(default_factory=list)
    after_ms: list[float] = field(default_factory=list)
    readyz_warming_ms: list[float] = field(default_factory=list)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return str(response.read().decode()) if response.status == 200 else None
    except (urllib.error.URLError, OSError):
        return None


def _compiled(base: str) -> bool:
    text = _get(f"{base}/metrics") or ""
    return any(line.split() == [COMPILED_GAUGE, "1.0"] for line in text.splitlines())


def _filter_ms(base: str) -> float:
    """One filter call of a new pod; its milliseconds (raises unless the README's two nodes pass)."""
    global _calls
    _calls += 1
    body = FILTER_BODY.format(n=_calls).encode()
    request = urllib.request.Request(
        f"{base}/filter", data=body, headers={"Content-Type": "application/json"}
    )
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=60) as response:
        answer = json.loads(response.read())
    elapsed = (time.perf_counter() - started) * 1000
    if answer.get("Error") or len(answer.get("NodeNames") or ()) != 2:
        raise RuntimeError(f"unexpected filter answer: {answer}")
    return elapsed


def start_once(cache: Path, *, kernel_warmup: str, probe: bool = True) -> Start:
    """Start `serve` (embedded sample, this cache directory); time ready, compiled and filter calls."""
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    argv = [
        sys.executable,
        "-m",
        "extender",
        "serve",
        "--listen",
        f"127.0.0.1:{port}",
        "--log-level",
        "warning",
    ]
    env = os.environ | {"NUMBA_CACHE_DIR": str(cache), "DRA_EXTENDER_KERNEL_WARMUP": kernel_warmup}
    started = time.perf_counter()
    process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def waited(what: str) -> None:
        if process.poll() is not None:
            raise RuntimeError(f"serve exited with {process.returncode} before {what}")
        if time.perf_counter() - started > READY_WITHIN_SECONDS:
            raise RuntimeError(f"serve: not {what} within {READY_WITHIN_SECONDS:.0f} s")

    try:
        while _get(f"{base}/readyz") is None:
            waited("ready")
            time.sleep(0.02)
        ready = time.perf_counter() - started
        warming: list[float] = []
        probes: list[float] = []
        while not _compiled(base):
            waited("compiled")
            if probe:
                elapsed = _filter_ms(base)
                polled = time.perf_counter()
                _get(f"{base}/readyz")
                polled = (time.perf_counter() - polled) * 1000
                if not _compiled(base):
                    warming.append(elapsed)
                    probes.append(polled)
            else:
                time.sleep(0.02)
        compiled = time.perf_counter() - started
        after = [_filter_ms(base) for _ in range(min(max(len(warming), 5), AFTER_CALLS))] if probe else []
        return Start(ready, compiled, warming, after, probes)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def _cache_files(cache: Path) -> dict[Path, int]:
    """Every file of the cache directory with its modification time (ns)."""
    return {path: path.stat().st_mtime_ns for path in cache.rglob("*") if path.is_file()}


def _latency(samples: list[float]) -> str:
    if not samples:
        return "no calls"
    return f"{len(samples)} calls, median {statistics.median(samples):.1f} ms, max {max(samples):.1f} ms"


def _describe(label: str, start: Start) -> str:
    return (
        f"{label}: ready in {start.ready_s:.2f} s, kernels compiled at {start.compiled_s:.2f} s; filter "
        f"while the twins answered: {_latency(start.while_warming_ms)}; after: {_latency(start.after_ms)}; "
        f"/readyz while the twins answered: {_latency(start.readyz_warming_ms)}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Print the cold start, each warm start, and whether the warm starts rewrote the cache."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm-starts", type=int, default=2, help="starts after the cold one (default 2)")
    parser.add_argument(
        "--kernel-warmup",
        choices=("background", "blocking"),
        default="background",
        help="the service's kernel_warmup setting (default background)",
    )
    parser.add_argument("--no-probe", action="store_true", help="do not send filter calls while starting")
    args = parser.parse_args(argv)
    print(f"machine: {machine_facts()}")
    print(f"kernel_warmup: {args.kernel_warmup}")
    with tempfile.TemporaryDirectory(prefix="numba-cache-") as tmp:
        cache = Path(tmp)
        cold = start_once(cache, kernel_warmup=args.kernel_warmup, probe=not args.no_probe)
        written = _cache_files(cache)
        print(_describe("cold start (empty cache)", cold) + f"; {len(written)} cache files written")
        for n in range(args.warm_starts):
            warm = start_once(cache, kernel_warmup=args.kernel_warmup, probe=not args.no_probe)
            after = _cache_files(cache)
            rewritten = sum(1 for path, mtime in written.items() if after.get(path) != mtime)
            added = len(after.keys() - written.keys())
            print(
                _describe(f"warm start {n + 1}", warm) + f"; cache files rewritten {rewritten}, added {added}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
