"""The topology kernels' input records: what they hold, the dtypes the kernels take, the shared checks.

What this module owns: `TopologyInputs` (where every row sits and how a set is scored: `best_sets`
and `score_sets`), `SearchRequests` (one pod's requests: `best_sets`), `PartitionInputs` (parent
groups and counter shares: `partition_terms`), one builder each that converts the arrays to the
dtypes the kernels take (`LAYOUT`), and the checks both a kernel and its twin run first, so that
both raise the same errors. Pure Python and numpy; the kernels are in `search`, `score` and
`partition`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, TypeVar

import numpy as np

LEVELS: tuple[str, ...] = ("nvlink", "pcie", "numa", "socket")
NODE_LEVEL = len(LEVELS)

MATCH_ATTRIBUTE = 0
DISTINCT_ATTRIBUTE = 1

#: Nodes per prange task of the search and partition drivers: enough to amortise the scratch
#: allocation, small enough to balance.
BLOCK = 32


class TopologyInputs(NamedTuple):
    """Where every row sits and how a set is scored: what `best_sets` and `score_sets` share.

    Depends on the index generation, the free and relevant rows and the settings, not on the pod's
    requests or on which nodes a call solves. Build it with `topology_inputs`; the entry points check it.
    """

    node_start: np.ndarray
    """int64 (N + 1,); node n owns rows node_start[n]:node_start[n + 1]."""
    coords: np.ndarray
    """int32 (rows, 4), group id per level (nvlink, pcie, numa, socket); -1 unknown."""
    free: np.ndarray
    """uint8 (rows,), 1 for a free device (fragmentation and packing only)."""
    relevant: np.ndarray
    """uint8 (rows,), 1 for devices of the pod's classes (fragmentation and packing only)."""
    level_distance: np.ndarray
    """float64 (5,), distance per level, node level last, increasing."""
    link_offset: np.ndarray
    """int64 (N,), start of node n's rows x rows link matrix in link_distance, or -1."""
    link_distance: np.ndarray
    """float64 (L,), link matrices row-major; NaN entries fall back to levels."""
    weights: np.ndarray
    """float64 (4,), locality, fragmentation, packing, cross-claim pair weight (all >= 0)."""
    spread: bool
    """Packing policy; True rewards emptier nodes, False (binpack) fuller ones."""


class SearchRequests(NamedTuple):
    """One pod's requests for `best_sets` (R requests, C constraints). Build it with `search_requests`."""

    candidates: np.ndarray
    """uint8 (R, rows); 1 where the row may serve request r (selector, free, untainted)."""
    counts: np.ndarray
    """int64 (R,), devices each request needs; K = sum(counts) <= 64."""
    claim_of: np.ndarray
    """int64 (R,), the claim index of each request (for the cross-claim pair weight)."""
    constraint_kind: np.ndarray
    """int64 (C,), 0 matchAttribute, 1 distinctAttribute."""
    constraint_members: np.ndarray
    """uint8 (C, R), 1 where request r is subject to constraint c."""
    constraint_values: np.ndarray
    """int32 (C, rows), interned attribute value; -1: the row lacks it."""


class PartitionInputs(NamedTuple):
    """The rows' parent groups and counter shares for `partition_terms`. Build it with `partition_inputs`."""

    node_start: np.ndarray
    """int64 (N + 1,), as in `TopologyInputs`."""
    row_group: np.ndarray
    """int64 (rows,), each row's parent group (-1: no partition)."""
    row_cost: np.ndarray
    """float64 (rows, C), the share of each of its group's counters a row consumes."""
    group_counters: np.ndarray
    """int64 (G,), how many cost columns group g uses (0: a group without counters)."""
    group_free: np.ndarray
    """float64 (G, C), the share of each counter not held by allocated devices."""
    group_used: np.ndarray
    """int64 (G,), how many of the group's rows are allocated."""
    free: np.ndarray
    """uint8 (rows,), 1 where the row is not allocated."""


#: (dtype, dimensions) of every array the kernels take, by name: the builders convert to it, the
#: checks hold records and call arguments to it.
LAYOUT: dict[str, tuple[type, int]] = {
    "node_start": (np.int64, 1),
    "nodes": (np.int64, 1),
    "coords": (np.int32, 2),
    "free": (np.uint8, 1),
    "relevant": (np.uint8, 1),
    "level_distance": (np.float64, 1),
    "link_offset": (np.int64, 1),
    "link_distance": (np.float64, 1),
    "weights": (np.float64, 1),
    "candidates": (np.uint8, 2),
    "counts": (np.int64, 1),
    "claim_of": (np.int64, 1),
    "constraint_kind": (np.int64, 1),
    "constraint_members": (np.uint8, 2),
    "constraint_values": (np.int32, 2),
    "sets": (np.int64, 2),
    "set_claim": (np.int64, 1),
    "row_group": (np.int64, 1),
    "row_cost": (np.float64, 2),
    "group_counters": (np.int64, 1),
    "group_free": (np.float64, 2),
    "group_used": (np.int64, 1),
}

_Record = TypeVar("_Record", TopologyInputs, SearchRequests, PartitionInputs)


