"""First-fit kernel: upstream's allocator search, over index rows, for all nodes of a call.

What this module owns: per node, the allocation upstream's depth-first search finds first (spec
dra.md §3.3-§3.8, reproduced in `extender.allocator.allocating`), for pods whose devices need no
Python: claims in order, requests in order, `firstAvailable` subrequests in priority order (the
search backtracks into the next subrequest when a later request cannot be served), each request's
devices enumerated as combinations of rows in ascending order (row order is upstream's pool/slice/
device order), `allocationMode: All` taking every selected row of the node, shared counters
(a row's consumption added to what the pod already takes, checked against what is available),
matchAttribute / distinctAttribute constraints on interned values. Because the enumeration order
is upstream's, the set found is the set upstream's search writes, and "no set" is upstream's
failure. It knows nothing of claims, CEL or Kubernetes; it depends only on numpy and numba.

Inputs (S slots = requests and subrequests, flattened claim by claim; Q requests; C claims):
- `claim_first_req` int64 (C+1,): claim c owns requests claim_first_req[c]:claim_first_req[c+1];
- `req_first_slot`, `req_subs` int64 (Q,): a request's first slot and its number of subrequests
  (0: a plain request, one slot);
- `slot_claim` int64 (S,), `slot_all` uint8 (S,) (1: allocationMode All), `slot_count` int64 (S,);
- `candidates` uint8 (S, rows): 0 not selected, 1 selected, 2 selected but a taint is not tolerated
  (`All` fails on such a device, an exact count skips it);
- `free` uint8 (rows,): 0 for held devices;
- `row_ptr`, `row_counter`, `row_amount`: CSR counter consumption per row; `available` int64
  (counters,): what is left of each counter after held devices (all >= 0 on the nodes passed);
- `constraint_kind` int64 (K,) (0 match, 1 distinct), `constraint_applies` uint8 (K, S),
  `constraint_values` int32 (K, rows) (-1: the row lacks the attribute, so it cannot be added);
- `max_work`: tentative additions per node before giving up; `max_per_claim`: upstream's
  32-device limit (a branch that would exceed it is left to the search: UNKNOWN).

Statuses: FOUND (chosen rows and their slots, in the order picked), NONE (upstream finds no
allocation), UNKNOWN (work budget, the claim limit, or a constraint failing on an `All` device,
which upstream reports as an error: the caller runs upstream's search there).

`first_fit` is the numba kernel (an explicit stack, scratch arrays per block of nodes);
`first_fit_reference` is its plain-Python twin, recursive like upstream's code and written to be
read; they must agree exactly (status, rows, slots), counting work the same way.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numba
import numpy as np
from numba import njit, prange

from kernels import warming
from kernels.checked import CheckedOnce

STATUS_NONE = 0
STATUS_FOUND = 1
STATUS_UNKNOWN = 3

_OK, _FAIL, _ABORT = 0, 1, 2


# ---------------------------------------------------------------------------------------------------
# numba kernel
# ---------------------------------------------------------------------------------------------------


@njit(cache=True, inline="always")
def _try_add(
    row: int, s: int, c: int, must: bool, depth: int, candidates: np.ndarray, free: np.ndarray,
    used: np.ndarray, row_ptr: np.ndarray, row_counter: np.ndarray, row_amount: np.ndarray,
    available: np.ndarray, consumed: np.ndarray, constraint_kind: np.ndarray, constraint_applies: np.ndarray,
    constraint_values: np.ndarray, match_count: np.ndarray, match_value: np.ndarray, f_kind: np.ndarray,
    f_pos: np.ndarray, f_slot: np.ndarray, nres: np.ndarray,
) -> int:  # fmt: skip
    """Add `row` for slot `s` of claim `c` if upstream's `_allocate_device` accepts it."""
    if free[row] == 0 or used[row] != 0:
        return _FAIL
    lo_e = row_ptr[row]
    hi_e = row_ptr[row + 1]
    for e in range(lo_e, hi_e):
        consumed[row_counter[e]] += row_amount[e]
    for e in range(lo_e, hi_e):
        if consumed[row_counter[e]] > available[row_counter[e]]:
            for x in range(lo_e, hi_e):
                consumed[row_counter[x]] -= row_amount[x]
            return _FAIL
    violated = candidates[s, row] == 2  # untolerated taint
    if not violated:
        for k in range(constraint_kind.shape[0]):
            if constraint_applies[k, s] == 0:
                continue
            v = constraint_values[k, row]
            if v < 0:
                violated = True
            elif constraint_kind[k] == 0:
                violated = match_count[k] > 0 and match_value[k] != v
            else:
                for i in range(depth):
                    if (
                        f_kind[i] == 1
                        and constraint_applies[k, f_slot[i]] != 0
                        and constraint_values[k, f_pos[i]] == v
                    ):
                        violated = True
                        break
            if violated:
                if must:
                    for x in range(lo_e, hi_e):
                        consumed[row_counter[x]] -= row_amount[x]
                    return _ABORT
                break
    if violated:
        for x in range(lo_e, hi_e):
            consumed[row_counter[x]] -= row_amount[x]
        return _FAIL
    for k in range(constraint_kind.shape[0]):
        if constraint_applies[k, s] != 0 and constraint_kind[k] == 0:
            if match_count[k] == 0:
                match_value[k] = constraint_values[k, row]
            match_count[k] += 1
    used[row] = 1
    nres[c] += 1
    return _OK


