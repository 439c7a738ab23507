"""What the real kube-scheduler shows a user of a burst in allocator mode (issue 30, finding 1):
62 pods of the mixed fleet's claim shapes created at once on 40 nodes, one extender replica,
the shipped `config/scheduler-allocator.yaml`. Every pod that is then bound must carry no
FailedScheduling event and must have been filtered at most three times.

The pods' claims come from ResourceClaimTemplates, so the resourceclaim controller creates them
after the pods. With DynamicResources disabled at PreEnqueue as well (the profile before), the
scheduler tried each pod at once, the extender answered "ResourceClaim not created yet" for every
node, and the pod collected FailedScheduling events before it was bound. Some pods of the burst
do not fit (the fleet's free TPUs and NVLink domains run out): they stay Pending, as they should.

A control plane of its own (a generated fleet cannot share the session's sample fleet); with
`DRA_E2E_KUBERNETES=1.37` it runs against kube-scheduler v1.37.2.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from loadtests.fleet import generate_mixed_cluster
from loadtests.generate import NAMESPACE, POD_CLAIM, SHAPE_LABEL
from tests.e2e import objects
from tests.e2e.cluster import KUBERNETES_VERSIONS, ControlPlane, collection_path, running
from tests.e2e.conftest import ALLOCATOR_SCHEDULER, failed_scheduling, filter_calls, wait_until

pytestmark = pytest.mark.e2e

NODES = 40
PODS = 62
SEED = 1
#: Seconds without a new binding after which the unbound pods count as not fitting.
SETTLE = 10.0


@pytest.fixture(scope="module", params=KUBERNETES_VERSIONS, ids=lambda v: f"k8s-{v}")
def burst_plane(request: pytest.FixtureRequest) -> Iterator[tuple[ControlPlane, list[str]]]:
    """A control plane of its own per Kubernetes version, with the generated 40-node fleet."""
    with running(version=request.param, name="burst") as plane:
        generated, pending = generate_mixed_cluster(nodes=NODES, seed=SEED, pods=PODS)
        objects.publish_fleet(plane.kube, generated)
        plane.use("allocator")
        yield plane, [p["metadata"]["labels"][SHAPE_LABEL] for p in pending]


def test_bound_pods_carry_no_failed_scheduling_and_few_filters(
    burst_plane: tuple[ControlPlane, list[str]],
) -> None:
    plane, shapes = burst_plane
    kube = plane.kube
    names = [f"burst-{i:03d}" for i in range(len(shapes))]
    pods = [
        objects.pod(name, NAMESPACE, ALLOCATOR_SCHEDULER, {POD_CLAIM: shape})
        for name, shape in zip(names, shapes, strict=True)
    ]
    started = time.monotonic()
    objects.parallel(pods, lambda p: kube.request("POST", collection_path(p), p))

    last: dict[str, float] = {"count": -1, "at": time.monotonic()}

    def settled() -> set[str] | None:
        items = kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
        bound = {p["metadata"]["name"] for p in items if p["spec"].get("nodeName")} & set(names)
        if len(bound) != last["count"]:
            last["count"], last["at"] = len(bound), time.monotonic()
        done = len(bound) == len(names) or time.monotonic() - last["at"] > SETTLE
        return bound if done else None

    bound: set[str] = wait_until("the burst placed", settled, timeout=240, every=0.5)
    seconds = last["at"] - started
    failed = failed_scheduling(plane, NAMESPACE, bound)
    filters = filter_calls(plane, bound)
    most = max(filters.values())
    print(
        f"\nburst: {len(bound)} of {len(names)} pods bound in {seconds:.1f} s; "
        f"{len(failed)} FailedScheduling events on them; {sum(filters.values())} filter calls, "
        f"at most {most} per pod"
    )
    # Most of the burst fits: a bound count this low would mean the check below saw too little.
    assert len(bound) >= PODS * 3 // 4, f"only {len(bound)} of {PODS} pods bound"
    assert not failed, f"{len(failed)} FailedScheduling events on pods then bound: {failed[:5]}"
    assert most <= 3, f"more than 3 filter calls for a bound pod: {filters.most_common(5)}"
