"""bench/mixed_bench.py in --quick mode: the output's structure, never its timings.

Scope: one smoke run of the whole benchmark (50 mixed-fleet nodes: the real `serve` started on a
state file, per-shape calls over HTTP, a few bind cycles, the in-process slice-change pairs) and
the files it writes. Figures are only checked to exist and be ordered; what they are is
docs/benchmarks.md's business.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import mixed_bench
from loadtests.fleet import MIXED_SHAPES, fleet_counts


def _ordered(stats: dict) -> None:
    assert stats["calls"] > 0
    assert 0 < stats["p50_ms"] <= stats["p99_ms"] <= stats["max_ms"]


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path, str]:
    out = tmp_path_factory.mktemp("mixed")
    argv = [
        "--quick",
        "--markdown",
        str(out / "m.md"),
        "--plot",
        str(out / "m.png"),
        "--json",
        str(out / "m.json"),
    ]
    assert mixed_bench.main(argv) == 0
    return json.loads((out / "m.json").read_text()), out, (out / "m.md").read_text()


def test_quick_run_reports_every_measurement(quick: tuple[dict, Path, str]) -> None:
    report, _, _ = quick
    assert report["command"].startswith("python -m bench.mixed_bench --quick")
    assert {"cpu", "cores", "python"} <= set(report["machine"])
    (size,) = report["sizes"]
    nodes = mixed_bench.QUICK["nodes"][0]
    assert size["nodes"] == nodes
    assert size["fleet"] == fleet_counts(nodes)
    assert size["objects"]["Node"] == nodes
    startup = size["startup"]
    assert startup["ready_s"] > 0
    assert startup["server_index_build_ms"] > 0  # parsed from the server's own log line
    assert startup["server_rss_ready_mib"] > 0
    assert set(size["shapes"]) == set(MIXED_SHAPES)
    for shape, result in size["shapes"].items():
        assert result["errors"] == 0, shape
        assert result["filter"]["calls"] == mixed_bench.QUICK["calls"]
        _ordered(result["filter"])
        assert result["last_passed"] > 0, shape  # every shape fits somewhere in an unfilled fleet
        assert result["prioritize"]["calls"] == mixed_bench.QUICK["calls"]
    cycle = size["cycle"]
    assert cycle["cycles"] == mixed_bench.QUICK["cycles"]
    assert cycle["bound"] + cycle["unschedulable"] + cycle["bind_errors"] == cycle["cycles"]
    assert cycle["bind_errors"] == 0
    assert cycle["bound"] >= 1
    assert cycle["pods_per_s"] > 0
    _ordered(cycle["bind"])
    in_process = size["in_process"]
    assert in_process["index_build_ms"] > 0
    assert in_process["device_rows"] == size["devices"]
    _ordered(in_process["filter_unchanged"])
    _ordered(in_process["filter_after_slice_change"])
    assert in_process["filter_unchanged"]["calls"] == mixed_bench.QUICK["slice_calls"]


def test_quick_run_writes_markdown_and_plot(quick: tuple[dict, Path, str]) -> None:
    _, out, text = quick
    assert text.startswith("## Mixed fleet")
    assert "command: `python -m bench.mixed_bench --quick" in text
    for shape in MIXED_SHAPES:
        assert f"| {shape} |" in text
    for heading in ("Start-up and memory", "Steady cycle", "right after a ResourceSlice change"):
        assert heading in text
    assert (out / "m.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_percentiles_interpolate_like_numpy() -> None:
    stats = mixed_bench.percentiles([0.001, 0.002, 0.003, 0.004])
    assert stats["calls"] == 4
    assert stats["p50_ms"] == pytest.approx(2.5)
    assert stats["p99_ms"] == pytest.approx(3.97)
    assert stats["max_ms"] == pytest.approx(4.0)
    assert mixed_bench.percentiles([])["calls"] == 0
