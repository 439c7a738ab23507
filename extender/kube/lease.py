"""Lease-based leader election (coordination.k8s.io/v1), with client-go's rules.

Only the leader binds in allocator mode: two replicas choosing devices from their own caches
could hand the same device to two different claims, and the API server cannot stop that (it
checks each claim's resourceVersion, not device uniqueness across claims). Filter and
prioritize are read-only and run on every replica.

Rules, as in client-go's `leaderelection` package:
- a candidate takes the Lease when it does not exist (create), when its holder is empty
  (released), when it already holds it, or when it expired: `renewTime + leaseDurationSeconds`
  is in the past by this process's clock;
- every write carries the Lease's resourceVersion, so of two candidates racing for an
  expired Lease exactly one succeeds (the other gets 409 Conflict and stays a follower);
- the leader renews every `retry_period`; `is_leader()` turns False as soon as no renewal has
  succeeded for `renew_deadline`, which is shorter than the lease duration, so the old leader
  stops binding before anyone else may take over (the difference absorbs clock skew);
- on shutdown the leader releases the Lease (empty holder, 1 s duration) so a follower takes
  over at its next retry instead of waiting for expiry.

Unlike client-go, the expiry check uses the Lease's `renewTime` against our own wall clock
(the brief for this service), not the time we first observed the record; replicas therefore
need roughly synchronised clocks (NTP), with `lease_duration - renew_deadline` as the margin.

Lifecycle: `run()` is one long task (started by `wiring`); `stop()` ends it. The kubernetes
client is synchronous, so every API call runs on a dedicated one-thread pool (`api.CallPool`):
renewals never queue behind bind writes, and the loop never blocks.
State (`_leading`, `_last_renew`, `_holder`) is written only by the `run()` task on the event
loop and read by `is_leader()`/`holder()` on the same loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import math
import random
import secrets
import socket
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from extender.errors import KubeAPIError
from extender.kube import api

log = logging.getLogger(__name__)

#: client-go's JitterFactor for candidates: retry after retry_period * (1 + U[0, 1.2)).
CANDIDATE_JITTER = 1.2
#: leaseDurationSeconds written when releasing (client-go writes 1 s as well).
RELEASED_LEASE_SECONDS = 1


class _MicroTime(dt.datetime):
    """A datetime that always serialises with microseconds.

    The client serialises datetimes with `isoformat()`, which drops the fraction when it is
    zero; the API server parses MicroTime with the layout `2006-01-02T15:04:05.000000Z07:00`
    and would reject such a value. This subclass survives the client's model validation.
    """

    def isoformat(self, sep: str = "T", timespec: str = "auto") -> str:
        return super().isoformat(sep, "microseconds" if timespec == "auto" else timespec)


def micro_time(epoch_seconds: float) -> _MicroTime:
    """A UTC MicroTime for an epoch timestamp."""
    moment = dt.datetime.fromtimestamp(epoch_seconds, tz=dt.UTC)
    return _MicroTime(
        moment.year,
        moment.month,
        moment.day,
        moment.hour,
        moment.minute,
        moment.second,
        moment.microsecond,
        tzinfo=dt.UTC,
    )


def parse_time(value: str | None) -> float | None:
    """Epoch seconds of an RFC 3339 (Micro)Time string, None if absent or unreadable."""
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None


def default_identity() -> str:
    """hostname + '_' + a short random suffix, unique per process (client-go's convention)."""
    return f"{socket.gethostname()}_{secrets.token_hex(4)}"


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The Lease fields the election reads, from one GET."""

    holder: str
    duration_seconds: float
    renew_time: float | None
    acquire_time: float | None
    transitions: int
    resource_version: str

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> LeaseRecord:
        spec = obj.get("spec") or {}
        return cls(
            holder=spec.get("holderIdentity") or "",
            duration_seconds=float(spec.get("leaseDurationSeconds") or 0),
            renew_time=parse_time(spec.get("renewTime")),
            acquire_time=parse_time(spec.get("acquireTime")),
            transitions=int(spec.get("leaseTransitions") or 0),
            resource_version=(obj.get("metadata") or {}).get("resourceVersion") or "",
        )

    def expired(self, now: float) -> bool:
        """True when the holder's last renewal plus the lease duration lies in the past."""
        if self.renew_time is None:
            return True
        return self.renew_time + self.duration_seconds < now


class LeaderElector:
    """Acquire, renew and release one Lease (see the module docstring)."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        namespace: str,
        name: str,
        identity: str | None = None,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        if not 0 < retry_period < renew_deadline < lease_duration:
            raise ValueError(
                "leader election needs 0 < retry_period < renew_deadline < lease_duration "
                f"(got {retry_period} < {renew_deadline} < {lease_duration})"
            )
        self._api = client.CoordinationV1Api(api_client)
        self.namespace = namespace
        self.name = name
        self.identity = identity or default_identity()
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._clock = clock
        self._rng = rng or random.Random()
        # One thread: Lease calls are sequential anyway, and must not wait behind bind writes.
        self._pool = api.CallPool(name="leader-election", max_workers=1)
        self._leading = False
        self._last_renew = float("-inf")
        self._holder = ""
        self._stopped = asyncio.Event()

    # ------------------------------------------------------------------ queries
    @property
    def lease_ref(self) -> str:
        """namespace/name of the Lease, for messages."""
        return f"{self.namespace}/{self.name}"

    def is_leader(self) -> bool:
        """True while we hold the Lease and the last renewal is younger than renew_deadline.

        Computed from the clock at call time, so leadership ends on time even when the run
        loop is delayed (a slow API call, a busy event loop).
        """
        return self._leading and self._clock() - self._last_renew < self.renew_deadline

    def holder(self) -> str:
        """The holder identity last seen on the Lease ('' if none or never read)."""
        return self._holder

    # ------------------------------------------------------------------ lifecycle
    async def run(self) -> None:
        """Try to acquire or renew every retry_period until `stop()`; never raises API errors."""
        log.info("leader election: candidate %s for Lease %s", self.identity, self.lease_ref)
        while not self._stopped.is_set():
            was_leader = self.is_leader()
            try:
                await self.try_acquire_or_renew()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a failed round is retried; the deadline decides leadership
                log.warning("leader election: Lease %s: %s", self.lease_ref, api.describe(exc))
            now_leader = self.is_leader()
            if now_leader != was_leader:
                if now_leader:
                    log.info(
                        "leader election: %s became the leader (Lease %s)", self.identity, self.lease_ref
                    )
                else:
                    log.warning(
                        "leader election: %s stopped leading (Lease %s, holder now %r)",
                        self.identity,
                        self.lease_ref,
                        self._holder,
                    )
            delay = self.retry_period
            if not now_leader:
                delay *= 1 + self._rng.random() * CANDIDATE_JITTER
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopped.wait(), delay)

    async def app_context(self, app: Any) -> AsyncIterator[None]:
        """aiohttp `cleanup_ctx` entry: campaign while the app runs, release the Lease on shutdown."""
        task = asyncio.create_task(self.run(), name=f"leader-election-{self.lease_ref}")
        try:
            yield
        finally:
            await self.stop(release=True)
            await task

    async def stop(self, release: bool = True) -> None:
        """End `run()`; with `release`, give the Lease up so a follower takes over at once."""
        self._stopped.set()
        try:
            if release and self._leading:
                await self._pool.run(self._release_blocking)
        except Exception as exc:
            log.warning("leader election: releasing Lease %s failed: %s", self.lease_ref, exc)
        finally:
            self._leading = False
            # Not cancelling queued calls: run() may be awaiting one and must see it finish.
            self._pool.close()

    async def try_acquire_or_renew(self) -> bool:
        """One election round: read the Lease, take or renew it if allowed; True if we lead."""
        result = await self._pool.run(self._round_blocking)
        if self._stopped.is_set():  # stop() ran meanwhile: its release wins over this renewal
            self._leading = False
            return False
        self._holder = result.holder
        if result.renewed_at is not None:
            self._leading = True
            self._last_renew = result.renewed_at
        elif result.holder != self.identity:
            # Someone else holds a valid Lease, or won the race for it: we are not leading,
            # whatever the deadline says.
            self._leading = False
        return self.is_leader()

    # ------------------------------------------------------------------ blocking parts
    def _duration_field(self) -> int:
        # The field is whole seconds: round up, never promise others a shorter lease than ours.
        return max(1, math.ceil(self.lease_duration))

    def _round_blocking(self) -> _Round:
        now = self._clock()
        timeout = self.renew_deadline
        try:
            raw = api.call(
                self._api.read_namespaced_lease,
                self.name,
                self.namespace,
                _preload_content=False,
                _request_timeout=timeout,
            )
        except KubeAPIError as exc:
            if exc.status != 404:
                raise
            return self._create_blocking(now)
        record = LeaseRecord.from_object(api.read_json(raw))
        if record.holder and record.holder != self.identity and not record.expired(now):
            return _Round(holder=record.holder, renewed_at=None)
        ours = record.holder == self.identity
        spec = client.V1LeaseSpec(
            holder_identity=self.identity,
            lease_duration_seconds=self._duration_field(),
            acquire_time=micro_time(record.acquire_time if ours and record.acquire_time else now),
            renew_time=micro_time(now),
            lease_transitions=record.transitions if ours else record.transitions + 1,
        )
        body = client.V1Lease(
            metadata=client.V1ObjectMeta(
                name=self.name, namespace=self.namespace, resource_version=record.resource_version
            ),
            spec=spec,
        )
        try:
            api.call(
                self._api.replace_namespaced_lease,
                self.name,
                self.namespace,
                body,
                _preload_content=False,
                _request_timeout=timeout,
            )
        except KubeAPIError as exc:
            if exc.status != 409:
                raise
            log.info("leader election: Lease %s changed under us (409), re-reading", self.lease_ref)
            # A candidate lost the race. A leader keeps its state: the renew deadline (shorter
            # than the lease) ends its leadership if the next rounds show someone else took over.
            return _Round(holder=record.holder, renewed_at=None)
        if not ours:
            log.info(
                "leader election: %s acquired Lease %s (previous holder %r, transitions %d)",
                self.identity,
                self.lease_ref,
                record.holder,
                record.transitions + 1,
            )
        return _Round(holder=self.identity, renewed_at=now)

    def _create_blocking(self, now: float) -> _Round:
        body = client.V1Lease(
            metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
            spec=client.V1LeaseSpec(
                holder_identity=self.identity,
                lease_duration_seconds=self._duration_field(),
                acquire_time=micro_time(now),
                renew_time=micro_time(now),
                lease_transitions=0,
            ),
        )
        try:
            api.call(
                self._api.create_namespaced_lease,
                self.namespace,
                body,
                _preload_content=False,
                _request_timeout=self.renew_deadline,
            )
        except KubeAPIError as exc:
            if exc.status == 409:  # another candidate created it first
                return _Round(holder="", renewed_at=None)
            raise
        log.info("leader election: %s created and holds Lease %s", self.identity, self.lease_ref)
        return _Round(holder=self.identity, renewed_at=now)

    def _release_blocking(self) -> None:
        raw = api.call(
            self._api.read_namespaced_lease,
            self.name,
            self.namespace,
            _preload_content=False,
            _request_timeout=self.retry_period,
        )
        record = LeaseRecord.from_object(api.read_json(raw))
        if record.holder != self.identity:
            return  # someone else took it already: nothing of ours to release
        now = self._clock()
        body = client.V1Lease(
            metadata=client.V1ObjectMeta(
                name=self.name, namespace=self.namespace, resource_version=record.resource_version
            ),
            spec=client.V1LeaseSpec(
                holder_identity=None,
                lease_duration_seconds=RELEASED_LEASE_SECONDS,
                acquire_time=micro_time(now),
                renew_time=micro_time(now),
                lease_transitions=record.transitions,
            ),
        )
        api.call(
            self._api.replace_namespaced_lease,
            self.name,
            self.namespace,
            body,
            _preload_content=False,
            _request_timeout=self.retry_period,
        )
        log.info("leader election: %s released Lease %s", self.identity, self.lease_ref)


@dataclass(frozen=True, slots=True)
class _Round:
    """What one election round saw: the holder, and when we renewed (None: we did not)."""

    holder: str
    renewed_at: float | None
