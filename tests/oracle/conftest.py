"""The oracle processes, one per Kubernetes version, shared by the session.

`tests.gobuild` builds a missing binary (Go and the module proxy are needed once; later runs use
the cache), so a fresh clone runs these tests with nothing prepared beforehand.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.oracle.client import Oracle, binary


@pytest.fixture(scope="session")
def oracle() -> Iterator[Oracle]:
    """Upstream's allocator of Kubernetes 1.36 (k8s.io/dynamic-resource-allocation v0.36.x)."""
    with Oracle(binary("1.36")) as running:
        yield running


@pytest.fixture(scope="session")
def oracle_137() -> Iterator[Oracle]:
    """Upstream's allocator of Kubernetes 1.37 (v0.37.x)."""
    with Oracle(binary("1.37")) as running:
        yield running


@dataclass
class Stats:
    """What the differential test judged, for the summary line (written by the test only)."""

    cases: int = 0
    seconds: float = 0.0
    slowest: float = 0.0  # our allocator's longest answer, seconds
    by_status: dict[str, int] = field(default_factory=dict)
    known: dict[str, int] = field(default_factory=dict)
    picked_differs: dict[str, int] = field(default_factory=dict)
    picked_examples: list[str] = field(default_factory=list)


#: Per Kubernetes version judged.
STATS: dict[str, Stats] = {}


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for version, stats in STATS.items():
        if not stats.cases:
            continue
        terminalreporter.write_line(
            f"oracle differential {version}: {stats.cases} cases judged in {stats.seconds:.1f} s (wall, "
            f"slowest allocation {stats.slowest:.2f} s) "
            f"(upstream: {stats.by_status}; documented differences: {stats.known or 'none'}; "
            f"the scheduler's implementation answered otherwise: {stats.picked_differs or 'never'})"
        )
        for example in stats.picked_examples:
            terminalreporter.write_line(f"  {example}")
