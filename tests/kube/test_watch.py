"""The kube watch source (extender.kube.watch) against the fake API server, end to end.

Scope: initial sync and readiness (placement and /readyz), live events reaching /filter, the
client-side pod filter, relist after 410 and after a stalled stream, backoff and recovery after
injected errors, readiness lost while a relist takes too long, an unserved optional API, and a
prompt stop. The extender's loop is the test's loop; the fake server runs in its own thread.
"""

from __future__ import annotations

import asyncio
import copy
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from extender import wiring
from extender.cluster import compact
from extender.cluster.compact import SHARED
from extender.cluster.sample import sample_objects
from extender.cluster.state import ClusterState
from extender.explaining import load_pods
from extender.kube import watch as kube
from extender.pods import parse_pod
from extender.server import make_app
from extender.settings import Settings
from tests.fakeapi.server import FakeApiServer, RequestInfo

PODS_FILE = Path(__file__).resolve().parents[1] / "data" / "pipeline_pods.yaml"
TPU_POD = next(p for p in load_pods(PODS_FILE) if p["metadata"]["name"] == "tpu-inference")
TPU_NODE = "tpu-v5e-node-01"
TPU_SLICE = "tpu-v5e-node-01-tpu.google.com-zqtrn"
SAMPLE = sample_objects()
#: Short limits so stalls and slow relists show within a test's time.
SETTINGS = Settings(watch_stall_seconds=0.6, relist_ready_seconds=0.3)


async def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll `condition` while letting the loop run (events are applied on it)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(0.02)


def _sample_count(kind: str) -> int:
    return sum(1 for o in SAMPLE if o.get("kind") == kind)


def _slice(name: str, node: str, devices: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "test.example.com",
            "nodeName": node,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"dev-{i}"} for i in range(devices)],
        },
    }


