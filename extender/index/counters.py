"""Shared counters as columns: what each index row consumes and what each node's pools offer.

Partitionable devices (spec dra.md §3.6) consume amounts of named counters from counter sets of
their pool; a set of devices fits when, per counter, the amounts of the devices taken plus those
of the devices already held stay within the counter's value. To decide that without Python per
device, this module lays the counters out as arrays over the device index:

- counters: one id per (node, pool, counter set, counter); `capacity[id]` its value, `counter_node`
  its node. A pool reachable from several nodes gets separate ids per node: each node's search is
  independent, and held consumption is charged to every copy.
- row consumption (CSR): row r consumes `row_amount[row_ptr[r]:row_ptr[r+1]]` of the counters
  `row_counter[...]`.
- consumers: every device of the pool (also devices that are not rows of this node, e.g. in slices
  that target other nodes) with a row of the index whose `free` bit says whether it is held;
  `available(free)` = capacity minus what held consumers use, one array op.

Amounts are int64 milli-units (Quantity * 1000); a value that is not a whole number of milli-units,
or a consumer device without any row in the index (so its held state cannot be read from `free`),
marks the node `uncertain`: its counters are not modelled and the exact search decides it.

Columns are built per node block (`DeviceIndex.blocks`) and cached by block identity: blocks are
re-used across index generations while their node is unchanged, so a rebuild after a one-node
change recomputes that node's columns and concatenates the rest.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from extender.allocator.compatibility import slice_uses_groups
from extender.allocator.features import Features
from extender.allocator.model import DeviceID, PoolID, Slice
from extender.allocator.pools import Pool
from extender.index.overlay import SpannedList
from extender.index.snapshot import DeviceIndex, _NodeBlock, patched_array
from extender.quantity import Quantity

_INT64_MAX = 2**63 - 1
#: Milli-units: the finest unit a counter value or consumption is modelled in.
_UNIT = 1000


#: `available` starts from the last result while at most this share of the counters must be
#: counted again (past it, one full count is as cheap).
REDO_SHARE = 0.25
#: id(quantity) -> (quantity, milli): quantities parsed from one text are one object
#: (`Quantity.parse`), so the few a fleet states are converted once.
_MILLI: dict[int, tuple[Quantity, int | None]] = {}
#: Quantities remembered (the table starts again when full).
MILLI_CACHE = 4096


def milli(quantity: Quantity) -> int | None:
    """The quantity in whole milli-units, or None if it is finer or does not fit in int64."""
    found = _MILLI.get(id(quantity))
    if found is not None and found[0] is quantity:
        return found[1]
    value = _milli(quantity)
    if len(_MILLI) >= MILLI_CACHE:
        _MILLI.clear()
    _MILLI[id(quantity)] = (quantity, value)
    return value


def _milli(quantity: Quantity) -> int | None:
    exact = quantity.exact
    numerator, denominator = exact.numerator, exact.denominator
    if _UNIT % denominator:
        return None
    scaled = numerator * (_UNIT // denominator)
    return scaled if abs(scaled) <= _INT64_MAX // 4 else None


@dataclass(frozen=True, slots=True)
class _BlockCounters:
    """One node block's counter columns, rows and counters numbered from 0 within the block."""

    row_ptr: np.ndarray  # int64 [rows + 1]
    row_counter: np.ndarray  # int64 [nnz], block-local counter ids
    row_amount: np.ndarray  # int64 [nnz]
    capacity: np.ndarray  # int64 [counters]
    local_consumer_row: np.ndarray  # int64: consumer entries whose device is a row of this block
    local_consumer_counter: np.ndarray
    local_consumer_amount: np.ndarray
    foreign: tuple[tuple[DeviceID, int, int], ...]  # (device, counter, amount) for devices not in the block
    uncertain: bool  # amounts not representable: counters of this node are not modelled
    incomplete: bool  # some pool of the node is incomplete (`All` requests fail on it)
    other_special: np.ndarray  # bool [rows]: needs the search for a reason other than counters
    names: tuple[tuple[PoolID, str, str], ...]  # per block-local counter: (pool id, counter set, counter)


