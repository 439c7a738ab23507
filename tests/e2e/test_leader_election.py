"""Two extender replicas with Lease leader election behind one address (as deploy/ runs them):
the leader is killed while the real kube-scheduler is binding a batch of pods; the other replica
takes the Lease and binds the rest; every pod ends bound with its claims allocated, and no device
is allocated twice."""

from __future__ import annotations

import signal
from collections import Counter
from typing import Any

import pytest

from tests.e2e import objects
from tests.e2e.cluster import ControlPlane
from tests.e2e.conftest import ALLOCATOR_SCHEDULER, lease_holder, replica_of, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.first_version_only]


def test_the_follower_takes_over_when_the_leader_dies_mid_batch(
    plane: ControlPlane, pods: list[dict[str, Any]]
) -> None:
    plane.use("allocator-ha")
    first = wait_until("a replica holds the Lease", lambda: lease_holder(plane), timeout=30)
    leader = replica_of(plane, first)

    batch = objects.seed_pods(ALLOCATOR_SCHEDULER, suffix="-ha") + objects.gang_pods(ALLOCATOR_SCHEDULER)
    pods.extend(objects.create_pods(plane.kube, batch))

    def some_bound() -> int:
        return sum(1 for p in objects.list_of(plane.kube, "Pod") if p["spec"].get("nodeName"))

    wait_until("the leader binds the first pods", some_bound, timeout=120, every=0.1)
    plane.processes[leader].popen.send_signal(signal.SIGKILL)  # no clean release of the Lease
    plane.processes.pop(leader).popen.wait()

    second = wait_until(
        "the follower holds the Lease", lambda: (h := lease_holder(plane)) != first and h, timeout=60
    )
    assert replica_of(plane, second) != leader

    def all_bound() -> list[dict[str, Any]] | None:
        fresh = [
            objects.get(plane.kube, "Pod", p["metadata"]["name"], p["metadata"]["namespace"]) for p in pods
        ]
        return fresh if all(p["spec"].get("nodeName") for p in fresh) else None

    bound = wait_until("every pod bound after the takeover", all_bound, timeout=240)
    taken: Counter[tuple[str, str, str]] = Counter()
    for pod in bound:
        for claim in objects.pod_claims(plane.kube, pod):
            devices = objects.allocated_devices(claim)
            assert devices, (
                f"{pod['metadata']['name']}: claim {claim['metadata']['name']} bound without allocation"
            )
            assert pod["metadata"]["uid"] in [r["uid"] for r in claim["status"].get("reservedFor", [])]
            taken.update(devices)
    assert not [d for d, n in taken.items() if n > 1], f"devices allocated twice: {taken.most_common(3)}"
    # The killed replica left nothing behind: every allocated claim is reserved for a live pod.
    live = {p["metadata"]["uid"] for p in bound}
    for claim in objects.list_of(plane.kube, "ResourceClaim"):
        if claim.get("status", {}).get("allocation"):
            holders = {r["uid"] for r in claim["status"].get("reservedFor", [])}
            assert holders & live, f"claim {claim['metadata']['name']} allocated for no live pod"
