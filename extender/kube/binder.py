"""Bind in kube mode: allocate the pod's pending claims through the API server, then bind it.

One rule serves both scheduler profiles (extender-protocol.md §3.3, §7.3):
- claims the in-tree DynamicResources plugin already allocated in PreBind (default profile)
  are left as they are; the pod only gets its Binding;
- pending claims (allocator profile) get what the in-tree PreBind would write: the
  `resource.kubernetes.io/delete-protection` finalizer (an update of the claim), then
  `status.allocation` and a `status.reservedFor` entry for the pod (an update of the status),
  each with the claim's resourceVersion as precondition; then the Binding is created;
- an already allocated claim shared with other pods gets only the `reservedFor` entry (the
  kubelet runs a pod only if every claim is reserved for it).
A pod of a profile not in `scheduler_names` is bound the same way, but a pending claim of it is
refused instead of allocated (`extender.profiles`).

Why binds cannot hand out one device twice, step by step:
1. bind A and bind B run concurrently (kube-scheduler binds each pod in its own goroutine);
2. A takes `_choose_lock`, evaluates the pod against the cluster state and the assumed
   allocations, picks devices and records them in the AssumeCache before releasing the lock;
3. B then takes the lock; its evaluation key includes the AssumeCache version, so it is
   recomputed and sees A's devices as taken: it picks others or fails with no_fit;
4. A's and B's API writes run outside the lock, in parallel;
5. the assumed entries stay until the watch shows the written claims (then the written
   allocation counts, and `collect_allocated` skips an assumed entry whose claim shows that
   same allocation, so nothing counts twice) or until they expire. A failed bind forgets them.
   An entry whose claim shows someone else's allocation keeps counting until its bind forgets
   it: the bind is still running and writes those devices if the claim is deallocated before
   its re-read (the race is in tests/kube/test_binder_regressions.py).
Across replicas, leader election keeps a single binder: a follower refuses at once, and
leadership is checked again before every write, so a bind that outlives the Lease stops (and
undoes its writes) instead of racing the new leader. A claim written by someone else meanwhile
is caught by the resourceVersion precondition (409): we re-read, retry while it is still
unallocated, and give up cleanly if it was allocated elsewhere or deleted. The API server
checks claims one by one, not devices across claims: only the choose lock, the AssumeCache
and a single leader keep two claims off one device.

A failure after some writes undoes them before answering: our `reservedFor` entry is removed,
our allocation too if no other consumer remains, and the finalizer we added if the claim is
unallocated again (the finalizer of a claim someone else allocated protects their allocation,
so it stays). Nothing of another writer is ever removed. One failure keeps its writes: a
Binding whose answer was lost while the pod is not seen bound to the node (the API server
restarting, a request still in flight). Undoing there can leave a bound pod without its
devices; keeping them leaves the claims allocated and reserved for an unbound pod, which
kube-scheduler retries: filter then passes only the allocation's node and the next bind writes
just the Binding. If the pod is deleted instead, the resourceclaim controller releases them.
A claim the pod shares with its PodGroup (`DRAWorkloadResourceClaims`, `extender.claims`) is
reserved for the group, as upstream's `resourceclaim.BindTo` says, and written once: the first
member's bind allocates it, the members bound with it in the same pod-group cycle wait (up to
`GROUP_CLAIM_WAIT_SECONDS`) for that write and find the group already reserved. A failed bind
keeps a group claim it wrote: other members may already be bound with it; the resourceclaim
controller releases a PodGroup's claims with the group.
The whole write-and-undo sequence is shielded from cancellation of the HTTP handler, so a
dropped connection cannot stop it midway.

Threads: the choose step (evaluation, assume) and every other use of the placement, the cluster
state and the AssumeCache run on the placement's worker thread (`extender.worker`), the only
thread that touches them; the event loop awaits it. The kubernetes client is synchronous: every
API call runs on this binder's thread pool. Bodies go
through the client's models (which drop fields the client does not know); responses are read
as raw JSON so nothing is lost or reformatted on the way in.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from kubernetes import client

from extender import profiles, telemetry
from extender.claims import (
    DELETE_PROTECTION_FINALIZER,
    POD_GROUP_RESOURCE,
    RESERVED_FOR_MAX,
    Claim,
    PodClaims,
    consumer_for,
    same_devices,
)
from extender.cluster.state import ClusterState
from extender.core import binding, extended, observed
from extender.core.placement import Placement
from extender.errors import KubeAPIError
from extender.kube import api
from extender.objects import Obj
from extender.pods import Pod, parse_pod
from extender.verdicts import (
    ALLOCATED_ELSEWHERE,
    API_ERROR,
    CLAIM_GONE,
    CONFLICT,
    NO_FIT,
    NOT_LEADER,
    OK,
    OTHER_PROFILE,
    POD_GONE,
    TIMEOUT,
    BindOutcome,
    Placed,
)
from extender.worker import WorkTimeout

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Writes of one claim are retried after a 409 this many times in all (re-reading in between).
MAX_WRITE_ATTEMPTS = 5
#: Seconds before one API call is abandoned (connect, read).
REQUEST_TIMEOUT_SECONDS = 10.0
#: How long a member's bind waits for another member's bind to write their PodGroup's claim, and
#: how often it reads the claim meanwhile.
GROUP_CLAIM_WAIT_SECONDS = 15.0
GROUP_CLAIM_POLL_SECONDS = 0.2


class LeaderView(Protocol):
    """What the binder needs from the leader elector."""

    identity: str

    @property
    def lease_ref(self) -> str: ...

    def is_leader(self) -> bool: ...

    def holder(self) -> str: ...


#: Reads of a pod whose Binding's answer was lost, before "not known to be bound" (about 3 s).
LOST_ANSWER_READS = 4


class BindFailure(Exception):
    """A bind that must be answered with an error; `reason` is one of `verdicts.BIND_REASONS`."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class BindingOutcomeUnknown(BindFailure):
    """The Binding's answer was lost and the pod is not known to be bound to the node: it may
    have been made, or be made later by a request still in the API server. The bind answers
    with an error but keeps its claim writes (see the module docstring)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, API_ERROR)


@dataclass(slots=True)
class _ClaimWrite:
    """One claim this bind writes, and what it has written so far (for the undo).

    `allocation` None means: only add the pod to `reservedFor` (the claim is allocated).
    """

    namespace: str
    name: str
    uid: str
    allocation: Obj | None
    current: Obj | None  # last version seen (state or server); None: read before writing
    finalizer_added: bool = False
    status_attempted: bool = False
    #: The claim for the pod's extended resources (`extender.core.extended`): created by this
    #: bind (`create` is the body) before its allocation is written; deleted by the undo.
    create: Obj | None = None
    created: bool = False
    #: The `reservedFor` entry this write adds: the pod's, or its PodGroup's for a group claim.
    consumer: dict[str, str] = field(default_factory=dict)
    #: A group claim another member's bind is allocating: wait for that write, then reserve.
    await_allocation: bool = False

    @property
    def for_group(self) -> bool:
        return self.consumer.get("resource") == POD_GROUP_RESOURCE

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


class KubeBinder:
    """BindService for kube mode (see the module docstring)."""

    def __init__(
        self,
        api_client: client.ApiClient,
        state: ClusterState,
        placement: Placement,
        *,
        elector: LeaderView | None = None,
        max_attempts: int = MAX_WRITE_ATTEMPTS,
        request_timeout: float = REQUEST_TIMEOUT_SECONDS,
        max_workers: int = 8,
        scheduler_names: tuple[str, ...] = (),
    ) -> None:
        self._core = client.CoreV1Api(api_client)
        self._resource = client.ResourceV1Api(api_client)
        self._state = state
        self._placement = placement
        self._elector = elector
        self._scheduler_names = scheduler_names  # the setting: see extender/profiles.py
        self._max_attempts = max_attempts
        self._timeout = request_timeout
        self._pool = api.CallPool(name="kube-bind", max_workers=max_workers)
        # Guards choose-devices-and-assume only (see the module docstring); never held across I/O.
        self._choose_lock = asyncio.Lock()
        # claim uid -> (namespace, name, resourceVersion of our write) of claims we wrote whose
        # assumed entry waits for the watch. Written on the event loop and read on the worker
        # (`_prune_assumed`): the lock.
        self._written: dict[str, tuple[str, str, str]] = {}
        self._written_lock = threading.Lock()
        # Every reader of the assumed entries (filter, prioritize, the next bind) drops those
        # whose write the watch shows, not only the next bind.
        placement.assumed.settle_with(self._write_visible)

    @property
    def elector(self) -> LeaderView | None:
        """The leader elector this binder defers to (None: every replica binds)."""
        return self._elector

    def close(self) -> None:
        """Stop accepting API calls; calls already queued still run, so binds in flight finish
        their current request (new requests, e.g. an undo, then fail and are logged)."""
        self._pool.close()

    # ------------------------------------------------------------------ BindService
    async def bind(self, *, namespace: str, name: str, uid: str, node: str) -> BindOutcome:
        """Bind the pod to `node`; the outcome's error is '' on success, else the answer for
        kube-scheduler, and its reason says which of `verdicts.BIND_REASONS` it was."""
        try:
            self._check_leader()
        except BindFailure as exc:
            return BindOutcome(str(exc), exc.reason)
        task = asyncio.ensure_future(self._bind(namespace=namespace, name=name, uid=uid, node=node))
        try:
            # Shielded: a cancelled handler must not interrupt writes or their undo.
            placed = await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(functools.partial(_log_orphan, f"{namespace}/{name}", node))
            raise
        except BindFailure as exc:
            log.info("bind pod=%s/%s node=%s failed (%s): %s", namespace, name, node, exc.reason, exc)
            return BindOutcome(str(exc), exc.reason)
        except KubeAPIError as exc:
            log.warning("bind pod=%s/%s node=%s: API error: %s", namespace, name, node, api.describe(exc))
            return BindOutcome(f"pod {namespace}/{name}: API error: {api.describe(exc)}", API_ERROR)
        return BindOutcome("", OK, placed)

    def _check_leader(self) -> None:
        """Refuse unless leading. Checked before every write, not only at the start: a bind
        that outlives our leadership stops before its next write (its undo still runs)."""
        if self._elector is None or self._elector.is_leader():
            return
        holder = self._elector.holder() or "nobody"
        raise BindFailure(
            f"not the leader: this replica ({self._elector.identity}) does not bind; "
            f"the Lease {self._elector.lease_ref} is held by {holder}",
            NOT_LEADER,
        )

    # ------------------------------------------------------------------ the bind
    async def _bind(self, *, namespace: str, name: str, uid: str, node: str) -> Placed | None:
        """Bind; returns what it placed (None: an earlier bind had placed the pod)."""
        pod = await self._find_pod(namespace, name, uid)
        pod_uid = pod.uid or uid
        bound_to = pod.node_name
        if bound_to:
            if bound_to == node:
                return None  # an earlier bind succeeded but its answer was lost: idempotent
            raise BindFailure(f"pod {namespace}/{name} is already bound to node {bound_to}", CONFLICT)
        consumer = {"resource": "pods", "name": pod.name or name, "uid": pod_uid}
        worker = self._placement.worker
        deadline = self._placement.filter_timeout_seconds
        async with self._choose_lock:
            try:  # dropped only before it starts: the choose step assumes devices
                writes, assumed, mappings, placed = await worker.run(
                    self._choose, pod, node, consumer, start_timeout=deadline
                )
            except WorkTimeout as exc:
                raise BindFailure(
                    f"bind of pod {namespace}/{name} {exc} (filter_timeout_seconds)", TIMEOUT
                ) from None
        try:
            for write in list(writes):
                if write.create is not None:
                    if await self._claim_already_made(namespace, name, pod_uid):
                        writes.remove(write)
                        await worker.run(_forget_all, self._placement.assumed, [write.uid], "")
                        continue
                    await self._create_claim(write, consumer, assumed)
                await self._write_claim(write, consumer)
            extended_status = _extended_status(writes, mappings)
            if extended_status is not None:
                self._check_leader()
                await self._patch_pod_status(namespace, name, extended_status)
            self._check_leader()
            await self._create_binding(namespace=namespace, name=name, uid=pod_uid, node=node)
        except BindingOutcomeUnknown:
            self._record_written(writes)  # kept: the assumed entries wait for the watch as on success
            raise
        except BaseException:
            kept = [w for w in writes if w.for_group and w.allocation is not None and w.status_attempted]
            for write in reversed(writes):
                if write not in kept:
                    await self._undo(write, consumer)
            self._record_written(kept)  # their assumed entries wait for the watch as on success
            forget = [u for u in assumed if u not in {w.uid for w in kept}]
            await worker.run(_forget_all, self._placement.assumed, forget, pod_uid)
            raise
        self._record_written(writes)
        observed.report_bound(
            [observed.Bound(w.ref, observed.result_devices(w.allocation), w.created) for w in writes]
        )
        log.info(
            "bound pod %s/%s to %s: allocated %s; reserved %s",
            namespace,
            name,
            node,
            ", ".join(w.ref for w in writes if w.allocation is not None) or "no claims",
            ", ".join(w.ref for w in writes if w.allocation is None and w.status_attempted)
            or "no shared claims",
        )
        return placed

    def _record_written(self, writes: list[_ClaimWrite]) -> None:
        """Remember the allocations this bind wrote, so their assumed entries go once the watch
        shows them (`_write_visible`)."""
        with self._written_lock:
            for write in writes:
                if write.allocation is not None:
                    written_rv = ((write.current or {}).get("metadata") or {}).get("resourceVersion", "")
                    self._written[write.uid] = (write.namespace, write.name, str(written_rv))

    def _choose(
        self, pod: Pod, node: str, consumer: dict[str, str]
    ) -> tuple[list[_ClaimWrite], list[str], tuple[Mapping[str, str], ...], Placed]:
        """Decide what to write and assume the chosen devices; runs under `_choose_lock`.

        Everything here is synchronous on purpose: no other bind can interleave between the
        evaluation and the `assume` calls.
        """
        self._prune_assumed()
        self._placement.holds.release(consumer["uid"])  # a PodGroup member's hold: chosen for real now
        ours = profiles.places(self._scheduler_names, pod)
        if not ours:
            claims = binding.resolve_claims(self._placement, pod)
            refusal = profiles.bind_refusal(self._scheduler_names, pod, claims)
            if refusal:
                raise BindFailure(refusal, OTHER_PROFILE)
        writes: list[_ClaimWrite] = []

        def admit(claim: Claim, claims: PodClaims) -> None:
            write = self._reservation(claim, consumer_for(claim, claims, consumer))
            if write is not None:
                writes.append(write)

        try:
            choice = self._placement.choose_for_bind(
                pod, node, wording=binding.WATCHED, admit_allocated=admit, extended_resources=ours
            )
        except binding.BindRefusal as exc:
            raise BindFailure(exc.message, exc.reason) from None
        # Gang members see this pod on its node from now on, not only once its writes are done:
        # kube-scheduler scores the next member while this bind is still writing
        # (extender/core/gang.py, "Members in flight"). A failed bind forgets it.
        self._placement.assumed.assume_pod(consumer["uid"], node)
        assumed: list[str] = []
        for claim, chosen in zip(choice.claims.pending, choice.allocations, strict=True):
            self._placement.assumed.assume(claim.uid, chosen.allocation, pod_uid=consumer["uid"])
            assumed.append(claim.uid)
            create = (
                extended.for_create(claim.source)
                if choice.extended is not None and claim.source is choice.extended.source
                else None
            )
            writes.append(
                _ClaimWrite(
                    namespace=claim.namespace,
                    name=claim.name,
                    uid=claim.uid,
                    allocation=chosen.allocation,
                    current=claim.source if create is None else None,
                    create=create,
                    consumer=consumer_for(claim, choice.claims, consumer),
                )
            )
        mappings = choice.extended.mappings if choice.extended is not None else ()
        return writes, assumed, mappings, choice.placed

    def _reservation(self, claim: Claim, consumer: dict[str, str]) -> _ClaimWrite | None:
        """The write that adds the pod to an allocated claim's reservedFor (None: already there)."""
        namespace, name = claim.namespace, claim.name
        stored = self._state.get("ResourceClaim", name, namespace) or claim.source
        status = stored.get("status") or {}
        if not status.get("allocation"):
            # Allocated only in the AssumeCache: another bind of ours is writing it right now. A
            # PodGroup's claim is written by the first member's bind; the others wait for it.
            if claim.for_group:
                return _ClaimWrite(
                    namespace, name, claim.uid, None, None, consumer=consumer, await_allocation=True
                )
            raise BindFailure(
                f"resource claim {namespace}/{name} is in the process of being allocated", CONFLICT
            )
        if _reserved(status, consumer["uid"]):
            return None  # default profile: the in-tree plugin reserved it in PreBind
        return _ClaimWrite(namespace, name, claim.uid, allocation=None, current=stored, consumer=consumer)

    def _write_visible(self, claim_uid: str, allocation: Obj) -> bool:
        """The assumed entry's claim write is done and the watch shows it (or the claim is gone):
        `AssumeCache.active()` drops the entry. An entry whose write is still in flight stays."""
        with self._written_lock:
            written = self._written.get(claim_uid)
        if written is None:
            return False
        namespace, name, written_rv = written
        claim = self._state.get("ResourceClaim", name, namespace)
        if not _write_seen(claim, claim_uid, allocation, written_rv):
            return False
        with self._written_lock:
            self._written.pop(claim_uid, None)
        return True

    def _prune_assumed(self) -> None:
        """Forget assumed entries of claims whose written allocation the watch now shows, and the
        written records of entries that are gone (expired or forgotten)."""
        active = self._placement.assumed.active()
        with self._written_lock:
            for claim_uid in [uid for uid in self._written if uid not in active]:
                del self._written[claim_uid]

    # ------------------------------------------------------------------ claim writes
    async def _write_claim(self, write: _ClaimWrite, consumer: dict[str, str]) -> None:
        """Write finalizer, allocation and reservation (or only the reservation), retrying 409s."""
        consumer = write.consumer or consumer
        current = await self._await_allocation(write) if write.await_allocation else write.current
        for _ in range(self._max_attempts):
            self._check_leader()
            if current is None:
                current = await self._read_claim(write)
            _check_claim(write, current)
            status = current.get("status") or {}
            existing = status.get("allocation")
            if write.allocation is not None:
                if existing:
                    if same_devices(existing, write.allocation) and _reserved(status, consumer["uid"]):
                        write.current = current  # our own earlier write (a retried request)
                        return
                    raise BindFailure(
                        f"claim {write.ref}: allocated elsewhere while this bind was writing it "
                        f"(devices {_device_names(existing)})",
                        ALLOCATED_ELSEWHERE,
                    )
                if DELETE_PROTECTION_FINALIZER not in _finalizers(current):
                    updated = copy.deepcopy(current)
                    updated["metadata"].setdefault("finalizers", []).append(DELETE_PROTECTION_FINALIZER)
                    try:
                        current = await self._replace_claim(updated, write)
                    except _Conflict:
                        current = None
                        continue
                    write.finalizer_added = True
                updated = copy.deepcopy(current)
                new_status = updated.setdefault("status", {})
                new_status["allocation"] = copy.deepcopy(write.allocation)
                new_status.setdefault("reservedFor", []).append(dict(consumer))
            else:
                if not existing:
                    if write.await_allocation:  # the other member's bind did not write it in time
                        raise BindFailure(
                            f"resource claim {write.ref} is in the process of being allocated: no bind "
                            f"of its PodGroup wrote it within {GROUP_CLAIM_WAIT_SECONDS:g} s",
                            CONFLICT,
                        )
                    raise BindFailure(f"claim {write.ref} was deallocated while this bind used it", CONFLICT)
                if _reserved(status, consumer["uid"]):
                    write.current = current
                    return
                if len(status.get("reservedFor") or ()) >= RESERVED_FOR_MAX:
                    raise BindFailure(f"claim {write.ref}: resourceclaim in use", NO_FIT)
                updated = copy.deepcopy(current)
                updated["status"].setdefault("reservedFor", []).append(dict(consumer))
            write.status_attempted = True
            try:
                write.current = await self._replace_claim_status(updated, write)
            except _Conflict:
                current = None
                continue
            return
        raise BindFailure(
            f"claim {write.ref}: still conflicting after {self._max_attempts} attempts "
            "(the claim keeps changing); retry",
            CONFLICT,
        )

    async def _await_allocation(self, write: _ClaimWrite) -> Obj:
        """The claim once another member's bind has written its allocation; after
        `GROUP_CLAIM_WAIT_SECONDS` without it, a conflict kube-scheduler retries."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + GROUP_CLAIM_WAIT_SECONDS
        while True:
            self._check_leader()
            current = await self._read_claim(write)
            _check_claim(write, current)
            if (current.get("status") or {}).get("allocation") or loop.time() >= deadline:
                return current  # unallocated at the deadline: `_write_claim` answers the conflict
            await asyncio.sleep(GROUP_CLAIM_POLL_SECONDS)

    async def _create_claim(self, write: _ClaimWrite, consumer: dict[str, str], assumed: list[str]) -> None:
        """Create the pod's extended-resource claim (`createExtendedResourceClaimInAPI`); its
        assumed allocation moves from the stand-in UID to the UID the API server gave it."""
        self._check_leader()
        body = client.ResourceV1ResourceClaim.from_dict(_with_type(write.create or {}))
        attributes = {
            "k8s.resource": "resourceclaims",
            "k8s.object": f"{write.namespace}/",
            "k8s.call": "create_namespaced_resource_claim",
        }
        with telemetry.span(telemetry.SPAN_API_WRITE, **attributes):
            raw = await self._call(
                self._resource.create_namespaced_resource_claim, write.namespace, body, _preload_content=False
            )
        created = api.read_json(raw)
        meta = created.get("metadata") or {}
        stand_in, write.name, write.uid = write.uid, str(meta.get("name", "")), str(meta.get("uid", ""))
        write.current, write.created = created, True
        assert write.allocation is not None  # a created claim is always one this bind allocates
        await self._placement.worker.run(
            _rekey, self._placement.assumed, stand_in, write.uid, write.allocation, consumer["uid"]
        )
        assumed.append(write.uid)

    async def _claim_already_made(self, namespace: str, name: str, pod_uid: str) -> bool:
        """True if the pod's status already names an extended-resource claim that is allocated
        and reserved for it: a profile whose DynamicResources plugin made it at PreBind, just
        before this bind, faster than the watch showed it. Read from the API, never the state."""
        raw = await self._call(self._core.read_namespaced_pod, name, namespace, _preload_content=False)
        status = (api.read_json(raw).get("status") or {}).get("extendedResourceClaimStatus") or {}
        claim_name = status.get("resourceClaimName")
        if not claim_name:
            return False
        probe = _ClaimWrite(namespace, str(claim_name), "", allocation=None, current=None)
        try:
            claim = await self._read_claim(probe)
        except BindFailure:
            return False
        return extended.holds_for(claim, pod_uid)

    async def _patch_pod_status(self, namespace: str, name: str, status: Obj) -> None:
        """Record the created claim in `status.extendedResourceClaimStatus` (upstream's
        `patchPodExtendedResourceClaimStatus`: a strategic merge patch of pods/status)."""
        attributes = {"k8s.resource": "pods/status", "k8s.object": f"{namespace}/{name}"}
        try:
            with telemetry.span(telemetry.SPAN_API_WRITE, **attributes):
                await self._call(
                    self._core.patch_namespaced_pod_status,
                    name,
                    namespace,
                    {"status": {"extendedResourceClaimStatus": status}},
                    _content_type="application/strategic-merge-patch+json",
                    _preload_content=False,
                )
        except KubeAPIError as exc:
            if exc.status == 404:
                raise BindFailure(f"pod {namespace}/{name} does not exist", POD_GONE) from None
            raise

    async def _delete_created(self, write: _ClaimWrite) -> None:
        """Undo of a created claim (`deleteClaim`): drop our finalizer, then delete it."""
        try:
            for _ in range(self._max_attempts):
                current = await self._read_claim(write)
                if (current.get("metadata") or {}).get("uid") != write.uid:
                    return
                if DELETE_PROTECTION_FINALIZER not in _finalizers(current):
                    break
                updated = copy.deepcopy(current)
                updated["metadata"]["finalizers"] = [
                    f for f in _finalizers(current) if f != DELETE_PROTECTION_FINALIZER
                ]
                try:
                    await self._replace_claim(updated, write)
                    break
                except _Conflict:
                    continue
            options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=write.uid))
            await self._call(
                self._resource.delete_namespaced_resource_claim,
                write.name,
                write.namespace,
                body=options,
                _preload_content=False,
            )
        except BindFailure:
            return  # already gone
        except Exception as exc:  # an undo must never mask the failure being answered
            if isinstance(exc, KubeAPIError) and exc.status == 404:
                return
            log.error("bind undo: claim %s: %s; it may be left behind", write.ref, api.describe(exc))

    async def _undo(self, write: _ClaimWrite, consumer: dict[str, str]) -> None:
        """Remove what this bind wrote to one claim, and nothing else (see module docstring)."""
        consumer = write.consumer or consumer
        if write.created:
            await self._delete_created(write)
            return
        if not (write.finalizer_added or write.status_attempted):
            return
        # Always re-read: the outcome of the last write may be unknown (timeout, lost answer).
        current: Obj | None = None
        try:
            for _ in range(2 * self._max_attempts):
                if current is None:
                    current = await self._read_claim(write)
                if (current.get("metadata") or {}).get("uid") != write.uid:
                    return  # deleted (and maybe re-created): nothing of ours left
                status = current.get("status") or {}
                if write.status_attempted and _reserved(status, consumer["uid"]):
                    updated = copy.deepcopy(current)
                    new_status = updated["status"]
                    remaining = [
                        r for r in new_status.get("reservedFor") or () if r.get("uid") != consumer["uid"]
                    ]
                    new_status["reservedFor"] = remaining
                    ours = write.allocation is not None and same_devices(
                        new_status.get("allocation"), write.allocation
                    )
                    if ours and not remaining:
                        new_status.pop("allocation", None)
                    try:
                        current = await self._replace_claim_status(updated, write)
                    except _Conflict:
                        current = None
                    continue
                if (
                    write.finalizer_added
                    and DELETE_PROTECTION_FINALIZER in _finalizers(current)
                    and not status.get("allocation")
                ):
                    updated = copy.deepcopy(current)
                    updated["metadata"]["finalizers"] = [
                        f for f in _finalizers(current) if f != DELETE_PROTECTION_FINALIZER
                    ]
                    try:
                        current = await self._replace_claim(updated, write)
                    except _Conflict:
                        current = None
                        continue
                return
        except BindFailure:
            return  # the claim is gone: nothing left to undo
        except Exception as exc:  # an undo must never mask the failure being answered
            log.error("bind undo: claim %s: %s; it may keep this bind's writes", write.ref, api.describe(exc))
            return
        log.error("bind undo: claim %s kept changing; it may keep this bind's writes", write.ref)

    # ------------------------------------------------------------------ API calls
    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """One client call on this binder's pool (the transport seam tests replace)."""
        return await self._pool.call(fn, *args, _request_timeout=self._timeout, **kwargs)

    async def _find_pod(self, namespace: str, name: str, uid: str) -> Pod:
        """The pod to bind: the newer of the watch's copy and the copy filter/prioritize saw
        (by resourceVersion), else the API server's.

        The watch's copy alone is not enough: it can be older than the copy kube-scheduler sent
        to filter, e.g. without the `status.resourceClaimStatuses` entry of a template claim the
        resourceclaim controller has just made, and bind then refused the pod filter passed
        ("ResourceClaim not created yet"; issue 30 finding 2). resourceVersions are compared as
        integers, as kube-scheduler's assume cache does; copies whose versions do not compare
        that way are replaced by a fresh read.
        """
        # Single-key dict reads (state, seen pods) are atomic, so these two may run on the loop.
        found = self._state.get("Pod", name, namespace)
        watched = None if found is None else parse_pod(found)
        if watched is not None and uid and watched.uid not in ("", uid):
            watched = None
        seen = self._placement.seen_pod(uid) if uid else None
        if seen is not None and seen.ref != f"{namespace}/{name}":
            if watched is None:
                raise BindFailure(
                    f"pod UID {uid} was seen in filter as pod {seen.ref}, but bind names pod "
                    f"{namespace}/{name}: refusing to bind a pod under another pod's identity",
                    POD_GONE,
                )
            seen = None
        pod = _newer_pod(watched, seen)
        if pod is not None:
            return pod
        try:
            raw = await self._call(self._core.read_namespaced_pod, name, namespace, _preload_content=False)
        except KubeAPIError as exc:
            if exc.status == 404:
                raise BindFailure(f"pod {namespace}/{name} does not exist", POD_GONE) from None
            raise
        pod = parse_pod(api.read_json(raw))
        if uid and pod.uid != uid:
            raise BindFailure(
                f"pod {namespace}/{name} has UID {pod.uid or None}, not {uid}: it was deleted and re-created",
                POD_GONE,
            )
        return pod

    async def _read_claim(self, write: _ClaimWrite) -> Obj:
        try:
            raw = await self._call(
                self._resource.read_namespaced_resource_claim,
                write.name,
                write.namespace,
                _preload_content=False,
            )
        except KubeAPIError as exc:
            if exc.status == 404:
                raise BindFailure(f"resourceclaim {write.ref} was deleted", CLAIM_GONE) from None
            raise
        return api.read_json(raw)

    async def _replace_claim(self, claim: Obj, write: _ClaimWrite) -> Obj:
        body = client.ResourceV1ResourceClaim.from_dict(_with_type(claim))
        return await self._write(self._resource.replace_namespaced_resource_claim, body, write)

    async def _replace_claim_status(self, claim: Obj, write: _ClaimWrite) -> Obj:
        body = client.ResourceV1ResourceClaim.from_dict(_with_type(claim))
        return await self._write(self._resource.replace_namespaced_resource_claim_status, body, write)

    async def _write(self, method: Callable[..., Any], body: Any, write: _ClaimWrite) -> Obj:
        attributes = {"k8s.resource": "resourceclaims", "k8s.object": write.ref, "k8s.call": method.__name__}
        try:
            with telemetry.span(telemetry.SPAN_API_WRITE, **attributes):
                raw = await self._call(method, write.name, write.namespace, body, _preload_content=False)
        except KubeAPIError as exc:
            if exc.status == 409:
                raise _Conflict from None
            if exc.status == 404:
                raise BindFailure(f"resourceclaim {write.ref} was deleted", CLAIM_GONE) from None
            raise
        return api.read_json(raw)

    async def _create_binding(self, *, namespace: str, name: str, uid: str, node: str) -> None:
        body = client.V1Binding(
            metadata=client.V1ObjectMeta(name=name, namespace=namespace, uid=uid),
            target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
        )
        try:
            # Raw response: the server answers with a Status, which the V1Binding model rejects.
            attributes = {
                "k8s.resource": "pods/binding",
                "k8s.object": f"{namespace}/{name}",
                "k8s.node": node,
            }
            with telemetry.span(telemetry.SPAN_API_WRITE, **attributes):
                await self._call(
                    self._core.create_namespaced_pod_binding, name, namespace, body, _preload_content=False
                )
        except KubeAPIError as exc:
            if exc.status == 404:
                raise BindFailure(f"pod {namespace}/{name} does not exist", POD_GONE) from None
            if exc.status == 409:
                await self._check_bound_after_conflict(
                    exc, namespace=namespace, name=name, uid=uid, node=node
                )
                return
            if exc.status != 0:
                raise
            # No answer (a cut connection, a timeout): the Binding may have been made, or may
            # still be made by a request the API server is working on. Undoing the claims of a
            # pod that is bound leaves it without its devices (the fault tests' cut connections
            # and API server restarts did), so: bound here is success; anything else fails but
            # keeps the claims for the pod (BindingOutcomeUnknown).
            if not await self._bound_after_lost_answer(namespace=namespace, name=name, uid=uid, node=node):
                raise BindingOutcomeUnknown(
                    f"pod {namespace}/{name}: the Binding to node {node} got no answer "
                    f"({api.describe(exc)}) and the pod is not known to be bound; its claims stay "
                    "allocated and reserved for it, so a retry binds it to that node"
                ) from None
            log.warning(
                "bind pod %s/%s: the Binding's answer was lost (%s); the pod is bound to %s",
                namespace, name, api.describe(exc), node,
            )  # fmt: skip

    async def _check_bound_after_conflict(
        self, exc: KubeAPIError, *, namespace: str, name: str, uid: str, node: str
    ) -> None:
        """A 409 on the Binding: success if the pod is bound to `node` already (an earlier attempt
        whose answer was lost), else a failure (bound elsewhere, or deleted and re-created)."""
        raw = await self._call(self._core.read_namespaced_pod, name, namespace, _preload_content=False)
        pod = api.read_json(raw)
        if (pod.get("metadata") or {}).get("uid") != uid:
            raise BindFailure(f"pod {namespace}/{name} was deleted and re-created", POD_GONE) from None
        bound_to = (pod.get("spec") or {}).get("nodeName")
        if bound_to != node:
            raise BindFailure(
                f"pod {namespace}/{name}: binding rejected ({exc.status} {exc.reason}); "
                f"it is bound to {bound_to or 'no node'}",
                CONFLICT,
            ) from None

    async def _bound_after_lost_answer(self, *, namespace: str, name: str, uid: str, node: str) -> bool:
        """Whether pod `namespace/name` (this uid) is bound to `node`, read again after a Binding
        whose answer was lost; a few tries over about 3 s, then "not known to be bound"."""
        for attempt in range(LOST_ANSWER_READS):
            try:
                raw = await self._call(
                    self._core.read_namespaced_pod, name, namespace, _preload_content=False
                )
            except KubeAPIError as exc:
                log.warning(
                    "bind pod %s/%s: reading it after a lost answer: %s", namespace, name, api.describe(exc)
                )
                await asyncio.sleep(0.2 * 2**attempt)
                continue
            pod = api.read_json(raw)
            same = (pod.get("metadata") or {}).get("uid") == uid
            return same and (pod.get("spec") or {}).get("nodeName") == node
        log.error("bind pod %s/%s: cannot tell whether the lost Binding was made", namespace, name)
        return False