def _block_counters(block: _NodeBlock, features: Features) -> _BlockCounters:
    devices = block.devices
    local_row = {id(device): i for i, device in enumerate(devices)}
    where: dict[int, tuple[Slice, Pool]] = {}
    counter_ids: dict[tuple[int, str, str], int] = {}
    names: list[tuple[PoolID, str, str]] = []
    capacity: list[int] = []
    uncertain = False
    consumer_rows: list[int] = []
    consumer_counters: list[int] = []
    consumer_amounts: list[int] = []
    foreign: list[tuple[DeviceID, int, int]] = []
    # A node may see many pools without devices for it (e.g. every node's counter-only slices):
    # one cheap pass picks the pools that matter, the rest are never looked at again.
    relevant = [(number, pool) for number, pool in enumerate(block.pools) if pool.slices or pool.incomplete]
    incomplete = any(pool.incomplete for _, pool in relevant)
    pool_numbers = {id(pool): number for number, pool in relevant}
    binding_pools = {id(pool) for _, pool in relevant if pool.has_binding_conditions}  # a device scan each
    # 1.37 DRADeviceCompatibilityGroups: the kernel does not model groups, so every counter device
    # of a pool that uses them goes to the exact search (a scan per pool only with the gate on).
    grouped_pools = {
        id(pool)
        for _, pool in relevant
        if features.compatibility_groups
        and any(slice_uses_groups(s) for s in (*pool.slices, *pool.slices_not_targeting_node))
    }
    for pool_number, pool in relevant:
        if pool.incomplete or pool.invalid:
            continue  # no row of this node comes from the pool: its counters do not matter here
        for set_name, counters in pool.counter_sets.items():
            for counter_name, value in counters.items():
                amount = milli(value)
                uncertain |= amount is None
                counter_ids[(pool_number, set_name, counter_name)] = len(capacity)
                names.append((pool.id, set_name, counter_name))
                capacity.append(amount or 0)
        for slice_ in (*pool.slices, *pool.slices_not_targeting_node):
            for device in slice_.devices:
                where.setdefault(id(device), (slice_, pool))
                for set_name, counters in device.consumes_counters:
                    for counter_name, value in counters.items():
                        counter = counter_ids.get((pool_number, set_name, counter_name))
                        amount = milli(value)
                        if counter is None or amount is None:
                            uncertain = True  # the pool check should have made it invalid
                            continue
                        row = local_row.get(id(device))
                        if row is None:
                            foreign.append((device.id, counter, amount))
                        else:
                            consumer_rows.append(row)
                            consumer_counters.append(counter)
                            consumer_amounts.append(amount)
    ptr = [0]
    row_counter: list[int] = []
    row_amount: list[int] = []
    other_special = np.zeros(len(devices), dtype=bool)
    for i, device in enumerate(devices):
        slice_, pool = where[id(device)]
        pool_number = pool_numbers[id(pool)] if device.consumes_counters else -1
        for set_name, counters in device.consumes_counters:
            for counter_name, value in counters.items():
                counter = counter_ids.get((pool_number, set_name, counter_name))
                amount = milli(value)
                if counter is not None and amount is not None:
                    row_counter.append(counter)
                    row_amount.append(amount)
        ptr.append(len(row_counter))
        other_special[i] = (
            bool(device.binding_conditions)
            or (features.consumable_capacity and device.allow_multiple_allocations)
            or slice_.per_device_node_selection
            or id(pool) in binding_pools
            or (bool(device.consumes_counters) and not features.partitionable_devices)
            or (features.v137 and bool(slice_.skip_node_operations))  # node-dependent in 1.37
            or id(pool) in grouped_pools
        )

    def ints(values: list[int]) -> np.ndarray:
        return np.asarray(values, dtype=np.int64)

    return _BlockCounters(
        row_ptr=ints(ptr),
        row_counter=ints(row_counter),
        row_amount=ints(row_amount),
        capacity=ints(capacity),
        local_consumer_row=ints(consumer_rows),
        local_consumer_counter=ints(consumer_counters),
        local_consumer_amount=ints(consumer_amounts),
        foreign=tuple(foreign),
        uncertain=uncertain,
        incomplete=incomplete,
        other_special=other_special,
        names=tuple(names),
    )


