"""The Grafana dashboard's queries over a real run, plotted (docs/grafana-queries.png).

Scope: what deploy/grafana/dra-topology-extender.json would show for one `serve` process in file
mode under a steady filter -> prioritize -> bind load: verb rate, verb latency p50/p99, bind
outcomes, pods placed per shape and method, resident memory, the device index and the kernels.
File mode has no watch and no leader election, so those panels are not in the plot.

How: `python -m loadtests.generate --fleet mixed` writes a cluster of `--nodes` nodes and pending
pods of every claim shape; `python -m extender serve --state` serves it. A client thread sends
each pending pod filter (every node), prioritize (the nodes that passed) and bind (the best
score) in turn, one call at a time, until `--seconds` passed or every pod was sent; meanwhile
`/metrics` is read every `--scrape` seconds. The plot computes from those scrapes what the
dashboard's PromQL computes: `rate()` as the counter's increase over a `--window` of scrapes
divided by its length, and `histogram_quantile()` with Prometheus' interpolation inside the
bucket (the upper bound of the highest finite bucket when the rank falls in +Inf).

CLI: `python -m bench.grafana_queries [--nodes 200] [--seconds 90] [--plot docs/grafana-queries.png]`.
"""

from __future__ import annotations

import argparse
import math
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parent.parent
READY_WITHIN_SECONDS = 600.0
Labels = tuple[tuple[str, str], ...]


