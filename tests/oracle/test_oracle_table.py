"""The oracle itself: upstream's allocator, run by tests/oracle/main.go, on upstream's own table.

tests/data/conformance holds the 210 cases of upstream's allocator test table (v0.36.2, with
the answers upstream's test produced). The 1.36 oracle (v0.36.3) must give those answers, which
shows that the oracle feeds the allocator what upstream's test feeds it (objects, defaults,
allocated state, features, implementation). The cases it cannot give are listed with why.

The 1.37 oracle (v0.37.2) answers the same cases; where 1.37 changed the outcome the case is
listed with the change, so this file is also the record of what Kubernetes 1.37 does
differently on the 1.36 table (issue 20, item 4 needs it).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.conformance.test_dumped_tables import LOSSY_137, TABLE_137
from tests.conformance.test_upstream_allocator_cases import CASES
from tests.oracle import judging
from tests.oracle.client import Oracle

# Not expressible as a JSON scenario, or worded by the test's fake lister: the same for 1.36 and 1.37.
HARNESS = {
    "interrupt/cancel": "the table's test cancels the context; a scenario cannot",
    "interrupt/deadline": "the table's test sets an expired deadline; a scenario cannot",
    "interrupt/timeout": "the table's test times out the context; a scenario cannot",
    "no-classes": "the table's fake lister words not-found as ' \"not found\" not found'",
    "unknown-class": "the table's fake lister words not-found differently (as no-classes)",
}
CHANGED_IN_137 = {
    "all-devices-invalid-CEL": "the device-count limit is checked per request while adding",
    "too-many-devices-single-request": "the device-count limit is checked per request while adding",
    "too-many-devices-total": "the device-count limit is checked per request while adding",
    "consumable-capacity-multi-allocatable-device-allocation-mode-all-in-use-insufficient": "unschedulable",
    "list-attributes-disabled-distinct-constraint-with-lists": "no CEL error for a list: unschedulable",
    "list-attributes-disabled-match-constraint-with-lists": "no CEL error for a list: unschedulable",
    "list-attributes-distinct-constaint-with-empty-or-unknown-type": "CEL runtime errors name the device",
    "list-attributes-match-constaint-with-empty-or-unknown-type": "CEL runtime errors name the device",
    "with-distinct-constraints-unknown-type-attribute": "CEL runtime errors name the device",
    "prioritized-list-class-config": "a config that covers every request has no `requests` list",
    "prioritized-list-device-config": "a config that covers every request has no `requests` list",
    "with-class-device-config": "a config that covers every request has no `requests` list",
}


TABLE_137_CASES = [json.loads(line) for line in TABLE_137.read_text().splitlines()]


def _name(case: dict[str, Any]) -> str:
    return re.sub(r"^TestDump/", "", case["name"])


def _disagreements(oracle: Oracle) -> dict[str, str]:
    out = {}
    for case in CASES:
        answer = judging.upstream(oracle.judge({**case, "implementation": "experimental"}))
        why = judging.difference(answer, case["expected"])
        if why:
            out[_name(case)] = why
    return out


def test_oracle_136_reproduces_upstreams_table(oracle: Oracle) -> None:
    """v0.36.3 answers the v0.36.2 table as upstream's own test did, but for the harness cases."""
    assert oracle.version.startswith("v0.36.")
    assert set(_disagreements(oracle)) == set(HARNESS)


@pytest.mark.parametrize("version_fixture", ["oracle_137"])
def test_oracle_137_changes_are_the_known_ones(version_fixture: str, request: pytest.FixtureRequest) -> None:
    """v0.37.2 differs from the 1.36 table exactly where 1.37 changed the outcome."""
    oracle: Oracle = request.getfixturevalue(version_fixture)
    assert oracle.version.startswith("v0.37.")
    assert set(_disagreements(oracle)) == set(HARNESS) | set(CHANGED_IN_137)


def test_137_lossy_dumps_agree_with_the_oracle(oracle_137: Oracle) -> None:
    """Where the v0.37.2 dump lost information (test_dumped_tables.LOSSY_137), ours answers the
    dumped JSON as the 1.37 oracle does, devices and error text included."""
    lossy = [c for c in TABLE_137_CASES if _name(c) in LOSSY_137]
    assert len(lossy) == len(LOSSY_137)
    for case in lossy:
        answer = judging.upstream(oracle_137.judge({**case, "implementation": "experimental"}))
        assert judging.difference(answer, case["expected"]) != "", "no longer lossy: drop it from the list"
        assert judging.difference(judging.ours(case, "1.37"), answer) == "", _name(case)
