"""Score terms of one-device sets, many candidate rows at once: the one-device MIG choice.

A pod asking for one device may take any free partition that fits its parent's counters
(`extender.core.scoring.partition_choices`). Every candidate row is a set of one, and its five score
terms are what `topology.score_sets` (locality, fragmentation, packing) and
`topology.partition_terms` (partition packing, partition headroom) give that set, with the same
floating-point operations in the same order, so the terms are equal, not just close
(tests/kernels/test_single_partition.py holds them equal on random fleets).

Why a kernel of its own: the general kernels score a set by scanning every row of its node once per
topology level and twice per partition term. For a one-device set most of that is fixed: locality
is 1 (no pairs), the set takes exactly its own row, and the rows that can fit after it are the rows
of its own parent group. Here each candidate scans the node's rows once for all four levels and only
its group's rows (through a row list per group) for the partition terms; the partitions of one
GPU share the node scan, and the group's largest fitting row before the set is found once per
group (its top two sizes: without the candidate it is the largest, unless the candidate is the only
row that size).

Inputs are the same arrays as the general kernels', plus `group_start` / `group_rows` (the rows of
each group, largest first; `group_row_lists` with the costs): a group's largest fitting row is then
its first fitting one, so the scans of a group stop early. There is no plain-Python twin: while
the kernels warm up (`kernels.warming`) the caller uses the general entry points, whose twins
answer.
"""

from __future__ import annotations

import time

import numpy as np
from numba import njit, prange

from kernels.topology.partition import row_fit
from kernels.topology.score import fragmentation_packing

#: Topology levels in `coords` (nvlink, pcie, numa, socket), as `topology.NODE_LEVEL`.
LEVELS = 4


