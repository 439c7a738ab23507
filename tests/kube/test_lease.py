"""LeaderElector against the fake API server's coordination.k8s.io/v1 Leases, real client.

Scope: creating, renewing, taking over an expired Lease, releasing it, stepping down when
renewals fail, the race of two candidates (resourceVersion precondition), the run loop's
handover timing, and that only the leader's KubeBinder binds. Single rounds are driven with
an injected clock; the run-loop tests use real time with short durations.
"""

from __future__ import annotations

import asyncio
import re
import time

import orjson
import pytest

from extender import wiring
from extender.kube.binder import KubeBinder
from extender.kube.lease import LeaderElector, micro_time, parse_time
from extender.server import make_app
from extender.settings import Settings
from extender.verdicts import NOT_LEADER, OK
from tests.fakeapi.server import FakeApiServer, RequestInfo
from tests.kube.cluster import Harness, claim, device_class, gpu_slice, node, pod, until

NS, NAME = "kube-system", "dra-topology-extender"
MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)$")


class Clock:
    """A settable wall clock (epoch seconds)."""

    def __init__(self) -> None:
        self.now = float(int(time.time()))  # a whole second: MicroTime must still carry .000000

    def __call__(self) -> float:
        return self.now


def elector(
    api: FakeApiServer, identity: str, clock: Clock | None = None, **durations: float
) -> LeaderElector:
    timing = {"lease_duration": 15.0, "renew_deadline": 10.0, "retry_period": 2.0, **durations}
    return LeaderElector(
        api.api_client(), namespace=NS, name=NAME, identity=identity, clock=clock or time.time, **timing
    )


def lease(api: FakeApiServer) -> dict:
    stored = api.get_object("Lease", NAME, NS)
    assert stored is not None
    return stored


@pytest.fixture
async def electors(fake_api: FakeApiServer):
    made: list[LeaderElector] = []

    def make(identity: str, clock: Clock | None = None, **durations: float) -> LeaderElector:
        made.append(elector(fake_api, identity, clock, **durations))
        return made[-1]

    yield make
    for one in made:
        await one.stop(release=False)


def test_micro_time_always_has_six_fraction_digits():
    """A whole second still serialises as .000000 (the API server's MicroTime layout needs it)."""
    assert micro_time(1_700_000_000.0).isoformat() == "2023-11-14T22:13:20.000000+00:00"
    assert parse_time("2023-11-14T22:13:20.000000Z") == 1_700_000_000.0


async def test_first_candidate_creates_the_lease(fake_api: FakeApiServer, electors):
    """No Lease: the candidate creates it with itself as holder and leads."""
    clock = Clock()
    a = electors("replica-a", clock)
    assert await a.try_acquire_or_renew() is True
    assert a.is_leader() and a.holder() == "replica-a"
    spec = lease(fake_api)["spec"]
    assert spec["holderIdentity"] == "replica-a"
    assert spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0
    assert MICRO_TIME.match(spec["renewTime"]) and MICRO_TIME.match(spec["acquireTime"])
    assert parse_time(spec["renewTime"]) == clock.now == parse_time(spec["acquireTime"])


async def test_renewal_moves_renew_time_and_keeps_acquire_time(fake_api: FakeApiServer, electors):
    clock = Clock()
    a = electors("replica-a", clock)
    await a.try_acquire_or_renew()
    acquired = lease(fake_api)["spec"]["acquireTime"]
    clock.now += 2
    assert await a.try_acquire_or_renew() is True
    spec = lease(fake_api)["spec"]
    assert spec["acquireTime"] == acquired
    assert parse_time(spec["renewTime"]) == clock.now
    assert spec["leaseTransitions"] == 0


