"""Pruning `distinctAttribute` searches with bipartite matching.

A distinct constraint asks that every device it covers has its own attribute value. Checked
device by device, as upstream does, a claim that cannot be satisfied makes the depth-first
search try every ordering of near-solutions: with a few requests of count >= 3 over devices
that share few values that is millions of steps (filter timeouts).

Which values the remaining device slots can take is a matching problem: each remaining slot
of a covered request needs one value, from the values its candidate devices carry, and no
value twice (nor a value a device already chosen holds). The remaining slots can all be filled
only if the bipartite graph (slot, value) has a matching that covers every slot. That is a
*necessary* condition (it ignores counters, taints, other constraints, devices shared between
requests), so a branch where it fails has no solution and may be cut without changing which
solution the search finds first. `viable_values` goes one step further: the values the next
device may carry such that the rest can still be matched.

Values are the typed elements of scalar attributes; with list-type attributes a device holds a
set of values and distinctness is set disjointness, which this model does not cover (the
allocator does not prune then).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Demand:
    """`slots` devices still to choose for one request, each taking one of `options`."""

    slots: int
    options: frozenset[Hashable]


def can_fill(demands: Sequence[Demand], taken: frozenset[Hashable]) -> bool:
    """Whether every slot of every demand gets its own value, none of them in `taken`."""
    slots: list[frozenset[Hashable]] = []
    for demand in demands:
        if demand.slots <= 0:
            continue
        options = demand.options - taken if taken else demand.options
        if len(options) < demand.slots:
            return False  # Hall's condition for this request alone
        slots.extend([options] * demand.slots)
    if not slots:
        return True
    if len(slots) > len(frozenset().union(*slots)):
        return False  # Hall's condition for all slots together
    # Most constrained slots first: augmenting paths are then short in practice.
    slots.sort(key=len)
    owner: dict[Hashable, int] = {}
    return all(_augment(slot, slots, owner, set()) for slot in range(len(slots)))


def _augment(
    slot: int, slots: list[frozenset[Hashable]], owner: dict[Hashable, int], seen: set[Hashable]
) -> bool:
    """Kuhn's augmenting path from `slot`; at most 32 slots deep (the claim limit)."""
    for value in slots[slot]:
        if value in seen:
            continue
        seen.add(value)
        holder = owner.get(value)
        if holder is None or _augment(holder, slots, owner, seen):
            owner[value] = slot
            return True
    return False


def viable_values(
    current: Demand, later: Sequence[Demand], taken: frozenset[Hashable]
) -> frozenset[Hashable]:
    """Values the next device of `current` may carry so that all remaining slots can be filled.

    `current.slots` counts the device being chosen now. Empty when no choice leads anywhere.
    """
    rest = Demand(current.slots - 1, current.options)
    if not can_fill([current, *later], taken):
        return frozenset()
    viable = []
    for value in current.options - taken:
        if can_fill([rest, *later], taken | {value}):
            viable.append(value)
    return frozenset(viable)
