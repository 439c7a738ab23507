"""What the verbs answer, independent of HTTP: the contract between server and placement.

`server.py` turns these into the kube-scheduler extender wire types; `core/placement.py` and
`binder.py` produce them. Keeping them here lets both sides be tested alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


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


class PlacementService(Protocol):
    """What the HTTP layer needs from the placement core."""

    def ready(self) -> bool:
        """True once the cluster state is loaded (file mode) or synced (cluster mode)."""
        ...

    def filter(self, pod: dict[str, Any], node_names: list[str]) -> FilterVerdict:
        """Decide for each node whether the pod's claims can be allocated there."""
        ...

    def prioritize(self, pod: dict[str, Any], node_names: list[str]) -> list[HostScore]:
        """Score each node 0..10; nodes that fail filter score 0."""
        ...


class BindService(Protocol):
    """What the HTTP layer needs for /bind."""

    async def bind(self, *, namespace: str, name: str, uid: str, node: str) -> str:
        """Allocate the pod's pending claims on `node` and bind it; '' on success, else the error."""
        ...
