"""The first-fit tier: upstream's search run by a numba kernel over the index columns.

For pods the Hall check and the topology kernel do not decide (shared counters, `firstAvailable`,
`allocationMode: All`, constraints on partitionable devices), `kernels.counters.first_fit` replays
upstream's depth-first search on every node of the call at once: same claim/request/subrequest
order, same device order (index rows are in the allocator's order), counters as int64 columns
(`extender.index.counters`), constraints as interned attribute codes. What it finds is the set
upstream's search finds; a node it cannot finish within `MAX_WORK` tentative additions, or where a
device needs what the kernel does not model, goes to upstream's search (never a guess).

Not modelled (the pod keeps the search, `plan` returns None): admin access, capacity requests
(consumable capacity), selectors of unknown type, unknown classes, input errors upstream reports
(counts <= 0, > 32 devices, feature gates off, constraints of unknown type). Not modelled per
node (handed to the search): devices with binding conditions, shared multi-allocatable devices,
per-device node selection, CEL errors, list-valued constraint attributes, invalid pools, counters
already overdrawn or not representable in milli-units, incomplete pools under `All`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from extender.allocator.allocating import MAX_DEVICES_PER_CLAIM
from extender.allocator.requests import ALL, EXACT_COUNT, ClaimSpec, RequestSpec
from extender.allocator.taints import all_tolerated
from extender.core.shapes import node_rows, node_subset
from extender.index.counters import CounterColumns, counter_columns
from extender.index.snapshot import Changes, DeviceIndex
from kernels import counters as kernel

#: Tentative device additions per node before the kernel hands the node to upstream's search.
MAX_WORK = 20_000


@dataclass(frozen=True, slots=True)
class FirstFitPlan:
    """Kernel inputs that depend on the pod and the index generation, not on what is free."""

    claim_first_req: np.ndarray
    req_first_slot: np.ndarray
    req_subs: np.ndarray
    slot_claim: np.ndarray
    slot_all: np.ndarray
    slot_count: np.ndarray
    slot_sub: np.ndarray  # int64 [S]: subrequest position, -1 for a plain request
    slot_request: np.ndarray  # int64 [S]: request position within its claim
    candidates: np.ndarray  # uint8 [S, rows]
    constraint_kind: np.ndarray
    constraint_applies: np.ndarray
    constraint_values: np.ndarray
    awkward_nodes: np.ndarray  # bool [nodes]: a selected device needs upstream's search
    counter_nodes: np.ndarray  # bool [nodes]: a selected device consumes counters
    has_all: bool
    prioritized_requests: int  # requests with `firstAvailable` (for the preference score)
    #: bool [nodes]: some request cannot be met even with every device free (each of its slots
    #: counts fewer selectable rows than it asks for): the kernel's search would find nothing there.
    short_nodes: np.ndarray


@dataclass(frozen=True, slots=True)
class FirstFitResult:
    """Per node of the call: kernel status and the chosen rows (pick order, -1 padded)."""

    status: np.ndarray
    chosen: np.ndarray
    chosen_slot: np.ndarray


def _modelled(spec: RequestSpec, index: DeviceIndex) -> bool:
    features = index.features
    if spec.admin_access is not None and (spec.admin_access or not features.admin_access):
        return False
    if spec.capacity is not None or spec.class_name not in index.classes:
        return False
    if any(s.expression is None for s in spec.selectors):
        return False
    if spec.derived_attributes:
        return False  # 1.37 derived attributes (or their error with the gate off): the search's
    if spec.mode == EXACT_COUNT:
        return spec.count > 0
    return spec.mode == ALL


def _applies(requests: frozenset[str], request: str, sub: str) -> bool:
    """Upstream's constraint scope: all requests, a parent (all its subrequests) or `req/sub`."""
    if not requests:
        return True
    return request in requests or (bool(sub) and f"{request}/{sub}" in requests)


Slots = list[tuple[int, int, int, str, RequestSpec]]  # claim, request, sub, parent name, spec


