"""Topology scores of a pod's device choice on each feasible node (what `extender.core.ranking` runs).

Feasibility is decided elsewhere (the tiers of `extender.core.tiers`); this module only chooses
*which* feasible devices to take and how good that choice is. Two paths:

- **kernel path**: the pod's requests are plain `ExactCount` requests (no admin access, capacity
  requests or `firstAvailable`) whose constraints are scalar `matchAttribute`/
  `distinctAttribute`. Then `kernels.topology.best_sets` searches the best valid set on all
  nodes of the call at once (exact for small candidate sets, bounded beyond).
- **first-fit path**: every other pod, and nodes where a selected device needs upstream's search
  (shared counters, shared capacity, binding conditions, untolerated taints, CEL errors, list
  attributes). Upstream's own allocation is scored with `kernels.topology.score_sets`, so those
  nodes are still ranked by topology, just without a choice of devices.

Both paths then add the partition terms (`partition_parts`) where the chosen set takes partitions
(MIG slices): `kernels.topology.partition_terms` over the rows' parent groups and counter shares
(`extender.index.topology.Partitions`, built once per index generation), so nodes are ranked by how well
their choice keeps whole GPUs and large MIG profiles free.

The kernel path never decides feasibility: a node it finds no set for (which would be a mismatch
with upstream's rules) falls back to the first-fit path and is logged.
"""

from __future__ import annotations

import weakref
from bisect import bisect_right
from dataclasses import dataclass, replace
from itertools import filterfalse
from typing import Any

import numpy as np

from extender.allocator.allocating import MAX_DEVICES_PER_CLAIM
from extender.allocator.requests import EXACT_COUNT, ClaimSpec, RequestSpec
from extender.allocator.results import ClaimAllocation
from extender.allocator.taints import all_tolerated
from extender.core import freekeyed, reasons
from extender.core.shapes import node_rows, node_subset, shape_data
from extender.index.snapshot import Changes, DeviceIndex, patched_array
from extender.index.topology import (
    NodePartitions,
    Partitions,
    TopologySettings,
    assemble_partitions,
    node_partitions,
)
from kernels import single_partition, warming
from kernels import topology as kernels

#: How a node's device set was found (shown by `explain`).
EXACT, BOUNDED, FIRST_FIT = "exact", "bounded", "first-fit"
#: A one-device pod's better partition than first-fit's, checked by upstream's search at bind.
PARTITION = "partition"
#: The kernels model at most this many devices per pod.
MAX_KERNEL_DEVICES = 64


@dataclass(frozen=True, slots=True)
class KernelPlan:
    """Kernel inputs that depend on the pod and the index generation, not on the nodes."""

    requests: tuple[tuple[int, RequestSpec], ...]  # (claim position, request) in kernel order
    candidates: np.ndarray  # uint8 [R, rows]
    counts: np.ndarray  # int64 [R]
    claim_of: np.ndarray  # int64 [R]
    constraint_kind: np.ndarray  # int64 [C]: 0 match, 1 distinct
    constraint_members: np.ndarray  # uint8 [C, R]
    constraint_values: np.ndarray  # int32 [C, rows]
    awkward_nodes: np.ndarray  # bool [nodes]: the kernels' model is not exact there


@dataclass(frozen=True, slots=True)
class NodeScore:
    """The best device set found on one node and its score terms (each in [0, 1])."""

    score: float
    locality: float
    fragmentation: float
    packing: float
    preference: float
    method: str  # EXACT, BOUNDED, FIRST_FIT or PARTITION
    rows: tuple[int, ...]  # index rows of the chosen devices
    partition_packing: float | None = None  # None: the set takes no partition (MIG slice)
    partition_headroom: float | None = None


@dataclass(frozen=True, slots=True)
class _Batch:
    score: np.ndarray  # float64 [M]
    parts: np.ndarray  # float64 [M, 3] or [M, 5] (with the partition terms, NaN where none)
    preference: np.ndarray  # float64 [M]
    chosen: np.ndarray  # int64 [M, K], -1 padded
    method: str | np.ndarray  # one method for the batch, or per node


