"""Fixtures for the deploy tests: the metric names a running extender exports (one run per session)."""

from __future__ import annotations

import pytest

from tests.deploy import promql


@pytest.fixture(scope="session")
def exported_metrics() -> set[str]:
    """Names a running extender exports after filter, prioritize and a bind (`promql` says how)."""
    return promql.exported_metric_names(promql.scrape_running_extender())