def _write_seen(claim: Obj | None, claim_uid: str, allocation: Obj, written_rv: str) -> bool:
    """The watched claim shows our written allocation, or a later version: its assumed entry can go.

    Any allocation shown is not enough. The watch may lag behind someone else's allocation and
    release of the claim before our write, step by step:
    1. another scheduler allocates claim c0 elsewhere, then c0 is deallocated (its user went);
    2. our bind, which chose n0/gpu-0 for c0 from the lagging state, gets a 409, re-reads c0,
       finds it unallocated and writes c0 -> n0/gpu-0: it succeeds;
    3. the watch delivers step 1's allocation only. Forgetting c0's entry now (as when any
       allocation counted as "visible") left n0/gpu-0 free in the state until our write shows,
       and the next bind gave it to another claim.
    So: the claim is gone or replaced, or the watch reached our write's resourceVersion (the
    integer comparison kube-scheduler's assume cache makes), or, where resourceVersions are
    not integers, the claim shows our devices.
    """
    meta = (claim or {}).get("metadata") or {}
    if claim is None or meta.get("uid") != claim_uid:
        return True  # deleted (and maybe re-created): the watch is past our write
    seen, ours = _int_version(meta.get("resourceVersion")), _int_version(written_rv)
    if seen is not None and ours is not None:
        return seen >= ours
    return same_devices((claim.get("status") or {}).get("allocation"), allocation)


