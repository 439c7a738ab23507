"""What is decided about one pod at one generation, and the caches that keep it.

`PodEvaluation` holds the pod's resolved claims, the per-node verdicts the tiers reach
(`extender.core.tiers`), the first-fit allocations and the topology scores (`extender.core.ranking`).
`Evaluations` keeps them in an LRU keyed by pod, claims and generation, so filter, prioritize and
bind of one pod in one scheduling cycle share the work, and remembers the pods seen in
filter/prioritize for bind (which receives only names). Both are written and read on the
placement's worker thread only; the event loop reads single `seen` entries (atomic reads).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from extender import telemetry
from extender.allocator.requests import ClaimSpec, parse_claim
from extender.allocator.results import ClaimAllocation
from extender.claims import PodClaims, resolve_pod_claims
from extender.cluster.state import ClusterState
from extender.core import firstfit, reasons
from extender.core.assumed import AssumeCache
from extender.core.reasons import PASSED, NodeVerdict
from extender.core.scoring import KernelPlan, ScoreBook
from extender.pods import Pod

#: Pod evaluations kept (LRU); a scheduling cycle needs only the current pod's.
EVALUATION_CACHE_SIZE = 256
#: Pods seen in filter/prioritize kept for bind (LRU). Bind of a pod usually follows its filter
#: closely, but the scheduler binds asynchronously while it filters other pods, so this is large.
PODS_SEEN_SIZE = 4096

Key = tuple[str, tuple[Any, ...], tuple[int, int, int]]


@dataclass(slots=True)
class PodEvaluation:
    """Everything decided about one pod at one generation."""

    pod: Pod
    claims: PodClaims
    specs: list[ClaimSpec]
    problem: str = ""  # pod-level: every node is unresolvable with this message
    error: str = ""  # the call must fail (e.g. the search timed out): scheduler retries
    #: CEL selectors stopped at the deadline (`SelectorsInterrupted`): the evaluation is not kept,
    #: so the retry evaluates again, continuing from the results cached on the devices.
    interrupted: bool = False
    verdicts: dict[str, NodeVerdict] = field(default_factory=dict)
    allocations: dict[str, list[ClaimAllocation]] = field(default_factory=dict)  # first-fit, upstream's
    scores: ScoreBook = field(default_factory=ScoreBook)  # topology choice per passed node
    plan: KernelPlan | None = None
    planned: bool = False  # `plan` was computed (None then means: not a kernel pod)
    relevant: np.ndarray | None = None
    first_fit: firstfit.FirstFitPlan | None = None  # the first-fit kernel's inputs (None: not modelled)
    first_fit_planned: bool = False
    first_fit_sets: firstfit.FirstFitBook = field(default_factory=firstfit.FirstFitBook)

    def passed(self, node: str) -> bool:
        """True if the node was evaluated and passed."""
        verdict = self.verdicts.get(node)
        return verdict is not None and verdict.status == PASSED


class Evaluations:
    """The evaluation LRU and the pods seen (see module docstring)."""

    def __init__(self, *, size: int = EVALUATION_CACHE_SIZE, pods_seen: int = PODS_SEEN_SIZE) -> None:
        self._size = size
        self._seen_size = pods_seen
        self._entries: OrderedDict[Key, PodEvaluation] = OrderedDict()
        #: uid (or "namespace/name" for a pod without one) -> the pod as last seen in filter or
        #: prioritize, for bind (which receives only names); LRU of `pods_seen` entries.
        self._seen: OrderedDict[str, Pod] = OrderedDict()

    def get(self, key: Key) -> PodEvaluation | None:
        """The cached evaluation (now the most recently used), or None."""
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
        return found

    def put(self, key: Key, evaluation: PodEvaluation) -> None:
        self._entries[key] = evaluation
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)

    def discard(self, key: Key) -> None:
        """Forget one evaluation (one that must not answer the next call)."""
        self._entries.pop(key, None)

    def clear(self) -> None:
        """Forget every evaluation (benchmarks: each call does a new pod's work)."""
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def remember(self, key: str, pod: Pod) -> None:
        """Record a pod seen in filter/prioritize under its `Pod.key` (UID, else namespace/name)."""
        self._seen[key] = pod
        self._seen.move_to_end(key)
        while len(self._seen) > self._seen_size:
            self._seen.popitem(last=False)

    def seen(self, key: str) -> Pod | None:
        """The pod last seen under this UID (or "namespace/name"), or None."""
        return self._seen.get(key)


def evaluation_of(pod: Pod, state: ClusterState, assumed: AssumeCache) -> PodEvaluation:
    """A new evaluation of the pod: its claims resolved and parsed, nothing decided yet."""
    with telemetry.span(telemetry.SPAN_RESOLVE_CLAIMS):
        claims = resolve_pod_claims(pod, state, assumed=assumed.active())
    evaluation = PodEvaluation(pod=pod, claims=claims, specs=[], problem=claims.problem)
    if not evaluation.problem:
        try:
            evaluation.specs = [parse_claim(c.source) for c in claims.pending]
        except (ValueError, TypeError) as exc:
            evaluation.problem = reasons.invalid_claim(exc)
    return evaluation


def claims_key(pod: Pod) -> tuple[Any, ...]:
    """What a pod's claims are, as far as the pod itself says: namespace, its `resourceClaims`
    entries and `resourceClaimStatuses` (the generated claims' names). Part of the evaluation
    key, because a verdict is about these claims; the claims' contents are covered by the claims
    generation. Equal pods give equal keys (the entries are tuples)."""
    return (pod.namespace, pod.resource_claims, pod.resource_claim_statuses)
