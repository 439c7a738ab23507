"""Plot filter, prioritize and bind latency against cluster size from `bench.filter_bench --json` output.

Scope: reads one or more JSON reports of `bench/filter_bench.py` (several files are merged; a
later file's figures replace an earlier one's for the same mode and size) and draws p50 (solid)
and p99 (dashed) of filter, prioritize, filter+prioritize and bind against the number of nodes,
both axes logarithmic, one panel in-process and one over HTTP (when the reports have HTTP rows).
The prioritize p99 targets of the topology issue (5 ms at 500 nodes, 30 ms at 5,000) are marked.
It measures nothing itself.

CLI: `python -m bench.plot_benchmarks /tmp/bench.json --out docs/benchmarks.png`
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: Verbs drawn, with their colours; a mode is "<in-process|HTTP> <verb>".
VERBS: dict[str, str] = {
    "filter": "tab:blue",
    "prioritize": "tab:orange",
    "filter+prioritize": "tab:green",
    "bind": "tab:red",
}
PANELS = ("in-process", "HTTP")
#: (nodes, p99 ms) targets for prioritize on one core, from the topology issue.
TARGETS = ((500, 5.0), (5000, 30.0))

Series = dict[str, dict[int, tuple[float, float]]]  # mode -> nodes -> (p50, p99)


def load(paths: Sequence[Path]) -> tuple[Series, list[dict[str, Any]]]:
    """Per mode and cluster size the (p50, p99) in ms, and the reports themselves."""
    series: Series = {}
    reports = []
    for path in paths:
        report = json.loads(path.read_text())
        reports.append(report)
        for cluster in report["clusters"]:
            for result in cluster["results"]:
                series.setdefault(result["mode"], {})[cluster["nodes"]] = (result["p50_ms"], result["p99_ms"])
    return series, reports


def plot(series: Series, reports: list[dict[str, Any]], out: Path) -> Path:
    """Draw the figure (see the module docstring) into `out` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    panels = [p for p in PANELS if any(mode.startswith(f"{p} ") for mode in series)]
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 5.0), sharey=True, squeeze=False)
    sizes = sorted({n for by_size in series.values() for n in by_size})
    for ax, panel in zip(axes[0], panels, strict=True):
        for verb, colour in VERBS.items():
            points = series.get(f"{panel} {verb}")
            if not points:
                continue
            xs = sorted(points)
            ax.plot(xs, [points[x][0] for x in xs], "-o", color=colour, label=f"{verb} p50", ms=4)
            ax.plot(xs, [points[x][1] for x in xs], "--s", color=colour, label=f"{verb} p99", ms=4)
        ax.plot(
            [n for n, _ in TARGETS],
            [ms for _, ms in TARGETS],
            "kv",
            ms=8,
            linestyle="none",
            label="prioritize p99 target",
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(sizes)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}"))
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda x, _: ""))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
        ax.set_xlabel("nodes in the cluster (every call asks about all of them)")
        ax.set_title(
            f"{panel}: serial calls, one connection" if panel == "HTTP" else f"{panel}: serial calls"
        )
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("latency per call, ms (log)")
    axes[0][-1].legend(fontsize=8, loc="upper left", ncol=2)
    machine = reports[-1].get("machine", {}) if reports else {}
    pinned = reports[-1].get("pinned_cpu") if reports else None
    where = f"{machine.get('cpu', '?')}, {machine.get('implementation', '')} {machine.get('python', '')}"
    where += f", pinned to one CPU ({pinned})" if pinned is not None else ""
    commands = "; ".join(r.get("command", "") for r in reports)
    fig.suptitle(f"DRA extender latency vs cluster size: {where}", fontsize=11)
    fig.text(0.5, 0.005, commands, ha="center", va="bottom", fontsize=7, family="monospace")
    fig.tight_layout(rect=(0, 0.04, 1, 0.96))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.plot_benchmarks", description=__doc__.splitlines()[0]
    )
    parser.add_argument("reports", type=Path, nargs="+", help="JSON files written by filter_bench --json")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks.png"), help="PNG to write")
    args = parser.parse_args(argv)
    series, reports = load(args.reports)
    if not series:
        parser.error("no results in the given reports")
    print(f"wrote {plot(series, reports, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
