"""Topology scores of the nodes a pod passed on (the /prioritize core, and bind's choice).

The topology kernel chooses and scores the best device set where it models the pod
(`scoring.kernel_plan`); elsewhere upstream's first-fit set is scored as it is: the set the
first-fit kernel found in filter, else the one upstream's search finds. A one-device pod may
get a better partition (MIG slice) than first-fit's (`scoring.partition_choices`). Results go
into the evaluation's `ScoreBook`, once per evaluation and node.

Time spent in the kernels is counted on a `KernelMeter` (read by /metrics).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from itertools import filterfalse, repeat

import numpy as np

from extender import telemetry
from extender.core import firstfit, freekeyed, scoring, shapes
from extender.core.evaluation import PodEvaluation
from extender.core.scoring import BOUNDED, EXACT, FIRST_FIT, PARTITION, KernelPlan, ScoreBook
from extender.core.searching import Search
from extender.core.view import ClusterView
from extender.index.snapshot import DeviceIndex
from extender.index.topology import TopologySettings
from kernels import topology as kernels

log = logging.getLogger(__name__)


@dataclass(slots=True)
class KernelMeter:
    """Time inside the topology kernels and their calls, since start (written on the worker
    thread, read by /metrics on the event loop: two floats, torn reads do not matter)."""

    seconds_total: float = 0.0
    calls_total: int = 0

    def add(self, started: float) -> None:
        """Count one kernel call that began at `started` (`time.perf_counter()`)."""
        self.seconds_total += time.perf_counter() - started
        self.calls_total += 1


class Ranker:
    """Scores of a pod's passed nodes (see module docstring)."""

    def __init__(
        self, view: ClusterView, search: Search, topology: TopologySettings, meter: KernelMeter
    ) -> None:
        self.view = view
        self.search = search
        self.topology = topology
        self.meter = meter
        self._settings_key = repr(topology)  # what kept answers were scored with (`_kept`)

    def scores(self, evaluation: PodEvaluation, names: list[str]) -> ScoreBook:
        """Topology scores of the given passed nodes (computed once per evaluation and node)."""
        missing = evaluation.scores.unscored_among(names)
        if missing and evaluation.specs and not evaluation.error:
            self._score_nodes(evaluation, missing)
        return evaluation.scores

    def plan(self, evaluation: PodEvaluation, index: DeviceIndex, free: np.ndarray) -> KernelPlan | None:
        """The pod's kernel inputs for this evaluation (None: the kernels do not model the pod)."""
        if not evaluation.planned:
            shape = shapes.shape_data(evaluation.specs, index)
            # The plan depends on what is free too: kept with the free mask it was made for (masks
            # are never changed in place), so pods of a shape share it until a claim changes.
            kept = shape.items.get("kernel_plan")
            if isinstance(kept, tuple) and kept[0] is free:
                evaluation.plan = kept[1]
            else:
                evaluation.plan = scoring.kernel_plan(evaluation.specs, index, free)
                shape.items["kernel_plan"] = (free, evaluation.plan)
            relevant = shape.items.get("relevant")
            if not isinstance(relevant, np.ndarray):
                relevant = shape.items["relevant"] = _relevant(evaluation, index, shape)
            evaluation.relevant = relevant
            evaluation.planned = True
        return evaluation.plan

    def run_kernel(
        self,
        evaluation: PodEvaluation,
        index: DeviceIndex,
        free: np.ndarray,
        plan: KernelPlan,
        names: list[str],
        positions: np.ndarray,
    ) -> np.ndarray:
        """Best sets on the nodes; found sets go into `evaluation.scores`. Returns the statuses."""
        relevant = evaluation.relevant
        assert relevant is not None

        def run(todo: np.ndarray) -> tuple[np.ndarray, ...]:
            started = time.perf_counter()
            with telemetry.span(telemetry.SPAN_SCORE, **{telemetry.ATTR_NODES_IN: len(todo)}):
                status, _, parts, chosen = scoring.best_sets(plan, index, todo, free, relevant, self.topology)
                parts = scoring.partition_parts(index, todo, chosen, free, parts)
            self.meter.add(started)
            return status, parts, chosen

        status, parts, chosen = self._kept(evaluation, index, free, "kernel_sets_free").get(positions, run)
        preference = np.ones(len(names))
        final = scoring.combine(parts, preference, self.topology)
        exact = status == kernels.STATUS_EXACT
        found = exact | (status == kernels.STATUS_BOUNDED)
        if found.all():
            method = EXACT if exact.all() else np.where(exact, EXACT, BOUNDED)
            evaluation.scores.add(names, final, parts, preference, chosen, method)
        elif found.any():
            keep = np.flatnonzero(found)
            evaluation.scores.add(
                [names[i] for i in keep],
                final[keep],
                parts[keep],
                preference[keep],
                chosen[keep],
                np.where(exact[keep], EXACT, BOUNDED),
            )
        return status

    def _kept(
        self, evaluation: PodEvaluation, index: DeviceIndex, free: np.ndarray, name: str
    ) -> freekeyed.Kept:
        """The shape's answers called `name` for `free` and these settings (`freekeyed.kept`)."""
        shape = shapes.shape_data(evaluation.specs, index)
        return freekeyed.kept(shape, name, index, free, self._settings_key)

    def _score_nodes(self, evaluation: PodEvaluation, names: list[str]) -> None:
        index = self.view.index()
        _, free = self.view.allocated_state()
        plan = self.plan(evaluation, index, free)
        relevant = evaluation.relevant
        assert relevant is not None
        node_pos = index.node_pos
        all_positions = np.fromiter(map(node_pos.get, names, repeat(-1)), dtype=np.int64, count=len(names))
        usable = all_positions >= 0
        if plan is not None:
            usable &= ~plan.awkward_nodes[np.maximum(all_positions, 0)]
        else:
            usable[:] = False
        named = np.array(names, dtype=object)
        kernel_nodes: list[str] = named[usable].tolist()
        fallback: list[str] = named[~usable].tolist()
        if kernel_nodes and plan is not None:
            status = self.run_kernel(evaluation, index, free, plan, kernel_nodes, all_positions[usable])
            for i in np.flatnonzero((status != kernels.STATUS_EXACT) & (status != kernels.STATUS_BOUNDED)):
                if status[i] == kernels.STATUS_NONE:
                    log.warning(
                        "node %s passed filter but the topology kernel found no device set", kernel_nodes[i]
                    )
                fallback.append(kernel_nodes[i])
        if fallback:
            self._score_first_fit(evaluation, index, fallback, free, relevant)

    def _score_first_fit(
        self,
        evaluation: PodEvaluation,
        index: DeviceIndex,
        names: list[str],
        free: np.ndarray,
        relevant: np.ndarray,
    ) -> None:
        """Score upstream's first-fit allocation where the kernels do not choose the devices.

        A pod asking for one device may get a better partition (MIG slice) than first-fit's
        (`scoring.partition_choices`): it is turned into the node's allocation by upstream's own
        search over just that device (`Search.one_device`), so what bind writes obeys upstream's
        rules; if that search rejects it, first-fit's allocation stays.
        """
        names = self._score_kernel_first_fit(evaluation, index, names, free, relevant)
        groups: dict[tuple[int, ...], list[tuple[str, list[int], float]]] = {}
        single = scoring.single_partition_request(evaluation.specs, index)
        better: dict[str, int] = {}
        if single is not None and names:
            known = [name for name in names if name in index.node_pos]
            positions = np.array([index.node_pos[name] for name in known], dtype=np.int64)
            choices = scoring.partition_choices(index, positions, single, free, relevant, self.topology)
            better = {name: int(row) for name, row in zip(known, choices.tolist(), strict=True) if row >= 0}
        for name in names:
            position = index.node_pos.get(name)
            allocations = self.search.allocations_on(evaluation, name)
            if allocations is None or position is None:
                continue
            row = better.get(name)
            if row is not None and index.row_device[row].id not in {
                r.device.id for a in allocations for r in a.devices
            }:
                verified = self.search.one_device(evaluation, index, name, row)
                if verified is not None:
                    evaluation.allocations[name] = allocations = verified
            start, stop = index.node_start[position], index.node_start[position + 1]
            rows: list[int] = []
            claims: list[int] = []
            for claim_position, allocation in enumerate(allocations):
                for result in allocation.devices:
                    found = index.rows_of.get(result.device.id)
                    inside = found[(found >= start) & (found < stop)] if found is not None else found
                    if inside is not None and len(inside):
                        rows.append(int(inside[0]))
                        claims.append(claim_position)
            preference = scoring.preference(evaluation.specs, allocations)
            groups.setdefault(tuple(claims), []).append((name, rows, preference))
        for claims_of_set, members in groups.items():
            positions = np.array([index.node_pos[name] for name, _, _ in members], dtype=np.int64)
            sets = np.array([rows for _, rows, _ in members], dtype=np.int64).reshape(len(members), -1)
            if sets.shape[1] == 0:
                sets = np.full((len(members), 1), -1, dtype=np.int64)
            started = time.perf_counter()
            with telemetry.span(telemetry.SPAN_SCORE, **{telemetry.ATTR_NODES_IN: len(members)}):
                _, parts = scoring.score_sets(
                    index, positions, sets, np.array(claims_of_set or (0,)), free, relevant, self.topology
                )
                parts = scoring.partition_parts(index, positions, sets, free, parts)
            self.meter.add(started)
            preferences = np.array([p for _, _, p in members])
            final = scoring.combine(parts, preferences, self.topology)
            evaluation.scores.add(
                [name for name, _, _ in members], final, parts, preferences, sets, FIRST_FIT
            )

    def _score_kernel_first_fit(
        self,
        evaluation: PodEvaluation,
        index: DeviceIndex,
        names: list[str],
        free: np.ndarray,
        relevant: np.ndarray,
    ) -> list[str]:
        """Score the first-fit sets the first-fit kernel found in filter (upstream's own sets, so
        no search runs here); returns the nodes it has no set for.

        A pod asking for one device gets, where there is one, the node's better partition
        (`scoring.partition_choices`: a MIG slice on a partly used GPU that keeps large profiles
        creatable) scored instead of first-fit's; it is marked PARTITION and turned into an
        allocation at bind by upstream's search over that device alone (`choose_allocations`).
        """
        book = evaluation.first_fit_sets
        plan = evaluation.first_fit
        mine = book.among(names)
        if not mine or plan is None:
            return names
        chosen, slots = book.gather(mine)
        positions = np.fromiter(map(index.node_pos.__getitem__, mine), dtype=np.int64, count=len(mine))
        at = np.full(len(index.node_names), -1, dtype=np.int64)
        at[positions] = np.arange(len(positions))

        def run(todo: np.ndarray) -> tuple[np.ndarray, ...]:
            return self._first_fit_terms(
                evaluation, index, todo, chosen[at[todo]], slots[at[todo]], free, relevant
            )

        kept = self._kept(evaluation, index, free, "first_fit_terms_free")
        partition_row, parts, preference = kept.get(positions, run)
        partition = partition_row >= 0
        width = max(int((chosen >= 0).sum(axis=1).max()), 1)
        scored = chosen[:, :width]
        if partition.any():
            scored = scored.copy()
            scored[partition, 0] = partition_row[partition]
        final = scoring.combine(parts, preference, self.topology)
        methods = np.where(partition, PARTITION, FIRST_FIT).astype(object)
        evaluation.scores.add(mine, final, parts, preference, scored, methods)
        return list(filterfalse(set(mine).__contains__, names))

    def _first_fit_terms(
        self,
        evaluation: PodEvaluation,
        index: DeviceIndex,
        positions: np.ndarray,
        chosen: np.ndarray,
        slots: np.ndarray,
        free: np.ndarray,
        relevant: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per node: the better partition a one-device pod takes instead of first-fit's device
        (its row, else -1), the terms of the set scored (`scoring.partition_parts`' five) and the
        prioritized-list preference of first-fit's slots (`firstfit.preference`)."""
        plan = evaluation.first_fit
        assert plan is not None
        width = max(int((chosen >= 0).sum(axis=1).max(initial=0)), 1)
        trimmed, slots = chosen[:, :width], slots[:, :width]
        partition = np.zeros(len(positions), dtype=bool)
        single = scoring.single_partition_request(evaluation.specs, index) if width == 1 else None
        if single is not None:
            choices = scoring.partition_choices(index, positions, single, free, relevant, self.topology)
            partition = (choices >= 0) & (choices != trimmed[:, 0])
            chosen = chosen.copy()
            chosen[partition, 0] = choices[partition]
            trimmed = chosen[:, :width]
        claims = np.where(trimmed >= 0, plan.slot_claim[np.maximum(slots, 0)], -1)
        patterns, group = _claim_patterns(claims)
        parts = np.zeros((len(positions), 5))
        for g, pattern in enumerate(patterns):
            members = np.flatnonzero(group == g)
            started = time.perf_counter()
            with telemetry.span(telemetry.SPAN_SCORE, **{telemetry.ATTR_NODES_IN: len(members)}):
                _, terms = scoring.score_sets(
                    index, positions[members], trimmed[members], np.maximum(pattern, 0), free, relevant,
                    self.topology,
                )  # fmt: skip
                parts[members] = scoring.partition_parts(
                    index, positions[members], trimmed[members], free, terms
                )
            self.meter.add(started)
        return np.where(partition, trimmed[:, 0], -1), parts, firstfit.preference(plan, slots)


def _relevant(evaluation: PodEvaluation, index: DeviceIndex, shape: shapes.ShapeData) -> np.ndarray:
    """The shape's relevant rows: an earlier generation's with the changed nodes' rows read again
    (a row's answer is its own class masks'), else all read."""
    old = shape.take("relevant")
    if old is None or not isinstance(old[0], np.ndarray) or len(old[0]) != index.num_rows:
        return scoring.relevant_rows(evaluation.specs, index)
    kept, changes = old[0], old[1]
    if not len(changes.touched):
        return kept
    rows, _ = shapes.node_rows(index, changes.touched)
    relevant: np.ndarray = kept.copy()
    relevant[rows] = scoring.relevant_rows(evaluation.specs, index, rows)
    return relevant


def _claim_patterns(claims: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(claims, axis=0, return_inverse=True)` with a flat inverse: the distinct rows (in
    numpy's order) and each row's number. Rows of entries in [-1, base - 2] are packed into one
    integer where that fits, so the unique is 1-D (numpy's unique over axis 0 sorts rows as
    opaque records, several times slower on thousands of nodes)."""
    rows, width = claims.shape
    base = int(claims.max(initial=-1)) + 2
    if rows and width and base**width < 2**62:
        weights = base ** np.arange(width - 1, -1, -1, dtype=np.int64)
        keys = (claims + 1) @ weights  # lexicographic order of the rows, as numpy's
        _, first, group = np.unique(keys, return_index=True, return_inverse=True)
        return claims[first], group.ravel()
    patterns, group = np.unique(claims, axis=0, return_inverse=True)
    return patterns, group.ravel()
