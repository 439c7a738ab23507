"""Seconds from `dra-extender serve` to `/readyz` 200 on the embedded sample: cold numba cache, then warm.

Scope: the whole start of the service as a process (Python imports, settings, the sample cluster's
index, the kernels' warm-up) until `/readyz` answers 200, with `NUMBA_CACHE_DIR` set to a fresh
temporary directory: the first start compiles every kernel and writes the cache, each later start
in the same directory should only load it. Also reports whether the later starts loaded the kernels
(the cache files written by the first start keep their modification times: nothing was compiled
and written again).

How: `time.perf_counter` from `Popen` to the first 200 of `/readyz` (polled every 20 ms), then
SIGTERM and wait. CLI: `python -m bench.serve_startup [--warm-starts 2]`.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from loadtests.scenarios import machine_facts

REPO = Path(__file__).resolve().parent.parent
READY_WITHIN_SECONDS = 300.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def time_to_ready(cache: Path) -> float:
    """Seconds from starting `serve` (embedded sample, this cache directory) to `/readyz` 200."""
    port = _free_port()
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
    env = os.environ | {"NUMBA_CACHE_DIR": str(cache)}
    started = time.perf_counter()
    process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not _ready(f"http://127.0.0.1:{port}/readyz"):
            if process.poll() is not None:
                raise RuntimeError(f"serve exited with {process.returncode} before it was ready")
            if time.perf_counter() - started > READY_WITHIN_SECONDS:
                raise RuntimeError(f"serve not ready within {READY_WITHIN_SECONDS:.0f} s")
            time.sleep(0.02)
        return time.perf_counter() - started
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def _cache_files(cache: Path) -> dict[Path, int]:
    """Every file of the cache directory with its modification time (ns)."""
    return {path: path.stat().st_mtime_ns for path in cache.rglob("*") if path.is_file()}


def main(argv: Sequence[str] | None = None) -> int:
    """Print the cold start, each warm start, and whether the warm starts rewrote the cache."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm-starts", type=int, default=2, help="starts after the cold one (default 2)")
    args = parser.parse_args(argv)
    print(f"machine: {machine_facts()}")
    with tempfile.TemporaryDirectory(prefix="numba-cache-") as tmp:
        cache = Path(tmp)
        cold = time_to_ready(cache)
        written = _cache_files(cache)
        print(f"cold start (empty cache): ready in {cold:.2f} s; {len(written)} cache files written")
        for n in range(args.warm_starts):
            warm = time_to_ready(cache)
            after = _cache_files(cache)
            rewritten = sum(1 for path, mtime in written.items() if after.get(path) != mtime)
            added = len(after.keys() - written.keys())
            print(
                f"warm start {n + 1}: ready in {warm:.2f} s; cache files rewritten {rewritten}, added {added}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
