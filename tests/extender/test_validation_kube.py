"""Kube mode: invalid objects from lists and watch events are skipped, counted, logged once.

Against the fake API server (which, unlike a real one, stores whatever it is given). The rest
of the cluster keeps working, pods that use a refused claim get the validation reason, and a
MODIFIED event that makes a valid object invalid drops the old version (decision documented in
`KubeSource._refusal` and the README).
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from extender import wiring
from extender.cluster.sample import sample_objects
from extender.explaining import load_pods
from extender.kube import watch as kube
from extender.objects import Obj
from extender.pods import parse_pod
from extender.server import make_app
from extender.settings import Settings
from tests.fakeapi.server import FakeApiServer

DATA = Path(__file__).resolve().parents[1] / "data"
TPU_POD = next(p for p in load_pods(DATA / "pipeline_pods.yaml") if p["metadata"]["name"] == "tpu-inference")
TPU_NODE = "tpu-v5e-node-01"
SETTINGS = Settings(watch_stall_seconds=5.0, relist_ready_seconds=5.0)


async def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(0.02)


def _bad_slice(name: str = "bad-slice") -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "test.example.com",
            "nodeName": "cpu-node-01",
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "dev-0", "taints": {"key": "x", "effect": "NoSchedule"}}],
        },
    }


def _claim(name: str, *, allocation: Any = None, count: Any = 1) -> Obj:
    claim: Obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "tpu", "exactly": {"deviceClassName": "tpu.google.com", "count": count}}
                ]
            }
        },
    }
    if allocation is not None:
        claim["status"] = {"allocation": allocation}
    return claim


def _pod_using(claim: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"uses-{claim}", "namespace": "default", "uid": f"uid-uses-{claim}"},
        "spec": {
            "containers": [{"name": "main"}],
            "resourceClaims": [{"name": "dev", "resourceClaimName": claim}],
        },
    }


@pytest.fixture
async def started(fake_api: FakeApiServer) -> AsyncIterator[tuple[Any, Any, kube.KubeSource, FakeApiServer]]:
    fake_api.put_objects(copy.deepcopy(sample_objects()))
    fake_api.put_object(_bad_slice())
    fake_api.put_object(_claim("broken", allocation=[1, 2]))
    placement, binder, source = wiring.build_kube_services(SETTINGS, api_client=fake_api.api_client())
    source.start()
    try:
        await wait_for(placement.ready)
        yield placement, binder, source, fake_api
    finally:
        await source.stop()


async def test_invalid_listed_objects_are_skipped_and_counted(started):
    placement, _, source, _ = started
    state = placement.state
    assert state.get("ResourceSlice", "bad-slice") is None
    assert state.get("ResourceClaim", "broken", "default") is None
    assert "spec.devices[0].taints: must be a list" in state.rejection("ResourceSlice", "bad-slice")
    stats = source.stats()
    assert stats["invalid_objects"]["ResourceSlice"] == 1
    assert stats["invalid_objects"]["ResourceClaim"] == 1
    assert stats["rejected_objects"]["ResourceClaim"] == 1
    assert stats["invalid_objects"]["Node"] == 0


async def test_the_rest_of_the_cluster_keeps_working(started):
    """Finding 1 in kube mode: other pods filter normally; the claim's own pod gets the reason."""
    placement, _, _, _ = started
    good = placement.filter(parse_pod(TPU_POD), [TPU_NODE, "cpu-node-01"])
    assert not good.error and good.passed == [TPU_NODE]
    bad = placement.filter(parse_pod(_pod_using("broken")), [TPU_NODE])
    assert not bad.error and not bad.passed
    reason = bad.unresolvable[TPU_NODE]
    assert reason.startswith(
        "invalid ResourceClaim: ResourceClaim default/broken: status.allocation: must be an object"
    )


