"""The bind choice both binders make: which devices a pod's pending claims get on a node.

`choose_for_bind` repeats filter's decision for one node against the state as it is now and
returns the allocations to write (one per pending claim), or raises `BindRefusal` carrying the
message /bind answers and the reason label its metrics count (`NO_FIT`, `NODE_GONE`,
`CLAIM_GONE`). The in-memory binder (file mode) and the kube binder word two refusals
differently (where the state comes from); `Wording` keeps each binder's words.

`choose_allocations` turns the evaluation's chosen set on a node into claim allocations.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from extender.allocator.inputs import AllocatedState
from extender.allocator.model import DeviceID
from extender.allocator.requests import ALL, ClaimSpec, RequestSpec
from extender.allocator.results import ClaimAllocation
from extender.claims import Claim, PodClaims, allocation_fits_node, resolve_pod_claims
from extender.core import extended
from extender.core.evaluation import PodEvaluation
from extender.core.ranking import Ranker
from extender.core.scoring import FIRST_FIT, PARTITION
from extender.core.searching import Search
from extender.core.view import ClusterView
from extender.index.snapshot import DeviceIndex
from extender.pods import ExtendedClaim, Pod
from extender.verdicts import CLAIM_GONE, NO_FIT, NODE_GONE, NOTHING_ALLOCATED, Placed

if TYPE_CHECKING:
    from extender.core.placement import Placement

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Wording:
    """How a binder words the refusals that name where its state comes from."""

    node_gone: str  # formatted with `node`
    evaluation_error: str  # formatted with `ref` (namespace/name) and `error`


#: File/sample mode (`extender.binder.InMemoryBinder`).
IN_MEMORY = Wording("node {node} does not exist in the cluster state", "{error}")
#: Kube mode (`KubeBinder`): the state is the watch's.
WATCHED = Wording("node {node} does not exist (not in the watched cluster state)", "pod {ref}: {error}")


class BindRefusal(Exception):
    """The pod cannot be bound to the node: `message` for /bind, `reason` for the metrics."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason


#: What a bind with no pending claim places (its claims were allocated already, or it has none).
NOTHING_PLACED = Placed(NOTHING_ALLOCATED, NOTHING_ALLOCATED)


@dataclass(frozen=True, slots=True)
class BindChoice:
    """The pod's claims as resolved for this bind and what to write into the pending ones."""

    claims: PodClaims
    allocations: list[ClaimAllocation]  # one per `claims.pending`, in that order
    #: The claim to create for the pod's extended resources (`extender.core.extended`): the
    #: last of `claims.pending`, named `extended.IN_MEMORY_NAME`; None when there is none.
    extended: ExtendedClaim | None = None
    #: What the bind places (the labels of the placed-pods metric); nothing pending: "none".
    placed: Placed = NOTHING_PLACED


def problem_reason(problem: str) -> str:
    """Reason of a pod-level claim problem from `resolve_pod_claims` (its fixed messages)."""
    gone = ("not created yet", "not found", "is being deleted")
    return CLAIM_GONE if any(marker in problem for marker in gone) else NO_FIT


def resolve_claims(placement: Placement, pod: Pod) -> PodClaims:
    """The pod's claims as the placement sees them: the in-flight allocations count as made, and
    PodGroup claims are read where the placement's features turn them on."""
    return resolve_pod_claims(
        pod,
        placement.state,
        assumed=placement.assumed.active(),
        pod_groups=placement.features.workload_resource_claims,
    )


