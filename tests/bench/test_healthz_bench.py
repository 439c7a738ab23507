"""bench/healthz_bench.py in --quick mode: the report's structure and that probes were answered,
never their timings."""

from __future__ import annotations

from pathlib import Path

import orjson

from bench import healthz_bench


def test_quick_run_probes_both_phases(tmp_path: Path) -> None:
    out, markdown = tmp_path / "report.json", tmp_path / "report.md"
    argv = [
        "--quick",
        "--bench-cpu",
        "0",
        "--server-cpu",
        "0",
        "--json",
        str(out),
        "--markdown",
        str(markdown),
    ]
    assert healthz_bench.main(argv) == 0
    report = orjson.loads(out.read_bytes())
    [size] = report["sizes"]
    assert size["nodes"] == healthz_bench.QUICK["nodes"][0]
    assert size["slices_changed"] == healthz_bench.QUICK["burst"]
    assert size["failed_probes"] == []
    for phase in ("start-up", "burst"):
        stats = size["phases"][phase]
        assert stats["calls"] >= 1 and 0 < stats["p50_ms"] <= stats["max_ms"]
    assert "burst of 5 slice updates" in markdown.read_text()