async def test_follower_waits_while_the_lease_is_valid_then_takes_it_over(fake_api: FakeApiServer, electors):
    """A valid Lease held by another is left alone; once renewTime + duration is past, it is taken."""
    clock = Clock()
    a, b = electors("replica-a", clock), electors("replica-b", clock)
    await a.try_acquire_or_renew()
    assert await b.try_acquire_or_renew() is False
    assert b.holder() == "replica-a"
    clock.now += 15  # renewTime + 15 == now: not yet expired
    assert await b.try_acquire_or_renew() is False
    assert not a.is_leader()  # a has not renewed for longer than its renew deadline
    clock.now += 0.5
    assert await b.try_acquire_or_renew() is True
    spec = lease(fake_api)["spec"]
    assert spec["holderIdentity"] == "replica-b" and spec["leaseTransitions"] == 1
    assert parse_time(spec["acquireTime"]) == clock.now
    assert await a.try_acquire_or_renew() is False
    assert a.holder() == "replica-b"


async def test_leader_steps_down_when_renewals_fail_for_the_renew_deadline(fake_api: FakeApiServer, electors):
    clock = Clock()
    a = electors("replica-a", clock)
    await a.try_acquire_or_renew()
    fake_api.fail_next(100, status=500, resource="leases")
    clock.now += 6
    with pytest.raises(Exception, match="500"):
        await a.try_acquire_or_renew()
    assert a.is_leader()  # 6 s without renewal < 10 s deadline
    clock.now += 4
    assert not a.is_leader()


async def test_release_lets_a_follower_take_over_at_once(fake_api: FakeApiServer, electors):
    """stop(release=True) clears holderIdentity; the follower acquires without waiting for expiry."""
    clock = Clock()
    a, b = electors("replica-a", clock), electors("replica-b", clock)
    await a.try_acquire_or_renew()
    assert await b.try_acquire_or_renew() is False
    await a.stop(release=True)
    spec = lease(fake_api)["spec"]
    assert not spec.get("holderIdentity") and spec["leaseDurationSeconds"] == 1
    assert not a.is_leader()
    assert await b.try_acquire_or_renew() is True
    assert lease(fake_api)["spec"]["leaseTransitions"] == 1


async def test_two_candidates_racing_for_an_expired_lease(fake_api: FakeApiServer, electors):
    """Both read the same expired Lease; the resourceVersion precondition lets exactly one win."""
    clock = Clock()
    a = electors("replica-a", clock)
    await a.try_acquire_or_renew()
    clock.now += 60
    b, c = electors("replica-b", clock), electors("replica-c", clock)

    arrived: list[str] = []
    both_read = asyncio.Event()  # lives on the server's loop; created on first use there

    async def barrier(info: RequestInfo) -> None:
        # Hold each Lease GET until both candidates have sent theirs: both read the same version.
        if (info.resource, info.verb) == ("leases", "get"):
            arrived.append(info.path)
            if len(arrived) >= 2:
                both_read.set()
            await asyncio.wait_for(both_read.wait(), 5)

    fake_api.on_request = barrier
    won = await asyncio.gather(b.try_acquire_or_renew(), c.try_acquire_or_renew())
    fake_api.on_request = None
    assert sorted(won) == [False, True]
    winner = "replica-b" if won[0] else "replica-c"
    assert lease(fake_api)["spec"]["holderIdentity"] == winner
    # a created it; b and c both read, then both wrote: one write was refused with 409.
    assert [v for v, _, r, *_ in fake_api.request_log() if r == "leases"] == [
        "get",
        "create",
        "get",
        "get",
        "update",
        "update",
    ]


async def test_run_loop_hands_over_within_the_lease_duration(fake_api: FakeApiServer, electors):
    """Real time: the leader stops renewing (crash, no release); it stops leading after the renew
    deadline and the follower leads within lease duration + one jittered retry period."""
    timing = {"lease_duration": 1.0, "renew_deadline": 0.6, "retry_period": 0.1}
    a, b = electors("replica-a", **timing), electors("replica-b", **timing)
    run_a = asyncio.create_task(a.run())
    await until(a.is_leader, what="a to lead")
    run_b = asyncio.create_task(b.run())
    await asyncio.sleep(0.5)
    assert a.is_leader() and not b.is_leader() and b.holder() == "replica-a"
    run_a.cancel()  # a dies without releasing
    lost = time.monotonic()
    await until(lambda: not a.is_leader(), timeout=2, what="a to step down")
    assert time.monotonic() - lost <= 0.6 + 0.05
    await until(b.is_leader, timeout=3, what="b to take over")
    assert time.monotonic() - lost <= 1.0 + 0.1 * 2.2 + 0.3  # lease + jittered retry + slack
    await b.stop(release=True)
    await run_b
    assert not lease(fake_api)["spec"].get("holderIdentity")