def _converted(record: _Record) -> _Record:
    """The record with each array converted to its `LAYOUT` dtype, C-contiguous (masks of bool
    become uint8, sequences of numbers arrays); arrays that already conform are not copied."""
    values: list[Any] = [
        np.ascontiguousarray(value, dtype=LAYOUT[name][0]) if name in LAYOUT else value
        for name, value in zip(record._fields, record, strict=True)
    ]
    return type(record)(*values)


def need_fields(record: TopologyInputs | SearchRequests | PartitionInputs) -> None:
    """`need` on every array field of the record, in field order."""
    for name, value in zip(record._fields, record, strict=True):
        if name in LAYOUT:
            need(name, value, *LAYOUT[name])


def topology_inputs(
    *,
    node_start: np.ndarray,
    coords: np.ndarray,
    free: np.ndarray,
    relevant: np.ndarray,
    level_distance: Sequence[float] | np.ndarray,
    link_offset: np.ndarray,
    link_distance: np.ndarray,
    weights: Sequence[float] | np.ndarray,
    spread: bool,
) -> TopologyInputs:
    """The `TopologyInputs` record, each array converted to the dtype the kernels take (`_converted`)."""
    given = TopologyInputs(
        node_start,
        coords,
        free,
        relevant,
        np.asarray(level_distance),
        link_offset,
        link_distance,
        np.asarray(weights),
        bool(spread),
    )
    return _converted(given)


def search_requests(
    *,
    candidates: np.ndarray,
    counts: np.ndarray,
    claim_of: np.ndarray,
    constraint_kind: np.ndarray,
    constraint_members: np.ndarray,
    constraint_values: np.ndarray,
) -> SearchRequests:
    """The `SearchRequests` record, each array converted to the dtype the kernels take (`_converted`)."""
    return _converted(
        SearchRequests(candidates, counts, claim_of, constraint_kind, constraint_members, constraint_values)
    )


def partition_inputs(
    *,
    node_start: np.ndarray,
    row_group: np.ndarray,
    row_cost: np.ndarray,
    group_counters: np.ndarray,
    group_free: np.ndarray,
    group_used: np.ndarray,
    free: np.ndarray,
) -> PartitionInputs:
    """The `PartitionInputs` record, each array converted to the dtype the kernels take (`_converted`)."""
    return _converted(
        PartitionInputs(node_start, row_group, row_cost, group_counters, group_free, group_used, free)
    )


def need(name: str, value: object, dtype: type, ndim: int) -> np.ndarray:
    """The array, after checking its type, dtype, dimensions and C-contiguity (the kernels index flat)."""
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(value).__name__}")
    if value.dtype != dtype:
        raise TypeError(f"{name} must have dtype {np.dtype(dtype).name}, got {value.dtype.name}")
    if value.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {value.shape}")
    if not value.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    return value


def check_topology(topology: TopologyInputs, nodes: np.ndarray) -> int:
    """Check the arguments both entry points share; returns the number of rows."""
    node_start, coords, free, relevant, level_distance, link_offset, link_distance, weights, _ = topology
    need("node_start", node_start, *LAYOUT["node_start"])
    need("nodes", nodes, *LAYOUT["nodes"])
    need_fields(topology)
    rows = coords.shape[0]
    n_nodes = node_start.shape[0] - 1
    if n_nodes < 0:
        raise ValueError("node_start must have N + 1 entries")
    if coords.shape[1] != NODE_LEVEL:
        raise ValueError(f"coords must have shape (rows, {NODE_LEVEL}), got {coords.shape}")
    if free.shape[0] != rows or relevant.shape[0] != rows:
        raise ValueError(f"free and relevant must have {rows} entries (one per row)")
    sizes = np.diff(node_start)
    if n_nodes and (node_start[0] < 0 or node_start[-1] > rows or np.any(sizes < 0)):
        raise ValueError(f"node_start must be non-decreasing within [0, {rows}]")
    if nodes.size and (nodes.min() < 0 or nodes.max() >= n_nodes):
        raise ValueError(f"nodes must index node_start (0 <= node < {n_nodes})")
    if level_distance.shape[0] != NODE_LEVEL + 1:
        raise ValueError(f"level_distance must have {NODE_LEVEL + 1} entries")
    if weights.shape[0] != 4 or not np.all(np.isfinite(weights)) or np.any(weights < 0):
        raise ValueError("weights must be 4 finite numbers >= 0 (locality, fragmentation, packing, cross)")
    if link_offset.shape[0] != n_nodes:
        raise ValueError(f"link_offset must have {n_nodes} entries (one per node)")
    linked = link_offset >= 0
    if np.any(linked) and np.any(link_offset[linked] + sizes[linked] ** 2 > link_distance.shape[0]):
        raise ValueError("link_offset points past the end of link_distance (needs rows_of_node^2 entries)")
    return int(rows)


def check_sets(node_start: np.ndarray, nodes: np.ndarray, sets: np.ndarray) -> None:
    """Every entry of sets[m] is -1 or a row of node nodes[m]."""
    if sets.size:
        lo = node_start[nodes][:, None]
        hi = node_start[nodes + 1][:, None]
        if not np.all((sets == -1) | ((sets >= lo) & (sets < hi))):
            raise ValueError("every entry of sets[m] must be -1 or a row of node nodes[m]")
