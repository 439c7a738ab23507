"""Per index generation and claim shape: what deciding a pod costs that neither its names nor
what is in use change.

Pods of one shape (the same requests and constraints, whatever their claims are called) ask the
same questions of one index generation: which nodes lack devices for a request even with all free
(`scoring.short_request_codes`), the first-fit kernel's inputs (`firstfit.plan`, which does not
depend on what is free), and whether a node that fails could hold the pod if nothing were in use
(the "fits if free" runs that word a failure, `tiers`). These are kept here, per node where they
are per node, and filled in for the nodes a call asks about, so the next pod of the shape pays for
none of it. A new index generation (any slice or class change) starts afresh: the table is keyed
weakly by the index, which every derived answer here depends on.

The shape key is the `repr` of each claim's requests and constraints (frozen dataclasses of
strings, numbers, tuples and the tolerations' dicts): equal text means equal content, so equal
answers; claim names, UIDs, namespaces and configs are left out (no answer here depends on them;
reason texts that name the claim are worded per pod from these codes).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from extender.allocator.requests import ClaimSpec
from extender.index.snapshot import DeviceIndex

#: Shapes remembered per index generation (the table starts again when full). A shape keeps
#: kernel inputs of a row-sized column or a few (about 1-2 MiB at 180,000 device rows), so this
#: bounds the table to tens of MiB; clusters schedule far fewer distinct shapes at once.
SHAPES = 32

ShapeKey = tuple[tuple[str, str], ...]


def shape_key(specs: list[ClaimSpec]) -> ShapeKey:
    """What a pod's claims ask for, without what they are called (see module docstring)."""
    return tuple((repr(claim.requests), repr(claim.constraints)) for claim in specs)


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


@dataclass(slots=True)
class ShapeData:
    """What one shape's pods share at one index generation (see module docstring)."""

    #: Anything a module keeps for the shape, by a name of its own (e.g. "first_fit_plan").
    items: dict[str, object] = field(default_factory=dict)

    def memo(self, name: str, num_nodes: int, dtype: type) -> NodeMemo:
        """The per-node memo called `name` (made empty on first use)."""
        found = self.items.get(name)
        if not isinstance(found, NodeMemo):
            found = self.items[name] = NodeMemo.of(num_nodes, dtype)
        return found


_SHAPES: weakref.WeakKeyDictionary[DeviceIndex, dict[ShapeKey, ShapeData]] = weakref.WeakKeyDictionary()


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
        found = shapes[key] = ShapeData()
    return found
