"""DeviceIndex: an immutable snapshot of every device each node can use, as columns.

Built from a ClusterState whenever its `devices_generation` changes; readers hold a snapshot
that never changes in place. Parsed slices (and with them the per-device CEL caches) are carried
over from the previous snapshot when the raw slice object is unchanged. Pools are gathered once
per pool, not once per node (`extender.allocator.pools.PoolCatalog`): a pool whose slices are
unchanged keeps its facts and Pool objects, and each node is given only the pools its own slices
touch plus one shared tuple of the pools every node sees alike (e.g. other nodes' counter-only
pool markers). A node's block (its rows) is re-used while the node object and the pools that give
it devices are the same objects, so a change to one node-local slice, counter slice included,
re-parses that slice and rebuilds that node's block only.

A change costs what changed (issue 21 item 2): when the state's device change log says only
slices and nodes were updated, `_replay` re-reads just those objects and `PoolCatalog.replacing`
re-does just their pools; only the nodes those pools name are gathered again; when each rebuilt
block keeps its row count, the row columns are the previous generation's with those rows written
over (`patched`), and everything derived per row (masks, attribute codes, counter columns,
parent-GPU groups, the free mask) copies the previous generation's rows and re-derives the
rebuilt nodes' only. Otherwise the columns are concatenated from the blocks. Containers of
Python objects are shared with the previous generation, not copied (`extender.index.overlay`):
the slice and row lists carry the replaced entries as spans, the node -> block and node -> pools
maps the replaced entries, so a change costs no incref, GC walk or decref per row or per node.

Rows: one row per (node, device the node can use), in the allocator's search order for that
node (pools by driver/pool name, slices by name, devices as listed). A network-attached device
appears once per node that can reach it. Columns:
- `row_node` (int32): the node's position in `node_names`;
- `row_device`: the Device object (identity shared across nodes), a `SpannedList`;
- `row_special` (bool): the device needs the exact search (counters, shared capacity,
  binding conditions, per-device node selection);
- `row_tainted` (bool): the device has a taint that blocks unless tolerated;
- `row_coords` (int32, rows x 4): topology coordinates per level (`extender.index.topology`).
Rows of node n are `node_start[n]:node_start[n+1]`. Nodes with a link matrix annotation have
their pairwise distances at `link_distance[link_offset[n]:]` (rows x rows, NaN where unnamed).
`pools[name]` is the node's pool list exactly as upstream's gatherPools gives it (a NodePools).
"""

from __future__ import annotations

import functools
import logging
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, count
from typing import Any, TypeVar, overload

import numpy as np

from extender.allocator.features import Features
from extender.allocator.inputs import DeviceClassSpec, parse_device_class
from extender.allocator.model import Device, DeviceID, PoolID, Slice, Taint, parse_slice
from extender.allocator.nodeselection import node_matches
from extender.allocator.pools import NodePools, Pool, PoolCatalog, search_key
from extender.allocator.taints import BLOCKING_EFFECTS
from extender.cluster.state import UPDATED, ClusterState, Key, object_key
from extender.index import selector_groups
from extender.index.attribute_table import MALFORMED, AttributeTable, value_code
from extender.index.overlay import OverlayDict, SpannedList
from extender.index.selecting import CachingEvaluator
from extender.index.topology import NODE_LEVEL, TopologyModel
from extender.lru import SizedLRU
from extender.objects import Obj

log = logging.getLogger(__name__)

_T = TypeVar("_T")
#: Numbers every DeviceIndex built in this process (generations repeat across cluster states).
_SERIAL = count()


def patched_array(old: np.ndarray, writes: Sequence[tuple[int, int, Any]]) -> np.ndarray:
    """`old` with `[start:stop] = values` for each write, as a new array; `old` itself when
    every write would leave it as it is (a change that re-publishes the same content copies
    nothing). Arrays are never changed in place: readers of an older generation keep theirs."""
    if all(np.array_equal(old[start:stop], values) for start, stop, values in writes):
        return old
    new = old.copy()
    for start, stop, values in writes:
        new[start:stop] = values
    return new


def union_sorted(rows: np.ndarray, more: np.ndarray) -> np.ndarray:
    """The union of two ascending arrays of distinct rows, ascending: `rows` itself when it holds
    `more` already. A merge (O(len(rows)) copy, no sort or hash): rows rebuilt over many
    generations add up to thousands, and `np.union1d` hashed them all on every change."""
    if len(more) == 0:
        return rows
    at = np.searchsorted(rows, more)
    present = at < len(rows)
    present[present] = rows[at[present]] == more[present]
    if present.all():
        return rows
    return np.insert(rows, at[~present], more[~present])


@dataclass(frozen=True, slots=True)
class SelectorMask:
    """Which rows a (class, request selectors) pair selects; `error` rows raised in CEL."""

    match: np.ndarray
    error: np.ndarray


MaskKey = tuple[str, tuple[str, ...]]
#: At most this many device-side changes are replayed onto the previous index (`_replay`); more
#: and the index is built by the full pass (which re-uses unchanged slices and blocks anyway).
REPLAY_LIMIT = 256
#: Bytes of selector masks one index keeps (LRU): one per distinct (class, selectors) pair seen,
#: each 2 bytes per row, so a stream of distinct selectors cannot grow the index without bound
#: (issue 22 item 3). At 40,000 rows a mask is 80 KB: about 800 masks. An evicted mask is
#: rebuilt from the results cached on the devices.
MASK_CACHE_BYTES = 64 * 2**20
#: ... and at most this many masks (`Settings.selector_mask_cache_size`). The byte bound alone let
#: a small cluster keep tens of thousands (a mask of the sample's 300 rows is about 1 KiB with
#: its record), so a stream of distinct selector texts grew the process for a long time before
#: it levelled off (issue 30 item 3).
MASK_CACHE_ENTRIES = 4096
#: Bytes of interned attribute columns (`attribute_codes`) one index keeps (LRU), 4 per row each.
ATTRIBUTE_CODES_BYTES = 32 * 2**20
_ENTRY_OVERHEAD = 512  # the record, two array headers, the key tuple, the cache entry


def set_mask_cache(*, entries: int, max_bytes: int) -> None:
    """The selector-mask bounds indexes built from now on use (wiring calls this with the
    settings `selector_mask_cache_size` and `selector_mask_cache_bytes`)."""
    global MASK_CACHE_ENTRIES, MASK_CACHE_BYTES
    if entries < 1 or max_bytes < 1:
        raise ValueError(f"a selector-mask cache needs room: entries={entries}, bytes={max_bytes}")
    MASK_CACHE_ENTRIES, MASK_CACHE_BYTES = entries, max_bytes


#: A `device_column` entry not computed yet (computed on demand).
UNCOMPUTED = np.iinfo(np.int32).min


def _mask_size(key: MaskKey, mask: SelectorMask) -> int:
    """Bytes a cached mask keeps: its arrays, its key's texts and the bookkeeping."""
    return mask.match.nbytes + mask.error.nbytes + len(key[0]) + sum(map(len, key[1])) + _ENTRY_OVERHEAD


#: Ids filed per C call in `RowsOf` (between calls other threads may take the GIL).
_ROWS_PER_STEP = 16384