def _pod(name: str, *, claims: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox"}]}
    if claims:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


@pytest.fixture
def seeded(fake_api: FakeApiServer) -> FakeApiServer:
    fake_api.put_objects(copy.deepcopy(SAMPLE))
    return fake_api


@pytest.fixture
async def services(seeded: FakeApiServer) -> AsyncIterator[tuple[Any, Any, kube.KubeSource]]:
    """build_kube_services against the seeded fake server; the source is stopped afterwards."""
    placement, binder, source = wiring.build_kube_services(SETTINGS, api_client=seeded.api_client())
    yield placement, binder, source
    await source.stop()


async def _started(services: tuple[Any, Any, kube.KubeSource]) -> tuple[Any, kube.KubeSource]:
    placement, _, source = services
    source.start()
    await wait_for(placement.ready)
    return placement, source


async def test_initial_sync_makes_placement_ready(services):
    """placement.ready() is False until every kind is listed; then the state mirrors the server."""
    placement, _, source = services
    assert not placement.ready()
    placement, source = await _started(services)
    state = placement.state
    for kind in (
        "Node",
        "ResourceSlice",
        "DeviceClass",
        "ResourceClaim",
        "ResourceClaimTemplate",
        "Namespace",
    ):
        assert state.count(kind) == _sample_count(kind), kind
    # The list's items carry kind and apiVersion, as kubectl-shaped objects do.
    node = state.get("Node", TPU_NODE)
    assert node["kind"] == "Node" and node["apiVersion"] == "v1"
    stats = source.stats()
    assert stats["synced"] is True
    assert set(stats["relists"]) == {k.kind for k in kube.WATCHED_KINDS}
    assert stats["relists"]["Node"] == 0
    assert all(age >= 0 for age in stats["last_event_age_seconds"].values())
    assert placement.stats().source["synced"] is True


async def test_objects_are_compacted_before_they_are_validated(fake_api, monkeypatch):
    """The watch shares equal parts of what it lists before validating it (as the file loader
    does), so validation's memo of plain values covers devices sharing one; the state then
    stores the objects as compacted, without walking them again."""
    for name in ("a", "b"):
        raw = _slice(f"slice-{name}", f"node-{name}", devices=2)
        for device in raw["spec"]["devices"]:
            device["attributes"] = {"model": {"string": "H100-SXM"}, "numa": {"int": 1}}
        fake_api.put_object(raw)
    validated: list[Any] = []
    real_validate = kube.validate

    def recording(obj: Any) -> None:
        if obj.get("kind") == "ResourceSlice":
            validated.extend(d["attributes"]["model"] for d in obj["spec"]["devices"])
        real_validate(obj)

    monkeypatch.setattr(kube, "validate", recording)
    walked: list[str] = []
    real_compact = SHARED.compact

    def counting(obj: Any, kind: Any = None, previous: Any = None) -> None:
        if (kind or obj.get("kind")) == "ResourceSlice":
            walked.append(obj["metadata"]["name"])
        real_compact(obj, kind, previous)

    monkeypatch.setattr(SHARED, "compact", counting)
    placement, _, source = wiring.build_kube_services(SETTINGS, api_client=fake_api.api_client())
    try:
        source.start()
        await wait_for(placement.ready)
    finally:
        await source.stop()
    assert len(validated) == 4
    assert all(value is validated[0] for value in validated)  # one object: compacted already
    stored = [
        d["attributes"]["model"] for s in placement.state.list("ResourceSlice") for d in s["spec"]["devices"]
    ]
    assert len(stored) == 4 and all(value is validated[0] for value in stored)
    assert sorted(walked) == ["slice-a", "slice-b"]  # once each: the state did not walk them again


async def test_a_watched_slice_update_keeps_the_stored_devices_equal_values(fake_api, monkeypatch):
    """A MODIFIED slice is compacted against the version the state holds: its devices' equal
    values are the stored objects (the index re-reads only what differs), even with the shared
    tables emptied at every new value."""
    monkeypatch.setattr(compact, "VALUE_LIMIT", 1)
    raw = _slice("slice-a", "node-a", devices=2)
    for position, device in enumerate(raw["spec"]["devices"]):
        device["attributes"] = {"model": {"string": "H100-SXM"}, "uuid": {"string": f"GPU-{position}"}}
    fake_api.put_object(raw)
    placement, _, source = wiring.build_kube_services(SETTINGS, api_client=fake_api.api_client())
    try:
        source.start()
        await wait_for(placement.ready)
        before = placement.state.get("ResourceSlice", "slice-a")
        changed = fake_api.get_object("ResourceSlice", "slice-a")
        changed["spec"]["devices"][1]["attributes"]["uuid"] = {"string": "GPU-replaced"}
        fake_api.put_object(changed)
        await wait_for(lambda: placement.state.get("ResourceSlice", "slice-a") is not before)
    finally:
        await source.stop()
    after = placement.state.get("ResourceSlice", "slice-a")
    old, new = before["spec"]["devices"], after["spec"]["devices"]
    assert new[0]["attributes"]["uuid"] is old[0]["attributes"]["uuid"]
    assert new[1]["attributes"]["model"] is old[1]["attributes"]["model"]
    assert new[1]["attributes"]["uuid"] == {"string": "GPU-replaced"}


async def test_readyz_follows_the_initial_list_through_the_app(seeded, aiohttp_client):
    """The source starts from the app's cleanup_ctx; /readyz is 503 until the lists are in."""
    server_loop_gate: list[bool] = [False]

    async def hold_lists(info: RequestInfo) -> None:
        while info.verb == "list" and not server_loop_gate[0]:
            await asyncio.sleep(0.01)

    seeded.on_request = hold_lists
    placement, binder, source = wiring.build_kube_services(SETTINGS, api_client=seeded.api_client())
    app = make_app(SETTINGS, placement=placement, binder=binder)
    app.cleanup_ctx.append(wiring.kube_app_context(placement, source, binder))
    client = await aiohttp_client(app)
    resp = await client.get("/readyz")
    assert resp.status == 503
    server_loop_gate[0] = True
    await wait_for(placement.ready)
    assert (await client.get("/readyz")).status == 200
    await client.close()
    assert all(w.thread is not None and not w.thread.is_alive() for w in source._watches.values())


async def test_live_updates_reach_filter(services, seeded, aiohttp_client):
    """Removing and re-adding a node's ResourceSlice flips that node's /filter verdict."""
    placement, binder, source = services
    placement, source = await _started(services)
    client = await aiohttp_client(make_app(SETTINGS, placement=placement, binder=binder))

    async def passed() -> list[str]:
        body = orjson.dumps({"Pod": TPU_POD, "NodeNames": [TPU_NODE, "cpu-node-01"]})
        resp = await client.post("/filter", data=body)
        assert resp.status == 200
        return (await resp.json())["NodeNames"]

    assert await passed() == [TPU_NODE]
    tpu_slice = seeded.get_object("ResourceSlice", TPU_SLICE)
    seeded.delete_object("ResourceSlice", TPU_SLICE)
    await wait_for(lambda: placement.state.get("ResourceSlice", TPU_SLICE) is None)
    assert await passed() == []
    seeded.put_object(tpu_slice)
    await wait_for(lambda: placement.state.get("ResourceSlice", TPU_SLICE) is not None)
    assert await passed() == [TPU_NODE]
    assert source.stats()["relists"]["ResourceSlice"] == 0  # the watch carried it, no relist


async def test_claim_allocated_elsewhere_takes_the_devices(services, seeded):
    """A claim allocated (by someone else) to all TPUs makes the TPU node fail for the pending pod."""
    placement, _ = await _started(services)
    assert placement.filter(parse_pod(TPU_POD), [TPU_NODE]).passed == [TPU_NODE]
    tpu_slice = seeded.get_object("ResourceSlice", TPU_SLICE)
    results = [
        {"request": "tpus", "driver": tpu_slice["spec"]["driver"], "pool": tpu_slice["spec"]["pool"]["name"],
         "device": d["name"]}
        for d in tpu_slice["spec"]["devices"]
    ]  # fmt: skip
    hog = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "tpu-hog", "namespace": "default"},
        "spec": {
            "devices": {"requests": [{"name": "tpus", "exactly": {"deviceClassName": "tpu.google.com"}}]}
        },
        "status": {"allocation": {"devices": {"results": results}}},
    }
    seeded.put_object(hog)
    await wait_for(lambda: placement.state.get("ResourceClaim", "tpu-hog", "default") is not None)
    assert placement.filter(parse_pod(TPU_POD), [TPU_NODE]).passed == []


