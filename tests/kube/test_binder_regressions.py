"""Regressions found by the bind property test, each pinned by a deterministic test.

The assumed entry of a bind whose claim was allocated elsewhere (found by
`test_bind_properties.py::test_interleavings_in_memory`, minimal example below, schedule seed 3):

1. bind p0 (claim c0) chooses n0/gpu-0, assumes it for c0 and writes c0's finalizer;
2. another scheduler allocates c0 on its own node; the watch shows it;
3. p0's status write gets a 409 (c0 changed). Until p0's bind re-reads c0 and gives up, its
   assumed entry c0 -> n0/gpu-0 is still there, and the bind is still able to write it;
4. bind p3 (claim c1) evaluates n0. `collect_allocated` used to skip any assumed entry whose
   claim shows an allocation (meant for "our write is now visible, do not count it twice"),
   so it skipped c0's entry although the visible allocation was someone else's: n0/gpu-0
   looked free, p3 assumed it for c1 and wrote c1 -> n0/gpu-0. Invariant 3 of the property
   test fails here: an assumed device (c0's) is allocated to another claim on the server;
5. that is a real double allocation as soon as c0 is deallocated before p0's bind re-reads it
   (its other user went away: the resourceclaim controller, or the scheduler's PostFilter,
   clears an allocation that nobody reserves): the re-read finds c0 unallocated, p0's bind
   writes c0 -> n0/gpu-0, and the API server (which does not check devices across claims)
   accepts it. c0 and c1 then both hold n0/gpu-0.

Fix (extender/claims.py, `collect_allocated`): an assumed entry is skipped only when the claim
shows the *same* devices; otherwise both the visible and the assumed devices count as taken
until the bind forgets its entry (it fails at the re-read, or writes and the watch shows it).
Step 4 then answers no_fit for p3, and step 5 is a legitimate single allocation.

The same mistake in the binder's prune of written claims (found while tracing the above):
`_prune_assumed` forgot the entry of a claim we wrote as soon as the watched claim showed
*any* allocation. If someone else's allocation and release of the claim came before our write,
the lagging watch shows their allocation first: our entry went, our devices looked free until
our write showed, and the next bind took them. The entry now goes when the watch reaches our
write's resourceVersion, or the claim is gone (`extender.kube.binder._write_seen`, step by step there).
"""

from __future__ import annotations

import asyncio
import copy
import random
from collections.abc import Callable
from typing import Any

import pytest

from extender.allocator.model import DeviceID
from extender.claims import collect_allocated, same_devices
from extender.cluster.state import ClusterState
from extender.core.assumed import AssumeCache
from extender.core.placement import Placement
from extender.kube import api as kube_api
from extender.kube.binder import KubeBinder, _write_seen
from extender.objects import Obj
from extender.verdicts import NO_FIT, OK
from tests.fakeapi.store import Store
from tests.kube.cluster import NAMESPACE, allocation
from tests.kube.test_binder_properties import (
    _SERIALIZER,
    CLAIMS,
    FEATURES,
    PODS,
    SCHEDULES_PER_SCENARIO,
    InlineWorker,
    Op,
    Scenario,
    StoreApi,
    StoreWatch,
    allocate_elsewhere,
    check_assumed,
    device_owners,
    objects_of,
    release_foreign,
    run_in_memory,
)

#: One node with one GPU; p0..p2 share claim c0, p3 uses c1; bind p0, bind p3 and a foreign
#: allocation of c0 interleave (the property test's shrunk example, with base_seed=0).
ONE_GPU_TWO_CLAIMS = Scenario(
    gpus=(1,),
    claim_counts=(1, 1),
    pod_claims=((0,), (0,), (0,), (1,)),
    preallocated=(),
    ops=(Op(kind="bind", target=0, node=0), Op(kind="bind", target=3, node=0), Op(kind="foreign", target=0)),
)


@pytest.mark.parametrize("seed", range(SCHEDULES_PER_SCENARIO))
def test_minimal_example_of_the_property_test(seed: int) -> None:
    """The shrunk scenario under the 10 schedules of base_seed=0 (seed 3 failed invariant 3)."""
    asyncio.run(run_in_memory(ONE_GPU_TWO_CLAIMS, seed))


# ---------------------------------------------------------------------- step by step
class Gate:
    """Holds the next call of one API method until released."""

    def __init__(self, method: str) -> None:
        self.method = method
        self.reached = asyncio.Event()
        self.release = asyncio.Event()


class GatedBinder(KubeBinder):
    """KubeBinder over a StoreApi whose calls run at once, except one gated call."""

    def __init__(self, api: StoreApi, state: ClusterState, placement: Placement) -> None:
        super().__init__(_SERIALIZER, state, placement, max_workers=1)
        self._core = self._resource = api  # type: ignore[assignment]
        self.gate: Gate | None = None

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        gate = self.gate
        if gate is not None and fn.__name__ == gate.method:
            self.gate = None
            gate.reached.set()
            await gate.release.wait()
        return kube_api.call(fn, *args, **kwargs)


