"""SIGTERM stops `serve` within `shutdown_grace_seconds`, whatever is running (issue 30 item 4).

aiohttp handles SIGTERM on the event loop: it stops listening, waits for the requests in flight
(at most half the grace here, then cancels them), and runs the cleanup (Lease release, watch
stop, worker close). But work runs on threads the loop cannot cancel: the placement worker (an
explain step, a search) and the default executor (the dashboard parses pasted YAML there). The
interpreter joins those threads before it exits, so a long piece of work kept a stopped server
alive: a YAML alias bomb's parse needed SIGKILL.

So shutdown arms a deadline: a daemon thread that, `grace` seconds after the shutdown began,
logs the threads still running and ends the process with `os._exit`. Python cannot interrupt a
thread safely; what such a thread was doing is lost exactly as it would be under the SIGKILL a
kubelet sends once terminationGracePeriodSeconds pass (every write the extender makes to the API
server is one request, complete or not made). A process whose threads finish in time exits
normally and the deadline never fires.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger(__name__)

#: Exit status when the deadline ends the process (the stop was asked for and happened).
FORCED_EXIT_STATUS = 0


def arm_deadline(grace: float) -> threading.Thread:
    """Start the daemon thread that ends the process `grace` seconds from now (module docstring)."""

    def expire() -> None:
        time.sleep(grace)
        main = threading.main_thread()
        busy = [t.name for t in threading.enumerate() if not t.daemon and t is not main]
        log.warning(
            "shutdown: still running after the %g s grace (threads: %s); exiting without waiting",
            grace,
            ", ".join(busy) or "none but the main thread",
        )
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # closed or broken: nothing to add
                stream.flush()
        os._exit(FORCED_EXIT_STATUS)

    thread = threading.Thread(target=expire, name="shutdown-deadline", daemon=True)
    thread.start()
    return thread


def on_shutdown(grace: float) -> Callable[[Any], Awaitable[None]]:
    """An aiohttp `on_shutdown` callback that arms the deadline when the server starts stopping."""

    async def arm(app: Any) -> None:
        log.info("shutting down (at most %g s)", grace)
        arm_deadline(grace)

    return arm