@njit(cache=True, inline="always")
def _undo(
    row: int, s: int, c: int, used: np.ndarray, row_ptr: np.ndarray, row_counter: np.ndarray,
    row_amount: np.ndarray, consumed: np.ndarray, constraint_kind: np.ndarray, constraint_applies: np.ndarray,
    match_count: np.ndarray, nres: np.ndarray,
) -> None:  # fmt: skip
    used[row] = 0
    nres[c] -= 1
    for e in range(row_ptr[row], row_ptr[row + 1]):
        consumed[row_counter[e]] -= row_amount[e]
    for k in range(constraint_kind.shape[0]):
        if constraint_applies[k, s] != 0 and constraint_kind[k] == 0:
            match_count[k] -= 1


@njit(cache=True)
def _solve_node(
    m: int, lo: int, hi: int, claim_first_req: np.ndarray, req_first_slot: np.ndarray, req_subs: np.ndarray,
    slot_claim: np.ndarray, slot_all: np.ndarray, slot_count: np.ndarray, candidates: np.ndarray,
    free: np.ndarray, row_ptr: np.ndarray, row_counter: np.ndarray, row_amount: np.ndarray,
    available: np.ndarray, constraint_kind: np.ndarray, constraint_applies: np.ndarray,
    constraint_values: np.ndarray, max_work: int, max_per_claim: int, consumed: np.ndarray, used: np.ndarray,
    f_kind: np.ndarray, f_c: np.ndarray, f_r: np.ndarray, f_sub: np.ndarray, f_d: np.ndarray,
    f_pos: np.ndarray, f_slot: np.ndarray, nres: np.ndarray, match_count: np.ndarray, match_value: np.ndarray,
    num_all: np.ndarray, status: np.ndarray, chosen: np.ndarray, chosen_slot: np.ndarray,
) -> None:  # fmt: skip
    n_claims = claim_first_req.shape[0] - 1
    n_slots = slot_claim.shape[0]
    for s in range(n_slots):
        num_all[s] = 0
        if slot_all[s] != 0:
            for row in range(lo, hi):
                if candidates[s, row] != 0:
                    num_all[s] += 1
    for c in range(n_claims):
        nres[c] = 0
    for k in range(constraint_kind.shape[0]):
        match_count[k] = 0
    depth = 0
    work = 0
    c = 0
    r = 0
    sub = 0
    d = 0
    start = lo
    entering = True
    forward = True
    result = STATUS_NONE
    while True:
        if forward:
            if c == n_claims:
                result = STATUS_FOUND
                break
            if r == claim_first_req[c + 1] - claim_first_req[c]:
                c += 1
                r = 0
                d = 0
                start = lo
                entering = True
                continue
            q = claim_first_req[c] + r
            if entering:
                entering = False
                sub = 0
                if req_subs[q] > 0:
                    f_kind[depth] = 0
                    f_c[depth] = c
                    f_r[depth] = r
                    f_sub[depth] = 0
                    depth += 1
            s = req_first_slot[q] + sub
            num = num_all[s] if slot_all[s] != 0 else slot_count[s]
            if slot_all[s] != 0 and num == 0:
                forward = False
                continue
            if d >= num:
                r += 1
                d = 0
                start = lo
                entering = True
                continue
            if nres[c] + num - d > max_per_claim:
                result = STATUS_UNKNOWN
                break
            picked = -1
            if slot_all[s] != 0:
                row = start
                while candidates[s, row] == 0:
                    row += 1
                work += 1
                if work > max_work:
                    result = STATUS_UNKNOWN
                    break
                outcome = _try_add(
                    row, s, c, True, depth, candidates, free, used, row_ptr, row_counter, row_amount,
                    available, consumed, constraint_kind, constraint_applies, constraint_values, match_count,
                    match_value, f_kind, f_pos, f_slot, nres,
                )  # fmt: skip
                if outcome == _ABORT:
                    result = STATUS_UNKNOWN
                    break
                if outcome == _OK:
                    picked = row
            else:
                over = False
                for row in range(start, hi):
                    if candidates[s, row] != 1 or free[row] == 0 or used[row] != 0:
                        continue
                    work += 1
                    if work > max_work:
                        over = True
                        break
                    outcome = _try_add(
                        row, s, c, False, depth, candidates, free, used, row_ptr, row_counter, row_amount,
                        available, consumed, constraint_kind, constraint_applies, constraint_values,
                        match_count, match_value, f_kind, f_pos, f_slot, nres,
                    )  # fmt: skip
                    if outcome == _OK:
                        picked = row
                        break
                if over:
                    result = STATUS_UNKNOWN
                    break
            if picked < 0:
                forward = False
                continue
            f_kind[depth] = 1
            f_c[depth] = c
            f_r[depth] = r
            f_sub[depth] = sub
            f_d[depth] = d
            f_pos[depth] = picked
            f_slot[depth] = s
            depth += 1
            d += 1
            start = picked + 1
        else:
            if depth == 0:
                result = STATUS_NONE
                break
            top = depth - 1
            c = f_c[top]
            r = f_r[top]
            sub = f_sub[top]
            if f_kind[top] == 0:
                q = claim_first_req[c] + r
                if sub + 1 < req_subs[q]:
                    f_sub[top] = sub + 1
                    sub = sub + 1
                    d = 0
                    start = lo
                    entering = False
                    forward = True
                else:
                    depth -= 1
                continue
            s = f_slot[top]
            d = f_d[top]
            previous = f_pos[top]
            _undo(
                previous, s, c, used, row_ptr, row_counter, row_amount, consumed, constraint_kind,
                constraint_applies, match_count, nres,
            )  # fmt: skip
            depth -= 1
            if slot_all[s] != 0:
                continue
            picked = -1
            over = False
            for row in range(previous + 1, hi):
                if candidates[s, row] != 1 or free[row] == 0 or used[row] != 0:
                    continue
                work += 1
                if work > max_work:
                    over = True
                    break
                outcome = _try_add(
                    row, s, c, False, depth, candidates, free, used, row_ptr, row_counter, row_amount,
                    available, consumed, constraint_kind, constraint_applies, constraint_values, match_count,
                    match_value, f_kind, f_pos, f_slot, nres,
                )  # fmt: skip
                if outcome == _OK:
                    picked = row
                    break
            if over:
                result = STATUS_UNKNOWN
                break
            if picked >= 0:
                f_pos[depth] = picked
                depth += 1
                d += 1
                start = picked + 1
                forward = True
    status[m] = result
    k = 0
    for i in range(depth):
        if f_kind[i] == 1:
            if result == STATUS_FOUND:
                chosen[m, k] = f_pos[i]
                chosen_slot[m, k] = f_slot[i]
                k += 1
            _undo(
                f_pos[i], f_slot[i], f_c[i], used, row_ptr, row_counter, row_amount, consumed,
                constraint_kind, constraint_applies, match_count, nres,
            )  # fmt: skip


