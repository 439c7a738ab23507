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

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from extender import telemetry
from extender.allocator.allocating import SearchStats
from extender.allocator.inputs import AllocatedState
from extender.claims import allocation_fits_node
from extender.core import feasibility, firstfit, reasons, scoring
from extender.core.evaluation import PodEvaluation
from extender.core.ranking import Ranker
from extender.core.reasons import PASSED, UNRESOLVABLE, NodeVerdict
from extender.core.searching import Budget, Search, bare_node, check_classes_and_selectors
from extender.core.view import ClusterView, Snapshot
from extender.errors import AllocationAborted, AllocationError, NodeScopedError, SelectorsInterrupted
from extender.index import selecting
from extender.index.snapshot import DeviceIndex
from kernels import counters as counter_kernels
from kernels import topology as kernels


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
        positions = np.array([index.node_pos[n] for n in names], dtype=np.int64)
        result = feasibility.check(index, requests, view.free, positions)
        hard: list[str] = []
        for i, name in enumerate(names):
            if result.needs_search[i]:
                hard.append(name)
            elif result.fits[i]:
                evaluation.verdicts[name] = NodeVerdict(PASSED)
            else:
                evaluation.verdicts[name] = reasons.short_of(
                    evaluation.specs, result.short_request[i], in_use=bool(result.fits_if_free[i])
                )
        return hard


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
        positions = np.fromiter((index.node_pos[n] for n in names), dtype=np.int64, count=len(names))
        modelled = ~plan.awkward_nodes[positions]
        search = [name for name, ok in zip(names, modelled.tolist(), strict=True) if not ok]
        names = [name for name, ok in zip(names, modelled.tolist(), strict=True) if ok]
        if not names:
            return search
        status = self.ranker.run_kernel(evaluation, index, free, plan, names, positions[modelled])
        none = np.flatnonzero(status == kernels.STATUS_NONE)
        for i in np.flatnonzero((status == kernels.STATUS_EXACT) | (status == kernels.STATUS_BOUNDED)):
            evaluation.verdicts[names[i]] = NodeVerdict(PASSED)
        search.extend(names[i] for i in np.flatnonzero(status == kernels.STATUS_UNKNOWN))
        if len(none):
            search.extend(self._explain_failures(evaluation, index, [names[i] for i in none]))
        return search

    def _explain_failures(self, evaluation: PodEvaluation, index: DeviceIndex, names: list[str]) -> list[str]:
        """Verdicts for nodes where the kernel proved no set exists; returns nodes it cannot tell."""
        specs = evaluation.specs
        everything = np.ones(index.num_rows, dtype=bool)
        plan = scoring.kernel_plan(specs, index, everything)
        assert plan is not None  # the same pod is modelled whatever is free
        positions = np.fromiter((index.node_pos[n] for n in names), dtype=np.int64, count=len(names))
        relevant = evaluation.relevant if evaluation.relevant is not None else everything
        status, _, _, _ = scoring.best_sets(
            plan, index, positions, everything, relevant, self.ranker.topology
        )
        refs = reasons.claim_refs(specs)
        short = scoring.short_requests(specs, index, positions)
        unsure: list[str] = []
        for i, name in enumerate(names):
            if status[i] == kernels.STATUS_UNKNOWN:
                unsure.append(name)
            else:
                fits_if_free = status[i] in (kernels.STATUS_EXACT, kernels.STATUS_BOUNDED)
                evaluation.verdicts[name] = reasons.no_set(refs, fits_if_free=fits_if_free, short=short[i])
        return unsure


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
        if not evaluation.first_fit_planned:
            evaluation.first_fit = firstfit.plan(evaluation.specs, index)
            evaluation.first_fit_planned = True
        plan = evaluation.first_fit
        if plan is None:
            return names
        positions = np.fromiter((index.node_pos[n] for n in names), dtype=np.int64, count=len(names))
        result = firstfit.run(plan, index, free, positions)
        status = result.status
        found = np.flatnonzero(status == counter_kernels.STATUS_FOUND)
        if len(found):
            passed = [names[i] for i in found]
            evaluation.first_fit_sets.add(passed, result.chosen[found], result.chosen_slot[found])
            for name in passed:
                evaluation.verdicts[name] = NodeVerdict(PASSED)
        search = [names[i] for i in np.flatnonzero(status == counter_kernels.STATUS_UNKNOWN)]
        none = np.flatnonzero(status == counter_kernels.STATUS_NONE)
        if not len(none):
            return search
        failed = [names[i] for i in none]
        if_free = firstfit.run(plan, index, free, positions[none], nothing_held=True).status
        short = scoring.short_requests(evaluation.specs, index, positions[none])
        refs = reasons.claim_refs(evaluation.specs)
        for i, name in enumerate(failed):
            if if_free[i] == counter_kernels.STATUS_UNKNOWN:
                search.append(name)
            else:
                fits_if_free = if_free[i] == counter_kernels.STATUS_FOUND
                evaluation.verdicts[name] = reasons.no_set(refs, fits_if_free=fits_if_free, short=short[i])
        return search


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
    error, an input error its problem)."""
    if evaluation.problem:
        problem = NodeVerdict(UNRESOLVABLE, evaluation.problem)
        for name in names:
            evaluation.verdicts[name] = problem
        return
    index = view.index()
    known = index.nodes
    allocated = evaluation.claims.allocated
    v137 = index.features.v137
    pending: list[str] = []
    for name in names:
        node = known.get(name)
        unusable = (
            next(
                (c for c in allocated if not allocation_fits_node(c, node or bare_node(name), v137=v137)),
                None,
            )
            if allocated
            else None
        )
        if unusable is not None:
            evaluation.verdicts[name] = reasons.claim_unavailable(unusable.ref)
        elif not evaluation.specs:
            evaluation.verdicts[name] = NodeVerdict(PASSED)
        elif node is None:
            evaluation.verdicts[name] = reasons.UNKNOWN_NODE
        else:
            pending.append(name)
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
        for name in [*evaluation.verdicts, *pending]:
            evaluation.verdicts[name] = NodeVerdict(UNRESOLVABLE, evaluation.problem)


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
