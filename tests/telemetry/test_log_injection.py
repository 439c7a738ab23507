"""Plain-text logs cannot be forged through request values (issue 12 finding 9): a newline in a
pod name used to start a line of its own that looked like any other log line."""

from __future__ import annotations

import io
import logging
import sys
from typing import Any

import orjson

from extender import telemetry
from extender.settings import Settings

#: No spaces, quotes or "=": a value with those was already quoted; this one slipped through.
FORGED = "x\n2026-01-01T00:00:00,000_INFO_extender.server:_bind_pod:kube-system/admin_reason:ok"


async def test_a_newline_in_a_pod_name_stays_on_its_line(serve: Any, restore_logging: None) -> None:
    buffer = io.StringIO()
    telemetry.configure_logging(Settings(log_level="info"), stream=buffer)
    client = await serve()
    pod = {"metadata": {"name": FORGED, "namespace": "ml\r\x1b[2J", "uid": "u-forged"}, "spec": {}}
    resp = await client.post("/filter", data=orjson.dumps({"Pod": pod, "NodeNames": ["h100-node-01"]}))
    assert resp.status == 200
    body = {"PodName": FORGED, "PodNamespace": "ml", "PodUID": "u-other", "Node": "n1"}
    assert (await client.post("/bind", data=orjson.dumps(body))).status == 200
    lines = buffer.getvalue().splitlines()
    assert lines, "nothing was logged"
    assert not any(line.startswith("2026-01-01") for line in lines), "a forged line was written"
    assert "\x1b" not in buffer.getvalue() and "\r" not in buffer.getvalue()
    filtered = [line for line in lines if " filter pod=" in line]
    assert len(filtered) == 1 and "\\n2026-01-01" in filtered[0]


def test_text_formatter_escapes_the_message_but_keeps_tracebacks() -> None:
    formatter = telemetry.TextFormatter()
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("t", logging.ERROR, __file__, 1, "pod %s", ("a\nb\u2028c",), None)
        record.exc_info = sys.exc_info()
    text = formatter.format(record)
    first, *rest = text.splitlines()
    assert first.endswith("pod a\\nb\\u2028c")
    assert rest and rest[0].startswith("Traceback")  # the traceback keeps its own lines
    assert telemetry.logfmt("a\nb") == '"a\\nb"' and telemetry.logfmt("plain") == "plain"
