"""Fixtures of the end-to-end suite: one real control plane per session (etcd, kube-apiserver,
kube-controller-manager, Jaeger) with the sample fleet published, and kube-scheduler plus the
extender started in the mode a test asks for.

The binaries come from `tests.gobuild` (`.ci/run` builds them first; a missing one is built here,
which takes long on a cold cache but never skips). `DRA_E2E_KEEP=1` keeps the work directory
(logs of every component) after the session.

Every test runs once per Kubernetes version of `DRA_E2E_KUBERNETES` (default `1.36,1.37`: both
control planes, one after the other; `DRA_E2E_KUBERNETES=1.37` runs one). A test that is about one
version's behaviour says so with `@pytest.mark.kubernetes("1.37")`; it is deselected (not skipped)
for the other version.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import objects
from tests.e2e.cluster import KUBERNETES_VERSIONS, ControlPlane

ALLOCATOR_SCHEDULER = "dra-topology-scheduler"
DEFAULT_SCHEDULER = "default-scheduler"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "kubernetes(*versions): run only against these Kubernetes versions' control planes"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the version-specific tests of the other versions (reported as deselected)."""
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        marker = item.get_closest_marker("kubernetes")
        callspec = getattr(item, "callspec", None)
        version = callspec.params.get("plane") if callspec is not None else None
        if marker is not None and version is not None and version not in marker.args:
            dropped.append(item)
        else:
            keep.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture(scope="session", params=KUBERNETES_VERSIONS, ids=lambda v: f"k8s-{v}")
def plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """The control plane of one Kubernetes version (the fixture's parameter)."""
    work = Path(tempfile.mkdtemp(prefix=f"dra-e2e-{request.param}-"))
    control = ControlPlane(work, request.param)
    try:
        control.start()
        objects.publish(control.kube, objects.sample_fleet())
        yield control
    finally:
        control.stop()
        if os.environ.get("DRA_E2E_KEEP"):
            print(f"\nend-to-end logs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def wait_until(what: str, check: Callable[[], Any], timeout: float = 60.0, every: float = 0.25) -> Any:
    """Poll until `check()` returns something truthy; return it, or fail naming `what`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"{what}: not within {timeout:.0f} s (last: {last!r})")


@pytest.fixture
def pods(plane: ControlPlane) -> Iterator[list[dict[str, Any]]]:
    """Pods a test creates (append the created objects); deleted at the end, and their claims'
    devices waited free, so the next test finds the fleet as it was."""
    created: list[dict[str, Any]] = []
    yield created
    for p in created:
        objects.delete(plane.kube, "Pod", p["metadata"]["name"], p["metadata"]["namespace"])

    def all_free() -> bool:
        return not any(
            c.get("status", {}).get("allocation") for c in objects.list_of(plane.kube, "ResourceClaim")
        )

    wait_until("every claim deallocated after the test's pods were deleted", all_free, timeout=60)
