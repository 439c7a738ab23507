"""What the verbs answer, independent of HTTP: the contract between server and placement.

`server.py` turns these into the kube-scheduler extender wire types; `core/placement.py` and the
binders (`binder.py`, `kube/binder.py`) produce them. Keeping them here lets both sides be tested
alone.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, overload

import numpy as np

if TYPE_CHECKING:
    from extender.index.snapshot import DeviceIndex
    from extender.pods import Pod
    from extender.worker import PlacementWorker


@dataclass(frozen=True, slots=True)
class FilterVerdict:
    """The outcome of one filter call.

    Every input node is in exactly one of `passed`, `failed` (preemption might help) or
    `unresolvable` (it cannot help). `error` non-empty means the whole call failed (the
    scheduler retries the pod with backoff); then the node lists are empty.
    """

    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    error: str = ""


@dataclass(frozen=True, slots=True)
class HostScore:
    """One node's prioritize score, 0..10 (MaxExtenderPriority)."""

    host: str
    score: int


class HostScores(Sequence[HostScore]):
    """Prioritize's answer as two aligned arrays: the hosts in request order and their scores.

    A call with every node of a large fleet scores thousands of nodes; building one `HostScore`
    per node and then one dict per node to encode it cost more than the scoring itself. This
    keeps the names and an int64 array (`wire.encode_host_priorities` encodes them without a
    Python object per node) and reads as a sequence of `HostScore` where a Python API wants
    them (explain, tests). Equal to any sequence of the same `HostScore`s in the same order.
    """

    __slots__ = ("hosts", "scores")

    def __init__(self, hosts: Sequence[str], scores: np.ndarray | Sequence[int]) -> None:
        values = np.asarray(scores, dtype=np.int64)
        if values.ndim != 1 or len(values) != len(hosts):
            raise ValueError(f"HostScores: {len(hosts)} hosts but scores of shape {values.shape}")
        self.hosts: Sequence[str] = hosts
        self.scores: np.ndarray = values

    @classmethod
    def zeros(cls, hosts: Sequence[str]) -> HostScores:
        """Every host scored 0 (a pod the extender does not place)."""
        return cls(hosts, np.zeros(len(hosts), dtype=np.int64))

    def __len__(self) -> int:
        return len(self.hosts)

    @overload
    def __getitem__(self, i: int) -> HostScore: ...
    @overload
    def __getitem__(self, i: slice) -> HostScores: ...
    def __getitem__(self, i: int | slice) -> HostScore | HostScores:
        if isinstance(i, slice):
            return HostScores(list(self.hosts[i]), self.scores[i])
        return HostScore(self.hosts[i], int(self.scores[i]))

    def __iter__(self) -> Iterator[HostScore]:
        return map(HostScore, self.hosts, self.scores.tolist())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # mutable contents, as a list

    def __repr__(self) -> str:
        return f"HostScores({list(self)!r})"

    def positive(self) -> int:
        """How many hosts scored above 0."""
        return int(np.count_nonzero(self.scores > 0))


@dataclass(frozen=True, slots=True)
class PlacementStats:
    """What /metrics reads about placement at scrape time (`telemetry.StateCollector`)."""

    index: DeviceIndex | None  # the index as last built (None before the first build)
    assumed: int | None  # claim allocations chosen whose writes are still in flight (None: no cache)
    kernel_seconds: float = 0.0  # time inside the topology kernels since start
    kernel_calls: int = 0
    source: Mapping[str, Any] | None = None  # the watch source's `stats()` (kube mode), else None
    index_builds: int = 0  # device index generations built since start
    index_build_seconds: float = 0.0  # time spent building them
    index_last_build_seconds: float | None = None  # the last build's time (None: none yet)


