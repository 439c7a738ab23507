"""Randomised concurrent bind / filter / watch interleavings: the invariants that must always hold.

How the 1,000 interleavings are reached: `test_interleavings_in_memory` has hypothesis draw
100 scenarios (`max_examples=100`: nodes, claims, pods, and a list of operations) and runs
each scenario under 10 different seeded schedules (`SCHEDULES_PER_SCENARIO`), so one run of
the test executes 100 x 10 = 1,000 interleavings. A schedule decides when each operation
starts, how many times every task yields between steps, and how far the watch lags.

What is real and what is simulated there, so the count stays cheap (well under a minute):
- real: KubeBinder (choose lock, AssumeCache, 409 handling, undo), Placement, the allocator,
  ClusterState, and the fake API server's object store (`tests.fakeapi.store.Store`: the same
  resourceVersion checks, status-subresource rules, finalizer-delayed deletes and Binding
  rules the HTTP server applies). Request bodies are serialised by the real client's models;
- simulated: HTTP (the binder's `_call` seam invokes the store-backed methods directly on the
  loop, with random yields before and after, so a write can be applied but not yet answered)
  and the watch (the store's event history is applied to ClusterState in order, a random
  number of events at a time, so the cache lags the server by random amounts).
All tasks share one event loop and yield only through `asyncio.sleep(0)`, so a schedule is a
deterministic function of its seed: a failure prints the scenario and seed that reproduce it.

`test_interleavings_over_http` runs 40 further seeded scenarios end to end: the fake HTTP
server, the real `kubernetes` client on the binder's thread pool, and the real watch
(`extender.kube.watch.KubeSource`), with foreign writes injected from the server's request
hook. Thread timing makes those runs non-deterministic; they check the same invariants.

External events in both: claims allocated by "someone else" (on a node the extender never
binds to, as another scheduler would), and claims deleted; in memory also such a foreign
allocation released again (its user went away: the claim is deallocated), which lets a bind
still holding an assumption for that claim write it after all.

Invariants checked after each run (and the assumed-device one at every step):
1. no device appears in two claims' allocations;
2. every claim is either fully written by us (finalizer + allocation + reservedFor of a pod
   that is bound to the allocation's node) or carries nothing of ours (no reservation of
   our pods beyond the initial ones, no finalizer without an allocation);
3. assumed entries never name a device allocated (on the server) to another claim, and at
   the end only claims whose allocation we wrote still have one (failed binds forget theirs);
4. every pod with a successful bind has exactly one successful Binding, others none.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from extender.allocator.features import Features
from extender.claims import DELETE_PROTECTION_FINALIZER
from extender.cluster.state import ClusterState
from extender.core.assumed import AssumeCache
from extender.core.placement import Placement
from extender.kube import api as kube_api
from extender.kube.binder import KubeBinder
from extender.objects import Obj
from extender.pods import parse_pod
from extender.verdicts import OK
from tests.fakeapi.server import FakeApiServer, RequestInfo
from tests.fakeapi.store import BY_KIND, ApiError, Store
from tests.kube.cluster import (
    NAMESPACE,
    Harness,
    allocation,
    claim,
    device_class,
    gpu_slice,
    node,
    pod,
)

FEATURES = Features.from_gates()
SCHEDULES_PER_SCENARIO = 10
#: Foreign allocations land here; binds never target it (another scheduler's node).
ELSEWHERE = "elsewhere"
CLAIMS, PODS = BY_KIND["ResourceClaim"], BY_KIND["Pod"]
_SERIALIZER = client.ApiClient()


# ---------------------------------------------------------------------- scenarios
@dataclass(frozen=True)
class Op:
    kind: str  # bind, filter, foreign, release, delete
    target: int  # pod index (bind, filter) or claim index (foreign, release, delete)
    node: int = 0  # bind: node index


@dataclass(frozen=True)
class Scenario:
    gpus: tuple[int, ...]  # GPUs per bindable node n0, n1, ...
    claim_counts: tuple[int, ...]  # GPUs each claim asks for
    pod_claims: tuple[tuple[int, ...], ...]  # claim indexes per pod (claims may be shared)
    preallocated: tuple[int, ...]  # claims allocated on n0 and reserved before the run (default profile)
    ops: tuple[Op, ...]


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    gpus = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=2)))
    claim_counts = tuple(draw(st.lists(st.integers(1, 2), min_size=2, max_size=6)))
    claim_ids = st.integers(0, len(claim_counts) - 1)
    pod_claims = tuple(
        tuple(sorted(set(c)))
        for c in draw(st.lists(st.lists(claim_ids, min_size=1, max_size=2), min_size=2, max_size=5))
    )
    preallocated = tuple(sorted(draw(st.sets(claim_ids, max_size=2))))
    pod_ids = st.integers(0, len(pod_claims) - 1)
    op = st.one_of(
        st.builds(Op, st.just("bind"), pod_ids, st.integers(0, len(gpus) - 1)),
        st.builds(Op, st.just("bind"), pod_ids, st.integers(0, len(gpus) - 1)),
        st.builds(Op, st.just("filter"), pod_ids),
        st.builds(Op, st.just("foreign"), claim_ids),
        st.builds(Op, st.just("release"), claim_ids),
        st.builds(Op, st.just("delete"), claim_ids),
    )
    ops = tuple(draw(st.lists(op, min_size=1, max_size=8)))
    return Scenario(gpus, claim_counts, pod_claims, preallocated, ops)


def objects_of(scenario: Scenario) -> list[Obj]:
    objs: list[Obj] = [device_class(), node(ELSEWHERE), gpu_slice(ELSEWHERE, 2 * len(scenario.claim_counts))]
    for i, count in enumerate(scenario.gpus):
        objs += [node(f"n{i}"), gpu_slice(f"n{i}", count)]
    objs += [claim(f"c{i}", count=count) for i, count in enumerate(scenario.claim_counts)]
    objs += [pod(f"p{i}", [f"c{c}" for c in uses]) for i, uses in enumerate(scenario.pod_claims)]
    return objs


def preallocate(scenario: Scenario, get: Callable[[str, str], Obj], put: Callable[[Obj], Obj]) -> None:
    """Allocate the pre-allocated claims on n0 (first free GPUs) and reserve them for their pods,
    as the in-tree plugin would have done for default-profile pods."""
    next_gpu = 0
    for c in scenario.preallocated:
        count = scenario.claim_counts[c]
        if next_gpu + count > scenario.gpus[0]:
            continue
        devices = [f"gpu-{next_gpu + k}" for k in range(count)]
        next_gpu += count
        users = [f"p{p}" for p, uses in enumerate(scenario.pod_claims) if c in uses]
        current = get("ResourceClaim", f"c{c}")
        current["metadata"]["finalizers"] = [DELETE_PROTECTION_FINALIZER]
        current["status"] = {
            "allocation": allocation("n0", devices),
            "reservedFor": [
                {"resource": "pods", "name": u, "uid": get("Pod", u)["metadata"]["uid"]} for u in users
            ],
        }
        put(current)


def allocate_elsewhere(current: Obj | None, index: int) -> Obj | None:
    """What another scheduler writes to an unallocated claim (None: nothing to do)."""
    if current is None or (current.get("status") or {}).get("allocation"):
        return None
    if current["metadata"].get("deletionTimestamp"):
        return None
    count = current["spec"]["devices"]["requests"][0]["exactly"].get("count", 1)
    updated = copy.deepcopy(current)
    finalizers = updated["metadata"].setdefault("finalizers", [])
    if DELETE_PROTECTION_FINALIZER not in finalizers:
        finalizers.append(DELETE_PROTECTION_FINALIZER)
    devices = [f"gpu-{2 * index + k}" for k in range(count)]  # each claim has its own two GPUs there
    updated["status"] = {
        "allocation": allocation(ELSEWHERE, devices),
        "reservedFor": [{"resource": "pods", "name": "foreign", "uid": f"foreign-{index}"}],
    }
    return updated


def release_foreign(current: Obj | None, index: int) -> Obj | None:
    """Deallocation of claim `index`'s foreign allocation once nobody reserves it (what the
    resourceclaim controller or the scheduler's PostFilter writes): no allocation, no
    reservations, no delete-protection finalizer. None: not allocated by someone else."""
    if current is None or current["metadata"].get("deletionTimestamp"):
        return None
    status = current.get("status") or {}
    if [r.get("uid") for r in status.get("reservedFor") or ()] != [f"foreign-{index}"]:
        return None
    updated = copy.deepcopy(current)
    updated["status"] = {}
    updated["metadata"]["finalizers"] = [
        f for f in updated["metadata"].get("finalizers") or () if f != DELETE_PROTECTION_FINALIZER
    ]
    return updated


# ---------------------------------------------------------------------- invariants
def device_owners(claims: list[Obj]) -> dict[tuple[str, str], list[str]]:
    owners: dict[tuple[str, str], list[str]] = {}
    for c in claims:
        results = (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
            "results"
        ) or ()
        for r in results:
            owners.setdefault((r["pool"], r["device"]), []).append(c["metadata"]["uid"])
    return owners


def check_assumed(placement: Placement, claims: list[Obj]) -> None:
    """Invariant 3: no assumed device is allocated to a different claim on the server."""
    owners = device_owners(claims)
    for claim_uid, alloc in placement.assumed.active().items():
        for r in alloc["devices"]["results"]:
            others = [o for o in owners.get((r["pool"], r["device"]), []) if o != claim_uid]
            assert not others, (
                f"assumed device {r['pool']}/{r['device']} of claim {claim_uid} is allocated to {others}"
            )


def check_no_leaked_assumptions(placement: Placement, claims: list[Obj]) -> None:
    """After the run: every assumed entry belongs to a claim whose allocation we wrote (a failed
    bind forgets its entries; successful ones wait for the watch or the TTL)."""
    by_uid = {c["metadata"]["uid"]: c for c in claims}
    for claim_uid, alloc in placement.assumed.active().items():
        written = ((by_uid.get(claim_uid) or {}).get("status") or {}).get("allocation")
        assert written is not None, f"assumed entry for claim {claim_uid}, which has no allocation"
        assert written["devices"] == alloc["devices"], f"assumed entry for claim {claim_uid} differs from it"


@dataclass
class Outcome:
    """What one run produced, for the final checks."""

    results: dict[str, list[tuple[str, str, str]]] = field(
        default_factory=dict
    )  # pod -> (node, error, reason)
    bindings: Counter[str] = field(default_factory=Counter)  # pod -> successful Binding calls


def check_final(
    claims: list[Obj], pods: dict[str, Obj], initial_reservations: set[tuple[str, str]], outcome: Outcome
) -> None:
    owners = device_owners(claims)
    shared = {d: o for d, o in owners.items() if len(o) > 1}
    assert not shared, f"devices in two claims: {shared}"  # invariant 1
    ours = {p["metadata"]["uid"]: name for name, p in pods.items()}
    for c in claims:
        name = c["metadata"]["name"]
        status = c.get("status") or {}
        alloc = status.get("allocation")
        reserved = [r["uid"] for r in status.get("reservedFor") or () if r["uid"] in ours]
        finalizers = c["metadata"].get("finalizers") or []
        if not alloc:  # invariant 2, untouched side
            assert not reserved, f"claim {name}: reservation {reserved} without allocation"
            assert DELETE_PROTECTION_FINALIZER not in finalizers, f"claim {name}: finalizer left behind"
            continue
        assert DELETE_PROTECTION_FINALIZER in finalizers, f"claim {name}: allocated without finalizer"
        alloc_node = alloc["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"][0]
        for uid in reserved:  # invariant 2, written side
            if (name, uid) in initial_reservations:
                continue
            pod_obj = pods[ours[uid]]
            assert pod_obj["spec"].get("nodeName") == alloc_node, (
                f"claim {name} reserved for {ours[uid]}, which is bound to "
                f"{pod_obj['spec'].get('nodeName')!r}, not {alloc_node}"
            )
    for pod_name, pod_obj in pods.items():  # invariant 4, and successful binds are complete
        oks = [n for n, _, reason in outcome.results.get(pod_name, []) if reason == OK]
        assert outcome.bindings[pod_name] == (1 if oks else 0), (pod_name, outcome)
        if not oks:
            assert not pod_obj["spec"].get("nodeName")
            continue
        assert pod_obj["spec"]["nodeName"] == oks[0] and set(oks) == {oks[0]}
        for entry in pod_obj["spec"]["resourceClaims"]:
            c = next(x for x in claims if x["metadata"]["name"] == entry["resourceClaimName"])
            assert pod_obj["metadata"]["uid"] in [r["uid"] for r in c["status"]["reservedFor"]]


# ---------------------------------------------------------------------- in-memory path
class _Raw:
    """Stands in for the urllib3 response the client returns with `_preload_content=False`."""

    def __init__(self, obj: Obj) -> None:
        self.data = orjson.dumps(obj)


class StoreApi:
    """The CoreV1Api / ResourceV1Api methods KubeBinder calls, over a fake-server Store.

    Bodies are serialised exactly as the client serialises them before sending; store errors
    become ApiExceptions with the HTTP status the fake server would answer.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.bindings: Counter[str] = Counter()

    def _do(self, fn: Callable[[], Obj | None]) -> _Raw:
        try:
            result = fn()
        except ApiError as exc:
            raise ApiException(
                status=exc.code, reason=exc.status["reason"], body=orjson.dumps(exc.status).decode()
            ) from None
        return _Raw(result or {"kind": "Status", "status": "Success"})

    def _get(self, rtype: Any, namespace: str, name: str) -> Obj:
        obj = self.store.get(rtype, namespace, name)
        if obj is None:
            raise ApiError(404, f'{rtype.qualified} "{name}" not found', "NotFound")
        return obj

    def read_namespaced_pod(self, name: str, namespace: str, **_: Any) -> _Raw:
        return self._do(lambda: self._get(PODS, namespace, name))

    def read_namespaced_resource_claim(self, name: str, namespace: str, **_: Any) -> _Raw:
        return self._do(lambda: self._get(CLAIMS, namespace, name))

    def replace_namespaced_resource_claim(self, name: str, namespace: str, body: Any, **_: Any) -> _Raw:
        data = _SERIALIZER.sanitize_for_serialization(body)
        return self._do(lambda: self.store.update(CLAIMS, namespace, name, data))

    def replace_namespaced_resource_claim_status(
        self, name: str, namespace: str, body: Any, **_: Any
    ) -> _Raw:
        data = _SERIALIZER.sanitize_for_serialization(body)
        return self._do(lambda: self.store.update(CLAIMS, namespace, name, data, subresource="status"))

    def create_namespaced_pod_binding(self, name: str, namespace: str, body: Any, **_: Any) -> _Raw:
        data = _SERIALIZER.sanitize_for_serialization(body)
        raw = self._do(lambda: self.store.bind(namespace, name, data))
        self.bindings[name] += 1
        return raw


