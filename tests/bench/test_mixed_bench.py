"""bench/mixed_bench.py in --quick mode: the output's structure, never its timings.

Scope: one smoke run of the whole benchmark (50 mixed-fleet nodes: the real `serve` started on a
state file, per-shape calls over HTTP, a few bind cycles, the in-process slice-change pairs) and
the files it writes. Figures are only checked to exist and be ordered; what they are is
docs/benchmarks.md's business.
"""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path

import orjson
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


class _Echo(http.server.BaseHTTPRequestHandler):
    """Answers POST /<verb> with {"verb", "size"} padded to the size asked for in the body;
    /fail with HTTP 500."""

    protocol_version = "HTTP/1.1"  # keep-alive, as aiohttp

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        asked = orjson.loads(body)
        status = 500 if self.path == "/fail" else 200
        answer = orjson.dumps(
            {"verb": self.path[1:], "pad": "x" * asked["pad"], "type": self.headers["Content-Type"]}
        )
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


def test_the_client_keeps_one_connection_and_reads_whole_answers() -> None:
    """Serial calls on one keep-alive connection, answers of any size read to their last byte,
    JSON content type sent, and an answer other than 200 is an error naming the verb."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = mixed_bench.Client(server.server_address[1], timeout=10)
    try:
        for pad in (0, 10, 3_000_000, 5):
            answer, elapsed = client.post("filter", orjson.dumps({"pad": pad}))
            assert answer == {"verb": "filter", "pad": "x" * pad, "type": "application/json"}
            assert elapsed > 0
        with pytest.raises(RuntimeError, match=r"^/fail answered HTTP 500"):
            client.post("fail", orjson.dumps({"pad": 1}))
    finally:
        client.close()
        server.shutdown()
        server.server_close()


def test_best_host_takes_the_first_of_equal_scores() -> None:
    scores = [{"Host": "a", "Score": 3}, {"Host": "b", "Score": 7}, {"Host": "c", "Score": 7}]
    assert mixed_bench.best_host(scores) == "b"
