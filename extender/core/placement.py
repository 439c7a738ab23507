"""The service behind /filter, /prioritize and /bind's choice: a thin facade over the core parts.

For each pod it resolves the claims, then the deciding tiers (`extender.core.tiers`) decide for
every candidate node whether upstream's allocator would find an allocation there; the ranking
(`extender.core.ranking`) scores the nodes that passed; the bind choice (`extender.core.binding`)
turns the best set into claim allocations. Parts plug in beside them, each called once per verb:
extended resources split a pod by the kinds of node (`extended.filter_parts`), gangs rule out and
score domains (`gang.Gangs`), a PodGroup member's filter holds its node and devices through
upstream's pod-group cycle (`gang_cycle.CycleHolds`). The evaluation is cached by pod UID, the
pod's claim references and the (devices, claims, assumed) generations, so filter, prioritize and
bind of one pod in one scheduling cycle share the work.

Lifecycle: one Placement per process, single-threaded: in the server every call runs on its
`worker` thread (`extender.worker`), which is also the only thread that writes the ClusterState
and the AssumeCache it reads, so no call sees a half-applied change; the event loop only reads
`ready()`, `generation()`, `stats()` and `seen_pod()` (atomic reads). Direct callers (explain,
benchmarks, tests) call it on their own thread and never start the worker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from extender.allocator.features import Features
from extender.allocator.inputs import AllocatedState
from extender.allocator.results import ClaimAllocation
from extender.claims import Claim, PodClaims
from extender.cluster.state import ClusterState
from extender.core import binding, extended, gang, gang_cycle, observed, scoring, tiers
from extender.core.assumed import AssumeCache
from extender.core.evaluation import Evaluations, PodEvaluation, claims_key, evaluation_of
from extender.core.ranking import KernelMeter, Ranker
from extender.core.scoring import ScoreBook
from extender.core.searching import Budget, Search
from extender.core.tiers import FirstFitTier, KernelTier, SearchTier, Tier, VectorisedTier
from extender.core.view import ClusterView, Generation
from extender.index.snapshot import DeviceIndex
from extender.index.topology import TopologyModel, TopologySettings
from extender.pods import Pod
from extender.verdicts import FilterVerdict, HostScores, PlacementStats
from extender.worker import PlacementWorker

log = logging.getLogger(__name__)


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
        self.state, self.features, self.assumed = state, features, assumed
        self.filter_timeout_seconds = filter_timeout_seconds
        self.topology = topology or TopologySettings()
        self._is_synced = is_synced
        self._source_stats: Callable[[], dict[str, Any]] | None = None  # set_source_stats
        self.view = ClusterView(
            state, features=features, assumed=assumed, topology=TopologyModel(self.topology),
            freeze_caches=freeze_caches,
        )  # fmt: skip
        self.kernels = KernelMeter()
        self.search = Search(self.view, Budget(filter_timeout_seconds, clock))
        self.ranker = Ranker(self.view, self.search, self.topology, self.kernels)
        #: The deciding tiers, cheapest first; each hands what it cannot decide to the next.
        self.tiers: tuple[Tier, ...] = (
            VectorisedTier(), KernelTier(self.ranker), FirstFitTier(), SearchTier(self.search)
        )  # fmt: skip
        self.evaluations = Evaluations()
        self.gangs = gang.Gangs(
            gang_settings or gang.GangSettings(),
            state=state,
            index=self.view.index,
            assumed=assumed,
            seen=self.seen_pod,
            clock=clock,
        )  # fmt: skip  (seen_pod reads `evaluations` per call: wiring replaces it with a bounded one)
        self.holds = gang_cycle.CycleHolds(self)  # PodGroup members in upstream's pod-group cycle
        #: The thread the server and the binders run this placement's work on (started lazily).
        self.worker = worker or PlacementWorker()

    # ----------------------------------------------------------------- the view
    def ready(self) -> bool:
        return self._is_synced()

    def index(self) -> DeviceIndex:
        return self.view.index()

    def allocated_state(self) -> tuple[AllocatedState, np.ndarray]:
        return self.view.allocated_state()

    def warm(self) -> None:
        self.view.warm()

    def generation(self) -> Generation:
        return self.view.generation()

    def seen_pod(self, key: str) -> Pod | None:
        """The pod last seen in filter/prioritize under this UID (or "namespace/name"), for bind."""
        return self.evaluations.seen(key)

    def stats(self) -> PlacementStats:
        """What /metrics reports about this placement (never builds the index). A failing read of
        the source's stats leaves them out (logged), not the rest."""
        source = None
        if self._source_stats is not None:
            try:
                source = self._source_stats()
            except Exception:
                log.warning("metrics: reading source_stats() failed", exc_info=True)
        return self.view.stats(self.kernels.seconds_total, self.kernels.calls_total, source)

    def set_source_stats(self, source_stats: Callable[[], dict[str, Any]]) -> None:
        """Report the watch source's `stats()` with this placement's (kube mode: made after it)."""
        self._source_stats = source_stats

    # ----------------------------------------------------------------- verbs
    def filter(self, pod: Pod, node_names: list[str]) -> FilterVerdict:
        parts = self.extended_parts(pod, node_names)
        if parts is not None:  # an extended-resource pod: one verdict per kind of node
            return extended.filter_parts(parts, node_names, self._part_verdict)
        held = self.holds.filter(pod, node_names)  # a PodGroup member: one node, devices held
        return held or self.filter_verdict(pod, self.evaluate(pod, node_names), node_names)

    def _part_verdict(self, part: Pod, names: list[str]) -> FilterVerdict:
        return self.filter_verdict(part, self.evaluate(part, names), names)

    def filter_verdict(self, pod: Pod, evaluation: PodEvaluation, node_names: list[str]) -> FilterVerdict:
        """Filter's answer from an evaluation that has decided `node_names` (explain reuses it):
        the verdicts, with the nodes a gang's domain rules out (`gang.Gangs.outside_domain`)."""
        if evaluation.error:
            return FilterVerdict(error=evaluation.error)
        return gang.filter_answer(evaluation.verdicts, node_names, self.gangs.outside_domain(pod, node_names))

    def extended_parts(self, pod: Pod, node_names: list[str]) -> extended.Split | None:
        """The pod split by what DRA serves on each node, if it asks for extended resources a
        DeviceClass maps and the DRAExtendedResource gate is on (`extended.split`)."""
        return extended.split(pod, node_names, self.state) if self.features.extended_resource else None

    def prioritize(self, pod: Pod, node_names: list[str]) -> HostScores:
        """0..10 per node from the topology score of its best device set; failed nodes get 0.

        Pods without pending claims (nothing to choose) score 0 everywhere, like upstream. The
        answer is arrays (`HostScores`): one score per name, laid out by index position.
        """
        parts = self.extended_parts(pod, node_names)
        if parts is not None:  # an extended-resource pod: each kind of node scored by its part
            return extended.prioritize_parts(parts, node_names, self._part_priorities)
        evaluation = self.evaluate(pod, node_names)
        observed.report(evaluation)  # the dashboard reads the score terms from it, after answering
        scored, values = self.priority_arrays(pod, evaluation, node_names, nominate=True)
        return HostScores(node_names, evaluation.verdicts.spread(node_names, scored, values))

    def _part_priorities(self, part: Pod, names: list[str]) -> dict[str, int]:
        evaluation = self.evaluate(part, names)
        observed.report(evaluation)
        return self.priorities(part, evaluation, names, nominate=True)

    def priorities(
        self, pod: Pod, evaluation: PodEvaluation, node_names: list[str], *, nominate: bool = False
    ) -> dict[str, int]:
        """0..10 of the scored nodes among `node_names` (absent: 0), as prioritize answers them,
        from an evaluation that has decided them (explain reuses it). `nominate`: record a gang
        member's top node for its gang (only the scheduler's own prioritize does)."""
        scored, values = self.priority_arrays(pod, evaluation, node_names, nominate=nominate)
        return dict(zip(scored, values.tolist(), strict=True))

    def priority_arrays(
        self, pod: Pod, evaluation: PodEvaluation, node_names: list[str], *, nominate: bool = False
    ) -> tuple[list[str], np.ndarray]:
        """`priorities` as the scored names and their 0..10 (int64, aligned)."""
        if evaluation.error or not evaluation.specs:
            return [], np.zeros(0, dtype=np.int64)
        passed = evaluation.verdicts.passed_among(node_names)
        scores = self.scores(evaluation, passed)
        scored = scores.scored_among(passed)
        values = scoring.by_preference(scoring.priorities(scores.values(scored)), scores.preferences(scored))
        return self.gangs.blended(pod, passed, scored, np.asarray(values, dtype=np.int64), nominate=nominate)

    def scores(self, evaluation: PodEvaluation, names: list[str]) -> ScoreBook:
        """Topology scores of the given passed nodes (computed once per evaluation and node)."""
        return self.ranker.scores(evaluation, names)

    def choose_allocations(self, evaluation: PodEvaluation, name: str) -> list[ClaimAllocation] | None:
        """The allocations bind writes on a node that passed (`binding.choose_allocations`)."""
        view, ranker, search = self.view, self.ranker, self.search
        return binding.choose_allocations(evaluation, name, view=view, ranker=ranker, search=search)

    def allocations_on(self, evaluation: PodEvaluation, name: str) -> list[ClaimAllocation] | None:
        return self.search.allocations_on(evaluation, name)  # upstream's first fit on a passed node

    def choose_for_bind(
        self, pod: Pod, node: str, *, wording: binding.Wording,
        admit_allocated: Callable[[Claim, PodClaims], None] | None = None, extended_resources: bool = True,
    ) -> binding.BindChoice:  # fmt: skip
        """What bind writes for the pod on the node, or `binding.BindRefusal` (see there)."""
        return binding.choose_for_bind(
            self, pod, node, wording=wording, admit_allocated=admit_allocated,
            extended_resources=extended_resources,
        )  # fmt: skip

    # ----------------------------------------------------------------- evaluation
    def evaluate(self, pod: Pod, node_names: list[str]) -> PodEvaluation:
        """Evaluate the pod on the given nodes, re-using the cached evaluation where possible."""
        uid = pod.key
        self.evaluations.remember(uid, pod)
        key = (uid, claims_key(pod), self.generation())
        evaluation = self.evaluations.get(key)
        if evaluation is None:
            evaluation = self.new_evaluation(pod)
            if not evaluation.problem:  # its names are looked up in this index from the start
                index = self.view.index()
                evaluation.verdicts.bind(index.node_names, index.node_pos)
            self.evaluations.put(key, evaluation)
        # Each name once: a request may repeat a name any number of times.
        missing = evaluation.verdicts.undecided(node_names)
        if missing and not evaluation.error:
            self.decide(evaluation, missing)
            if evaluation.interrupted:  # the retry must evaluate again (and gets further)
                self.evaluations.discard(key)
            else:
                self.evaluations.grown(key)
            self.view.freeze_new_caches()
        return evaluation

    def new_evaluation(self, pod: Pod) -> PodEvaluation:
        """The pod's claims resolved and parsed, nothing decided yet."""
        return evaluation_of(pod, self.state, self.assumed, pod_groups=self.features.workload_resource_claims)

    def decide(self, evaluation: PodEvaluation, node_names: list[str]) -> None:
        """Verdicts for the nodes (`tiers.decide`: pod-level problems, allocated claims, the tiers)."""
        tiers.decide(evaluation, node_names, view=self.view, tiers=self.tiers, budget=self.search.budget)