def _reads_alike(old: _NodeBlock, new: _NodeBlock, features: Features) -> bool:
    """Whether `_block_counters` reads the same of `new` as of `old` (a node block rebuilt for a
    re-published slice mostly is): the same pools in the same order with the same flags and
    counter sets (names in order, values equal), slices with the same flags and device counts,
    and devices on the same block rows with equal consumption, binding conditions and
    allowMultipleAllocations. Then `old`'s columns are `new`'s: every number in them is made from
    these alone (counter ids from pool positions and set order, rows from block positions)."""
    if len(old.devices) != len(new.devices) or len(old.pools) != len(new.pools):
        return False
    old_row = {id(device): row for row, device in enumerate(old.devices)}
    new_row = {id(device): row for row, device in enumerate(new.devices)}
    for a, b in zip(old.pools, new.pools, strict=True):
        if (
            a.id != b.id
            or bool(a.slices) != bool(b.slices)
            or a.incomplete != b.incomplete
            or a.invalid != b.invalid
            or a.has_binding_conditions != b.has_binding_conditions
        ):
            return False
        if a.incomplete or a.invalid or not a.slices:
            continue  # its counters and devices are never read
        if list(a.counter_sets) != list(b.counter_sets):
            return False
        for name, counters in a.counter_sets.items():
            other = b.counter_sets[name]
            if counters is not other and (list(counters) != list(other) or counters != other):
                return False
        slices_a = (*a.slices, *a.slices_not_targeting_node)
        slices_b = (*b.slices, *b.slices_not_targeting_node)
        if len(slices_a) != len(slices_b):
            return False
        for x, y in zip(slices_a, slices_b, strict=True):
            if (
                len(x.devices) != len(y.devices)
                or x.per_device_node_selection != y.per_device_node_selection
                or x.skip_node_operations != y.skip_node_operations
                or (features.compatibility_groups and slice_uses_groups(x) != slice_uses_groups(y))
            ):
                return False
            for d, e in zip(x.devices, y.devices, strict=True):
                if old_row.get(id(d), -1) != new_row.get(id(e), -1):
                    return False
                if d is not e and (
                    (
                        d.consumes_counters is not e.consumes_counters
                        and d.consumes_counters != e.consumes_counters
                    )
                    or d.binding_conditions != e.binding_conditions
                    or d.allow_multiple_allocations != e.allow_multiple_allocations
                ):
                    return False
    return True