class InlineWorker:
    """A PlacementWorker stand-in that runs the work at once on the calling (loop) thread."""

    async def run(
        self,
        fn: Callable[..., Any],
        *args: Any,
        timeout: float | None = None,
        start_timeout: float | None = None,
    ) -> Any:
        return fn(*args)


class Chaos:
    """Seeded cooperative scheduling: every step yields to the loop a random number of times."""

    def __init__(self, rng: random.Random, check: Callable[[], None]) -> None:
        self.rng = rng
        self.check = check

    async def step(self, most: int = 3) -> None:
        for _ in range(self.rng.randint(0, most)):
            await asyncio.sleep(0)
        self.check()


class SteppedBinder(KubeBinder):
    """KubeBinder whose API calls go to a StoreApi on the loop, between random yields.

    Only the transport seam (`_call`) and the API objects are replaced; everything the
    binder decides and writes is the production code.
    """

    def __init__(self, api: StoreApi, state: ClusterState, placement: Placement, chaos: Chaos) -> None:
        super().__init__(_SERIALIZER, state, placement, max_workers=1)
        self._core = self._resource = api  # type: ignore[assignment]
        self._chaos = chaos

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        await self._chaos.step()  # request in flight
        result = kube_api.call(fn, *args, **kwargs)
        await self._chaos.step()  # applied on the server, answer in flight
        return result