@njit(parallel=True, cache=True)
def _first_fit_parallel(
    node_start: np.ndarray, nodes: np.ndarray, claim_first_req: np.ndarray, req_first_slot: np.ndarray,
    req_subs: np.ndarray, slot_claim: np.ndarray, slot_all: np.ndarray, slot_count: np.ndarray,
    candidates: np.ndarray, free: np.ndarray, row_ptr: np.ndarray, row_counter: np.ndarray,
    row_amount: np.ndarray, available: np.ndarray, constraint_kind: np.ndarray,
    constraint_applies: np.ndarray, constraint_values: np.ndarray, max_work: int, max_per_claim: int,
    stack_size: int, n_blocks: int, status: np.ndarray, chosen: np.ndarray, chosen_slot: np.ndarray,
) -> None:  # fmt: skip
    """prange over blocks of nodes; each block allocates its scratch once and solves its nodes.

    One block per thread: the scratch includes a row-sized mask, so more blocks cost zeroing."""
    n_out = nodes.shape[0]
    n_rows = free.shape[0]
    for b in prange(n_blocks):
        consumed = np.zeros(available.shape[0], np.int64)
        used = np.zeros(n_rows, np.uint8)
        f_kind = np.zeros(stack_size, np.int64)
        f_c = np.zeros(stack_size, np.int64)
        f_r = np.zeros(stack_size, np.int64)
        f_sub = np.zeros(stack_size, np.int64)
        f_d = np.zeros(stack_size, np.int64)
        f_pos = np.zeros(stack_size, np.int64)
        f_slot = np.zeros(stack_size, np.int64)
        nres = np.zeros(claim_first_req.shape[0], np.int64)
        match_count = np.zeros(constraint_kind.shape[0], np.int64)
        match_value = np.zeros(constraint_kind.shape[0], np.int64)
        num_all = np.zeros(slot_claim.shape[0], np.int64)
        for m in range(b, n_out, n_blocks):
            n = nodes[m]
            _solve_node(
                m, node_start[n], node_start[n + 1], claim_first_req, req_first_slot, req_subs, slot_claim,
                slot_all, slot_count, candidates, free, row_ptr, row_counter, row_amount, available,
                constraint_kind, constraint_applies, constraint_values, max_work, max_per_claim, consumed,
                used, f_kind, f_c, f_r, f_sub, f_d, f_pos, f_slot, nres, match_count, match_value, num_all,
                status, chosen, chosen_slot,
            )  # fmt: skip


