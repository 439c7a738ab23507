"""What the kernels' plain-Python twins cost while the numba kernels compile in the background.

Scope: one fresh process per cluster, with an empty `NUMBA_CACHE_DIR` (so the background warm-up of
kernels/warming.py compiles every kernel, as the first `serve` after install does), building the
service in process (`extender.wiring.build_services`, default settings: `kernel_warmup:
background`). Per pod shape, one filter over every node and one prioritize over the nodes that
passed, each call with a new pod (`loadtests.scenarios.PodEntry`, so the evaluation cache never
answers), timed with `perf_counter` in three phases:

1. **warming**: shapes in turn, for as long as the warm-up runs (the twins answer, and the
   compiling thread holds the GIL much of the time); a call counts only if the warm-up was
   still running when it ended;
2. **kernels**: after the warm-up, `--calls` rounds (the kernels answer);
3. **twins, idle**: `--calls` rounds with the twins forced (`warming.forced`) and nothing
   compiling: the twins' own cost, without the compiler's competition.

Clusters: the embedded sample (18 nodes, its pipeline pods) and the mixed fleet of
`loadtests.fleet` (`--nodes`, default 1000; H100, A100 with MIG, L40S, MI300X, TPU, CPU; 30 % held).
Not measured: HTTP (tests/server/test_kernel_warmup.py checks the answers over HTTP;
`bench.serve_startup` times the service's start and filter calls over HTTP).

CLI: `python -m bench.kernel_warmup [--nodes 1000] [--calls 3] [--markdown FILE]`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PHASES = ("warming", "kernels", "twins_idle")


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000 if samples else float("nan")


def _max_ms(samples: list[float]) -> float:
    return max(samples) * 1000 if samples else float("nan")


def child(cluster: str, nodes: int, calls: int) -> dict[str, Any]:
    """Runs in the fresh process: build, then time the three phases (see the module docstring)."""
    from extender import wiring
    from extender.cluster.state import ClusterState
    from extender.pods import parse_pod
    from extender.settings import Settings
    from kernels import warming
    from loadtests.generate import SHAPE_LABEL
    from loadtests.scenarios import PodEntry, load_pods

    if cluster == "sample":
        from extender.cluster.sample import sample_objects

        objects, pending = sample_objects(), load_pods(None)
        shape_of = [str(p["metadata"]["name"]) for p in pending]
    else:
        from loadtests.fleet import generate_mixed_cluster

        objects, pending = generate_mixed_cluster(nodes=nodes, seed=1, pods=60)
        shape_of = [str(p["metadata"]["labels"][SHAPE_LABEL]) for p in pending]
    shapes: dict[str, list[PodEntry]] = {}
    for pod, shape in zip(pending, shape_of, strict=True):
        shapes.setdefault(shape, []).append(PodEntry(pod, shape))
    started = time.perf_counter()
    placement, _ = wiring.build_services(Settings(), ClusterState.from_objects(objects))
    built = time.perf_counter() - started
    names = list(placement.index().node_names)
    rng = random.Random(1)
    seq = 0
    times: dict[str, dict[str, dict[str, list[float]]]] = {
        phase: {shape: {"filter": [], "prioritize": []} for shape in shapes} for phase in PHASES
    }

    def one_round(phase: str) -> None:
        nonlocal seq
        for shape, entries in shapes.items():
            seq += 1
            pod = parse_pod(entries[seq % len(entries)].instance("fresh", rng, seq))
            t0 = time.perf_counter()
            verdict = placement.filter(pod, names)
            t1 = time.perf_counter()
            if verdict.passed:
                placement.prioritize(pod, verdict.passed)
            t2 = time.perf_counter()
            if phase == "warming" and warming.state() != warming.WARMING:
                return
            times[phase][shape]["filter"].append(t1 - t0)
            if verdict.passed:
                times[phase][shape]["prioritize"].append(t2 - t1)

    was_warming = warming.state() == warming.WARMING
    while warming.state() == warming.WARMING:
        one_round("warming")
    warming.wait()
    compiled_at = time.perf_counter() - started
    for _ in range(calls):
        one_round("kernels")
    with warming.forced(use_kernels=False):
        for _ in range(calls):
            one_round("twins_idle")
    return {
        "cluster": cluster,
        "nodes": len(names),
        "state": warming.state(),
        "was_warming": was_warming,
        "build_s": built,
        "compiled_at_s": compiled_at,
        "shapes": {
            shape: {
                phase: {
                    verb: {
                        "calls": len(times[phase][shape][verb]),
                        "median_ms": _median_ms(times[phase][shape][verb]),
                        "max_ms": _max_ms(times[phase][shape][verb]),
                    }
                    for verb in ("filter", "prioritize")
                }
                for phase in PHASES
            }
            for shape in shapes
        },
    }


def run(cluster: str, nodes: int, calls: int) -> dict[str, Any]:
    """Run `child` in a fresh process with an empty numba cache directory; its report."""
    with tempfile.TemporaryDirectory(prefix="numba-cache-") as tmp:
        env = os.environ | {"NUMBA_CACHE_DIR": tmp}
        argv = [sys.executable, "-m", "bench.kernel_warmup", "--child", cluster]
        argv += ["--nodes", str(nodes), "--calls", str(calls)]
        done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"child {cluster} failed:\n{done.stderr}")
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def _cell(phase: dict[str, Any], verb: str) -> str:
    got = phase[verb]
    if not got["calls"]:
        return "-"
    return f"{got['median_ms']:.1f} / {got['max_ms']:.0f} ({got['calls']})"


def table(report: dict[str, Any]) -> str:
    """One markdown table per cluster: median / max ms (calls) per shape, verb and phase."""
    lines = [
        f"**{report['cluster']}** ({report['nodes']} nodes): service built in {report['build_s']:.1f} s, "
        f"kernels compiled {report['compiled_at_s']:.1f} s after the build started.",
        "",
        "| shape | filter, warming | filter, kernels | filter, twins idle "
        "| prioritize, warming | prioritize, kernels | prioritize, twins idle |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for shape, phases in report["shapes"].items():
        cells = [_cell(phases[p], verb) for verb in ("filter", "prioritize") for p in PHASES]
        lines.append(f"| {shape} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000, help="nodes of the mixed fleet (default 1000)")
    parser.add_argument("--calls", type=int, default=3, help="rounds after the warm-up (default 3)")
    parser.add_argument("--clusters", nargs="+", default=["sample", "mixed"], choices=("sample", "mixed"))
    parser.add_argument("--markdown", type=Path, help="also write the tables to this file")
    parser.add_argument("--child", choices=("sample", "mixed"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.nodes, args.calls)))
        return 0
    from loadtests.scenarios import machine_facts

    out = [f"machine: {machine_facts()}", "cells: median / max ms (calls)", ""]
    for cluster in args.clusters:
        report = run(cluster, args.nodes, args.calls)
        if not report["was_warming"]:
            print(f"warning: {cluster}: the warm-up was over before the first call", file=sys.stderr)
        out += [table(report), ""]
        print("\n".join(out[-2:]), flush=True)
    if args.markdown:
        args.markdown.write_text("\n".join(out), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
