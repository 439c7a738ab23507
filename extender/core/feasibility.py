"""Vectorised feasibility for pods whose claims need no search (the filter hot path).

A pod is *simple* when every request of every pending claim is an `ExactCount` request without
admin access, capacity requests or `firstAvailable`, and no claim has constraints. For such a pod
upstream's exhaustive search succeeds on a node iff the devices can be matched to the requests
(each device used once). By Hall's theorem that holds iff for every subset S of the requests the
node has at least sum(count, S) free devices selected by some request in S. We check that for
all nodes at once with array operations: per row a bit signature of the requests that select it,
per node a histogram of signatures, per subset a count. No CEL, no per-device Python loop.

Nodes where a selected device needs a search (shared counters, shared capacity, binding
conditions, per-device node selection), where CEL raised on a selected device, or that have an
invalid pool are reported as `needs_search`: the tiers (`extender.core.tiers`) hand them to the
first-fit kernel (`extender.core.firstfit`, which decides shared counters) and what that cannot
model to upstream's search.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from extender.allocator.allocating import MAX_DEVICES_PER_CLAIM
from extender.allocator.requests import EXACT_COUNT, ClaimSpec, RequestSpec
from extender.core import freekeyed, scoring
from extender.core.shapes import ShapeData, node_rows
from extender.index.snapshot import Changes, DeviceIndex

#: Above this many requests the 2^k subset check gets expensive; such pods use the search.
MAX_SIMPLE_REQUESTS = 8


def simple_requests(claims: list[ClaimSpec]) -> list[RequestSpec] | None:
    """The pod's requests if the pod is simple (see module docstring), else None."""
    requests: list[RequestSpec] = []
    for claim in claims:
        if claim.constraints:
            return None
        devices_in_claim = 0
        for request in claim.requests:
            spec = request.exactly
            if spec is None or request.first_available:
                return None
            if spec.mode != EXACT_COUNT or spec.admin_access or spec.capacity is not None or spec.count <= 0:
                return None
            if not spec.class_name or any(s.expression is None for s in spec.selectors):
                return None  # invalid input: the search reports it exactly as upstream does
            if spec.derived_attributes:
                return None  # 1.37: an error with the gate off, which the search reports
            devices_in_claim += spec.count
            requests.append(spec)
        if devices_in_claim > MAX_DEVICES_PER_CLAIM:
            return None
    return requests if len(requests) <= MAX_SIMPLE_REQUESTS else None


@dataclass(frozen=True, slots=True)
class Feasibility:
    """Per node (aligned with the `nodes` argument): verdicts of the vectorised check."""

    fits: np.ndarray  # bool: an allocation exists with the currently free devices
    fits_if_free: np.ndarray  # bool: an allocation would exist if no device were in use
    needs_search: np.ndarray  # bool: the vectorised answer is not authoritative here
    short_request: list[int]  # per node: index of a request lacking devices (-1 if none)


@dataclass(frozen=True, slots=True)
class _Prepared:
    """What the check of one shape needs at one index generation, whatever is in use."""

    signature: np.ndarray  # uint8 per row (at most 8 requests): bit b set when request b selects it
    needs_search: np.ndarray  # bool per node
    need: np.ndarray  # int64 per request subset: the devices it needs
    fits_if_free: np.ndarray  # bool per node


def check(
    index: DeviceIndex,
    requests: list[RequestSpec],
    free: np.ndarray,
    nodes: np.ndarray,
    shape: ShapeData | None = None,
) -> Feasibility:
    """Hall's condition on every node in `nodes` (positions in the index).

    With `shape` (the pod's `shapes.ShapeData`), what does not depend on the devices in use,
    the rows' signatures, the nodes that need a search and the "fits if free" answer, is kept
    there for the next pod of the shape.
    """
    prepared = shape.items.get("feasibility") if shape is not None else None
    if not isinstance(prepared, _Prepared):
        carried = shape.take("feasibility") if shape is not None else None
        if carried is not None and isinstance(carried[0], _Prepared):
            prepared = _carry(carried[0], carried[1], index, requests)
        else:
            prepared = _prepare(index, requests)
        if shape is not None:
            shape.items["feasibility"] = prepared
    k = len(requests)

    def hall(todo: np.ndarray) -> tuple[np.ndarray, ...]:  # over just the rows of `todo`'s nodes
        rows, local = node_rows(index, todo)
        return _hall_of(local, len(todo), k, np.where(free[rows], prepared.signature[rows], 0), prepared.need)

    if shape is not None:  # kept per node until its rows change in `free` (`freekeyed`)
        fits, short = freekeyed.kept(shape, "hall_free", index, free).get(nodes, hall)
    else:
        fits, short = hall(nodes)
    return Feasibility(
        fits=fits,
        fits_if_free=prepared.fits_if_free[nodes],
        needs_search=prepared.needs_search[nodes],
        short_request=short.tolist(),
    )