class StoreWatch:
    """Applies the store's event history to a ClusterState in order, as many events as asked."""

    def __init__(self, store: Store, state: ClusterState) -> None:
        self.store = store
        self.state = state
        for kind in ("Node", "ResourceSlice", "DeviceClass", "ResourceClaim", "Pod"):
            items, _ = store.list(BY_KIND[kind])
            for obj in items:
                state.upsert({**copy.deepcopy(obj), "kind": kind})
        self.rv = store.resource_version

    def pending(self) -> list[Any]:
        events = self.store.events_after(self.rv, CLAIMS)[0] + self.store.events_after(self.rv, PODS)[0]
        return sorted(events, key=lambda e: e.rv)

    def deliver(self, most: int | None = None) -> None:
        for event in self.pending()[:most]:
            obj = {**copy.deepcopy(event.obj), "kind": event.rtype.kind}
            if event.type == "DELETED":
                self.state.delete(event.rtype.kind, obj["metadata"]["name"], event.namespace)
            else:
                self.state.upsert(obj)
            self.rv = event.rv


async def run_in_memory(scenario: Scenario, seed: int) -> None:
    """One interleaving of `scenario` under schedule `seed`; asserts the invariants."""
    rng = random.Random(seed)
    store = Store()
    for obj in objects_of(scenario):
        store.put(obj)

    def get(kind: str, name: str) -> Obj:
        return copy.deepcopy(store.get(BY_KIND[kind], NAMESPACE, name))

    preallocate(scenario, get, store.put)
    initial = {
        (c["metadata"]["name"], r["uid"])
        for c in store.list(CLAIMS)[0]
        for r in (c.get("status") or {}).get("reservedFor") or ()
    }
    state = ClusterState()
    watch = StoreWatch(store, state)
    placement = Placement(state, features=FEATURES, assumed=AssumeCache(ttl_seconds=3600))
    # The seeded interleavings are of loop tasks: the watch above applies events on the loop, so
    # the binder's worker steps must run there too (inline), as the production worker thread
    # runs both the watch's writes and the binder's steps (`extender.worker`).
    placement.worker = InlineWorker()  # type: ignore[assignment]
    api = StoreApi(store)
    chaos = Chaos(rng, lambda: check_assumed(placement, store.list(CLAIMS)[0]))
    binder = SteppedBinder(api, state, placement, chaos)
    outcome = Outcome()
    nodes = [f"n{i}" for i in range(len(scenario.gpus))]
    running = True

    async def operate(op: Op, delay: int) -> None:
        for _ in range(delay):
            await asyncio.sleep(0)
        if op.kind == "bind":
            name = f"p{op.target}"
            uid = store.get(PODS, NAMESPACE, name)["metadata"]["uid"]
            bound = await binder.bind(namespace=NAMESPACE, name=name, uid=uid, node=nodes[op.node])
            error, reason = bound.error, bound.reason
            outcome.results.setdefault(name, []).append((nodes[op.node], error, reason))
        elif op.kind == "filter":
            seen = state.get("Pod", f"p{op.target}", NAMESPACE)
            if seen is not None:
                placement.filter(parse_pod(seen), nodes)
        elif op.kind in ("foreign", "release"):
            external = allocate_elsewhere if op.kind == "foreign" else release_foreign
            updated = external(get("ResourceClaim", f"c{op.target}"), op.target)
            if updated is not None:
                store.put(updated)
        else:
            with contextlib.suppress(ApiError):  # already gone
                store.delete(CLAIMS, NAMESPACE, f"c{op.target}")
        chaos.check()

    async def pump() -> None:
        while running:
            await chaos.step()
            if rng.random() < 0.5:
                watch.deliver(rng.randint(1, 3))

    pumping = asyncio.ensure_future(pump())
    await asyncio.gather(*(operate(op, rng.randint(0, 12)) for op in scenario.ops))
    running = False
    await pumping
    watch.deliver()
    binder.close()
    outcome.bindings = api.bindings
    claims = store.list(CLAIMS)[0]
    check_assumed(placement, claims)
    check_no_leaked_assumptions(placement, claims)
    pods = {p["metadata"]["name"]: p for p in store.list(PODS)[0]}
    check_final(claims, pods, initial, outcome)


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(scenario=scenarios(), base_seed=st.integers(0, 2**32 - 1))
@example(  # assumed entry of a claim allocated elsewhere (tests/kube/test_binder_regressions.py)
    scenario=Scenario(
        gpus=(1,),
        claim_counts=(1, 1),
        pod_claims=((0,), (0,), (0,), (1,)),
        preallocated=(),
        ops=(Op("bind", 0, 0), Op("bind", 3, 0), Op("foreign", 0)),
    ),
    base_seed=0,
)
def test_interleavings_in_memory(scenario: Scenario, base_seed: int) -> None:
    """100 scenarios x 10 seeded schedules = 1,000 interleavings (see the module docstring)."""
    for offset in range(SCHEDULES_PER_SCENARIO):
        seed = base_seed + offset
        try:
            asyncio.run(run_in_memory(scenario, seed))
        except AssertionError as exc:
            raise AssertionError(f"schedule seed {seed}: {exc}") from exc


