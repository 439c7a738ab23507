"""Latency of the topology kernel `best_sets` (numba) against its plain twin, per pod shape.

Scope: only `kernels.topology.best_sets` on a seeded synthetic device index; no cluster objects,
CEL, allocator or HTTP (bench/filter_bench.py measures those end to end).

The index: `--nodes` nodes, each with 8 GPUs and 4 NICs (12 rows). GPUs sit in 2 NVLink domains of
4; each of 4 PCIe roots holds 2 GPUs and 1 NIC; NUMA nodes (= sockets) hold 2 roots each. Each node
has a random number of GPUs in use (uniform 0..8, random positions) and each NIC is in use with
probability 1/4. `--link-fraction` of the nodes also carry a link matrix (GPU pairs only, NaN for
the rest, so NIC pairs fall back to the levels).

Pod shapes: 1 GPU; 4 GPUs; 8 GPUs; 2 GPUs + 1 NIC of one claim with a matchAttribute on the PCIe
root over both requests. Candidates are the free devices of the shape's classes; `relevant` marks
all devices of those classes.

How: `warm_up()` first (compile or cache load, reported), then per shape one untimed call and
`--repeat` timed calls of `best_sets` over all nodes (`time.perf_counter` around the call,
including its input checks); p50/p99 over the repeats. The twin runs once on the first
`--twin-nodes` nodes and its time is extrapolated linearly to all nodes (nodes are independent and
drawn from one distribution); the kernel's results on those nodes are checked equal to the twin's.

CLI: `python -m bench.kernel_bench --nodes 5000 --threads 1 --repeat 20 --seed 1 [--json]`
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numba
import numpy as np

from kernels import topology
from loadtests.scenarios import machine_facts

GPUS = 8
NICS = 4
ROWS = GPUS + NICS
LEVEL_DISTANCE = np.array([1.0, 2.0, 3.0, 4.0, 6.0])
WEIGHTS = np.array([4.0, 2.0, 1.0, 1.0])  # the extender's default settings


@dataclass(slots=True)
class Index:
    """The synthetic device index (see the module docstring)."""

    node_start: np.ndarray
    coords: np.ndarray
    free: np.ndarray
    is_gpu: np.ndarray
    link_offset: np.ndarray
    link_distance: np.ndarray


@dataclass(slots=True)
class ShapeResult:
    """Timings and outcome counts of one pod shape."""

    shape: str
    nodes: int
    repeat: int
    kernel_p50_ms: float
    kernel_p99_ms: float
    kernel_min_ms: float
    kernel_cpu_p50_ms: float
    twin_nodes: int
    twin_ms_measured: float
    twin_ms_extrapolated: float
    speedup: float
    twin_agrees: bool
    statuses: dict[str, int]


def build_index(nodes: int, seed: int, link_fraction: float) -> Index:
    """The seeded synthetic index (see the module docstring)."""
    rng = np.random.default_rng(seed)
    rows = nodes * ROWS
    node_start = np.arange(0, rows + 1, ROWS, dtype=np.int64)
    local = np.arange(ROWS)
    gpu = local < GPUS
    pcie = np.where(gpu, local // 2, local - GPUS)
    per_node = np.stack(
        [np.where(gpu, local // 4, -1), 2 + pcie, 6 + pcie // 2, 6 + pcie // 2], axis=1
    )  # nvlink 0..1, pcie 2..5, numa = socket 6..7: ids distinct per level inside a node
    base = (np.arange(nodes) * 8)[:, None, None]  # interned ids are unique per node, as in the extender
    coords = np.where(per_node[None] >= 0, per_node[None] + base, -1).reshape(rows, 4).astype(np.int32)
    used = np.zeros((nodes, ROWS), bool)
    n_used = rng.integers(0, GPUS + 1, nodes)
    order = rng.random((nodes, GPUS)).argsort(axis=1)
    used[:, :GPUS] = order < n_used[:, None]
    used[:, GPUS:] = rng.random((nodes, NICS)) < 0.25
    link_offset = np.full(nodes, -1, np.int64)
    linked = np.flatnonzero(rng.random(nodes) < link_fraction)
    link_offset[linked] = np.arange(linked.size) * ROWS * ROWS
    matrices = np.full((linked.size, ROWS, ROWS), np.nan)
    same_domain = (local[:GPUS, None] // 4) == (local[None, :GPUS] // 4)
    for i in range(linked.size):
        bandwidth = np.where(same_domain, 900.0, 100.0) * rng.uniform(0.8, 1.0, (GPUS, GPUS))
        bandwidth = np.triu(bandwidth) + np.triu(bandwidth, 1).T
        d_min, d_max = LEVEL_DISTANCE[0], LEVEL_DISTANCE[-1]
        matrices[i, :GPUS, :GPUS] = d_min + (d_max - d_min) * (1 - bandwidth / bandwidth.max())
    return Index(
        node_start=node_start,
        coords=coords,
        free=(~used).reshape(rows).astype(np.uint8),
        is_gpu=np.tile(gpu, nodes),
        link_offset=link_offset,
        link_distance=matrices.reshape(-1),
    )


def shape_inputs(index: Index, shape: str) -> tuple[topology.TopologyInputs, topology.SearchRequests]:
    """best_sets inputs for one pod shape."""
    rows = index.coords.shape[0]
    free = index.free == 1
    gpu_rows = (index.is_gpu & free).astype(np.uint8)
    nic_rows = (~index.is_gpu & free).astype(np.uint8)
    no_members = np.zeros((0, 1), np.uint8)
    no_values = np.zeros((0, rows), np.int32)
    if shape == "2gpu+nic":
        candidates = np.stack([gpu_rows, nic_rows])
        counts = np.array([2, 1], np.int64)
        kind = np.array([topology.MATCH_ATTRIBUTE], np.int64)
        members = np.ones((1, 2), np.uint8)
        values = np.ascontiguousarray(index.coords[:, 1])[None, :]  # the PCIe root
        relevant = np.ones(rows, np.uint8)
    else:
        candidates = gpu_rows[None, :]
        counts = np.array([int(shape.removesuffix("gpu"))], np.int64)
        kind, members, values = np.zeros(0, np.int64), no_members, no_values
        relevant = index.is_gpu.astype(np.uint8)
    inputs = topology.topology_inputs(
        node_start=index.node_start,
        coords=index.coords,
        free=index.free,
        relevant=relevant,
        level_distance=LEVEL_DISTANCE,
        link_offset=index.link_offset,
        link_distance=index.link_distance,
        weights=WEIGHTS,
        spread=False,
    )
    requests = topology.search_requests(
        candidates=candidates,
        counts=counts,
        claim_of=np.zeros(counts.size, np.int64),
        constraint_kind=kind,
        constraint_members=members,
        constraint_values=values,
    )
    return inputs, requests


def machine() -> dict[str, Any]:
    """The machine as `bench.filter_bench` reports it, plus numba's version and thread settings."""
    threading_layer: str
    try:
        # numba exports it at run time but leaves it out of its typed interface.
        threading_layer = numba.threading_layer()  # type: ignore[attr-defined]
    except ValueError:  # before the first parallel call
        threading_layer = "not initialised"
    return machine_facts() | {
        "numba": numba.__version__,
        "numba_threads": numba.get_num_threads(),
        "threading_layer": threading_layer,
    }