def choose_for_bind(
    placement: Placement,
    pod: Pod,
    node: str,
    *,
    wording: Wording,
    admit_allocated: Callable[[Claim, PodClaims], None] | None = None,
    extended_resources: bool = True,
) -> BindChoice:
    """Resolve the pod's claims, check the node and the claims already allocated, evaluate the pod
    on the node and choose the allocations of its pending claims.

    `admit_allocated` is called with each already allocated claim (and all the pod's claims) once
    it is known to fit the node, in order (the kube binder checks its reservation there); it may
    raise to refuse.

    Raises:
        BindRefusal: the claims cannot be resolved, the node is unknown, an allocated claim does
            not fit the node, or the pending claims cannot be allocated there.
    """
    ref = pod.ref
    claims = resolve_claims(placement, pod)
    if claims.problem:
        raise BindRefusal(claims.problem, problem_reason(claims.problem))
    node_obj = placement.index().nodes.get(node)
    if node_obj is None:
        raise BindRefusal(wording.node_gone.format(node=node), NODE_GONE)
    # False for a profile whose DynamicResources plugin made the claim, or with the gate off.
    if extended_resources and placement.features.extended_resource:
        found = extended.for_node(pod, node, placement.state)
        if isinstance(found, str):
            raise BindRefusal(f"pod {ref} cannot be bound to node {node}: {found}", NO_FIT)
        if found is not None:
            pod = found
            claims = resolve_claims(placement, pod)
    for claim in claims.allocated:
        if not allocation_fits_node(claim, node_obj, v137=placement.features.v137):
            raise BindRefusal(f"resourceclaim {claim.ref} not available on node {node}", NO_FIT)
        if admit_allocated is not None:
            admit_allocated(claim, claims)
    if not claims.pending:
        return BindChoice(claims, [])
    evaluation = placement.evaluate(pod, [node])
    if evaluation.error:
        raise BindRefusal(wording.evaluation_error.format(ref=ref, error=evaluation.error), NO_FIT)
    verdict = evaluation.verdicts.get(node)
    if verdict is None or not evaluation.passed(node):
        why = verdict.reason if verdict is not None else "not evaluated"
        raise BindRefusal(f"pod {ref} cannot be bound to node {node}: {why}", NO_FIT)
    allocations, method = choose_allocations_and_method(
        evaluation, node, view=placement.view, ranker=placement.ranker, search=placement.search
    )
    if allocations is None:
        raise BindRefusal(f"pod {ref}: cannot allocate all claims on node {node}", NO_FIT)
    if len(allocations) != len(evaluation.claims.pending):
        raise BindRefusal(f"pod {ref}: the allocator returned no allocation for some claims", NO_FIT)
    return BindChoice(claims, allocations, pod.extended, Placed(shape_label(evaluation.specs), method))


def shape_label(specs: list[ClaimSpec]) -> str:
    """The pod's device requests by class and count, for a metric label: `class:count` per
    request (`class:all` for allocationMode All; a firstAvailable request lists its
    alternatives as `(a:1|b:1)`), sorted and joined with `+`; "none" without requests.

    Selectors, capacity requests, constraints and names are left out: the label says what kind
    of devices and how many, and stays one of few values in a cluster (the metric caps them)."""
    parts = []
    for claim in specs:
        for request in claim.requests:
            if request.exactly is not None:
                parts.append(_request_label(request.exactly))
            else:
                parts.append("(" + "|".join(_request_label(s) for s in request.first_available) + ")")
    return "+".join(sorted(parts)) or NOTHING_ALLOCATED


def _request_label(spec: RequestSpec) -> str:
    return f"{spec.class_name}:{'all' if spec.mode == ALL else spec.count}"


def choose_allocations(
    evaluation: PodEvaluation, name: str, *, view: ClusterView, ranker: Ranker, search: Search
) -> list[ClaimAllocation] | None:
    """The allocation bind writes on a node that passed (`choose_allocations_and_method`)."""
    return choose_allocations_and_method(evaluation, name, view=view, ranker=ranker, search=search)[0]


