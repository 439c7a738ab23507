"""Bind uses a copy of the pod at least as new as the one filter saw (issue 30 finding 2).

Found in the e2e burst (about 1 in 810 allocator-mode binds): a pod with template claims was
refused by bind 5 ms after filter and prioritize passed it, `claim_gone: ResourceClaim not
created yet`. kube-scheduler had sent filter the pod with every `status.resourceClaimStatuses`
entry; bind took the watch's copy of the pod, which had not caught up yet and lacked one. Bind
now takes the newer of the two copies by resourceVersion, and re-reads the pod when the two
versions do not compare.
"""

from __future__ import annotations

import copy

from extender.kube.binder import _newer_pod
from extender.objects import Obj
from extender.pods import parse_pod
from extender.verdicts import OK
from tests.fakeapi.server import FakeApiServer
from tests.kube.cluster import NAMESPACE, Harness, allocated_devices, claim, pod, seed, until, writes


def _templated(api: FakeApiServer, name: str) -> Obj:
    """A pod with one template claim, stored; its generated claim is made by `_generate`."""
    templated = pod(name, [])
    templated["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    return api.put_object(templated)


def _generate(api: FakeApiServer, stored: Obj) -> Obj:
    """What the resourceclaim controller does: create the claim, then record it in the pod's
    status. Returns the pod as the API server now has it (the copy kube-scheduler filters)."""
    name = stored["metadata"]["name"]
    generated = claim(f"{name}-gpu-x7k2p")
    generated["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "gpu"}
    generated["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": name,
            "uid": stored["metadata"]["uid"],
            "controller": True,
        }
    ]
    api.put_object(generated)
    updated = copy.deepcopy(stored)
    updated["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": f"{name}-gpu-x7k2p"}]}
    return api.put_object(updated)


async def test_bind_uses_the_filtered_copy_when_the_watch_lags(fake_api: FakeApiServer):
    seed(fake_api, gpus={"n1": 1}, claims={}, pods={})
    stored = _templated(fake_api, "t1")
    async with Harness(fake_api) as h:
        await until(lambda: h.state.get("Pod", "t1", NAMESPACE) is not None, what="the pod in the state")
        fake_api.stall_watches("Pod")  # the pod watch falls behind; the claim watch does not
        current = _generate(fake_api, stored)
        await until(lambda: h.state.get("ResourceClaim", "t1-gpu-x7k2p", NAMESPACE) is not None)
        watched = h.state.get("Pod", "t1", NAMESPACE)
        assert watched is not None and not (watched.get("status") or {}).get("resourceClaimStatuses")
        verdict = await h.placement.worker.run(h.placement.filter, parse_pod(current), ["n1"])
        assert verdict.passed == ["n1"], verdict
        assert await h.bind("t1", "n1") == ("", OK)
        assert allocated_devices(h.claim("t1-gpu-x7k2p")) == ["n1/gpu-0"]
        assert h.pod("t1")["spec"].get("nodeName") == "n1"
        fake_api.unstall("Pod")


async def test_a_newer_watch_copy_wins_over_an_older_filtered_one(fake_api: FakeApiServer):
    """The watch shows the pod bound to n1 (an earlier bind whose answer was lost); the copy
    filter saw is from before. Bind answers OK from the watch's copy and writes nothing."""
    seed(fake_api, gpus={"n1": 1}, claims={"c1": 1}, pods={"p1": ["c1"]})
    async with Harness(fake_api) as h:
        await h.caught_up()
        before = h.pod("p1")
        await h.placement.worker.run(h.placement.filter, parse_pod(before), ["n1"])
        bound = copy.deepcopy(before)
        bound["spec"]["nodeName"] = "n1"
        after = fake_api.put_object(bound)
        await until(
            lambda: (
                (h.state.get("Pod", "p1", NAMESPACE) or {}).get("metadata", {}).get("resourceVersion")
                == after["metadata"]["resourceVersion"]
            ),
            what="the watch to show the bound pod",
        )
        fake_api.clear_request_log()
        assert await h.bind("p1", "n1") == ("", OK)
        assert writes(fake_api) == []


async def test_copies_whose_versions_do_not_compare_are_read_again(fake_api: FakeApiServer):
    """A filtered copy whose resourceVersion is not an integer says nothing about which copy is
    newer: bind reads the pod from the API server (which has the claim status) and binds it."""
    seed(fake_api, gpus={"n1": 1}, claims={}, pods={})
    stored = _templated(fake_api, "t1")
    async with Harness(fake_api) as h:
        await until(lambda: h.state.get("Pod", "t1", NAMESPACE) is not None, what="the pod in the state")
        fake_api.stall_watches("Pod")
        current = _generate(fake_api, stored)
        await until(lambda: h.state.get("ResourceClaim", "t1-gpu-x7k2p", NAMESPACE) is not None)
        sent = copy.deepcopy(current)
        sent["metadata"]["resourceVersion"] = "opaque-version"
        await h.placement.worker.run(h.placement.filter, parse_pod(sent), ["n1"])
        fake_api.clear_request_log()
        assert await h.bind("t1", "n1") == ("", OK)
        reads = [(v, r, s) for v, _, r, s, _ in fake_api.request_log() if v == "get" and r == "pods"]
        assert reads == [("get", "pods", "")]
        assert allocated_devices(h.claim("t1-gpu-x7k2p")) == ["n1/gpu-0"]
        fake_api.unstall("Pod")


def _copy(version: object, marker: str) -> object:
    return parse_pod({"metadata": {"name": marker, "uid": "u1", "resourceVersion": version}})


def test_newer_pod_by_resource_version() -> None:
    old, new = _copy("9", "old"), _copy("10", "new")  # integers, not strings: "9" > "10"
    assert _newer_pod(old, new) is new
    assert _newer_pod(new, old) is new
    same_watch, same_seen = _copy("10", "watch"), _copy("10", "seen")
    assert _newer_pod(same_watch, same_seen) is same_watch  # a tie: the watch's
    assert _newer_pod(old, None) is old and _newer_pod(None, new) is new
    assert _newer_pod(None, None) is None
    assert _newer_pod(_copy("a", "w"), _copy("b", "s")) is None  # unknown order: read again
    assert _newer_pod(_copy(None, "w"), _copy(None, "s")) is None
    equal = _copy("a", "w")
    assert _newer_pod(equal, _copy("a", "s")) is equal