class ScoreBook:
    """The topology scores of one pod evaluation, per node, kept as the kernels' arrays.

    Scoring thousands of nodes must not build thousands of Python objects on the prioritize
    path: batches stay arrays, `values` gathers the final scores of many nodes at once, and
    `get` builds a NodeScore only for the node somebody asks about (bind, explain).
    """

    def __init__(self) -> None:
        self._where: dict[str, int] = {}  # name -> its position over all batches, in add order
        self._batches: list[_Batch] = []
        self._starts: list[int] = []  # the first position of each batch
        self._size = 0

    def add(
        self,
        names: list[str],
        score: np.ndarray,
        parts: np.ndarray,
        preference: np.ndarray,
        chosen: np.ndarray,
        method: str | np.ndarray,
    ) -> None:
        """Record one kernel call's results for `names` (aligned with the arrays)."""
        self._batches.append(_Batch(score, parts, preference, chosen, method))
        self._starts.append(self._size)
        self._where.update(zip(names, range(self._size, self._size + len(names)), strict=True))
        self._size += len(names)

    def __contains__(self, name: object) -> bool:
        return name in self._where

    def __len__(self) -> int:
        return len(self._where)

    def scored_among(self, names: list[str]) -> list[str]:
        """The names that are scored, in order."""
        return list(filter(self._where.__contains__, names))

    def unscored_among(self, names: list[str]) -> list[str]:
        """The names that are not scored yet, in order."""
        return list(filterfalse(self._where.__contains__, names))

    def _gather(self, names: list[str], column: str) -> np.ndarray:
        """One per-node column of the batches for `names` (all must be scored), by array indexing."""
        if not names:
            return np.zeros(0, dtype=np.float64)
        where = np.fromiter(map(self._where.__getitem__, names), dtype=np.int64, count=len(names))
        if len(self._batches) == 1:
            values: np.ndarray = getattr(self._batches[0], column)[where]
            return values
        flat = np.concatenate([getattr(batch, column) for batch in self._batches]).astype(np.float64)
        gathered: np.ndarray = flat[where]
        return gathered

    def values(self, names: list[str]) -> np.ndarray:
        """The final scores of `names` (all must be scored)."""
        return self._gather(names, "score")

    def preferences(self, names: list[str]) -> np.ndarray:
        """The prioritized-list preference of `names` (all must be scored), like `values`."""
        return self._gather(names, "preference")

    def get(self, name: str) -> NodeScore | None:
        """The node's score and chosen rows, or None if it was not scored."""
        position = self._where.get(name)
        if position is None:
            return None
        number = bisect_right(self._starts, position) - 1
        batch = self._batches[number]
        i = position - self._starts[number]
        method = batch.method if isinstance(batch.method, str) else str(batch.method[i])
        extra = batch.parts[i, 3:5] if batch.parts.shape[1] >= 5 else np.full(2, np.nan)
        return NodeScore(
            score=float(batch.score[i]),
            locality=float(batch.parts[i, 0]),
            fragmentation=float(batch.parts[i, 1]),
            packing=float(batch.parts[i, 2]),
            preference=float(batch.preference[i]),
            method=method,
            rows=tuple(int(r) for r in batch.chosen[i] if r >= 0),
            partition_packing=None if np.isnan(extra[0]) else float(extra[0]),
            partition_headroom=None if np.isnan(extra[1]) else float(extra[1]),
        )

    def items(self) -> list[tuple[str, NodeScore]]:
        """Every scored node with its NodeScore (for explain and tests)."""
        return [(name, score) for name in self._where if (score := self.get(name)) is not None]


def relevant_rows(specs: list[ClaimSpec], index: DeviceIndex, rows: np.ndarray | None = None) -> np.ndarray:
    """Devices of the classes the pod asks for, free or not: what packing and fragmentation count
    (over every row, or aligned with `rows`: each row's answer is its own)."""
    at: slice | np.ndarray = slice(None) if rows is None else rows
    relevant = np.zeros(index.num_rows if rows is None else len(rows), dtype=bool)
    for claim in specs:
        for request in claim.requests:
            for spec in (request.exactly, *request.first_available):
                if spec is not None and spec.class_name in index.classes:
                    relevant |= index.mask(spec.class_name, ()).match[at]
    return relevant


