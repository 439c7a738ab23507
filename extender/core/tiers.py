"""The deciding tiers: which nodes can hold a pod's pending claims, cheapest answer first.

Each tier is a `Tier`: it decides the nodes it can answer for with certainty (writing their
verdicts into the evaluation) and hands on the rest. Placement runs them in this order
(README "How filter stays fast"):

1. `VectorisedTier`: Hall's condition over all nodes at once (`feasibility`), for simple pods;
2. `KernelTier`: the topology kernel's exhaustive search, for the other pods it models;
3. `FirstFitTier`: the first-fit kernel (`firstfit`), upstream's search over index columns;
4. `SearchTier`: upstream's own search, node by node; it decides everything it is handed.

A node the vectorised check cannot decide goes to the first-fit kernel, not the topology kernel
(a simple pod is never the topology kernel's). Every "no" is worded by `extender.core.reasons`.
`decide` runs the chain for an evaluation (after the checks that need no tier).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Protocol, cast

import numpy as np
import orjson

from extender import telemetry
from extender.allocator.allocating import SearchStats
from extender.allocator.inputs import AllocatedState
from extender.claims import Claim, allocation_fits_node, skips_node_operations
from extender.core import feasibility, firstfit, freekeyed, reasons, scoring, shapes
from extender.core.evaluation import PodEvaluation
from extender.core.ranking import Ranker
from extender.core.reasons import PASSED, UNRESOLVABLE, NodeVerdict
from extender.core.searching import Budget, Search, bare_node, check_classes_and_selectors
from extender.core.view import ClusterView, Snapshot
from extender.errors import AllocationAborted, AllocationError, NodeScopedError, SelectorsInterrupted
from extender.index import selecting
from extender.index.counters import counter_columns
from extender.index.snapshot import DeviceIndex
from kernels import counters as counter_kernels
from kernels import topology as kernels

#: The one verdict of every node that passes (interned by the evaluation's `Verdicts`).
_PASS = NodeVerdict(PASSED)


def _positions(evaluation: PodEvaluation, index: DeviceIndex, names: list[str]) -> np.ndarray:
    """Index positions of nodes of the index (each list's once: `Verdicts.positions`); the
    evaluation's verdicts are kept by this index's positions from here on."""
    evaluation.verdicts.bind(index.node_names, index.node_pos)
    positions = evaluation.verdicts.positions(names)
    if len(positions) and positions.min() < 0:
        raise KeyError(names[int(np.argmin(positions))])  # tiers are handed nodes of the index
    return positions


def _assign_no_set(
    evaluation: PodEvaluation,
    positions: np.ndarray,
    fits_if_free: np.ndarray,
    short: np.ndarray,
    short_texts: list[str],
) -> None:
    """`reasons.no_set` for the nodes at `positions`, worded once per distinct (fits if free,
    short request) pair: thousands of failed nodes share a handful of texts."""
    if not len(positions):
        return
    refs = reasons.claim_refs(evaluation.specs)
    pairs, group = np.unique((short + 1) * 2 + fits_if_free.astype(np.int64), return_inverse=True)
    verdicts = [
        reasons.no_set(
            refs, fits_if_free=bool(pair % 2), short=short_texts[pair // 2 - 1] if pair >= 2 else ""
        )
        for pair in pairs.tolist()
    ]
    evaluation.verdicts.assign_groups(positions, group.ravel(), verdicts)


class Tier(Protocol):
    """One way of deciding nodes."""

    def decide(
        self, evaluation: PodEvaluation, view: Snapshot, names: list[str], deadline: float
    ) -> list[str]:
        """Write verdicts for the nodes this tier can decide; return the others, in order.

        `names` are nodes of `view.index` (`decide` settles the names it does not know before
        any tier runs). `deadline` bounds upstream's search.
        """
        ...


class VectorisedTier:
    """Hall's condition for simple pods (`feasibility`); hands on the nodes that need a search."""

    def decide(
        self, evaluation: PodEvaluation, view: Snapshot, names: list[str], deadline: float
    ) -> list[str]:
        requests = feasibility.simple_requests(evaluation.specs)
        if requests is None or not names:
            return names
        index = view.index
        positions = _positions(evaluation, index, names)
        shape = shapes.shape_data(evaluation.specs, index)
        result = feasibility.check(index, requests, view.free, positions, shape)
        needs = result.needs_search
        evaluation.verdicts.assign(positions[result.fits & ~needs], _PASS)
        failed = ~needs & ~result.fits
        if failed.any():  # one verdict per distinct (short request, in use) pair
            short = np.asarray(result.short_request, dtype=np.int64)[failed]
            pairs, group = np.unique((short + 1) * 2 + result.fits_if_free[failed], return_inverse=True)
            verdicts = [
                reasons.short_of(evaluation.specs, pair // 2 - 1, in_use=bool(pair % 2))
                for pair in pairs.tolist()
            ]
            evaluation.verdicts.assign_groups(positions[failed], group.ravel(), verdicts)
        return evaluation.verdicts.pick(names, needs)


class KernelTier:
    """Decide constrained pods with the topology kernel where its search is exhaustive.

    For pods the kernels model (see `scoring`), the kernel's search is upstream's: every
    assignment of free candidate devices to the requests, under the same constraints. A set
    found means the node passes (and its score is kept for prioritize); a completed search
    without a set means it fails. Nodes the kernel cannot settle (work bound hit, devices that
    need upstream's search) are handed on. Simple pods are the vectorised tier's: handed on whole.
    """

    def __init__(self, ranker: Ranker) -> None:
        self.ranker = ranker

    def decide(
        self, evaluation: PodEvaluation, view: Snapshot, names: list[str], deadline: float
    ) -> list[str]:
        if not names or feasibility.simple_requests(evaluation.specs) is not None:
            return names
        return self.settle(evaluation, view, names)

    def settle(self, evaluation: PodEvaluation, view: Snapshot, names: list[str]) -> list[str]:
        """The kernel's verdicts on any pod it models, simple or not; returns the nodes it leaves."""
        index, free = view.index, view.free
        plan = self.ranker.plan(evaluation, index, free)
        if plan is None:
            return names
        positions = _positions(evaluation, index, names)
        modelled = ~plan.awkward_nodes[positions]
        search = evaluation.verdicts.pick(names, ~modelled)
        names = evaluation.verdicts.pick(names, modelled)
        if not names:
            return search
        positions = positions[modelled]
        status = self.ranker.run_kernel(evaluation, index, free, plan, names, positions)
        evaluation.verdicts.assign(
            positions[(status == kernels.STATUS_EXACT) | (status == kernels.STATUS_BOUNDED)], _PASS
        )
        search.extend(evaluation.verdicts.pick(names, status == kernels.STATUS_UNKNOWN))
        none = status == kernels.STATUS_NONE
        if none.any():
            search.extend(
                self._explain_failures(
                    evaluation, index, evaluation.verdicts.pick(names, none), positions[none]
                )
            )
        return search

    def _explain_failures(
        self, evaluation: PodEvaluation, index: DeviceIndex, names: list[str], positions: np.ndarray
    ) -> list[str]:
        """Verdicts for nodes where the kernel proved no set exists; returns nodes it cannot tell."""
        specs = evaluation.specs

        def if_free(todo: np.ndarray) -> np.ndarray:
            everything = np.ones(index.num_rows, dtype=bool)
            plan = scoring.kernel_plan(specs, index, everything)
            assert plan is not None  # the same pod is modelled whatever is free
            relevant = evaluation.relevant if evaluation.relevant is not None else everything
            return scoring.best_sets(plan, index, todo, everything, relevant, self.ranker.topology)[0]

        # With everything free the answer depends on the shape and the index only: kept per node.
        memo = shapes.shape_data(specs, index).memo("kernel_if_free", len(index.node_names), np.int8)
        status = memo.get(positions, if_free)
        short, texts = scoring.short_request_codes(specs, index, positions)
        sure = status != kernels.STATUS_UNKNOWN
        fits_if_free = (status == kernels.STATUS_EXACT) | (status == kernels.STATUS_BOUNDED)
        _assign_no_set(evaluation, positions[sure], fits_if_free[sure], short[sure], texts)
        return evaluation.verdicts.pick(names, ~sure)


class FirstFitTier:
    """Decide nodes with the first-fit kernel (upstream's search over the index columns).

    A set found passes the node (and is kept, as upstream's first-fit set, for prioritize); no
    set fails it with the search's reasons: in use if the kernel finds a set with nothing held,
    else the short request or "no combination". Hands on what the kernel does not model.
    """

    def decide(
        self, evaluation: PodEvaluation, view: Snapshot, names: list[str], deadline: float
    ) -> list[str]:
        if not names:
            return names
        index, free = view.index, view.free
        shape = shapes.shape_data(evaluation.specs, index)
        if not evaluation.first_fit_planned:
            # Free-independent: one plan per shape and index generation.
            if "first_fit_plan" not in shape.items:
                shape.items["first_fit_plan"] = _first_fit_plan(evaluation, index, shape)
            evaluation.first_fit = cast(firstfit.FirstFitPlan | None, shape.items["first_fit_plan"])
            evaluation.first_fit_planned = True
        plan = evaluation.first_fit
        if plan is None:
            return names
        positions = _positions(evaluation, index, names)
        status, chosen, chosen_slot = _first_fit(plan, index, free, positions, shape)
        found = status == counter_kernels.STATUS_FOUND
        if found.any():
            evaluation.first_fit_sets.add(
                evaluation.verdicts.pick(names, found), chosen[found], chosen_slot[found]
            )
            evaluation.verdicts.assign(positions[found], _PASS)
        search = evaluation.verdicts.pick(names, status == counter_kernels.STATUS_UNKNOWN)
        none = status == counter_kernels.STATUS_NONE
        if not none.any():
            return search
        positions = positions[none]
        # Nothing held: the answer depends on the shape and the index only, kept per node. A node
        # whose counters have consumers outside its rows reads other nodes' rows (whether such a
        # device has a row at all): then no answer is carried from an earlier generation.
        if counter_columns(index).has_foreign:
            shape.take("first_fit_if_free")
        memo = shape.memo("first_fit_if_free", len(index.node_names), np.int8)
        if_free = memo.get(
            positions, lambda todo: firstfit.run(plan, index, free, todo, nothing_held=True).status
        )
        short, texts = scoring.short_request_codes(evaluation.specs, index, positions)
        sure = if_free != counter_kernels.STATUS_UNKNOWN
        search.extend(evaluation.verdicts.pick(evaluation.verdicts.pick(names, none), ~sure))
        fits_if_free = if_free == counter_kernels.STATUS_FOUND
        _assign_no_set(evaluation, positions[sure], fits_if_free[sure], short[sure], texts)
        return search


def _first_fit(
    plan: firstfit.FirstFitPlan,
    index: DeviceIndex,
    free: np.ndarray,
    positions: np.ndarray,
    shape: shapes.ShapeData,
) -> tuple[np.ndarray, ...]:
    """`firstfit.run`'s (status, chosen, chosen_slot) on the nodes, run only where the shape's
    answers under an earlier free mask no longer hold (`freekeyed`); every node where a node's
    counters have consumers outside its rows."""

    def run(todo: np.ndarray) -> tuple[np.ndarray, ...]:
        result = firstfit.run(plan, index, free, todo)
        # Kept as int32 (rows and slots fit): 32 devices per claim, thousands of nodes, per shape.
        return result.status, result.chosen.astype(np.int32), result.chosen_slot.astype(np.int32)

    status, chosen, chosen_slot = freekeyed.kept(shape, "first_fit_free", index, free).get(positions, run)
    return status, chosen.astype(np.int64), chosen_slot.astype(np.int64)


def _first_fit_plan(
    evaluation: PodEvaluation, index: DeviceIndex, shape: shapes.ShapeData
) -> firstfit.FirstFitPlan | None:
    """The shape's first-fit plan: an earlier generation's with the changed nodes' columns
    worked out again (`firstfit.carried`), else a new one. Not carried where a node's counters
    have consumers outside its rows (whether they have a row is another node's matter)."""
    old = shape.take("first_fit_plan")
    if old is not None and not counter_columns(index).has_foreign:
        plan, changes = old
        if plan is None or isinstance(plan, firstfit.FirstFitPlan):
            return firstfit.carried(plan, changes, evaluation.specs, index)
    return firstfit.plan(evaluation.specs, index)


class SearchTier:
    """Upstream's search, node by node: decides every node it is handed (the last tier)."""

    def __init__(self, search: Search) -> None:
        self.search = search

    def decide(
        self, evaluation: PodEvaluation, view: Snapshot, names: list[str], deadline: float
    ) -> list[str]:
        for name in names:
            evaluation.verdicts[name] = self.verdict(evaluation, view.index, name, view.allocated, deadline)
        return []

    def verdict(
        self,
        evaluation: PodEvaluation,
        index: DeviceIndex,
        name: str,
        allocated: AllocatedState,
        deadline: float,
    ) -> NodeVerdict:
        """One node by the exact search; a failure is worded from that same search.

        The search notes whether it refused anything only because other claims hold it (a
        device, counters, capacity). If not, the search with nothing in use would have failed
        identically: the node cannot serve the claims (unresolvable). If so, freeing devices
        may help (failed, so preemption is considered), unless a request lacks devices
        altogether.
        """
        stats = SearchStats()
        try:
            result = self.search.run(evaluation.specs, index, name, allocated, deadline, stats=stats)
        except NodeScopedError as exc:
            return reasons.node_scoped(exc.reason)
        if result is not None:
            evaluation.allocations[name] = result
            return NodeVerdict(PASSED)
        refs = reasons.claim_refs(evaluation.specs)
        position = index.node_pos.get(name)
        short = (
            scoring.short_requests(evaluation.specs, index, np.array([position], dtype=np.int64))[0]
            if position is not None
            else ""
        )
        # A short request can never fit; otherwise "held back" is the search's "fits if free".
        return reasons.no_set(refs, fits_if_free=stats.held_back and not short, short=short)


def decide(
    evaluation: PodEvaluation, names: list[str], *, view: ClusterView, tiers: Sequence[Tier], budget: Budget
) -> None:
    """Verdicts for the nodes: a pod-level problem decides them all; a node an allocated claim
    of the pod cannot use is unresolvable; a pod with nothing pending passes; a node the state
    does not know cannot hold pending claims (`reasons.UNKNOWN_NODE`, in O(1): a request may
    name any number of them); the rest go to `run` (a search timeout becomes the evaluation's
    error, an input error its problem). Each step is an array operation over the nodes' index
    positions (`names` are distinct)."""
    index = view.index()
    verdicts = evaluation.verdicts
    verdicts.bind(index.node_names, index.node_pos)
    if evaluation.problem:
        verdicts.assign_names(names, NodeVerdict(UNRESOLVABLE, evaluation.problem))
        return
    positions = verdicts.positions(names)
    known = positions >= 0
    open_ = np.ones(len(names), dtype=bool)
    for claim in evaluation.claims.allocated:  # the first claim a node cannot use names it
        usable = _usable(claim, index, names, positions, known)
        verdicts.assign_names(
            evaluation.verdicts.pick(names, open_ & ~usable), reasons.claim_unavailable(claim.ref)
        )
        open_ &= usable
    if not evaluation.specs:
        verdicts.assign_names(evaluation.verdicts.pick(names, open_), _PASS)
        return
    verdicts.assign_names(evaluation.verdicts.pick(names, open_ & ~known), reasons.UNKNOWN_NODE)
    pending = evaluation.verdicts.pick(names, open_ & known)
    if not pending:
        return
    try:
        with telemetry.span(telemetry.SPAN_ALLOCATE, **{telemetry.ATTR_NODES_IN: len(pending)}):
            run(evaluation, index, pending, view=view, tiers=tiers, budget=budget)
    except AllocationAborted as exc:
        evaluation.error = reasons.timed_out(exc)
        evaluation.interrupted = isinstance(exc, SelectorsInterrupted)
    except AllocationError as exc:
        evaluation.problem = str(exc)
        verdicts.assign_names([*verdicts, *pending], NodeVerdict(UNRESOLVABLE, evaluation.problem))


#: Per index generation: an allocated claim's (node selector as JSON, whether 1.37 needs the node
#: to declare optional node operations) -> whether each node of the index can use the claim, so a
#: pod's allocated claims are checked per node once per generation.
_MaskKey = tuple[bytes, bool]
_SELECTOR_MASKS: weakref.WeakKeyDictionary[DeviceIndex, dict[_MaskKey, np.ndarray]] = (
    weakref.WeakKeyDictionary()
)
#: Selectors remembered per generation (the table starts again when full).
SELECTOR_MASKS = 1024


def _usable(
    claim: Claim, index: DeviceIndex, names: list[str], positions: np.ndarray, known: np.ndarray
) -> np.ndarray:
    """Per name: whether the allocated claim can be used on the node (`allocation_fits_node`).

    The answer depends on the claim only through its allocation's node selector and, for 1.37,
    whether a device of it skips node operations: one mask per such pair and index generation."""
    usable = np.ones(len(names), dtype=bool)
    v137 = index.features.v137
    needs_declaration = v137 and skips_node_operations(claim)
    selector = claim.node_selector
    if selector is None and not needs_declaration:
        return usable
    masks = _SELECTOR_MASKS.setdefault(index, {})
    key = (orjson.dumps(selector, option=orjson.OPT_SORT_KEYS), needs_declaration)
    mask = masks.get(key)
    if mask is None:
        if len(masks) >= SELECTOR_MASKS:
            masks.clear()
        nodes = index.nodes
        mask = masks[key] = np.fromiter(
            (allocation_fits_node(claim, nodes[name], v137=v137) for name in index.node_names),
            dtype=bool,
            count=len(index.node_names),
        )
    usable[known] = mask[positions[known]]
    for i in np.flatnonzero(~known).tolist():  # names the state does not know: a bare node each
        usable[i] = allocation_fits_node(claim, bare_node(names[i]), v137=v137)
    return usable


def run(
    evaluation: PodEvaluation,
    index: DeviceIndex,
    names: list[str],
    *,
    view: ClusterView,
    tiers: Sequence[Tier],
    budget: Budget,
) -> None:
    """Pod-level validation, then each tier in turn on what the one before left (`names` are
    nodes of the index). Raises the allocator's input errors (`AllocationError`) and
    `AllocationAborted` at the deadline."""
    check_classes_and_selectors(evaluation.specs, index)
    snapshot = view.snapshot()
    deadline = budget.deadline()
    remaining = names
    with selecting.stopping(budget.stopper(deadline)):  # a pod's first masks run CEL: same deadline
        for tier in tiers:
            remaining = tier.decide(evaluation, snapshot, remaining, deadline)
