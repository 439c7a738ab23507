"""`score_sets`: the score of one given set of rows per node (numba), beside its twin.

What this module owns: the definition of a set's score, in three forms: the numba primitives
`pair_distance` and `combine` (the search in `search.py` inlines them too), the `score_sets`
kernel that scores given sets (e.g. a first-fit allocation), and `RefNode`, the plain-Python view
of one node that both twins (`score_sets_reference` here, `best_sets_reference` in `search.py`)
score with, from the definitions.

Distance of two rows `i < j` of node `n` (`a`, `b` their positions in the node, `size` its row count):
`link_distance[link_offset[n] + a * size + b]` if the node has a link matrix and that entry is not NaN
(the upper triangle is read: pass a symmetric matrix); else `level_distance[l]` for the most local
level `l` where both rows have the same known coordinate; else `level_distance[4]` (same node).

Score of a set S (every term in [0, 1], higher is better):
- locality: `1 - (mean - d_min) / (d_max - d_min)` clamped to [0, 1], where mean is the pair-weighted
  mean distance over unordered pairs of S (weight 1 for two rows of one claim, `weights[3]` across
  claims), `d_min = level_distance[0]`, `d_max = level_distance[4]`; 1 without pairs, when the weights
  sum to 0, or when `d_max <= d_min`;
- fragmentation: `1 - broken / touched` over the groups (level, coordinate) that S touches; a group is
  broken when all of its relevant rows were free and S takes some but not all of them; 1 if S touches
  nothing;
- packing: `used_after / T` (binpack) or `1 - used_after / T` (spread) with T the relevant rows of the
  node, `used_after = (T - F) + |S ∩ relevant|`, F the free relevant rows; 0.5 when T is 0;
- score: `(w0 * locality + w1 * fragmentation + w2 * packing) / (w0 + w1 + w2)`, 0 if the sum is 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit, prange

from kernels import warming
from kernels.topology.inputs import LAYOUT, NODE_LEVEL, TopologyInputs, check_sets, check_topology, need


@njit(cache=True, inline="always")
def pair_distance(
    lo: int, size: int, off: int, a: int, b: int, coords: np.ndarray, level_distance: np.ndarray,
    link_distance: np.ndarray,
) -> float:  # fmt: skip
    """Distance of node positions a and b (see the module docstring); reads the link upper triangle."""
    if a > b:
        a, b = b, a
    if off >= 0:
        d = link_distance[off + a * size + b]
        if not np.isnan(d):
            return float(d)
    for level in range(4):
        c = coords[lo + a, level]
        if c != -1 and c == coords[lo + b, level]:
            return float(level_distance[level])
    return float(level_distance[4])


@njit(cache=True, inline="always")
def fragmentation_packing(
    touched: int, broken: int, total: int, free_total: int, nrel: int, spread: bool
) -> tuple[float, float]:
    """(fragmentation, packing) of a set: the share of touched levels it leaves whole, and how full
    the node is with it (inverted when spreading). Shared with `kernels.single_partition`."""
    fragmentation = 1.0
    if touched > 0:
        fragmentation = 1.0 - broken / touched
    packing = 0.5
    if total > 0:
        packing = ((total - free_total) + nrel) / total
        if spread:
            packing = 1.0 - packing
    return fragmentation, packing


@njit(cache=True, inline="always")
def combine(
    sum_wd: float, sum_w: float, touched: int, broken: int, total: int, free_total: int, nrel: int,
    level_distance: np.ndarray, weights: np.ndarray, spread: bool,
) -> tuple[float, float, float, float]:  # fmt: skip
    """(score, locality, fragmentation, packing) from a set's running sums and counts."""
    locality = 1.0
    span = level_distance[4] - level_distance[0]
    if sum_w != 0.0 and span > 0.0:
        locality = 1.0 - (sum_wd / sum_w - level_distance[0]) / span
        locality = min(1.0, max(0.0, locality))
    fragmentation, packing = fragmentation_packing(touched, broken, total, free_total, nrel, spread)
    wsum = weights[0] + weights[1] + weights[2]
    score = 0.0
    if wsum > 0.0:
        score = (weights[0] * locality + weights[1] * fragmentation + weights[2] * packing) / wsum
    return score, locality, fragmentation, packing


