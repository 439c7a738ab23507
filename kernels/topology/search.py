"""`best_sets`: per node, the best valid device set for a pod's requests (numba), beside its twin.

What this module owns: the search of DESIGN.md "Topology model" (`best_sets`, numba) and its
plain-Python twin (`best_sets_reference`), the statuses they return and the search's budget. Sets
are scored by the definition in `score.py` (its numba primitives are inlined here; the twin scores
with its `RefNode`).

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

The numba driver splits the requested nodes into blocks and runs the blocks with `prange`; each
block allocates its scratch arrays once and solves its nodes serially. The per-node helpers are
`inline="always"`: as separate calls, passing some 25 arrays each time cost as much as the search
itself (the 4-GPU benchmark ran 2x slower).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
from numba import njit, prange

from kernels import warming
from kernels.topology.inputs import (
    BLOCK,
    DISTINCT_ATTRIBUTE,
    MATCH_ATTRIBUTE,
    NODE_LEVEL,
    SearchRequests,
    TopologyInputs,
    check_topology,
    need_fields,
)
from kernels.topology.score import RefNode, combine, pair_distance

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

# index of the counters in the kernels' `state` array
_TOUCHED, _BROKEN, _NREL, _WORK = 0, 1, 2, 3
# rows of the `grp` scratch (4 levels x node rows each)
_REP, _GSIZE, _GFREE, _TAKEN = 0, 1, 2, 3
# rows of the `slots` scratch (K each)
_ROW, _IDX, _PLACED = 0, 1, 2
# entries of the `best` scratch
_B_SCORE, _B_LOC, _B_FRAG, _B_PACK, _B_FOUND = 0, 1, 2, 3, 4


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
    score, loc, frag, pack = combine(
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
                d = pair_distance(lo, size, off, a, b, coords, level_distance, link_distance)
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
    n_blocks = (n_nodes + BLOCK - 1) // BLOCK
    for b in prange(n_blocks):
        _best_block(
            b * BLOCK, min(n_nodes, (b + 1) * BLOCK), node_start, nodes, candidates, counts, claim_of,
            coords, free, relevant, ckind, cmem, cval, level_distance, link_offset, link_distance, weights,
            spread, max_work, slot_req, slot_pos, out_status, out_score, out_parts, out_chosen,
        )  # fmt: skip


def _check_best(topology: TopologyInputs, requests: SearchRequests, nodes: np.ndarray, max_work: int) -> int:
    """Check `best_sets` arguments; returns K = sum(counts)."""
    rows = check_topology(topology, nodes)
    need_fields(requests)
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


def _slots(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per slot (one device to choose), its request and its position within the request."""
    slot_req = np.repeat(np.arange(counts.shape[0], dtype=np.int64), counts)
    slot_pos = np.concatenate([np.arange(c, dtype=np.int64) for c in counts]) if counts.size else slot_req
    return slot_req, slot_pos.astype(np.int64)


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


class _BudgetExceeded(Exception):
    """Raised inside the twin's search when a tentative addition would exceed max_work."""


def _bound_reference(
    node: RefNode, chosen: Sequence[int], claims: Sequence[int], d_near: float, w_total: float
) -> float:
    """Upper bound of the score of any completion of chosen to len(claims) rows (`_bound`, from the
    definitions)."""
    sum_wd, sum_w = node.pair_sums(chosen, claims)
    locality = 1.0
    d_min, d_max = node.level_distance[0], node.level_distance[NODE_LEVEL]
    if w_total != 0.0 and d_max - d_min > 0.0:
        lowest = sum_wd + (w_total - sum_w) * d_near
        locality = min(1.0, max(0.0, 1.0 - (lowest / w_total - d_min) / (d_max - d_min)))
    relevant = [x for x in range(node.size) if node.relevant[x]]
    total = len(relevant)
    used = total - sum(node.free[x] for x in relevant)
    nrel = sum(node.relevant[x] for x in chosen)
    packing = 0.5
    if total:
        if node.spread:
            packing = 1.0 - (used + nrel) / total
        else:
            packing = (used + nrel + (len(claims) - len(chosen))) / total
    w0, w1, w2 = node.weights[:3]
    return (w0 * locality + w1 + w2 * packing) / (w0 + w1 + w2) if w0 + w1 + w2 > 0.0 else 0.0


def _ref_node(
    node: RefNode, requests: SearchRequests, max_work: int
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
                    and _bound_reference(node, chosen, claims, d_near, w_total) <= best[0] + _PRUNE_BELOW
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
        node = RefNode(int(nodes[m]), topology)
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