def group_row_lists(
    row_group: np.ndarray, num_groups: int, row_cost: np.ndarray | None = None,
    group_counters: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(group_start int64 [G + 1], group_rows int64): the rows of group g are
    `group_rows[group_start[g]:group_start[g + 1]]`. Rows without a group are left out.

    Without costs the rows of a group are in row order. With `row_cost` and `group_counters` they
    are by size, largest first (ties in row order): a row's size is the sum of its group's counter
    costs in column order divided by their number, the very float `row_fit` gives, so the first row
    of a group that fits is the largest that fits (the kernel stops there)."""
    grouped = np.flatnonzero(row_group >= 0)
    if row_cost is None or group_counters is None:
        order = np.argsort(row_group[grouped], kind="stable")
    else:
        sizes = _row_sizes(
            grouped.astype(np.int64), np.ascontiguousarray(row_group, dtype=np.int64),
            np.ascontiguousarray(row_cost, dtype=np.float64),
            np.ascontiguousarray(group_counters, dtype=np.int64),
        )  # fmt: skip
        order = np.lexsort((-sizes, row_group[grouped]))  # by group, then size descending, stable
    counts = np.bincount(row_group[grouped], minlength=num_groups)
    start = np.zeros(num_groups + 1, dtype=np.int64)
    np.cumsum(counts, out=start[1:])
    return start, grouped[order].astype(np.int64)


@njit(cache=True)
def _row_sizes(
    rows: np.ndarray, row_group: np.ndarray, row_cost: np.ndarray, group_counters: np.ndarray
) -> np.ndarray:
    """Each row's size as `_size_if_fits` computes it (sequential sum over the group's counters)."""
    out = np.empty(rows.shape[0])
    for i in range(rows.shape[0]):
        x = rows[i]
        ncols = group_counters[row_group[x]]
        total = 0.0
        for j in range(ncols):
            total += row_cost[x, j]
        out[i] = total / ncols if ncols > 0 else 1.0
    return out


@njit(cache=True, inline="always")
def _largest_fitting(
    row: int, lo: int, hi: int, g: int, avail: np.ndarray, ncols: int, group_start: np.ndarray,
    group_rows: np.ndarray, free: np.ndarray, row_cost: np.ndarray,
) -> tuple[float, int]:  # fmt: skip
    """`topology._largest_fitting` for the set {row}: over the free rows of group g but row itself.
    The group's rows are largest first (`group_row_lists` with costs), so the first that fits is
    the largest; the count returned is 1 then (the caller asks only whether any fits)."""
    for p in range(group_start[g], group_start[g + 1]):
        x = group_rows[p]
        if x < lo or x >= hi or free[x] == 0 or x == row:
            continue
        fits, total = row_fit(x, avail, ncols, row_cost)
        if fits:
            return (total / ncols if ncols > 0 else 1.0), 1
    return 0.0, 0


@njit(cache=True)
def _terms(
    i: int, first: int, rows: np.ndarray, row_node: np.ndarray, node_start: np.ndarray, coords: np.ndarray,
    free: np.ndarray, relevant: np.ndarray, spread: bool, row_group: np.ndarray, row_cost: np.ndarray,
    group_counters: np.ndarray, group_free: np.ndarray, group_used: np.ndarray,
    group_start: np.ndarray, group_rows: np.ndarray, before: np.ndarray, after: np.ndarray,
    gsize: np.ndarray, gfree: np.ndarray, totals: np.ndarray, tops: np.ndarray, tops_for: np.ndarray,
    out: np.ndarray,
) -> None:  # fmt: skip
    """The five terms of the set {rows[i]} into out[i] (before, after: scratch). gsize, gfree and
    totals (relevant and free relevant rows of the node) carry over from rows[i - 1] when that row
    is in the same block (from `first`), on the same node and with the same coordinates (the
    partitions of one GPU), else are counted here."""
    row = rows[i]
    n = row_node[row]
    lo = node_start[n]
    hi = node_start[n + 1]
    # locality, fragmentation and packing, as topology._score_node and _combine for a set of one
    nrel = 1 if relevant[row] != 0 else 0
    same = i > first and row_node[rows[i - 1]] == n
    for level in range(LEVELS):
        same = same and coords[rows[i - 1], level] == coords[row, level]
    if not same:
        gsize[:] = 0
        gfree[:] = 0
        total = 0
        free_total = 0
        for x in range(lo, hi):
            if relevant[x] == 0:
                continue
            total += 1
            if free[x] != 0:
                free_total += 1
            for level in range(LEVELS):
                g = coords[row, level]
                if g != -1 and coords[x, level] == g:
                    gsize[level] += 1
                    if free[x] != 0:
                        gfree[level] += 1
        totals[0] = total
        totals[1] = free_total
    total = totals[0]
    free_total = totals[1]
    touched = 0
    broken = 0
    for level in range(LEVELS):
        if coords[row, level] == -1:
            continue
        touched += 1
        if gfree[level] == gsize[level] and gfree[level] > 1:
            broken += 1
    fragmentation, packing = fragmentation_packing(touched, broken, total, free_total, nrel, spread)
    out[i, 0] = 1.0
    out[i, 1] = fragmentation
    out[i, 2] = packing
    # the partition terms, as topology._partition_node for a set of one
    g = row_group[row]
    if g < 0:
        out[i, 3] = np.nan
        out[i, 4] = np.nan
        return
    ncols = group_counters[g]
    for j in range(ncols):
        before[j] = group_free[g, j]
        after[j] = group_free[g, j]
    for c in range(ncols):
        after[c] -= row_cost[row, c]
    largest_after, left = _largest_fitting(
        row, lo, hi, g, after, ncols, group_start, group_rows, free, row_cost
    )
    opened = 1 if group_used[g] == 0 and left > 0 else 0
    out[i, 3] = 1.0 - opened / 1
    if ncols == 0:
        out[i, 4] = 1.0
        return
    headroom = 1.0
    if left > 0:
        # largest_before: the group's largest fitting free row but this one; the top two sizes
        # are counted once per group and block (`tops` holds them for group `tops_for[0]`)
        if tops_for[0] != g:
            _top_sizes(lo, hi, g, before, ncols, group_start, group_rows, free, row_cost, tops)
            tops_for[0] = g
        largest_before = tops[0]
        if tops[1] == 1.0 and free[row] != 0:
            fits, size = _size_if_fits(row, before, ncols, row_cost)
            if fits and size == tops[0]:
                largest_before = tops[2]  # this row is the only largest: the next one counts
        if largest_before > 0.0:
            headroom = min(1.0, largest_after / largest_before)
    out[i, 4] = (0.0 + headroom) / 1


@njit(cache=True, inline="always")
def _size_if_fits(x: int, avail: np.ndarray, ncols: int, row_cost: np.ndarray) -> tuple[bool, float]:
    """Whether row x's costs fit avail, and its size: as in `_largest_fitting`, to the bit."""
    fits, total = row_fit(x, avail, ncols, row_cost)
    if not fits:
        return False, 0.0
    return True, total / ncols if ncols > 0 else 1.0


@njit(cache=True)
def _top_sizes(
    lo: int, hi: int, g: int, avail: np.ndarray, ncols: int, group_start: np.ndarray,
    group_rows: np.ndarray, free: np.ndarray, row_cost: np.ndarray, tops: np.ndarray,
) -> None:  # fmt: skip
    """tops = (largest size, how many rows have it, second largest size) over the free rows of
    group g whose costs fit avail: `_largest_fitting` without one row is the largest, unless that
    row is the only one with it (then the second; 0.0 when nothing else fits). The group's rows are
    largest first, so the scan stops at the first fitting row smaller than the largest."""
    top = 0.0
    count = 0
    second = 0.0
    for p in range(group_start[g], group_start[g + 1]):
        x = group_rows[p]
        if x < lo or x >= hi or free[x] == 0:
            continue
        fits, size = _size_if_fits(x, avail, ncols, row_cost)
        if not fits:
            continue
        if count == 0:
            top = size
            count = 1
        elif size == top:
            count += 1
        else:
            second = size
            break
    tops[0] = top
    tops[1] = float(count)
    tops[2] = second