@dataclass(frozen=True, slots=True)
class _Layout:
    """The shape-level part of a plan: the slots in upstream's search order (no index rows)."""

    claim_first_req: list[int]
    req_first_slot: list[int]
    req_subs: list[int]
    slots: Slots
    prioritized: int


def _layout(specs: list[ClaimSpec], index: DeviceIndex) -> _Layout | None:
    """The plan's slots, or None when the kernel does not model the pod."""
    features = index.features
    claim_first_req = [0]
    req_first_slot: list[int] = []
    req_subs: list[int] = []
    slots: Slots = []
    prioritized = 0
    for c, claim in enumerate(specs):
        fewest_total = 0
        for r, request in enumerate(claim.requests):
            options = list(request.first_available)
            if options:
                if not features.prioritized_list:
                    return None
                prioritized += 1
            elif request.exactly is not None:
                options = [request.exactly]
            else:
                return None
            if not all(_modelled(spec, index) for spec in options):
                return None
            fewest_total += min(spec.count if spec.mode == EXACT_COUNT else 0 for spec in options)
            req_first_slot.append(len(slots))
            req_subs.append(len(options) if request.first_available else 0)
            for sub, spec in enumerate(options):
                slots.append((c, r, sub if request.first_available else -1, request.name, spec))
        if fewest_total > MAX_DEVICES_PER_CLAIM:
            return None
        if any(con.match_attribute is None and con.distinct_attribute is None for con in claim.constraints):
            return None
        claim_first_req.append(len(req_subs))
    return _Layout(claim_first_req, req_first_slot, req_subs, slots, prioritized)


@dataclass(frozen=True, slots=True)
class _Columns:
    """The plan's row and node columns over some nodes (all, or a later generation's changed)."""

    candidates: np.ndarray  # uint8 [S, rows]
    constraint_values: np.ndarray  # int32 [C, rows]
    awkward_nodes: np.ndarray
    counter_nodes: np.ndarray
    short_nodes: np.ndarray


def plan(specs: list[ClaimSpec], index: DeviceIndex) -> FirstFitPlan | None:
    """The first-fit kernel's inputs for a pod, or None when the kernel does not model it."""
    layout = _layout(specs, index)
    if layout is None:
        return None
    columns = _columns(specs, index, layout, None)
    slots = layout.slots

    def ints(items: list[int]) -> np.ndarray:
        return np.asarray(items, dtype=np.int64)

    return FirstFitPlan(
        claim_first_req=ints(layout.claim_first_req),
        req_first_slot=ints(layout.req_first_slot),
        req_subs=ints(layout.req_subs),
        slot_claim=ints([c for c, *_ in slots]),
        slot_all=np.array([spec.mode == ALL for *_, spec in slots], dtype=np.uint8),
        slot_count=ints([spec.count if spec.mode == EXACT_COUNT else 0 for *_, spec in slots]),
        slot_sub=ints([sub for _, _, sub, _, _ in slots]),
        slot_request=ints([r for _, r, _, _, _ in slots]),
        candidates=columns.candidates,
        constraint_kind=ints(
            [0 if con.match_attribute else 1 for claim in specs for con in claim.constraints]
        ),
        constraint_applies=_applies_matrix(specs, slots),
        constraint_values=columns.constraint_values,
        awkward_nodes=columns.awkward_nodes,
        counter_nodes=columns.counter_nodes,
        has_all=any(spec.mode == ALL for *_, spec in slots),
        prioritized_requests=layout.prioritized,
        short_nodes=columns.short_nodes,
    )


