"""The allowed range of every numeric setting, and the converters that hold values to it.

Every numeric setting is bounded, so that a value no deployment would mean cannot reach the
arithmetic behind it: weights of 1e308 once made a score of -2**63, a NaN level distance started,
and `kernel_threads=100000` passed validation and then killed start-up (numba refuses more
threads than NUMBA_NUM_THREADS). A converter takes the raw value and `where` it came from (file
key, environment variable or flag) and raises ValueError naming both and the allowed range.
`extender.settings` wires them to the fields; `listen_port` and `max_body_bytes` keep their own
converters there.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Bound:
    """The allowed values of one numeric setting: finite, `low`..`high` (`low` itself excluded
    when `above`), integers only when `integer`. Every bound keeps the arithmetic behind the
    setting finite (scores, deadlines, sleeps) and refuses what no deployment would mean."""

    low: float
    high: float
    above: bool = False  # low itself is not allowed (durations: more than 0 s)
    integer: bool = False

    def holds(self, number: float) -> bool:
        """True if `number` is allowed."""
        if not math.isfinite(number) or (self.integer and number != int(number)):
            return False
        return (self.low < number if self.above else self.low <= number) and number <= self.high

    def describe(self) -> str:
        """The allowed values in words, for messages and the README."""
        low, high = _plain(self.low), _plain(self.high)
        if self.integer:
            return f"an integer from {low} to {high}"
        if self.above:
            return f"a number greater than {low} and at most {high}"
        return f"a number from {low} to {high}"


#: The bound of every numeric setting that `Bound` describes (`listen_port`, `max_body_bytes`,
#: `level_distances` and `kernel_threads` have converters of their own). Durations in seconds.
NUMERIC_BOUNDS: dict[str, Bound] = {
    "assume_ttl_seconds": Bound(0, 3600, above=True),
    "filter_timeout_seconds": Bound(0, 300, above=True),
    "body_read_timeout_seconds": Bound(0, 300, above=True),
    "shutdown_grace_seconds": Bound(0, 3600, above=True),
    "watch_stall_seconds": Bound(0, 86400, above=True),
    "relist_ready_seconds": Bound(0, 3600, above=True),
    "lease_duration_seconds": Bound(0, 3600, above=True),
    "renew_deadline_seconds": Bound(0, 3600, above=True),
    "retry_period_seconds": Bound(0, 3600, above=True),
    "cel_result_cache_size": Bound(1, 65536, integer=True),
    # Entry counts of the tables kept per selector text, claim shape or pod (their byte bounds,
    # where they have one, are sizes up to 1Gi like max_body_bytes).
    "cel_compile_cache_size": Bound(1, 1048576, integer=True),
    "selector_mask_cache_size": Bound(1, 1048576, integer=True),
    "claim_shape_cache_size": Bound(1, 4096, integer=True),
    "evaluation_cache_size": Bound(1, 65536, integer=True),
    "pods_seen_cache_size": Bound(1, 1048576, integer=True),
    # Weights: only their ratios matter; 1000:1 is more contrast than any policy needs, and keeps
    # every score sum far from overflow (1e308 weights once gave a score of -2**63).
    "locality_weight": Bound(0, 1000),
    "fragmentation_weight": Bound(0, 1000),
    "packing_weight": Bound(0, 1000),
    "preference_weight": Bound(0, 1000),
    "cross_claim_weight": Bound(0, 1000),
    "partition_packing_weight": Bound(0, 1000),
    "partition_headroom_weight": Bound(0, 1000),
    "gang_weight": Bound(0, 1000),
    # Exact-search steps per node: 256 times the default; beyond that a node's search can hold
    # the worker for seconds (the kernel cannot be interrupted).
    "kernel_max_work": Bound(0, 1048576, integer=True),
}
#: Largest `max_body_bytes` (1Gi): a body is held whole in memory while it is decoded.
MAX_BODY_BYTES_LIMIT = 1024**3
#: Largest topology level distance (`level_distances`); like the weights, a ratio.
MAX_LEVEL_DISTANCE = 1000.0


def _plain(number: float) -> str:
    return str(int(number)) if number == int(number) else str(number)


def _number(value: Any, *, integer: bool) -> float | None:
    """The value as a number (None: not one). Integers may be written `8` or `8.0`, not `8.5`."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if integer and math.isfinite(number) and number != int(number):
        return None
    return number


def bounded(name: str) -> Callable[[Any, str], Any]:
    """The converter of a setting in NUMERIC_BOUNDS: a number within its bound, or ValueError
    naming where the value came from (file key, variable or flag) and the allowed range."""
    bound = NUMERIC_BOUNDS[name]

    def convert(value: Any, where: str) -> float | int:
        number = _number(value, integer=bound.integer)
        if number is None or not bound.holds(number):
            raise ValueError(f"{where}: {value!r} is out of range; allowed: {bound.describe()}")
        return int(number) if bound.integer else number

    return convert


def to_threads(value: Any, where: str) -> int:
    """0 (numba's default: one per core) up to numba's NUMBA_NUM_THREADS, the most
    `numba.set_num_threads` accepts (a larger count used to pass here and kill start-up)."""
    from numba import config  # numba's own limit; imported only when the setting is given

    limit = int(getattr(config, "NUMBA_NUM_THREADS"))  # noqa: B009  (set at numba's import: no stub)
    number = _number(value, integer=True)
    if number is None or not 0 <= number <= limit:
        raise ValueError(
            f"{where}: {value!r} is out of range; allowed: an integer from 0 to {limit} (numba's "
            "NUMBA_NUM_THREADS, by default the number of CPUs; 0 uses them all)"
        )
    return int(number)


def to_distances(value: Any, where: str) -> tuple[float, float, float, float, float]:
    items = value.split(",") if isinstance(value, str) else value
    try:
        distances = tuple(float(i) for i in items)
    except (TypeError, ValueError):
        distances = ()
    ordered = all(a < b for a, b in itertools.pairwise(distances))  # False for NaN, too
    if len(distances) != 5 or not ordered or not distances[0] > 0 or not distances[-1] <= MAX_LEVEL_DISTANCE:
        raise ValueError(
            f"{where}: {value!r} is not a list of level distances; allowed: 5 increasing numbers "
            f"greater than 0 and at most {_plain(MAX_LEVEL_DISTANCE)} (nvlink, pcie, numa, socket, "
            "node), e.g. 1,2,3,4,6"
        )
    return distances
