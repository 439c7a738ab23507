"""Upstream's exact search (`extender.allocator.allocating.allocate`) on one node of the view.

The last tier decides with it (`extender.core.tiers.SearchTier`); the ranking and the bind
choice use it to turn a chosen device set into claim allocations that obey upstream's rules.
Every search runs against a deadline from the `Budget` (filter_timeout_seconds).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import cast

from extender import worker
from extender.allocator.allocating import SearchStats, allocate, validate_claims
from extender.allocator.inputs import AllocatedState, DeviceClassSpec
from extender.allocator.model import PoolID, Slice
from extender.allocator.pools import Pool, gather_pools
from extender.allocator.requests import ClaimSpec
from extender.allocator.results import ClaimAllocation
from extender.core.evaluation import PodEvaluation
from extender.core.view import ClusterView
from extender.errors import AllocationAborted, NodeScopedError
from extender.index.snapshot import DeviceIndex
from extender.objects import Obj


@dataclass(frozen=True, slots=True)
class Budget:
    """How long one search may run: `seconds` from now on `clock`, less what the call already
    spent waiting for the worker (`worker.waited()`: its caller's deadline is the deadline)."""

    seconds: float
    clock: Callable[[], float]

    def deadline(self) -> float:
        return self.clock() + max(self.seconds - worker.waited(), 0.0)

    def stopper(self, deadline: float) -> Callable[[], str | None]:
        """The allocator's `should_stop`: upstream's context error once the deadline passed."""

        def should_stop() -> str | None:
            return "context deadline exceeded" if self.clock() > deadline else None

        return should_stop


class Classes:
    """The index's DeviceClasses as the allocator's class lookup."""

    def __init__(self, index: DeviceIndex) -> None:
        self._classes = index.classes

    def get_class(self, name: str) -> DeviceClassSpec | None:
        return self._classes.get(name)


def bare_node(name: str) -> Obj:
    """A node the state does not know: a name and no labels (it has no local devices)."""
    return {"metadata": {"name": name}}


def check_classes_and_selectors(specs: list[ClaimSpec], index: DeviceIndex) -> None:
    """Pod-level input errors, before any node is looked at (unknown class, bad CEL, limits).

    This is the allocator's own validation, claim by claim and request by request in upstream's
    order, so the error reported is the one upstream reports first, whichever tier then decides
    the nodes. It stops where validation needs a node (an `All` request); the search finishes it.
    """
    validate_claims(specs, features=index.features, classes=Classes(index))


#: Per index generation: id of a slice -> (the slice, a copy without devices) for `Search.only`
#: (the slice is held, so its id is not reused while the entry lives).
_EMPTIED: weakref.WeakKeyDictionary[DeviceIndex, dict[int, tuple[Slice, Slice]]] = weakref.WeakKeyDictionary()


class Search:
    """Upstream's search on one node of a ClusterView, under a Budget."""

    def __init__(self, view: ClusterView, budget: Budget) -> None:
        self.view = view
        self.budget = budget

    def run(
        self,
        specs: list[ClaimSpec],
        index: DeviceIndex,
        name: str,
        allocated: AllocatedState,
        deadline: float,
        *,
        stats: SearchStats | None = None,
    ) -> list[ClaimAllocation] | None:
        """Upstream's first allocation of the claims on the node, or None (raises what it raises)."""
        features = self.view.features
        node = index.nodes.get(name) or bare_node(name)
        pools: Sequence[Pool] | None = index.pools.get(name)
        if pools is None:  # a node the index does not know: its pools are gathered for it
            by_pool = cast("dict[PoolID, Sequence[Slice]]", index.by_pool)  # read only
            pools = gather_pools(index.slices, node, features, all_slices_of_pool=by_pool)
        return allocate(
            specs,
            node=node,
            pools=pools,
            features=features,
            classes=Classes(index),
            allocated=allocated,
            evaluator=index.evaluator,
            should_stop=self.budget.stopper(deadline),
            stats=stats,
        )

    def allocations_on(self, evaluation: PodEvaluation, name: str) -> list[ClaimAllocation] | None:
        """The first-fit allocation on a node that passed (computed on demand for fast-path nodes)."""
        if name not in evaluation.allocations:
            index = self.view.index()
            allocated, _ = self.view.allocated_state()
            deadline = self.budget.deadline()
            result = self.run(evaluation.specs, index, name, allocated, deadline)
            if result is None:
                return None
            evaluation.allocations[name] = result
        return evaluation.allocations[name]

    def one_device(
        self, evaluation: PodEvaluation, index: DeviceIndex, name: str, row: int
    ) -> list[ClaimAllocation] | None:
        """Upstream's search on the node with only device `row` to choose from (`only`)."""
        return self.only(evaluation, index, name, (row,), in_order=True)

    def only(
        self, evaluation: PodEvaluation, index: DeviceIndex, name: str, rows: Sequence[int], *, in_order: bool
    ) -> list[ClaimAllocation] | None:
        """Upstream's search on the node with only the devices at `rows` to choose from; None if
        it fails or does not take exactly those devices (`in_order`: in that order, else as a set).

        The node's pools keep every allocated device (their counters and shares still count) and
        the chosen ones; the others are left out rather than marked in use, because a device marked
        in use would also hold its shared counters. A slice keeps its place in its pool (emptied
        if none of its devices stays), so the pool stays as complete as it was.
        """
        allocated, _ = self.view.allocated_state()
        chosen = [index.row_device[row].id for row in rows]
        keep = set(chosen)
        keep.update(device for device, _ in allocated.shared_ids)
        held = allocated.devices
        emptied = _EMPTIED.setdefault(index, {})
        pools = []
        for pool in index.pools.get(name, []):
            if not pool.slices:  # a pool of other nodes' slices (hundreds per node): as it is
                pools.append(pool)
                continue
            slices = []
            for s in pool.slices:
                devices = tuple(d for d in s.devices if d.id in keep or d.id in held)
                if len(devices) == len(s.devices):
                    slices.append(s)
                elif devices:
                    slices.append(replace(s, devices=devices))
                else:  # most slices of a node: one emptied copy each, made once per generation
                    empty = emptied.get(id(s))
                    if empty is None or empty[0] is not s:
                        empty = emptied[id(s)] = (s, replace(s, devices=()))
                    slices.append(empty[1])
            pools.append(replace(pool, slices=slices))
        deadline = self.budget.deadline()
        try:
            result = allocate(
                evaluation.specs,
                node=index.nodes.get(name) or bare_node(name),
                pools=pools,
                features=self.view.features,
                classes=Classes(index),
                allocated=allocated,
                evaluator=index.evaluator,
                should_stop=self.budget.stopper(deadline),
            )
        except (NodeScopedError, AllocationAborted):
            return None
        if result is None:
            return None
        taken = [r.device.id for a in result for r in a.devices]
        if taken != chosen if in_order else (len(taken) != len(chosen) or set(taken) != set(chosen)):
            return None
        return result