def choose_allocations_and_method(
    evaluation: PodEvaluation, name: str, *, view: ClusterView, ranker: Ranker, search: Search
) -> tuple[list[ClaimAllocation] | None, str]:
    """The allocation bind writes on a node that passed: the set prioritize scored best; and
    how it was chosen (the score's method, or `FIRST_FIT` where upstream's first fit is written).

    One ClaimAllocation per pending claim, in `evaluation.claims.pending` order; None if the
    node cannot hold the pod's claims any more. A kernel-chosen set is turned into claim
    allocations by upstream's own search restricted to exactly those devices (the topology
    kernel's: every other device of the node counts as in use; the first-fit kernel's and a
    partition: `Search.only`), so what is written always obeys upstream's rules; should that
    search disagree with the kernel, upstream's first-fit allocation over the node is written.
    """
    if not evaluation.specs:
        return [], NOTHING_ALLOCATED
    score = ranker.scores(evaluation, [name]).get(name)
    index = view.index()
    if score is not None and score.method == FIRST_FIT and _kernel_first_fit(evaluation, name, score.rows):
        # The first-fit kernel's set is upstream's first-fit set: upstream's search over just those
        # devices takes them in the same order (a fraction of a search over the whole node).
        verified = search.only(evaluation, index, name, score.rows, in_order=True)
        return (verified if verified is not None else search.allocations_on(evaluation, name)), FIRST_FIT
    if score is None or score.method == FIRST_FIT:
        return search.allocations_on(evaluation, name), FIRST_FIT
    if score.method == PARTITION:  # one device: upstream's search over just that partition
        verified = search.one_device(evaluation, index, name, int(score.rows[0]))
        if verified is not None:
            return verified, PARTITION
        return search.allocations_on(evaluation, name), FIRST_FIT
    chosen = {index.row_device[row].id for row in score.rows}
    result = _restricted(evaluation, index, name, chosen, view=view, search=search)
    if result is not None and {r.device.id for a in result for r in a.devices} == chosen:
        return result, score.method
    log.warning(
        "node %s: upstream's search rejects the topology choice %s for claims %s; writing first-fit",
        name,
        sorted(d.device for d in chosen),
        ", ".join(s.ref for s in evaluation.specs),
    )
    return search.allocations_on(evaluation, name), FIRST_FIT


def _kernel_first_fit(evaluation: PodEvaluation, name: str, rows: tuple[int, ...]) -> bool:
    """Whether the node's first-fit set came from the first-fit kernel (not upstream's search,
    whose allocation the evaluation then holds) and can be verified by a search over its devices
    alone: an `All` request's set could not be (over only its devices, "all" is always them)."""
    plan = evaluation.first_fit
    return bool(rows) and name not in evaluation.allocations and plan is not None and not plan.has_all


def _restricted(
    evaluation: PodEvaluation,
    index: DeviceIndex,
    name: str,
    chosen: set[DeviceID],
    *,
    view: ClusterView,
    search: Search,
) -> list[ClaimAllocation] | None:
    """Upstream's search on the node with every device but `chosen` counted as in use."""
    allocated, _ = view.allocated_state()
    position = index.node_pos[name]
    start, stop = index.node_start[position], index.node_start[position + 1]
    others = {index.row_device[row].id for row in range(start, stop)} - chosen
    # Not `frozenset(allocated.devices) | others`: that copied every allocated device of the
    # cluster (tens of thousands at 5,000 nodes) for each bind.
    in_use = cast("frozenset[DeviceID]", InUse(allocated.devices, frozenset(others)))
    restricted = AllocatedState(
        devices=in_use, shared_ids=allocated.shared_ids, aggregated_capacity=allocated.aggregated_capacity
    )
    return search.run(evaluation.specs, index, name, restricted, search.budget.deadline())


class InUse(AbstractSet[DeviceID]):
    """The devices in use plus a few more, as one set without copying the large one (the
    allocator only asks `device in allocated.devices`; iteration and size work too)."""

    __slots__ = ("_base", "_more")

    def __init__(self, base: AbstractSet[DeviceID], more: frozenset[DeviceID]) -> None:
        self._base = base
        self._more = frozenset(device for device in more if device not in base)

    def __contains__(self, device: object) -> bool:
        return device in self._more or device in self._base

    def __iter__(self) -> Iterator[DeviceID]:
        yield from self._base
        yield from self._more

    def __len__(self) -> int:
        return len(self._base) + len(self._more)
