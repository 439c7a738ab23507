"""What is decided about one pod at one generation, and the caches that keep it.

`PodEvaluation` holds the pod's resolved claims, the per-node verdicts the tiers reach
(`extender.core.tiers`), the first-fit allocations and the topology scores (`extender.core.ranking`).
`Evaluations` keeps them in an LRU keyed by pod, claims and generation, so filter, prioritize and
bind of one pod in one scheduling cycle share the work, and remembers the pods seen in
filter/prioritize for bind (which receives only names). Both are written and read on the
placement's worker thread only; the event loop reads single `seen` entries (atomic reads).

Both caches are bounded by size as well as by count (`extender.lru`; issue 22 item 3): an
evaluation holds a verdict per node a call named, and a pod is as large as its sender made it.
An evaluation's size is `EVALUATION_BYTES` plus `NODE_BYTES` per verdict (measured: about 520
bytes per node for the verdict, its reason, the score and a share of first-fit allocations;
about 70 for a name the state does not know); a pod's is `Pod.size`. An evaluation does not keep
its pod (it held every pod's whole source for nothing).
"""

from __future__ import annotations

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
from extender.core.reasons import PASSED
from extender.core.scoring import KernelPlan, ScoreBook
from extender.core.verdict_table import Verdicts
from extender.lru import SizedLRU
from extender.pods import Pod

#: Pod evaluations kept (LRU); a scheduling cycle needs only the current pod's.
EVALUATION_CACHE_SIZE = 256
#: ... and at most this many bytes of them (at 5,000 nodes, about 25 whole-cluster evaluations).
EVALUATION_CACHE_BYTES = 128 * 2**20
#: Estimated bytes an evaluation keeps per node verdict (twice the measured ~520, see above).
NODE_BYTES = 1024
#: ... and for itself: the parsed claims (their texts are the state's objects, shared).
EVALUATION_BYTES = 4096
#: Pods seen in filter/prioritize kept for bind (LRU). Bind of a pod usually follows its filter
#: closely, but the scheduler binds asynchronously while it filters other pods, so this is large.
PODS_SEEN_SIZE = 4096
#: ... and at most this many bytes of them (`Pod.size`; a typical pod is 5-20 KiB).
PODS_SEEN_BYTES = 64 * 2**20

Key = tuple[str, tuple[Any, ...], tuple[int, int, int]]


@dataclass(slots=True)
class PodEvaluation:
    """Everything decided about one pod at one generation."""

    claims: PodClaims
    specs: list[ClaimSpec]
    problem: str = ""  # pod-level: every node is unresolvable with this message
    error: str = ""  # the call must fail (e.g. the search timed out): scheduler retries
    #: CEL selectors stopped at the deadline (`SelectorsInterrupted`): the evaluation is not kept,
    #: so the retry evaluates again, continuing from the results cached on the devices.
    interrupted: bool = False
    verdicts: Verdicts = field(default_factory=Verdicts)  # per node of the index, as arrays
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


def evaluation_size(evaluation: PodEvaluation) -> int:
    """Estimated bytes the evaluation keeps (see module docstring)."""
    return EVALUATION_BYTES + NODE_BYTES * len(evaluation.verdicts)


class Evaluations:
    """The evaluation LRU and the pods seen (see module docstring)."""

    def __init__(
        self,
        *,
        size: int = EVALUATION_CACHE_SIZE,
        pods_seen: int = PODS_SEEN_SIZE,
        max_bytes: int = EVALUATION_CACHE_BYTES,
        pods_seen_bytes: int = PODS_SEEN_BYTES,
    ) -> None:
        self._entries: SizedLRU[Key, PodEvaluation] = SizedLRU(max_entries=size, max_bytes=max_bytes)
        #: uid (or "namespace/name" for a pod without one) -> the pod as last seen in filter or
        #: prioritize, for bind (which receives only names); LRU of `pods_seen` entries.
        self._seen: SizedLRU[str, Pod] = SizedLRU(max_entries=pods_seen, max_bytes=pods_seen_bytes)

    @property
    def bytes(self) -> int:
        """Estimated bytes the kept evaluations hold."""
        return self._entries.bytes

    @property
    def seen_bytes(self) -> int:
        """Estimated bytes the pods seen hold."""
        return self._seen.bytes

    def get(self, key: Key) -> PodEvaluation | None:
        """The cached evaluation (now the most recently used), or None."""
        return self._entries.get(key)

    def put(self, key: Key, evaluation: PodEvaluation) -> None:
        self._entries.put(key, evaluation, evaluation_size(evaluation))

    def grown(self, key: Key) -> None:
        """The evaluation under `key` holds more verdicts now: weigh it again (may evict)."""
        evaluation = self._entries.peek(key)
        if evaluation is not None:
            self._entries.resize(key, evaluation_size(evaluation))

    def discard(self, key: Key) -> None:
        """Forget one evaluation (one that must not answer the next call)."""
        self._entries.discard(key)

    def clear(self) -> None:
        """Forget every evaluation (benchmarks: each call does a new pod's work)."""
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def remember(self, key: str, pod: Pod) -> None:
        """Record a pod seen in filter/prioritize under its `Pod.key` (UID, else namespace/name).
        A pod larger than the whole byte bound is not kept (bind then says it is not known)."""
        kept = self._seen.peek(key)
        if kept is not None and kept.source == pod.source:
            pod = kept  # sent again (prioritize after filter): its size is known, not measured again
        self._seen.put(key, pod, pod.size)

    def seen(self, key: str) -> Pod | None:
        """The pod last seen under this UID (or "namespace/name"), or None (any thread)."""
        return self._seen.peek(key)


def evaluation_of(
    pod: Pod, state: ClusterState, assumed: AssumeCache, *, pod_groups: bool = False
) -> PodEvaluation:
    """A new evaluation of the pod: its claims resolved and parsed, nothing decided yet
    (`pod_groups`: DRAWorkloadResourceClaims, see `claims.resolve_pod_claims`)."""
    with telemetry.span(telemetry.SPAN_RESOLVE_CLAIMS):
        claims = resolve_pod_claims(pod, state, assumed=assumed.active(), pod_groups=pod_groups)
    # The pod itself is not kept: pods-seen has it, and a pod is as large as its sender made it.
    evaluation = PodEvaluation(claims=claims, specs=[], problem=claims.problem)
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
    generation. Equal pods give equal keys (the entries are tuples). `extended` tells the variants
    of an extended-resource pod apart (`extender.core.extended`)."""
    return (pod.namespace, pod.resource_claims, pod.resource_claim_statuses, pod.extended)
