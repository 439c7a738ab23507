"""Topology kernels: per node, the best device set for a pod's requests, and scores of given sets.

What this module owns: the search and the score of DESIGN.md "Topology model", over the columnar
device index (a "row" is one device of one node; node `n` owns rows `node_start[n]:node_start[n+1]`).
It knows nothing of claims, CEL or Kubernetes: the caller passes per-request candidate masks (selector
match, free, not tainted, already ANDed), interned constraint values and topology coordinates, and gets
arrays back. It depends only on numpy and numba.

Two implementations of one algorithm live here:
- `best_sets` / `score_sets`: numba, an `@njit(parallel=True)` driver that splits the requested nodes
  into blocks and runs the blocks with `prange`; each block allocates its scratch arrays once and
  solves its nodes serially (arrays only, no Python objects, no allocation per node). The per-node
  helpers are `inline="always"`: as separate calls, passing some 25 arrays each time cost as much as
  the search itself (the 4-GPU benchmark ran 2x slower).
- `best_sets_reference` / `score_sets_reference`: plain Python twins, serial over nodes, written to be
  read. They follow the same enumeration order, count work the same way and add floating-point terms
  in the same order, so the kernels must reproduce them exactly (status and chosen rows) and to
  rounding (scores); the tests hold them to that.

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

Partition terms (`partition_terms` / `partition_terms_reference`, a third kernel-twin pair): for a
given set per node, over the rows' parent groups (one physical GPU: rows sharing a counter set, or
naming one parent) with per-row counter shares and per-group free shares, (1) partition packing
`1 - opened / taken` (groups with nothing allocated that the set cuts into, per partition row taken)
and (2) partition headroom, the mean over touched groups with counters of `largest_after /
largest_before`, the largest size (mean counter share) of a free row of the group still fitting
the free counters after and before the set. NaN for both when the set takes no partition. Per set
O(K * rows of the node * counters); `partition_terms` documents the details.

Search per node (`best_sets`): depth-first over requests in order, each request's rows enumerated as
combinations of its unused candidates in ascending order, hard constraints checked as each row is
added. A node where some request has fewer candidates than it needs, or the requests together have
fewer distinct candidates than they need, is NONE without search. Every tentative addition of a row is
one unit of work; a complete set replaces the incumbent only if it scores more than 1e-12 above it, so
ties keep the first set in enumeration order. Once there is an incumbent, a partial set is not extended
when an upper bound of its completions' scores (locality with every missing pair at the node's nearest
candidate distance, fragmentation 1, packing at its best) cannot beat it: the result is the one the
unpruned search gives, found with less work (the 4-GPU benchmark ran 1.7x faster).

If the search ends within `max_work` units the answer is exact (EXACT or NONE). Otherwise the search
stops and a greedy pass runs: for each of the first 64 candidates of the first request with a count,
start from it and fill the slots in order, each time taking the valid unused candidate with the
smallest sum of distances to the rows chosen so far (ties to the lowest row). The best of the search's
incumbent and the greedy sets is returned as BOUNDED, or UNKNOWN if there is none.

Cost bound per node, with K = sum(counts), C constraints, `rows` the node's row count: at most
`max_work` search units, each O(K + C * K) (incremental locality, fragmentation and constraint state,
so a complete set costs O(1) to score), plus a greedy pass of at most `64 * K * rows` distance
evaluations and candidate checks (O(C * K) each), plus O(rows^2) set-up (group sizes, distances).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence
from typing import Any, NamedTuple, TypeVar

import numba
import numpy as np
from numba import njit, prange

from kernels import warming

LEVELS: tuple[str, ...] = ("nvlink", "pcie", "numa", "socket")
NODE_LEVEL = len(LEVELS)

STATUS_NONE = 0
"""Provably no valid set on the node (the search finished within its budget, or a count check failed)."""
STATUS_EXACT = 1
"""The search finished within its budget: the set is the best-scoring valid set."""
STATUS_BOUNDED = 2
"""The budget ran out; the set is valid but only the best the search and the greedy pass saw."""
STATUS_UNKNOWN = 3
"""The budget ran out and neither the search nor the greedy pass found a valid set."""

MAX_SET_SIZE = 64
"""The largest K = sum(counts) the kernels accept (DRA allows at most 128 devices per request, but
topology choice beyond 64 devices on one node is not a real workload, and it bounds the scratch)."""
GREEDY_SEEDS = 64
"""How many candidates of the first request seed the greedy pass when the budget runs out."""
TIE_EPSILON = 1e-12
"""A set must beat the incumbent by more than this to replace it (ties keep enumeration order)."""
# Prune when bound <= incumbent + _PRUNE_BELOW. A completion must score above incumbent + TIE_EPSILON to
# win; the computed bound and scores are within ~1e-15 of exact, far inside the 1e-13 margin.
_PRUNE_BELOW = TIE_EPSILON - 1e-13

PARTITION_EPSILON = 1e-9
"""Slack of the partition terms' fit check (costs are float shares of exact counter values)."""

MATCH_ATTRIBUTE = 0
DISTINCT_ATTRIBUTE = 1

_BLOCK = 32  # nodes per prange task: enough to amortise the scratch allocation, small enough to balance

# index of the counters in the kernels' `state` array
_TOUCHED, _BROKEN, _NREL, _WORK = 0, 1, 2, 3
# rows of the `grp` scratch (4 levels x node rows each)
_REP, _GSIZE, _GFREE, _TAKEN = 0, 1, 2, 3
# rows of the `slots` scratch (K each)
_ROW, _IDX, _PLACED = 0, 1, 2
# entries of the `best` scratch
_B_SCORE, _B_LOC, _B_FRAG, _B_PACK, _B_FOUND = 0, 1, 2, 3, 4


# ---------------------------------------------------------------------------------------------------
# numba kernels
# ---------------------------------------------------------------------------------------------------


