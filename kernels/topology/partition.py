"""`partition_terms`: how a set cuts into partitionable devices (MIG slices), numba beside its twin.

What this module owns: the third kernel-twin pair (`partition_terms` / `partition_terms_reference`).
For a given set per node, over the rows' parent groups (one physical GPU: rows sharing a counter set,
or naming one parent) with per-row counter shares and per-group free shares, (1) partition packing
`1 - opened / taken` (groups with nothing allocated that the set cuts into, per partition row taken)
and (2) partition headroom, the mean over touched groups with counters of `largest_after /
largest_before`, the largest size (mean counter share) of a free row of the group still fitting the
free counters after and before the set. NaN for both when the set takes no partition. Per set
O(K * rows of the node * counters); `partition_terms` documents the details.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from kernels import warming
from kernels.checked import CheckedOnce
from kernels.topology.inputs import BLOCK, LAYOUT, PartitionInputs, check_sets, need, need_fields

PARTITION_EPSILON = 1e-9
"""Slack of the partition terms' fit check (costs are float shares of exact counter values)."""


@njit(cache=True, inline="always")
def row_fit(x: int, avail: np.ndarray, ncols: int, row_cost: np.ndarray) -> tuple[bool, float]:
    """Whether each counter cost of row x fits `avail` (up to PARTITION_EPSILON), and their sum.
    Shared with `kernels.single_partition`."""
    total = 0.0
    for j in range(ncols):
        c = row_cost[x, j]
        if c > avail[j] + PARTITION_EPSILON:
            return False, 0.0
        total += c
    return True, total


@njit(cache=True, inline="always")
def _largest_fitting(
    lo: int, size: int, g: int, avail: np.ndarray, ncols: int, sets: np.ndarray, m: int,
    row_group: np.ndarray, row_cost: np.ndarray, free: np.ndarray,
) -> tuple[float, int]:  # fmt: skip
    """(largest size, how many fit) over the free rows of group g not in sets[m] whose costs fit avail.

    A row's size is its mean share over the group's ncols counters (1 for a group without counters).
    """
    largest = 0.0
    fitting = 0
    for x in range(lo, lo + size):
        if row_group[x] != g or free[x] == 0:
            continue
        taken = False
        for k in range(sets.shape[1]):
            if sets[m, k] == x:
                taken = True
                break
        if taken:
            continue
        fits, total = row_fit(x, avail, ncols, row_cost)
        if fits:
            fitting += 1
            largest = max(largest, total / ncols if ncols > 0 else 1.0)
    return largest, fitting


@njit(cache=True)
def _partition_node(
    m: int, node_start: np.ndarray, nodes: np.ndarray, sets: np.ndarray, row_group: np.ndarray,
    row_cost: np.ndarray, group_counters: np.ndarray, group_free: np.ndarray, group_used: np.ndarray,
    free: np.ndarray, before: np.ndarray, after: np.ndarray, out: np.ndarray,
) -> None:  # fmt: skip
    """The two partition terms of sets[m] (NaN, NaN when the set takes no partition)."""
    n = nodes[m]
    lo = node_start[n]
    size = node_start[n + 1] - lo
    k_total = sets.shape[1]
    parts_taken = 0
    opened = 0
    headroom_sum = 0.0
    counted = 0
    for k in range(k_total):
        row = sets[m, k]
        if row < 0:
            continue
        g = row_group[row]
        if g < 0:
            continue
        parts_taken += 1
        seen = False
        for j in range(k):
            if sets[m, j] >= 0 and row_group[sets[m, j]] == g:
                seen = True
                break
        if seen:
            continue
        ncols = group_counters[g]
        for j in range(ncols):
            before[j] = group_free[g, j]
            after[j] = group_free[g, j]
        for j in range(k, k_total):
            other = sets[m, j]
            if other >= 0 and row_group[other] == g:
                for c in range(ncols):
                    after[c] -= row_cost[other, c]
        largest_after, left = _largest_fitting(lo, size, g, after, ncols, sets, m, row_group, row_cost, free)
        if group_used[g] == 0 and left > 0:
            opened += 1  # a fresh parent cut into, not taken whole
        if ncols == 0:
            continue
        largest_before, _ = _largest_fitting(lo, size, g, before, ncols, sets, m, row_group, row_cost, free)
        headroom = 1.0
        if left > 0 and largest_before > 0.0:
            headroom = min(1.0, largest_after / largest_before)
        headroom_sum += headroom
        counted += 1
    if parts_taken == 0:
        out[m, 0] = np.nan
        out[m, 1] = np.nan
        return
    out[m, 0] = 1.0 - opened / parts_taken
    out[m, 1] = headroom_sum / counted if counted > 0 else 1.0