async def test_pods_without_claims_are_ignored(services, seeded):
    """Only pods with spec.resourceClaims are kept; a pod that stops qualifying is removed."""
    seeded.put_object(_pod("plain", claims=False))
    seeded.put_object(_pod("with-claim", claims=True))
    placement, _ = await _started(services)
    state = placement.state
    assert state.get("Pod", "plain", "default") is None
    assert state.get("Pod", "with-claim", "default") is not None
    seeded.put_object(_pod("plain-2", claims=False))
    seeded.put_object(_pod("with-claim-2", claims=True))
    await wait_for(lambda: state.get("Pod", "with-claim-2", "default") is not None)
    assert state.get("Pod", "plain-2", "default") is None
    seeded.put_object(_pod("with-claim", claims=False))
    await wait_for(lambda: state.get("Pod", "with-claim", "default") is None)
    seeded.delete_object("Pod", "with-claim-2", "default")
    await wait_for(lambda: state.get("Pod", "with-claim-2", "default") is None)


async def _force_410(api: FakeApiServer, obj: dict[str, Any]) -> None:
    """Make the ResourceSlice watch fall behind a compaction, so its next watch gets 410."""
    watch_entry = ("watch", "resource.k8s.io", "resourceslices", "", "")
    watches = api.request_log().count(watch_entry)
    api.stall_watches("ResourceSlice")  # the stream falls behind ...
    api.put_object(obj)
    api.compact()  # ... its resourceVersion is compacted ...
    api.end_watches("ResourceSlice")  # ... and it must watch again from there
    await wait_for(lambda: api.request_log().count(watch_entry) > watches)
    api.unstall("ResourceSlice")


async def test_relist_after_410(services, seeded):
    """A watch from a compacted resourceVersion gets 410: the kind is listed again, nothing is lost."""
    placement, source = await _started(services)
    # Every kind's stream open first: the cache can sync before a watch connects, and a watch that
    # connects after the compaction from its list's resourceVersion gets 410 too (a clean-clone
    # run saw Node relisted so).
    await wait_for(lambda: seeded.open_watches() == len(kube.WATCHED_KINDS))
    await _force_410(seeded, _slice("late-slice", "cpu-node-01"))
    await wait_for(lambda: placement.state.get("ResourceSlice", "late-slice") is not None)
    assert source.stats()["relists"]["ResourceSlice"] == 1
    assert source.stats()["relists"]["Node"] == 0
    assert placement.ready()


