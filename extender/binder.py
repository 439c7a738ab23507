"""Bind in file/sample mode: allocate the pod's pending claims and record the result in memory.

`/bind` receives only the pod's name, namespace, UID and node. The pod comes from the cluster
state (by namespace/name) or, failing that, from the pods this process saw in filter/prioritize
(by UID); either way name, namespace and UID must agree with the request, and the node must be
a Node of the state. Binds are serialised by one asyncio lock and run on the placement's worker
thread (the only thread that touches the state), and each bind re-runs the allocator against
the state as it is at that moment, so two concurrent binds can never hand out the same device:
the second sees the first one's claim writes.

What is written mirrors what kube-scheduler's DynamicResources plugin writes at PreBind
(extender-protocol.md §7.3): the delete-protection finalizer, `status.allocation` and a
`status.reservedFor` entry on each pending claim, `reservedFor` on claims already allocated,
then the pod's `spec.nodeName` (the Binding). Claims allocated elsewhere are left alone.
A pod of a profile not in `scheduler_names` is bound without allocating: a pending claim of it
is refused (`extender.profiles`).
"""

from __future__ import annotations

import asyncio
import functools
import logging

from extender import profiles
from extender.claims import DELETE_PROTECTION_FINALIZER, consumer_for
from extender.cluster.state import ClusterState
from extender.core import binding, extended, observed
from extender.core.evaluation import PODS_SEEN_SIZE
from extender.core.placement import Placement
from extender.errors import AllocationError
from extender.objects import Obj
from extender.pods import Pod, parse_pod
from extender.verdicts import ERROR, OK, BindOutcome, Placed
from extender.worker import WorkTimeout

log = logging.getLogger(__name__)

#: The parts of an object a writer here and the state's compaction change (`_writable`).
_SECTIONS = ("metadata", "spec", "status")