def _prepare(index: DeviceIndex, requests: list[RequestSpec]) -> _Prepared:
    num_nodes = len(index.node_names)
    signature, awkward = _signature(index, requests, None)
    needs_search = index.node_has_invalid_pool.copy()
    if awkward.any():
        needs_search |= np.bincount(index.row_node[awkward], minlength=num_nodes) > 0
    k = len(requests)
    counts = np.array([spec.count for spec in requests], dtype=np.int64)
    need = np.array([counts[[b for b in range(k) if subset >> b & 1]].sum() for subset in range(1 << k)])
    unprepared = _Prepared(signature, needs_search, need, np.zeros(0, dtype=bool))
    fits_if_free, _ = _hall(index, k, unprepared, np.ones(index.num_rows, dtype=bool))
    return _Prepared(signature, needs_search, need, fits_if_free)


def _signature(
    index: DeviceIndex, requests: list[RequestSpec], rows: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """Per row (every row, or aligned with `rows`): the bits of the requests that select it, and
    whether a request that selects it needs upstream's search there."""
    size = index.num_rows if rows is None else len(rows)
    signature = np.zeros(size, dtype=np.uint8)
    awkward = np.zeros(size, dtype=bool)
    for bit, spec in enumerate(requests):
        selected, awkward_rows = scoring.selected_rows(index, spec, rows)
        awkward |= awkward_rows
        signature |= selected.astype(np.uint8) << np.uint8(bit)
    return signature, awkward


def _carry(old: _Prepared, changes: Changes, index: DeviceIndex, requests: list[RequestSpec]) -> _Prepared:
    """`old` (an earlier generation's) with the changed nodes' rows and answers worked out again:
    a row's signature is its own, a node's flags and Hall's answer its rows' and pools'."""
    nodes = changes.touched
    if not len(nodes):
        return old
    rows, local = node_rows(index, nodes)
    signature, awkward = _signature(index, requests, rows)
    patched_signature = old.signature.copy()
    patched_signature[rows] = signature
    needs_search = old.needs_search.copy()
    needs_search[nodes] = index.node_has_invalid_pool[nodes] | (
        np.bincount(local[awkward], minlength=len(nodes)) > 0
    )
    k = len(requests)
    fits_if_free = old.fits_if_free.copy()
    fits_if_free[nodes] = _hall_of(local, len(nodes), k, signature, old.need)[0]
    return _Prepared(patched_signature, needs_search, old.need, fits_if_free)


def _hall(
    index: DeviceIndex, k: int, prepared: _Prepared, rows_ok: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per node: whether Hall's condition holds over the rows in `rows_ok`, and a short request."""
    sig = np.where(rows_ok, prepared.signature, 0)
    return _hall_of(index.row_node, len(index.node_names), k, sig, prepared.need)


def _hall_of(
    row_node: np.ndarray, num_nodes: int, k: int, signature: np.ndarray, need: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """`_hall` over rows given by their node numbers (< `num_nodes`) and signatures."""
    full = (1 << k) - 1
    index_bits = np.arange(1 << k)
    sig = signature.astype(np.int64)
    g = np.bincount(row_node * (1 << k) + sig, minlength=num_nodes << k).reshape(num_nodes, 1 << k)
    # Zeta transform: g[:, T] = number of rows whose signature is a subset of T.
    for bit in range(k):
        with_bit = index_bits[(index_bits >> bit & 1) == 1]
        g[:, with_bit] += g[:, with_bit ^ (1 << bit)]
    total = g[:, full]
    ok = np.ones(num_nodes, dtype=bool)
    short = np.full(num_nodes, -1, dtype=np.int64)
    for subset in range(1, 1 << k):
        covered = total - g[:, full ^ subset]  # rows selected by at least one request in subset
        failing = covered < need[subset]
        if subset & (subset - 1) == 0:  # a single request: remember which one is short
            short = np.where(failing & (short < 0), subset.bit_length() - 1, short)
        ok &= ~failing
    return ok, short