async def test_stalled_stream_is_relisted(services, seeded):
    """A stream silent for watch_stall_seconds (no events, no bookmarks) is dropped and relisted."""
    placement, source = await _started(services)
    lists_before = seeded.request_log().count(("list", "resource.k8s.io", "resourceslices", "", ""))
    seeded.stall_watches("ResourceSlice")
    seeded.put_object(_slice("during-stall", "cpu-node-01"))
    # Wait for the relist itself: the object alone could have slipped through the stream just
    # before the stall took hold (the stream stalls after it and is relisted all the same).
    await wait_for(lambda: source.stats()["relists"]["ResourceSlice"] >= 1)
    await wait_for(lambda: placement.state.get("ResourceSlice", "during-stall") is not None)
    seeded.unstall()
    # The restart counter moves when the new stream opens, which may come after the relist.
    await wait_for(lambda: source.stats()["watch_restarts"]["ResourceSlice"] >= 1)
    stats = source.stats()
    assert stats["relists"]["ResourceSlice"] >= 1
    assert stats["watch_restarts"]["ResourceSlice"] >= 1
    assert seeded.request_log().count(("list", "resource.k8s.io", "resourceslices", "", "")) > lists_before
    # Kinds whose streams kept their bookmarks flowing were never relisted.
    assert stats["relists"]["DeviceClass"] == 0


#: Liveness bound for reconnects with backoff: a CI machine under load took more than 5 s.
LOADED = 20.0


async def test_errors_back_off_and_recover(seeded):
    """Failed lists and watches are retried with backoff until they succeed, then the cache syncs."""
    state = ClusterState()
    # Generous stall and readiness bounds: this test counts lists, so a stall relist caused by a
    # slow, loaded machine (not by the injected errors) must not happen.
    source = kube.KubeSource(
        state,
        Settings(watch_stall_seconds=10.0, relist_ready_seconds=10.0),
        api_client=seeded.api_client(),
        backoff_base=0.05,
        backoff_cap=0.2,
        rng=random.Random(1),
    )
    seeded.fail_next(3, 500, verb="list", resource="Node")
    source.start()
    try:
        await wait_for(source.synced, timeout=LOADED)
        assert state.count("Node") == _sample_count("Node")
        assert seeded.request_log().count(("list", "", "nodes", "", "")) == 4
        # A broken watch reconnects from its resourceVersion: no relist, and later events still arrive.
        # The cache can be synced before the Node watch is open; ending no stream would leave the
        # two injected failures to the first connect, one reconnect short of what is awaited below.
        await wait_for(lambda: seeded.open_watches("Node") == 1, timeout=LOADED)
        seeded.fail_next(2, 503, verb="watch", resource="Node")
        seeded.end_watches("Node")
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "late-node"}}
        seeded.put_object(node)
        await wait_for(lambda: state.get("Node", "late-node") is not None, timeout=LOADED)
        # The event may slip through the old stream before it ends: wait for the reconnects too
        # (one per failed watch, one for the stream that stays).
        await wait_for(lambda: source.stats()["watch_restarts"]["Node"] >= 3, timeout=LOADED)
        assert seeded.request_log().count(("list", "", "nodes", "", "")) == 4
        await wait_for(source.synced, timeout=LOADED)
    finally:
        await source.stop()


async def test_readyz_fails_while_a_relist_takes_too_long(services, seeded, aiohttp_client):
    """A relist running longer than relist_ready_seconds turns /readyz to 503 until it completes."""
    placement, binder, source = services
    placement, source = await _started(services)
    client = await aiohttp_client(make_app(SETTINGS, placement=placement, binder=binder))
    release = [False]

    async def slow_slice_lists(info: RequestInfo) -> None:
        while info.verb == "list" and info.resource == "resourceslices" and not release[0]:
            await asyncio.sleep(0.01)

    seeded.on_request = slow_slice_lists
    await _force_410(seeded, _slice("slow", "cpu-node-01"))  # 410 -> relist, held in slow_slice_lists
    await wait_for(lambda: not placement.ready(), timeout=3)
    resp = await client.get("/readyz")
    assert resp.status == 503
    assert source.stats()["synced"] is False
    release[0] = True
    await wait_for(placement.ready)
    assert (await client.get("/readyz")).status == 200
    assert placement.state.get("ResourceSlice", "slow") is not None