@njit(cache=True)
def _score_node(
    m: int, node_start: np.ndarray, nodes: np.ndarray, sets: np.ndarray, set_claim: np.ndarray,
    coords: np.ndarray, free: np.ndarray, relevant: np.ndarray, level_distance: np.ndarray,
    link_offset: np.ndarray, link_distance: np.ndarray, weights: np.ndarray, spread: bool,
    out_score: np.ndarray, out_parts: np.ndarray,
) -> None:  # fmt: skip
    """Score sets[m] from scratch (no scratch arrays: O(4 * K * (rows + K)) with K small)."""
    n = nodes[m]
    lo = node_start[n]
    size = node_start[n + 1] - lo
    off = link_offset[n]
    cross = weights[3]
    k_total = sets.shape[1]
    present = 0
    sum_wd = 0.0
    sum_w = 0.0
    nrel = 0
    for k in range(k_total):
        row = sets[m, k]
        if row < 0:
            continue
        present += 1
        if relevant[row] != 0:
            nrel += 1
        dwd = 0.0
        dw = 0.0
        for j in range(k):
            other = sets[m, j]
            if other < 0:
                continue
            w = 1.0 if set_claim[j] == set_claim[k] else cross
            dwd += w * pair_distance(
                lo, size, off, other - lo, row - lo, coords, level_distance, link_distance
            )
            dw += w
        sum_wd += dwd
        sum_w += dw
    if present == 0:
        out_score[m] = 0.0
        for p in range(3):
            out_parts[m, p] = 0.0
        return
    touched = 0
    broken = 0
    for level in range(4):
        for k in range(k_total):
            row = sets[m, k]
            if row < 0:
                continue
            g = coords[row, level]
            if g == -1:
                continue
            seen = False
            for j in range(k):
                if sets[m, j] >= 0 and coords[sets[m, j], level] == g:
                    seen = True
                    break
            if seen:
                continue
            touched += 1
            taken = 0
            for j in range(k, k_total):
                if sets[m, j] >= 0 and coords[sets[m, j], level] == g:
                    taken += 1
            gsize = 0
            gfree = 0
            for x in range(lo, lo + size):
                if relevant[x] != 0 and coords[x, level] == g:
                    gsize += 1
                    if free[x] != 0:
                        gfree += 1
            if gfree == gsize and taken < gfree:
                broken += 1
    total = 0
    free_total = 0
    for x in range(lo, lo + size):
        if relevant[x] != 0:
            total += 1
            if free[x] != 0:
                free_total += 1
    score, loc, frag, pack = combine(
        sum_wd, sum_w, touched, broken, total, free_total, nrel, level_distance, weights, spread
    )
    out_score[m] = score
    out_parts[m, 0] = loc
    out_parts[m, 1] = frag
    out_parts[m, 2] = pack


@njit(parallel=True, cache=True)
def _score_sets_parallel(
    node_start: np.ndarray, nodes: np.ndarray, sets: np.ndarray, set_claim: np.ndarray, coords: np.ndarray,
    free: np.ndarray, relevant: np.ndarray, level_distance: np.ndarray, link_offset: np.ndarray,
    link_distance: np.ndarray, weights: np.ndarray, spread: bool, out_score: np.ndarray,
    out_parts: np.ndarray,
) -> None:  # fmt: skip
    """prange over nodes; each iteration writes only its own output row."""
    for m in prange(nodes.shape[0]):
        _score_node(
            m, node_start, nodes, sets, set_claim, coords, free, relevant, level_distance, link_offset,
            link_distance, weights, spread, out_score, out_parts,
        )  # fmt: skip


def _check_score(
    topology: TopologyInputs, nodes: np.ndarray, sets: np.ndarray, set_claim: np.ndarray
) -> None:
    """Check `score_sets` arguments, including that every set row belongs to its node."""
    check_topology(topology, nodes)
    need("sets", sets, *LAYOUT["sets"])
    need("set_claim", set_claim, *LAYOUT["set_claim"])
    if sets.shape[0] != nodes.shape[0] or set_claim.shape[0] != sets.shape[1]:
        raise ValueError(
            f"sets must have shape (M, K) and set_claim (K,), got {sets.shape}, {set_claim.shape}"
        )
    check_sets(topology.node_start, nodes, sets)


