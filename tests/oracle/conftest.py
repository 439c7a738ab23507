"""The oracle processes, one per Kubernetes version, shared by the session.

`tests.gobuild` builds a missing binary (Go and the module proxy are needed once; later runs use
the cache), so a fresh clone runs these tests with nothing prepared beforehand.
"""

from __future__ import annotations

from collections.abc import Iterator

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