@njit(parallel=True, cache=True)
def _partition_parallel(
    node_start: np.ndarray, nodes: np.ndarray, sets: np.ndarray, row_group: np.ndarray, row_cost: np.ndarray,
    group_counters: np.ndarray, group_free: np.ndarray, group_used: np.ndarray, free: np.ndarray,
    out: np.ndarray,
) -> None:  # fmt: skip
    """prange over nodes in blocks; each block owns its scratch and writes only its own rows."""
    n_nodes = nodes.shape[0]
    width = max(row_cost.shape[1], 1)
    n_blocks = (n_nodes + BLOCK - 1) // BLOCK
    for b in prange(n_blocks):
        before = np.zeros(width)
        after = np.zeros(width)
        for m in range(b * BLOCK, min(n_nodes, (b + 1) * BLOCK)):
            _partition_node(
                m, node_start, nodes, sets, row_group, row_cost, group_counters, group_free, group_used,
                free, before, after, out,
            )  # fmt: skip


def _finite(values: np.ndarray) -> bool:
    """Every entry finite: min and max carry a NaN, and show an infinity (two passes, no temporary
    mask: this runs on every call over all rows' costs)."""
    return not values.size or bool(np.isfinite(values.min()) and np.isfinite(values.max()))


def _check_partitions(inputs: PartitionInputs, nodes: np.ndarray, sets: np.ndarray) -> None:
    """Check `partition_terms` arguments (the kernel and the twin raise the same errors)."""
    node_start, row_group, row_cost, group_counters, group_free, group_used, free = inputs
    need("node_start", node_start, *LAYOUT["node_start"])
    need("nodes", nodes, *LAYOUT["nodes"])
    need("sets", sets, *LAYOUT["sets"])
    need_fields(inputs)
    rows = row_group.shape[0]
    groups = group_counters.shape[0]
    n_nodes = node_start.shape[0] - 1
    if n_nodes < 0:
        raise ValueError("node_start must have N + 1 entries")
    if row_cost.shape[0] != rows or free.shape[0] != rows:
        raise ValueError(f"row_cost and free must have {rows} rows (one per row of row_group)")
    static = (node_start, row_group, row_cost, group_counters)
    again = _CHECKED.needed(static)  # row checks: see `kernels.checked`
    if n_nodes and (
        node_start[0] < 0 or node_start[-1] > rows or (again and np.any(np.diff(node_start) < 0))
    ):
        raise ValueError(f"node_start must be non-decreasing within [0, {rows}]")
    if nodes.size and (nodes.min() < 0 or nodes.max() >= n_nodes):
        raise ValueError(f"nodes must index node_start (0 <= node < {n_nodes})")
    if sets.shape[0] != nodes.shape[0]:
        raise ValueError(f"sets must have one row per node ({nodes.shape[0]}), got {sets.shape[0]}")
    check_sets(node_start, nodes, sets)
    if group_free.shape != (groups, row_cost.shape[1]) or group_used.shape[0] != groups:
        raise ValueError(
            f"group_free must have shape ({groups}, {row_cost.shape[1]}) and group_used {groups} entries"
        )
    if again and groups and (group_counters.min() < 0 or group_counters.max() > row_cost.shape[1]):
        raise ValueError(f"group_counters must be within [0, {row_cost.shape[1]}] (the cost columns)")
    if again and rows and row_group.max() >= groups:
        raise ValueError(f"row_group entries must be groups (0 <= group < {groups}) or -1")
    if not ((not again or _finite(row_cost)) and _finite(group_free)):
        raise ValueError("row_cost and group_free must be finite")
    _CHECKED.passed(static)