class RowsOf(Mapping[DeviceID, np.ndarray]):
    """Device id -> its rows (int64 array, ascending), built at C speed from the row ids.

    Most devices have one row (node-local), so the map keeps one int per device and makes the
    one-element array on lookup; only devices on several nodes' rows (network-attached) keep
    an array. A dict of arrays per device cost most of an incremental index build.
    """

    __slots__ = ("_multi", "_row")

    def __init__(self, ids: list[DeviceID]) -> None:
        # Filled in slices: one dict() over 180,000 ids (5,000 nodes) held the GIL for about
        # 100 ms in one C call, and /healthz waited (bench/healthz_bench.py, start-up).
        self._row: dict[DeviceID, int] = {}
        for start in range(0, len(ids), _ROWS_PER_STEP):
            stop = min(start + _ROWS_PER_STEP, len(ids))
            self._row.update(zip(ids[start:stop], range(start, stop), strict=True))
        self._multi: dict[DeviceID, np.ndarray] = {}
        if len(self._row) != len(ids):  # some devices are on several rows
            counts = Counter(ids)
            repeated = {device_id for device_id, n in counts.items() if n > 1}
            rows: dict[DeviceID, list[int]] = {device_id: [] for device_id in repeated}
            for row, device_id in enumerate(ids):
                if device_id in repeated:
                    rows[device_id].append(row)
            self._multi = {device_id: np.asarray(r, dtype=np.int64) for device_id, r in rows.items()}

    @classmethod
    def from_rows(cls, rows: dict[DeviceID, int]) -> RowsOf:
        """The map of devices that are on one row each (`rows` is kept, not copied)."""
        made = cls.__new__(cls)
        made._row, made._multi = rows, {}
        return made

    @property
    def row_map(self) -> Mapping[DeviceID, int]:
        """Device id -> row, for devices on one row (read-only use)."""
        return self._row

    @property
    def multi(self) -> bool:
        """Whether some device is on several rows."""
        return bool(self._multi)

    def __getitem__(self, device_id: DeviceID) -> np.ndarray:
        multi = self._multi.get(device_id)
        if multi is not None:
            return multi
        return np.array([self._row[device_id]], dtype=np.int64)

    @overload
    def get(self, device_id: DeviceID, /) -> np.ndarray | None: ...

    @overload
    def get(self, device_id: DeviceID, default: _T, /) -> np.ndarray | _T: ...

    def get(self, device_id: DeviceID, default: object = None) -> object:
        multi = self._multi.get(device_id)
        if multi is not None:
            return multi
        row = self._row.get(device_id)
        return default if row is None else np.array([row], dtype=np.int64)

    def __contains__(self, device_id: object) -> bool:
        return device_id in self._row

    def __iter__(self) -> Iterator[DeviceID]:
        return iter(self._row)

    def __len__(self) -> int:
        return len(self._row)

    def rows_for(self, device_ids: Iterable[DeviceID]) -> np.ndarray:
        """All rows of the devices, concatenated (devices without rows add none)."""
        single: list[int] = []
        arrays: list[np.ndarray] = []
        row_get, multi_get = self._row.get, self._multi.get
        for device_id in device_ids:
            multi = multi_get(device_id)
            if multi is not None:
                arrays.append(multi)
                continue
            row = row_get(device_id)
            if row is not None:
                single.append(row)
        if arrays:
            return np.concatenate([np.asarray(single, dtype=np.int64), *arrays])
        return np.asarray(single, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class _NodeBlock:
    """One node's rows, re-used by the next snapshot while `key` is unchanged.

    `pools` are the node's pools that give it devices (complete, valid, with device slices), in
    search order; the block holds them so the ids in `key` cannot be re-used while it lives.
    """

    key: tuple[Any, ...]
    pools: list[Pool]
    devices: list[Device]
    special: list[bool]
    tainted: list[bool]
    coords: np.ndarray  # int32, one row of level coordinates per device
    links: np.ndarray | None  # pairwise distances from the node's link annotation


@dataclass(frozen=True, slots=True)
class _RowMap:
    """A generation's rows -> an earlier generation's rows: `gather[row]` (-1: a row that
    generation did not have), or, with `gather` None, every row itself but the `missing` ones
    (ascending): generations that only patched rows need no row-sized map (`carry_from`)."""

    gather: np.ndarray | None
    missing: np.ndarray
    num_rows: int

    def array(self) -> np.ndarray:
        if self.gather is not None:
            return self.gather
        out = np.arange(self.num_rows, dtype=np.int64)
        out[self.missing] = -1
        return out

    def then(self, step: _RowMap) -> _RowMap:
        """This map (to an earlier generation) seen from a later generation `step` leads from."""
        if step.gather is None and self.gather is None:
            return _RowMap(None, union_sorted(self.missing, step.missing), step.num_rows)
        older = self.array()
        if step.gather is None:
            out = older.copy()
            out[step.missing] = -1
        else:
            out = np.where(step.gather >= 0, older[np.maximum(step.gather, 0)], -1)
        return _RowMap(out, np.flatnonzero(out < 0), step.num_rows)


@dataclass(frozen=True, slots=True)
class _Carry:
    """The previous generation's derived arrays, and where its rows went (`carry_from`).

    `rows` maps each row to the previous generation's row for a row of a re-used block, -1 for a
    row of a rebuilt block; `fresh` lists the latter (the only rows evaluated again).
    """

    masks: dict[MaskKey, SelectorMask]
    codes: dict[str, np.ndarray]
    class_exprs: dict[str, tuple[str, ...]]
    rows: _RowMap
    fresh: np.ndarray
    same_rows: bool  # every row itself but `fresh`: a copy does it (`patched`)
    #: The rows of `fresh` whose device may read differently from the previous generation's
    #: device on that row (`_same_values`; all of `fresh` unless `same_rows`): a code column
    #: works out only these again.
    changed: np.ndarray
    #: Code columns of the previous generation that held no UNCOMPUTED entry.
    complete: frozenset[str]
    #: The newest attribute table built before this generation, and where its rows went (its
    #: generation may be older than the previous one: the table is built only when needed).
    table: AttributeTable | None
    table_rows: _RowMap | None
    #: Masks and code columns of generations before the previous one that no generation since
    #: asked for, over the same rows but their `fresh` ones (only through patched generations,
    #: `_stale`): key -> (mask, fresh rows, the class's selectors it was made with) / (codes, fresh).
    stale_masks: dict[MaskKey, tuple[SelectorMask, np.ndarray, tuple[str, ...] | None]]
    stale_codes: dict[str, tuple[np.ndarray, np.ndarray]]

    def take(self, old: np.ndarray) -> np.ndarray:
        """The previous generation's column on this generation's rows; `fresh` rows are left as
        they were in `old` (same rows) or zero (the caller writes them either way)."""
        if self.same_rows:
            return old.copy()
        gather = self.rows.array()
        out = np.zeros(len(gather), dtype=old.dtype)
        kept = gather >= 0
        out[kept] = old[gather[kept]]
        return out


def _node_block(
    key: tuple[Any, ...],
    node: Obj,
    pools: list[Pool],
    features: Features,
    topology: TopologyModel,
    before: _NodeBlock | None = None,
) -> _NodeBlock:
    """The node's rows from its pools; `before` is the node's previous block, whose topology
    coordinates (and link distances, for the same node object) are kept when every device reads
    as the one it replaces (`_same_values`: coordinates are read from attributes and driver)."""
    devices: list[Device] = []
    special: list[bool] = []
    tainted: list[bool] = []
    for pool in pools:
        if pool.incomplete or pool.invalid:
            continue
        for slice_ in pool.slices:
            for device in slice_.devices:
                if device.binding_conditions and not features.device_binding_and_status:
                    continue  # never selectable with the gate off
                if slice_.per_device_node_selection and not node_matches(
                    node,
                    node_name=device.node_name,
                    all_nodes=device.all_nodes,
                    node_selector=device.node_selector,
                ):
                    continue
                devices.append(device)
                special.append(
                    bool(device.consumes_counters)
                    or bool(device.binding_conditions)
                    or (features.consumable_capacity and device.allow_multiple_allocations)
                    or slice_.per_device_node_selection
                    or pool.has_binding_conditions
                    # 1.37: allocatable only where the node declares DRAOptionalNodeOperations
                    or (features.v137 and bool(slice_.skip_node_operations))
                )
                tainted.append(
                    features.device_taints and any(t.effect in BLOCKING_EFFECTS for t in device.taints)
                )
    if (
        before is not None
        and len(before.devices) == len(devices)
        and all(_same_values(a, b) for a, b in zip(before.devices, devices, strict=True))
    ):
        coords = before.coords
        same_names = all(a.name == b.name for a, b in zip(before.devices, devices, strict=True))
        if before.key[0] == key[0] and same_names:  # the same node object and row names
            return _NodeBlock(key, pools, devices, special, tainted, coords, before.links)
    else:
        coords = topology.node_coords(devices)
    links = topology.link_matrix(node, [d.name for d in devices]) if devices else None
    return _NodeBlock(key, pools, devices, special, tainted, coords, links)


def _pools_with_devices(pools: NodePools, catalog: PoolCatalog) -> list[Pool]:
    """The node's pools that give it rows, in search order (own pools and shared device pools)."""
    own = [p for p in pools.own if p.slices and not p.invalid and not p.incomplete]
    if not catalog.shared_with_devices:
        return own
    shared = [p for p in catalog.shared_with_devices if p.id not in pools.hidden]
    return sorted([*own, *shared], key=search_key) if own else shared


#: Shared-tuple changes a `NodePoolsMap` re-wraps on read before it re-wraps every entry once
#: (so entries do not keep old shared tuples, and their old marker pools, alive for long).
STALE_SHARED_LIMIT = 64


class NodePoolsMap(Mapping[str, NodePools]):
    """Node -> NodePools, shared between generations (`OverlayDict`), merged into this
    generation's shared tuple as read.

    A change to a pool every node sees (e.g. one node's counter-only marker) gives every node a
    new shared tuple; re-wrapping 5,000 NodePools per such change cost ~5 ms, so an entry made
    for another shared tuple is re-wrapped (`NodePools.with_shared`, nothing sorted) the first
    time this generation reads it.
    """

    __slots__ = ("_entries", "_keys", "_rewrapped", "_shared", "_stale")

    def __init__(
        self,
        entries: OverlayDict[str, NodePools],
        shared: tuple[Pool, ...],
        keys: tuple[tuple[bool, PoolID], ...],
        stale: int = 0,
    ) -> None:
        self._entries = entries
        self._shared, self._keys = shared, keys
        self._rewrapped: dict[str, NodePools] = {}
        self._stale = stale  # shared tuples since every entry was made for the current one

    def updated(
        self, changes: dict[str, NodePools], shared: tuple[Pool, ...], keys: tuple[tuple[bool, PoolID], ...]
    ) -> NodePoolsMap:
        """The next generation's map: `changes` replace their entries, `shared` is the tuple."""
        stale = self._stale + (shared is not self._shared)
        if stale > STALE_SHARED_LIMIT:
            merged = {name: pools.with_shared(shared, keys) for name, pools in self._entries.items()}
            merged.update(changes)
            return NodePoolsMap(OverlayDict(merged), shared, keys)
        return NodePoolsMap(self._entries.replacing(changes), shared, keys, stale)

    def __getitem__(self, name: str) -> NodePools:
        pools = self._entries[name]
        if pools.shared is self._shared:
            return pools
        found = self._rewrapped.get(name)
        if found is None:  # the same value on every read: a race only builds it twice
            found = self._rewrapped[name] = pools.with_shared(self._shared, self._keys)
        return found

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


def _pools_map(pools: Mapping[str, NodePools]) -> NodePoolsMap:
    if isinstance(pools, NodePoolsMap):
        return pools
    first = next(iter(pools.values()), None)
    shared = first.shared if first is not None else ()
    keys = first.shared_keys if first is not None else ()
    return NodePoolsMap(OverlayDict(dict(pools)), shared, keys, stale=STALE_SHARED_LIMIT)


def _overlay(blocks: Mapping[str, _NodeBlock]) -> OverlayDict[str, _NodeBlock]:
    return blocks if isinstance(blocks, OverlayDict) else OverlayDict(dict(blocks))


class DeviceIndex:
    """One immutable generation of the device index (see module docstring)."""

    # The row columns (`_build_rows` or `_patch_rows`; see the module docstring).
    row_node: np.ndarray
    row_device: SpannedList[Device]  # a list shared with earlier generations, plus spans
    row_special: np.ndarray
    row_tainted: np.ndarray
    row_coords: np.ndarray
    node_start: np.ndarray
    link_offset: np.ndarray
    link_distance: np.ndarray
    rows_of: RowsOf
    node_has_invalid_pool: np.ndarray

    def __init__(
        self,
        *,
        generation: int,
        features: Features,
        nodes: dict[str, Obj],
        slices: Sequence[Slice],
        classes: dict[str, DeviceClassSpec],
        evaluator: CachingEvaluator,
        topology: TopologyModel,
        previous_blocks: Mapping[str, _NodeBlock] | None = None,
        previous_catalog: PoolCatalog | None = None,
        previous: DeviceIndex | None = None,
        replaced: list[tuple[Slice, Slice]] | None = None,
        changed_nodes: set[str] | None = None,
    ) -> None:
        self.generation = generation
        self.serial = next(_SERIAL)
        #: Set when the rows are `previous`'s with some nodes' rows written over (`_patch_rows`):
        #: (previous serial, positions of the rebuilt nodes, positions of the nodes whose pools
        #: were gathered again); derived columns patch those nodes instead of all (`counters`).
        #: The fourth item says whether the cluster's shared pools are the very same objects.
        self.patched: tuple[int, np.ndarray, np.ndarray, bool] | None = None
        #: The patches from earlier generations to this one that per-node answers can be carried
        #: over (`changes_since`), oldest first; set by `build_index` (`_extend_lineage`).
        self.lineage: tuple[_Step, ...] = ()
        self.topology = topology
        self.features = features
        self.nodes = nodes
        if previous is not None and previous.nodes is nodes:  # no node changed: shared, never changed
            self.node_names: list[str] = previous.node_names
            self.node_pos: dict[str, int] = previous.node_pos
        else:
            self.node_names = list(nodes)
            self.node_pos = {name: i for i, name in enumerate(self.node_names)}
        self.slices = slices
        self.classes = classes
        self.evaluator = evaluator
        catalog = None
        if replaced is not None and previous_catalog is not None and previous_catalog.features == features:
            catalog = PoolCatalog.replacing(previous_catalog, replaced)
        self.catalog = catalog if catalog is not None else PoolCatalog(slices, features, previous_catalog)
        self.by_pool: Mapping[PoolID, list[Slice]] = self.catalog.by_pool
        reuse = previous_blocks or {}
        # Node -> its block and its pools; shared with the previous generation where it re-used
        # them (`OverlayDict`), so a one-node change copies neither dict.
        self.blocks: Mapping[str, _NodeBlock] = {}
        self.pools: Mapping[str, NodePools] = {}
        self.rebuilt: list[str] = []  # nodes whose block this snapshot built (not re-used)
        touched = self._touched_nodes(previous, previous_blocks, changed_nodes)
        if previous is not None and touched is not None:
            self._update_nodes(previous, touched)
        else:
            self._gather_nodes(reuse)
        self._masks: SizedLRU[MaskKey, SelectorMask] = SizedLRU(
            max_entries=MASK_CACHE_ENTRIES, max_bytes=MASK_CACHE_BYTES
        )
        # What the previous generation derived, for the rows of re-used blocks (`carry_from`);
        # None for an index built from nothing.
        self._carry: _Carry | None = None
        self._attribute_codes: SizedLRU[str, np.ndarray] = SizedLRU(
            max_entries=2**20, max_bytes=ATTRIBUTE_CODES_BYTES
        )
        # (kind, value) -> code, shared with the next generation so that carried codes keep
        # their meaning; codes come from one counter so two threads never hand out the same one.
        self._interned: dict[tuple[str, Any], int] = {}
        self._next_code: Iterator[int] = count()
        self._table: AttributeTable | None = None  # built on first need (`attribute_table`)
        # id(rows) -> (rows, their table) for `rows_table` (the rows are held, so ids stay theirs).
        self._rows_tables: dict[int, tuple[np.ndarray, AttributeTable]] = {}
        # Names of code columns known to hold no UNCOMPUTED entry (`device_column`).
        self._complete_columns: set[str] = set()
        # id(raw DeviceClass) -> (raw, parsed); lets the next build skip unchanged classes.
        self.parsed_classes: dict[int, tuple[Obj, DeviceClassSpec]] = {}
        # Per slice, the raw ResourceSlice it was parsed from: lets the next build skip unchanged
        # slices (the raw object is held, so no other object can have its id meanwhile).
        self.slice_raws: Sequence[Obj] = ()
        # Where each slice came from (`_parse_slices`) and from which state, for `_replay`.
        self.slice_keys: dict[Key, int] | None = None  # slice position by key
        self.state_ref: weakref.ref[ClusterState] | None = None

    # ----------------------------------------------------------------- nodes
    def _node(
        self, name: str, node: Obj, reuse: Mapping[str, _NodeBlock]
    ) -> tuple[NodePools, _NodeBlock, bool]:
        """One node's pools and block (re-used while its key holds), and its invalid-pool flag."""
        pools = self.catalog.pools_for(name, node)
        with_devices = _pools_with_devices(pools, self.catalog)
        # A node's rows depend on its node object and the pools that give it devices; Pool
        # objects are memoised per pool, so an unchanged pool is the very same object.
        key = (id(node), tuple(id(p) for p in with_devices))
        block = reuse.get(name)
        if block is None or block.key != key:
            block = _node_block(key, node, with_devices, self.features, self.topology, block)
            self.rebuilt.append(name)
        invalid = any(p.invalid for p in pools.own) or any(
            i not in pools.hidden for i in self.catalog.shared_invalid
        )
        return pools, block, invalid

    def _gather_nodes(self, reuse: Mapping[str, _NodeBlock]) -> None:
        """Every node's pools and block, and the rows from them."""
        blocks: dict[str, _NodeBlock] = {}
        pools: dict[str, NodePools] = {}
        invalid: list[bool] = []
        for name, node in self.nodes.items():
            pools[name], blocks[name], bad = self._node(name, node, reuse)
            invalid.append(bad)
        self.blocks = OverlayDict(blocks)
        self.pools = NodePoolsMap(OverlayDict(pools), self.catalog.shared, self.catalog.shared_keys)
        self.node_has_invalid_pool = np.array(invalid, dtype=bool)
        self._build_rows()

    def _touched_nodes(
        self,
        previous: DeviceIndex | None,
        previous_blocks: Mapping[str, _NodeBlock] | None,
        changed_nodes: set[str] | None,
    ) -> set[str] | None:
        """The nodes whose pools can differ from `previous`'s, or None to gather every node.

        A node's pools depend on its node object, the pools naming it, the pools selected by
        node selectors and the shared tuple. When the node list, the selected pools, the shared
        pools that give devices and the shared invalid pools are what `previous` had, only the
        nodes named by changed pools (`PoolCatalog.fresh`/`dropped`) and nodes whose object
        changed can differ; every other node keeps its pools and block.
        """
        if previous is None or previous_blocks is not previous.blocks or previous.features != self.features:
            return None
        catalog, before = self.catalog, previous.catalog
        if self.node_names != previous.node_names or catalog.reused == 0:
            return None
        if len(catalog.selected) != len(before.selected) or any(
            a is not b for a, b in zip(catalog.selected, before.selected, strict=True)
        ):
            return None
        if catalog.shared_invalid != before.shared_invalid or len(catalog.shared_with_devices) != len(
            before.shared_with_devices
        ):
            return None
        if any(
            a is not b for a, b in zip(catalog.shared_with_devices, before.shared_with_devices, strict=True)
        ):
            return None
        touched: set[str] = set()
        for facts in chain(catalog.fresh, catalog.dropped):
            touched.update(facts.named)
        old_nodes = previous.nodes
        if changed_nodes is not None:  # the nodes the state's change log names (`_replay`)
            touched.update(changed_nodes)
        else:
            touched.update(name for name, node in self.nodes.items() if old_nodes.get(name) is not node)
        touched = {name for name in touched if name in self.nodes}  # a set op would walk every node
        if len(touched) * 4 > len(self.nodes):
            return None  # most nodes changed: the full pass is as cheap
        return touched

    def _update_nodes(self, previous: DeviceIndex, touched: set[str]) -> None:
        """`previous`'s pools and blocks, with the touched nodes gathered again (`_touched_nodes`)."""
        catalog = self.catalog
        shared_same = catalog.shared is previous.catalog.shared or (
            len(catalog.shared) == len(previous.catalog.shared)
            and all(a is b for a, b in zip(catalog.shared, previous.catalog.shared, strict=True))
        )
        incomplete_same = shared_same or {p.id for p in catalog.shared if p.incomplete} == {
            p.id for p in previous.catalog.shared if p.incomplete
        }
        invalid = previous.node_has_invalid_pool.copy()
        pools: dict[str, NodePools] = {}
        blocks: dict[str, _NodeBlock] = {}
        for name in touched:
            pools[name], block, invalid[self.node_pos[name]] = self._node(
                name, self.nodes[name], previous.blocks
            )
            if block is not previous.blocks[name]:
                blocks[name] = block
        # Shared with `previous` but the touched nodes'; when only markers without devices
        # changed, the other nodes' own pools are merged into the new shared tuple as they are
        # read (`NodePoolsMap`), not all re-wrapped here.
        self.pools = _pools_map(previous.pools).updated(pools, catalog.shared, catalog.shared_keys)
        self.blocks = _overlay(previous.blocks).replacing(blocks)
        self.node_has_invalid_pool = invalid
        rebuilt = sorted(self.node_pos[name] for name in self.rebuilt)
        if self._patch_rows(previous, rebuilt):
            positions = np.fromiter(
                (self.node_pos[name] for name in touched), dtype=np.int64, count=len(touched)
            )
            self.patched = (
                previous.serial,
                np.asarray(rebuilt, dtype=np.int64),
                np.sort(positions),
                incomplete_same,
            )
        else:
            self._build_rows()

    # ----------------------------------------------------------------- rows
    def _patch_rows(self, previous: DeviceIndex, rebuilt: list[int]) -> bool:
        """`previous`'s row columns with the rebuilt nodes' rows written over theirs.

        Only when every rebuilt block has as many rows (and link entries) as the block it
        replaces and, unless its device ids are the same, no device of either is on several rows;
        False otherwise (`_build_rows`).
        The arrays are copied (C speed), never changed in place: readers of `previous` keep theirs.
        """
        old_blocks = [previous.blocks[previous.node_names[p]] for p in rebuilt]
        new_blocks = [self.blocks[self.node_names[p]] for p in rebuilt]
        rows_of = previous.rows_of
        for old, new in zip(old_blocks, new_blocks, strict=True):
            if len(old.devices) != len(new.devices):
                return False
            if (old.links is None) != (new.links is None) or (
                old.links is not None and new.links is not None and old.links.size != new.links.size
            ):
                return False
        # Mostly a change re-publishes the same devices: the same ids on the same rows keep the
        # row map as it is (it is never changed in place).
        same_ids = all(
            [d.id for d in old.devices] == [d.id for d in new.devices]
            for old, new in zip(old_blocks, new_blocks, strict=True)
        )
        row_ids: dict[DeviceID, int] = {}
        if not same_ids:
            if rows_of.multi:
                return False
            row_ids = dict(rows_of.row_map)
            for old in old_blocks:
                for device in old.devices:
                    row_ids.pop(device.id, None)
        self.row_node = previous.row_node
        self.node_start = previous.node_start
        self.link_offset = previous.link_offset
        spans = [
            (int(self.node_start[position]), int(self.node_start[position + 1]), block)
            for position, block in zip(rebuilt, new_blocks, strict=True)
        ]
        self.row_special = patched_array(previous.row_special, [(a, b, k.special) for a, b, k in spans])
        self.row_tainted = patched_array(previous.row_tainted, [(a, b, k.tainted) for a, b, k in spans])
        self.row_coords = patched_array(previous.row_coords, [(a, b, k.coords) for a, b, k in spans])
        self.link_distance = patched_array(
            previous.link_distance,
            [
                (offset, offset + block.links.size, block.links.ravel())
                for position, block in zip(rebuilt, new_blocks, strict=True)
                if block.links is not None and (offset := int(self.link_offset[position])) >= 0
            ],
        )
        for start, _, block in spans:
            if same_ids:
                break
            for row, device in enumerate(block.devices, start):
                if row_ids.setdefault(device.id, row) != row:
                    return False  # now on several rows: the full build finds them all
        # The previous generation's row list is shared; the rebuilt nodes' rows are spans over it.
        self.row_device = previous.row_device.patched([(start, block.devices) for start, _, block in spans])
        self.rows_of = rows_of if same_ids else RowsOf.from_rows(row_ids)
        return True

    def _build_rows(self) -> None:
        blocks = [self.blocks[name] for name in self.node_names]
        sizes = [len(block.devices) for block in blocks]
        self.row_node = np.repeat(np.arange(len(blocks), dtype=np.int32), sizes)
        self.row_device = SpannedList(list(chain.from_iterable(block.devices for block in blocks)))
        self.row_special = np.fromiter(chain.from_iterable(b.special for b in blocks), dtype=bool)
        self.row_tainted = np.fromiter(chain.from_iterable(b.tainted for b in blocks), dtype=bool)
        self.node_start = np.zeros(len(blocks) + 1, dtype=np.int64)
        np.cumsum(sizes, out=self.node_start[1:])
        self.row_coords = (
            np.concatenate([block.coords for block in blocks])
            if blocks
            else np.zeros((0, NODE_LEVEL), dtype=np.int32)
        )
        self.link_offset = np.full(len(blocks), -1, dtype=np.int64)
        matrices: list[np.ndarray] = []
        used = 0
        for position, block in enumerate(blocks):
            if block.links is not None:
                self.link_offset[position] = used
                matrices.append(block.links.ravel())
                used += block.links.size
        self.link_distance = np.concatenate(matrices) if matrices else np.zeros(0)
        self.rows_of = RowsOf([device.id for device in chain.from_iterable(b.devices for b in blocks)])

    @property
    def cached_masks(self) -> int:
        """How many selector masks this snapshot holds (grows as new selectors are seen)."""
        return len(self._masks)

    @property
    def num_rows(self) -> int:
        return len(self.row_device)

    def changes_since(self, serial: int) -> Changes | None:
        """The nodes whose answers can differ from those of the generation numbered `serial`
        (`self.serial`: none), or None when that generation is not in this one's lineage
        (`_extend_lineage`: other rows, nodes or classes, or too far back): then nothing derived
        there may be carried. Every other node has the same rows (the same Device objects),
        pools, node object and classes, so any answer that depends only on those is unchanged.
        """
        if serial == self.serial:
            empty = np.zeros(0, dtype=np.int64)
            return Changes(empty, empty)
        rebuilt: list[np.ndarray] = []
        touched: list[np.ndarray] = []
        for step in reversed(self.lineage):
            rebuilt.append(step.rebuilt)
            touched.append(step.touched)
            if step.previous == serial:
                return Changes(
                    np.unique(np.concatenate(rebuilt)).astype(np.int64),
                    np.unique(np.concatenate(touched)).astype(np.int64),
                )
        return None

    # ----------------------------------------------------------------- masks
    def carry_from(self, previous: DeviceIndex) -> None:
        """Let masks and attribute codes copy the previous generation's rows of re-used blocks.

        A node block is re-used only while the node, its slices and their pools are unchanged, so
        its rows (same Device objects, same order) select alike under the same class selectors and
        have the same attribute values; only the rows of rebuilt nodes are evaluated again. The
        copy is one gather over all rows (`_Carry.rows`), no Python per node or device. Only
        the previous generation's derived arrays are kept (not the previous index), so
        generations do not chain.
        """
        if self.patched is not None and self.patched[0] == previous.serial:
            # The same rows but the rebuilt nodes': no row-sized map is made.
            rebuilt = self.patched[1]
            starts = self.node_start[rebuilt]
            sizes = self.node_start[rebuilt + 1] - starts
            first = np.zeros(len(sizes), dtype=np.int64)
            np.cumsum(sizes[:-1], out=first[1:])
            fresh = np.arange(int(sizes.sum()), dtype=np.int64) + np.repeat(starts - first, sizes)
            self._carry_with(
                previous, _RowMap(None, fresh, self.num_rows), _changed_rows(previous, self, rebuilt)
            )
            return
        previous_blocks = previous.blocks
        previous_pos = previous.node_pos
        old_pos = np.fromiter(
            (
                previous_pos[name] if previous_blocks.get(name) is block else -1
                for name, block in self.blocks.items()  # in node_names order
            ),
            dtype=np.int64,
            count=len(self.blocks),
        )
        kept = old_pos >= 0
        old_first = np.where(kept, previous.node_start[:-1][np.where(kept, old_pos, 0)], -1)
        gather = np.full(self.num_rows, -1, dtype=np.int64)
        carried = kept[self.row_node]
        offset = np.arange(self.num_rows, dtype=np.int64) - self.node_start[:-1][self.row_node]
        gather[carried] = old_first[self.row_node[carried]] + offset[carried]
        self._carry_with(previous, _RowMap(gather, np.flatnonzero(gather < 0), self.num_rows))

    def _carry_with(self, previous: DeviceIndex, rows: _RowMap, changed: np.ndarray | None = None) -> None:
        """Keep `previous`'s masks and codes with the row map `rows` (see `carry_from`)."""
        interned_limit = 4 * max(self.num_rows, previous.num_rows) + 4096
        codes: dict[str, np.ndarray] = {}
        table: AttributeTable | None = None
        table_rows: _RowMap | None = None
        same_rows = rows.gather is None
        if len(previous._interned) <= interned_limit:
            # Codes of values no longer present stay interned until the table outgrows the
            # rows; past that, a fresh table (and codes built from nothing) bounds it.
            self._interned = previous._interned
            self._next_code = previous._next_code
            codes = dict(previous._attribute_codes.items())
            table, table_rows = previous._table, rows
            if table is None and previous._carry is not None and previous._carry.table_rows is not None:
                # The previous generation did not need its table: carry the one before through
                # both row maps (a row new in either generation is filed again).
                table = previous._carry.table
                table_rows = previous._carry.table_rows.then(rows)
        fresh = rows.missing
        shared = self._interned is previous._interned
        stale_masks, stale_codes = _stale(previous, fresh, same_rows=same_rows, codes=shared)
        self._carry = _Carry(
            masks=dict(previous._masks.items()),
            codes=codes,
            class_exprs={
                name: tuple(s.expression or "" for s in c.selectors) for name, c in previous.classes.items()
            },
            rows=rows,
            fresh=fresh,
            same_rows=same_rows,
            changed=fresh if changed is None else changed,
            complete=frozenset(previous._complete_columns),
            table=table,
            table_rows=table_rows if table is not None else None,
            stale_masks=stale_masks,
            stale_codes=stale_codes,
        )

    def mask(self, class_name: str, selectors: tuple[str, ...]) -> SelectorMask:
        """Rows selected by the class selectors then the request selectors (cached).

        CEL runs once per group of devices that read equal values (`selector_groups`), else once
        per device, and results live on the devices; this is the only place the filter path can
        run CEL, and only the first time a selector is seen. Request selectors are evaluated only
        on the rows the class mask selects (as the allocator, which tries the class first). Rows
        of nodes unchanged since the previous generation are copied from its mask.
        """
        key = (class_name, selectors)
        cached = self._masks.get(key)
        if cached is not None:
            return cached
        device_class = self.classes[class_name]
        class_exprs = tuple(s.expression or "" for s in device_class.selectors)
        carry = self._carry
        old = carry.masks.get(key) if carry is not None else None
        stale = carry.stale_masks.get(key) if carry is not None and old is None else None
        if carry is not None and old is not None and carry.class_exprs.get(class_name) == class_exprs:
            if carry.same_rows and selector_groups.reads_unchanged(
                self, carry.fresh, (*class_exprs, *selectors), carry.codes
            ):
                result = old  # the rebuilt rows read what they read there: they select alike
            elif carry.same_rows:
                result = self._patched_mask(old, carry.fresh, class_name, class_exprs, selectors)
            else:
                match, error = carry.take(old.match), carry.take(old.error)
                self._select(class_name, class_exprs, selectors, carry.fresh, match, error, carry.fresh)
                result = SelectorMask(match=match, error=error)
        elif stale is not None and stale[2] == class_exprs:  # same rows but `fresh`
            result = self._patched_mask(stale[0], stale[1], class_name, class_exprs, selectors)
        else:  # a new selector, or the class's selectors changed: evaluate everything
            match = np.zeros(self.num_rows, dtype=bool)
            error = np.zeros(self.num_rows, dtype=bool)
            rows = np.arange(self.num_rows)
            self._select(class_name, class_exprs, selectors, rows, match, error, rows)
            result = SelectorMask(match=match, error=error)
        self._masks.put(key, result, _mask_size(key, result))
        return result

    def _patched_mask(
        self,
        old: SelectorMask,
        rows: np.ndarray,
        class_name: str,
        class_exprs: tuple[str, ...],
        selectors: tuple[str, ...],
    ) -> SelectorMask:
        """`old` (over this generation's rows) with `rows` evaluated again: `old` itself when they
        select as before (a change that keeps what the node's devices read copies nothing)."""
        match = np.zeros(len(rows), dtype=bool)
        error = np.zeros(len(rows), dtype=bool)
        self._select(class_name, class_exprs, selectors, rows, match, error, np.arange(len(rows)))
        if np.array_equal(old.match[rows], match) and np.array_equal(old.error[rows], error):
            return old
        new_match, new_error = old.match.copy(), old.error.copy()
        new_match[rows], new_error[rows] = match, error
        return SelectorMask(match=new_match, error=new_error)

    def _select(
        self,
        class_name: str,
        class_exprs: tuple[str, ...],
        selectors: tuple[str, ...],
        rows: np.ndarray,
        match: np.ndarray,
        error: np.ndarray,
        at: np.ndarray,
    ) -> None:
        """Write the class's then the request's selection of each row of `rows` into `match` and
        `error` at `at` (aligned with `rows`)."""
        match[at] = False
        error[at] = False
        expressions = (*class_exprs, *selectors)
        if class_exprs and selectors:
            by_class = self.mask(class_name, ())
            error[at] = by_class.error[rows]
            chosen = by_class.match[rows]
            rows, at = rows[chosen], at[chosen]
            expressions = selectors
        selector_groups.evaluate_rows(
            self, rows, expressions, functools.partial(self._evaluate, expressions), match, error, at
        )

    def attribute_codes(self, name: str) -> np.ndarray:
        """Per row, an interned code of the device's attribute `name` (cached per generation).

        -1: the device lacks the attribute (or its type is unknown); -2: a list value, which the
        topology kernels do not model (such pods keep upstream's search for their device choice).
        Equal codes mean equal typed values, as matchAttribute/distinctAttribute compare them.
        Resolved as upstream's lookupAttribute: the exact name, else the bare id when the domain
        is the device's driver.
        """
        from extender.allocator.constraints import lookup_attribute

        def one(device: Device) -> int:
            code = value_code(lookup_attribute(device, name), self.intern)
            return -1 if code == MALFORMED else code

        def whole(table: AttributeTable | None = None) -> np.ndarray:
            table = table or self.attribute_table()
            codes = table.column(table.attributes, name)
            domain, sep, ident = name.partition("/")
            if sep:
                bare = (codes == -1) & (table.driver == self.intern(("driver", domain)))
                codes[bare] = table.column(table.attributes, ident)[bare]
            codes[codes == MALFORMED] = -1
            return codes

        return self.device_column(name, one, whole=whole)

    def attribute_table(self) -> AttributeTable:
        """Every row's interned attribute and capacity values (built once per generation, from
        the newest earlier table when there is one: only the rows of nodes rebuilt since are
        filed again)."""
        table = self._table
        if table is None:
            carry = self._carry
            if carry is not None and carry.table is not None and carry.table_rows is not None:
                rows = carry.table_rows  # to the table's rows, maybe over generations
                table = carry.table.carried(
                    self.row_device, rows.array(), rows.missing, self.intern, self._interned
                )
            else:
                table = AttributeTable.build(self.row_device, self.intern, self._interned)
            self._table = table
        return table

    def intern(self, typed: tuple[str, Any]) -> int:
        """The code of a hashable value, the same for equal values in this and carried generations."""
        code = self._interned.get(typed)
        if code is None:
            code = self._interned.setdefault(typed, next(self._next_code))
        return code

    def rows_table(self, rows: np.ndarray) -> AttributeTable:
        """The attribute table of just `rows` (`AttributeTable.of_rows`), filed once per
        generation for the rows carried columns and masks work out again (the rebuilt nodes')."""
        found = self._rows_tables.get(id(rows))
        if found is None or found[0] is not rows:  # the rows are held: their id is their own
            table = AttributeTable.of_rows(self.row_device, rows, self.intern, self._interned)
            found = self._rows_tables[id(rows)] = (rows, table)
        return found[1]

    def device_column(
        self,
        name: str,
        code_of: Callable[[Device], int],
        rows: np.ndarray | None = None,
        *,
        whole: Callable[[AttributeTable], np.ndarray] | None = None,
    ) -> np.ndarray:
        """Per row, `code_of(device)` as int32 (cached per generation under `name`).

        `whole`, when given, computes the same for every row of an attribute table at once
        (array operations): over `attribute_table` when nothing can be carried from the previous
        generation, over `rows_table` of the rebuilt nodes' rows when the column is carried.
        Otherwise, with `rows`, only those rows are sure to be computed (others may read
        `UNCOMPUTED`). `code_of` is a pure function of the device. Rows of nodes unchanged since
        the previous generation are the previous column's (the intern table is shared, so a
        carried code means the same value); when the rows are the previous generation's but
        the rebuilt nodes' and theirs keep their codes, the column is the previous one itself.
        """
        codes = self._attribute_codes.get(name)
        complete = self._complete_columns
        if codes is None:
            complete.discard(name)
            carry = self._carry
            old = carry.codes.get(name) if carry is not None else None
            stale = carry.stale_codes.get(name) if carry is not None and old is None else None
            if carry is not None and old is not None and carry.same_rows:
                codes = self._patched_column(old, carry.changed, code_of, whole)
                if name in carry.complete:
                    complete.add(name)
            elif carry is not None and old is not None:
                codes = carry.take(old)
                codes[carry.fresh] = UNCOMPUTED
            elif stale is not None:  # same rows but `fresh`, codes of the same intern table
                codes = self._patched_column(stale[0], stale[1], code_of, whole)
            elif whole is not None:
                codes = whole(self.attribute_table())
                complete.add(name)
            else:
                codes = np.full(self.num_rows, UNCOMPUTED, dtype=np.int32)
            self._attribute_codes.put(name, codes, codes.nbytes + len(name) + _ENTRY_OVERHEAD)
        if rows is None and name in complete:
            return codes  # no row-sized scan for entries still to compute
        todo = np.flatnonzero(codes == UNCOMPUTED) if rows is None else rows[codes[rows] == UNCOMPUTED]
        if len(todo):
            # Only UNCOMPUTED entries are written, each with its one value: a reader on another
            # thread (or of another generation sharing the column) sees either that or the value.
            codes[todo] = self._codes_of(todo, code_of)
        if rows is None:
            complete.add(name)
        return codes

    def _patched_column(
        self,
        old: np.ndarray,
        rows: np.ndarray,
        code_of: Callable[[Device], int],
        whole: Callable[[AttributeTable], np.ndarray] | None,
    ) -> np.ndarray:
        """`old` (over this generation's rows) with `rows` worked out again: `old` itself when
        their codes are as before. Its other rows may be `UNCOMPUTED`: filled in place later with
        the same value for either generation (the same devices)."""
        if not len(rows):
            return old
        values = whole(self.rows_table(rows)) if whole is not None else self._codes_of(rows, code_of)
        if np.array_equal(old[rows], values):
            return old
        codes = old.copy()
        codes[rows] = values
        return codes

    def _codes_of(self, rows: np.ndarray, code_of: Callable[[Device], int]) -> np.ndarray:
        row_device = self.row_device
        codes = (code_of(row_device[row]) for row in rows.tolist())
        return np.fromiter(codes, dtype=np.int32, count=len(rows))

    def _evaluate(self, expressions: tuple[str, ...], device: Device) -> tuple[bool, bool]:
        """(selected, failed) of one device: every expression in turn, stopping at the first no."""
        from extender.errors import CelRuntimeError

        try:
            for expression in expressions:
                if not self.evaluator.evaluate(expression, device):
                    return False, False
        except CelRuntimeError:
            return False, True
        return True, False


#: Stale masks and code columns a generation keeps at most (each is a row-sized array), and
#: their bytes at most (as the caches of asked-for ones: `MASK_CACHE_BYTES`, `ATTRIBUTE_CODES_BYTES`).
STALE_ENTRIES = 256


def _stale(
    previous: DeviceIndex, fresh: np.ndarray, *, same_rows: bool, codes: bool
) -> tuple[
    dict[MaskKey, tuple[SelectorMask, np.ndarray, tuple[str, ...] | None]],
    dict[str, tuple[np.ndarray, np.ndarray]],
]:
    """The masks and code columns `previous` was handed (by its carry) but never asked for, for a
    generation whose rows are `previous`'s but `fresh` (`same_rows`), while `previous`'s were
    those of the generation before it: kept over the rows rebuilt since (pods of a shape that
    no generation in between served then pay for the rebuilt nodes' rows only, not for every
    row). `codes`: this generation shares `previous`'s intern table (codes keep their meaning)."""
    older = previous._carry
    masks: dict[MaskKey, tuple[SelectorMask, np.ndarray, tuple[str, ...] | None]] = {}
    columns: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    if not same_rows or older is None or not older.same_rows:
        return masks, columns
    unions: dict[int, np.ndarray] = {}

    def since(rows: np.ndarray) -> np.ndarray:
        found = unions.get(id(rows))
        if found is None:
            found = unions[id(rows)] = union_sorted(rows, fresh)
        return found

    asked = previous._masks
    budget = [MASK_CACHE_BYTES, ATTRIBUTE_CODES_BYTES]

    def room(which: int, nbytes: int, kept: int) -> bool:
        budget[which] -= nbytes
        return budget[which] >= 0 and kept < STALE_ENTRIES

    for key, mask in older.masks.items():
        if key not in asked and room(0, _mask_size(key, mask), len(masks)):
            masks[key] = (mask, since(older.fresh), older.class_exprs.get(key[0]))
    for key, (mask, rows, exprs) in older.stale_masks.items():
        if key not in asked and key not in older.masks and room(0, _mask_size(key, mask), len(masks)):
            masks[key] = (mask, since(rows), exprs)
    if codes:  # this generation shares previous's intern table, and previous its predecessor's
        # where it carried any code column (else `older` holds none)
        made = previous._attribute_codes
        for name, column in older.codes.items():
            if name not in made and room(1, column.nbytes, len(columns)):
                columns[name] = (column, since(older.fresh))
        for name, (column, rows) in older.stale_codes.items():
            if name not in made and name not in older.codes and room(1, column.nbytes, len(columns)):
                columns[name] = (column, since(rows))
    return masks, columns


def _same_values(old: Device, new: Device) -> bool:
    """Whether every code column reads the same of `new` as of `old` (`device_column`: the
    columns read the driver, allowMultipleAllocations, the attributes and the capacity): the
    same driver and flag, the same parsed capacity map (or none), and the same attribute values (the
    very objects: stored slices share equal values, and identity is exact where equality is not,
    `{"int": 1} == {"int": 1.0}`) under the same names in the same order."""
    if old is new:
        return True
    if (
        old.id.driver != new.id.driver
        or old.allow_multiple_allocations != new.allow_multiple_allocations
        or (old.capacity is not new.capacity and (old.capacity or new.capacity))
    ):
        return False
    before, after = old.attributes, new.attributes
    if before is after:
        return True
    return len(before) == len(after) and all(
        a == b and x is y for (a, x), (b, y) in zip(before.items(), after.items(), strict=True)
    )


def _changed_rows(previous: DeviceIndex, index: DeviceIndex, rebuilt: np.ndarray) -> np.ndarray:
    """The rows of the rebuilt nodes (`rebuilt`, ascending; the rows are `previous`'s but
    theirs) whose device may read differently from `previous`'s device on that row."""
    changed: list[int] = []
    starts = index.node_start
    for position in rebuilt.tolist():
        start, stop = int(starts[position]), int(starts[position + 1])
        olds, news = previous.row_device[start:stop], index.row_device[start:stop]
        changed.extend(
            row for row, a, b in zip(range(start, stop), olds, news, strict=True) if not _same_values(a, b)
        )
    return np.asarray(changed, dtype=np.int64)


def build_index(
    state: ClusterState,
    features: Features,
    *,
    previous: DeviceIndex | None = None,
    evaluator: CachingEvaluator | None = None,
    topology: TopologyModel | None = None,
) -> DeviceIndex:
    """Build a snapshot from the state, re-using parsed slices of `previous` that did not change."""
    replay = _replay(state, features, previous) if previous is not None else None
    changed_nodes: set[str] | None = None
    slice_keys: dict[Key, int] | None
    replaced: list[tuple[Slice, Slice]] | None
    slices: Sequence[Slice]
    raws: Sequence[Obj]
    if replay is not None:
        slices, raws, slice_keys, replaced, nodes, changed_nodes = replay
    else:
        parsed, parsed_raws, slice_keys = _parse_slices(state, features, previous)
        slices, raws = SpannedList(parsed), SpannedList(parsed_raws)
        # Slices replaced in place (same count, the others the very same objects): the pool
        # catalog then re-does only their pools (`PoolCatalog.replacing`).
        replaced = None
        if previous is not None and len(previous.slices) == len(slices):
            replaced = [
                (old, new) for old, new in zip(previous.slices, slices, strict=True) if old is not new
            ]
            if len(replaced) * 4 > len(slices):
                replaced = None
        nodes = {(n.get("metadata") or {}).get("name", ""): n for n in state.iter("Node")}
    # Parsed classes are kept with their raw object (so its id stays its own) for the next build.
    known_classes = previous.parsed_classes if previous is not None else {}
    parsed_classes: dict[int, tuple[Obj, DeviceClassSpec]] = {}
    for raw_class in state.iter("DeviceClass"):
        known = known_classes.get(id(raw_class))
        parsed_classes[id(raw_class)] = (
            known
            if known is not None and known[0] is raw_class
            else (raw_class, parse_device_class(raw_class))
        )
    classes = {raw["metadata"]["name"]: spec for raw, spec in parsed_classes.values()}
    index = DeviceIndex(
        generation=state.devices_generation,
        features=features,
        nodes=nodes,
        slices=slices,
        classes=classes,
        evaluator=evaluator or (previous.evaluator if previous else CachingEvaluator(features)),
        topology=topology or (previous.topology if previous else TopologyModel()),
        previous_blocks=(
            previous.blocks
            if previous is not None
            and previous.features == features
            and (topology in (None, previous.topology))
            else None
        ),
        previous_catalog=previous.catalog if previous is not None else None,
        previous=previous,
        replaced=replaced,
        changed_nodes=changed_nodes,
    )
    index.slice_raws = raws
    index.slice_keys = slice_keys
    index.state_ref = weakref.ref(state)
    index.parsed_classes = parsed_classes
    if previous is not None and previous.evaluator is index.evaluator:
        index.carry_from(previous)
        index.lineage = _extend_lineage(index, previous)
    return index


#: Generations a lineage reaches back (`DeviceIndex.changes_since`): a derived answer older than
#: that is built again.
LINEAGE = 64


@dataclass(frozen=True, slots=True)
class _Step:
    """One generation's patch (`DeviceIndex.patched`) as `changes_since` reads it."""

    previous: int  # serial of the generation patched
    rebuilt: np.ndarray  # int64 node positions whose block (rows) was rebuilt
    touched: np.ndarray  # int64 node positions whose pools were gathered again (rebuilt included)


@dataclass(frozen=True, slots=True)
class Changes:
    """Which nodes can answer differently at this generation than at an earlier one (see
    `DeviceIndex.changes_since`): `rebuilt` nodes have new rows (row content to redo), `touched`
    nodes new pools or node objects too (every per-node answer to redo; `rebuilt` included)."""

    rebuilt: np.ndarray
    touched: np.ndarray


def _extend_lineage(index: DeviceIndex, previous: DeviceIndex) -> tuple[_Step, ...]:
    """`previous`'s lineage and this generation's step, when the only differences are the
    patched nodes': the same rows but theirs (`patched`, so the very same `node_start`), the same
    node list, features, topology, evaluator and parsed classes, and the same incomplete shared
    pools (which every node sees). Else none: an answer from before is not carried."""
    patch = index.patched
    if patch is None or patch[0] != previous.serial or not patch[3]:
        return ()
    if index.node_start is not previous.node_start or (
        index.node_names is not previous.node_names and index.node_names != previous.node_names
    ):
        return ()
    classes, before = index.classes, previous.classes
    if classes.keys() != before.keys() or any(spec is not before[name] for name, spec in classes.items()):
        return ()  # a class's selectors or config changed: selection may differ on every node
    step = _Step(previous.serial, patch[1], np.union1d(patch[1], patch[2]))
    return (*previous.lineage[-(LINEAGE - 1) :], step)


#: Per slice position: key -> position, and the id of the raw object it was parsed from.
_Parsed = tuple[list[Slice], list[Obj], dict[Key, int] | None]


def _parse_slices(state: ClusterState, features: Features, previous: DeviceIndex | None) -> _Parsed:
    """Every slice of the state, parsed (or `previous`'s parse of the very same raw object), in
    cluster order; with each slice's position by key (None if some slice could not be parsed)."""
    reuse: dict[int, tuple[Obj, Slice]] = (
        {id(raw): (raw, s) for raw, s in zip(previous.slice_raws, previous.slices, strict=True)}
        if previous is not None and len(previous.slice_raws) == len(previous.slices)
        else {}  # an index not made by `build_index` has no raw objects to match
    )
    rule_taints = _taint_rules(state.iter("DeviceTaintRule")) if features.device_taint_rules else []
    slices: list[Slice] = []
    keys: list[Key] | None = []
    raws: list[Obj] = []
    for raw in state.iter("ResourceSlice"):
        known = reuse.get(id(raw)) if not rule_taints else None
        if known is not None and known[0] is raw:  # the raw object is held: its id is its own
            slice_ = known[1]
        else:
            try:
                slice_ = parse_slice(raw)
            except (KeyError, ValueError, TypeError) as exc:
                name = (raw.get("metadata") or {}).get("name", "?")
                log.warning("skipping ResourceSlice %s: %s", name, exc)
                keys = None
                continue
            if rule_taints:
                slice_ = _with_rule_taints(slice_, rule_taints)
        slices.append(slice_)
        raws.append(raw)
        if keys is not None:
            keys.append(object_key(raw))
    if keys is None:
        return slices, raws, None
    return slices, raws, dict(zip(keys, range(len(keys)), strict=True))


def _replay(
    state: ClusterState, features: Features, previous: DeviceIndex
) -> (
    tuple[
        SpannedList[Slice],
        SpannedList[Obj],
        dict[Key, int],
        list[tuple[Slice, Slice]],
        dict[str, Obj],
        set[str],
    ]
    | None
):
    """`previous`'s slices and nodes with the objects the state's device log says were updated
    since re-read (no pass over every slice and node); None when the log cannot tell, or a
    change adds, deletes or relists an object, changes a class or a taint rule."""
    if previous.state_ref is None or previous.state_ref() is not state or previous.slice_keys is None:
        return None
    changes = state.device_changes_since(previous.generation)
    if changes is None or len(changes) > REPLAY_LIMIT:
        return None
    if features.device_taint_rules and state.count("DeviceTaintRule"):
        return None  # rule taints are applied to every slice at parse time
    changed: dict[tuple[str, Key], None] = {}
    for kind, key, op in changes:
        if op != UPDATED or kind not in ("ResourceSlice", "Node"):
            return None
        changed[(kind, key)] = None
    nodes = previous.nodes  # copied at the first Node change (shared otherwise: never changed)
    replaced: list[tuple[Slice, Slice]] = []
    changed_nodes: set[str] = set()
    # The previous generation's slice lists are shared; replaced slices are spans over them.
    writes: list[tuple[int, list[Slice]]] = []
    raw_writes: list[tuple[int, list[Obj]]] = []
    for kind, key in changed:
        raw = state.get_by_key(kind, key)
        if raw is None:
            return None
        if kind == "Node":
            if key[1] not in nodes:
                return None
            if nodes is previous.nodes:
                nodes = dict(nodes)
            nodes[key[1]] = raw
            changed_nodes.add(key[1])
            continue
        position = previous.slice_keys.get(key)
        if position is None:
            return None
        old = previous.slices[position]
        # Parsed again even when the spec is the same: a new object is a new Slice, as in the
        # full pass (tests/index pin that the touched node's rows are evaluated again).
        try:
            new = parse_slice(raw)
        except (KeyError, ValueError, TypeError):
            return None  # the full pass logs and skips it
        replaced.append((old, new))
        writes.append((position, [new]))
        raw_writes.append((position, [raw]))
    slices = _spanned(previous.slices).patched(writes)
    raws = _spanned(previous.slice_raws).patched(raw_writes)
    return slices, raws, previous.slice_keys, replaced, nodes, changed_nodes


def _spanned(items: Sequence[_T]) -> SpannedList[_T]:
    return items if isinstance(items, SpannedList) else SpannedList(list(items))


def _taint_rules(rules: Iterable[Obj]) -> list[tuple[dict[str, Any], Taint]]:
    out = []
    for rule in rules:
        spec = rule.get("spec") or {}
        selector = spec.get("deviceSelector")
        taint = spec.get("taint") or {}
        if selector is None:
            continue  # no selector matches nothing
        out.append(
            (selector, Taint(taint.get("key", ""), taint.get("value", "") or "", taint.get("effect", "")))
        )
    return out


def _with_rule_taints(slice_: Slice, rules: list[tuple[dict[str, Any], Taint]]) -> Slice:
    from dataclasses import replace

    devices = []
    for device in slice_.devices:
        extra = tuple(
            taint
            for selector, taint in rules
            if all(
                not selector.get(field) or selector[field] == value
                for field, value in (
                    ("driver", device.id.driver),
                    ("pool", device.id.pool),
                    ("device", device.name),
                )
            )
        )
        devices.append(replace(device, taints=device.taints + extra) if extra else device)
    return replace(slice_, devices=tuple(devices))
