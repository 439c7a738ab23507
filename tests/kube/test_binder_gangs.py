"""A PodGroup's members filtered as upstream's pod-group cycle does, then bound by the real binder.

Filter holds each member's node and devices (extender/core/gang_cycle.py); the bind must drop the
member's hold and write the allocation for real. Kept, the hold made the member's own claim look
allocated, and the bind answered "in the process of being allocated" instead of binding.
"""

from __future__ import annotations

import asyncio

from extender.pods import parse_pod
from extender.verdicts import OK
from tests.fakeapi.server import FakeApiServer
from tests.kube.cluster import NAMESPACE, Harness, allocated_devices, pod, reserved_uids, seed


def _pod_group(name: str, min_count: int) -> dict:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }


async def test_held_members_bind_with_their_allocations_written(fake_api: FakeApiServer) -> None:
    seed(fake_api, gpus={"n1": 2, "n2": 2}, claims={"c1": 2, "c2": 2}, pods={})
    fake_api.put_object(_pod_group("train", 2))
    for name, claim in (("p1", "c1"), ("p2", "c2")):
        member = pod(name, [claim])
        member["spec"]["schedulingGroup"] = {"podGroupName": "train"}
        fake_api.put_object(member)
    async with Harness(fake_api) as h:
        await h.caught_up()
        placement = h.placement
        chosen = []
        for name in ("p1", "p2"):  # the cycle: every member filtered before any binds
            record = parse_pod(h.state.get("Pod", name, NAMESPACE))
            verdict = await placement.worker.run(placement.filter, record, ["n1", "n2"])
            assert len(verdict.passed) == 1, verdict
            chosen.append(verdict.passed[0])
        assert sorted(chosen) == ["n1", "n2"]  # the second member counted the first one's hold
        outcomes = await asyncio.gather(h.bind("p1", chosen[0]), h.bind("p2", chosen[1]))
        assert outcomes == [("", OK), ("", OK)]
        for name, claim, node in (("p1", "c1", chosen[0]), ("p2", "c2", chosen[1])):
            written = h.claim(claim)
            assert allocated_devices(written) == [f"{node}/gpu-0", f"{node}/gpu-1"]
            assert reserved_uids(written) == [h.pod(name)["metadata"]["uid"]]
        assert len(placement.holds) == 0