def carried(
    old: FirstFitPlan | None, changes: Changes, specs: list[ClaimSpec], index: DeviceIndex
) -> FirstFitPlan | None:
    """`plan(specs, index)` from an earlier generation's plan of the same shape (`old`), with the
    changed nodes' rows and flags worked out again: every column is per row or per node, each
    row's and node's value its own (the layout depends on the shape, the classes and features
    only, which `changes` vouch are the same)."""
    if old is None:
        return None
    nodes = changes.touched
    if not len(nodes):
        return old
    layout = _layout(specs, index)
    if layout is None:  # cannot happen with the same classes and features: be safe all the same
        return None
    rows, _ = node_rows(index, nodes)
    columns = _columns(specs, index, layout, nodes)
    candidates = old.candidates.copy()
    candidates[:, rows] = columns.candidates
    values = old.constraint_values.copy()
    values[:, rows] = columns.constraint_values
    awkward, counter, short = old.awkward_nodes.copy(), old.counter_nodes.copy(), old.short_nodes.copy()
    awkward[nodes], counter[nodes], short[nodes] = (
        columns.awkward_nodes,
        columns.counter_nodes,
        columns.short_nodes,
    )
    return replace(
        old,
        candidates=candidates,
        constraint_values=values,
        awkward_nodes=awkward,
        counter_nodes=counter,
        short_nodes=short,
    )


def _applies_matrix(specs: list[ClaimSpec], slots: Slots) -> np.ndarray:
    applies = [
        [
            int(sc == c and _applies(con.requests, parent, spec.name if sub >= 0 else ""))
            for sc, _, sub, parent, spec in slots
        ]
        for c, claim in enumerate(specs)
        for con in claim.constraints
    ]
    return np.array(applies, dtype=np.uint8) if applies else np.zeros((0, len(slots)), dtype=np.uint8)


def _columns(
    specs: list[ClaimSpec], index: DeviceIndex, layout: _Layout, nodes: np.ndarray | None
) -> _Columns:
    """The plan's columns over every row and node (`nodes` None), or over the rows of `nodes`
    and those nodes (aligned with `node_rows`)."""
    counters = counter_columns(index)
    slots = layout.slots
    picked, row_node, at, node_at, num_nodes, num_rows = node_subset(index, nodes)
    row_tainted = index.row_tainted[at]
    other_special = counters.other_special[at]
    candidates = np.zeros((len(slots), num_rows), dtype=np.uint8)
    awkward_rows = np.zeros(num_rows, dtype=bool)
    for s, (_, _, _, _, spec) in enumerate(slots):
        mask = index.mask(spec.class_name, tuple(sel.expression or "" for sel in spec.selectors))
        match = mask.match[at]
        candidates[s] = match
        if row_tainted.any():
            for i in np.flatnonzero(match & row_tainted).tolist():
                row = i if picked is None else int(picked[i])
                if not all_tolerated(index.row_device[row].taints, spec.tolerations):
                    candidates[s, i] = 2
        awkward_rows |= (match & other_special) | mask.error[at]
    selected = candidates.any(axis=0) if len(slots) else np.zeros(num_rows, dtype=bool)

    values: list[np.ndarray] = []
    for c, claim in enumerate(specs):
        for con in claim.constraints:
            attribute = con.match_attribute or con.distinct_attribute or ""
            member = [
                sc == c and _applies(con.requests, parent, spec.name if sub >= 0 else "")
                for sc, _, sub, parent, spec in slots
            ]
            codes = index.attribute_codes(attribute)[at]
            rows = candidates[np.array(member, dtype=bool)].any(axis=0)
            awkward_rows |= rows & (codes == -2)
            values.append(codes)

    def node_flags(rows: np.ndarray) -> np.ndarray:
        return np.bincount(row_node[rows], minlength=num_nodes) > 0

    counter_nodes = node_flags(selected & counters.row_consumes[at])
    awkward_nodes = index.node_has_invalid_pool[node_at] | (counter_nodes & counters.uncertain[node_at])
    if awkward_rows.any():
        awkward_nodes |= node_flags(awkward_rows)
    has_all = any(spec.mode == ALL for *_, spec in slots)
    if has_all:
        # Upstream reports an error on these nodes before searching: its search must say it.
        awkward_nodes |= counters.incomplete[node_at] | _over_claim_limit(
            slots, candidates, row_node, num_nodes
        )

    # A request whose every slot asks for more rows than the node has selectable (candidates == 1,
    # the only rows the kernel takes) cannot be met there, whatever is free. Only where the kernel
    # could not have handed the node to upstream's search instead: with an `All` slot upstream may
    # raise a node's error before it reaches the short request, and so past the per-claim limit.
    short_nodes = np.zeros(num_nodes, dtype=bool)
    largest: dict[int, int] = {}
    for c, _, _, _, spec in slots:
        largest[c] = largest.get(c, 0) + spec.count
    shortcut = not has_all and max(largest.values(), default=0) <= MAX_DEVICES_PER_CLAIM
    req_subs = layout.req_subs
    for q, first in enumerate(layout.req_first_slot if shortcut else []):
        short = np.ones(num_nodes, dtype=bool)
        for s in range(first, first + max(req_subs[q], 1)):
            spec = slots[s][4]
            if spec.mode != EXACT_COUNT:
                short[:] = False
                break
            selectable = np.bincount(row_node[candidates[s] == 1], minlength=num_nodes)
            short &= selectable < spec.count
        short_nodes |= short

    return _Columns(
        candidates=candidates,
        constraint_values=(
            np.array(values, dtype=np.int32) if values else np.zeros((0, num_rows), dtype=np.int32)
        ),
        awkward_nodes=awkward_nodes,
        counter_nodes=counter_nodes,
        short_nodes=short_nodes,
    )