async def test_unserved_device_taint_rules_count_as_empty(seeded):
    """Without any DeviceTaintRule API the source still syncs; with only v1beta2 it reads that one."""
    seeded.set_served("DeviceTaintRule", False)
    state = ClusterState()
    source = kube.KubeSource(state, SETTINGS, api_client=seeded.api_client(), optional_retry_seconds=0.2)
    source.start()
    try:
        await wait_for(source.synced)
        assert state.count("DeviceTaintRule") == 0
        rule = {
            "apiVersion": "resource.k8s.io/v1beta2",
            "kind": "DeviceTaintRule",
            "metadata": {"name": "maintenance"},
            "spec": {
                "deviceSelector": {"driver": "gpu.nvidia.com"},
                "taint": {"key": "k", "effect": "NoSchedule"},
            },
        }
        seeded.put_object(rule)
        seeded.set_served("DeviceTaintRule", True, version="v1beta2")
        await wait_for(lambda: state.count("DeviceTaintRule") == 1)
        assert state.get("DeviceTaintRule", "maintenance")["apiVersion"] == "resource.k8s.io/v1beta2"
        assert source.synced()
    finally:
        await source.stop()


async def test_an_unserved_api_stays_synced_across_its_rechecks(seeded):
    """The source looks for an unserved API again every `optional_retry_seconds` and finds it
    unserved: it stays synced. Each look marked the kind behind and nothing cleared it, so from
    `relist_ready_seconds` after the first look (5 min after start) filter said "not synced" for
    good; a look refused with 403 (RBAC still warming up after an API-server restart, as the
    fault tests met it) did the same at once."""
    seeded.set_served("DeviceTaintRule", False)
    state = ClusterState()
    source = kube.KubeSource(state, SETTINGS, api_client=seeded.api_client(), optional_retry_seconds=0.05)
    source.start()
    try:
        await wait_for(source.synced)
        await asyncio.sleep(4 * SETTINGS.relist_ready_seconds)  # many looks, each found nothing
        assert source.synced()
        seeded.fail_next(1, 403, verb="list", resource="DeviceTaintRule", message="RBAC: not ready")
        await asyncio.sleep(4 * SETTINGS.relist_ready_seconds)  # refused once, then unserved again
        assert source.synced()
    finally:
        await source.stop()


@pytest.mark.parametrize("version", ["v1beta1", "v1alpha2"])
async def test_pod_groups_are_read_from_the_served_version(seeded, version: str):
    """1.37 serves PodGroups as v1beta1 (the typed client's), 1.36 as v1alpha2 (no typed client:
    the generic lister reads it); with neither served the source syncs with none."""
    seeded.set_served("PodGroup", False)
    state = ClusterState()
    source = kube.KubeSource(state, SETTINGS, api_client=seeded.api_client(), optional_retry_seconds=0.2)
    source.start()
    try:
        await wait_for(source.synced)
        assert state.count("PodGroup") == 0
        group = {
            "apiVersion": f"scheduling.k8s.io/{version}",
            "kind": "PodGroup",
            "metadata": {"name": "train", "namespace": "ml"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}},
        }
        seeded.put_object(group)
        seeded.set_served("PodGroup", True, version=version)
        await wait_for(lambda: state.count("PodGroup") == 1)
        stored = state.get("PodGroup", "train", "ml")
        assert stored["apiVersion"] == f"scheduling.k8s.io/{version}"
        assert stored["spec"]["schedulingPolicy"]["gang"]["minCount"] == 4
        changed = copy.deepcopy(stored)
        changed["spec"]["schedulingPolicy"]["gang"]["minCount"] = 8  # later events are watched
        seeded.put_object(changed)
        await wait_for(
            lambda: state.get("PodGroup", "train", "ml")["spec"]["schedulingPolicy"]["gang"]["minCount"] == 8
        )
        assert source.synced()
    finally:
        await source.stop()


async def test_stop_ends_every_worker_promptly(services, seeded):
    """stop() closes the open watch responses, so the threads end without waiting for timeouts."""
    _, source = await _started(services)
    await wait_for(lambda: seeded.open_watches() == len(kube.WATCHED_KINDS))
    loop = asyncio.get_running_loop()
    started = loop.time()
    await source.stop()
    assert loop.time() - started < 1.0
    assert all(not w.thread.is_alive() for w in source._watches.values())