def selected_rows(
    index: DeviceIndex, spec: RequestSpec, rows: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Rows a request selects (tolerations applied) and rows that need upstream's search (over
    every row, or aligned with `rows`: each row's answer is its own)."""
    mask = index.mask(spec.class_name, tuple(s.expression or "" for s in spec.selectors))
    at = slice(None) if rows is None else rows
    selected = mask.match.copy() if rows is None else mask.match[rows]
    tainted = index.row_tainted[at]
    if tainted.any():
        row_device = index.row_device
        for i in np.flatnonzero(selected & tainted).tolist():
            row = i if rows is None else int(rows[i])
            if not all_tolerated(row_device[row].taints, spec.tolerations):
                selected[i] = False
    awkward = (selected & index.row_special[at]) | mask.error[at]
    return selected, awkward


@dataclass(frozen=True, slots=True)
class KernelBase:
    """What `kernel_plan` reads that does not depend on what is free: kept per shape and index
    generation (`shapes`), so a claim change (a new free mask) costs a few array operations, and
    carried to later generations with the changed nodes' rows and flags worked out again."""

    requests: tuple[tuple[int, RequestSpec], ...]
    usable: np.ndarray  # bool [R, rows]: the request selects the row (taints tolerated), not special
    counts: np.ndarray
    claim_of: np.ndarray
    constraint_kind: np.ndarray
    constraint_members: np.ndarray  # uint8 [C, R]
    constraint_values: np.ndarray  # int32 [C, rows]
    listed: np.ndarray  # bool [C, rows]: a list value (the kernels' model is not exact there)
    awkward_nodes: np.ndarray  # bool [nodes]: an invalid pool, or a selected row needs the search


def kernel_plan(specs: list[ClaimSpec], index: DeviceIndex, free: np.ndarray) -> KernelPlan | None:
    """The kernel inputs for a pod, or None when the kernels cannot model its requests."""
    shape = shape_data(specs, index)
    if "kernel_base" not in shape.items:
        old = shape.take("kernel_base")
        if old is not None and (old[0] is None or isinstance(old[0], KernelBase)):
            shape.items["kernel_base"] = _carried_base(old[0], old[1], specs, index)
        else:
            shape.items["kernel_base"] = _kernel_base(specs, index, None)
    base = shape.items["kernel_base"]
    if not isinstance(base, KernelBase):
        return None
    candidates = (base.usable & free).astype(np.uint8)
    awkward_nodes = base.awkward_nodes
    # A list value on a row some member request could take (free) leaves the node to the search.
    listed = np.zeros(index.num_rows, dtype=bool)
    for c in range(len(base.constraint_kind)):
        if base.listed[c].any():
            listed |= candidates[base.constraint_members[c].astype(bool)].any(axis=0) & base.listed[c]
    if listed.any():
        awkward_nodes = awkward_nodes | (
            np.bincount(index.row_node[listed], minlength=len(awkward_nodes)) > 0
        )
    return KernelPlan(
        requests=base.requests,
        candidates=candidates,
        counts=base.counts,
        claim_of=base.claim_of,
        constraint_kind=base.constraint_kind,
        constraint_members=base.constraint_members,
        constraint_values=base.constraint_values,
        awkward_nodes=awkward_nodes,
    )


def _kernel_requests(specs: list[ClaimSpec], index: DeviceIndex) -> list[tuple[int, RequestSpec]] | None:
    """(claim position, request) in kernel order, or None when the kernels cannot model them."""
    requests: list[tuple[int, RequestSpec]] = []
    for position, claim in enumerate(specs):
        if sum(r.exactly.count for r in claim.requests if r.exactly is not None) > MAX_DEVICES_PER_CLAIM:
            return None  # upstream fails such a claim with its own error; its search reports it
        for request in claim.requests:
            spec = request.exactly
            if spec is None or request.first_available or spec.mode != EXACT_COUNT or spec.count <= 0:
                return None
            if spec.admin_access or spec.capacity is not None or spec.class_name not in index.classes:
                return None
            if spec.derived_attributes:
                return None  # 1.37 derived attributes: constraint values per request, the search's
            if any(s.expression is None for s in spec.selectors):
                return None
            requests.append((position, spec))
        names = {spec.name for p, spec in requests if p == position}
        for constraint in claim.constraints:
            attribute = constraint.match_attribute or constraint.distinct_attribute
            if attribute is None or any(name not in names for name in constraint.requests):
                return None  # unknown constraint type or subrequest reference: upstream decides
    if not requests or sum(spec.count for _, spec in requests) > MAX_KERNEL_DEVICES:
        return None
    return requests


def _kernel_base(specs: list[ClaimSpec], index: DeviceIndex, nodes: np.ndarray | None) -> KernelBase | None:
    """The pod's `KernelBase` over every row and node (`nodes` None), or over the rows of `nodes`
    and those nodes (aligned with `shapes.node_rows`); None when the kernels cannot model it."""
    requests = _kernel_requests(specs, index)
    if requests is None:
        return None
    rows, row_node, at, node_at, num_nodes, num_rows = node_subset(index, nodes)
    awkward_rows = np.zeros(num_rows, dtype=bool)
    usable = np.zeros((len(requests), num_rows), dtype=bool)
    not_special = ~index.row_special[at]
    for r, (_, spec) in enumerate(requests):
        selected, awkward = selected_rows(index, spec, rows)
        awkward_rows |= awkward
        usable[r] = selected & not_special
    kinds: list[int] = []
    members: list[np.ndarray] = []
    values: list[np.ndarray] = []
    for position, claim in enumerate(specs):
        names = {spec.name: r for r, (p, spec) in enumerate(requests) if p == position}
        for constraint in claim.constraints:
            attribute = constraint.match_attribute or constraint.distinct_attribute or ""
            member = np.zeros(len(requests), dtype=np.uint8)
            for name, r in names.items():
                if not constraint.requests or name in constraint.requests:
                    member[r] = 1
            kinds.append(0 if constraint.match_attribute else 1)
            members.append(member)
            values.append(index.attribute_codes(attribute)[at])
    awkward_nodes = index.node_has_invalid_pool[node_at].copy()
    if awkward_rows.any():
        awkward_nodes |= np.bincount(row_node[awkward_rows], minlength=num_nodes) > 0
    constraint_values = (
        np.array(values, dtype=np.int32) if values else np.zeros((0, num_rows), dtype=np.int32)
    )
    return KernelBase(
        requests=tuple(requests),
        usable=usable,
        counts=np.array([spec.count for _, spec in requests], dtype=np.int64),
        claim_of=np.array([p for p, _ in requests], dtype=np.int64),
        constraint_kind=np.array(kinds, dtype=np.int64),
        constraint_members=(
            np.array(members, dtype=np.uint8) if members else np.zeros((0, len(requests)), dtype=np.uint8)
        ),
        constraint_values=constraint_values,
        listed=constraint_values == -2,
        awkward_nodes=awkward_nodes,
    )


def _carried_base(
    old: KernelBase | None, changes: Changes, specs: list[ClaimSpec], index: DeviceIndex
) -> KernelBase | None:
    """`_kernel_base(specs, index, None)` from an earlier generation's (`old`): the changed nodes'
    rows and flags worked out again (each row's and node's value is its own; whether the kernels
    model the pod depends on the shape and the classes, which `changes` vouch are the same)."""
    nodes = changes.touched
    if old is None or not len(nodes):
        return old
    part = _kernel_base(specs, index, nodes)
    if part is None:  # cannot happen with the same classes: be safe all the same
        return None
    rows, _ = node_rows(index, nodes)
    usable, values, listed = old.usable.copy(), old.constraint_values.copy(), old.listed.copy()
    usable[:, rows], values[:, rows], listed[:, rows] = part.usable, part.constraint_values, part.listed
    awkward_nodes = old.awkward_nodes.copy()
    awkward_nodes[nodes] = part.awkward_nodes
    return replace(old, usable=usable, constraint_values=values, listed=listed, awkward_nodes=awkward_nodes)


def short_requests(specs: list[ClaimSpec], index: DeviceIndex, positions: np.ndarray) -> list[str]:
    """Per node position: the first request the node lacks devices for even with all free ("" if
    none, or unsure); `short_request_codes` as texts (for a few nodes: the tiers use the codes)."""
    codes, texts = short_request_codes(specs, index, positions)
    return [texts[c] if c >= 0 else "" for c in codes.tolist()]


def short_request_codes(
    specs: list[ClaimSpec], index: DeviceIndex, positions: np.ndarray
) -> tuple[np.ndarray, list[str]]:
    """Per node position: the first request the node lacks devices for even with all free, as a
    number into the returned texts (-1 if none, or unsure), vectorised over nodes; every tier
    words its "N device(s) of class X" from it. Thousands of nodes share the few texts.

    A device counts when the request selects it and tolerates its taints (`selected_rows`), as
    upstream's search sees it. A request with a firstAvailable list is short when every
    subrequest is. Like upstream's helper, the answer for a node stops at the first request it
    cannot be sure of (a selector error on one of its devices, an unknown class).
    """
    codes = shape_data(specs, index).memo("short_request", len(index.node_names), np.int64)
    found = codes.get(np.asarray(positions, dtype=np.int64), lambda todo: _short_flat(specs, index, todo))
    texts: list[str] = []
    for claim in specs:
        for request in claim.requests:
            options = [request.exactly] if request.exactly is not None else list(request.first_available)
            if options:
                first = options[0]
                need = first.count if first.mode == EXACT_COUNT else 1
                texts.append(reasons.shortage(claim.ref, request.name, need, first.class_name))
    return found, texts


def _short_flat(specs: list[ClaimSpec], index: DeviceIndex, positions: np.ndarray) -> np.ndarray:
    """`short_request_codes`' numbers at `positions`: the request's number among the pod's requests
    that have options (in claim and request order), -1 if none or unsure. Depends only on the
    index and the pod's shape (`extender.core.shapes`), so it is kept per node."""
    num_nodes = len(index.node_names)
    out = np.full(len(positions), -1, dtype=np.int64)
    number = 0
    open_ = np.ones(len(positions), dtype=bool)
    for claim in specs:
        for request in claim.requests:
            options = [request.exactly] if request.exactly is not None else list(request.first_available)
            if not options:
                continue
            short = np.ones(len(positions), dtype=bool)
            unsure = np.zeros(len(positions), dtype=bool)
            for spec in options:
                if spec.class_name not in index.classes:
                    unsure[:] = True
                    continue
                mask = index.mask(spec.class_name, tuple(s.expression or "" for s in spec.selectors))
                selected, _ = selected_rows(index, spec)
                found = np.bincount(index.row_node[selected], minlength=num_nodes)[positions]
                unsure |= (np.bincount(index.row_node[mask.error], minlength=num_nodes)[positions]) > 0
                short &= found < max(spec.count, 1)
            open_ &= ~unsure
            out[open_ & short] = number
            number += 1
            open_ &= ~short
    return out


def preference(specs: list[ClaimSpec], allocations: list[ClaimAllocation]) -> float:
    """Upstream's prioritized-list score, sum over firstAvailable requests of (8 - index of the
    chosen subrequest), divided by its maximum (8 per such request): 1.0 when every request got
    its first choice, and for pods without prioritized lists."""
    score = 0
    requests = 0
    for spec, allocation in zip(specs, allocations, strict=False):
        chosen = {r.parent: r.request for r in allocation.devices if r.parent}
        for request in spec.requests:
            if request.first_available:
                requests += 1
                if request.name in chosen:
                    names = [s.name for s in request.first_available]
                    score += 8 - names.index(chosen[request.name])
    return score / (8 * requests) if requests else 1.0


def combine(parts: np.ndarray, preference: np.ndarray, settings: TopologySettings) -> np.ndarray:
    """The node's score in [0, 1] from (locality, fragmentation, packing[, partition terms]) and preference.

    With `spread`, fragmentation still steers which devices a node gives (inside the kernel), but
    not which node wins: spreading onto empty nodes breaks whole groups by design, and counting
    that against empty nodes would undo the policy. The partition terms (columns 3 and 4, from
    `partition_parts`) are fragmentation of parent GPUs: they count only with `binpack`, and only
    on nodes whose set takes a partition (elsewhere they are NaN and their weights leave the sum).
    """
    binpack = settings.packing == "binpack"
    fragmentation = settings.fragmentation_weight if binpack else 0.0
    weights = np.array(
        [settings.locality_weight, fragmentation, settings.packing_weight, settings.preference_weight]
    )
    total = weights.sum()
    if parts.shape[1] < 5 or not binpack:
        if total <= 0:
            return np.zeros(len(parts))
        combined: np.ndarray = (parts[:, :3] @ weights[:3] + preference * weights[3]) / total
        return combined
    extra = np.array([settings.partition_packing_weight, settings.partition_headroom_weight])
    applies = ~np.isnan(parts[:, 3])
    numerator = parts[:, :3] @ weights[:3] + preference * weights[3]
    numerator = numerator + np.where(applies, np.nan_to_num(parts[:, 3:5]) @ extra, 0.0)
    denominator = total + applies * extra.sum()
    combined = np.divide(numerator, denominator, out=np.zeros(len(parts)), where=denominator > 0)
    return combined


_PARTITIONS: weakref.WeakKeyDictionary[DeviceIndex, Partitions] = weakref.WeakKeyDictionary()


#: id(node block) -> (the block, its NodePartitions) of the last generation grouped: blocks are
#: re-used across index generations while their node is unchanged (extender.index.snapshot).
_NODE_PARTS: dict[int, tuple[Any, NodePartitions]] = {}


def partitions(index: DeviceIndex) -> Partitions:
    """The index's parent-GPU groups and counter shares (built on first use, once per generation;
    only the nodes whose block changed since the last generation grouped are grouped again, and
    an index whose rows are the last one's but some nodes' patches those nodes' ranges)."""
    global _NODE_PARTS, _LAST_PARTS
    found = _PARTITIONS.get(index)
    if found is None:
        patched = _patched_partitions(index)
        if patched is not None:
            _PARTITIONS[index] = patched
            return patched
        parts: list[NodePartitions] = []
        cache: dict[int, tuple[Any, NodePartitions]] = {}
        for name in index.node_names:
            block = index.blocks[name]
            hit = _NODE_PARTS.get(id(block))
            if hit is None or hit[0] is not block:
                hit = (block, node_partitions(index.topology, block.devices, index.pools[name]))
            cache[id(block)] = hit
            parts.append(hit[1])
        _NODE_PARTS = cache
        found = assemble_partitions(parts, index.node_start)
        _PARTITIONS[index] = found
        group_start = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum([len(part.group_counters) for part in parts], out=group_start[1:])
        _LAST_PARTS = (index.serial, parts, group_start, found)
    return found


#: (index serial, per node position its NodePartitions, group id start per node, the result) of
#: the last generation grouped, for `_patched_partitions`.
_LAST_PARTS: tuple[int, list[NodePartitions], np.ndarray, Partitions] | None = None


def _patched_partitions(index: DeviceIndex) -> Partitions | None:
    """The last generation's groups with the rebuilt nodes' ranges written over, when `index`'s
    rows are its rows but some nodes' (`DeviceIndex.patched`) and each rebuilt node has the same
    groups (count and counters per group) as before; None otherwise (group every node)."""
    global _LAST_PARTS
    last, patch = _LAST_PARTS, index.patched
    if last is None:
        return None
    # The nodes rebuilt since the last generation grouped (over generations that did not group).
    changes = index.changes_since(last[0])
    if changes is not None:
        rebuilt = changes.rebuilt
    elif patch is not None and patch[0] == last[0]:
        rebuilt = patch[1]
    else:
        return None
    _, parts, group_start, before = last
    new: list[tuple[int, NodePartitions]] = []
    for position in rebuilt.tolist():
        name = index.node_names[position]
        block = index.blocks[name]
        part = node_partitions(index.topology, block.devices, index.pools[name])
        old = parts[position]
        if not np.array_equal(part.group_counters, old.group_counters) or (
            part.row_cost.shape[1] != old.row_cost.shape[1]
        ):
            return None
        _NODE_PARTS[id(block)] = (block, part)
        new.append((position, part))
    # Written over copies, or the very arrays where the rebuilt nodes group alike (mostly: a slice
    # re-published with the same devices); the row-cost matrix is the largest column of the index.
    groups, costs, only = [], [], []
    width = before.row_cost.shape[1]
    for position, part in new:
        lo, hi = int(index.node_start[position]), int(index.node_start[position + 1])
        offset = int(group_start[position])
        groups.append((lo, hi, np.where(part.row_group >= 0, part.row_group + offset, -1)))
        cost = np.zeros((hi - lo, width), dtype=before.row_cost.dtype)
        cost[:, : part.row_cost.shape[1]] = part.row_cost  # the node's width is its old width
        costs.append((lo, hi, cost))
        only.append((lo, hi, part.counters_only))
    found = Partitions(
        patched_array(before.row_group, groups),
        patched_array(before.row_cost, costs),
        before.group_counters,
        patched_array(before.row_counters_only, only),
    )
    parts = list(parts)
    for position, part in new:
        parts[position] = part
    _LAST_PARTS = (index.serial, parts, group_start, found)
    return found


#: The last `group_state` answer with its inputs: `free` masks are never changed in place (the
#: view makes a new one per change), so the same (groups, free) objects give the same state; the
#: calls of one prioritize, and every call until a claim changes, share it. Callers only read it.
_GROUP_STATE: list[tuple[Partitions, np.ndarray, tuple[np.ndarray, np.ndarray]]] = []


def group_state(groups: Partitions, free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per group: the share of each counter not held by allocated rows, and the allocated row count."""
    state = None
    for known_groups, known_free, known in _GROUP_STATE:
        if known_groups is groups and known_free is free:
            return known
        if known_groups is groups and len(known_free) == len(free):
            state = _group_state_since(groups, free, known_free, known)
    if state is None:
        state = _group_state(groups, free)
    _GROUP_STATE[:] = [(groups, free, state)]
    return state


def _group_state_since(
    groups: Partitions, free: np.ndarray, known_free: np.ndarray, known: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray] | None:
    """`group_state(groups, free)` from the state under `known_free`: the groups with a row whose
    free bit changed are worked out again from their held rows, in `_group_state`'s order (so the
    same floats), the others copied; None when more than an eighth of the groups changed. A bind
    changes one node's groups, and `np.subtract.at` over every held row was 0.6 ms at 5,000 nodes."""
    changed = np.flatnonzero(known_free != free)
    touched = groups.row_group[changed]
    touched = np.unique(touched[touched >= 0])
    if not len(touched):
        return known
    if len(touched) * 8 > groups.num_groups:
        return None
    in_touched = np.zeros(groups.num_groups + 1, dtype=bool)  # the last entry is row_group -1's
    in_touched[touched] = True
    held = np.flatnonzero(~free & in_touched[groups.row_group])
    group_free, group_used = known[0].copy(), known[1].copy()
    group_free[touched] = 1.0
    np.subtract.at(group_free, groups.row_group[held], groups.row_cost[held])
    group_used[touched] = np.bincount(groups.row_group[held], minlength=groups.num_groups)[touched]
    return group_free, group_used


def _group_state(groups: Partitions, free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    held = np.flatnonzero(~free & (groups.row_group >= 0))
    group_free = np.ones((groups.num_groups, groups.row_cost.shape[1]))
    np.subtract.at(group_free, groups.row_group[held], groups.row_cost[held])
    group_used = np.bincount(groups.row_group[held], minlength=groups.num_groups).astype(np.int64)
    return group_free, group_used


def single_partition_request(specs: list[ClaimSpec], index: DeviceIndex) -> RequestSpec | None:
    """The request of a pod that asks for exactly one device (one claim, one plain ExactCount
    request of count 1, no constraints), or None: for such a pod a partition that is free and whose
    costs fit its group's free counters is a valid allocation on its own (`partition_choices`)."""
    if len(specs) != 1 or len(specs[0].requests) != 1 or specs[0].constraints:
        return None
    request = specs[0].requests[0]
    spec = request.exactly
    if spec is None or request.first_available or spec.mode != EXACT_COUNT or spec.count != 1:
        return None
    if spec.admin_access or spec.capacity is not None or spec.class_name not in index.classes:
        return None
    if any(s.expression is None for s in spec.selectors):
        return None
    return spec


def partition_choices(
    index: DeviceIndex,
    positions: np.ndarray,
    spec: RequestSpec,
    free: np.ndarray,
    relevant: np.ndarray,
    settings: TopologySettings,
) -> np.ndarray:
    """Per node position, the best-scoring partition row for a one-device request (-1: none).

    Candidates are the rows the request selects (tolerations applied, no CEL error) that are
    free, consume counters and nothing else that needs upstream's search
    (`Partitions.row_counters_only`), and whose costs fit their group's free counters: each one
    alone is what upstream's search would accept. Each is scored as a set of one (the four terms
    and the partition terms), all nodes in one kernel call; ties go to the first row in upstream's
    order.
    """
    positions = np.asarray(positions, dtype=np.int64)
    groups = partitions(index)
    if groups.num_groups == 0 or not len(positions):
        return np.full(len(positions), -1, dtype=np.int64)
    memo = _choice_memo(index, spec, free, relevant, settings)
    missing = positions[memo.chosen[positions] == _UNKNOWN]
    if len(missing):
        missing = np.unique(missing)
        if memo.eligible is None:
            mask = index.mask(spec.class_name, tuple(s.expression or "" for s in spec.selectors))
            memo.eligible = selected_rows(index, spec)[0] & groups.row_counters_only & ~mask.error
        memo.chosen[missing] = _partition_choices(
            index, groups, missing, spec, free, relevant, settings, memo.eligible
        )
    picked: np.ndarray = memo.chosen[positions]
    return picked


#: `_ChoiceMemo.chosen` of a node not worked out yet.
_UNKNOWN = -2


@dataclass(slots=True)
class _ChoiceMemo:
    """`partition_choices` per node position for one request, relevant mask and settings at one
    index generation, valid for `free`: a node's choice depends only on its own rows (their
    selection, free and relevant bits, their groups' counters), so when `free` changes only the
    nodes whose rows changed are worked out again."""

    free: np.ndarray
    chosen: np.ndarray  # int64 [nodes]: the row, -1 none, _UNKNOWN not worked out
    #: bool [rows]: rows the request selects that take only counters and had no CEL error (free aside)
    eligible: np.ndarray | None = None


#: Per index generation: (request, relevant rows, settings) -> its memo (`_choice_memo`).
_CHOICES: weakref.WeakKeyDictionary[DeviceIndex, dict[tuple[str, int, str], _ChoiceMemo]] = (
    weakref.WeakKeyDictionary()
)
#: Memos kept per generation (the table starts again when full).
CHOICE_MEMOS = 64
#: Per memo key, the memo of the newest generation that asked and that generation's serial: a
#: later generation starts from it (`_carried_choices`). Holds arrays, never an index.
_LATEST_CHOICES: dict[tuple[str, int, str], tuple[int, _ChoiceMemo]] = {}


def _choice_memo(
    index: DeviceIndex, spec: RequestSpec, free: np.ndarray, relevant: np.ndarray, settings: TopologySettings
) -> _ChoiceMemo:
    """The memo of this request's choices, its stale nodes (rows whose free bit changed) forgotten."""
    memos = _CHOICES.get(index)
    if memos is None:
        memos = _CHOICES[index] = {}
    # The request's repr is its content (frozen dataclasses, its tolerations' dicts); the relevant
    # rows by their bits' hash (a collision is as unlikely as one of any 64-bit hash).
    key = (repr(spec), hash(np.packbits(relevant).tobytes()), repr(settings))
    memo = memos.get(key)
    if memo is None:
        if len(memos) >= CHOICE_MEMOS:
            memos.clear()
        memo = memos[key] = _carried_choices(index, key, free)
    elif memo.free is not free:
        memo.chosen[freekeyed.changed_nodes(index.row_node, memo.free, free)] = _UNKNOWN
        memo.free = free
    return memo


def _carried_choices(index: DeviceIndex, key: tuple[str, int, str], free: np.ndarray) -> _ChoiceMemo:
    """A new generation's memo: the latest earlier generation's choices where they still hold
    (`DeviceIndex.changes_since`: the nodes not changed since, whose rows' free bits are the
    same), else all unknown."""
    chosen = np.full(len(index.node_names), _UNKNOWN, dtype=np.int64)
    latest = _LATEST_CHOICES.get(key)
    if latest is not None and latest[0] < index.serial:
        changes = index.changes_since(latest[0])
        old = latest[1]
        if changes is not None and len(old.chosen) == len(chosen) and len(old.free) == len(free):
            chosen = old.chosen.copy()
            chosen[changes.touched] = _UNKNOWN
            chosen[freekeyed.changed_nodes(index.row_node, old.free, free)] = _UNKNOWN
    memo = _ChoiceMemo(free, chosen)
    if latest is None or latest[0] < index.serial:
        if key not in _LATEST_CHOICES and len(_LATEST_CHOICES) >= CHOICE_MEMOS:
            _LATEST_CHOICES.clear()
        _LATEST_CHOICES[key] = (index.serial, memo)
    return memo


def _partition_choices(
    index: DeviceIndex,
    groups: Partitions,
    positions: np.ndarray,
    spec: RequestSpec,
    free: np.ndarray,
    relevant: np.ndarray,
    settings: TopologySettings,
    eligible: np.ndarray | None = None,
) -> np.ndarray:
    """`partition_choices` worked out for distinct node positions, ascending as the memo gives
    them (`eligible`: `_ChoiceMemo.eligible` if the caller has it)."""
    out = np.full(len(positions), -1, dtype=np.int64)
    if eligible is None:
        mask = index.mask(spec.class_name, tuple(s.expression or "" for s in spec.selectors))
        eligible = selected_rows(index, spec)[0] & groups.row_counters_only & ~mask.error
    if len(positions) * 8 < len(index.node_names):  # a few nodes (kept choices): just their rows
        candidates, _ = node_rows(index, positions)
        rows = candidates[eligible[candidates] & free[candidates]]
    else:
        usable = eligible & free
        if len(positions) < len(index.node_names):
            in_call = np.zeros(len(index.node_names), dtype=bool)
            in_call[positions] = True
            usable &= in_call[index.row_node]
        rows = np.flatnonzero(usable)
    if not len(rows):
        return out
    state = group_state(groups, free)
    left = state[0][groups.row_group[rows]] + kernels.PARTITION_EPSILON
    within = np.take(groups.row_cost, rows, axis=0) <= left
    # Column by column: numpy's all() over a short last axis costs several times these passes.
    fits = np.ones(len(rows), dtype=bool)
    for column in range(within.shape[1]):
        fits &= within[:, column]
    rows = rows[fits]
    if not len(rows):
        return out
    nodes = index.row_node[rows].astype(np.int64)
    parts = _single_parts(index, groups, rows, nodes, free, relevant, settings, state)
    final = combine(parts, np.ones(len(rows)), settings)
    # Rows ascend, so do their nodes: each node's candidates are one run (`starts`), its best is
    # the run's maximum, and its first winner the first in upstream's order.
    starts = np.flatnonzero(np.concatenate(([True], nodes[1:] != nodes[:-1])))
    best = np.repeat(np.maximum.reduceat(final, starts), np.diff(np.append(starts, len(final))))
    winners = np.flatnonzero(final >= best - kernels.TIE_EPSILON)
    first = winners[np.concatenate(([True], nodes[winners][1:] != nodes[winners][:-1]))]
    chosen = np.full(len(index.node_names), -1, dtype=np.int64)
    chosen[nodes[first]] = rows[first]
    picked: np.ndarray = chosen[positions]
    return picked


#: Per index generation: the rows of each parent group, largest first (`single_partition.group_row_lists`).
_GROUP_ROWS: weakref.WeakKeyDictionary[DeviceIndex, tuple[np.ndarray, np.ndarray]] = (
    weakref.WeakKeyDictionary()
)


def _single_parts(
    index: DeviceIndex,
    groups: Partitions,
    rows: np.ndarray,
    nodes: np.ndarray,
    free: np.ndarray,
    relevant: np.ndarray,
    settings: TopologySettings,
    state: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """(M, 5) score terms of each row as a set of one: `score_sets` and `partition_parts`' terms,
    from the one-device kernel (`kernels.single_partition`, the same numbers with a quarter of the
    work); while the kernels warm up, from those general entry points (whose twins answer).
    `state`: `group_state(groups, free)` if the caller has it."""
    if not warming.use_kernels():
        sets = rows.reshape(-1, 1).astype(np.int64)
        _, parts = score_sets(index, nodes, sets, np.zeros(1, dtype=np.int64), free, relevant, settings)
        return partition_parts(index, nodes, sets, free, parts)
    lists = _GROUP_ROWS.get(index)
    if lists is None:
        lists = _GROUP_ROWS[index] = single_partition.group_row_lists(
            groups.row_group, groups.num_groups, groups.row_cost, groups.group_counters
        )
    group_free, group_used = state if state is not None else group_state(groups, free)
    return single_partition.single_terms(
        rows=rows,
        row_node=index.row_node,
        node_start=index.node_start,
        coords=index.row_coords,
        free=free,
        relevant=relevant,
        spread=settings.packing == "spread",
        row_group=groups.row_group,
        row_cost=groups.row_cost,
        group_counters=groups.group_counters,
        group_free=group_free,
        group_used=group_used,
        group_start=lists[0],
        group_rows=lists[1],
    )


def partition_parts(
    index: DeviceIndex, nodes: np.ndarray, sets: np.ndarray, free: np.ndarray, parts: np.ndarray
) -> np.ndarray:
    """`parts` (M, 3) with the partition terms appended: (M, 5), NaN where a set takes no partition.

    Column 3 is partition packing (the set's partitions come from parent GPUs that were already
    partly used), column 4 partition headroom (the largest profile each touched GPU can still
    create, relative to before). Both from `kernels.topology.partition_terms`.
    """
    out = np.full((len(parts), 5), np.nan)
    out[:, :3] = parts[:, :3]
    groups = partitions(index)
    taken = sets[sets >= 0]
    if groups.num_groups == 0 or not len(taken) or not (groups.row_group[taken] >= 0).any():
        return out
    group_free, group_used = group_state(groups, free)
    inputs = kernels.partition_inputs(
        node_start=index.node_start,
        row_group=groups.row_group,
        row_cost=groups.row_cost,
        group_counters=groups.group_counters,
        group_free=group_free,
        group_used=group_used,
        free=free,
    )
    out[:, 3:5] = kernels.partition_terms(inputs, nodes=nodes.astype(np.int64), sets=sets.astype(np.int64))
    return out


def priorities(scores: np.ndarray) -> np.ndarray:
    """0..10 per node: the call's best node gets 10, its worst 0, linear in between.

    Stretching to the call's range keeps kube-scheduler's integer scale from merging nodes whose
    device sets differ; the extender's `weight` in the scheduler configuration sets how much the
    ranking counts against other plugins. Equal scores all get 10.

    Whatever the scores, the answer is 0..10: a score that is not finite (settings bound the
    weights, but a NaN once became a priority of -2**63) gets 0, and the range is taken in
    halves so that no difference of finite scores overflows.
    """
    out = np.zeros(len(scores), dtype=np.int64)
    finite = np.isfinite(scores)
    if not finite.any():
        return out
    half = scores[finite] / 2
    low, high = float(half.min()), float(half.max())
    if high - low < 5e-10:
        out[finite] = 10
    else:
        out[finite] = np.clip(np.rint((half - low) / (high - low) * 10), 0, 10).astype(np.int64)
    return out


def by_preference(priorities: np.ndarray, preference: np.ndarray) -> np.ndarray:
    """0..10 priorities in which a node whose allocation takes an earlier `firstAvailable`
    subrequest ranks above every node that takes a later one; topology orders nodes of equal
    preference.

    A prioritized list is the user's order of preference, and upstream keeps it across nodes:
    kube-scheduler's DynamicResources Score gives each node `Σ (8 - chosen subrequest index)`,
    normalized so the best gets the most. Blended as one term among the topology terms it could
    lose to a tidier node (the real scheduler bound `H100, else L40S, else MI300X` to an H100
    node where this extender had ranked the MI300X node first). So the 11 values are split into
    one band per distinct preference level, best level on top, and `priorities` (the topology
    ranking) places each node inside its band. Vectorised: no loop over nodes or levels.
    """
    levels = np.unique(preference)[::-1]  # best preference first
    if len(levels) <= 1:
        return priorities.copy()
    width = max(11 // len(levels), 1)
    rank = np.searchsorted(-levels, -preference)  # 0 for the best level
    inside = np.rint(priorities * (width - 1) / 10.0).astype(np.int64)
    out: np.ndarray = np.maximum(10 - rank * width - (width - 1) + inside, 0)
    return out


def topology_inputs(
    index: DeviceIndex, free: np.ndarray, relevant: np.ndarray, settings: TopologySettings
) -> kernels.TopologyInputs:
    """The kernels' topology record: the index's coordinates and links, the free and relevant rows,
    and the score's settings (node-independent, so one record serves every call of an evaluation)."""
    return kernels.topology_inputs(
        node_start=index.node_start,
        coords=index.row_coords,
        free=free,
        relevant=relevant,
        level_distance=settings.level_distance,
        link_offset=index.link_offset,
        link_distance=index.link_distance,
        weights=settings.kernel_weights(),
        spread=settings.packing == "spread",
    )


def best_sets(
    plan: KernelPlan,
    index: DeviceIndex,
    nodes: np.ndarray,
    free: np.ndarray,
    relevant: np.ndarray,
    settings: TopologySettings,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Run the best-set kernel on node positions; returns (status, score, parts, chosen)."""
    requests = kernels.search_requests(
        candidates=plan.candidates,
        counts=plan.counts,
        claim_of=plan.claim_of,
        constraint_kind=plan.constraint_kind,
        constraint_members=plan.constraint_members,
        constraint_values=plan.constraint_values,
    )
    return kernels.best_sets(
        topology_inputs(index, free, relevant, settings),
        requests,
        nodes=nodes.astype(np.int64),
        max_work=settings.max_work,
    )


def score_sets(
    index: DeviceIndex,
    nodes: np.ndarray,
    sets: np.ndarray,
    set_claim: np.ndarray,
    free: np.ndarray,
    relevant: np.ndarray,
    settings: TopologySettings,
) -> tuple[np.ndarray, np.ndarray]:
    """Score given device sets (rows, -1 padded) on node positions; returns (score, parts)."""
    return kernels.score_sets(
        topology_inputs(index, free, relevant, settings),
        nodes=nodes.astype(np.int64),
        sets=sets.astype(np.int64),
        set_claim=set_claim.astype(np.int64),
    )
