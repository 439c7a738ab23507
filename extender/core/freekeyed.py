"""Per-node results of one claim shape that depend on what is free, kept until a node's rows change.

Each pod's filter and prioritize run the kernels over every node they are sent, yet between two
pods of one shape only the nodes a bind or a claim change touched hold other free devices: a
handful of the thousands. A kernel's answer for a node reads only that node's rows (its devices,
which of them are free, the counters its devices consume), so an answer kept per node stays
exact while the node's rows keep their free bits. `FreeKeyed.sync` compares the free mask a call
runs under with the one the answers were made under and forgets the nodes of the rows that
differ (one array comparison over the rows); the call then runs the kernel only on the nodes it
asks about that are not known.

A memo lives in the shape's data of one index generation (`shapes.ShapeData.items`), so node
positions and rows are that generation's; a later generation whose rows are this one's but some
nodes' starts from it with those nodes forgotten (`_memo`). No answer is kept where a node's
counters have consumers outside its rows (`CounterColumns.has_foreign`): there a node's answer
reads other nodes' rows.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from extender.core.shapes import ShapeData
from extender.index.counters import counter_columns
from extender.index.snapshot import DeviceIndex

Compute = Callable[[np.ndarray], tuple[np.ndarray, ...]]


@dataclass(slots=True)
class FreeKeyed:
    """Arrays of per-node answers (first axis: node positions), valid for the free mask `free`."""

    row_node: np.ndarray  # the index's row -> node position
    known: np.ndarray  # bool [nodes]
    #: What else the answers depend on that the caller may vary (e.g. the scoring settings):
    #: another key forgets every answer.
    key: Hashable = None
    free: np.ndarray | None = None
    columns: tuple[np.ndarray, ...] = ()

    @classmethod
    def of(cls, row_node: np.ndarray, num_nodes: int) -> FreeKeyed:
        return cls(row_node, np.zeros(num_nodes, dtype=bool))

    def sync(self, free: np.ndarray, key: Hashable = None) -> None:
        """Forget the nodes whose rows' free bits differ from the mask the answers were made
        under (all of them if the key differs); answers from here on are for `free`."""
        if key != self.key:
            self.known[:] = False
            self.key = key
        elif self.free is not None and self.free is not free:
            if len(self.free) != len(free):
                self.known[:] = False
            else:
                self.known[changed_nodes(self.row_node, self.free, free)] = False
        self.free = free

    def get(self, positions: np.ndarray, compute: Compute) -> tuple[np.ndarray, ...]:
        """The answers at `positions` (node positions), running `compute` on the distinct ones
        not known; `compute` returns arrays whose first axis is aligned with the positions it is
        given, of one dtype and trailing shape from call to call."""
        missing = positions[~self.known[positions]]
        if len(missing):
            missing = np.unique(missing)
            fresh = compute(missing)
            if self.columns and any(
                c.dtype != f.dtype or c.shape[1:] != f.shape[1:]
                for c, f in zip(self.columns, fresh, strict=True)
            ):  # another layout: what was kept cannot sit beside it, so every answer is made again
                self.columns = ()
                self.known[:] = False
                return self.get(positions, compute)
            if not self.columns:
                size = len(self.known)
                self.columns = tuple(np.zeros((size, *f.shape[1:]), dtype=f.dtype) for f in fresh)
            for column, values in zip(self.columns, fresh, strict=True):
                column[missing] = values
            self.known[missing] = True
        return tuple(column[positions] for column in self.columns)


def changed_nodes(row_node: np.ndarray, before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """The node of each row whose free bit differs between two masks of one row layout (a node
    once per changed row of it)."""
    found: np.ndarray = row_node[np.flatnonzero(before != after)]
    return found


class Kept(Protocol):
    """Where a caller gets its answers: a `FreeKeyed` memo, or `NOT_KEPT`."""

    def get(self, positions: np.ndarray, compute: Compute) -> tuple[np.ndarray, ...]: ...


class _NotKept:
    """Answers worked out for every node asked, every time."""

    def get(self, positions: np.ndarray, compute: Compute) -> tuple[np.ndarray, ...]:
        return compute(positions)


NOT_KEPT: Kept = _NotKept()


def kept(shape: ShapeData, name: str, index: DeviceIndex, free: np.ndarray, key: Hashable = None) -> Kept:
    """The shape's answers called `name`, valid for `free` and `key` (`FreeKeyed.sync`); none kept
    where a node's counters have consumers outside its rows (see module docstring)."""
    if counter_columns(index).has_foreign:
        return NOT_KEPT
    found = _memo(shape, name, index)
    found.sync(free, key)
    return found


def _memo(shape: ShapeData, name: str, index: DeviceIndex) -> FreeKeyed:
    """The memo called `name` in the shape's data at `index`: made on first use, from the one
    an earlier generation of the same rows kept if there is one (`ShapeData.take`: every node
    but the changed ones keeps its answers; their rows sit where they sat, so `sync` compares
    the free masks as within one generation)."""
    found = shape.items.get(name)
    if isinstance(found, FreeKeyed):
        return found
    fresh = FreeKeyed.of(index.row_node, len(index.node_names))
    old = shape.take(name)
    kept = old[0] if old is not None else None
    if old is not None and isinstance(kept, FreeKeyed):
        changes = old[1]
        if len(kept.known) == len(fresh.known) and len(kept.row_node) == len(index.row_node):
            # Moved, not copied (thousands of rows of sets and terms): the earlier generation's
            # memo is left empty, so a late call there works its answers out again.
            fresh.known, kept.known = kept.known, np.zeros_like(kept.known)
            fresh.known[changes.touched] = False
            fresh.key, fresh.free = kept.key, kept.free
            fresh.columns, kept.columns = kept.columns, ()
    shape.items[name] = fresh
    return fresh