@njit(parallel=True, cache=True)
def _terms_parallel(
    rows: np.ndarray, row_node: np.ndarray, node_start: np.ndarray, coords: np.ndarray, free: np.ndarray,
    relevant: np.ndarray, spread: bool, row_group: np.ndarray, row_cost: np.ndarray,
    group_counters: np.ndarray, group_free: np.ndarray, group_used: np.ndarray,
    group_start: np.ndarray, group_rows: np.ndarray, out: np.ndarray,
) -> None:  # fmt: skip
    """prange over blocks of candidates; each block owns its scratch and writes only its own rows."""
    width = max(row_cost.shape[1], 1)
    block = 256
    n_blocks = (rows.shape[0] + block - 1) // block
    for b in prange(n_blocks):
        before = np.zeros(width)
        after = np.zeros(width)
        gsize = np.zeros(LEVELS, dtype=np.int64)
        gfree = np.zeros(LEVELS, dtype=np.int64)
        totals = np.zeros(2, dtype=np.int64)
        tops = np.zeros(3)
        tops_for = np.full(1, -1, dtype=np.int64)
        first = b * block
        for i in range(first, min(rows.shape[0], (b + 1) * block)):
            _terms(
                i, first, rows, row_node, node_start, coords, free, relevant, spread, row_group, row_cost,
                group_counters, group_free, group_used, group_start, group_rows, before, after, gsize,
                gfree, totals, tops, tops_for, out,
            )  # fmt: skip


def single_terms(
    *,
    rows: np.ndarray,
    row_node: np.ndarray,
    node_start: np.ndarray,
    coords: np.ndarray,
    free: np.ndarray,
    relevant: np.ndarray,
    spread: bool,
    row_group: np.ndarray,
    row_cost: np.ndarray,
    group_counters: np.ndarray,
    group_free: np.ndarray,
    group_used: np.ndarray,
    group_start: np.ndarray,
    group_rows: np.ndarray,
) -> np.ndarray:
    """float64 (M, 5) per candidate row: (locality, fragmentation, packing, partition packing,
    partition headroom) of the set {rows[m]}, equal to `topology.score_sets`' parts and
    `topology.partition_terms` for that set (NaN partition terms for a row without a group).

    Arrays are converted to the kernel's dtypes here: rows, row_node, node_start, row_group,
    group_counters, group_used, group_start and group_rows int64; coords int32; free and relevant
    uint8; row_cost and group_free float64 (C-contiguous).
    """
    out = np.empty((len(rows), 5), dtype=np.float64)
    if not len(rows):
        return out
    _terms_parallel(
        np.ascontiguousarray(rows, dtype=np.int64),
        np.ascontiguousarray(row_node, dtype=np.int64),
        np.ascontiguousarray(node_start, dtype=np.int64),
        np.ascontiguousarray(coords, dtype=np.int32),
        np.ascontiguousarray(free, dtype=np.uint8),
        np.ascontiguousarray(relevant, dtype=np.uint8),
        bool(spread),
        np.ascontiguousarray(row_group, dtype=np.int64),
        np.ascontiguousarray(row_cost, dtype=np.float64),
        np.ascontiguousarray(group_counters, dtype=np.int64),
        np.ascontiguousarray(group_free, dtype=np.float64),
        np.ascontiguousarray(group_used, dtype=np.int64),
        np.ascontiguousarray(group_start, dtype=np.int64),
        np.ascontiguousarray(group_rows, dtype=np.int64),
        out,
    )
    return out


def warm_up() -> float:
    """Compile (or load from numba's cache) the kernel on a tiny input; returns the seconds taken."""
    started = time.perf_counter()
    row_group = np.array([0, 0, -1], dtype=np.int64)
    start, grouped = group_row_lists(row_group, 1, np.full((3, 1), 0.5), np.ones(1, dtype=np.int64))
    single_terms(
        rows=np.array([0], dtype=np.int64),
        row_node=np.zeros(3, dtype=np.int64),
        node_start=np.array([0, 3], dtype=np.int64),
        coords=np.zeros((3, LEVELS), dtype=np.int32),
        free=np.ones(3, dtype=np.uint8),
        relevant=np.ones(3, dtype=np.uint8),
        spread=False,
        row_group=row_group,
        row_cost=np.full((3, 1), 0.5),
        group_counters=np.ones(1, dtype=np.int64),
        group_free=np.ones((1, 1)),
        group_used=np.zeros(1, dtype=np.int64),
        group_start=start,
        group_rows=grouped,
    )
    return time.perf_counter() - started
