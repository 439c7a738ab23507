"""What the verbs answer, independent of HTTP: the contract between server and placement.

`server.py` turns these into the kube-scheduler extender wire types; `core/placement.py` and the
binders (`binder.py`, `kube/binder.py`) produce them. Keeping them here lets both sides be tested
alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

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


@dataclass(frozen=True, slots=True)
class PlacementStats:
    """What /metrics reads about placement at scrape time (`telemetry.StateCollector`)."""

    index: DeviceIndex | None  # the index as last built (None before the first build)
    assumed: int | None  # claim allocations chosen whose writes are still in flight (None: no cache)
    kernel_seconds: float = 0.0  # time inside the topology kernels since start
    kernel_calls: int = 0
    source: Mapping[str, Any] | None = None  # the watch source's `stats()` (kube mode), else None


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

    def prioritize(self, pod: Pod, node_names: list[str]) -> list[HostScore]:
        """Score each node 0..10; nodes that fail filter score 0."""
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


@dataclass(frozen=True, slots=True)
class BindOutcome:
    """The outcome of one bind call.

    `error` is what kube-scheduler gets in the binding result: "" means bound. `reason` is one
    of BIND_REASONS and only labels the metric and the span; it never reaches the scheduler.
    """

    error: str
    reason: str


class BindService(Protocol):
    """What the HTTP layer needs for /bind."""

    async def bind(self, *, namespace: str, name: str, uid: str, node: str) -> BindOutcome:
        """Allocate the pod's pending claims on `node` and bind it; the outcome says how it went."""
        ...
