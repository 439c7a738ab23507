"""deploy/prometheus: the rule file as Prometheus reads it (`promtool check rules`), its unit
tests (`promtool test rules`, a firing and a silent case per alert), what every alert carries
(severity, summary, description, a runbook section in docs/operations.md), and that every
metric its expressions read is exported by a running extender (tests/deploy/promql.py)."""

from __future__ import annotations

import re

import yaml

from tests.deploy import promql


def test_promtool_checks_the_rule_file():
    done = promql.promtool("check", "rules", str(promql.RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    rules = sum(len(g["rules"]) for g in promql.rule_groups())
    assert f"SUCCESS: {rules} rules found" in done.stdout


def test_promtool_unit_tests_pass():
    files = sorted(promql.RULE_TESTS.glob("*.yaml"))
    assert files
    done = promql.promtool("test", "rules", *map(str, files))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def _alerts() -> list[dict]:
    return [rule for g in promql.rule_groups() for rule in g["rules"] if "alert" in rule]


def test_every_alert_has_a_firing_and_a_silent_unit_test():
    cases: dict[str, list[list]] = {}
    for path in promql.RULE_TESTS.glob("*.yaml"):
        for group in yaml.safe_load(path.read_text())["tests"]:
            for case in group.get("alert_rule_test", []):
                cases.setdefault(case["alertname"], []).append(case.get("exp_alerts") or [])
    names = [a["alert"] for a in _alerts()]
    assert len(names) == len(set(names)) >= 13
    for name in names:
        assert any(expected for expected in cases.get(name, [])), f"{name}: no case where it fires"
        assert any(not expected for expected in cases.get(name, [])), f"{name}: no case where it stays silent"
    assert set(cases) <= set(names), "unit tests of alerts the rule file does not have"


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_alert_has_severity_annotations_and_a_runbook_section():
    lines = promql.OPERATIONS.read_text().splitlines()
    headings = {_anchor(line.lstrip("#")) for line in lines if line.startswith("#")}
    for alert in _alerts():
        name = alert["alert"]
        assert alert["labels"]["severity"] in ("warning", "critical"), name
        annotations = alert["annotations"]
        assert annotations["summary"] and annotations["description"], name
        path, _, anchor = annotations["runbook"].partition("#")
        assert path == "docs/operations.md", name
        assert anchor in headings, f"{name}: docs/operations.md has no section #{anchor}"


def test_rules_read_only_metrics_the_extender_exports(exported_metrics):
    """Every metric a rule reads is exported by the running extender, or recorded by a rule here."""
    recorded = promql.recorded_names()
    expressions = promql.rule_expressions()
    parsed = promql.metric_names([expr for _, expr in expressions])
    used: set[str] = set()
    for (name, _), result in zip(expressions, parsed, strict=True):
        assert not result.error, f"{name}: {result.error}"
        assert result.metrics, name
        used.update(result.metrics)
    missing = sorted(used - recorded - exported_metrics)
    assert not missing, f"rules read metrics the extender does not export: {missing}"
    # The alerts the issue asks for each read their signal.
    for needed in (
        "dra_extender_ready",
        "dra_extender_leader",
        "dra_extender_filter_errors_total",
        "dra_extender_bind_outcomes_total",
        "dra_extender_watch_last_event_age_seconds",
        "dra_extender_watch_relists_total",
        "dra_extender_request_duration_seconds_bucket",
        "process_resident_memory_bytes",
        "dra_extender_memory_limit_bytes",
    ):
        assert needed in used, needed