async def _allocated_elsewhere_then_released() -> tuple[Store, dict[str, tuple[str, str]], list[str]]:
    """Steps 1-5 of the module docstring, each at a fixed point; returns the store, the binds'
    (error, reason) by pod and the violations of invariant 3 seen between the steps."""
    store = Store()
    for obj in objects_of(ONE_GPU_TWO_CLAIMS):
        store.put(obj)
    state = ClusterState()
    watch = StoreWatch(store, state)
    placement = Placement(state, features=FEATURES, assumed=AssumeCache(ttl_seconds=3600))
    placement.worker = InlineWorker()  # type: ignore[assignment]
    binder = GatedBinder(StoreApi(store), state, placement)

    def get(kind: str, name: str) -> Obj:
        return copy.deepcopy(store.get(CLAIMS if kind == "ResourceClaim" else PODS, NAMESPACE, name))

    violations: list[str] = []

    def invariant() -> None:
        try:
            check_assumed(placement, store.list(CLAIMS)[0])
        except AssertionError as exc:  # recorded: the run goes on to show what it leads to
            violations.append(str(exc))

    async def bind(pod_name: str) -> tuple[str, str]:
        uid = get("Pod", pod_name)["metadata"]["uid"]
        outcome = await binder.bind(namespace=NAMESPACE, name=pod_name, uid=uid, node="n0")
        return outcome.error, outcome.reason

    # 1. p0's bind assumes c0 -> n0/gpu-0, writes the finalizer and stops before its status write.
    gate = binder.gate = Gate("replace_namespaced_resource_claim_status")
    first = asyncio.ensure_future(bind("p0"))
    await gate.reached.wait()
    c0_uid = get("ResourceClaim", "c0")["metadata"]["uid"]
    assert list(placement.assumed.active()) == [c0_uid]
    # 2. another scheduler allocates c0 on its node; the watch shows it.
    updated = allocate_elsewhere(get("ResourceClaim", "c0"), 0)
    assert updated is not None
    store.put(updated)
    watch.deliver()
    invariant()
    # 4. p3's bind runs while p0's assumption of n0/gpu-0 is still live.
    results = {"p3": await bind("p3")}
    invariant()
    # 3 and 5. c0 is released before p0's bind goes on: its status write 409s, it re-reads c0.
    released = release_foreign(get("ResourceClaim", "c0"), 0)
    assert released is not None
    store.put(released)
    watch.deliver()
    gate.release.set()
    results["p0"] = await first
    watch.deliver()
    invariant()
    binder.close()
    return store, results, violations


def test_assumed_devices_of_a_claim_allocated_elsewhere_stay_taken() -> None:
    """Without the fix p3 gets n0/gpu-0 at step 4 and p0's bind writes it again at step 5."""
    store, results, violations = asyncio.run(_allocated_elsewhere_then_released())
    owners = device_owners(store.list(CLAIMS)[0])
    assert all(len(o) == 1 for o in owners.values()), f"devices in two claims: {owners}"
    assert not violations
    assert results["p3"][1] == NO_FIT, results["p3"]
    assert results["p0"] == ("", OK)
    c0 = store.get(CLAIMS, NAMESPACE, "c0")
    assert [r["device"] for r in c0["status"]["allocation"]["devices"]["results"]] == ["gpu-0"]
    assert not (store.get(CLAIMS, NAMESPACE, "c1").get("status") or {}).get("allocation")


async def _our_write_behind_a_foreign_allocation() -> tuple[Store, dict[str, tuple[str, str]]]:
    """c0 is allocated elsewhere and released before p0's bind, unseen by the watch; p0's bind
    (409, re-read) writes c0; the watch then shows only the foreign allocation; p3 binds."""
    store = Store()
    for obj in objects_of(ONE_GPU_TWO_CLAIMS):
        store.put(obj)
    state = ClusterState()
    watch = StoreWatch(store, state)
    placement = Placement(state, features=FEATURES, assumed=AssumeCache(ttl_seconds=3600))
    placement.worker = InlineWorker()  # type: ignore[assignment]
    binder = GatedBinder(StoreApi(store), state, placement)

    def get_claim(name: str) -> Obj:
        return copy.deepcopy(store.get(CLAIMS, NAMESPACE, name))

    async def bind(pod_name: str) -> tuple[str, str]:
        uid = store.get(PODS, NAMESPACE, pod_name)["metadata"]["uid"]
        outcome = await binder.bind(namespace=NAMESPACE, name=pod_name, uid=uid, node="n0")
        return outcome.error, outcome.reason

    foreign = allocate_elsewhere(get_claim("c0"), 0)
    assert foreign is not None
    store.put(foreign)
    released = release_foreign(get_claim("c0"), 0)
    assert released is not None
    store.put(released)
    results = {"p0": await bind("p0")}
    watch.deliver(1)  # the foreign allocation only
    shown = state.get("ResourceClaim", "c0", NAMESPACE)
    assert (
        shown is not None
        and shown["status"]["allocation"]["nodeSelector"] == foreign["status"]["allocation"]["nodeSelector"]
    )
    results["p3"] = await bind("p3")
    watch.deliver()
    check_assumed(placement, store.list(CLAIMS)[0])
    binder.close()
    return store, results