@dataclass
class Scrape:
    """One /metrics read: seconds since the load started, and every sample by name and labels."""

    at: float
    samples: dict[tuple[str, Labels], float]

    def total(self, name: str, **match: str) -> float:
        return sum(
            value
            for (sample, labels), value in self.samples.items()
            if sample == name and all(dict(labels).get(k) == v for k, v in match.items())
        )

    def by(self, name: str, label: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for (sample, labels), value in self.samples.items():
            if sample == name:
                key = dict(labels).get(label, "")
                out[key] = out.get(key, 0.0) + value
        return out


@dataclass
class Run:
    scrapes: list[Scrape] = field(default_factory=list)
    calls: int = 0
    binds: int = 0
    errors: list[str] = field(default_factory=list)


def _get(url: str, body: bytes | None = None) -> bytes:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        data: bytes = response.read()
        return data


def _scrape(base: str, started: float) -> Scrape:
    text = _get(base + "/metrics").decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    return Scrape(time.monotonic() - started, samples)


def _drive(base: str, pods: list[dict[str, Any]], nodes: list[str], until: float, run: Run) -> None:
    for pod in pods:
        if time.monotonic() >= until:
            return
        meta = pod["metadata"]
        try:
            passed = orjson.loads(_get(base + "/filter", orjson.dumps({"Pod": pod, "NodeNames": nodes})))
            names = passed.get("NodeNames") or []
            run.calls += 1
            if not names:
                continue
            scores = orjson.loads(_get(base + "/prioritize", orjson.dumps({"Pod": pod, "NodeNames": names})))
            best = max(scores, key=lambda s: s["Score"])["Host"]
            bind = {
                "PodName": meta["name"],
                "PodNamespace": meta["namespace"],
                "PodUID": meta["uid"],
                "Node": best,
            }
            _get(base + "/bind", orjson.dumps(bind))
            run.calls += 2
            run.binds += 1
        except (OSError, urllib.error.URLError, ValueError) as exc:
            run.errors.append(f"{meta['name']}: {exc}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def measure(
    nodes: int, pods: int, seconds: float, scrape_every: float, seed: int
) -> tuple[Run, dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        subprocess.run(
            [
                *(sys.executable, "-m", "loadtests.generate", "--nodes", str(nodes), "--pods", str(pods)),
                *("--seed", str(seed), "--fleet", "mixed", "--out", str(out)),
            ],
            cwd=REPO,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        pending = [orjson.loads(line) for line in (out / "pods.jsonl").read_bytes().splitlines() if line]
        node_names = sorted(
            doc["metadata"]["name"]
            for doc in _yaml_documents(out / "cluster.yaml")
            if isinstance(doc, dict) and doc.get("kind") == "Node"
        )
        port = _free_port()
        base = f"http://127.0.0.1:{port}"
        argv = [sys.executable, "-m", "extender", "serve", "--state", str(out / "cluster.yaml")]
        argv += ["--listen", f"127.0.0.1:{port}", "--log-level", "warning"]
        process = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        run = Run()
        try:
            deadline = time.monotonic() + READY_WITHIN_SECONDS
            while True:
                try:
                    if b"dra_extender_kernels_compiled 1.0" in _get(base + "/metrics"):
                        break
                except (OSError, urllib.error.URLError):
                    pass
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError(f"serve did not become ready (exit code {process.poll()})")
                time.sleep(0.5)
            started = time.monotonic()
            until = started + seconds
            driver = threading.Thread(
                target=_drive, args=(base, pending, node_names, until, run), daemon=True
            )
            run.scrapes.append(_scrape(base, started))
            driver.start()
            while driver.is_alive():
                time.sleep(max(0.0, scrape_every - (time.monotonic() - started) % scrape_every))
                run.scrapes.append(_scrape(base, started))
        finally:
            process.terminate()
            process.wait(60)
        facts = {"nodes": nodes, "pending pods": len(pending), "seconds": seconds, "cpus": os.cpu_count()}
        return run, facts


def _yaml_documents(path: Path) -> list[Any]:
    import yaml

    with path.open() as handle:
        return list(yaml.safe_load_all(handle))


def histogram_quantile(q: float, buckets: dict[float, float]) -> float:
    """Prometheus' histogram_quantile over cumulative bucket counts {upper bound: count}."""
    bounds = sorted(buckets)
    if not bounds or bounds[-1] != math.inf or buckets[math.inf] <= 0:
        return math.nan
    rank = q * buckets[math.inf]
    previous_bound, previous_count = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if bound == math.inf:
                return bounds[-2] if len(bounds) > 1 else math.nan
            if count == previous_count:
                return bound
            return previous_bound + (bound - previous_bound) * (rank - previous_count) / (
                count - previous_count
            )
        previous_bound, previous_count = bound, count
    return math.nan


def _bucket_delta(newer: Scrape, older: Scrape, verb: str) -> dict[float, float]:
    out: dict[float, float] = {}
    name = "dra_extender_request_duration_seconds_bucket"
    for (sample, labels), value in newer.samples.items():
        found = dict(labels)
        if sample == name and found.get("verb") == verb:
            before = older.samples.get((sample, labels), 0.0)
            out[float(found["le"])] = value - before
    return out


def plot(run: Run, facts: dict[str, Any], path: Path, window: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scrapes = run.scrapes
    pairs = [(scrapes[i], scrapes[i - window]) for i in range(window, len(scrapes))]
    times = [new.at for new, _ in pairs]
    verbs = ("filter", "prioritize", "bind")
    fig, axes = plt.subplots(2, 3, figsize=(17, 9.5))
    ax = axes[0][0]
    for verb in verbs:
        rates = [
            (
                new.total("dra_extender_requests_total", verb=verb)
                - old.total("dra_extender_requests_total", verb=verb)
            )
            / (new.at - old.at)
            for new, old in pairs
        ]
        ax.plot(times, rates, label=verb)
    ax.set(title="Verb calls per second", xlabel="s", ylabel="calls/s")
    ax.legend()
    ax = axes[0][1]
    for verb in verbs:
        for q, style in ((0.5, "-"), (0.99, "--")):
            values = [1000 * histogram_quantile(q, _bucket_delta(new, old, verb)) for new, old in pairs]
            ax.plot(times, values, style, label=f"{verb} p{round(q * 100)}")
    ax.set(title="Verb latency p50 / p99", xlabel="s", ylabel="ms", yscale="log")
    ax.legend(fontsize=7)
    ax = axes[0][2]
    reasons = sorted(
        {r for s in scrapes for r, v in s.by("dra_extender_bind_outcomes_total", "reason").items() if v > 0}
    )
    for reason in reasons:
        rates = [
            (
                new.total("dra_extender_bind_outcomes_total", reason=reason)
                - old.total("dra_extender_bind_outcomes_total", reason=reason)
            )
            / (new.at - old.at)
            for new, old in pairs
        ]
        ax.plot(times, rates, label=reason)
    ax.set(title="Bind outcomes per second", xlabel="s", ylabel="binds/s")
    ax.legend()
    ax = axes[1][0]
    last, first = scrapes[-1], scrapes[0]
    placed: dict[str, float] = {}
    for (sample, labels), value in last.samples.items():
        if sample == "dra_extender_placed_pods_total":
            found = dict(labels)
            label = "\n".join(textwrap.wrap(found["shape"], 34)) + f" / {found['method']}"
            placed[label] = value - first.samples.get((sample, labels), 0.0)
    shown = sorted(placed.items(), key=lambda kv: kv[1])
    ax.barh([k for k, _ in shown], [v for _, v in shown])
    ax.tick_params(axis="y", labelsize=6)
    ax.set(title="Pods placed in the run, per shape / method", xlabel="pods")
    ax = axes[1][1]
    ax.plot([s.at for s in scrapes], [s.total("process_resident_memory_bytes") / 2**20 for s in scrapes])
    ax.set(title="Resident memory (process_resident_memory_bytes)", xlabel="s", ylabel="MiB")
    ax = axes[1][2]
    busy = [
        (new.total("dra_extender_kernel_seconds_total") - old.total("dra_extender_kernel_seconds_total"))
        / (new.at - old.at)
        for new, old in pairs
    ]
    ax.plot(times, busy, label="kernel busy (rate of kernel_seconds)")
    ax.plot(
        [s.at for s in scrapes],
        [s.total("dra_extender_kernels_compiled") for s in scrapes],
        label="kernels_compiled",
    )
    index = (
        f"index: {last.total('dra_extender_index_nodes'):.0f} nodes, "
        f"{last.total('dra_extender_index_device_rows'):.0f} device rows, "
        f"last build {last.total('dra_extender_index_last_build_seconds'):.2f} s"
    )
    ax.set(title="Kernels", xlabel=f"s\n{index}", ylim=(0, 1.1))
    ax.legend(fontsize=7)
    fig.suptitle(
        "dra-topology-extender: the dashboard's queries over one file-mode run "
        f"({facts['nodes']} mixed nodes, {run.binds} binds in {scrapes[-1].at:.0f} s, "
        f"{facts['cpus']} CPUs shared; rates over {window} scrapes)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.grafana_queries", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--nodes", type=int, default=200, help="mixed fleet size (default 200)")
    parser.add_argument("--pods", type=int, default=2000, help="pending pods to generate (default 2000)")
    parser.add_argument("--seconds", type=float, default=90.0, help="load duration (default 90)")
    parser.add_argument(
        "--scrape", type=float, default=5.0, help="seconds between /metrics reads (default 5)"
    )
    parser.add_argument("--window", type=int, default=3, help="scrapes per rate window (default 3)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--plot", type=Path, default=REPO / "docs" / "grafana-queries.png")
    args = parser.parse_args(argv)
    run, facts = measure(args.nodes, args.pods, args.seconds, args.scrape, args.seed)
    plot(run, facts, args.plot, args.window)
    last = run.scrapes[-1]
    print(f"{run.calls} verb calls, {run.binds} binds, {len(run.scrapes)} scrapes, {len(run.errors)} errors")
    print(
        "bind outcomes:",
        {k: v for k, v in last.by("dra_extender_bind_outcomes_total", "reason").items() if v},
    )
    for error in run.errors[:5]:
        print("  ", error)
    print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
