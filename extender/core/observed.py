"""Lets a caller see the evaluation behind a verb's answer, without a second job on the worker.

The dashboard shows the score terms of the nodes a prioritize call ranked. Asking the worker for
them after the answer would queue a second job behind unrelated work and hold the answer back
(issue 22, item 4); the evaluation that produced the answer already has them. So the caller opens
`collecting()` around the call, the verb's work `report`s its evaluation, and the caller reads it
after answering.

Why a context variable: the worker runs each job in a copy of the caller's context
(`extender.worker.PlacementWorker.run`), so the job sees the very list the caller opened, and
concurrent calls each see their own. Outside `collecting()` a report costs one lookup.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

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