async def test_only_the_leader_binds(fake_api: FakeApiServer, electors):
    """Two replicas on one API server: the follower refuses, the leader binds; after the leader
    releases the Lease, the roles swap."""
    fake_api.put_object(device_class())
    fake_api.put_object(node("n1"))
    fake_api.put_object(gpu_slice("n1", 2))
    for name in ("c1", "c2"):
        fake_api.put_object(claim(name))
    fake_api.put_object(pod("p1", ["c1"]))
    fake_api.put_object(pod("p2", ["c2"]))
    timing = {"lease_duration": 3.0, "renew_deadline": 2.0, "retry_period": 0.1}
    a, b = electors("replica-a", **timing), electors("replica-b", **timing)
    # Replicas first: their start-up (client model building, first lists) may hold the GIL
    # for a while, which must not count against a's renew deadline.
    async with Harness(fake_api, elector=a) as ha, Harness(fake_api, elector=b) as hb:
        runs = [asyncio.create_task(a.run())]
        await until(a.is_leader, what="a to lead")
        runs.append(asyncio.create_task(b.run()))
        await until(lambda: b.holder() == "replica-a", what="b to see a's Lease")
        error, reason = await hb.bind("p1", "n1")
        assert reason == NOT_LEADER and "replica-a" in error
        assert await ha.bind("p1", "n1") == ("", OK)
        await a.stop(release=True)
        await until(b.is_leader, timeout=2, what="b to take over")
        await hb.caught_up()
        assert (await ha.bind("p2", "n1"))[1] == NOT_LEADER
        assert await hb.bind("p2", "n1") == ("", OK)
    await b.stop(release=True)
    await asyncio.gather(*runs)
    devices = [
        r["device"]
        for c in fake_api.list_objects("ResourceClaim")
        for r in c["status"]["allocation"]["devices"]["results"]
    ]
    assert sorted(devices) == ["gpu-0", "gpu-1"]


async def test_kube_services_campaign_bind_and_release_with_the_app(fake_api: FakeApiServer, aiohttp_client):
    """wiring.build_kube_services with leader_elect: the app's cleanup_ctx starts the watch and
    the election, /bind goes through KubeBinder once leading, and shutdown releases the Lease."""
    fake_api.put_object(device_class())
    fake_api.put_object(node("n1"))
    fake_api.put_object(gpu_slice("n1", 1))
    fake_api.put_object(claim("c1"))
    uid = fake_api.put_object(pod("p1", ["c1"]))["metadata"]["uid"]
    settings = Settings(
        kube=True,
        leader_elect=True,
        lease_duration_seconds=3.0,
        renew_deadline_seconds=2.0,
        retry_period_seconds=0.1,
    )
    placement, binder, source = wiring.build_kube_services(settings, api_client=fake_api.api_client())
    assert isinstance(binder, KubeBinder)
    app = make_app(settings, placement=placement, binder=binder)
    app.cleanup_ctx.append(wiring.kube_app_context(placement, source, binder))
    http = await aiohttp_client(app)
    await until(placement.ready, what="the watch to sync")
    await until(lambda: (fake_api.get_object("Lease", NAME, NS) or {}).get("spec", {}).get("holderIdentity"))
    body = {"PodName": "p1", "PodNamespace": "ml", "PodUID": uid, "Node": "n1"}
    await until(lambda: binder._elector is not None and binder._elector.is_leader(), what="leadership")
    response = await http.post("/bind", data=orjson.dumps(body))
    assert (await response.json()) == {"Error": ""}
    assert fake_api.get_object("Pod", "p1", "ml")["spec"]["nodeName"] == "n1"
    await http.close()
    assert not lease(fake_api)["spec"].get("holderIdentity")  # released on shutdown