class InMemoryBinder:
    """BindService writing into a ClusterState (see module docstring)."""

    def __init__(
        self, state: ClusterState, placement: Placement, *, scheduler_names: tuple[str, ...] = ()
    ) -> None:
        self._state = state
        self._placement = placement
        self._scheduler_names = scheduler_names  # the setting: see extender/profiles.py
        self._lock = asyncio.Lock()

    async def bind(self, *, namespace: str, name: str, uid: str, node: str) -> BindOutcome:
        """Bind the pod to `node`. Every failure has the reason "error": this binder has no API
        server to name a more precise one after (its messages say what went wrong)."""
        call = functools.partial(self._bind_or_explain, namespace=namespace, name=name, uid=uid, node=node)
        # Queued work may be dropped at the deadline, started work never: a bind writes the state.
        deadline = self._placement.filter_timeout_seconds
        async with self._lock:
            try:
                error, placed = await self._placement.worker.run(call, start_timeout=deadline)
            except WorkTimeout as exc:
                error = (
                    f"bind of pod {namespace}/{name} {exc} (filter_timeout_seconds); the scheduler retries"
                )
                placed = None
        return BindOutcome(error, ERROR if error else OK, None if error else placed)

    def _bind_or_explain(
        self, *, namespace: str, name: str, uid: str, node: str
    ) -> tuple[str, Placed | None]:
        """(the error, "" when bound; what was placed, None when nothing was)."""
        try:
            return self._bind(namespace=namespace, name=name, uid=uid, node=node)
        except (AllocationError, _UnknownPod) as exc:
            return str(exc), None

    def _find_pod(self, namespace: str, name: str, uid: str) -> Pod:
        """The pod bind names, from the state or the pods seen; raises `_UnknownPod` with the
        true reason when there is none or the one found has another name or UID."""
        ref = f"{namespace}/{name}"
        found = self._state.get("Pod", name, namespace)
        pod = None if found is None else parse_pod(found)
        if pod is not None and (not uid or not pod.uid or pod.uid == uid):
            return pod
        seen = self._placement.seen_pod(uid or ref)
        if seen is not None:
            if seen.ref != ref:
                raise _UnknownPod(
                    f"pod UID {uid} was seen in filter as pod {seen.ref}, but bind names pod {ref}: "
                    "refusing to bind a pod under another pod's identity"
                )
            return seen
        if pod is not None:
            raise _UnknownPod(
                f"pod {ref} in the cluster state has UID {pod.uid}, not {uid}: it was deleted and re-created"
            )
        uid_text = f" (uid {uid})" if uid else ""
        raise _UnknownPod(
            f"pod {ref}{uid_text} is not known: it is not in the cluster state and was not filtered "
            f"recently (this extender remembers the last {PODS_SEEN_SIZE} pods it filtered)"
        )

    def _bind(self, *, namespace: str, name: str, uid: str, node: str) -> tuple[str, Placed | None]:
        pod = self._find_pod(namespace, name, uid)
        bound_to = pod.node_name
        if bound_to:
            if bound_to == node:
                return "", None  # an earlier bind placed it
            return f"pod {namespace}/{name} is already bound to node {bound_to}", None
        if not profiles.places(self._scheduler_names, pod):
            claims = binding.resolve_claims(self._placement, pod)
            refusal = profiles.bind_refusal(self._scheduler_names, pod, claims)
            if refusal:
                return refusal, None
        try:
            choice = self._placement.choose_for_bind(
                pod, node, wording=binding.IN_MEMORY,
                extended_resources=profiles.places(self._scheduler_names, pod),
            )  # fmt: skip
        except binding.BindRefusal as exc:
            return exc.message, None
        claims, allocations = choice.claims, choice.allocations
        consumer = {"resource": "pods", "name": pod.name or name, "uid": pod.uid or uid}
        created: Obj | None = None
        written_created = ""  # namespace/name of the claim this bind created
        written: list[str] = []  # namespace/name of each claim allocated (the created one's real name)
        for claim, allocation in zip(claims.pending, allocations, strict=True):
            source, ref = claim.source, claim.ref
            if choice.extended is not None and source is choice.extended.source:
                source = created = extended.created(source, self._state)
                ref = written_created = f"{claim.namespace}/{created['metadata']['name']}"
            self._state.upsert(
                _allocated_claim(source, allocation.allocation, consumer_for(claim, claims, consumer))
            )
            written.append(ref)
        for claim in claims.allocated:
            original = self._state.get("ResourceClaim", claim.name, claim.namespace)
            if original is not None:
                self._state.upsert(_reserved_claim(original, consumer_for(claim, claims, consumer)))
        bound = _writable(pod.source)  # the object as stored or received: dicts stay at the edge
        bound.setdefault("kind", "Pod")
        bound.setdefault("metadata", {}).setdefault("namespace", namespace)
        bound.setdefault("spec", {})["nodeName"] = node
        if created is not None and choice.extended is not None:
            bound.setdefault("status", {})["extendedResourceClaimStatus"] = extended.pod_status(
                created["metadata"]["name"], choice.extended.mappings
            )
        self._state.upsert(bound)
        observed.report_bound(
            [
                observed.Bound(ref, tuple(str(r.device.id) for r in a.devices), ref == written_created)
                for ref, a in zip(written, allocations, strict=True)
            ]
            + [observed.Bound(claim.ref, ()) for claim in claims.allocated]
        )
        log.info(
            "bound pod %s/%s to %s, allocated %d claim(s): %s",
            namespace,
            name,
            node,
            len(allocations),
            ", ".join(
                f"{ref}=[{', '.join(r.device.id.device for r in a.devices)}]"
                for ref, a in zip(written, allocations, strict=True)
            ),
        )
        return "", choice.placed


class _UnknownPod(Exception):
    """Bind names a pod this binder cannot find, or finds under another identity."""


def _writable(obj: Obj) -> Obj:
    """A copy of `obj` whose top level and sections (metadata, spec, status) are new dicts: what a
    writer here changes, and what the state's compaction swaps fields of in place. Deeper parts
    are shared with `obj`: the state never writes into a stored object (`ClusterState.upsert`),
    and a deep copy of each claim and pod was a fifth of a bind in the steady cycle."""
    copied = dict(obj)
    for section in _SECTIONS:
        value = copied.get(section)
        if isinstance(value, dict):
            copied[section] = dict(value)
    return copied


def _reserved_claim(claim: Obj, consumer: dict[str, str]) -> Obj:
    updated = _writable(claim)
    status = updated.setdefault("status", {})
    reserved = status["reservedFor"] = list(status.get("reservedFor") or [])
    if all(r.get("uid") != consumer["uid"] for r in reserved):
        reserved.append(dict(consumer))
    return updated


def _allocated_claim(claim: Obj, allocation: Obj, consumer: dict[str, str]) -> Obj:
    updated = _reserved_claim(claim, consumer)
    metadata = updated.setdefault("metadata", {})
    finalizers = metadata["finalizers"] = list(metadata.get("finalizers") or [])
    if DELETE_PROTECTION_FINALIZER not in finalizers:
        finalizers.append(DELETE_PROTECTION_FINALIZER)
    updated["status"]["allocation"] = dict(allocation)  # compaction swaps its fields (`_writable`)
    return updated