# ---------------------------------------------------------------------------------------------------
# inputs: one record, built by one function
# ---------------------------------------------------------------------------------------------------


class FirstFitInputs(NamedTuple):
    """One pod's first-fit inputs over one index (the module docstring gives each field's meaning).

    Depends on the index generation, the pod and what is held, not on which nodes a call solves.
    Build it with `first_fit_inputs`; `first_fit` and its twin check it.
    """

    node_start: np.ndarray
    claim_first_req: np.ndarray
    req_first_slot: np.ndarray
    req_subs: np.ndarray
    slot_claim: np.ndarray
    slot_all: np.ndarray
    slot_count: np.ndarray
    candidates: np.ndarray
    free: np.ndarray
    row_ptr: np.ndarray
    row_counter: np.ndarray
    row_amount: np.ndarray
    available: np.ndarray
    constraint_kind: np.ndarray
    constraint_applies: np.ndarray
    constraint_values: np.ndarray


#: (dtype, dimensions) of each `FirstFitInputs` field.
_LAYOUT: dict[str, tuple[type, int]] = {
    "node_start": (np.int64, 1),
    "claim_first_req": (np.int64, 1),
    "req_first_slot": (np.int64, 1),
    "req_subs": (np.int64, 1),
    "slot_claim": (np.int64, 1),
    "slot_all": (np.uint8, 1),
    "slot_count": (np.int64, 1),
    "candidates": (np.uint8, 2),
    "free": (np.uint8, 1),
    "row_ptr": (np.int64, 1),
    "row_counter": (np.int64, 1),
    "row_amount": (np.int64, 1),
    "available": (np.int64, 1),
    "constraint_kind": (np.int64, 1),
    "constraint_applies": (np.uint8, 2),
    "constraint_values": (np.int32, 2),
}


def first_fit_inputs(
    *,
    node_start: np.ndarray,
    claim_first_req: np.ndarray,
    req_first_slot: np.ndarray,
    req_subs: np.ndarray,
    slot_claim: np.ndarray,
    slot_all: np.ndarray,
    slot_count: np.ndarray,
    candidates: np.ndarray,
    free: np.ndarray,
    row_ptr: np.ndarray,
    row_counter: np.ndarray,
    row_amount: np.ndarray,
    available: np.ndarray,
    constraint_kind: np.ndarray,
    constraint_applies: np.ndarray,
    constraint_values: np.ndarray,
) -> FirstFitInputs:
    """The `FirstFitInputs` record, each array converted to the dtype the kernel takes (a bool mask
    becomes uint8); arrays that already conform are not copied."""
    given = FirstFitInputs(
        node_start, claim_first_req, req_first_slot, req_subs, slot_claim, slot_all, slot_count, candidates,
        free, row_ptr, row_counter, row_amount, available, constraint_kind, constraint_applies,
        constraint_values,
    )  # fmt: skip
    converted: dict[str, np.ndarray] = {
        name: np.ascontiguousarray(value, dtype=_LAYOUT[name][0]) for name, value in given._asdict().items()
    }
    return FirstFitInputs(**converted)


