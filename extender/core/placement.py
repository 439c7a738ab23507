"""The service behind /filter and /prioritize: one evaluation per pod per index generation.

For each pod it resolves the claims, then decides for every candidate node whether upstream's
allocator would find an allocation there, in tiers (README "How filter stays fast"): the
vectorised check (`feasibility`) for simple pods, the topology kernel for constrained ones, the
first-fit kernel (`firstfit`) for counters, `firstAvailable` and `All`, and the exact search
(`allocator.allocating`) for what the kernels leave. The outcome is cached by pod UID, the
pod's claim references (`claims_key`) and the (devices, claims, assumed) generations, so
filter, prioritize and bind of one pod in one scheduling cycle share the work, and a pod sent
again with other claims under the same UID is evaluated afresh.

Lifecycle: one Placement per process, single-threaded: in the server every call runs on its
`worker` thread (`extender.worker`), which is also the only thread that writes the ClusterState
and the AssumeCache it reads, so no call sees a half-applied change; the event loop only reads
`ready()`, `generation()`, `current_index()` and single `pods_seen` entries (atomic reads).
Direct callers (explain, benchmarks, tests) call it on their own thread and never start the
worker. Its caches are replaced, never mutated concurrently: `_index` when the device generation
changes, `_allocated` when claims or assumed allocations change.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from extender import feasibility, firstfit, gang, scoring, telemetry
from extender.allocator.allocating import SearchStats, allocate, validate_claims
from extender.allocator.features import Features
from extender.allocator.inputs import AllocatedState, DeviceClassSpec
from extender.allocator.model import DeviceID
from extender.allocator.pools import gather_pools
from extender.allocator.requests import EXACT_COUNT, ClaimSpec, RequestSpec, parse_claim
from extender.allocator.results import ClaimAllocation
from extender.assumed import AssumeCache
from extender.claims import (
    PodClaims,
    allocation_fits_node,
    claim_ref,
    resolve_pod_claims,
)
from extender.cluster.state import ClusterState
from extender.errors import AllocationAborted, AllocationError, NodeScopedError
from extender.held import HeldLedger
from extender.index.counters import counter_columns
from extender.index.snapshot import DeviceIndex, build_index
from extender.scoring import BOUNDED, EXACT, FIRST_FIT, PARTITION, KernelPlan, ScoreBook
from extender.topology import TopologyModel, TopologySettings
from extender.verdicts import FilterVerdict, HostScore
from extender.worker import PlacementWorker
from kernels import counters as counter_kernels
from kernels import topology as kernels

log = logging.getLogger(__name__)

PASSED, FAILED, UNRESOLVABLE = "passed", "failed", "unresolvable"
CANNOT_ALLOCATE = "cannot allocate all claims"
#: Pod evaluations kept (LRU); a scheduling cycle needs only the current pod's.
EVALUATION_CACHE_SIZE = 256
#: Pods seen in filter/prioritize kept for bind (LRU). Bind of a pod usually follows its filter
#: closely, but the scheduler binds asynchronously while it filters other pods, so this is large.
PODS_SEEN_SIZE = 4096

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    status: str  # PASSED, FAILED (preemption may help) or UNRESOLVABLE
    reason: str = ""


@dataclass(slots=True)
class PodEvaluation:
    """Everything decided about one pod at one generation."""

    pod: Obj
    claims: PodClaims
    specs: list[ClaimSpec]
    problem: str = ""  # pod-level: every node is unresolvable with this message
    error: str = ""  # the call must fail (e.g. the search timed out): scheduler retries
    verdicts: dict[str, NodeVerdict] = field(default_factory=dict)
    allocations: dict[str, list[ClaimAllocation]] = field(default_factory=dict)  # first-fit, upstream's
    scores: ScoreBook = field(default_factory=ScoreBook)  # topology choice per passed node
    plan: KernelPlan | None = None
    planned: bool = False  # `plan` was computed (None then means: not a kernel pod)
    relevant: np.ndarray | None = None
    first_fit: firstfit.FirstFitPlan | None = None  # the first-fit kernel's inputs (None: not modelled)
    first_fit_planned: bool = False
    first_fit_sets: firstfit.FirstFitBook = field(default_factory=firstfit.FirstFitBook)


class _Classes:
    def __init__(self, index: DeviceIndex) -> None:
        self._classes = index.classes

    def get_class(self, name: str) -> DeviceClassSpec | None:
        return self._classes.get(name)


class Placement:
    """PlacementService over a ClusterState (see module docstring)."""

    def __init__(
        self,
        state: ClusterState,
        *,
        features: Features,
        assumed: AssumeCache,
        filter_timeout_seconds: float = 10.0,
        is_synced: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.monotonic,
        topology: TopologySettings | None = None,
        freeze_caches: bool = False,
        worker: PlacementWorker | None = None,
        gang_settings: gang.GangSettings | None = None,
    ) -> None:
        self.state = state
        self.gang = gang_settings or gang.GangSettings()
        self._cliques: tuple[int, dict[str, str]] = (-1, {})  # (index generation, node -> clique)
        self._gang_pods: tuple[int, dict[str, dict[str, str]]] = (-1, {})  # (claims gen, key -> uid -> node)
        self.freeze_caches = freeze_caches
        self._frozen_at: tuple[int, int, int] = (-1, -1, -1)
        self.topology = topology or TopologySettings()
        self._topology_model = TopologyModel(self.topology)
        self.kernel_seconds_total = 0.0  # time inside the topology kernels (read by /metrics)
        self.kernel_calls_total = 0
        self.features = features
        self.assumed = assumed
        self.filter_timeout_seconds = filter_timeout_seconds
        self._is_synced = is_synced
        self._clock = clock
        self._index: DeviceIndex | None = None
        self._allocated_key: tuple[int, int, int] | None = None
        self._allocated: AllocatedState = AllocatedState()
        self._free: np.ndarray = np.zeros(0, dtype=bool)
        self._ledger = HeldLedger()
        self._evaluations: OrderedDict[tuple[str, tuple[Any, ...], tuple[int, int, int]], PodEvaluation] = (
            OrderedDict()
        )
        #: uid (or "namespace/name" for a pod without one) -> the pod as last seen in filter or
        #: prioritize, for bind (which receives only names); LRU of PODS_SEEN_SIZE.
        self.pods_seen: OrderedDict[str, Obj] = OrderedDict()
        #: The thread the server and the binders run this placement's work on (started lazily).
        self.worker = worker or PlacementWorker()

    # ----------------------------------------------------------------- snapshots
    def ready(self) -> bool:
        return self._is_synced()

    def index(self) -> DeviceIndex:
        """The device index for the current device generation (rebuilt when it changed)."""
        if self._index is None or self._index.generation != self.state.devices_generation:
            started = time.perf_counter()
            self._index = build_index(
                self.state, self.features, previous=self._index, topology=self._topology_model
            )
            log.info(
                "device index generation %d: %d nodes, %d device rows, built in %.1f ms",
                self._index.generation,
                len(self._index.node_names),
                self._index.num_rows,
                (time.perf_counter() - started) * 1000,
            )
        return self._index

    def allocated_state(self) -> tuple[AllocatedState, np.ndarray]:
        """Devices in use (allocated or assumed) and the matching `free` row mask.

        Updated by the diff of each change: the ledger re-reads only the claims changed since it
        last looked (and the assumed entries), and `free` changes only at the rows of devices
        whose holdings changed. A new index generation (rows moved) or a ledger rescan rebuilds
        `free` from the held devices. Both results are new objects; readers keep the old ones.
        """
        index = self.index()
        active = self.assumed.active()
        key = (index.generation, self.state.claims_generation, self.assumed.version)
        if key != self._allocated_key:
            touched = self._ledger.update(self.state, active)
            collected = self._ledger.allocated()
            self._allocated = AllocatedState(
                devices=collected.devices,
                shared_ids=collected.shared_ids,
                aggregated_capacity=collected.aggregated_capacity,
            )
            same_rows = self._allocated_key is not None and self._allocated_key[0] == index.generation
            if touched is None or not same_rows or len(self._free) != index.num_rows:
                free = np.ones(index.num_rows, dtype=bool)
                free[self._rows_held(index, self._ledger.held)] = False
            elif touched:
                free = self._free.copy()
                held = self._ledger.held
                for device_id in touched:
                    rows = index.rows_of.get(device_id)
                    if rows is not None:
                        free[rows] = device_id not in held
            else:
                free = self._free
            self._free = free
            self._allocated_key = key
        return self._allocated, self._free

    @staticmethod
    def _rows_held(index: DeviceIndex, devices: Iterable[DeviceID]) -> np.ndarray:
        """Index rows of the devices (a device on no node's rows has none)."""
        return index.rows_of.rows_for(devices)

    def current_index(self) -> DeviceIndex | None:
        """The device index as last built, without building one (for /metrics on the event loop)."""
        return self._index

    def warm(self) -> None:
        """Build now what the first pods would otherwise pay for in their filter call: the device
        index, the held devices, the counter columns of the first-fit tier and the parent-GPU
        groups of the partition terms (seconds at thousands of nodes; a cold first MIG pod at
        5,000 nodes otherwise ran into `filter_timeout_seconds`, docs/benchmarks.md)."""
        index = self.index()
        self.allocated_state()
        counter_columns(index)
        scoring.partitions(index)
        for class_name in index.classes:
            # Every DeviceClass's CEL over every device, once: the per-device results stay on the
            # devices, so a pod's first mask of that class costs lookups, not CEL (a cold MIG pod
            # at 10,000 nodes otherwise spent its whole filter deadline evaluating the class).
            with contextlib.suppress(Exception):  # a class whose CEL fails is the pod's error later
                index.mask(class_name, ())

    def generation(self) -> tuple[int, int, int]:
        return self.state.devices_generation, self.state.claims_generation, self.assumed.version

    # ----------------------------------------------------------------- verbs
    def filter(self, pod: Obj, node_names: list[str]) -> FilterVerdict:
        evaluation = self.evaluate(pod, node_names)
        if evaluation.error:
            return FilterVerdict(error=evaluation.error)
        verdict = FilterVerdict()
        outside = self._outside_gang_clique(pod, node_names) if self.gang.filter_other_cliques else {}
        for name in node_names:
            outcome = evaluation.verdicts[name]
            if outcome.status == PASSED and name in outside:
                verdict.unresolvable[name] = outside[name]
            elif outcome.status == PASSED:
                verdict.passed.append(name)
            elif outcome.status == FAILED:
                verdict.failed[name] = outcome.reason
            else:
                verdict.unresolvable[name] = outcome.reason
        return verdict

    def prioritize(self, pod: Obj, node_names: list[str]) -> list[HostScore]:
        """0..10 per node from the topology score of its best device set; failed nodes get 0.

        Pods without pending claims (nothing to choose) score 0 everywhere, like upstream.
        """
        evaluation = self.evaluate(pod, node_names)
        if evaluation.error or not evaluation.specs:
            return [HostScore(name, 0) for name in node_names]
        passed = [name for name in node_names if evaluation.verdicts[name].status == PASSED]
        scores = self.scores(evaluation, passed)
        scored = [name for name in passed if name in scores]
        values = scoring.priorities(scores.values(scored))
        by_node = dict(zip(scored, values.tolist(), strict=True))
        if self.gang.weight > 0:
            by_node = self._with_gang_term(pod, passed, by_node)
        return [HostScore(name, by_node.get(name, 0)) for name in node_names]

    # ----------------------------------------------------------------- gangs (extender/gang.py)
    def node_cliques(self) -> dict[str, str]:
        """node -> multi-node NVLink clique, per index generation."""
        index = self.index()
        if self._cliques[0] != index.generation:
            devices = {name: block.devices for name, block in index.blocks.items()}
            self._cliques = (index.generation, gang.node_cliques(index.nodes, devices, self.gang))
        return self._cliques[1]

    def gang_members(self, member: gang.Gang, pod_uid: str) -> dict[str, str]:
        """pod uid -> node of the gang's other members, bound (in the state) or assumed (bind)."""
        generation = self.state.claims_generation
        if self._gang_pods[0] != generation:
            by_gang: dict[str, dict[str, str]] = {}
            for pod in self.state.iter("Pod"):
                node = (pod.get("spec") or {}).get("nodeName")
                other = gang.gang_of(pod, self.gang) if node else None
                if other is not None:
                    by_gang.setdefault(other.key, {})[str((pod.get("metadata") or {}).get("uid", ""))] = node
            self._gang_pods = (generation, by_gang)
        members = dict(self._gang_pods[1].get(member.key, {}))
        assumed = self.assumed.pod_nodes()
        if assumed:
            for pod in self._gang_candidates(assumed):
                other = gang.gang_of(pod, self.gang)
                if other is not None and other.key == member.key:
                    uid = str((pod.get("metadata") or {}).get("uid", ""))
                    members.setdefault(uid, assumed[uid])
        members.pop(pod_uid, None)
        return members

    def _gang_candidates(self, assumed: dict[str, str]) -> list[Obj]:
        """Pods behind assumed bindings: from the pods seen in filter, else the state."""
        found = [self.pods_seen[uid] for uid in assumed if uid in self.pods_seen]
        if len(found) < len(assumed):
            found.extend(p for p in self.state.iter("Pod") if (p.get("metadata") or {}).get("uid") in assumed)
        return found

    def _with_gang_term(self, pod: Obj, passed: list[str], by_node: dict[str, int]) -> dict[str, int]:
        member = gang.gang_of(pod, self.gang)
        if member is None or not passed:
            return by_node
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        cliques = self.node_cliques()
        placed = self.gang_members(member, uid).values()
        terms = gang.clique_scores(member, passed, cliques, placed)
        if terms is None:
            return by_node
        weight = self.gang.weight
        return {name: gang.combine(by_node.get(name, 0), terms[name], weight) for name in passed}

    def _outside_gang_clique(self, pod: Obj, node_names: list[str]) -> dict[str, str]:
        """Nodes outside a placed gang's clique -> reason (setting `gang_filter_other_cliques`)."""
        member = gang.gang_of(pod, self.gang)
        if member is None:
            return {}
        cliques = self.node_cliques()
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        home = gang.home_clique(cliques, self.gang_members(member, uid).values())
        if home is None:
            return {}
        return {
            name: gang.other_clique_reason(member, home, cliques.get(name))
            for name in node_names
            if cliques.get(name) != home
        }

    # ----------------------------------------------------------------- evaluation
    def evaluate(self, pod: Obj, node_names: list[str]) -> PodEvaluation:
        """Evaluate the pod on the given nodes, re-using the cached evaluation where possible."""
        uid = pod_key(pod)
        self._remember_pod(uid, pod)
        key = (uid, claims_key(pod), self.generation())
        evaluation = self._evaluations.get(key)
        if evaluation is None:
            evaluation = self._new_evaluation(pod)
            self._evaluations[key] = evaluation
            while len(self._evaluations) > EVALUATION_CACHE_SIZE:
                self._evaluations.popitem(last=False)
        else:
            self._evaluations.move_to_end(key)
        missing = [n for n in node_names if n not in evaluation.verdicts]
        if missing and not evaluation.error:
            self._decide(evaluation, missing)
            if self.freeze_caches:
                self._freeze_new_caches()
        return evaluation

    def _freeze_new_caches(self) -> None:
        """Move long-lived caches made since the last call out of the GC's generations.

        A new index generation, new selector masks and the per-device CEL results they leave
        are kept for as long as the devices live; left in the young generations they make every
        full collection walk hundreds of thousands of objects (a ~175 ms pause at 5,000 nodes,
        docs/benchmarks.md). `gc.freeze` is a list splice; frozen objects are still freed by
        reference counting when their devices go.
        """
        index = self._index
        if index is None:
            return
        marker = (index.generation, index.cached_masks, index.evaluator.evaluations)
        if marker != self._frozen_at:
            self._frozen_at = marker
            gc.freeze()

    def _remember_pod(self, uid: str, pod: Obj) -> None:
        self.pods_seen[uid] = pod
        self.pods_seen.move_to_end(uid)
        while len(self.pods_seen) > PODS_SEEN_SIZE:
            self.pods_seen.popitem(last=False)

    def _new_evaluation(self, pod: Obj) -> PodEvaluation:
        with telemetry.span(telemetry.SPAN_RESOLVE_CLAIMS):
            claims = resolve_pod_claims(pod, self.state, assumed=self.assumed.active())
        evaluation = PodEvaluation(pod=pod, claims=claims, specs=[], problem=claims.problem)
        if not evaluation.problem:
            try:
                evaluation.specs = [parse_claim(c) for c in claims.pending]
            except (ValueError, TypeError) as exc:
                evaluation.problem = f"invalid ResourceClaim: {exc}"
        return evaluation

    def _decide(self, evaluation: PodEvaluation, node_names: list[str]) -> None:
        if evaluation.problem:
            for name in node_names:
                evaluation.verdicts[name] = NodeVerdict(UNRESOLVABLE, evaluation.problem)
            return
        index = self.index()
        pending: list[str] = []
        for name in node_names:
            node = index.nodes.get(name)
            unusable = next(
                (
                    c
                    for c in evaluation.claims.allocated
                    if not allocation_fits_node(c, node or _bare_node(name))
                ),
                None,
            )
            if unusable is not None:
                reason = f"resourceclaim {claim_ref(unusable)} not available on the node"
                evaluation.verdicts[name] = NodeVerdict(UNRESOLVABLE, reason)
            elif not evaluation.specs:
                evaluation.verdicts[name] = NodeVerdict(PASSED)
            else:
                pending.append(name)
        if not pending:
            return
        try:
            with telemetry.span(telemetry.SPAN_ALLOCATE, **{telemetry.ATTR_NODES_IN: len(pending)}):
                self._decide_pending(evaluation, index, pending)
        except AllocationAborted as exc:
            evaluation.error = f"timed out trying to allocate devices: {exc}"
        except AllocationError as exc:
            evaluation.problem = str(exc)
            for name in evaluation.verdicts:
                evaluation.verdicts[name] = NodeVerdict(UNRESOLVABLE, evaluation.problem)
            for name in pending:
                evaluation.verdicts[name] = NodeVerdict(UNRESOLVABLE, evaluation.problem)

    def _decide_pending(self, evaluation: PodEvaluation, index: DeviceIndex, names: list[str]) -> None:
        specs = evaluation.specs
        _check_classes_and_selectors(specs, index)
        allocated, free = self.allocated_state()
        deadline = self._clock() + self.filter_timeout_seconds
        search: list[str] = []
        requests = feasibility.simple_requests(specs)
        known = [n for n in names if n in index.node_pos]
        search.extend(n for n in names if n not in index.node_pos)
        # Tiers, cheapest first; each hands what it cannot decide to the next, upstream's search last.
        hard: list[str] = []
        if requests is not None and known:
            positions = np.array([index.node_pos[n] for n in known], dtype=np.int64)
            result = feasibility.check(index, requests, free, positions)
            for i, name in enumerate(known):
                if result.needs_search[i]:
                    hard.append(name)
                elif result.fits[i]:
                    evaluation.verdicts[name] = NodeVerdict(PASSED)
                else:
                    evaluation.verdicts[name] = _short_verdict(
                        specs, requests, result.short_request[i], in_use=bool(result.fits_if_free[i])
                    )
        elif known:
            hard = self._decide_by_kernel(evaluation, index, free, known)
        if hard:
            search.extend(self._decide_by_first_fit(evaluation, index, free, hard))
        for name in search:
            evaluation.verdicts[name] = self._search_node(evaluation, index, name, allocated, deadline)

    def _decide_by_kernel(
        self, evaluation: PodEvaluation, index: DeviceIndex, free: np.ndarray, names: list[str]
    ) -> list[str]:
        """Decide constrained pods with the topology kernel where its search is exhaustive.

        For pods the kernels model (see `scoring`), the kernel's search is upstream's: every
        assignment of free candidate devices to the requests, under the same constraints. A set
        found means the node passes (and its score is kept for prioritize); a completed search
        without a set means it fails. Nodes the kernel cannot settle (work bound hit, devices that
        need upstream's search) are returned for the exact search.
        """
        plan = self._plan(evaluation, index, free)
        if plan is None:
            return names
        positions = np.fromiter((index.node_pos[n] for n in names), dtype=np.int64, count=len(names))
        modelled = ~plan.awkward_nodes[positions]
        search = [name for name, ok in zip(names, modelled.tolist(), strict=True) if not ok]
        names = [name for name, ok in zip(names, modelled.tolist(), strict=True) if ok]
        if not names:
            return search
        status = self._run_kernel(evaluation, index, free, plan, names, positions[modelled])
        none = np.flatnonzero(status == kernels.STATUS_NONE)
        for i in np.flatnonzero((status == kernels.STATUS_EXACT) | (status == kernels.STATUS_BOUNDED)):
            evaluation.verdicts[names[i]] = NodeVerdict(PASSED)
        search.extend(names[i] for i in np.flatnonzero(status == kernels.STATUS_UNKNOWN))
        if len(none):
            search.extend(self._explain_kernel_failures(evaluation, index, [names[i] for i in none]))
        return search

    def _explain_kernel_failures(
        self, evaluation: PodEvaluation, index: DeviceIndex, names: list[str]
    ) -> list[str]:
        """Verdicts for nodes where the kernel proved no set exists; returns nodes it cannot tell."""
        specs = evaluation.specs
        everything = np.ones(index.num_rows, dtype=bool)
        plan = scoring.kernel_plan(specs, index, everything)
        assert plan is not None  # the same pod is modelled whatever is free
        positions = np.fromiter((index.node_pos[n] for n in names), dtype=np.int64, count=len(names))
        relevant = evaluation.relevant if evaluation.relevant is not None else everything
        status, _, _, _ = scoring.best_sets(plan, index, positions, everything, relevant, self.topology)
        refs = ", ".join(s.ref for s in specs)
        short = scoring.short_requests(specs, index, positions)
        unsure: list[str] = []
        for i, name in enumerate(names):
            if status[i] == kernels.STATUS_UNKNOWN:
                unsure.append(name)
            else:
                fits_if_free = status[i] in (kernels.STATUS_EXACT, kernels.STATUS_BOUNDED)
                evaluation.verdicts[name] = _no_set_verdict(refs, fits_if_free=fits_if_free, short=short[i])
        return unsure

    def _decide_by_first_fit(
        self, evaluation: PodEvaluation, index: DeviceIndex, free: np.ndarray, names: list[str]
    ) -> list[str]:
        """Decide nodes with the first-fit kernel (upstream's search over the index columns).

        A set found passes the node (and is kept, as upstream's first-fit set, for prioritize); no
        set fails it with the search's reasons: in use if the kernel finds a set with nothing held,
        else the short request or "no combination". Returns the nodes left to upstream's search.
        """
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
        short = firstfit.short_requests(evaluation.specs, index, positions[none])
        refs = ", ".join(s.ref for s in evaluation.specs)
        for i, name in enumerate(failed):
            if if_free[i] == counter_kernels.STATUS_UNKNOWN:
                search.append(name)
            else:
                fits_if_free = if_free[i] == counter_kernels.STATUS_FOUND
                evaluation.verdicts[name] = _no_set_verdict(refs, fits_if_free=fits_if_free, short=short[i])
        return search

    def _search_node(
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
            result = self._run_allocator(evaluation.specs, index, name, allocated, deadline, stats=stats)
        except NodeScopedError as exc:
            return NodeVerdict(UNRESOLVABLE, f"{CANNOT_ALLOCATE}: {exc.reason}")
        if result is not None:
            evaluation.allocations[name] = result
            return NodeVerdict(PASSED)
        refs = ", ".join(s.ref for s in evaluation.specs)
        short = _short_request(evaluation.specs, index, name)
        # A short request can never fit; otherwise "held back" is the search's "fits if free".
        return _no_set_verdict(refs, fits_if_free=stats.held_back and not short, short=short)

    def _run_allocator(
        self,
        specs: list[ClaimSpec],
        index: DeviceIndex,
        name: str,
        allocated: AllocatedState,
        deadline: float,
        *,
        stats: SearchStats | None = None,
    ) -> list[ClaimAllocation] | None:
        node = index.nodes.get(name) or _bare_node(name)
        pools = index.pools.get(name)
        if pools is None:
            pools = gather_pools(index.slices, node, self.features, all_slices_of_pool=index.by_pool)

        def should_stop() -> str | None:
            return "context deadline exceeded" if self._clock() > deadline else None

        return allocate(
            specs,
            node=node,
            pools=pools,
            features=self.features,
            classes=_Classes(index),
            allocated=allocated,
            evaluator=index.evaluator,
            should_stop=should_stop,
            stats=stats,
        )

    def choose_allocations(self, evaluation: PodEvaluation, name: str) -> list[ClaimAllocation] | None:
        """The allocation bind writes on a node that passed: the set prioritize scored best.

        One ClaimAllocation per pending claim, in `evaluation.claims.pending` order; None if the
        node cannot hold the pod's claims any more. A kernel-chosen set is turned into claim
        allocations by upstream's own search restricted to exactly those devices (every other
        device of the node counts as in use), so what is written always obeys upstream's rules;
        should that search disagree with the kernel, the first-fit allocation is written instead.
        """
        if not evaluation.specs:
            return []
        score = self.scores(evaluation, [name]).get(name)
        if score is None or score.method == FIRST_FIT:
            return self.allocations_on(evaluation, name)
        index = self.index()
        if score.method == PARTITION:  # one device: upstream's search over just that partition
            verified = self._allocate_one_device(evaluation, index, name, int(score.rows[0]))
            return verified if verified is not None else self.allocations_on(evaluation, name)
        allocated, _ = self.allocated_state()
        chosen = {index.row_device[row].id for row in score.rows}
        start, stop = index.node_start[index.node_pos[name]], index.node_start[index.node_pos[name] + 1]
        others = {index.row_device[row].id for row in range(start, stop)} - chosen
        restricted = AllocatedState(
            devices=set(allocated.devices) | others,
            shared_ids=allocated.shared_ids,
            aggregated_capacity=allocated.aggregated_capacity,
        )
        deadline = self._clock() + self.filter_timeout_seconds
        result = self._run_allocator(evaluation.specs, index, name, restricted, deadline)
        if result is not None and {r.device.id for a in result for r in a.devices} == chosen:
            return result
        log.warning(
            "node %s: upstream's search rejects the topology choice %s for claims %s; writing first-fit",
            name,
            sorted(d.device for d in chosen),
            ", ".join(s.ref for s in evaluation.specs),
        )
        return self.allocations_on(evaluation, name)

    # ----------------------------------------------------------------- topology scores
    def scores(self, evaluation: PodEvaluation, names: list[str]) -> ScoreBook:
        """Topology scores of the given passed nodes (computed once per evaluation and node)."""
        missing = [name for name in names if name not in evaluation.scores]
        if missing and evaluation.specs and not evaluation.error:
            self._score_nodes(evaluation, missing)
        return evaluation.scores

    def _plan(self, evaluation: PodEvaluation, index: DeviceIndex, free: np.ndarray) -> KernelPlan | None:
        """The pod's kernel inputs for this evaluation (None: the kernels do not model the pod)."""
        if not evaluation.planned:
            evaluation.plan = scoring.kernel_plan(evaluation.specs, index, free)
            evaluation.relevant = scoring.relevant_rows(evaluation.specs, index)
            evaluation.planned = True
        return evaluation.plan

    def _run_kernel(
        self,
        evaluation: PodEvaluation,
        index: DeviceIndex,
        free: np.ndarray,
        plan: KernelPlan,
        names: list[str],
        positions: np.ndarray,
    ) -> np.ndarray:
        """Best sets on the nodes; found sets go into `evaluation.scores`. Returns the statuses."""
        assert evaluation.relevant is not None
        started = time.perf_counter()
        with telemetry.span(telemetry.SPAN_SCORE, **{telemetry.ATTR_NODES_IN: len(names)}):
            status, _, parts, chosen = scoring.best_sets(
                plan, index, positions, free, evaluation.relevant, self.topology
            )
            parts = scoring.partition_parts(index, positions, chosen, free, parts)
        self.kernel_seconds_total += time.perf_counter() - started
        self.kernel_calls_total += 1
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

    def _score_nodes(self, evaluation: PodEvaluation, names: list[str]) -> None:
        index = self.index()
        _, free = self.allocated_state()
        plan = self._plan(evaluation, index, free)
        relevant = evaluation.relevant
        assert relevant is not None
        node_pos = index.node_pos
        all_positions = np.fromiter(
            (node_pos.get(name, -1) for name in names), dtype=np.int64, count=len(names)
        )
        usable = all_positions >= 0
        if plan is not None:
            usable &= ~plan.awkward_nodes[np.maximum(all_positions, 0)]
        else:
            usable[:] = False
        kernel_nodes = [name for name, ok in zip(names, usable.tolist(), strict=True) if ok]
        fallback = [name for name, ok in zip(names, usable.tolist(), strict=True) if not ok]
        if kernel_nodes and plan is not None:
            status = self._run_kernel(evaluation, index, free, plan, kernel_nodes, all_positions[usable])
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
        search over just that device, so what bind writes obeys upstream's rules; if that search
        rejects it, first-fit's allocation stays.
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
            allocations = self.allocations_on(evaluation, name)
            if allocations is None or position is None:
                continue
            row = better.get(name)
            if row is not None and index.row_device[row].id not in {
                r.device.id for a in allocations for r in a.devices
            }:
                verified = self._allocate_one_device(evaluation, index, name, row)
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
            preference = _preference(evaluation.specs, allocations)
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
            self.kernel_seconds_total += time.perf_counter() - started
            self.kernel_calls_total += 1
            preference = np.array([p for _, _, p in members])
            final = scoring.combine(parts, preference, self.topology)
            evaluation.scores.add([name for name, _, _ in members], final, parts, preference, sets, FIRST_FIT)

    def _allocate_one_device(
        self, evaluation: PodEvaluation, index: DeviceIndex, name: str, row: int
    ) -> list[ClaimAllocation] | None:
        """Upstream's search on the node with only device `row` to choose from, or None if it fails.

        The node's pools keep every allocated device (their counters and shares still count) and
        the chosen one; the others are left out rather than marked in use, because a device marked
        in use would also hold its shared counters.
        """
        allocated, _ = self.allocated_state()
        chosen = index.row_device[row]
        shared = {device for device, _ in allocated.shared_ids}
        pools = []
        for pool in index.pools.get(name, []):
            slices = [
                replace(
                    s,
                    devices=tuple(
                        d for d in s.devices if d is chosen or d.id in allocated.devices or d.id in shared
                    ),
                )
                for s in pool.slices
            ]
            pools.append(replace(pool, slices=slices))
        deadline = self._clock() + self.filter_timeout_seconds
        try:
            result = allocate(
                evaluation.specs,
                node=index.nodes.get(name) or _bare_node(name),
                pools=pools,
                features=self.features,
                classes=_Classes(index),
                allocated=allocated,
                evaluator=index.evaluator,
                should_stop=lambda: "context deadline exceeded" if self._clock() > deadline else None,
            )
        except (NodeScopedError, AllocationAborted):
            return None
        if result is None or [r.device.id for a in result for r in a.devices] != [chosen.id]:
            return None
        return result

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
        mine = [name for name in names if name in book]
        if not mine or plan is None:
            return names
        chosen, slots = book.gather(mine)
        width = max(int((chosen >= 0).sum(axis=1).max()), 1)
        chosen, slots = chosen[:, :width], slots[:, :width]
        positions = np.fromiter((index.node_pos[n] for n in mine), dtype=np.int64, count=len(mine))
        methods = np.full(len(mine), FIRST_FIT, dtype=object)
        single = scoring.single_partition_request(evaluation.specs, index) if width == 1 else None
        if single is not None:
            choices = scoring.partition_choices(index, positions, single, free, relevant, self.topology)
            better = (choices >= 0) & (choices != chosen[:, 0])
            chosen = chosen.copy()
            chosen[better, 0] = choices[better]
            methods[better] = PARTITION
        claims = np.where(chosen >= 0, plan.slot_claim[np.maximum(slots, 0)], -1)
        preference = firstfit.preference(plan, slots)
        patterns, group = np.unique(claims, axis=0, return_inverse=True)
        for g, pattern in enumerate(patterns):
            members = np.flatnonzero(group.ravel() == g)
            started = time.perf_counter()
            with telemetry.span(telemetry.SPAN_SCORE, **{telemetry.ATTR_NODES_IN: len(members)}):
                _, parts = scoring.score_sets(
                    index, positions[members], chosen[members], np.maximum(pattern, 0), free, relevant,
                    self.topology,
                )  # fmt: skip
                parts = scoring.partition_parts(index, positions[members], chosen[members], free, parts)
            self.kernel_seconds_total += time.perf_counter() - started
            self.kernel_calls_total += 1
            final = scoring.combine(parts, preference[members], self.topology)
            evaluation.scores.add(
                [mine[i] for i in members], final, parts, preference[members], chosen[members],
                methods[members],
            )  # fmt: skip
        taken = set(mine)
        return [name for name in names if name not in taken]

    def allocations_on(self, evaluation: PodEvaluation, name: str) -> list[ClaimAllocation] | None:
        """The first-fit allocation on a node that passed (computed on demand for fast-path nodes)."""
        if name not in evaluation.allocations:
            index = self.index()
            allocated, _ = self.allocated_state()
            deadline = self._clock() + self.filter_timeout_seconds
            result = self._run_allocator(evaluation.specs, index, name, allocated, deadline)
            if result is None:
                return None
            evaluation.allocations[name] = result
        return evaluation.allocations[name]


def pod_key(pod: Obj) -> str:
    """The key of a pod in `pods_seen` and the evaluation cache: its UID, else "namespace/name"."""
    return (pod.get("metadata") or {}).get("uid") or claim_ref(pod)


def claims_key(pod: Obj) -> tuple[Any, ...]:
    """What a pod's claims are, as far as the pod itself says: namespace, its `resourceClaims`
    entries and `resourceClaimStatuses` (the generated claims' names). Part of the evaluation
    key, because a verdict is about these claims; the claims' contents are covered by the claims
    generation. Types were checked at the wire (`wire.check_pod`)."""
    meta = pod.get("metadata") or {}
    entries = (pod.get("spec") or {}).get("resourceClaims") or ()
    statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or ()
    return (
        meta.get("namespace") or "default",
        tuple(
            (e.get("name"), e.get("resourceClaimName"), e.get("resourceClaimTemplateName"))
            for e in entries
            if isinstance(e, dict)
        ),
        tuple((s.get("name"), s.get("resourceClaimName")) for s in statuses if isinstance(s, dict)),
    )


def _no_set_verdict(refs: str, *, fits_if_free: bool, short: str) -> NodeVerdict:
    """Why a kernel found no device set on a node, in the search's words: the devices are in use
    (a set exists with nothing held), some request has too few devices, or no combination fits."""
    if fits_if_free:
        return NodeVerdict(FAILED, f"{CANNOT_ALLOCATE}: the devices claims {refs} need are in use")
    if short:
        return NodeVerdict(UNRESOLVABLE, f"{CANNOT_ALLOCATE}: {short} do not exist on the node")
    return NodeVerdict(
        UNRESOLVABLE,
        f"{CANNOT_ALLOCATE}: no combination of the node's devices satisfies claims {refs} "
        "(constraints, shared counters or capacity)",
    )


def _bare_node(name: str) -> Obj:
    """A node the state does not know: a name and no labels (it has no local devices)."""
    return {"metadata": {"name": name}}


def _check_classes_and_selectors(specs: list[ClaimSpec], index: DeviceIndex) -> None:
    """Pod-level input errors, before any node is looked at (unknown class, bad CEL, limits).

    This is the allocator's own validation, claim by claim and request by request in upstream's
    order, so the error reported is the one upstream reports first, whichever tier then decides
    the nodes. It stops where validation needs a node (an `All` request); the search finishes it.
    """
    validate_claims(specs, features=index.features, classes=_Classes(index))


def _short_request(specs: list[ClaimSpec], index: DeviceIndex, name: str) -> str:
    """Name a request the node cannot serve even with every device free ("" if none or unsure)."""
    position = index.node_pos.get(name)
    if position is None:
        return ""
    on_node = index.row_node == position

    def matching(spec: RequestSpec) -> int | None:
        if spec.class_name not in index.classes:
            return None
        mask = index.mask(spec.class_name, tuple(s.expression or "" for s in spec.selectors))
        if (mask.error & on_node).any():
            return None  # CEL failed on a device here: the search reports that, not us
        return int((mask.match & on_node).sum())

    for claim in specs:
        for request in claim.requests:
            options = [request.exactly] if request.exactly is not None else list(request.first_available)
            counts = [(spec, matching(spec)) for spec in options]
            if any(found is None for _, found in counts):
                return ""
            if options and all(found < max(spec.count, 1) for spec, found in counts if found is not None):
                first = options[0]
                need = first.count if first.mode == EXACT_COUNT else 1
                return (
                    f"claim {claim.ref}, request {request.name}: {need} device(s) of class {first.class_name}"
                )
    return ""


def _short_verdict(specs: list[ClaimSpec], requests: list[Any], short: int, *, in_use: bool) -> NodeVerdict:
    owners = [(claim, request.exactly) for claim in specs for request in claim.requests]
    if 0 <= short < len(owners):
        claim, spec = owners[short]
        what = f"claim {claim.ref}, request {spec.name}: {spec.count} device(s) of class {spec.class_name}"
    else:
        what = "claims " + ", ".join(c.ref for c in specs) + ": the requests together"
    if in_use:
        return NodeVerdict(FAILED, f"{CANNOT_ALLOCATE}: {what} are not free on the node (in use)")
    return NodeVerdict(UNRESOLVABLE, f"{CANNOT_ALLOCATE}: {what} do not exist on the node")


def _preference(specs: list[ClaimSpec], allocations: list[ClaimAllocation]) -> float:
    """Upstream's prioritized-list score, sum over firstAvailable requests of (8 - index of the
    chosen subrequest), divided by its maximum (8 per such request): 1.0 when every request got
    its first choice, and for pods without prioritized lists."""
    score = 0
    requests = 0
    for spec, allocation in zip(specs, allocations, strict=False):
        chosen = {r.parent: r.request for r in allocation.devices if r.parent}
        for request in spec.requests:
            if request.first_available:
                requests += 1
                if request.name in chosen:
                    names = [s.name for s in request.first_available]
                    score += 8 - names.index(chosen[request.name])
    return score / (8 * requests) if requests else 1.0