class CounterColumns:
    """The counter columns of one DeviceIndex generation (see module docstring)."""

    def __init__(self, index: DeviceIndex, cache: dict[int, tuple[_NodeBlock, _BlockCounters]]) -> None:
        self.serial = index.serial
        parts: list[_BlockCounters] = []
        blocks: list[_NodeBlock] = []  # per node position, the block of `parts`
        for name in index.node_names:
            block = index.blocks[name]
            blocks.append(block)
            hit = cache.get(id(block))
            if hit is None or hit[0] is not block:
                hit = (block, _block_counters(block, index.features))
            parts.append(hit[1])
        # Per node position, shared with later generations that patch some positions (`patched`).
        self._blocks: SpannedList[_NodeBlock] = SpannedList(blocks)
        num_nodes = len(parts)
        rows = np.array([len(p.row_ptr) - 1 for p in parts], dtype=np.int64)
        if not np.array_equal(rows, np.diff(index.node_start)):
            raise ValueError("counter columns do not line up with the index rows")
        counters = np.array([len(p.capacity) for p in parts], dtype=np.int64)
        counter_start = np.zeros(num_nodes + 1, dtype=np.int64)
        np.cumsum(counters, out=counter_start[1:])
        nnz = np.array([len(p.row_counter) for p in parts], dtype=np.int64)
        row_base = index.node_start[:-1]

        def cat(arrays: list[np.ndarray]) -> np.ndarray:
            return np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)

        self.capacity = cat([p.capacity for p in parts])
        self.counter_node = np.repeat(np.arange(num_nodes, dtype=np.int64), counters)
        self.row_counter = cat([p.row_counter for p in parts]) + np.repeat(counter_start[:-1], nnz)
        self.row_amount = cat([p.row_amount for p in parts])
        nnz_start = np.zeros(num_nodes + 1, dtype=np.int64)
        np.cumsum(nnz, out=nnz_start[1:])
        self.row_ptr = np.zeros(index.num_rows + 1, dtype=np.int64)
        if index.num_rows:
            self.row_ptr[1:] = cat([p.row_ptr[1:] for p in parts]) + np.repeat(nnz_start[:-1], rows)
        local = np.array([len(p.local_consumer_row) for p in parts], dtype=np.int64)
        consumer_row = [cat([p.local_consumer_row for p in parts]) + np.repeat(row_base, local)]
        consumer_counter = [
            cat([p.local_consumer_counter for p in parts]) + np.repeat(counter_start[:-1], local)
        ]
        consumer_amount = [cat([p.local_consumer_amount for p in parts])]
        self.uncertain = np.array([p.uncertain for p in parts], dtype=bool)
        for position, part in enumerate(parts):
            for device_id, counter, amount in part.foreign:
                found = index.rows_of.get(device_id)
                if found is None or not len(found):
                    self.uncertain[position] = True  # its held state is not in `free`
                    continue
                consumer_row.append(found[:1])
                consumer_counter.append(np.array([counter_start[position] + counter], dtype=np.int64))
                consumer_amount.append(np.array([amount], dtype=np.int64))
        self.consumer_row = cat(consumer_row)
        self.consumer_counter = cat(consumer_counter)
        self.consumer_amount = cat(consumer_amount)
        self.incomplete = _incomplete_nodes(index)
        self.other_special = (
            np.concatenate([p.other_special for p in parts]) if parts else np.zeros(0, dtype=bool)
        )
        self.row_consumes = np.diff(self.row_ptr) > 0
        self.counter_start = counter_start
        self.nnz_start = nnz_start
        self.local_start = np.zeros(num_nodes + 1, dtype=np.int64)
        np.cumsum(local, out=self.local_start[1:])
        self.has_foreign = any(p.foreign for p in parts)
        self._row_node = index.row_node
        self._parts: SpannedList[_BlockCounters] = SpannedList(parts)
        self._available: tuple[np.ndarray, np.ndarray] | None = None
        self._inherited: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def block_cache(self) -> dict[int, tuple[_NodeBlock, _BlockCounters]]:
        """id(block) -> (block, its columns), for a later generation built from the blocks."""
        return {id(block): (block, part) for block, part in zip(self._blocks, self._parts, strict=True)}

    @classmethod
    def patched(cls, index: DeviceIndex, previous: CounterColumns) -> CounterColumns | None:
        """`previous`'s columns with the nodes `index` rebuilt written over theirs, or None.

        For an index whose rows are the previous generation's but for some nodes'
        (`DeviceIndex.patched`): each rebuilt node's columns are computed and copied into its
        ranges, when they have as many counters, entries and consumers as before and no node
        has consumers outside its rows (`foreign`, read through the row map); no Python runs
        per node that did not change. None: build the columns from the blocks.
        """
        if previous.has_foreign:
            return None
        # The nodes changed since `previous`'s generation: over several generations when none
        # between made columns (`DeviceIndex.changes_since`: the same rows, incomplete shared
        # pools alike), else this generation's own patch of the one before.
        changes = index.changes_since(previous.serial)
        patch = index.patched
        if changes is not None:
            rebuilt, touched, incomplete_same = changes.rebuilt, changes.touched, True
        elif patch is not None and patch[0] == previous.serial:
            _, rebuilt, touched, incomplete_same = patch
        else:
            return None
        parts = previous._parts
        new: list[tuple[int, _BlockCounters]] = []
        new_blocks: list[tuple[int, list[_NodeBlock]]] = []
        for position in rebuilt.tolist():
            block = index.blocks[index.node_names[position]]
            old = parts[position]
            before = previous._blocks[position]
            part = (
                old if _reads_alike(before, block, index.features) else _block_counters(block, index.features)
            )
            if (
                part.foreign
                or len(part.capacity) != len(old.capacity)
                or len(part.row_counter) != len(old.row_counter)
                or len(part.local_consumer_row) != len(old.local_consumer_row)
                or len(part.row_ptr) != len(old.row_ptr)
            ):
                return None
            new.append((position, part))
            new_blocks.append((position, [block]))
        self = cls.__new__(cls)
        self.serial = index.serial
        self.counter_start, self.nnz_start, self.local_start = (
            previous.counter_start,
            previous.nnz_start,
            previous.local_start,
        )
        self.counter_node = previous.counter_node
        self._row_node = index.row_node
        node_start = index.node_start
        spans = []
        for position, part in new:
            spans.append(
                (
                    part,
                    (int(previous.counter_start[position]), int(previous.counter_start[position + 1])),
                    (int(previous.nnz_start[position]), int(previous.nnz_start[position + 1])),
                    (int(previous.local_start[position]), int(previous.local_start[position + 1])),
                    (int(node_start[position]), int(node_start[position + 1])),
                    position,
                )
            )
        self.capacity = patched_array(previous.capacity, [(*c, p.capacity) for p, c, *_ in spans])
        self.row_counter = patched_array(
            previous.row_counter, [(*n, p.row_counter + c[0]) for p, c, n, *_ in spans]
        )
        self.row_amount = patched_array(previous.row_amount, [(*n, p.row_amount) for p, c, n, *_ in spans])
        self.row_ptr = patched_array(
            previous.row_ptr, [(r[0] + 1, r[1] + 1, p.row_ptr[1:] + n[0]) for p, c, n, _, r, _ in spans]
        )
        self.consumer_row = patched_array(
            previous.consumer_row, [(*k, p.local_consumer_row + r[0]) for p, _, _, k, r, _ in spans]
        )
        self.consumer_counter = patched_array(
            previous.consumer_counter, [(*k, p.local_consumer_counter + c[0]) for p, c, _, k, _, _ in spans]
        )
        self.consumer_amount = patched_array(
            previous.consumer_amount, [(*k, p.local_consumer_amount) for p, _, _, k, _, _ in spans]
        )
        self.uncertain = patched_array(previous.uncertain, [(q, q + 1, [p.uncertain]) for p, *_, q in spans])
        self.other_special = patched_array(
            previous.other_special, [(*r, p.other_special) for p, _, _, _, r, _ in spans]
        )
        self.row_consumes = patched_array(
            previous.row_consumes, [(*r, np.diff(p.row_ptr) > 0) for p, _, _, _, r, _ in spans]
        )
        if incomplete_same:  # only the touched nodes' pools can differ in incompleteness
            flags = _incomplete_nodes(index, touched)
            self.incomplete = patched_array(
                previous.incomplete,
                [(q, q + 1, [f]) for q, f in zip(touched.tolist(), flags.tolist(), strict=True)],
            )
        else:
            self.incomplete = _incomplete_nodes(index)
        self.has_foreign = False
        # The previous generation's last `available` and the counters whose value or consumers
        # this one rewrote: the first `available` here redoes those and the ones whose held
        # consumers changed, not every counter.
        self._inherited = None
        if previous._available is not None:
            rebuilt_positions = np.array([position for position, _ in new], dtype=np.int64)
            self._inherited = (*previous._available, rebuilt_positions)
        self._parts = previous._parts.patched([(position, [part]) for position, part in new])
        self._blocks = previous._blocks.patched(new_blocks)
        self._available = None
        return self

    def counter_names(self, position: int) -> tuple[tuple[PoolID, str, str], ...]:
        """(pool id, counter set, counter) of the node's counters, ids counter_start[position]:..."""
        return self._parts[position].names

    def available(self, free: np.ndarray) -> np.ndarray:
        """Per counter, its value minus what held devices (rows not `free`) consume (cached per mask).

        From the last result (this generation's, or the previous generation's for patched
        columns) when few counters can differ: the counters of the nodes whose rows changed
        between the two masks, and of the nodes the patch rewrote, are counted again; the rest
        are copied. A claim change or a one-slice change then costs its nodes' counters.
        """
        last = self._available
        if last is not None and last[0] is free:
            return last[1]
        base: tuple[np.ndarray, np.ndarray] | None = last
        rewritten: np.ndarray | None = None
        if last is None and self._inherited is not None:
            base, rewritten = self._inherited[:2], self._inherited[2]
        self._inherited = None  # used once: do not keep the previous generation's masks alive
        result = self._available_from(base, rewritten, free) if base is not None else None
        if result is None:
            held = ~free[self.consumer_row]
            result = self.capacity.copy()
            np.subtract.at(result, self.consumer_counter[held], self.consumer_amount[held])
        self._available = (free, result)
        return result

    def _available_from(
        self, base: tuple[np.ndarray, np.ndarray], rewritten: np.ndarray | None, free: np.ndarray
    ) -> np.ndarray | None:
        """`available(free)` from `base` = (an earlier mask, the counters' availability under it)
        when at most `REDO_SHARE` of the nodes (or counters) can differ; None otherwise.

        `rewritten`: positions of nodes whose counters or consumers differ from `base`'s columns.
        Without consumers outside their node's rows, a node's counters depend on its own rows
        only: the nodes whose rows changed are found from the rows, and only their counter and
        consumer ranges are read (no pass over every consumer).
        """
        before, values = base
        if len(before) != len(free) or len(values) != len(self.capacity):
            return None
        if not self.has_foreign:
            nodes = np.unique(self._row_node[np.flatnonzero(before != free)])
            if rewritten is not None and len(rewritten):
                nodes = np.union1d(nodes, rewritten)
            if len(nodes) > REDO_SHARE * (len(self.counter_start) - 1):
                return None
            counters = _ranges(self.counter_start, nodes)
            consumers = _ranges(self.local_start, nodes)
            result = values.copy()
            result[counters] = self.capacity[counters]
            take = consumers[~free[self.consumer_row[consumers]]]
            np.subtract.at(result, self.consumer_counter[take], self.consumer_amount[take])
            return result
        if rewritten is not None:
            return None  # patched columns never have foreign consumers
        moved = (before != free)[self.consumer_row]  # consumer entries whose row changed
        redo = np.zeros(len(self.capacity), dtype=bool)
        redo[self.consumer_counter[moved]] = True
        if np.count_nonzero(redo) > REDO_SHARE * len(redo):
            return None
        result = values.copy()
        result[redo] = self.capacity[redo]
        take = redo[self.consumer_counter] & ~free[self.consumer_row]
        np.subtract.at(result, self.consumer_counter[take], self.consumer_amount[take])
        return result

    def overdrawn_nodes(self, available: np.ndarray) -> np.ndarray:
        """bool per node: some counter is already below zero (upstream's check then behaves
        differently from a per-device one, so such nodes are left to the search)."""
        return np.bincount(self.counter_node[available < 0], minlength=len(self.incomplete)) > 0