def _newer_pod(watched: Pod | None, seen: Pod | None) -> Pod | None:
    """The copy of one pod at least as new as both (None: read it from the API server).

    One copy alone is that copy. Of two, the one with the higher integer resourceVersion, the
    watch's on a tie; two copies whose versions are not both integers are the same only if
    their versions are equal strings, and otherwise neither is known to be the newer.
    """
    if watched is None or seen is None:
        return watched or seen
    ours, theirs = _int_version(_pod_version(watched)), _int_version(_pod_version(seen))
    if ours is not None and theirs is not None:
        return watched if ours >= theirs else seen
    same = _pod_version(watched) is not None and _pod_version(watched) == _pod_version(seen)
    return watched if same else None


def _pod_version(pod: Pod) -> str | None:
    """metadata.resourceVersion as sent (None: absent or not a string)."""
    meta = pod.source.get("metadata")
    version = meta.get("resourceVersion") if isinstance(meta, dict) else None
    return version if isinstance(version, str) else None


def _int_version(resource_version: Any) -> int | None:
    try:
        return int(resource_version)
    except (TypeError, ValueError):
        return None


def _rekey(assumed: Any, stand_in: str, uid: str, allocation: Obj, pod_uid: str) -> None:
    """Move an assumed allocation to the UID of the claim created for it."""
    assumed.assume(uid, allocation, pod_uid=pod_uid)
    assumed.forget(stand_in)