_CHECKED = CheckedOnce()


def partition_terms(inputs: PartitionInputs, *, nodes: np.ndarray, sets: np.ndarray) -> np.ndarray:
    """The partition terms of one given set per node, in parallel (numba).

    While the kernels compile in the background (`kernels.warming`), `partition_terms_reference`
    answers.

    Args:
        inputs: the rows' parent groups, counter shares and free rows (see `PartitionInputs`).
        nodes: int64 (M,), the nodes of the sets (indices into node_start).
        sets: int64 (M, K), rows of node nodes[m] or -1 (as for `score_sets`).

    Returns:
        float64 (M, 2): (partition packing, partition headroom), both NaN where the set takes no
        partition. Packing is `1 - opened / taken` (taken: the set's partition rows; opened: the
        groups it touches that had nothing allocated and still have a free row that fits after the
        set: a parent cut into rather than taken whole). Headroom is the mean, over the touched groups
        with counters, of `largest_after / largest_before` (1 when nothing fits after the set or
        before it): `largest` is the
        largest size (mean share over the group's counters) of a free row of the group, not in the
        set, whose costs fit the group's free counters, before and after the set's costs are taken.
    """
    if not warming.use_kernels():
        return partition_terms_reference(inputs, nodes=nodes, sets=sets)
    return _partition_terms_kernel(inputs, nodes=nodes, sets=sets)


def _partition_terms_kernel(inputs: PartitionInputs, *, nodes: np.ndarray, sets: np.ndarray) -> np.ndarray:
    """`partition_terms` on the numba kernel, whatever `kernels.warming` says (the warm-up calls this)."""
    _check_partitions(inputs, nodes, sets)
    out = np.zeros((nodes.shape[0], 2))
    if nodes.shape[0]:
        p = inputs
        _partition_parallel(
            p.node_start, nodes, sets, p.row_group, p.row_cost, p.group_counters, p.group_free,
            p.group_used, p.free, out,
        )  # fmt: skip
    return out


def partition_terms_reference(inputs: PartitionInputs, *, nodes: np.ndarray, sets: np.ndarray) -> np.ndarray:
    """Plain Python twin of `partition_terms`, serial over nodes, from the definitions."""
    _check_partitions(inputs, nodes, sets)
    node_start, row_group, row_cost, group_counters, group_free, group_used, free = inputs
    out = np.zeros((nodes.shape[0], 2))
    for m in range(nodes.shape[0]):
        lo, hi = int(node_start[nodes[m]]), int(node_start[nodes[m] + 1])
        chosen = [int(r) for r in sets[m] if r >= 0]
        taken = [r for r in chosen if row_group[r] >= 0]
        if not taken:
            out[m] = np.nan
            continue
        groups = list(dict.fromkeys(int(row_group[r]) for r in taken))  # first-seen order
        opened = 0
        headrooms: list[float] = []
        for g in groups:
            ncols = int(group_counters[g])
            before = [float(v) for v in group_free[g, :ncols]]
            after = list(before)
            for r in taken:
                if row_group[r] == g:
                    after = [a - float(c) for a, c in zip(after, row_cost[r, :ncols], strict=True)]
            others = [x for x in range(lo, hi) if row_group[x] == g and free[x] and x not in chosen]

            def fitting(avail: list[float], others: list[int] = others, ncols: int = ncols) -> list[float]:
                """Sizes (mean counter share, 1 without counters) of the other free rows that fit."""
                return [
                    sum(row_cost[x, :ncols].tolist()) / ncols if ncols else 1.0
                    for x in others
                    if all(row_cost[x, j] <= avail[j] + PARTITION_EPSILON for j in range(ncols))
                ]

            left = fitting(after)
            if group_used[g] == 0 and left:
                opened += 1
            if ncols == 0:
                continue
            big_before, big_after = max(fitting(before), default=0.0), max(left, default=0.0)
            headrooms.append(min(1.0, big_after / big_before) if left and big_before > 0 else 1.0)
        out[m, 0] = 1.0 - opened / len(taken)
        out[m, 1] = sum(headrooms) / len(headrooms) if headrooms else 1.0
    return out
