"""deploy/grafana: the dashboard's JSON model (templated data source, panel layout), every PromQL
expression in it parsed by Prometheus' own parser, and every metric it names exported by a
running extender (tests/deploy/promql.py)."""

from __future__ import annotations

from tests.deploy import promql

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def test_the_data_source_is_a_variable_every_panel_and_target_uses():
    model = promql.dashboard()
    variables = {v["name"]: v for v in model["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("namespace", "job", "instance"):
        assert variables[name]["datasource"] == DATASOURCE, name
    for panel in promql.panels(model):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
            assert target["expr"].strip(), panel["title"]


def test_panels_have_unique_ids_and_fit_the_grid():
    model = promql.dashboard()
    ids = [p["id"] for p in promql.panels(model)]
    assert len(ids) == len(set(ids))
    occupied: set[tuple[int, int]] = set()
    for panel in promql.panels(model):
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {(grid["x"] + dx, grid["y"] + dy) for dx in range(grid["w"]) for dy in range(grid["h"])}
        assert not cells & occupied, f"{panel['title']} overlaps another panel"
        occupied |= cells
        assert panel.get("title") and (panel["type"] == "row" or panel.get("description")), panel


def test_every_expression_parses_and_names_only_exported_metrics(exported_metrics):
    model = promql.dashboard()
    found = promql.dashboard_expressions(model)
    parsed = promql.metric_names([promql.for_parser(expr) for _, expr in found])
    used: set[str] = set()
    for (where, expr), result in zip(found, parsed, strict=True):
        assert not result.error, f"{where}: {expr!r}: {result.error}"
        assert result.metrics, where
        used.update(result.metrics)
    missing = sorted(used - exported_metrics)
    assert not missing, f"the dashboard reads metrics the extender does not export: {missing}"
    # The panels the issue asks for: verb rate and latency, bind outcomes, pods placed per shape
    # and method, index size and build time, watch lag and relists, kernel warm-up, leader, RSS.
    for needed in (
        "dra_extender_requests_total",
        "dra_extender_request_duration_seconds_bucket",
        "dra_extender_bind_outcomes_total",
        "dra_extender_placed_pods_total",
        "dra_extender_index_nodes",
        "dra_extender_index_device_rows",
        "dra_extender_index_build_seconds_total",
        "dra_extender_watch_last_event_age_seconds",
        "dra_extender_watch_relists_total",
        "dra_extender_kernels_compiled",
        "dra_extender_leader",
        "process_resident_memory_bytes",
    ):
        assert needed in used, needed


def test_a_bad_expression_is_reported_by_the_parser():
    """The parser check can fail: a Grafana variable outside a string, an unknown function."""
    results = promql.metric_names(["rate(x_total[$__rate_interval])", "nofunc(x)", "sum(rate(x_total[5m]))"])
    assert results[0].error and results[1].error
    assert not results[2].error and results[2].metrics == ("x_total",)
