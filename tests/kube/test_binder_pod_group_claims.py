"""A claim shared by a PodGroup (`DRAWorkloadResourceClaims`) through the real kube binder.

Upstream (k8s.io/dynamic-resource-allocation v0.37.2 `resourceclaim.BindTo`, the in-tree PreBind)
reserves such a claim for the PodGroup: one `reservedFor` entry {scheduling.k8s.io, podgroups,
name, uid} for every member, written by the first member's bind. Here two members of a gang are
filtered as the pod-group cycle does, then bound at the same time: the shared claim is allocated
once and reserved for the group; each member's own claim is reserved for the member. A member
whose Binding fails keeps the group claim it wrote (other members may be bound with it).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from extender.allocator.features import Features
from extender.kube import binder as binder_module
from extender.pods import parse_pod
from extender.verdicts import API_ERROR, CONFLICT, OK
from tests.fakeapi.server import FakeApiServer
from tests.kube.cluster import DRA, NAMESPACE, Harness, allocated_devices, pod, reserved_uids, seed

CHANNEL_DRIVER = "channel.example.com"
GROUP = "train"
GATE_ON = Features.from_gates({"DRAWorkloadResourceClaims": True}, "1.37")


def _fabric(api: FakeApiServer) -> None:
    """A channel class and two channel devices every node reaches (an IMEX-style domain)."""
    api.put_object(
        {
            "apiVersion": DRA,
            "kind": "DeviceClass",
            "metadata": {"name": CHANNEL_DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{CHANNEL_DRIVER}"'}}]},
        }
    )
    api.put_object(
        {
            "apiVersion": DRA,
            "kind": "ResourceSlice",
            "metadata": {"name": "fabric"},
            "spec": {
                "driver": CHANNEL_DRIVER,
                "allNodes": True,
                "pool": {"name": "fabric", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": f"channel-{i}"} for i in range(2)],
            },
        }
    )
    api.put_object(
        {
            "apiVersion": DRA,
            "kind": "ResourceClaim",
            "metadata": {"name": "domain", "namespace": NAMESPACE},
            "spec": {
                "devices": {"requests": [{"name": "channel", "exactly": {"deviceClassName": CHANNEL_DRIVER}}]}
            },
        }
    )
    api.put_object(
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": GROUP, "namespace": NAMESPACE},
            "spec": {
                "schedulingPolicy": {"gang": {"minCount": 2}},
                "resourceClaims": [{"name": "domain", "resourceClaimName": "domain"}],
            },
        }
    )


def _members(api: FakeApiServer) -> None:
    for name, own in (("p1", "c1"), ("p2", "c2")):
        member = pod(name, [own])
        member["spec"]["schedulingGroup"] = {"podGroupName": GROUP}
        member["spec"]["resourceClaims"].append({"name": "domain", "resourceClaimName": "domain"})
        api.put_object(member)


def _group_entry(api: FakeApiServer) -> dict[str, Any]:
    group = api.get_object("PodGroup", GROUP, NAMESPACE)
    assert group is not None
    return {
        "apiGroup": "scheduling.k8s.io",
        "resource": "podgroups",
        "name": GROUP,
        "uid": group["metadata"]["uid"],
    }


def _setup(api: FakeApiServer) -> None:
    seed(api, gpus={"n1": 2, "n2": 2}, claims={"c1": 2, "c2": 2}, pods={})
    _fabric(api)
    _members(api)


async def test_members_bound_together_reserve_the_shared_claim_once_for_the_group(
    fake_api: FakeApiServer,
) -> None:
    _setup(fake_api)
    async with Harness(fake_api, features=GATE_ON) as h:
        await h.caught_up()
        placement = h.placement
        chosen = []
        for name in ("p1", "p2"):  # the pod-group cycle: every member filtered before any binds
            record = parse_pod(h.state.get("Pod", name, NAMESPACE))
            verdict = await placement.worker.run(placement.filter, record, ["n1", "n2"])
            assert len(verdict.passed) == 1, verdict
            chosen.append(verdict.passed[0])
        assert sorted(chosen) == ["n1", "n2"]
        outcomes = await asyncio.gather(h.bind("p1", chosen[0]), h.bind("p2", chosen[1]))
        assert outcomes == [("", OK), ("", OK)]
        domain = h.claim("domain")
        assert len(allocated_devices(domain)) == 1 and allocated_devices(domain)[0].startswith("fabric/")
        assert domain["status"]["reservedFor"] == [_group_entry(fake_api)]
        for name, own, node in (("p1", "c1", chosen[0]), ("p2", "c2", chosen[1])):
            assert allocated_devices(h.claim(own)) == [f"{node}/gpu-0", f"{node}/gpu-1"]
            assert reserved_uids(h.claim(own)) == [h.pod(name)["metadata"]["uid"]]


async def test_with_the_gate_off_the_shared_claim_is_reserved_for_each_member(
    fake_api: FakeApiServer,
) -> None:
    _setup(fake_api)
    async with Harness(fake_api, features=Features.from_gates(version="1.37")) as h:
        await h.caught_up()
        assert await h.bind("p1", "n1") == ("", OK)
        await h.caught_up()
        assert await h.bind("p2", "n2") == ("", OK)
        uids = [h.pod(name)["metadata"]["uid"] for name in ("p1", "p2")]
        assert reserved_uids(h.claim("domain")) == uids


async def test_a_member_whose_binding_fails_keeps_the_group_claim_it_wrote(fake_api: FakeApiServer) -> None:
    _setup(fake_api)
    async with Harness(fake_api, features=GATE_ON) as h:
        await h.caught_up()
        fake_api.fail_next(1, 500, verb="create", resource="pods", subresource="binding")
        error, reason = await h.bind("p1", "n1")
        assert reason == API_ERROR, error
        domain = h.claim("domain")
        assert domain["status"]["reservedFor"] == [_group_entry(fake_api)]  # kept for the group
        assert not (h.claim("c1").get("status") or {}).get("allocation")  # the member's own: undone
        assert await h.bind("p2", "n2") == ("", OK)
        assert h.claim("domain")["status"] == domain["status"]  # found reserved: nothing written
        assert await h.bind("p1", "n1") == ("", OK)
        assert h.claim("domain")["status"]["reservedFor"] == [_group_entry(fake_api)]


async def test_a_member_waits_for_the_group_claim_then_answers_a_conflict(
    fake_api: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first member's filter holds the group claim; its bind never comes. The second
    member's bind waits for that write, then answers the conflict kube-scheduler retries, and
    writes nothing (its own claim is left unallocated)."""
    monkeypatch.setattr(binder_module, "GROUP_CLAIM_WAIT_SECONDS", 0.5)
    _setup(fake_api)
    async with Harness(fake_api, features=GATE_ON) as h:
        await h.caught_up()
        placement = h.placement
        record = parse_pod(h.state.get("Pod", "p1", NAMESPACE))
        verdict = await placement.worker.run(placement.filter, record, ["n1", "n2"])
        other = "n2" if verdict.passed == ["n1"] else "n1"
        error, reason = await h.bind("p2", other)
        assert (error, reason) == (
            f"resource claim {NAMESPACE}/domain is in the process of being allocated: no bind of its "
            "PodGroup wrote it within 0.5 s",
            CONFLICT,
        )
        assert not (h.claim("domain").get("status") or {}).get("allocation")
        assert not (h.claim("c2").get("status") or {}).get("allocation")
