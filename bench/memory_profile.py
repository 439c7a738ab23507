"""Where the `serve` process's memory goes, in-process (docs/memory-profile.md).

Builds the mixed fleet of `bench/mixed_bench.py` (nodes, seed 1, 40 pods), writes it as a JSON
state file, then loads it the way `serve --state` does (`load_state_paths`,
`ClusterState.from_objects`, `wiring.build_services`) and reports:

- RSS after each step (/proc/self/status), so the deltas are what each step keeps, with the
  wall-clock and CPU seconds since the start (CPU time is the steadier figure on a shared
  machine);
- with `--tracemalloc`, the live Python allocations after `build_services`, grouped by the
  file that allocated them (numpy buffers are traced too), and the top lines.

The two modes are separate runs: tracemalloc's own bookkeeping inflates RSS.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import tracemalloc
from pathlib import Path

#: The checkout's root, cut from the file names of the top lines.
_REPO = str(Path(__file__).resolve().parents[1])


def _rss() -> float:
    """Resident set size now, MiB (Linux /proc; no psutil dependency)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _category(filename: str) -> str:
    """Which part of the extender (or library) an allocation belongs to."""
    for marker, name in (
        ("extender/cluster/loading", "raw objects (JSON parse, loading)"),
        ("extender/cluster/compact", "raw objects (maps rebuilt key-sharing by compaction)"),
        ("extender/cluster/", "ClusterState"),
        ("extender/validation", "validation"),
        ("extender/allocator/model", "allocator model (Device/Slice)"),
        ("extender/quantity", "quantities"),
        ("extender/index/", "device index"),
        ("extender/cel/", "CEL inputs/results"),
        ("extender/core/", "placement core (tiers, columns)"),
        ("kernels/", "kernels"),
        ("extender/", "extender (other)"),
        ("numpy", "numpy (internal)"),
        ("numba", "numba"),
        ("llvmlite", "numba"),
        ("celpy", "celpy"),
        ("cel", "CEL library"),
    ):
        if marker in filename:
            return name
    return "other libraries / interpreter"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/memory-profile"))
    parser.add_argument("--tracemalloc", action="store_true", help="trace allocations (slower, inflates RSS)")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()

    args.dir.mkdir(parents=True, exist_ok=True)
    path = args.dir / f"state-{args.nodes}.json"
    if not path.exists():
        from loadtests.fleet import generate_mixed_cluster
        from loadtests.generate import write_json_state

        objects, _ = generate_mixed_cluster(nodes=args.nodes, seed=1, pods=40)
        write_json_state(objects, path)
        del objects
        gc.collect()
        print(f"wrote {path}; run again for clean figures", file=sys.stderr)
        return

    steps: list[tuple[str, float, float, float]] = []
    start, cpu_start = time.perf_counter(), time.process_time()

    def step(name: str) -> None:
        gc.collect()
        steps.append((name, _rss(), time.perf_counter() - start, time.process_time() - cpu_start))

    step("interpreter")
    from extender import wiring
    from extender.cluster.loading import load_state_paths
    from extender.cluster.state import ClusterState
    from extender.settings import Settings

    step("imports (extender, numpy, numba, aiohttp, ...)")
    from kernels import warming

    warming.warm_up_now(threads=1)
    step("numba kernels compiled/loaded")
    if args.tracemalloc:
        tracemalloc.start(1)
    objects = load_state_paths([path])
    step("load_state_paths (raw objects)")
    state = ClusterState.from_objects(objects)
    del objects
    step("ClusterState.from_objects")
    placement, _binder = wiring.build_services(Settings(), state)
    step("build_services (index, CEL, tiers)")

    print(f"# {args.nodes} nodes, {path.stat().st_size / 2**20:.0f} MiB state file")
    print("| step | RSS MiB | delta MiB | s | CPU s |")
    print("|---|---:|---:|---:|---:|")
    previous = 0.0
    for name, rss, at, cpu in steps:
        print(f"| {name} | {rss:.0f} | {rss - previous:+.0f} | {at:.1f} | {cpu:.1f} |")
        previous = rss
    if not args.tracemalloc:
        return
    snapshot = tracemalloc.take_snapshot()
    tracemalloc.stop()
    by_category: dict[str, float] = {}
    for stat in snapshot.statistics("filename"):
        name = _category(stat.traceback[0].filename)
        by_category[name] = by_category.get(name, 0.0) + stat.size / 2**20
    total = sum(by_category.values())
    print(f"\ntraced live allocations after build_services: {total:.0f} MiB")
    print("| allocated by | MiB |")
    print("|---|---:|")
    for name, size in sorted(by_category.items(), key=lambda item: -item[1]):
        print(f"| {name} | {size:.0f} |")
    print(f"\ntop {args.top} lines")
    print("| line | MiB | blocks |")
    print("|---|---:|---:|")
    for stat in snapshot.statistics("lineno")[: args.top]:
        frame = stat.traceback[0]
        where = frame.filename.removeprefix(f"{_REPO}/").split("site-packages/")[-1]
        print(f"| {where}:{frame.lineno} | {stat.size / 2**20:.1f} | {stat.count} |")
    del placement


if __name__ == "__main__":
    main()
