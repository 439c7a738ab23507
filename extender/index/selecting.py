"""Selector evaluation with per-device memoisation, bounded by an LRU of expressions.

Each CEL expression is compiled once (by text, in `extender.cel`) and evaluated at most once per
device object: the result, or the runtime error, is kept on the device itself. Device objects
live as long as their ResourceSlice is unchanged, so steady-state scheduling re-uses every
result and runs no CEL at all. A compile error is not cached per device (it is a property of the
expression alone and `extender.cel` caches compilation).

Bounded: only the `size` most recently used expressions keep results. Without a bound every
distinct selector text ever seen stayed on every device it was evaluated against (+18 MiB after
5,000 texts). Evicting an expression does not walk the devices: a device drops the results of
evicted expressions when its own cache next grows past twice the size, so each device holds at
most 2 x size results and dead devices need no bookkeeping. A stale result is never wrong (a
device's result for a text cannot change while the device object lives), only kept a little longer.

Deadline: inside `stopping(should_stop)` (the deciding tiers wrap a pod's evaluation in it),
every evaluation that is not cached first asks `should_stop`, and the CEL program asks it again
about every millisecond of comprehension steps; a cause raises `SelectorsInterrupted`. An evaluation
within the cost limit can still take a fraction of a second in Python (issue 22: 0.2 s per device,
19 s for one claim's mask), so without this one pod's first mask held the worker for any length of
time. Results reached before the deadline stay on the devices: the scheduler's retry continues
where the last attempt stopped. An interrupted evaluation leaves nothing on its device.

Concurrency: results are written by whichever thread evaluates; a race can only make two
threads compute the same value, never a wrong one (dict assignment is atomic in CPython). The
LRU itself is guarded by a lock. The deadline is a context variable: it applies to the thread
(and worker call) that set it only.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator

from extender import cel
from extender.allocator.features import Features
from extender.allocator.model import Device
from extender.errors import CelRuntimeError, SelectorsInterrupted

StopCheck = Callable[[], "str | None"]

#: The `should_stop` of the evaluation in progress on this thread (None: no deadline).
_SHOULD_STOP: contextvars.ContextVar[StopCheck | None] = contextvars.ContextVar(
    "selector_should_stop", default=None
)


@contextlib.contextmanager
def stopping(should_stop: StopCheck) -> Iterator[None]:
    """Evaluations inside stop once `should_stop` gives a cause (`SelectorsInterrupted`)."""
    token = _SHOULD_STOP.set(should_stop)
    try:
        yield
    finally:
        _SHOULD_STOP.reset(token)


#: Default number of expressions whose results are kept (`Settings.cel_result_cache_size`).
RESULT_CACHE_SIZE = 128


def set_result_cache_size(size: int) -> None:
    """The size evaluators created from now on use (wiring calls this with the setting)."""
    global RESULT_CACHE_SIZE
    if size < 1:
        raise ValueError(f"CEL result cache size must be at least 1, not {size}")
    RESULT_CACHE_SIZE = size


class CachingEvaluator:
    """`SelectorEvaluator` for the allocator, memoising results on the devices."""

    def __init__(self, features: Features, *, cache_size: int | None = None) -> None:
        self._features = features
        self.cache_size = RESULT_CACHE_SIZE if cache_size is None else cache_size
        if self.cache_size < 1:
            raise ValueError(f"CEL result cache size must be at least 1, not {self.cache_size}")
        self._recent: OrderedDict[str, None] = OrderedDict()  # expressions with results, oldest first
        self._lock = threading.Lock()
        # Counters for metrics (read at scrape time by extender.telemetry); a race between
        # threads can lose an increment, which is harmless for monitoring.
        self.evaluations = 0  # CEL programs actually run (cache misses), including failed runs
        self.hits = 0  # results (or cached runtime errors) served from a device's cache
        self.evictions = 0  # expressions dropped from the LRU

    @property
    def cached_expressions(self) -> int:
        """How many expressions currently keep results (at most `cache_size`)."""
        return len(self._recent)

    def device_input(self, device: Device) -> cel.DeviceInput:
        """The CEL `device` variable for a device, built once; raises CelRuntimeError if unusable."""
        if device.cel_input is None:
            try:
                device.cel_input = cel.build_device_input(
                    device.id.driver,
                    device.attributes,
                    {name: {"value": str(spec.value)} for name, spec in device.capacity.items()},
                    device.allow_multiple_allocations,
                    consumable_capacity=self._features.consumable_capacity,
                    # 1.37 converts list values whatever DRAListTypeAttributes says (v0.37.2 cel/compile.go).
                    list_type_attributes=self._features.list_type_attributes or self._features.v137,
                )
            except CelRuntimeError as exc:
                device.cel_input = exc
        if isinstance(device.cel_input, CelRuntimeError):
            raise device.cel_input
        built: cel.DeviceInput = device.cel_input  # `Device` types it Any: the allocator imports no cel
        return built

    def evaluate(self, expression: str, device: Device) -> bool:
        """Evaluate one selector against one device (cached)."""
        results = device.selector_results
        if results is None:  # the device's first result (`Device.selector_results`)
            results = device.selector_results = {}
        cached = results.get(expression)
        if cached is not None:
            self.hits += 1
            self._use(expression)
            if isinstance(cached, CelRuntimeError):
                raise cached
            return bool(cached)
        compiled = cel.compile_selector(expression)
        should_stop = _SHOULD_STOP.get()
        if should_stop is not None and (cause := should_stop()):
            raise SelectorsInterrupted(cel.interrupted(cause))
        self.evaluations += 1
        self._use(expression)
        if len(results) >= 2 * self.cache_size:
            self._drop_evicted(results)
        try:
            result = compiled.evaluate(self.device_input(device), should_stop=should_stop)
        except CelRuntimeError as exc:
            results[expression] = exc
            raise
        results[expression] = result
        return result

    def _use(self, expression: str) -> None:
        """Mark `expression` most recently used, evicting the least recently used beyond the size."""
        with self._lock:
            recent = self._recent
            if expression in recent:
                recent.move_to_end(expression)
                return
            recent[expression] = None
            while len(recent) > self.cache_size:
                recent.popitem(last=False)
                self.evictions += 1

    def _drop_evicted(self, results: dict[str, object]) -> None:
        """Forget this device's results for expressions no longer in the LRU."""
        recent = self._recent
        for expression in list(results):  # a snapshot: another thread may write meanwhile
            if expression not in recent:
                results.pop(expression, None)
