"""Lets a caller see the evaluation behind a verb's answer, without a second job on the worker.

The dashboard shows the score terms of the nodes a prioritize call ranked. Asking the worker for
them after the answer would queue a second job behind unrelated work and hold the answer back
(issue 22, item 4); the evaluation that produced the answer already has them. So the caller opens
`collecting()` around the call, the verb's work `report`s its evaluation, and the caller reads it
after answering.

Why a context variable: the worker runs each job in a copy of the caller's context
(`extender.worker.PlacementWorker.run`), so the job sees the very list the caller opened, and
concurrent calls each see their own. Outside `collecting()` a report costs one lookup.

Bind reports what it wrote the same way (`collecting_binds`, `report_bound`): the claims it
allocated or reserved, under their real names (an extended-resource claim is named by the API
server, or in file mode by the binder, only at bind), with the devices of each allocation.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass

from extender.core.evaluation import PodEvaluation

_SINK: contextvars.ContextVar[list[PodEvaluation] | None] = contextvars.ContextVar(
    "dra_extender_observed_evaluations", default=None
)


@contextlib.contextmanager
def collecting() -> Iterator[list[PodEvaluation]]:
    """Collect the evaluations the verb work started inside this block reports.

    The list is written on the worker thread and read by the caller once the work is done;
    a job that overran its deadline may still append to it later (harmless: it is only read).
    """
    sink: list[PodEvaluation] = []
    token = _SINK.set(sink)
    try:
        yield sink
    finally:
        _SINK.reset(token)


def report(evaluation: PodEvaluation) -> None:
    """Hand the evaluation behind the current verb's answer to a caller that is collecting."""
    sink = _SINK.get()
    if sink is not None:
        sink.append(evaluation)


@dataclass(frozen=True, slots=True)
class Bound:
    """One claim a bind wrote."""

    claim: str  # namespace/name as written (a claim bind created: the name it got)
    devices: tuple[str, ...]  # driver/pool/device of the allocation it wrote; (): only reserved
    created: bool = False  # bind created it (the claim of the pod's extended resources)


_BOUND: contextvars.ContextVar[list[Bound] | None] = contextvars.ContextVar(
    "dra_extender_observed_binds", default=None
)


@contextlib.contextmanager
def collecting_binds() -> Iterator[list[Bound]]:
    """Collect what the binds started inside this block report (as `collecting`)."""
    sink: list[Bound] = []
    token = _BOUND.set(sink)
    try:
        yield sink
    finally:
        _BOUND.reset(token)


def report_bound(bound: list[Bound]) -> None:
    """Hand the claims a successful bind wrote to a caller that is collecting."""
    sink = _BOUND.get()
    if sink is not None:
        sink.extend(bound)


def result_devices(allocation: object) -> tuple[str, ...]:
    """driver/pool/device of each result of an allocation object (`status.allocation`)."""
    devices = allocation.get("devices") if isinstance(allocation, dict) else None
    results = devices.get("results") if isinstance(devices, dict) else None
    return tuple(
        f"{r.get('driver', '')}/{r.get('pool', '')}/{r.get('device', '')}"
        for r in (results if isinstance(results, list) else ())
        if isinstance(r, dict)
    )
