"""Node verdicts and the words of every verdict reason (DESIGN principle 5: explain every no).

Each tier decides; this module says why, so a node refused by the vectorised check, by either
kernel or by upstream's search reads the same. The texts are pinned by tests (and read by people
running `dra-extender explain`): change them here or nowhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from extender.allocator.requests import ClaimSpec

PASSED, FAILED, UNRESOLVABLE = "passed", "failed", "unresolvable"
CANNOT_ALLOCATE = "cannot allocate all claims"


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    """One node's filter verdict for a pod and, unless it passed, why."""

    status: str  # PASSED, FAILED (preemption may help) or UNRESOLVABLE
    reason: str = ""


def shortage(claim: str, request: str, count: int, class_name: str) -> str:
    """A request and what it needs: "claim C, request R: N device(s) of class X"."""
    return f"claim {claim}, request {request}: {count} device(s) of class {class_name}"


def claim_refs(specs: Sequence[ClaimSpec]) -> str:
    """The pod's pending claims, as the reasons name them."""
    return ", ".join(s.ref for s in specs)


def no_set(refs: str, *, fits_if_free: bool, short: str) -> NodeVerdict:
    """Why no device set was found on a node, in the search's words: the devices are in use (a set
    exists with nothing held), some request has too few devices, or no combination fits."""
    if fits_if_free:
        return NodeVerdict(FAILED, f"{CANNOT_ALLOCATE}: the devices claims {refs} need are in use")
    if short:
        return NodeVerdict(UNRESOLVABLE, f"{CANNOT_ALLOCATE}: {short} do not exist on the node")
    return NodeVerdict(
        UNRESOLVABLE,
        f"{CANNOT_ALLOCATE}: no combination of the node's devices satisfies claims {refs} "
        "(constraints, shared counters or capacity)",
    )


def short_of(specs: Sequence[ClaimSpec], short: int, *, in_use: bool) -> NodeVerdict:
    """The vectorised check's verdict: request number `short` (in pod order, -1 if no single
    request) lacks devices; `in_use` if it would fit with every device free."""
    owners = [(claim, request.exactly) for claim in specs for request in claim.requests]
    if 0 <= short < len(owners):
        claim, spec = owners[short]
        assert spec is not None  # the vectorised check takes only exact requests
        what = shortage(claim.ref, spec.name, spec.count, spec.class_name)
    else:
        what = "claims " + claim_refs(specs) + ": the requests together"
    if in_use:
        return NodeVerdict(FAILED, f"{CANNOT_ALLOCATE}: {what} are not free on the node (in use)")
    return NodeVerdict(UNRESOLVABLE, f"{CANNOT_ALLOCATE}: {what} do not exist on the node")


#: A node the cluster state does not know, in the words bind refuses it with (`core.binding`): it
#: has no devices to search, so it is decided at once, one shared verdict for every such name.
UNKNOWN_NODE = NodeVerdict(UNRESOLVABLE, "node does not exist in the cluster state")


def node_scoped(reason: str) -> NodeVerdict:
    """Upstream's search refused the node itself (e.g. an invalid pool)."""
    return NodeVerdict(UNRESOLVABLE, f"{CANNOT_ALLOCATE}: {reason}")


def claim_unavailable(ref: str) -> NodeVerdict:
    """An already allocated claim of the pod is not available on the node."""
    return NodeVerdict(UNRESOLVABLE, f"resourceclaim {ref} not available on the node")


def invalid_claim(exc: Exception) -> str:
    """A pending claim that cannot be parsed (pod-level problem)."""
    return f"invalid ResourceClaim: {exc}"


def timed_out(exc: Exception) -> str:
    """The search ran out of time (the call fails; the scheduler retries)."""
    return f"timed out trying to allocate devices: {exc}"
