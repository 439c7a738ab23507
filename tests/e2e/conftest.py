"""Fixtures of the end-to-end suite: one real control plane per session (etcd, kube-apiserver,
kube-controller-manager, Jaeger) with the sample fleet published, and kube-scheduler plus the
extender started in the mode a test asks for.

The binaries come from `tests.gobuild` (`.ci/run` builds them first; a missing one is built here,
which takes long on a cold cache but never skips). `DRA_E2E_KEEP=1` keeps the work directory
(logs of every component) after the session.

Every test runs once per Kubernetes version of `DRA_E2E_KUBERNETES` (default `1.36,1.37`: both
control planes, one after the other; `DRA_E2E_KUBERNETES=1.37` runs one). A test that is about one
version's behaviour says so with `@pytest.mark.kubernetes("1.37")`; it is deselected (not skipped)
for the other version. A test of the extender's own machinery against the API server (its
watch, its Lease), which no version changes, carries `@pytest.mark.first_version_only`: it runs
against the first version of `DRA_E2E_KUBERNETES` only (1.36 in CI; CI's time is counted).
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.e2e import objects
from tests.e2e.cluster import KUBERNETES_VERSIONS, ControlPlane, object_path, running

ALLOCATOR_SCHEDULER = "dra-topology-scheduler"
DEFAULT_SCHEDULER = "default-scheduler"
#: The extender replicas' Lease (in the extender's namespace).
EXTENDER_LEASE = "dra-topology-extender"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "kubernetes(*versions): run only against these Kubernetes versions' control planes"
    )
    config.addinivalue_line(
        "markers",
        "first_version_only: the extender's own machinery, the same at every version: run against "
        "the first version of DRA_E2E_KUBERNETES only",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the version-specific tests of the other versions, and the first-version-only
    ones of the later versions (reported as deselected)."""
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        marker = item.get_closest_marker("kubernetes")
        callspec = getattr(item, "callspec", None)
        version = callspec.params.get("plane") if callspec is not None else None
        first_only = item.get_closest_marker("first_version_only") is not None
        if version is not None and (
            (marker is not None and version not in marker.args)
            or (first_only and version != KUBERNETES_VERSIONS[0])
        ):
            dropped.append(item)
        else:
            keep.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture(scope="session", params=KUBERNETES_VERSIONS, ids=lambda v: f"k8s-{v}")
def plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """The control plane of one Kubernetes version (the fixture's parameter)."""
    with running(version=request.param) as control:
        objects.publish(control.kube, objects.sample_fleet())
        yield control


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


def lease_holder(plane: ControlPlane) -> str:
    """The identity holding the extender's Lease ('' when none)."""
    lease = plane.kube.request(
        "GET", object_path("Lease", EXTENDER_LEASE, plane.extender_namespace), ok=(200, 404)
    )
    return str((lease or {}).get("spec", {}).get("holderIdentity") or "")


def replica_of(plane: ControlPlane, identity: str) -> str:
    """Which replica process (allocator-ha) has `identity`: each logs its candidate identity at start."""
    for name in ("extender-a", "extender-b"):
        log = (plane.work / f"{name}.log").read_text(errors="replace")
        if re.search(rf"candidate {re.escape(identity)}\b", log):
            return name
    raise AssertionError(f"no replica logged identity {identity!r}")


def failed_scheduling(plane: ControlPlane, namespace: str, names: set[str]) -> list[tuple[str, str]]:
    """(pod, message) of each FailedScheduling event kube-scheduler recorded on the pods `names`."""
    events = plane.kube.get(f"/api/v1/namespaces/{namespace}/events")["items"]
    return [
        (e["involvedObject"]["name"], str(e.get("message", "")))
        for e in events
        if e.get("reason") == "FailedScheduling" and e["involvedObject"].get("name") in names
    ]


def filter_calls(plane: ControlPlane, names: set[str]) -> Counter[str]:
    """/filter calls per pod of `names`, counted from the extender's spans in Jaeger (one trace
    per call, with the pod's name; every replica exports to the same Jaeger). Spans arrive in
    batches: waits until every pod has at least one."""

    def counted() -> Counter[str]:
        calls: Counter[str] = Counter()
        for trace in plane.jaeger_traces("dra-topology-extender", "filter", limit=20000):
            for span in trace["spans"]:
                tags = {t["key"]: t["value"] for t in span.get("tags", [])}
                if span["operationName"] == "filter" and tags.get("k8s.pod.name") in names:
                    calls[tags["k8s.pod.name"]] += 1
        return calls

    def complete() -> Counter[str] | None:
        calls = counted()
        return calls if names <= set(calls) else None

    result: Counter[str] = wait_until("Jaeger has a filter span of every pod", complete, 30, 1.0)
    return result


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