async def test_metric_is_exported(started, aiohttp_client):
    placement, binder, _, _ = started
    client = await aiohttp_client(make_app(SETTINGS, placement=placement, binder=binder))
    text = await (await client.get("/metrics")).text()
    samples = {
        (s.name, s.labels.get("kind")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("dra_extender_invalid_objects_total", "ResourceSlice")] == 1
    assert samples[("dra_extender_rejected_objects", "ResourceClaim")] == 1


async def test_refusal_is_logged_once_not_on_every_relist(started, caplog):
    placement, _, source, api = started
    relists = source.stats()["relists"]["ResourceSlice"]
    watch_entry = ("watch", "resource.k8s.io", "resourceslices", "", "")
    with caplog.at_level(logging.WARNING, logger="extender.kube.watch"):
        # Make the slice watch fall behind a compaction: its next watch gets 410 and relists.
        watches = api.request_log().count(watch_entry)
        api.stall_watches("ResourceSlice")
        api.put_object(_bad_slice("bad-slice-2"))  # a new refusal: logged, once
        api.compact()
        api.end_watches("ResourceSlice")
        await wait_for(lambda: api.request_log().count(watch_entry) > watches)
        api.unstall("ResourceSlice")
        await wait_for(lambda: source.stats()["relists"]["ResourceSlice"] > relists)
        await wait_for(lambda: placement.state.rejection("ResourceSlice", "bad-slice-2") is not None)
    refusals = [r.getMessage() for r in caplog.records if "ignoring an invalid object" in r.getMessage()]
    assert not [m for m in refusals if "ResourceSlice bad-slice:" in m]  # already logged at start
    assert len([m for m in refusals if "ResourceSlice bad-slice-2:" in m]) == 1
    assert source.stats()["invalid_objects"]["ResourceSlice"] == 2


async def test_modified_to_invalid_drops_the_old_version_and_back(started):
    placement, _, source, api = started
    state = placement.state
    assert placement.filter(parse_pod(TPU_POD), [TPU_NODE]).passed == [TPU_NODE]
    tpu_slice = next(s for s in state.list("ResourceSlice") if s["spec"].get("nodeName") == TPU_NODE)
    name = tpu_slice["metadata"]["name"]
    broken = copy.deepcopy(api.get_object("ResourceSlice", name))
    broken["spec"]["devices"][0]["attributes"] = ["not", "a", "map"]
    api.put_object(broken)
    await wait_for(lambda: state.get("ResourceSlice", name) is None)
    assert "spec.devices[0].attributes: must be an object" in state.rejection("ResourceSlice", name)
    assert placement.filter(parse_pod(TPU_POD), [TPU_NODE]).passed == []  # its devices are gone, not stale
    fixed = copy.deepcopy(broken)
    fixed["spec"]["devices"][0]["attributes"] = tpu_slice["spec"]["devices"][0].get("attributes") or {}
    api.put_object(fixed)
    await wait_for(lambda: state.get("ResourceSlice", name) is not None)
    assert state.rejection("ResourceSlice", name) is None
    assert placement.filter(parse_pod(TPU_POD), [TPU_NODE]).passed == [TPU_NODE]
    assert source.stats()["rejected_objects"]["ResourceSlice"] == 1  # only bad-slice is left


async def test_deleting_a_refused_object_forgets_it(started):
    placement, _, source, api = started
    api.delete_object("ResourceClaim", "broken", "default")
    await wait_for(lambda: placement.state.rejection("ResourceClaim", "broken", "default") is None)
    verdict = placement.filter(parse_pod(_pod_using("broken")), [TPU_NODE])
    assert 'resourceclaim "default/broken" not found' in verdict.unresolvable[TPU_NODE]
    assert source.stats()["rejected_objects"]["ResourceClaim"] == 0


async def test_count_zero_claim_by_watch_fails_only_its_pod(started):
    """Finding 3 in kube mode: a count-0 claim arriving by watch does not pass on a device-less node."""
    placement, _, _, api = started
    api.put_object(_claim("zero", count=0))
    await wait_for(lambda: placement.state.rejection("ResourceClaim", "zero", "default") is not None)
    verdict = placement.filter(parse_pod(_pod_using("zero")), ["cpu-node-01"])
    assert verdict.passed == []
    assert "exactly.count: must be at least 1, got 0" in verdict.unresolvable["cpu-node-01"]
