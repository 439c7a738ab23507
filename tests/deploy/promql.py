"""What the rule and dashboard tests share: promtool, Prometheus' PromQL parser, the expressions
of deploy/prometheus and deploy/grafana, and the metric names a running extender exports.

- `promtool()` and `metric_names()` run the programs `python -m tests.gobuild promtool` builds
  (promtool and `promqlnames`, our Go helper over Prometheus' own parser).
- `rule_expressions()` and `dashboard_expressions()` list every PromQL expression of the two
  files with where it comes from; Grafana's interval variables are replaced by a duration
  (`$__rate_interval` -> 5m) so the parser sees what Grafana sends; the dashboard's own
  variables sit inside label matcher strings, where they are plain text to the parser.
- `exported_metric_names()` runs `python -m extender serve --kube --leader-elect` against the
  fake API server with the sample cluster, becomes leader, answers filter, prioritize and a
  successful bind, and reads `/metrics`: every sample name, plus the name of each family that
  is declared (`# TYPE`) without samples. The only such family is
  `dra_extender_memory_limit_bytes` when the process has no cgroup memory limit (its sample
  needs one; tests/telemetry/test_operations_metrics.py covers the limited case).
"""

from __future__ import annotations

import copy
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml
from prometheus_client.parser import text_string_to_metric_families

from extender.cluster.sample import sample_objects
from extender.explaining import load_pods
from tests import gobuild
from tests.fakeapi.server import FakeApiServer

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "dra-topology-extender.rules.yaml"
RULE_TESTS = REPO / "deploy" / "prometheus" / "tests"
DASHBOARD = REPO / "deploy" / "grafana" / "dra-topology-extender.json"
OPERATIONS = REPO / "docs" / "operations.md"
PODS_FILE = REPO / "tests" / "data" / "pipeline_pods.yaml"
#: Generous: a first start in a fresh environment compiles the numba kernels.
READY_WITHIN_SECONDS = 180.0
#: What Grafana puts in place of its interval variables (any valid duration parses alike).
GRAFANA_DURATIONS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}
#: `label_values(<selector>, <label>)`: a dashboard variable's query (not PromQL itself).
LABEL_VALUES = re.compile(r"^\s*label_values\((?P<selector>.+),\s*(?P<label>[A-Za-z_]\w*)\s*\)\s*$")


def promtool(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """Run promtool (built by tests/gobuild.py) and return what it did."""
    binary = gobuild.binaries("promtool")["promtool"]
    return subprocess.run([str(binary), *args], cwd=cwd, capture_output=True, text=True, timeout=300)


@dataclass(frozen=True)
class Parsed:
    """Prometheus' parser on one expression: the metrics it selects, or its error."""

    expr: str
    metrics: tuple[str, ...]
    error: str


def metric_names(expressions: list[str]) -> list[Parsed]:
    """Parse each expression with Prometheus' parser (the `promqlnames` helper)."""
    binary = gobuild.binaries("promtool")["promqlnames"]
    done = subprocess.run(
        [str(binary)], input=orjson.dumps(expressions), capture_output=True, timeout=120, check=True
    )
    return [
        Parsed(item["expr"], tuple(item.get("metrics") or ()), item.get("error", ""))
        for item in orjson.loads(done.stdout)
    ]


def rule_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(RULES.read_text())["groups"]
    return groups


def rule_expressions() -> list[tuple[str, str]]:
    """(record or alert name, expression) of every rule."""
    return [(rule.get("record") or rule["alert"], rule["expr"]) for g in rule_groups() for rule in g["rules"]]


def recorded_names() -> set[str]:
    return {rule["record"] for g in rule_groups() for rule in g["rules"] if "record" in rule}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = orjson.loads(DASHBOARD.read_bytes())
    return loaded


def panels(model: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, including those inside (collapsed) rows."""
    for panel in model.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def for_parser(expr: str) -> str:
    """The expression with Grafana's interval variables replaced by durations."""
    for variable, duration in GRAFANA_DURATIONS.items():
        expr = expr.replace(variable, duration)
    return expr


def dashboard_expressions(model: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, expression) of every panel target and every `label_values` variable query."""
    found = []
    for panel in panels(model):
        for target in panel.get("targets", []):
            found.append((f"panel {panel['title']!r} target {target.get('refId')}", target.get("expr", "")))
    for variable in model.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
        match = LABEL_VALUES.match(query)
        # A query that is not label_values(...) is handed over whole: it must then be PromQL.
        found.append((f"variable {variable['name']}", match.group("selector") if match else query))
    return found


def exported_metric_names(exposition: str) -> set[str]:
    """Sample names of a /metrics text, plus each family declared without samples."""
    names: set[str] = set()
    for family in text_string_to_metric_families(exposition):
        names.update(sample.name for sample in family.samples)
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            name = line.split(" ")[2]
            if not any(n == name or n.startswith(name + "_") for n in names):
                names.add(name)  # declared, no sample (the memory limit without a cgroup limit)
    return names


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _request(url: str, body: bytes | None = None) -> tuple[int, bytes]:
    try:
        request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _wait_for(base: str, process: subprocess.Popen[bytes], check: str, what: str) -> None:
    deadline = time.monotonic() + READY_WITHIN_SECONDS
    while time.monotonic() < deadline and process.poll() is None:
        try:
            status, body = _request(base + "/metrics")
        except OSError:
            status, body = 0, b""
        if status == 200 and check in body.decode():
            return
        time.sleep(0.2)
    raise AssertionError(f"extender not {what} within {READY_WITHIN_SECONDS} s; exit code {process.poll()}")


def scrape_running_extender() -> str:
    """/metrics of `serve --kube --leader-elect` after filter, prioritize and a successful bind."""
    pod = copy.deepcopy(next(p for p in load_pods(PODS_FILE) if p["metadata"]["name"] == "gpu-training"))
    with FakeApiServer(bookmark_interval=0.2) as api, tempfile.TemporaryDirectory() as tmp:
        api.put_objects(copy.deepcopy(sample_objects()))
        api.put_object(pod)
        port = _free_port()
        base = f"http://127.0.0.1:{port}"
        argv = [sys.executable, "-m", "extender", "serve", "--kube", "--leader-elect"]
        argv += ["--leader-lease-namespace", "default", "--listen", f"127.0.0.1:{port}"]
        kubeconfig = api.write_kubeconfig(Path(tmp) / "kubeconfig")
        argv += ["--kubeconfig", str(kubeconfig), "--log-level", "warning"]
        process = subprocess.Popen(
            argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ}
        )
        try:
            _wait_for(base, process, "dra_extender_ready 1.0", "ready")
            _wait_for(base, process, "dra_extender_leader 1.0", "leader")
            nodes = ["h100-node-01", "l40s-node-01", "cpu-node-01"]
            args = orjson.dumps({"Pod": pod, "NodeNames": nodes})
            status, body = _request(base + "/filter", args)
            assert status == 200 and orjson.loads(body)["NodeNames"] == ["h100-node-01"], body
            status, body = _request(base + "/prioritize", orjson.dumps({"Pod": pod, "NodeNames": nodes[:1]}))
            assert status == 200, body
            meta = pod["metadata"]
            bind = {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"]}
            status, body = _request(base + "/bind", orjson.dumps({**bind, "Node": "h100-node-01"}))
            assert status == 200 and orjson.loads(body)["Error"] == "", body
            status, body = _request(base + "/metrics")
            assert status == 200
            return body.decode()
        finally:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stderr is not None:
                process.stderr.close()