def _over_claim_limit(
    slots: Slots, candidates: np.ndarray, row_node: np.ndarray, num_nodes: int
) -> np.ndarray:
    """Nodes where upstream's validation counts more than 32 devices for some claim (an `All`
    request counts the devices it selects on the node; `firstAvailable` its smallest option)."""
    fewest: dict[tuple[int, int], np.ndarray] = {}
    for s, (c, r, _, _, spec) in enumerate(slots):
        if spec.mode == ALL:
            need = np.bincount(row_node[candidates[s] != 0], minlength=num_nodes)
        else:
            need = np.full(num_nodes, spec.count, dtype=np.int64)
        key = (c, r)
        fewest[key] = np.minimum(fewest[key], need) if key in fewest else need
    totals: dict[int, np.ndarray] = {}
    for (c, _), need in fewest.items():
        totals[c] = totals.get(c, 0) + need
    over = np.zeros(num_nodes, dtype=bool)
    for total in totals.values():
        over |= total > MAX_DEVICES_PER_CLAIM
    return over


def run(
    pod: FirstFitPlan,
    index: DeviceIndex,
    free: np.ndarray,
    positions: np.ndarray,
    *,
    max_work: int = MAX_WORK,
    nothing_held: bool = False,
) -> FirstFitResult:
    """Upstream's first allocation on the nodes at `positions` (UNKNOWN where not modelled).

    `nothing_held`: decide as if no device were in use (upstream's search with an empty
    allocated state, used to tell "in use" from "does not exist" in failure reasons).
    """
    columns: CounterColumns = counter_columns(index)
    if nothing_held:
        free = np.ones(index.num_rows, dtype=bool)
        available = columns.capacity
    else:
        available = columns.available(free)
    positions = positions.astype(np.int64)
    skip = pod.awkward_nodes[positions] | (
        columns.overdrawn_nodes(available)[positions] & pod.counter_nodes[positions]
    )
    # Nodes where a request cannot be met even with all free: the search finds nothing there.
    short = ~skip & pod.short_nodes[positions]
    todo = np.flatnonzero(~skip & ~short)
    width = MAX_DEVICES_PER_CLAIM * (len(pod.claim_first_req) - 1)
    status = np.full(len(positions), kernel.STATUS_UNKNOWN, dtype=np.int8)
    status[short] = kernel.STATUS_NONE
    chosen = np.full((len(positions), width), -1, dtype=np.int64)
    chosen_slot = np.full((len(positions), width), -1, dtype=np.int64)
    if len(todo):
        inputs = kernel.first_fit_inputs(
            node_start=index.node_start,
            claim_first_req=pod.claim_first_req,
            req_first_slot=pod.req_first_slot,
            req_subs=pod.req_subs,
            slot_claim=pod.slot_claim,
            slot_all=pod.slot_all,
            slot_count=pod.slot_count,
            candidates=pod.candidates,
            free=free,
            row_ptr=columns.row_ptr,
            row_counter=columns.row_counter,
            row_amount=columns.row_amount,
            available=available,
            constraint_kind=pod.constraint_kind,
            constraint_applies=pod.constraint_applies,
            constraint_values=pod.constraint_values,
        )
        got = kernel.first_fit(
            inputs, nodes=positions[todo], max_work=max_work, max_per_claim=MAX_DEVICES_PER_CLAIM
        )
        status[todo], chosen[todo], chosen_slot[todo] = got
    return FirstFitResult(status=status, chosen=chosen, chosen_slot=chosen_slot)