def run_shape(index: Index, shape: str, repeat: int, twin_nodes: int, max_work: int) -> ShapeResult:
    """Time the kernel over all nodes and the twin over a prefix; compare them on that prefix."""
    n_nodes = index.node_start.size - 1
    all_nodes = np.arange(n_nodes, dtype=np.int64)
    inputs, requests = shape_inputs(index, shape)
    result = topology.best_sets(inputs, requests, nodes=all_nodes, max_work=max_work)  # untimed: first call
    samples = []
    cpu = []
    for _ in range(repeat):
        started, cpu_started = time.perf_counter(), time.process_time()
        result = topology.best_sets(inputs, requests, nodes=all_nodes, max_work=max_work)
        samples.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - cpu_started) * 1000)
    subset = all_nodes[: min(twin_nodes, n_nodes)]
    started = time.perf_counter()
    twin = topology.best_sets_reference(inputs, requests, nodes=subset, max_work=max_work)
    twin_ms = (time.perf_counter() - started) * 1000
    mine = topology.best_sets(inputs, requests, nodes=subset, max_work=max_work)
    agrees = bool(
        np.array_equal(mine[0], twin[0])
        and np.array_equal(mine[3], twin[3])
        and np.allclose(mine[1], twin[1], rtol=0, atol=1e-9)
    )
    names = {
        topology.STATUS_NONE: "none",
        topology.STATUS_EXACT: "exact",
        topology.STATUS_BOUNDED: "bounded",
        topology.STATUS_UNKNOWN: "unknown",
    }
    counts = np.bincount(result[0], minlength=4)
    extrapolated = twin_ms * n_nodes / max(1, subset.size)
    p50 = float(np.percentile(samples, 50))
    return ShapeResult(
        shape=shape,
        nodes=n_nodes,
        repeat=repeat,
        kernel_p50_ms=p50,
        kernel_p99_ms=float(np.percentile(samples, 99)),
        kernel_min_ms=float(min(samples)),
        kernel_cpu_p50_ms=float(np.percentile(cpu, 50)),
        twin_nodes=int(subset.size),
        twin_ms_measured=twin_ms,
        twin_ms_extrapolated=extrapolated,
        speedup=extrapolated / p50 if p50 else float("inf"),
        twin_agrees=agrees,
        statuses={names[s]: int(counts[s]) for s in names},
    )


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m bench.kernel_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000, help="nodes in the synthetic index")
    parser.add_argument("--threads", type=int, default=1, help="numba threads (0: numba's default)")
    parser.add_argument("--repeat", type=int, default=20, help="timed kernel calls per shape")
    parser.add_argument("--seed", type=int, default=1, help="index generator seed")
    parser.add_argument(
        "--max-work", type=int, default=4096, help="search budget per node (settings default)"
    )
    parser.add_argument("--twin-nodes", type=int, default=250, help="nodes the twin runs on (extrapolated)")
    parser.add_argument("--link-fraction", type=float, default=0.1, help="share of nodes with a link matrix")
    parser.add_argument(
        "--shapes", nargs="+", default=["1gpu", "4gpu", "8gpu", "2gpu+nic"], help="pod shapes to run"
    )
    parser.add_argument("--json", action="store_true", help="print only a JSON summary")
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.repeat < 1 or args.twin_nodes < 1:
        parser.error("--nodes, --repeat and --twin-nodes must be >= 1")
    topology.set_threads(args.threads)
    warm_s = topology.warm_up()
    index = build_index(args.nodes, args.seed, args.link_fraction)
    results = [run_shape(index, s, args.repeat, args.twin_nodes, args.max_work) for s in args.shapes]
    info = machine()
    given = list(sys.argv[1:] if argv is None else argv)
    command = shlex.join(["python", "-m", "bench.kernel_bench", *given])
    if args.json:
        report = {
            "command": command,
            "machine": info,
            "warm_up_s": warm_s,
            "results": [asdict(r) for r in results],
        }
        print(json.dumps(report, indent=2))
        return 0
    print(f"command: {command}")
    print(
        f"machine: {info['platform']}; {info['cpu']}; {info['cores']} cores ({info['usable_cores']} usable); "
        f"numba {info['numba']}, {info['numba_threads']} thread(s), layer {info['threading_layer']}; "
        f"numpy {info['numpy']}, Python {info['python']}"
    )
    print(
        f"index: {args.nodes} nodes x ({GPUS} GPUs + {NICS} NICs), seed {args.seed}, "
        f"{int((index.link_offset >= 0).sum())} nodes with a link matrix; max_work {args.max_work}"
    )
    print(f"warm_up(): {warm_s:.2f} s (compile, or load from numba's cache)")
    print(
        f"method: per shape 1 untimed call, then {args.repeat} timed best_sets calls over all nodes "
        f"(wall: perf_counter; cpu: process_time, summed over the process's threads; input checks "
        f"included); the twin runs once on the first {args.twin_nodes} nodes, its time extrapolated "
        f"linearly to {args.nodes} nodes; 'agrees': kernel == twin on those nodes"
    )
    header = (
        f"{'shape':<9} {'p50 ms':>8} {'p99 ms':>8} {'min ms':>8} {'cpu p50':>8} "
        f"{'twin ms (extrap.)':>18} {'speedup':>8} {'agrees':>6}  statuses"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        statuses = " ".join(f"{k}={v}" for k, v in r.statuses.items() if v)
        print(
            f"{r.shape:<9} {r.kernel_p50_ms:>8.2f} {r.kernel_p99_ms:>8.2f} {r.kernel_min_ms:>8.2f} "
            f"{r.kernel_cpu_p50_ms:>8.2f} {r.twin_ms_extrapolated:>18.0f} {r.speedup:>7.0f}x "
            f"{('yes' if r.twin_agrees else 'NO'):>6}  {statuses}"
        )
    return 0 if all(r.twin_agrees for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