class PlacementService(Protocol):
    """What the HTTP layer needs from the placement core."""

    @property
    def worker(self) -> PlacementWorker | None:
        """The thread the verb work runs on; None: the app makes one of its own."""
        ...

    def ready(self) -> bool:
        """True once the cluster state is loaded (file mode) or synced (cluster mode)."""
        ...

    def filter(self, pod: Pod, node_names: list[str]) -> FilterVerdict:
        """Decide for each node whether the pod's claims can be allocated there."""
        ...

    def prioritize(self, pod: Pod, node_names: list[str]) -> Sequence[HostScore]:
        """Score each node 0..10, in `node_names` order; nodes that fail filter score 0 (a
        `HostScores` lets the answer be encoded from arrays)."""
        ...

    def generation(self) -> tuple[int, int, int]:
        """(devices, claims, assumed) generations of the state the verdicts are about."""
        ...

    def stats(self) -> PlacementStats:
        """What /metrics reports; called on the event loop at scrape time (must not build the index)."""
        ...


# Bind outcome reasons: the `reason` label of the bind metric (one value each, a bounded set).
OK = "ok"
ERROR = "error"  # any failure without a more precise reason (file mode's binder, unexpected errors)
NOT_LEADER = "not_leader"
CONFLICT = "conflict"  # 409s beyond the retry budget, claim being allocated by a parallel bind
NODE_GONE = "not_found"  # the node is not in the watched cluster state (or an API 404 escaped)
NOT_READY = "not_ready"  # the cluster state is not loaded or synced yet
TIMEOUT = "timeout"  # the choose step could not start in time (the placement worker is busy)
CLAIM_GONE = "claim_gone"  # claim deleted, being deleted, or (generated claim) not created yet
ALLOCATED_ELSEWHERE = "allocated_elsewhere"
NO_FIT = "no_fit"  # the pod's claims cannot be allocated on the node (any more)
API_ERROR = "api_error"  # any other API or transport failure
POD_GONE = "pod_gone"  # the pod does not exist, or not with this UID/name
OTHER_PROFILE = "other_profile"  # a pending claim of a pod whose profile is not in scheduler_names
#: Every bind reason, in the order the metric's help text lists them.
BIND_REASONS: tuple[str, ...] = (
    OK,
    ERROR,
    NOT_LEADER,
    CONFLICT,
    NODE_GONE,
    NOT_READY,
    TIMEOUT,
    CLAIM_GONE,
    ALLOCATED_ELSEWHERE,
    NO_FIT,
    API_ERROR,
    POD_GONE,
    OTHER_PROFILE,
)


#: `Placed.method` of a bind that allocated nothing (the pod's claims were allocated already, or
#: it has none); the other methods are the scoring's (`extender.core.scoring`: exact, bounded,
#: first-fit, partition).
NOTHING_ALLOCATED = "none"


@dataclass(frozen=True, slots=True)
class Placed:
    """What a successful bind placed: the labels of `dra_extender_placed_pods_total`.

    `shape` names the device requests of the pod's pending claims by class and count
    (`extender.core.shapes.shape_label`; "none" when nothing was pending); `method` says how
    the devices were chosen: the topology kernel's set (`exact`, `bounded`), a single partition
    (`partition`), upstream's first fit (`first-fit`), or `none` (nothing allocated).
    """

    shape: str
    method: str


@dataclass(frozen=True, slots=True)
class BindOutcome:
    """The outcome of one bind call.

    `error` is what kube-scheduler gets in the binding result: "" means bound. `reason` is one
    of BIND_REASONS and only labels the metric and the span; it never reaches the scheduler.
    `placed` is set by a bind that wrote the pod's placement (None for a refusal, and for a pod
    an earlier bind had already bound).
    """

    error: str
    reason: str
    placed: Placed | None = None


class BindService(Protocol):
    """What the HTTP layer needs for /bind."""

    async def bind(self, *, namespace: str, name: str, uid: str, node: str) -> BindOutcome:
        """Allocate the pod's pending claims on `node` and bind it; the outcome says how it went."""
        ...