def score_sets(
    topology: TopologyInputs, *, nodes: np.ndarray, sets: np.ndarray, set_claim: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Score one given set per node (e.g. a first-fit allocation), in parallel (numba).

    While the kernels compile in the background (`kernels.warming`), `score_sets_reference` answers.

    Args:
        topology: as for `best_sets`.
        nodes: int64 (M,), the nodes to score (indices into node_start).
        sets: int64 (M, K); sets[m, k] is a row of node nodes[m] serving claim set_claim[k], or -1
            (ignored). A node whose entries are all -1 scores 0 with parts 0.
        set_claim: int64 (K,), claim index of each column.

    Returns:
        score float64 (M,), parts float64 (M, 3) (locality, fragmentation, packing).
    """
    if not warming.use_kernels():
        return score_sets_reference(topology, nodes=nodes, sets=sets, set_claim=set_claim)
    return _score_sets_kernel(topology, nodes=nodes, sets=sets, set_claim=set_claim)


def _score_sets_kernel(
    topology: TopologyInputs, *, nodes: np.ndarray, sets: np.ndarray, set_claim: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """`score_sets` on the numba kernel, whatever `kernels.warming` says (the warm-up calls this)."""
    _check_score(topology, nodes, sets, set_claim)
    score = np.zeros(nodes.shape[0])
    parts = np.zeros((nodes.shape[0], 3))
    if nodes.shape[0]:
        t = topology
        _score_sets_parallel(
            t.node_start, nodes, sets, set_claim, t.coords, t.free, t.relevant, t.level_distance,
            t.link_offset, t.link_distance, t.weights, bool(t.spread), score, parts,
        )  # fmt: skip
    return score, parts


class RefNode:
    """One node's view for the twins, as Python lists over its positions 0..size-1 (row - lo).

    Distances, constraint checks and scores are computed from the definitions, from scratch each time.
    """

    def __init__(self, n: int, topology: TopologyInputs) -> None:
        t = topology
        self.lo = int(t.node_start[n])
        hi = int(t.node_start[n + 1])
        self.size = hi - self.lo
        offset = int(t.link_offset[n])
        self.link = t.link_distance[offset : offset + self.size**2].tolist() if offset >= 0 else None
        self.coords: list[list[int]] = t.coords[self.lo : hi].tolist()
        self.free: list[int] = t.free[self.lo : hi].tolist()
        self.relevant: list[int] = t.relevant[self.lo : hi].tolist()
        self.level_distance: list[float] = t.level_distance.tolist()
        self.weights: list[float] = t.weights.tolist()
        self.spread = bool(t.spread)

    def distance(self, i: int, j: int) -> float:
        """Distance of positions i and j (link matrix entry, else shared level, else node)."""
        a, b = min(i, j), max(i, j)
        if self.link is not None:
            d = float(self.link[a * self.size + b])
            if d == d:  # not NaN
                return d
        for level in range(NODE_LEVEL):
            c = self.coords[a][level]
            if c != -1 and c == self.coords[b][level]:
                return self.level_distance[level]
        return self.level_distance[NODE_LEVEL]

    def pair_sums(self, chosen: Sequence[int], claims: Sequence[int]) -> tuple[float, float]:
        """(sum of w * distance, sum of w) over the pairs of chosen (slot order) serving claims."""
        sum_wd = 0.0
        sum_w = 0.0
        cross = self.weights[3]
        for s in range(len(chosen)):
            # one subtotal per row, then added: the same association as the kernels' prefix sums
            dwd = 0.0
            dw = 0.0
            for j in range(s):
                w = 1.0 if claims[j] == claims[s] else cross
                dwd += w * self.distance(chosen[j], chosen[s])
                dw += w
            sum_wd += dwd
            sum_w += dw
        return sum_wd, sum_w

    def score(self, chosen: Sequence[int], claims: Sequence[int]) -> tuple[float, float, float, float]:
        """(score, locality, fragmentation, packing) of positions chosen (slot order) serving claims."""
        sum_wd, sum_w = self.pair_sums(chosen, claims)
        d_min, d_max = self.level_distance[0], self.level_distance[NODE_LEVEL]
        locality = 1.0
        if sum_w != 0.0 and d_max - d_min > 0.0:
            locality = min(1.0, max(0.0, 1.0 - (sum_wd / sum_w - d_min) / (d_max - d_min)))
        relevant = [x for x in range(self.size) if self.relevant[x]]
        touched = 0
        broken = 0
        for level in range(NODE_LEVEL):
            for g in {self.coords[x][level] for x in chosen} - {-1}:
                group = [x for x in relevant if self.coords[x][level] == g]
                free_g = sum(self.free[x] for x in group)
                taken_g = sum(1 for x in chosen if self.coords[x][level] == g)
                touched += 1
                if free_g == len(group) and taken_g < free_g:
                    broken += 1
        fragmentation = 1.0 - broken / touched if touched else 1.0
        total = len(relevant)
        free_total = sum(self.free[x] for x in relevant)
        packing = 0.5
        if total:
            packing = ((total - free_total) + sum(self.relevant[x] for x in chosen)) / total
            if self.spread:
                packing = 1.0 - packing
        w0, w1, w2 = self.weights[:3]
        wsum = w0 + w1 + w2
        score = (w0 * locality + w1 * fragmentation + w2 * packing) / wsum if wsum > 0.0 else 0.0
        return score, locality, fragmentation, packing


def score_sets_reference(
    topology: TopologyInputs, *, nodes: np.ndarray, sets: np.ndarray, set_claim: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Plain Python twin of `score_sets`, serial over nodes."""
    _check_score(topology, nodes, sets, set_claim)
    score = np.zeros(nodes.shape[0])
    parts = np.zeros((nodes.shape[0], 3))
    for m in range(nodes.shape[0]):
        keep = [k for k in range(sets.shape[1]) if sets[m, k] >= 0]
        if not keep:
            continue
        node = RefNode(int(nodes[m]), topology)
        rows = [int(sets[m, k]) - node.lo for k in keep]
        result = node.score(rows, [int(set_claim[k]) for k in keep])
        score[m] = result[0]
        parts[m] = result[1:]
    return score, parts
