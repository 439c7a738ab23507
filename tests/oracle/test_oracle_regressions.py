"""Regression cases judged by upstream's allocator: tests/data/oracle-regressions/*.json.

Each file is one scenario on which our allocator once disagreed with upstream (found by a fuzz
run or by the differential test, shrunk), with `case.expected` the oracle's answer at the
version `provenance.judgedBy` names. The replay needs no oracle: our allocator and `/filter`
must give that answer, except where that answer itself shows a documented upstream defect
(docs/upstream-differences.md (c): an allocation that repeats a distinct value). A second test
asks the oracle again, so an expectation that no longer is upstream's answer fails instead of
pinning a stale one.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from extender.allocator.features import Features
from extender.core.assumed import AssumeCache
from extender.core.placement import Placement
from extender.pods import parse_pod
from tests.conformance.test_filter_matches_upstream import _state_and_pod
from tests.oracle import differences, judging
from tests.oracle.client import Oracle

DIRECTORY = Path(__file__).resolve().parents[1] / "data" / "oracle-regressions"
FILES = sorted(DIRECTORY.glob("*.json"))
# Findings not fixed yet: they fail visibly (strict xfail turns a fix into a reminder to drop them).
OPEN: dict[str, str] = {}


def _params(*, open_fails: bool = True) -> list[Any]:
    marks = {s: [pytest.mark.xfail(strict=True, reason=r)] for s, r in OPEN.items()} if open_fails else {}
    return [pytest.param(p, id=p.stem, marks=marks.get(p.stem, [])) for p in FILES]


# Far below the scheduler's 10 s filter timeout: upstream answers each of these in milliseconds.
SECONDS = 3.0


def _case(path: Path) -> dict[str, Any]:
    case: dict[str, Any] = json.loads(path.read_text())["case"]
    return case


def _version(path: Path) -> str:
    """The Kubernetes version whose oracle judged the case (`provenance.judgedBy`): ours answers as it."""
    judged_by = json.loads(path.read_text())["provenance"]["judgedBy"]
    return "1.37" if "v0.37." in judged_by else "1.36"


def _upstream_breaks_distinct(case: dict[str, Any], version: str) -> bool:
    """Upstream's stored allocation repeats a distinct value: docs/upstream-differences.md (c)."""
    expected = case["expected"]
    if expected["status"] == "allocated":
        return differences.distinct_broken(case, expected["allocations"])
    return differences.distinct_error_later(case, judging.ours(case, version), expected)


@pytest.mark.parametrize("path", _params())
def test_allocator_gives_upstreams_answer(path: Path) -> None:
    """Our allocator answers as upstream did, devices included, in bounded time."""
    case, version = _case(path), _version(path)
    started = time.monotonic()
    got = judging.ours(case, version)
    assert time.monotonic() - started < SECONDS
    if _upstream_breaks_distinct(case, version):
        # We do not copy (c): ours finds a truly distinct set, none, or refuses an earlier device.
        assert got["status"] != "allocated" or not differences.distinct_broken(case, got["allocations"])
    else:
        assert judging.difference(got, case["expected"]) == ""


# An open case may still pass /filter (an error and "unschedulable" both fail the node).
@pytest.mark.parametrize("path", _params(open_fails=False))
def test_filter_gives_upstreams_verdict(path: Path) -> None:
    """/filter passes the node exactly when upstream allocates on it, in bounded time."""
    case, version = _case(path), _version(path)
    state, pod = _state_and_pod(case)
    features = Features.from_conformance(case["features"], version)
    placement = Placement(state, features=features, assumed=AssumeCache())
    node = case["node"]["metadata"]["name"]
    started = time.monotonic()
    verdict = placement.filter(parse_pod(pod), [node])
    assert time.monotonic() - started < SECONDS
    assert verdict.error == ""
    if _upstream_breaks_distinct(case, version):
        ours = judging.ours(case, version)
        if ours["status"] == "error":
            assert ours["error"] in verdict.unresolvable.get(node, ""), verdict
        assert verdict.passed == ([node] if ours["status"] == "allocated" else []), verdict
    elif case["expected"]["status"] == "allocated":
        assert verdict.passed == [node], verdict
    else:
        assert verdict.passed == [], verdict


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_expectation_is_still_upstreams(path: Path, request: pytest.FixtureRequest) -> None:
    """The stored answer is what the oracle of the recorded version says today."""
    oracle: Oracle = request.getfixturevalue({"1.36": "oracle", "1.37": "oracle_137"}[_version(path)])
    document = json.loads(path.read_text())
    assert oracle.version in document["provenance"]["judgedBy"]
    answer = judging.upstream(oracle.judge(document["case"]))
    assert judging.difference(answer, document["case"]["expected"]) == ""


def test_regressions_present() -> None:
    """The five fuzz findings of issue 20 are kept (the directory never silently empties)."""
    assert len(FILES) >= 5