def preference(pod: FirstFitPlan, chosen_slot: np.ndarray) -> np.ndarray:
    """Upstream's prioritized-list score per node from the chosen slots (as
    `scoring.preference`): sum over firstAvailable requests of 8 - chosen subrequest, over 8 per request."""
    if pod.prioritized_requests == 0:
        return np.ones(len(chosen_slot))
    subs = np.flatnonzero(pod.slot_sub >= 0)
    # A request's chosen subrequest serves at least one device (counts are > 0, `All` needs one).
    present = (chosen_slot[:, :, None] == subs[None, None, :]).any(axis=1)
    score: np.ndarray = (present * (8 - pod.slot_sub[subs])).sum(axis=1) / (8 * pod.prioritized_requests)
    return score


class FirstFitBook:
    """The sets the kernel found per node in one pod evaluation, kept as the kernel's arrays
    (thousands of nodes must not become thousands of Python objects on the filter path)."""

    def __init__(self) -> None:
        self._where_made: dict[str, int] = {}  # name -> its position over all batches, in add order
        self._batches: list[tuple[np.ndarray, np.ndarray]] = []
        self._pending: list[list[str]] = []  # names of the batches not yet in `_where_made`
        self._size = 0  # positions handed out so far

    def add(self, names: list[str], chosen: np.ndarray, chosen_slot: np.ndarray) -> None:
        """Keep a batch; the name -> position map is made when first read (`_where`): filter
        adds thousands of names and only prioritize, and bind for one node, read them."""
        if len(names) != len(chosen):
            raise ValueError(f"{len(names)} names for {len(chosen)} chosen sets")
        self._batches.append((chosen, chosen_slot))
        self._pending.append(names)

    @property
    def _where(self) -> dict[str, int]:
        where = self._where_made
        for names in self._pending:
            where.update(zip(names, range(self._size, self._size + len(names)), strict=True))
            self._size += len(names)
        self._pending = []
        return where

    def __contains__(self, name: object) -> bool:
        return name in self._where

    def among(self, names: list[str]) -> list[str]:
        """The names that have a set in the book, in order."""
        return list(filter(self._where.__contains__, names))

    def gather(self, names: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Chosen rows and slots of `names` (all must be in the book), stacked (by array indexing:
        the batches are padded to one width and concatenated)."""
        if not names:
            return np.zeros((0, 0), dtype=np.int64), np.zeros((0, 0), dtype=np.int64)
        where = np.fromiter(map(self._where.__getitem__, names), dtype=np.int64, count=len(names))
        if len(self._batches) == 1:
            chosen, slots = self._batches[0]
            return chosen[where], slots[where]
        width = max(chosen.shape[1] for chosen, _ in self._batches)
        padded = [
            tuple(np.pad(a, ((0, 0), (0, width - a.shape[1])), constant_values=-1) for a in batch)
            for batch in self._batches
        ]
        chosen = np.concatenate([c for c, _ in padded])[where]
        slots = np.concatenate([s for _, s in padded])[where]
        return chosen, slots