def _extended_status(writes: list[_ClaimWrite], mappings: tuple[Mapping[str, str], ...]) -> Obj | None:
    """`status.extendedResourceClaimStatus` for the claim this bind created (None: none)."""
    created = next((w for w in writes if w.created), None)
    return None if created is None else extended.pod_status(created.name, mappings)


def _forget_all(assumed: Any, claim_uids: list[str], pod_uid: str) -> None:
    for claim_uid in claim_uids:
        assumed.forget(claim_uid)
    assumed.forget_pod(pod_uid)


def _log_orphan(pod: str, node: str, task: asyncio.Future[None]) -> None:
    """Outcome of a bind whose caller went away (it ran to the end, shielded)."""
    if task.cancelled():
        return
    exc = task.exception()
    if exc is None:
        log.info("bind pod=%s node=%s finished after its request was cancelled", pod, node)
    else:
        log.info("bind pod=%s node=%s failed after its request was cancelled: %s", pod, node, exc)


class _Conflict(Exception):
    """A write failed its resourceVersion precondition (HTTP 409)."""


def _check_claim(write: _ClaimWrite, claim: Obj) -> None:
    meta = claim.get("metadata") or {}
    if meta.get("uid") != write.uid:
        raise BindFailure(f"resourceclaim {write.ref} was deleted and re-created", CLAIM_GONE)
    if meta.get("deletionTimestamp"):
        raise BindFailure(f'resourceclaim "{write.name}" is being deleted', CLAIM_GONE)


def _reserved(status: Obj, pod_uid: str) -> bool:
    return any(r.get("uid") == pod_uid for r in status.get("reservedFor") or ())


def _finalizers(claim: Obj) -> list[str]:
    return list((claim.get("metadata") or {}).get("finalizers") or ())


def _device_names(allocation: Obj) -> str:
    results = ((allocation or {}).get("devices") or {}).get("results") or ()
    return ", ".join(sorted(f"{r.get('pool', '')}/{r.get('device', '')}" for r in results)) or "none"


def _with_type(claim: Obj) -> Obj:
    return {**claim, "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim"}