_last: CounterColumns | None = None
_last_index: weakref.ref[DeviceIndex] | None = None  # weak: an old index must not outlive its use


def counter_columns(index: DeviceIndex) -> CounterColumns:
    """The counter columns of `index`, re-using the per-block columns of the previous call.

    Called on the placement's worker thread only (like everything in placement), so the module-level cache of
    the latest generation needs no lock.
    """
    global _last, _last_index
    if _last is not None and _last_index is not None and _last_index() is index:
        return _last
    columns = CounterColumns.patched(index, _last) if _last is not None else None
    if columns is None:
        columns = CounterColumns(index, _last.block_cache() if _last is not None else {})
    _last, _last_index = columns, weakref.ref(index)
    return columns


def _ranges(starts: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """`starts[p]:starts[p + 1]` for each position, concatenated (int64, no Python per position)."""
    low = starts[positions]
    sizes = starts[positions + 1] - low
    total = int(sizes.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    first = np.zeros(len(sizes), dtype=np.int64)
    np.cumsum(sizes[:-1], out=first[1:])
    out: np.ndarray = np.arange(total, dtype=np.int64) + np.repeat(low - first, sizes)
    return out


def to_fraction(amount: int) -> Fraction:
    """Milli-units back to an exact value (for messages and tests)."""
    return Fraction(amount, _UNIT)


def _incomplete_nodes(index: DeviceIndex, positions: np.ndarray | None = None) -> np.ndarray:
    """bool per node (or per one of `positions`): some pool the node sees is incomplete (`All`
    requests fail there).

    Read from `index.pools` (the node's own pools and the cluster's shared markers), not from
    the node's block: an incomplete pool gives the node no rows, so its block does not hold it.
    The shared tuple is scanned once for all nodes.
    """
    wanted = range(len(index.node_names)) if positions is None else positions.tolist()
    out = np.zeros(len(wanted), dtype=bool)
    shared_flags: dict[int, tuple[bool, frozenset[PoolID]]] = {}
    for out_position, position in enumerate(wanted):
        name = index.node_names[position]
        pools = index.pools.get(name)
        if pools is None:
            continue
        shared = pools.shared
        cached = shared_flags.get(id(shared))
        if cached is None:
            cached = (False, frozenset(p.id for p in shared if p.incomplete))
            shared_flags[id(shared)] = cached
        incomplete_shared = cached[1]
        out[out_position] = any(p.incomplete for p in pools.own) or bool(
            incomplete_shared - set(pools.hidden)
        )
    return out