# ---------------------------------------------------------------------------------------------------
# input checks and entry points
# ---------------------------------------------------------------------------------------------------


def _need(name: str, value: object, dtype: type, ndim: int) -> np.ndarray:
    if not isinstance(value, np.ndarray) or value.dtype != dtype or value.ndim != ndim:
        got = f"{value.dtype} {value.ndim}-d" if isinstance(value, np.ndarray) else type(value).__name__
        raise TypeError(f"{name} must be a {ndim}-d {np.dtype(dtype).name} array, got {got}")
    return value


def _check(inputs: FirstFitInputs, nodes: np.ndarray) -> None:
    """Types, shapes and ranges (shared by the kernel and the twin: both raise the same errors)."""
    _need("node_start", inputs.node_start, np.int64, 1)
    _need("nodes", nodes, np.int64, 1)
    for name, value in zip(inputs._fields[1:], inputs[1:], strict=True):
        _need(name, value, *_LAYOUT[name])
    (
        node_start, claim_first_req, req_first_slot, req_subs, slot_claim, slot_all, slot_count, candidates,
        free, row_ptr, row_counter, row_amount, available, constraint_kind, constraint_applies,
        constraint_values,
    ) = inputs  # fmt: skip
    rows = free.shape[0]
    slots = slot_claim.shape[0]
    static = (node_start, row_counter)
    again = _CHECKED.needed(static, available.shape[0])  # row checks: see `kernels.checked`
    if node_start.shape[0] < 1 or node_start[-1] != rows or (again and np.any(np.diff(node_start) < 0)):
        raise ValueError("node_start must be non-decreasing from 0 to the number of rows")
    if nodes.size and (nodes.min() < 0 or nodes.max() >= node_start.shape[0] - 1):
        raise ValueError("nodes must be positions in node_start")
    if candidates.shape != (slots, rows) or slot_all.shape[0] != slots or slot_count.shape[0] != slots:
        raise ValueError(f"candidates must be (S, rows) = ({slots}, {rows}), got {candidates.shape}")
    if req_first_slot.shape[0] != req_subs.shape[0] or claim_first_req[-1] != req_subs.shape[0]:
        raise ValueError("claim_first_req, req_first_slot and req_subs disagree on the number of requests")
    if row_ptr.shape[0] != rows + 1 or row_ptr[-1] != row_counter.shape[0] != row_amount.shape[0]:
        raise ValueError("row_ptr must have rows + 1 entries ending at len(row_counter) == len(row_amount)")
    if again and row_counter.size and (row_counter.min() < 0 or row_counter.max() >= available.shape[0]):
        raise ValueError("row_counter entries must index available")
    k = constraint_kind.shape[0]
    if constraint_applies.shape != (k, slots) or constraint_values.shape != (k, rows):
        raise ValueError("constraint_applies must be (K, S) and constraint_values (K, rows)")
    _CHECKED.passed(static, available.shape[0])


_CHECKED = CheckedOnce()