@njit(cache=True, inline="always")
def _pair_distance(
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
def _combine(
    sum_wd: float, sum_w: float, touched: int, broken: int, total: int, free_total: int, nrel: int,
    level_distance: np.ndarray, weights: np.ndarray, spread: bool,
) -> tuple[float, float, float, float]:  # fmt: skip
    """(score, locality, fragmentation, packing) from a set's running sums and counts."""
    locality = 1.0
    span = level_distance[4] - level_distance[0]
    if sum_w != 0.0 and span > 0.0:
        locality = 1.0 - (sum_wd / sum_w - level_distance[0]) / span
        locality = min(1.0, max(0.0, locality))
    fragmentation = 1.0
    if touched > 0:
        fragmentation = 1.0 - broken / touched
    packing = 0.5
    if total > 0:
        packing = ((total - free_total) + nrel) / total
        if spread:
            packing = 1.0 - packing
    wsum = weights[0] + weights[1] + weights[2]
    score = 0.0
    if wsum > 0.0:
        score = (weights[0] * locality + weights[1] * fragmentation + weights[2] * packing) / wsum
    return score, locality, fragmentation, packing


@njit(cache=True, inline="always")
def _bound(
    sum_wd: float, sum_w: float, w_total: float, d_near: float, nrel: int, remaining: int, total: int,
    free_total: int, level_distance: np.ndarray, weights: np.ndarray, spread: bool,
) -> float:  # fmt: skip
    """An upper bound of the score of every completion of a partial set (for pruning the search).

    Locality: the pairs still to come weigh `w_total - sum_w` and are each at least `d_near` (the
    nearest candidate pair on the node) apart. Fragmentation: 1. Packing: the partial set's
    relevant rows plus (binpack) or without (spread) every remaining slot.
    """
    locality = 1.0
    span = level_distance[4] - level_distance[0]
    if w_total != 0.0 and span > 0.0:
        lowest = sum_wd + (w_total - sum_w) * d_near
        locality = min(1.0, max(0.0, 1.0 - (lowest / w_total - level_distance[0]) / span))
    packing = 0.5
    if total > 0:
        if spread:
            packing = 1.0 - ((total - free_total) + nrel) / total
        else:
            packing = ((total - free_total) + nrel + remaining) / total
    wsum = weights[0] + weights[1] + weights[2]
    if wsum <= 0.0:
        return 0.0
    return float((weights[0] * locality + weights[1] + weights[2] * packing) / wsum)


@njit(cache=True, inline="always")
def _collect(
    lo: int, size: int, candidates: np.ndarray, counts: np.ndarray, cand: np.ndarray, ncand: np.ndarray,
    is_cand: np.ndarray, anyrows: np.ndarray,
) -> tuple[bool, int]:  # fmt: skip
    """Fill each request's ascending candidate positions; returns (count check passed, distinct rows)."""
    for a in range(size):
        is_cand[a] = 0
    ok = True
    for r in range(counts.shape[0]):
        k = 0
        for a in range(size):
            if candidates[r, lo + a] != 0:
                cand[r, k] = a
                k += 1
                is_cand[a] = 1
        ncand[r] = k
        if k < counts[r]:
            ok = False
    nany = 0
    for a in range(size):
        if is_cand[a] != 0:
            anyrows[nany] = a
            nany += 1
    return ok, nany


@njit(cache=True, inline="always")
def _groups(
    lo: int, size: int, coords: np.ndarray, free: np.ndarray, relevant: np.ndarray, grp: np.ndarray,
) -> tuple[int, int]:  # fmt: skip
    """Per level, each position's group representative (first position with its coordinate, -1 for
    none) and, at the representative, the group's relevant and relevant-free row counts; also zeroes
    the taken counts. Returns (T, F) of the node. O(4 * size^2) worst case, once per node."""
    total = 0
    free_total = 0
    for a in range(size):
        rel = 1 if relevant[lo + a] != 0 else 0
        fr = 1 if rel == 1 and free[lo + a] != 0 else 0
        total += rel
        free_total += fr
        for level in range(4):
            grp[_TAKEN, level, a] = 0
            c = coords[lo + a, level]
            g = -1
            if c != -1:
                g = a
                for b in range(a):
                    if coords[lo + b, level] == c:
                        g = b
                        break
            grp[_REP, level, a] = g
            if g == a:
                grp[_GSIZE, level, a] = 0
                grp[_GFREE, level, a] = 0
            if g >= 0:
                grp[_GSIZE, level, g] += rel
                grp[_GFREE, level, g] += fr
    return total, free_total


@njit(cache=True, inline="always")
def _fits(
    r: int, a: int, s: int, lo: int, slot_req: np.ndarray, slots: np.ndarray, cmem: np.ndarray,
    cval: np.ndarray, ckind: np.ndarray, match: np.ndarray,
) -> bool:  # fmt: skip
    """Whether position a may serve request r as slot s, given slots 0..s-1 (hard constraints only)."""
    row = lo + a
    for c in range(ckind.shape[0]):
        if cmem[c, r] == 0:
            continue
        v = cval[c, row]
        if v < 0:
            return False
        if ckind[c] == MATCH_ATTRIBUTE:
            if match[0, c] > 0 and v != match[1, c]:
                return False
        else:
            for j in range(s):
                if cmem[c, slot_req[j]] != 0 and cval[c, lo + slots[_ROW, j]] == v:
                    return False
    return True


@njit(cache=True, inline="always")
def _add(
    s: int, a: int, lo: int, claim_of: np.ndarray, cross: float, slot_req: np.ndarray, slots: np.ndarray,
    used: np.ndarray, dist: np.ndarray, lsum: np.ndarray, grp: np.ndarray, state: np.ndarray,
    relevant: np.ndarray, cmem: np.ndarray, cval: np.ndarray, match: np.ndarray,
) -> None:  # fmt: skip
    """Place position a in slot s: locality prefix sums, fragmentation counts, constraint state."""
    r = slot_req[s]
    used[a] = 1
    slots[_ROW, s] = a
    claim = claim_of[r]
    dwd = 0.0
    dw = 0.0
    for j in range(s):
        w = 1.0 if claim_of[slot_req[j]] == claim else cross
        dwd += w * dist[slots[_ROW, j], a]
        dw += w
    # prefix sums per slot, not a running total: removing a row restores the exact earlier value
    lsum[0, s + 1] = lsum[0, s] + dwd
    lsum[1, s + 1] = lsum[1, s] + dw
    for level in range(4):
        g = grp[_REP, level, a]
        if g < 0:
            continue
        t = grp[_TAKEN, level, g]
        wholly_free = grp[_GFREE, level, g] == grp[_GSIZE, level, g]
        if t == 0:
            state[_TOUCHED] += 1
        elif wholly_free and t < grp[_GFREE, level, g]:
            state[_BROKEN] -= 1
        grp[_TAKEN, level, g] = t + 1
        if wholly_free and t + 1 < grp[_GFREE, level, g]:
            state[_BROKEN] += 1
    if relevant[lo + a] != 0:
        state[_NREL] += 1
    for c in range(cmem.shape[0]):
        if cmem[c, r] != 0:
            if match[0, c] == 0:
                match[1, c] = cval[c, lo + a]
            match[0, c] += 1


@njit(cache=True, inline="always")
def _remove(
    s: int, lo: int, slot_req: np.ndarray, slots: np.ndarray, used: np.ndarray, grp: np.ndarray,
    state: np.ndarray, relevant: np.ndarray, cmem: np.ndarray, match: np.ndarray,
) -> None:  # fmt: skip
    """Undo `_add` for slot s (the locality prefix of slot s stays valid as it is)."""
    r = slot_req[s]
    a = slots[_ROW, s]
    used[a] = 0
    for level in range(4):
        g = grp[_REP, level, a]
        if g < 0:
            continue
        t = grp[_TAKEN, level, g]
        wholly_free = grp[_GFREE, level, g] == grp[_GSIZE, level, g]
        if wholly_free and t < grp[_GFREE, level, g]:
            state[_BROKEN] -= 1
        grp[_TAKEN, level, g] = t - 1
        if t - 1 == 0:
            state[_TOUCHED] -= 1
        elif wholly_free and t - 1 < grp[_GFREE, level, g]:
            state[_BROKEN] += 1
    if relevant[lo + a] != 0:
        state[_NREL] -= 1
    for c in range(cmem.shape[0]):
        if cmem[c, r] != 0:
            match[0, c] -= 1


@njit(cache=True, inline="always")
def _reset(size: int, used: np.ndarray, grp: np.ndarray, state: np.ndarray, match: np.ndarray) -> None:
    """Forget every placed slot (after an aborted search, and before each greedy seed)."""
    for a in range(size):
        used[a] = 0
        for level in range(4):
            grp[_TAKEN, level, a] = 0
    state[_TOUCHED] = 0
    state[_BROKEN] = 0
    state[_NREL] = 0
    for c in range(match.shape[1]):
        match[0, c] = 0


@njit(cache=True, inline="always")
def _consider(
    k: int, slots: np.ndarray, lsum: np.ndarray, state: np.ndarray, total: int, free_total: int,
    level_distance: np.ndarray, weights: np.ndarray, spread: bool, best: np.ndarray, best_rows: np.ndarray,
) -> None:  # fmt: skip
    """Score the complete set in slots 0..k-1; keep it if it beats the incumbent by TIE_EPSILON."""
    score, loc, frag, pack = _combine(
        lsum[0, k],
        lsum[1, k],
        state[_TOUCHED],
        state[_BROKEN],
        total,
        free_total,
        state[_NREL],
        level_distance,
        weights,
        spread,
    )
    if best[_B_FOUND] == 0.0 or score > best[_B_SCORE] + TIE_EPSILON:
        best[_B_SCORE] = score
        best[_B_LOC] = loc
        best[_B_FRAG] = frag
        best[_B_PACK] = pack
        best[_B_FOUND] = 1.0
        for j in range(k):
            best_rows[j] = slots[_ROW, j]


@njit(cache=True, inline="always")
def _search(
    lo: int, counts: np.ndarray, claim_of: np.ndarray, cross: float, cand: np.ndarray, ncand: np.ndarray,
    dist: np.ndarray, grp: np.ndarray, used: np.ndarray, slot_req: np.ndarray, slot_pos: np.ndarray,
    slots: np.ndarray, lsum: np.ndarray, state: np.ndarray, match: np.ndarray, ckind: np.ndarray,
    cmem: np.ndarray, cval: np.ndarray, relevant: np.ndarray, total: int, free_total: int,
    level_distance: np.ndarray, weights: np.ndarray, spread: bool, max_work: int, w_total: float,
    d_near: float, best: np.ndarray, best_rows: np.ndarray,
) -> bool:  # fmt: skip
    """The budgeted depth-first search (iterative: one stack frame per slot). Returns True if aborted.

    A partial set whose `_bound` cannot beat the incumbent by more than TIE_EPSILON (less a rounding
    margin) is not extended: none of its completions could replace the incumbent.
    """
    k_total = slot_req.shape[0]
    if k_total == 0:
        _consider(0, slots, lsum, state, total, free_total, level_distance, weights, spread, best, best_rows)
        return False
    s = 0
    slots[_IDX, 0] = -1
    slots[_PLACED, 0] = 0
    while s >= 0:
        r = slot_req[s]
        if slots[_PLACED, s] != 0:
            _remove(s, lo, slot_req, slots, used, grp, state, relevant, cmem, match)
            slots[_PLACED, s] = 0
        # the last index that still leaves enough candidates for the request's remaining slots
        lim = ncand[r] - (counts[r] - slot_pos[s])
        i = slots[_IDX, s] + 1
        picked = -1
        while i <= lim:
            a = cand[r, i]
            if used[a] == 0:
                state[_WORK] += 1
                if state[_WORK] > max_work:
                    return True
                if _fits(r, a, s, lo, slot_req, slots, cmem, cval, ckind, match):
                    picked = i
                    break
            i += 1
        if picked < 0:
            s -= 1
            continue
        slots[_IDX, s] = picked
        _add(s, cand[r, picked], lo, claim_of, cross, slot_req, slots, used, dist, lsum, grp, state,
             relevant, cmem, cval, match)  # fmt: skip
        slots[_PLACED, s] = 1
        if s < k_total - 1 and best[_B_FOUND] != 0.0:
            bound = _bound(
                lsum[0, s + 1], lsum[1, s + 1], w_total, d_near, state[_NREL], k_total - 1 - s, total,
                free_total, level_distance, weights, spread,
            )  # fmt: skip
            if bound <= best[_B_SCORE] + _PRUNE_BELOW:
                continue  # the next pass removes this row and tries the slot's next candidate
        if s == k_total - 1:
            _consider(
                k_total, slots, lsum, state, total, free_total, level_distance, weights, spread, best,
                best_rows,
            )  # fmt: skip
        else:
            s += 1
            slots[_PLACED, s] = 0
            slots[_IDX, s] = -1 if slot_pos[s] == 0 else picked
    return False


@njit(cache=True, inline="always")
def _greedy(
    lo: int, size: int, claim_of: np.ndarray, cross: float, cand: np.ndarray, ncand: np.ndarray,
    anyrows: np.ndarray, nany: int, dist: np.ndarray, acc: np.ndarray, grp: np.ndarray, used: np.ndarray,
    slot_req: np.ndarray, slots: np.ndarray, lsum: np.ndarray, state: np.ndarray, match: np.ndarray,
    ckind: np.ndarray, cmem: np.ndarray, cval: np.ndarray, relevant: np.ndarray, total: int, free_total: int,
    level_distance: np.ndarray, weights: np.ndarray, spread: bool, best: np.ndarray, best_rows: np.ndarray,
) -> None:  # fmt: skip
    """Greedy completion from each seed; candidates keep a running distance sum to the chosen rows."""
    k_total = slot_req.shape[0]
    r0 = slot_req[0]
    for si in range(min(GREEDY_SEEDS, ncand[r0])):
        _reset(size, used, grp, state, match)
        for x in range(nany):
            acc[anyrows[x]] = 0.0
        a = cand[r0, si]
        if not _fits(r0, a, 0, lo, slot_req, slots, cmem, cval, ckind, match):
            continue
        complete = True
        for s in range(k_total):
            if s > 0:
                r = slot_req[s]
                a = -1
                best_d = 0.0
                for i in range(ncand[r]):
                    b = cand[r, i]
                    if used[b] != 0 or not _fits(r, b, s, lo, slot_req, slots, cmem, cval, ckind, match):
                        continue
                    if a < 0 or acc[b] < best_d:
                        a = b
                        best_d = acc[b]
                if a < 0:
                    complete = False
                    break
            _add(s, a, lo, claim_of, cross, slot_req, slots, used, dist, lsum, grp, state, relevant, cmem,
                 cval, match)  # fmt: skip
            for x in range(nany):
                y = anyrows[x]
                if y != a:
                    acc[y] += dist[y, a]
        if complete:
            _consider(
                k_total, slots, lsum, state, total, free_total, level_distance, weights, spread, best,
                best_rows,
            )  # fmt: skip


@njit(cache=True)
def _best_block(
    start: int, stop: int, node_start: np.ndarray, nodes: np.ndarray, candidates: np.ndarray,
    counts: np.ndarray, claim_of: np.ndarray, coords: np.ndarray, free: np.ndarray, relevant: np.ndarray,
    ckind: np.ndarray, cmem: np.ndarray, cval: np.ndarray, level_distance: np.ndarray,
    link_offset: np.ndarray, link_distance: np.ndarray, weights: np.ndarray, spread: bool, max_work: int,
    slot_req: np.ndarray, slot_pos: np.ndarray, out_status: np.ndarray, out_score: np.ndarray,
    out_parts: np.ndarray, out_chosen: np.ndarray,
) -> None:  # fmt: skip
    """Solve nodes[start:stop] serially with one set of scratch arrays sized for the block."""
    width = 1
    for m in range(start, stop):
        n = nodes[m]
        width = max(width, node_start[n + 1] - node_start[n])
    n_req = counts.shape[0]
    k_total = slot_req.shape[0]
    cross = weights[3]
    dist = np.zeros((width, width))
    acc = np.zeros(width)
    cand = np.zeros((n_req, width), np.int64)
    ncand = np.zeros(n_req, np.int64)
    is_cand = np.zeros(width, np.uint8)
    anyrows = np.zeros(width, np.int64)
    used = np.zeros(width, np.uint8)
    grp = np.zeros((4, 4, width), np.int64)
    slots = np.zeros((3, max(k_total, 1)), np.int64)
    lsum = np.zeros((2, k_total + 1))
    state = np.zeros(4, np.int64)
    match = np.zeros((2, ckind.shape[0]), np.int64)
    best = np.zeros(5)
    best_rows = np.zeros(max(k_total, 1), np.int64)
    # the pair weight of a complete set, summed in the association of the prefix sums in `_add`
    w_total = 0.0
    for s in range(k_total):
        dw = 0.0
        for j in range(s):
            dw += 1.0 if claim_of[slot_req[j]] == claim_of[slot_req[s]] else cross
        w_total += dw
    for m in range(start, stop):
        n = nodes[m]
        lo = node_start[n]
        size = node_start[n + 1] - lo
        out_status[m] = STATUS_NONE
        out_score[m] = 0.0
        for p in range(3):
            out_parts[m, p] = 0.0
        for k in range(k_total):
            out_chosen[m, k] = -1
        ok, nany = _collect(lo, size, candidates, counts, cand, ncand, is_cand, anyrows)
        if not ok or nany < k_total:
            continue
        total, free_total = _groups(lo, size, coords, free, relevant, grp)
        off = link_offset[n]
        d_near = np.inf
        for x in range(nany if k_total >= 2 else 0):  # a single row has no pairs
            a = anyrows[x]
            for y in range(x + 1, nany):
                b = anyrows[y]
                d = _pair_distance(lo, size, off, a, b, coords, level_distance, link_distance)
                dist[a, b] = d
                dist[b, a] = d
                d_near = min(d_near, d)
        _reset(size, used, grp, state, match)
        state[_WORK] = 0
        best[_B_FOUND] = 0.0
        aborted = _search(
            lo, counts, claim_of, cross, cand, ncand, dist, grp, used, slot_req, slot_pos, slots, lsum,
            state, match, ckind, cmem, cval, relevant, total, free_total, level_distance, weights, spread,
            max_work, w_total, d_near, best, best_rows,
        )  # fmt: skip
        if aborted:
            _greedy(
                lo, size, claim_of, cross, cand, ncand, anyrows, nany, dist, acc, grp, used, slot_req, slots,
                lsum, state, match, ckind, cmem, cval, relevant, total, free_total, level_distance, weights,
                spread, best, best_rows,
            )  # fmt: skip
        found = best[_B_FOUND] != 0.0
        if aborted:
            out_status[m] = STATUS_BOUNDED if found else STATUS_UNKNOWN
        else:
            out_status[m] = STATUS_EXACT if found else STATUS_NONE
        if not found:
            continue
        out_score[m] = best[_B_SCORE]
        out_parts[m, 0] = best[_B_LOC]
        out_parts[m, 1] = best[_B_FRAG]
        out_parts[m, 2] = best[_B_PACK]
        # rows in request order, each request's rows ascending (greedy sets are not sorted yet)
        k = 0
        while k < k_total:
            end = k + 1
            while end < k_total and slot_pos[end] != 0:
                end += 1
            for i in range(k + 1, end):
                v = best_rows[i]
                j = i - 1
                while j >= k and best_rows[j] > v:
                    best_rows[j + 1] = best_rows[j]
                    j -= 1
                best_rows[j + 1] = v
            k = end
        for k in range(k_total):
            out_chosen[m, k] = lo + best_rows[k]


@njit(parallel=True, cache=True)
def _best_sets_parallel(
    node_start: np.ndarray, nodes: np.ndarray, candidates: np.ndarray, counts: np.ndarray,
    claim_of: np.ndarray, coords: np.ndarray, free: np.ndarray, relevant: np.ndarray, ckind: np.ndarray,
    cmem: np.ndarray, cval: np.ndarray, level_distance: np.ndarray, link_offset: np.ndarray,
    link_distance: np.ndarray, weights: np.ndarray, spread: bool, max_work: int, slot_req: np.ndarray,
    slot_pos: np.ndarray, out_status: np.ndarray, out_score: np.ndarray, out_parts: np.ndarray,
    out_chosen: np.ndarray,
) -> None:  # fmt: skip
    """prange over blocks of nodes; each block writes only its own output rows (no races)."""
    n_nodes = nodes.shape[0]
    n_blocks = (n_nodes + _BLOCK - 1) // _BLOCK
    for b in prange(n_blocks):
        _best_block(
            b * _BLOCK, min(n_nodes, (b + 1) * _BLOCK), node_start, nodes, candidates, counts, claim_of,
            coords, free, relevant, ckind, cmem, cval, level_distance, link_offset, link_distance, weights,
            spread, max_work, slot_req, slot_pos, out_status, out_score, out_parts, out_chosen,
        )  # fmt: skip


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
            dwd += w * _pair_distance(
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
    score, loc, frag, pack = _combine(
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
        fits = True
        total = 0.0
        for j in range(ncols):
            c = row_cost[x, j]
            if c > avail[j] + PARTITION_EPSILON:
                fits = False
                break
            total += c
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
    n_blocks = (n_nodes + _BLOCK - 1) // _BLOCK
    for b in prange(n_blocks):
        before = np.zeros(width)
        after = np.zeros(width)
        for m in range(b * _BLOCK, min(n_nodes, (b + 1) * _BLOCK)):
            _partition_node(
                m, node_start, nodes, sets, row_group, row_cost, group_counters, group_free, group_used,
                free, before, after, out,
            )  # fmt: skip


# ---------------------------------------------------------------------------------------------------
# inputs: one record per kernel family, built by one function each
# ---------------------------------------------------------------------------------------------------


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
_LAYOUT: dict[str, tuple[type, int]] = {
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
    """The record with each array converted to its `_LAYOUT` dtype, C-contiguous (masks of bool
    become uint8, sequences of numbers arrays); arrays that already conform are not copied."""
    values: list[Any] = [
        np.ascontiguousarray(value, dtype=_LAYOUT[name][0]) if name in _LAYOUT else value
        for name, value in zip(record._fields, record, strict=True)
    ]
    return type(record)(*values)


def _need_fields(record: TopologyInputs | SearchRequests | PartitionInputs) -> None:
    """`_need` on every array field of the record, in field order."""
    for name, value in zip(record._fields, record, strict=True):
        if name in _LAYOUT:
            _need(name, value, *_LAYOUT[name])


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


# ---------------------------------------------------------------------------------------------------
# input checks (shared by the kernels and the twins: both raise the same errors)
# ---------------------------------------------------------------------------------------------------


def _need(name: str, value: object, dtype: type, ndim: int) -> np.ndarray:
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


def _check_topology(topology: TopologyInputs, nodes: np.ndarray) -> int:
    """Check the arguments both entry points share; returns the number of rows."""
    node_start, coords, free, relevant, level_distance, link_offset, link_distance, weights, _ = topology
    _need("node_start", node_start, *_LAYOUT["node_start"])
    _need("nodes", nodes, *_LAYOUT["nodes"])
    _need_fields(topology)
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


def _check_best(topology: TopologyInputs, requests: SearchRequests, nodes: np.ndarray, max_work: int) -> int:
    """Check `best_sets` arguments; returns K = sum(counts)."""
    rows = _check_topology(topology, nodes)
    _need_fields(requests)
    candidates, counts, claim_of, constraint_kind, constraint_members, constraint_values = requests
    n_req = counts.shape[0]
    if candidates.shape != (n_req, rows):
        raise ValueError(f"candidates must have shape (R, rows) = {(n_req, rows)}, got {candidates.shape}")
    if claim_of.shape[0] != n_req:
        raise ValueError(f"claim_of must have {n_req} entries (one per request)")
    if np.any(counts < 0):
        raise ValueError("counts must be >= 0")
    k_total = int(counts.sum())
    if k_total > MAX_SET_SIZE:
        raise ValueError(f"the requests need {k_total} devices; the kernels handle at most {MAX_SET_SIZE}")
    n_con = constraint_kind.shape[0]
    if constraint_members.shape != (n_con, n_req) or constraint_values.shape != (n_con, rows):
        raise ValueError(
            f"constraint_members must have shape (C, R) = {(n_con, n_req)} and constraint_values "
            f"(C, rows) = {(n_con, rows)}"
        )
    if np.any((constraint_kind != MATCH_ATTRIBUTE) & (constraint_kind != DISTINCT_ATTRIBUTE)):
        raise ValueError("constraint_kind must be 0 (matchAttribute) or 1 (distinctAttribute)")
    if int(max_work) < 0:
        raise ValueError("max_work must be >= 0")
    return k_total


def _check_sets(node_start: np.ndarray, nodes: np.ndarray, sets: np.ndarray) -> None:
    """Every entry of sets[m] is -1 or a row of node nodes[m]."""
    if sets.size:
        lo = node_start[nodes][:, None]
        hi = node_start[nodes + 1][:, None]
        if not np.all((sets == -1) | ((sets >= lo) & (sets < hi))):
            raise ValueError("every entry of sets[m] must be -1 or a row of node nodes[m]")


def _check_score(
    topology: TopologyInputs, nodes: np.ndarray, sets: np.ndarray, set_claim: np.ndarray
) -> None:
    """Check `score_sets` arguments, including that every set row belongs to its node."""
    _check_topology(topology, nodes)
    _need("sets", sets, *_LAYOUT["sets"])
    _need("set_claim", set_claim, *_LAYOUT["set_claim"])
    if sets.shape[0] != nodes.shape[0] or set_claim.shape[0] != sets.shape[1]:
        raise ValueError(
            f"sets must have shape (M, K) and set_claim (K,), got {sets.shape}, {set_claim.shape}"
        )
    _check_sets(topology.node_start, nodes, sets)


def _check_partitions(inputs: PartitionInputs, nodes: np.ndarray, sets: np.ndarray) -> None:
    """Check `partition_terms` arguments (the kernel and the twin raise the same errors)."""
    node_start, row_group, row_cost, group_counters, group_free, group_used, free = inputs
    _need("node_start", node_start, *_LAYOUT["node_start"])
    _need("nodes", nodes, *_LAYOUT["nodes"])
    _need("sets", sets, *_LAYOUT["sets"])
    _need_fields(inputs)
    rows = row_group.shape[0]
    groups = group_counters.shape[0]
    n_nodes = node_start.shape[0] - 1
    if n_nodes < 0:
        raise ValueError("node_start must have N + 1 entries")
    if row_cost.shape[0] != rows or free.shape[0] != rows:
        raise ValueError(f"row_cost and free must have {rows} rows (one per row of row_group)")
    if n_nodes and (node_start[0] < 0 or node_start[-1] > rows or np.any(np.diff(node_start) < 0)):
        raise ValueError(f"node_start must be non-decreasing within [0, {rows}]")
    if nodes.size and (nodes.min() < 0 or nodes.max() >= n_nodes):
        raise ValueError(f"nodes must index node_start (0 <= node < {n_nodes})")
    if sets.shape[0] != nodes.shape[0]:
        raise ValueError(f"sets must have one row per node ({nodes.shape[0]}), got {sets.shape[0]}")
    _check_sets(node_start, nodes, sets)
    if group_free.shape != (groups, row_cost.shape[1]) or group_used.shape[0] != groups:
        raise ValueError(
            f"group_free must have shape ({groups}, {row_cost.shape[1]}) and group_used {groups} entries"
        )
    if groups and (group_counters.min() < 0 or group_counters.max() > row_cost.shape[1]):
        raise ValueError(f"group_counters must be within [0, {row_cost.shape[1]}] (the cost columns)")
    if rows and row_group.max() >= groups:
        raise ValueError(f"row_group entries must be groups (0 <= group < {groups}) or -1")
    if not np.all(np.isfinite(row_cost)) or not np.all(np.isfinite(group_free)):
        raise ValueError("row_cost and group_free must be finite")


def _slots(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per slot (one device to choose), its request and its position within the request."""
    slot_req = np.repeat(np.arange(counts.shape[0], dtype=np.int64), counts)
    slot_pos = np.concatenate([np.arange(c, dtype=np.int64) for c in counts]) if counts.size else slot_req
    return slot_req, slot_pos.astype(np.int64)


# ---------------------------------------------------------------------------------------------------
# public entry points
# ---------------------------------------------------------------------------------------------------


def best_sets(
    topology: TopologyInputs, requests: SearchRequests, *, nodes: np.ndarray, max_work: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The best valid device set on each of the given nodes, searched in parallel (numba).

    While the kernels compile in the background (`kernels.warming`), `best_sets_reference` answers.

    Args:
        topology: the index's topology and the score's policy (see `TopologyInputs`).
        requests: the pod's requests and constraints (see `SearchRequests`).
        nodes: int64 (M,), the nodes to solve (indices into node_start).
        max_work: search budget per node, in tentative row additions.

    Returns:
        status int8 (M,) (STATUS_*), score float64 (M,), parts float64 (M, 3) (locality,
        fragmentation, packing), chosen int64 (M, K): rows in request order, each request's rows
        ascending; score, parts 0 and chosen -1 where no set was found. Fresh arrays; inputs are not
        written.

    Raises:
        TypeError: an argument is not a numpy array of the stated dtype.
        ValueError: shapes disagree, K > 64, or a value is out of range.
    """
    if not warming.use_kernels():
        return best_sets_reference(topology, requests, nodes=nodes, max_work=max_work)
    return _best_sets_kernel(topology, requests, nodes=nodes, max_work=max_work)


def _best_sets_kernel(
    topology: TopologyInputs, requests: SearchRequests, *, nodes: np.ndarray, max_work: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`best_sets` on the numba kernel, whatever `kernels.warming` says (the warm-up calls this)."""
    k_total = _check_best(topology, requests, nodes, max_work)
    n_out = nodes.shape[0]
    status = np.zeros(n_out, np.int8)
    score = np.zeros(n_out)
    parts = np.zeros((n_out, 3))
    chosen = np.full((n_out, k_total), -1, np.int64)
    slot_req, slot_pos = _slots(requests.counts)
    if n_out:
        t, q = topology, requests
        _best_sets_parallel(
            t.node_start, nodes, q.candidates, q.counts, q.claim_of, t.coords, t.free, t.relevant,
            q.constraint_kind, q.constraint_members, q.constraint_values, t.level_distance, t.link_offset,
            t.link_distance, t.weights, bool(t.spread), int(max_work), slot_req, slot_pos, status, score,
            parts, chosen,
        )  # fmt: skip
    return status, score, parts, chosen


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


def set_threads(n: int) -> None:
    """Use n numba threads for the parallel drivers; 0 leaves numba's default (NUMBA_NUM_THREADS)."""
    if n < 0:
        raise ValueError("threads must be >= 0")
    if n:
        numba.set_num_threads(n)


def warm_up() -> float:
    """Compile (or load from numba's cache) the kernels on a tiny index; returns the seconds taken.

    The service calls this at start-up so the first scheduling cycle does not pay for compilation.
    Both the exact path and the budget-exceeded greedy path run.
    """
    started = time.perf_counter()
    topology, requests = _tiny_index()
    nodes = np.array([0, 1], np.int64)
    for max_work in (1, 1000):
        _best_sets_kernel(topology, requests, nodes=nodes, max_work=max_work)
    sets = np.array([[0, 2], [-1, -1]], np.int64)
    _score_sets_kernel(topology, nodes=nodes, sets=sets, set_claim=np.zeros(2, np.int64))
    partitions = partition_inputs(
        node_start=topology.node_start,
        row_group=np.array([0, 0, -1, -1, 1, 1, 1, -1], np.int64),
        row_cost=np.array([[0.5, 0.5]] * 4 + [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0]]),
        group_counters=np.array([2, 0], np.int64),
        group_free=np.ones((2, 2)),
        group_used=np.array([1, 0], np.int64),
        free=topology.free,
    )
    _partition_terms_kernel(partitions, nodes=nodes, sets=sets)
    return time.perf_counter() - started


def _tiny_index() -> tuple[TopologyInputs, SearchRequests]:
    """Two nodes of 4 rows, one request of 2 with a matchAttribute, one node with a link matrix."""
    rows = 8
    coords = np.repeat(np.array([[0, 1, 2, 3]], np.int32), rows, axis=0)
    coords[1::2, 0] = -1
    link = np.full(16, np.nan)
    link[1] = 1.5
    topology = topology_inputs(
        node_start=np.array([0, 4, 8], np.int64),
        coords=coords,
        free=np.ones(rows, np.uint8),
        relevant=np.ones(rows, np.uint8),
        level_distance=(1.0, 2.0, 3.0, 4.0, 6.0),
        link_offset=np.array([-1, 0], np.int64),
        link_distance=link,
        weights=(4.0, 2.0, 1.0, 1.0),
        spread=False,
    )
    requests = search_requests(
        candidates=np.ones((1, rows), np.uint8),
        counts=np.array([2], np.int64),
        claim_of=np.zeros(1, np.int64),
        constraint_kind=np.zeros(1, np.int64),
        constraint_members=np.ones((1, 1), np.uint8),
        constraint_values=np.zeros((1, rows), np.int32),
    )
    return topology, requests


# ---------------------------------------------------------------------------------------------------
# plain Python twins
# ---------------------------------------------------------------------------------------------------


class _BudgetExceeded(Exception):
    """Raised inside the twin's search when a tentative addition would exceed max_work."""


class _RefNode:
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

    def bound(self, chosen: Sequence[int], claims: Sequence[int], d_near: float, w_total: float) -> float:
        """Upper bound of the score of any completion of chosen to len(claims) rows (see `_bound`)."""
        sum_wd, sum_w = self.pair_sums(chosen, claims)
        locality = 1.0
        d_min, d_max = self.level_distance[0], self.level_distance[NODE_LEVEL]
        if w_total != 0.0 and d_max - d_min > 0.0:
            lowest = sum_wd + (w_total - sum_w) * d_near
            locality = min(1.0, max(0.0, 1.0 - (lowest / w_total - d_min) / (d_max - d_min)))
        relevant = [x for x in range(self.size) if self.relevant[x]]
        total = len(relevant)
        used = total - sum(self.free[x] for x in relevant)
        nrel = sum(self.relevant[x] for x in chosen)
        packing = 0.5
        if total:
            if self.spread:
                packing = 1.0 - (used + nrel) / total
            else:
                packing = (used + nrel + (len(claims) - len(chosen))) / total
        w0, w1, w2 = self.weights[:3]
        return (w0 * locality + w1 + w2 * packing) / (w0 + w1 + w2) if w0 + w1 + w2 > 0.0 else 0.0

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


def _ref_node(
    node: _RefNode, requests: SearchRequests, max_work: int
) -> tuple[int, tuple[float, float, float, float] | None, list[int]]:
    """(status, (score, locality, fragmentation, packing) or None, positions in slot order) of one node."""
    candidates, counts, claim_of, constraint_kind, constraint_members, constraint_values = requests
    lo, hi = node.lo, node.lo + node.size
    n_req = counts.shape[0]
    slot_req = [r for r in range(n_req) for _ in range(int(counts[r]))]
    claims = [int(claim_of[r]) for r in slot_req]
    cand = [[x for x in range(node.size) if candidates[r, lo + x]] for r in range(n_req)]
    if any(len(cand[r]) < counts[r] for r in range(n_req)) or len(set().union(*cand)) < len(slot_req):
        return STATUS_NONE, None, []
    pool = sorted(set().union(*cand))
    w_total = 0.0  # the pair weight of a complete set, in the association of `pair_sums`
    for s in range(len(claims)):
        dw = 0.0
        for j in range(s):
            dw += 1.0 if claims[j] == claims[s] else node.weights[3]
        w_total += dw
    d_near = min((node.distance(a, b) for a, b in itertools.combinations(pool, 2)), default=math.inf)
    kinds = constraint_kind.tolist()
    members = constraint_members.tolist()
    values = constraint_values[:, lo:hi].tolist()

    def fits(r: int, x: int, chosen: list[int]) -> bool:
        """Whether position x may serve request r next to chosen (chosen[j] serves slot_req[j])."""
        for c, kind in enumerate(kinds):
            if not members[c][r]:
                continue
            v = values[c][x]
            if v < 0:
                return False
            for j, other in enumerate(chosen):
                if members[c][slot_req[j]] and (v == values[c][other]) != (kind == MATCH_ATTRIBUTE):
                    return False
        return True

    best: tuple[float, float, float, float] | None = None
    best_rows: list[int] = []

    def consider(chosen: list[int]) -> None:
        nonlocal best, best_rows
        result = node.score(chosen, claims)
        if best is None or result[0] > best[0] + TIE_EPSILON:
            best, best_rows = result, list(chosen)

    work = 0

    def search(chosen: list[int], start: int) -> None:
        """Slot len(chosen): its request's candidates from start on (combinations stay ascending)."""
        nonlocal work
        s = len(chosen)
        if s == len(slot_req):
            consider(chosen)
            return
        r = slot_req[s]
        position = s - slot_req.index(r)
        last = len(cand[r]) - (int(counts[r]) - position)  # leave room for the request's other slots
        for i in range(start, last + 1):
            x = cand[r][i]
            if x in chosen:
                continue
            work += 1
            if work > max_work:
                raise _BudgetExceeded
            if fits(r, x, chosen):
                chosen.append(x)
                if (
                    best is not None
                    and len(chosen) < len(slot_req)
                    and node.bound(chosen, claims, d_near, w_total) <= best[0] + _PRUNE_BELOW
                ):
                    chosen.pop()  # no completion could replace the incumbent
                    continue
                same_request_next = s + 1 < len(slot_req) and slot_req[s + 1] == r
                search(chosen, i + 1 if same_request_next else 0)
                chosen.pop()

    try:
        search([], 0)
    except _BudgetExceeded:
        for seed in cand[slot_req[0]][:GREEDY_SEEDS]:
            if not fits(slot_req[0], seed, []):
                continue
            chosen = [seed]
            for s in range(1, len(slot_req)):
                r = slot_req[s]
                pick, pick_d = -1, 0.0
                for x in cand[r]:
                    if x in chosen or not fits(r, x, chosen):
                        continue
                    d = 0.0
                    for other in chosen:
                        d += node.distance(x, other)
                    if pick < 0 or d < pick_d:
                        pick, pick_d = x, d
                if pick < 0:
                    break
                chosen.append(pick)
            if len(chosen) == len(slot_req):
                consider(chosen)
        return (STATUS_BOUNDED if best else STATUS_UNKNOWN), best, best_rows
    return (STATUS_EXACT if best else STATUS_NONE), best, best_rows


def best_sets_reference(
    topology: TopologyInputs, requests: SearchRequests, *, nodes: np.ndarray, max_work: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Plain Python twin of `best_sets` (same arguments, results and algorithm), serial over nodes."""
    k_total = _check_best(topology, requests, nodes, max_work)
    n_out = nodes.shape[0]
    status = np.zeros(n_out, np.int8)
    score = np.zeros(n_out)
    parts = np.zeros((n_out, 3))
    chosen = np.full((n_out, k_total), -1, np.int64)
    for m in range(n_out):
        node = _RefNode(int(nodes[m]), topology)
        st, best, rows = _ref_node(node, requests, int(max_work))
        status[m] = st
        if best is None:
            continue
        score[m] = best[0]
        parts[m] = best[1:]
        k = 0
        for c in requests.counts.tolist():
            chosen[m, k : k + c] = [node.lo + x for x in sorted(rows[k : k + c])]
            k += c
    return status, score, parts, chosen


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
        node = _RefNode(int(nodes[m]), topology)
        rows = [int(sets[m, k]) - node.lo for k in keep]
        result = node.score(rows, [int(set_claim[k]) for k in keep])
        score[m] = result[0]
        parts[m] = result[1:]
    return score, parts


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
