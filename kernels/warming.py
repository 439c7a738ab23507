"""Kernel warm-up off the start-up path: which implementation answers while numba compiles.

What this module owns: whether the public kernel entry points (`topology.best_sets`,
`topology.score_sets`, `topology.partition_terms`, `counters.first_fit`) run their numba kernels or
their plain-Python twins (`*_reference`), and the thread that compiles the kernels at start-up
(`single_partition.single_terms` too; its callers use the general entry points while warming).

Why: numba compiles a kernel on its first call and caches the result on disk (`kernels/__init__.py`).
A process that finds no cache (the first `serve` after `pip install`, a new CPU model) compiles every
kernel: 29-58 s on a 2-core machine, and readiness waited for it. Every entry point has a twin that
runs the same algorithm over the same input records, which tests/kernels hold equal to the kernel
(status and chosen rows exactly, scores to rounding; tests/server/test_kernel_warmup.py checks whole
filter and prioritize answers). So the service answers with the twins while a background thread
compiles, then switches: answers are the same, only slower during the warm-up
(docs/kernels-warmup.md gives the cost).

States, one per process (`state()`):
- IDLE: no warm-up was asked for. The entry points call the kernels, and numba compiles each on its
  first call in the caller's thread (tests, benches and `python -m kernels` run so).
- WARMING: `start()` launched the warm-up thread. The entry points answer with the twins.
- COMPILED: a warm-up returned (`start()`'s thread or `warm_up_now()`); the entry points call the
  kernels, whose dispatchers hold the compiled code (numba's dispatchers are per process: a kernel
  compiled in the warm-up thread is not compiled again in the placement worker).
- FAILED: the warm-up raised (logged with its traceback). The twins keep answering: slower, but the
  same answers, where calling the kernel would raise in every request.

The race, written out: the warm-up thread writes the state once (WARMING to COMPILED or FAILED), after
every kernel returned; the placement worker reads it once per entry-point call. A call that read
WARMING runs its twin to the end even if the state changes meanwhile; the next call reads COMPILED
and runs the kernel, already compiled. Reading and writing one module attribute is atomic in
CPython, so the readers need no lock; `start()` and `warm_up_now()` take `_LOCK` so that two
callers do not both start a warm-up. `compiled()` is read by /metrics on the event loop.

Tests force one implementation with `forced(use_kernels=...)`.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import threading
import time
from collections.abc import Iterator

log = logging.getLogger(__name__)

IDLE = "idle"
WARMING = "warming"
COMPILED = "compiled"
FAILED = "failed"

#: Written under `_LOCK` by `start()`, `warm_up_now()` and the warm-up thread; read lock-free.
_state = IDLE
#: None, or the implementation a test forced (True: kernels, False: twins); wins over `_state`.
_override: bool | None = None
_LOCK = threading.Lock()
#: Set when the state leaves WARMING (to COMPILED or FAILED), or was never WARMING.
_settled = threading.Event()
_settled.set()


def state() -> str:
    """IDLE, WARMING, COMPILED or FAILED (see the module docstring)."""
    return _state


def use_kernels() -> bool:
    """Whether an entry point calls its numba kernel now (False: its twin answers)."""
    if _override is not None:
        return _override
    return _state in (IDLE, COMPILED)


def compiled() -> bool:
    """Whether a warm-up has compiled (or loaded) every kernel in this process (the /metrics gauge)."""
    return _state == COMPILED


def wait(timeout: float | None = None) -> bool:
    """Block until no warm-up is running (at most `timeout` seconds); True if none is."""
    return _settled.wait(timeout)


def _compile_all(threads: int) -> float:
    """Compile (or load from the cache) every kernel in this thread; returns the seconds taken."""
    from kernels import counters, single_partition, topology

    topology.set_threads(threads)  # numba's thread count is per calling thread
    return topology.warm_up() + counters.warm_up() + single_partition.warm_up()


def warm_up_now(*, threads: int = 0) -> float:
    """Compile every kernel now, in the calling thread, and switch to them; returns the seconds.

    Waits for a background warm-up that is already running instead of compiling beside it.
    Raises what the compilation raises (the state is then FAILED).
    """
    global _state
    with _LOCK:
        running = _state == WARMING
    if running:
        started = time.perf_counter()
        wait()
        if _state != COMPILED:
            raise RuntimeError("the background kernel warm-up failed (see its logged error)")
        return time.perf_counter() - started
    try:
        seconds = _compile_all(threads)
    except BaseException:
        with _LOCK:
            _state = FAILED
        raise
    with _LOCK:
        _state = COMPILED
    return seconds


def start(*, threads: int = 0) -> bool:
    """Compile every kernel in a daemon thread; the twins answer until it is done.

    Args:
        threads: numba threads of the warm-up calls (0: numba's default); `set_threads` is per
            thread, so the placement worker sets its own.

    Returns:
        True if a warm-up thread was started; False if the kernels are compiled already or a
        warm-up is running (then nothing changes).
    """
    global _state
    with _LOCK:
        if _state in (WARMING, COMPILED):
            return False
        _state = WARMING
        _settled.clear()
    thread = threading.Thread(target=_run, args=(threads,), name="kernel-warm-up", daemon=True)
    atexit.register(_finish_before_exit)  # a later start() registers it again: it runs twice, harmlessly
    thread.start()
    return True


#: How long an exiting process waits for a running warm-up (a cold compile takes 30-60 s).
EXIT_WAIT_SECONDS = 300.0


def _finish_before_exit() -> None:
    """At interpreter exit, let a running warm-up finish first.

    Why: llvmlite calls LLVM with the GIL released, so the daemon thread keeps compiling while the
    main thread finalizes the interpreter and runs LLVM's static destructors; LLVM then aborts the
    process on an internal assertion (exit code 134 and a core dump instead of the exit code the
    program chose; seen when a test file ended during a cold compile). numba's compiler cannot be
    interrupted, so the exit waits for it (the compiled kernels are then cached for the next start).
    """
    if _settled.is_set():
        return
    log.warning("waiting for the numba kernel warm-up to finish before exiting (it cannot be interrupted)")
    if not _settled.wait(EXIT_WAIT_SECONDS):
        log.error("the kernel warm-up still runs after %.0f s; exiting anyway", EXIT_WAIT_SECONDS)


def _run(threads: int) -> None:
    """The warm-up thread: compile, then switch the entry points to the kernels (or stay on the twins)."""
    global _state
    try:
        seconds = _compile_all(threads)
    except BaseException:
        log.exception("compiling the numba kernels failed; their plain-Python twins keep answering")
        outcome = FAILED
    else:
        log.info("numba kernels compiled in %.2f s (background); the kernels answer from now on", seconds)
        outcome = COMPILED
    with _LOCK:
        _state = outcome
        _settled.set()


@contextlib.contextmanager
def forced(*, use_kernels: bool) -> Iterator[None]:
    """Within the block, every entry point runs the kernel (True) or the twin (False). Tests only."""
    global _override
    before = _override
    _override = use_kernels
    try:
        yield
    finally:
        _override = before