# ---------------------------------------------------------------------- over HTTP
HTTP_RUNS = 40


async def run_over_http(scenario: Scenario, seed: int) -> None:
    """One run through the fake HTTP server, the real client and the real watch."""
    rng = random.Random(seed)
    with FakeApiServer(bookmark_interval=0.05) as api:
        for obj in objects_of(scenario):
            api.put_object(obj)
        preallocate(scenario, lambda kind, name: api.get_object(kind, name, NAMESPACE), api.put_object)
        initial = {
            (c["metadata"]["name"], r["uid"])
            for c in api.list_objects("ResourceClaim")
            for r in (c.get("status") or {}).get("reservedFor") or ()
        }
        bindings: Counter[str] = Counter()
        store_bind = api.store.bind

        def counting_bind(namespace: str, name: str, binding: Obj) -> None:
            store_bind(namespace, name, binding)  # raises on 404/409: only successes count
            bindings[name] += 1

        api.store.bind = counting_bind  # type: ignore[method-assign]
        external = [op for op in scenario.ops if op.kind in ("foreign", "delete")]

        def on_request(info: RequestInfo) -> None:
            # Foreign writes happen between the binder's requests, at random ones.
            if info.verb in ("watch", "list") or not external or rng.random() < 0.6:
                return
            op = external.pop(0)
            with api.store.lock:
                if op.kind == "foreign":
                    updated = allocate_elsewhere(
                        api.get_object("ResourceClaim", f"c{op.target}", NAMESPACE), op.target
                    )
                    if updated is not None:
                        api.put_object(updated)
                else:
                    api.delete_object("ResourceClaim", f"c{op.target}", NAMESPACE)

        async with Harness(api) as h:
            api.on_request = on_request
            outcome = Outcome()
            nodes = [f"n{i}" for i in range(len(scenario.gpus))]

            async def operate(op: Op, delay: float) -> None:
                await asyncio.sleep(delay)
                if op.kind == "bind":
                    name = f"p{op.target}"
                    error, reason = await h.bind(name, nodes[op.node])
                    outcome.results.setdefault(name, []).append((nodes[op.node], error, reason))
                elif op.kind == "filter":
                    seen = h.state.get("Pod", f"p{op.target}", NAMESPACE)
                    if seen is not None:
                        h.placement.filter(parse_pod(seen), nodes)
                check_assumed(h.placement, api.list_objects("ResourceClaim"))

            await asyncio.gather(*(operate(op, rng.random() * 0.02) for op in scenario.ops))
            api.on_request = None
            await h.caught_up()
            claims = api.list_objects("ResourceClaim")
            check_assumed(h.placement, claims)
            check_no_leaked_assumptions(h.placement, claims)
            pods = {p["metadata"]["name"]: p for p in api.list_objects("Pod")}
            outcome.bindings = bindings
            check_final(claims, pods, initial, outcome)


