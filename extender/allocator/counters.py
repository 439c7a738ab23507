"""Shared-counter bookkeeping of one pool during one search (spec dra.md §3.6), in integers.

A search takes and gives back counters at every step that tries a partitionable device, so this
is on the search's inner loop. Quantities are converted once to integers in nano-units (every
parsed Kubernetes quantity is a whole number of nano-units, so the conversion is exact), a
device's cost is a short tuple of (counter index, amount), and the pool-wide check "no counter
has consumed > available" is kept as a running count of violated counters instead of a scan.

Upstream compares, on every take, *every* counter of the pool (`checkAvailableCounters` ranges
over all the pool's counter sets; a counter this search never consumed from compares as 0), so a
counter that devices held by other claims already over-use makes every counter-consuming device of
the pool fail, even one that consumes from another counter set (the oracle showed it:
tests/data/oracle-regressions/fuzz-s202-0287.json). Accounting is per `Pool` object, i.e. per
(driver, pool): see docs/upstream-differences.md (b).
"""

from __future__ import annotations

from collections.abc import Callable
from math import ceil

from extender.allocator.model import Device, DeviceID
from extender.allocator.pools import Pool
from extender.quantity import Quantity

_NANO = 10**9

Cost = tuple[tuple[int, int], ...]


def nano_units(quantity: Quantity) -> int:
    """The quantity as a whole number of nano-units (exact for any parsed quantity: the parser
    rounds finer values to 1n; anything else would be rounded up)."""
    return ceil(quantity.exact * _NANO)


class PoolCounters:
    """Available and consumed counters of one pool; `take`/`give_back` in LIFO order."""

    __slots__ = ("_costs", "_index", "available", "base", "consumed", "violations")

    def __init__(self, pool: Pool, held_by_others: Callable[[DeviceID], bool]) -> None:
        self._index: dict[tuple[str, str], int] = {}
        self.base: list[int] = []  # the counter sets' values
        for set_name, counters in pool.counter_sets.items():
            for name, amount in counters.items():
                self._index[(set_name, name)] = len(self.base)
                self.base.append(nano_units(amount))
        self._costs: dict[int, Cost] = {}
        # Minus what devices held by other claims consume (may go negative: nothing left).
        self.available = list(self.base)
        for slice_ in (*pool.slices, *pool.slices_not_targeting_node):
            for device in slice_.devices:
                if device.consumes_counters and held_by_others(device.id):
                    for index, nano in self.cost(device):
                        self.available[index] -= nano
        self.consumed = [0] * len(self.base)
        # Counters with consumed > available: at first those other claims over-use already.
        self.violations = sum(1 for amount in self.available if amount < 0)

    def cost(self, device: Device) -> Cost:
        """What the device consumes, by counter index (counters the pool lacks are ignored)."""
        cost = self._costs.get(id(device))
        if cost is None:
            cost = tuple(
                (self._index[(set_name, name)], nano_units(amount))
                for set_name, counters in device.consumes_counters
                for name, amount in counters.items()
                if (set_name, name) in self._index
            )
            self._costs[id(device)] = cost
        return cost

    def take(self, cost: Cost) -> bool:
        """Consume `cost`; False (and nothing consumed) if some counter of the pool is over."""
        self._apply(cost, +1)
        if self.violations:
            self._apply(cost, -1)
            return False
        return True

    def give_back(self, cost: Cost) -> None:
        self._apply(cost, -1)

    def fits_without_others(self, cost: Cost) -> bool:
        """Would `take(cost)` succeed if other claims held no counters? (for wording reasons)"""
        consumed = list(self.consumed)
        for index, amount in cost:
            consumed[index] += amount
        return all(used <= base for used, base in zip(consumed, self.base, strict=True))

    def _apply(self, cost: Cost, sign: int) -> None:
        available, consumed = self.available, self.consumed
        for index, amount in cost:
            before = consumed[index] > available[index]
            consumed[index] += sign * amount
            self.violations += (consumed[index] > available[index]) - before
