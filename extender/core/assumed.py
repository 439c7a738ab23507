"""Assumed allocations: devices this service chose whose claim writes are not visible yet.

The binder records an allocation here before it writes the claim, so the next filter already
sees the devices as taken (DESIGN principle 4: never double-allocate). An entry is dropped when
the watch has reached the write (`extender.kube.binder._write_seen`: not merely "the claim shows some
allocation", which may be someone else's, older one), when the bind fails, or when it expires
(the write never arrived, e.g. the process lost a race it did not observe). Until then its
devices count as taken even if the claim shows another allocation (`claims.collect_allocated`).

Written by the binder, read by placement; both run on the placement's worker thread
(`extender.worker`), so no lock is needed.
`version` changes with every mutation so placement can cache what it derives from the entries.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Assumption:
    claim_uid: str
    pod_uid: str
    allocation: dict[str, Any]
    expires_at: float


class AssumeCache:
    """claim uid -> in-flight allocation, with expiry (see module docstring)."""

    def __init__(self, *, ttl_seconds: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl_seconds
        self._clock = clock
        self._entries: dict[str, Assumption] = {}
        self._pods: dict[str, tuple[str, float]] = {}  # pod uid -> (node, expires at)
        self._settled: Callable[[str, dict[str, Any]], bool] | None = None
        self.version = 0

    def settle_with(self, settled: Callable[[str, dict[str, Any]], bool]) -> None:
        """`settled(claim_uid, allocation)` says an entry's write is visible in the state (or its
        claim is gone); `active()` drops such entries. Without it a written entry stayed until
        the next bind pruned it or it expired, so every filter in between counted its devices as
        taken even after its claim was deleted: freed devices looked in use for up to the TTL.
        The binder that writes the claims sets it (extender.kube.binder)."""
        self._settled = settled

    def assume(self, claim_uid: str, allocation: dict[str, Any], *, pod_uid: str) -> None:
        """Record an allocation that is about to be written."""
        self._entries[claim_uid] = Assumption(claim_uid, pod_uid, allocation, self._clock() + self._ttl)
        self.version += 1

    def allocation_of(self, claim_uid: str) -> dict[str, Any] | None:
        """The allocation assumed for the claim (expired or not), or None."""
        entry = self._entries.get(claim_uid)
        return entry.allocation if entry is not None else None

    def forget(self, claim_uid: str) -> None:
        """Drop an entry (write visible, or bind failed)."""
        if self._entries.pop(claim_uid, None) is not None:
            self.version += 1

    def active(self) -> dict[str, dict[str, Any]]:
        """Unexpired, unsettled allocations by claim uid; expired and settled entries are dropped here."""
        now = self._clock()
        settled = self._settled
        expired = [
            uid
            for uid, entry in self._entries.items()
            if entry.expires_at <= now or (settled is not None and settled(uid, entry.allocation))
        ]
        for uid in expired:
            del self._entries[uid]
        if expired:
            self.version += 1
        return {uid: entry.allocation for uid, entry in self._entries.items()}

    def assume_pod(self, pod_uid: str, node: str) -> None:
        """Record that a pod was bound to `node` before the pod update is visible (gang members
        count it: extender/core/gang.py). Expires like the claim entries."""
        self._pods[pod_uid] = (node, self._clock() + self._ttl)

    def forget_pod(self, pod_uid: str) -> None:
        """Drop a pod's binding (its bind failed after `assume_pod`)."""
        self._pods.pop(pod_uid, None)

    def pod_nodes(self) -> dict[str, str]:
        """Unexpired pod bindings by pod uid; expired ones are dropped here."""
        now = self._clock()
        for uid in [uid for uid, (_, expires) in self._pods.items() if expires <= now]:
            del self._pods[uid]
        return {uid: node for uid, (node, _) in self._pods.items()}

    def __len__(self) -> int:
        return len(self._entries)