async def test_interleavings_over_http() -> None:
    """40 seeded scenarios through the fake HTTP server, real client and real watch."""
    master = random.Random(20240611)
    for run in range(HTTP_RUNS):
        seed = master.randrange(2**32)
        scenario = _scenario_from_seed(seed)
        try:
            await run_over_http(scenario, seed)
        except AssertionError as exc:
            raise AssertionError(f"HTTP run {run}, seed {seed}, scenario {scenario}: {exc}") from exc


def _scenario_from_seed(seed: int) -> Scenario:
    """A scenario drawn with a plain seeded RNG (hypothesis' `.example()` is not for tests)."""
    rng = random.Random(seed)
    gpus = tuple(rng.randint(1, 4) for _ in range(rng.randint(1, 2)))
    counts = tuple(rng.randint(1, 2) for _ in range(rng.randint(2, 6)))
    pod_claims = tuple(
        tuple(sorted({rng.randrange(len(counts)) for _ in range(rng.randint(1, 2))}))
        for _ in range(rng.randint(2, 5))
    )
    preallocated = tuple(sorted({rng.randrange(len(counts)) for _ in range(rng.randint(0, 2))}))
    ops: list[Op] = []
    for _ in range(rng.randint(2, 8)):
        kind = rng.choice(("bind", "bind", "bind", "filter", "foreign", "delete"))
        if kind in ("bind", "filter"):
            ops.append(Op(kind, rng.randrange(len(pod_claims)), rng.randrange(len(gpus))))
        else:
            ops.append(Op(kind, rng.randrange(len(counts))))
    return Scenario(gpus, counts, pod_claims, preallocated, tuple(ops))
