"""bench/filter_bench.py and bench/plot_benchmarks.py on a tiny cluster: result structure only.

Scope: the benchmark's functions run on a 20-node generated cluster with a few calls each, and
the CLI writes a JSON report that the plot script turns into a PNG. No timing is asserted beyond
percentiles being ordered; the figures themselves are docs/benchmarks.md's business.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import filter_bench, plot_benchmarks

NODES = 20
CALLS = 3


@pytest.fixture(scope="module")
def cluster() -> Iterator[filter_bench.Cluster]:
    loaded = filter_bench.load_cluster(NODES, seed=1, pods=12)
    filter_bench.warm_up(loaded, extra=1)
    yield loaded
    del loaded
    filter_bench.release_memory()


def _check(result: filter_bench.Result, mode: str, calls: int) -> None:
    assert result.mode == mode
    assert result.nodes == NODES
    assert result.calls == calls
    assert result.errors == 0
    assert 0 < result.p50_ms <= result.p90_ms <= result.p99_ms <= result.max_ms
    assert result.calls_per_s > 0
    assert result.last_passed + result.last_failed + result.last_unresolvable == NODES


def test_load_cluster_reports_startup_and_memory(cluster: filter_bench.Cluster) -> None:
    """Start-up steps and RSS figures are all present; the node list is the whole cluster."""
    assert len(cluster.node_names) == NODES
    assert set(cluster.startup) >= {"generate_s", "cluster_state_ms", "kernel_warm_up_ms", "index_build_ms"}
    assert cluster.startup["device_rows"] == NODES * 12
    assert set(cluster.memory) >= {"cluster_state_mib", "index_mib", "index_numpy_mib", "first_calls_mib"}
    assert cluster.memory["index_numpy_mib"] > 0


@pytest.mark.parametrize(
    ("options", "mode"),
    [
        ({"prioritize": False}, "in-process filter"),
        ({"prioritize": True}, "in-process filter+prioritize"),
        ({"prioritize": False, "only_prioritize": True}, "in-process prioritize"),
    ],
)
def test_in_process_modes(cluster: filter_bench.Cluster, options: dict[str, bool], mode: str) -> None:
    """Each in-process mode times every call; filter results carry per-shape figures."""
    result = filter_bench.run_in_process(cluster, CALLS, warmup=0, **options)
    _check(result, mode, CALLS)
    assert sum(s["calls"] for s in result.by_shape.values()) == CALLS


def test_http_modes(cluster: filter_bench.Cluster) -> None:
    """Filter, filter+prioritize and prioritize alone over the real app."""
    results = asyncio.run(filter_bench.run_http(cluster, CALLS, warmup=1))
    assert [r.mode for r in results] == ["HTTP filter", "HTTP filter+prioritize", "HTTP prioritize"]
    for r in results:
        _check(r, r.mode, CALLS)


def test_binds_allocate_each_pod_once(cluster: filter_bench.Cluster) -> None:
    """In-process and HTTP binds succeed on their own pods and leave them bound in the state."""
    mine, theirs = cluster.pods[:CALLS], cluster.pods[CALLS : 2 * CALLS]
    in_process = asyncio.run(filter_bench.run_binds_in_process(cluster, mine, warmup=0))
    over_http = asyncio.run(filter_bench.run_http_binds(cluster, theirs, warmup=0))
    for prefix, (after, bind) in (("in-process", in_process), ("HTTP", over_http)):
        _check(after, f"{prefix} filter after a bind", CALLS - 1)
        _check(bind, f"{prefix} bind", CALLS)
        assert bind.skipped == 0
    for pod in [*mine, *theirs]:
        bound = cluster.placement.state.get("Pod", pod["metadata"]["name"], pod["metadata"]["namespace"])
        assert bound is not None and bound["spec"]["nodeName"]


def test_best_node_takes_the_first_of_equal_scores() -> None:
    """Ties go to the first node in the list, for wire dicts and HostScores alike."""
    wire = [{"Host": "a", "Score": 3}, {"Host": "b", "Score": 7}, {"Host": "c", "Score": 7}]
    assert filter_bench.best_node(wire) == "b"
    assert filter_bench.best_node([filter_bench.HostScore("x", 0), filter_bench.HostScore("y", 0)]) == "x"


def test_cli_json_feeds_the_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--json` writes one cluster entry per size, and plot_benchmarks draws a PNG from it."""
    report = tmp_path / "bench.json"
    argv = [
        "--nodes",
        str(NODES),
        "--calls",
        "2",
        "--pods",
        "8",
        "--warmup",
        "0",
        "--http",
        "--json",
        str(report),
    ]
    assert filter_bench.main(argv) == 0
    data = json.loads(report.read_text())
    [entry] = data["clusters"]
    modes = {r["mode"] for r in entry["results"]}
    assert {"in-process bind", "HTTP bind", "HTTP prioritize", "in-process filter+prioritize"} <= modes
    assert data["bind_note"] == filter_bench.BIND_NOTE
    png = tmp_path / "plot.png"
    assert plot_benchmarks.main([str(report), "--out", str(png)]) == 0
    assert png.read_bytes().startswith(b"\x89PNG")
    assert "wrote" in capsys.readouterr().out
