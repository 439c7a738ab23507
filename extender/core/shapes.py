"""Per index generation and claim shape: what deciding a pod costs that neither its names nor
what is in use change.

Pods of one shape (the same requests and constraints, whatever their claims are called) ask the
same questions of one index generation: which nodes lack devices for a request even with all free
(`scoring.short_request_codes`), the first-fit kernel's inputs (`firstfit.plan`, which does not
depend on what is free), and whether a node that fails could hold the pod if nothing were in use
(the "fits if free" runs that word a failure, `tiers`). These are kept here, per node where they
are per node, and filled in for the nodes a call asks about, so the next pod of the shape pays for
none of it. The table is keyed weakly by the index, which every derived answer here depends on.

A new index generation carries the answers over (issue 21: a slice change costs what changed).
A generation whose rows are an earlier one's but some nodes' (`DeviceIndex.changes_since`: the
same node list, row layout, classes and incomplete shared pools) answers alike on every other
node, so the first call of a shape there starts from the latest generation's data of the shape
(`_LATEST`, which holds the data, never an index): per-node memos keep their answers but the
changed nodes', and the modules that keep row-sized items patch the changed nodes' rows
(`ShapeData.take`). Anything else starts afresh.

The shape key is the `repr` of each claim's requests and constraints (frozen dataclasses of
strings, numbers, tuples and the tolerations' dicts): equal text means equal content, so equal
answers; claim names, UIDs, namespaces and configs are left out (no answer here depends on them;
reason texts that name the claim are worded per pod from these codes).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from extender.allocator.requests import ClaimSpec
from extender.index.snapshot import Changes, DeviceIndex

#: Shapes remembered per index generation (the table starts again when full). A shape keeps
#: kernel inputs of a row-sized column or a few (about 1-2 MiB at 180,000 device rows), so this
#: bounds the table to tens of MiB; clusters schedule far fewer distinct shapes at once.
#: `Settings.claim_shape_cache_size` (`set_shape_cache_size`).
SHAPES = 32


def set_shape_cache_size(size: int) -> None:
    """How many claim shapes are remembered from now on (wiring: `claim_shape_cache_size`)."""
    global SHAPES
    if size < 1:
        raise ValueError(f"claim shape cache size must be at least 1, not {size}")
    SHAPES = size


ShapeKey = tuple[tuple[str, str], ...]
#: Items that hold what only their own generation's free mask means (`ranking.Ranker.plan`'s
#: plan for one mask): never handed to a later generation, which would only hold them in memory.
GENERATION_ONLY = frozenset({"kernel_plan"})


def shape_key(specs: list[ClaimSpec]) -> ShapeKey:
    """What a pod's claims ask for, without what they are called (see module docstring).

    Remembered for the last few spec lists (an evaluation's, which is never changed once made):
    one pod's filter, prioritize and bind ask for its shape a dozen times, and the `repr` of its
    requests was a tenth of a steady cycle at 1,000 nodes."""
    found = _KEYS.get(id(specs))
    if found is not None and found[0] is specs:
        return found[1]
    key = tuple((repr(claim.requests), repr(claim.constraints)) for claim in specs)
    if len(_KEYS) >= SHAPES:
        _KEYS.clear()
    _KEYS[id(specs)] = (specs, key)  # the list is held, so its id is not reused meanwhile
    return key


#: id of a spec list -> (the list, its key), for `shape_key`.
_KEYS: dict[int, tuple[list[ClaimSpec], ShapeKey]] = {}


@dataclass(slots=True)
class NodeMemo:
    """One per-node answer over the index's node positions, filled in as calls ask for nodes."""

    values: np.ndarray
    known: np.ndarray

    @classmethod
    def of(cls, num_nodes: int, dtype: type) -> NodeMemo:
        return cls(np.zeros(num_nodes, dtype=dtype), np.zeros(num_nodes, dtype=bool))

    def get(self, positions: np.ndarray, compute: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """The answer at `positions` (index node positions), computing only the unknown ones
        (`compute` is given distinct positions and answers aligned with them)."""
        missing = positions[~self.known[positions]]
        if len(missing):
            missing = np.unique(missing)
            self.values[missing] = compute(missing)
            self.known[missing] = True
        found: np.ndarray = self.values[positions]
        return found

    def carried(self, changes: Changes) -> NodeMemo:
        """A copy for a later generation: the changed nodes' answers forgotten (every answer
        here depends only on the node's own rows, pools and the shape)."""
        known = self.known.copy()
        known[changes.touched] = False
        return NodeMemo(self.values.copy(), known)


@dataclass(slots=True)
class ShapeData:
    """What one shape's pods share at one index generation (see module docstring)."""

    #: Anything a module keeps for the shape, by a name of its own (e.g. "first_fit_plan").
    items: dict[str, object] = field(default_factory=dict)
    #: The generation (`DeviceIndex.serial`) the items are for.
    serial: int = -1
    #: Items of earlier generations not asked for here yet: name -> (item, what changed since).
    inherited: dict[str, tuple[object, Changes]] = field(default_factory=dict)
    #: Per item name, the serial of the generation it was made at (for items still inherited).
    origins: dict[str, int] = field(default_factory=dict)

    def memo(self, name: str, num_nodes: int, dtype: type) -> NodeMemo:
        """The per-node memo called `name` (carried from an earlier generation, or made empty on
        first use)."""
        found = self.items.get(name)
        if not isinstance(found, NodeMemo):
            old = self.take(name)
            if (
                old is not None
                and isinstance(old[0], NodeMemo)
                and len(old[0].values) == num_nodes
                and old[0].values.dtype == np.dtype(dtype)
            ):
                found = old[0].carried(old[1])
            else:
                found = NodeMemo.of(num_nodes, dtype)
            self.items[name] = found
        return found

    def take(self, name: str) -> tuple[object, Changes] | None:
        """The item `name` of an earlier generation and the nodes changed since, once (the
        caller keeps what it makes of it in `items`); None when there is none to carry."""
        self.origins.pop(name, None)
        return self.inherited.pop(name, None)


_SHAPES: weakref.WeakKeyDictionary[DeviceIndex, dict[ShapeKey, ShapeData]] = weakref.WeakKeyDictionary()
#: Per shape, its data at the newest generation that asked for it: where the next generation's
#: data starts from (`_inherit`). Holds arrays and plans, never an index, so generations do not
#: chain; at most `SHAPES` entries.
_LATEST: dict[ShapeKey, ShapeData] = {}


def shape_data(specs: list[ClaimSpec], index: DeviceIndex) -> ShapeData:
    """The shared data of the pod's shape at this index generation."""
    shapes = _SHAPES.get(index)
    if shapes is None:
        shapes = _SHAPES[index] = {}
    key = shape_key(specs)
    found = shapes.get(key)
    if found is None:
        if len(shapes) >= SHAPES:
            shapes.clear()
        found = shapes[key] = ShapeData(serial=index.serial)
        donor = _LATEST.get(key)
        if donor is None or donor.serial < index.serial:
            if donor is not None:
                _inherit(found, donor, index)
            if key not in _LATEST and len(_LATEST) >= SHAPES:
                _LATEST.clear()
            _LATEST[key] = found
    return found


def _inherit(data: ShapeData, donor: ShapeData, index: DeviceIndex) -> None:
    """Give `data` the donor's items (its own, and those it inherited and never asked for) with
    what changed since each was made, where `index.changes_since` can tell."""
    changes: dict[int, Changes | None] = {}

    def since(serial: int) -> Changes | None:
        if serial not in changes:
            changes[serial] = index.changes_since(serial)
        return changes[serial]

    for name, (item, _) in donor.inherited.items():
        origin = donor.origins[name]
        if name not in donor.items and (found := since(origin)) is not None:
            data.inherited[name], data.origins[name] = (item, found), origin
    for name, item in donor.items.items():
        if name not in GENERATION_ONLY and (found := since(donor.serial)) is not None:
            data.inherited[name], data.origins[name] = (item, found), donor.serial


class NodeSubset(NamedTuple):
    """Where a row-sized item is worked out: every node, or the nodes at `nodes` (`node_subset`)."""

    rows: np.ndarray | None  # the rows worked on (ascending), None for every row
    row_node: np.ndarray  # per row worked on, its node's number among those worked on
    at: slice | np.ndarray  # index of the rows worked on in a row-sized column
    node_at: slice | np.ndarray  # index of the nodes worked on in a node-sized column
    num_nodes: int
    num_rows: int


def node_subset(index: DeviceIndex, nodes: np.ndarray | None) -> NodeSubset:
    """Every node of the index (`nodes` None), or the nodes at `nodes` (ascending positions)."""
    if nodes is None:
        everything = slice(None)
        return NodeSubset(None, index.row_node, everything, everything, len(index.node_names), index.num_rows)
    rows, row_node = node_rows(index, nodes)
    return NodeSubset(rows, row_node, rows, nodes, len(nodes), len(rows))


def node_rows(index: DeviceIndex, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows of the nodes at `nodes` (ascending positions), and per row its node's number in
    `nodes`: what a row-sized item recomputes for a later generation's changed nodes."""
    starts = index.node_start[nodes]
    sizes = index.node_start[nodes + 1] - starts
    local = np.repeat(np.arange(len(nodes), dtype=np.int64), sizes)
    first = np.zeros(len(nodes), dtype=np.int64)
    np.cumsum(sizes[:-1], out=first[1:])
    rows: np.ndarray = np.arange(int(sizes.sum()), dtype=np.int64) + np.repeat(starts - first, sizes)
    return rows, local