def test_written_entry_outlives_an_older_foreign_allocation_in_the_watch() -> None:
    """Without the fix p3 gets n0/gpu-0, which p0's bind wrote to c0."""
    store, results = asyncio.run(_our_write_behind_a_foreign_allocation())
    owners = device_owners(store.list(CLAIMS)[0])
    assert all(len(o) == 1 for o in owners.values()), f"devices in two claims: {owners}"
    assert results["p0"] == ("", OK)
    assert results["p3"][1] == NO_FIT, results["p3"]


def test_write_seen_by_resource_version_else_by_devices() -> None:
    ours = allocation("n0", ["gpu-0"])
    theirs = allocation("elsewhere", ["gpu-0"])

    def shown(alloc: Obj | None, rv: str, uid: str = "u") -> Obj:
        return {**_claim(uid, alloc), "metadata": {"uid": uid, "resourceVersion": rv}}

    assert not _write_seen(shown(theirs, "12"), "u", ours, "14")  # older: the watch lags
    assert _write_seen(shown(ours, "14"), "u", ours, "14")
    assert _write_seen(shown(None, "15"), "u", ours, "14")  # later: deallocated since
    assert _write_seen(None, "u", ours, "14")  # deleted
    assert _write_seen(shown(None, "3", uid="other"), "u", ours, "14")  # re-created
    assert not _write_seen(shown(theirs, "x"), "u", ours, "y")  # not integers: by devices
    assert _write_seen(shown(ours, "x"), "u", ours, "y")


# ---------------------------------------------------------------------- collect_allocated
def _claim(uid: str, alloc: Obj | None) -> Obj:
    return {"metadata": {"uid": uid}, "status": {"allocation": alloc} if alloc else {}}


def _ids(pool: str, *names: str) -> frozenset[DeviceID]:
    return frozenset(DeviceID("gpu.example.com", pool, n) for n in names)


def test_assumed_entry_counts_while_its_claim_shows_another_allocation() -> None:
    ours = allocation("n0", ["gpu-0"])
    theirs = allocation("elsewhere", ["gpu-0"])
    collected = collect_allocated([_claim("c0", theirs)], {"c0": ours})
    assert collected.devices == _ids("n0", "gpu-0") | _ids("elsewhere", "gpu-0")


def test_assumed_entry_counts_once_when_its_write_shows() -> None:
    ours = allocation("n0", ["gpu-0", "gpu-1"])
    shown = copy.deepcopy(ours)  # the watch's copy: equal, not the same object
    shown["devices"]["results"].reverse()  # and in another order
    assert same_devices(shown, ours)
    collected = collect_allocated([_claim("c0", shown)], {"c0": ours})
    assert collected.devices == _ids("n0", "gpu-0", "gpu-1")
    capacity = {"memory": "1Gi"}
    share = {"request": "gpu", "driver": "d", "pool": "n0", "device": "gpu-2", "shareID": "s1"}
    shared = {"devices": {"results": [{**share, "consumedCapacity": capacity}]}}
    counted = collect_allocated([_claim("c1", copy.deepcopy(shared))], {"c1": shared})
    assert str(counted.aggregated_capacity[DeviceID("d", "n0", "gpu-2")]["memory"]) == "1Gi"  # not 2Gi


def test_an_unwritten_assumption_counts() -> None:
    collected = collect_allocated([_claim("c0", None)], {"c0": allocation("n0", ["gpu-3"])})
    assert collected.devices == _ids("n0", "gpu-3")


def test_random_order_of_results_is_the_same_allocation() -> None:
    """same_devices ignores order and formatting, not devices, requests or shares."""
    rng = random.Random(7)
    base = allocation("n0", [f"gpu-{i}" for i in range(6)])
    shuffled = copy.deepcopy(base)
    rng.shuffle(shuffled["devices"]["results"])
    assert same_devices(base, shuffled)
    other = copy.deepcopy(base)
    other["devices"]["results"][0]["device"] = "gpu-9"
    assert not same_devices(base, other)
    renamed = copy.deepcopy(base)
    renamed["devices"]["results"][0]["request"] = "other"
    assert not same_devices(base, renamed)
    shared = copy.deepcopy(base)
    shared["devices"]["results"][0]["shareID"] = "s"
    assert not same_devices(base, shared)
