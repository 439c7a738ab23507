"""bench/grafana_queries.py computes the dashboard's histogram_quantile as Prometheus does: the
expected values are what promtool itself evaluated for the same buckets in
deploy/prometheus/tests/dra-topology-extender.test.yaml (group "latency")."""

from __future__ import annotations

import math

import pytest

from bench.grafana_queries import histogram_quantile


@pytest.mark.parametrize(
    ("buckets", "expected"),
    [
        ({0.01: 98, 2.5: 98, 5.0: 98, 10.0: 100, math.inf: 100}, 7.5),  # promtool: filter p99
        ({0.01: 97, 2.5: 97, 5.0: 100, 10.0: 100, math.inf: 100}, 4.1667),  # promtool: bind p99
        ({0.01: 100, math.inf: 100}, 0.0099),  # promtool: prioritize p99
    ],
)
def test_p99_matches_promtool(buckets: dict[float, float], expected: float) -> None:
    assert histogram_quantile(0.99, buckets) == pytest.approx(expected, abs=1e-4)


def test_rank_in_the_inf_bucket_is_the_highest_finite_bound_and_empty_is_nan() -> None:
    assert histogram_quantile(0.5, {0.1: 0, 1.0: 0, math.inf: 5}) == 1.0
    assert math.isnan(histogram_quantile(0.5, {0.1: 0, math.inf: 0}))
