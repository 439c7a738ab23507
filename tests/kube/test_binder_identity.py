"""Kube-mode bind checks what it binds: the node must be in the watched state, and a UID seen in
filter under another name is refused (issue 12 finding 7)."""

from __future__ import annotations

import asyncio
import threading

from extender.pods import parse_pod
from extender.verdicts import NODE_GONE, OK, POD_GONE, TIMEOUT
from tests.fakeapi.server import FakeApiServer
from tests.kube.cluster import NAMESPACE, Harness, seed, writes
from tests.kube.test_binder import untouched


async def test_bind_to_a_node_the_watch_does_not_know_is_refused(fake_api: FakeApiServer):
    seed(fake_api, gpus={"n1": 1}, claims={"c1": 1}, pods={"p1": ["c1"]})
    async with Harness(fake_api) as h:
        error, reason = await h.bind("p1", "ghost-node")
        assert reason == NODE_GONE
        assert error == "node ghost-node does not exist (not in the watched cluster state)"
        assert untouched(h.claim("c1"))
        assert writes(fake_api) == []
        assert len(h.placement.assumed) == 0


async def test_a_uid_seen_in_filter_under_another_name_is_refused_naming_both(fake_api: FakeApiServer):
    seed(fake_api, gpus={"n1": 1}, claims={}, pods={})
    async with Harness(fake_api) as h:
        seen = {"metadata": {"name": "web-a", "namespace": NAMESPACE, "uid": "uid-shared"}, "spec": {}}
        verdict = await h.placement.worker.run(h.placement.filter, parse_pod(seen), ["n1"])
        assert verdict.passed == ["n1"]
        outcome = await h.binder.bind(namespace="other", name="web-b", uid="uid-shared", node="n1")
        error, reason = outcome.error, outcome.reason
        assert reason == POD_GONE
        assert f"{NAMESPACE}/web-a" in error and "other/web-b" in error
        assert writes(fake_api) == []


async def test_choose_step_queued_behind_a_busy_worker_gives_up_cleanly(fake_api: FakeApiServer):
    seed(fake_api, gpus={"n1": 1}, claims={"c1": 1}, pods={"p1": ["c1"]})
    async with Harness(fake_api) as h:
        h.placement.filter_timeout_seconds = 0.3
        gate = threading.Event()
        busy = asyncio.ensure_future(h.placement.worker.run(gate.wait, 10.0))
        error, reason = await h.bind("p1", "n1")
        assert reason == TIMEOUT and "did not start within 0.3 s" in error
        assert writes(fake_api) == [] and untouched(h.claim("c1"))
        assert len(h.placement.assumed) == 0
        gate.set()
        await busy
        assert await h.bind("p1", "n1") == ("", OK)
