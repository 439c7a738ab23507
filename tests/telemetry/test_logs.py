"""Logs: one info line per verb call with its key figures, per-node detail at debug, JSON lines."""

from __future__ import annotations

import io
import logging
from typing import Any

import orjson
import pytest
from opentelemetry import trace

from extender import telemetry
from extender.settings import Settings

from .conftest import BIND_BODY, FILTER_BODY, NODES, PRIORITIZE_BODY


@pytest.fixture
def log_to(restore_logging: None) -> Any:
    """`log_to(**settings)` -> a buffer receiving every log line, formatted as `serve` would."""

    def configure(**fields: Any) -> io.StringIO:
        buffer = io.StringIO()
        telemetry.configure_logging(Settings(**fields), stream=buffer)
        return buffer

    return configure


def _json_lines(buffer: io.StringIO) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in buffer.getvalue().splitlines()]


def _request_lines(entries: list[dict[str, Any]], verb: str) -> list[dict[str, Any]]:
    return [e for e in entries if e["logger"] == "extender.server" and e.get("verb") == verb and "code" in e]


async def test_json_request_lines_carry_the_key_figures(serve, log_to):
    """Every line is a JSON object with ts/level/logger/msg; each verb call adds one info line."""
    buffer = log_to(log_json=True, log_level="info")
    client = await serve()
    await client.post("/filter", data=FILTER_BODY)
    await client.post("/prioritize", data=PRIORITIZE_BODY)
    await client.post("/bind", data=BIND_BODY)
    entries = _json_lines(buffer)
    assert all({"ts", "level", "logger", "msg"} <= set(e) for e in entries)
    (filtered,) = _request_lines(entries, "filter")
    assert filtered["level"] == "info"
    assert filtered["pod"] == "ml-training/gpu-training"
    assert (filtered["nodes_in"], filtered["nodes_out"], filtered["passed"]) == (3, 1, 1)
    assert filtered["failed"] + filtered["unresolvable"] == 2
    assert filtered["code"] == 200 and filtered["duration_ms"] > 0
    assert "trace_id" not in filtered  # tracing is off
    assert filtered["msg"].startswith(
        "filter pod=ml-training/gpu-training nodes_in=3 nodes_out=1 duration_ms="
    )
    (prioritized,) = _request_lines(entries, "prioritize")
    assert (prioritized["nodes_in"], prioritized["nodes_out"]) == (2, 2)
    (bound,) = _request_lines(entries, "bind")
    assert (bound["node"], bound["reason"], bound["nodes_out"]) == ("h100-node-01", "ok", 1)
    assert "error" not in bound
    assert not [e for e in entries if e["level"] == "debug"]


async def test_debug_adds_one_line_per_rejected_node_with_its_reason(serve, log_to):
    """At debug, each failed/unresolvable node gets a line naming the node and the reason."""
    buffer = log_to(log_json=True, log_level="debug")
    client = await serve()
    answer = await (await client.post("/filter", data=FILTER_BODY)).json()
    rejected = {**answer["FailedNodes"], **answer["FailedAndUnresolvableNodes"]}
    details = [e for e in _json_lines(buffer) if e["level"] == "debug" and e.get("verb") == "filter"]
    assert {e["node"]: e["reason"] for e in details} == rejected
    assert set(rejected) == set(NODES) - {"h100-node-01"}
    assert all(e["result"] in ("failed", "unresolvable") and e["node"] in e["msg"] for e in details)


async def test_bind_failure_line_has_the_error(serve, log_to):
    buffer = log_to(log_json=True)
    client = await serve()
    await client.post("/bind", data=BIND_BODY.replace(b"gpu-training", b"ghost"))
    (bound,) = _request_lines(_json_lines(buffer), "bind")
    assert bound["reason"] == "error" and "ghost" in bound["error"] and bound["nodes_out"] == 0


async def test_request_line_has_the_trace_id_when_tracing(serve, provider, exporter, log_to):
    """With tracing on, the request line names the verb span's trace and span ids."""
    buffer = log_to(log_json=True)
    client = await serve(tracer_provider=provider)
    await client.post("/filter", data=FILTER_BODY)
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "filter"]
    (filtered,) = _request_lines(_json_lines(buffer), "filter")
    assert filtered["trace_id"] == trace.format_trace_id(span.context.trace_id)
    assert filtered["span_id"] == trace.format_span_id(span.context.span_id)


async def test_text_lines_read_as_key_value_pairs(serve, provider, log_to):
    """Plain-text mode: `time LEVEL logger: verb key=value ... trace_id=...`."""
    buffer = log_to(log_level="info")
    client = await serve(tracer_provider=provider)
    await client.post("/filter", data=FILTER_BODY)
    (line,) = [ln for ln in buffer.getvalue().splitlines() if "extender.server: filter " in ln]
    assert " INFO extender.server: filter pod=ml-training/gpu-training nodes_in=3 nodes_out=1 " in line
    assert " passed=1 " in line and " code=200 " in line
    assert line.split(" trace_id=")[1].isalnum()


def test_json_formatter_keeps_extra_fields_and_exceptions(restore_logging):
    """`extra=` fields become top-level keys; tracebacks go in `exception`; odd values as strings."""
    buffer = io.StringIO()
    telemetry.configure_logging(Settings(log_json=True), stream=buffer)
    log = logging.getLogger("extender.test")
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed %s", "here", extra={"node": "n1", "when": object.__new__(_Opaque)})
    (entry,) = _json_lines(buffer)
    assert (entry["msg"], entry["level"], entry["node"], entry["when"]) == (
        "failed here",
        "error",
        "n1",
        "opaque",
    )
    assert "ValueError: boom" in entry["exception"]
    assert entry["ts"].endswith("+00:00")


def test_logfmt_quotes_values_with_spaces():
    assert telemetry.logfmt("no space") == '"no space"'
    assert telemetry.logfmt(1.23456) == "1.235"
    assert telemetry.logfmt("") == '""'
    assert telemetry.logfmt("plain") == "plain"


class _Opaque:
    def __str__(self) -> str:
        return "opaque"
