"""The one thread that runs placement work, so CPU-heavy verb work never blocks the event loop.

Why one thread: Placement, the ClusterState it reads and the AssumeCache hold no locks; they are
correct only while a single thread touches them. Running every reader and writer of them (the
filter/prioritize evaluation, the binders' choose-and-assume step, kube-mode watch events) on
this one thread keeps that true, while the event loop stays free to read requests and answer
/healthz, /readyz and /metrics however long an evaluation takes.

Why a deadline does not stop the work: Python cannot safely interrupt a thread, and an exception
injected mid-update could leave a cache half-written. A call whose deadline passes is answered
at once with `WorkTimeout`; the work itself runs to its end (the allocator search and CEL
evaluation stop themselves at the same deadline, CEL also at its cost budget) and what it leaves
behind are ordinary, complete cache entries, which the scheduler's retry then reuses. Calls still waiting
in the queue when their caller gives up are dropped before they start. Work that must not be
abandoned halfway (a bind writes state) uses `start_timeout` instead: it may give up only
while the work has not started, and once started it is awaited to the end.

Whose deadline: a call with a `timeout` may have waited in the queue behind other work; its
evaluation then has only what is left of its caller's wait (`waited()`, which the placement's
search budget subtracts). So every piece of work stops by the time its own caller gives up, and
a cheap call queued behind expensive ones is reached before its caller gives up on it (issue 22:
an unrelated pod's filter waited 19 s behind one claim's selectors).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from extender.errors import ExtenderError

T = TypeVar("T")

__all__ = ["PlacementWorker", "WorkTimeout", "waited"]

#: Seconds the call running in this context waited in the queue (set only for calls with a timeout).
_WAITED: contextvars.ContextVar[float] = contextvars.ContextVar("worker_waited", default=0.0)


def waited() -> float:
    """How long the worker call running now waited in the queue before it started, if its caller
    set a `timeout` (0 otherwise, and outside the worker): the part of its deadline already spent."""
    return _WAITED.get()


class WorkTimeout(ExtenderError):
    """A call to the worker did not finish within its deadline (its work may still run on)."""


class PlacementWorker:
    """A single worker thread with an asyncio front door (see the module docstring).

    The thread starts with the first call; `close()` stops it after the queued work, and a
    process exiting waits for the call in progress.
    """

    def __init__(self, name: str = "placement", *, initializer: Callable[[], None] | None = None) -> None:
        """`initializer` runs first on the new thread: per-thread settings such as numba's thread
        count (`numba.set_num_threads` is thread-local) belong there."""
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name, initializer=initializer)
        self._ident: int | None = None

    def on_worker(self) -> bool:
        """True when called on the worker thread (for assertions and docs, not for control flow)."""
        return threading.get_ident() == self._ident

    def _enter(self, fn: Callable[..., T], *args: Any) -> T:
        self._ident = threading.get_ident()
        return fn(*args)

    def _enter_queued_since(self, submitted: float, fn: Callable[..., T], *args: Any) -> T:
        _WAITED.set(time.monotonic() - submitted)  # in the call's own (copied) context
        return self._enter(fn, *args)

    async def run(
        self,
        fn: Callable[..., T],
        *args: Any,
        timeout: float | None = None,
        start_timeout: float | None = None,
    ) -> T:
        """Run `fn(*args)` on the worker thread and await its result.

        The caller's context (current span, request tracer) goes along, so spans opened by the
        work nest under the request's span.

        Args:
            fn: the synchronous work.
            args: its positional arguments.
            timeout: seconds to wait for the result; None waits as long as it takes. The time
                the call waits in the queue counts against it (`waited()`).
            start_timeout: seconds the work may wait in the queue; if it has not started by
                then it is dropped, once started it is awaited to the end.

        Raises:
            WorkTimeout: `timeout` passed first (the work, if started, runs on; see module
                docstring), or the work did not start within `start_timeout` (and never will).
            Exception: whatever `fn` raised.
        """
        context = contextvars.copy_context()
        if timeout is not None:
            call = functools.partial(context.run, self._enter_queued_since, time.monotonic(), fn, *args)
        else:
            call = functools.partial(context.run, self._enter, fn, *args)
        queued = self._executor.submit(call)
        future = asyncio.wrap_future(queued)
        if start_timeout is not None:
            done, _ = await asyncio.wait({future}, timeout=start_timeout)
            if not done and queued.cancel():  # cancel() fails once the work is running
                raise WorkTimeout(f"did not start within {start_timeout:g} s (the worker is busy)")
        if timeout is None:
            return await future
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise WorkTimeout(f"did not finish within {timeout:g} s") from None

    def call_soon_threadsafe(self, fn: Callable[..., Any], *args: Any) -> None:
        """Queue `fn(*args)` on the worker from any thread, without waiting (the kube watch uses it
        to apply events to the ClusterState on the thread that reads it)."""
        self._executor.submit(self._enter, fn, *args)

    def is_closed(self) -> bool:
        """True after `close()` (the kube watch checks this before queueing)."""
        return bool(getattr(self._executor, "_shutdown", False))

    def close(self) -> None:
        """Stop accepting work; work already queued still runs."""
        self._executor.shutdown(wait=False, cancel_futures=False)