def first_fit(
    inputs: FirstFitInputs, *, nodes: np.ndarray, max_work: int, max_per_claim: int = 32
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Upstream's first allocation on each of the given nodes (see module docstring), numba.

    While the kernel compiles in the background (`kernels.warming`), `first_fit_reference` answers.

    Args:
        inputs: the pod's slots, candidates, counters and constraints (see `FirstFitInputs`).
        nodes: int64 (M,), the nodes to solve (positions in node_start).
        max_work: tentative additions per node before giving up (UNKNOWN).
        max_per_claim: upstream's device limit per claim.

    Returns:
        status int8 (M,), chosen int64 (M, D) rows in pick order (-1 padded), chosen_slot int64
        (M, D) the slot each row serves; D = max_per_claim * C. Fresh arrays; inputs are not written.
    """
    if not warming.use_kernels():
        return first_fit_reference(inputs, nodes=nodes, max_work=max_work, max_per_claim=max_per_claim)
    return _first_fit_kernel(inputs, nodes=nodes, max_work=max_work, max_per_claim=max_per_claim)


def _first_fit_kernel(
    inputs: FirstFitInputs, *, nodes: np.ndarray, max_work: int, max_per_claim: int = 32
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`first_fit` on the numba kernel, whatever `kernels.warming` says (the warm-up calls this)."""
    _check(inputs, nodes)
    n_out = nodes.shape[0]
    width = max_per_claim * (inputs.claim_first_req.shape[0] - 1)
    status = np.zeros(n_out, np.int8)
    chosen = np.full((n_out, width), -1, np.int64)
    chosen_slot = np.full((n_out, width), -1, np.int64)
    if n_out:
        stack_size = width + inputs.req_subs.shape[0] + 1
        blocks = max(1, min(n_out, numba.get_num_threads()))
        x = inputs
        _first_fit_parallel(
            x.node_start, nodes, x.claim_first_req, x.req_first_slot, x.req_subs, x.slot_claim, x.slot_all,
            x.slot_count, x.candidates, x.free, x.row_ptr, x.row_counter, x.row_amount, x.available,
            x.constraint_kind, x.constraint_applies, x.constraint_values, int(max_work), int(max_per_claim),
            stack_size, blocks, status, chosen, chosen_slot,
        )  # fmt: skip
    return status, chosen, chosen_slot


# ---------------------------------------------------------------------------------------------------
# plain Python twin
# ---------------------------------------------------------------------------------------------------


class _Stop(Exception):
    """The twin's search hit the work budget, the claim limit or an `All` constraint failure."""


def first_fit_reference(
    inputs: FirstFitInputs, *, nodes: np.ndarray, max_work: int, max_per_claim: int = 32
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Plain Python twin of `first_fit`: upstream's recursion, one node at a time."""
    _check(inputs, nodes)
    n_claims = inputs.claim_first_req.shape[0] - 1
    width = max_per_claim * n_claims
    status = np.zeros(len(nodes), np.int8)
    chosen = np.full((len(nodes), width), -1, np.int64)
    chosen_slot = np.full((len(nodes), width), -1, np.int64)

    for m, n in enumerate(nodes.tolist()):
        lo, hi = int(inputs.node_start[n]), int(inputs.node_start[n + 1])
        node = _ReferenceNode(lo, hi, inputs, max_work, max_per_claim)
        try:
            found = node.allocate(0, 0, 0, 0, False, node.lo)
        except _Stop:
            status[m] = STATUS_UNKNOWN
            continue
        status[m] = STATUS_FOUND if found else STATUS_NONE
        if found:
            for k, (row, s, _) in enumerate(node.picks):
                chosen[m, k] = row
                chosen_slot[m, k] = s
    return status, chosen, chosen_slot


class _ReferenceNode:
    """One node's search for the twin: upstream's `_allocate_one` recursion over rows lo..hi-1."""

    def __init__(self, lo: int, hi: int, inputs: FirstFitInputs, max_work: int, max_per_claim: int) -> None:
        x = inputs
        self.lo, self.hi = lo, hi
        self.claim_first_req, self.req_first_slot, self.req_subs = (
            x.claim_first_req,
            x.req_first_slot,
            x.req_subs,
        )
        self.slot_all, self.slot_count, self.candidates, self.free = (
            x.slot_all,
            x.slot_count,
            x.candidates,
            x.free,
        )
        self.row_ptr, self.row_counter, self.row_amount = x.row_ptr, x.row_counter, x.row_amount
        self.available = x.available
        self.kind, self.applies, self.values = x.constraint_kind, x.constraint_applies, x.constraint_values
        self.max_work, self.max_per_claim = max_work, max_per_claim
        self.n_claims = len(x.claim_first_req) - 1
        self.picks: list[tuple[int, int, int]] = []  # (row, slot, claim) in pick order
        self.consumed: dict[int, int] = {}
        self.work = 0

    def counters_of(self, row: int) -> list[tuple[int, int]]:
        return [
            (int(self.row_counter[e]), int(self.row_amount[e]))
            for e in range(self.row_ptr[row], self.row_ptr[row + 1])
        ]

    def taken(self, row: int) -> bool:
        return any(p[0] == row for p in self.picks)

    def add(self, row: int, s: int, c: int, must: bool) -> bool:
        """upstream's `_allocate_device`: in use, counters, taints, constraints, in that order."""
        if not self.free[row] or self.taken(row):
            return False
        mine = self.counters_of(row)
        trial = dict(self.consumed)
        for counter, amount in mine:
            trial[counter] = trial.get(counter, 0) + amount
        if any(trial[counter] > self.available[counter] for counter, _ in mine):
            return False
        if self.candidates[s, row] == 2:
            return False
        for k in range(len(self.kind)):
            if not self.applies[k, s]:
                continue
            value = int(self.values[k, row])
            others = [int(self.values[k, p[0]]) for p in self.picks if self.applies[k, p[1]]]
            if self.kind[k] == 0:
                ok = value >= 0 and all(o == value for o in others)
            else:
                ok = value >= 0 and value not in others
            if not ok:
                if must:
                    raise _Stop  # upstream: "cannot add device ... constraint would not be satisfied"
                return False
        self.consumed = trial
        self.picks.append((row, s, c))
        return True

    def remove(self) -> None:
        row, _, _ = self.picks.pop()
        for counter, amount in self.counters_of(row):
            self.consumed[counter] -= amount

    def spend(self) -> None:
        self.work += 1
        if self.work > self.max_work:
            raise _Stop

    def allocate(self, c: int, r: int, sub: int, d: int, in_sub: bool, start: int) -> bool:
        if c == self.n_claims:
            return True
        if r == self.claim_first_req[c + 1] - self.claim_first_req[c]:
            return self.allocate(c + 1, 0, 0, 0, False, self.lo)
        q = int(self.claim_first_req[c]) + r
        if not in_sub and self.req_subs[q] > 0:
            return any(
                self.allocate(c, r, option, 0, True, self.lo) for option in range(int(self.req_subs[q]))
            )
        s = int(self.req_first_slot[q]) + sub
        selected = [row for row in range(self.lo, self.hi) if self.candidates[s, row]]
        num = len(selected) if self.slot_all[s] else int(self.slot_count[s])
        if self.slot_all[s] and num == 0:
            return False
        if d >= num:
            return self.allocate(c, r + 1, 0, 0, False, self.lo)
        if sum(1 for p in self.picks if p[2] == c) + num - d > self.max_per_claim:
            raise _Stop
        if self.slot_all[s]:
            self.spend()
            if not self.add(selected[d], s, c, True):
                return False
            if self.allocate(c, r, sub, d + 1, in_sub, selected[d] + 1):
                return True
            self.remove()
            return False
        for row in range(start, self.hi):
            if self.candidates[s, row] != 1 or not self.free[row] or self.taken(row):
                continue
            self.spend()
            if not self.add(row, s, c, False):
                continue
            if self.allocate(c, r, sub, d + 1, in_sub, row + 1):
                return True
            self.remove()
        return False


def tiny_inputs() -> FirstFitInputs:
    """Two nodes of two rows, one claim asking for one device: the warm-up's input (and tests')."""
    rows = 4
    inputs = first_fit_inputs(
        node_start=np.array([0, 2, 4], np.int64),
        claim_first_req=np.array([0, 1], np.int64),
        req_first_slot=np.array([0], np.int64),
        req_subs=np.array([0], np.int64),
        slot_claim=np.array([0], np.int64),
        slot_all=np.zeros(1, np.uint8),
        slot_count=np.array([1], np.int64),
        candidates=np.ones((1, rows), np.uint8),
        free=np.ones(rows, np.uint8),
        row_ptr=np.arange(rows + 1, dtype=np.int64),
        row_counter=np.array([0, 0, 1, 1], np.int64),
        row_amount=np.ones(rows, np.int64),
        available=np.ones(2, np.int64),
        constraint_kind=np.zeros(0, np.int64),
        constraint_applies=np.zeros((0, 1), np.uint8),
        constraint_values=np.zeros((0, rows), np.int32),
    )
    return inputs


def warm_up() -> float:
    """Compile (or load from numba's cache) the kernel on a tiny input; returns the seconds taken."""
    started = time.perf_counter()
    inputs = tiny_inputs()
    _first_fit_kernel(inputs, nodes=np.array([0, 1], np.int64), max_work=100)
    return time.perf_counter() - started
