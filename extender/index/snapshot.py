"""DeviceIndex: an immutable snapshot of every device each node can use, as columns.

Built from a ClusterState whenever its `devices_generation` changes; readers hold a snapshot
that never changes in place. Parsed slices (and with them the per-device CEL caches) are carried
over from the previous snapshot when the raw slice object is unchanged. Pools are gathered once
per pool, not once per node (`extender.allocator.pools.PoolCatalog`): a pool whose slices are
unchanged keeps its facts and Pool objects, and each node is given only the pools its own slices
touch plus one shared tuple of the pools every node sees alike (e.g. other nodes' counter-only
pool markers). A node's block (its rows) is re-used while the node object and the pools that give
it devices are the same objects, so a change to one node-local slice, counter slice included,
re-parses that slice and rebuilds that node's block only; the rest is array concatenation.

Rows: one row per (node, device the node can use), in the allocator's search order for that
node (pools by driver/pool name, slices by name, devices as listed). A network-attached device
appears once per node that can reach it. Columns:
- `row_node` (int32): the node's position in `node_names`;
- `row_device`: the Device object (identity shared across nodes);
- `row_special` (bool): the device needs the exact search (counters, shared capacity,
  binding conditions, per-device node selection);
- `row_tainted` (bool): the device has a taint that blocks unless tolerated;
- `row_coords` (int32, rows x 4): topology coordinates per level (`extender.index.topology`).
Rows of node n are `node_start[n]:node_start[n+1]`. Nodes with a link matrix annotation have
their pairwise distances at `link_distance[link_offset[n]:]` (rows x rows, NaN where unnamed).
`pools[name]` is the node's pool list exactly as upstream's gatherPools gives it (a NodePools).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import chain
from typing import Any, TypeVar, overload

import numpy as np

from extender.allocator.features import Features
from extender.allocator.inputs import DeviceClassSpec, parse_device_class
from extender.allocator.model import Device, DeviceID, PoolID, Slice, Taint, parse_slice
from extender.allocator.nodeselection import node_matches
from extender.allocator.pools import NodePools, Pool, PoolCatalog, search_key
from extender.allocator.taints import BLOCKING_EFFECTS
from extender.cluster.state import ClusterState
from extender.index.selecting import CachingEvaluator
from extender.index.topology import NODE_LEVEL, TopologyModel
from extender.lru import SizedLRU
from extender.objects import Obj

log = logging.getLogger(__name__)

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class SelectorMask:
    """Which rows a (class, request selectors) pair selects; `error` rows raised in CEL."""

    match: np.ndarray
    error: np.ndarray


MaskKey = tuple[str, tuple[str, ...]]
#: Bytes of selector masks one index keeps (LRU): one per distinct (class, selectors) pair seen,
#: each 2 bytes per row, so a stream of distinct selectors cannot grow the index without bound
#: (issue 22 item 3). At 40,000 rows a mask is 80 KB: about 800 masks. An evicted mask is
#: rebuilt from the results cached on the devices.
MASK_CACHE_BYTES = 64 * 2**20
#: Bytes of interned attribute columns (`attribute_codes`) one index keeps (LRU), 4 per row each.
ATTRIBUTE_CODES_BYTES = 32 * 2**20
_ENTRY_OVERHEAD = 512  # the record, two array headers, the key tuple, the cache entry


def _mask_size(key: MaskKey, mask: SelectorMask) -> int:
    """Bytes a cached mask keeps: its arrays, its key's texts and the bookkeeping."""
    return mask.match.nbytes + mask.error.nbytes + len(key[0]) + sum(map(len, key[1])) + _ENTRY_OVERHEAD


class RowsOf(Mapping[DeviceID, np.ndarray]):
    """Device id -> its rows (int64 array, ascending), built at C speed from the row ids.

    Most devices have one row (node-local), so the map keeps one int per device and makes the
    one-element array on lookup; only devices on several nodes' rows (network-attached) keep
    an array. A dict of arrays per device cost most of an incremental index build.
    """

    __slots__ = ("_multi", "_row")

    def __init__(self, ids: list[DeviceID]) -> None:
        self._row: dict[DeviceID, int] = dict(zip(ids, range(len(ids)), strict=True))
        self._multi: dict[DeviceID, np.ndarray] = {}
        if len(self._row) != len(ids):  # some devices are on several rows
            counts = Counter(ids)
            repeated = {device_id for device_id, n in counts.items() if n > 1}
            rows: dict[DeviceID, list[int]] = {device_id: [] for device_id in repeated}
            for row, device_id in enumerate(ids):
                if device_id in repeated:
                    rows[device_id].append(row)
            self._multi = {device_id: np.asarray(r, dtype=np.int64) for device_id, r in rows.items()}

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


def _node_block(
    key: tuple[Any, ...], node: Obj, pools: list[Pool], features: Features, topology: TopologyModel
) -> _NodeBlock:
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


class DeviceIndex:
    """One immutable generation of the device index (see module docstring)."""

    def __init__(
        self,
        *,
        generation: int,
        features: Features,
        nodes: dict[str, Obj],
        slices: list[Slice],
        classes: dict[str, DeviceClassSpec],
        evaluator: CachingEvaluator,
        topology: TopologyModel,
        previous_blocks: dict[str, _NodeBlock] | None = None,
        previous_catalog: PoolCatalog | None = None,
    ) -> None:
        self.generation = generation
        self.topology = topology
        self.features = features
        self.nodes = nodes
        self.node_names: list[str] = list(nodes)
        self.node_pos: dict[str, int] = {name: i for i, name in enumerate(self.node_names)}
        self.slices = slices
        self.classes = classes
        self.evaluator = evaluator
        self.catalog = PoolCatalog(slices, features, previous_catalog)
        self.by_pool: dict[PoolID, list[Slice]] = self.catalog.by_pool
        reuse = previous_blocks or {}
        self.blocks: dict[str, _NodeBlock] = {}
        self.pools: dict[str, NodePools] = {}
        self.rebuilt: list[str] = []  # nodes whose block this snapshot built (not re-used)
        invalid: list[bool] = []
        shared_invalid = self.catalog.shared_invalid
        for name, node in nodes.items():
            pools = self.catalog.pools_for(name, node)
            self.pools[name] = pools
            with_devices = _pools_with_devices(pools, self.catalog)
            # A node's rows depend on its node object and the pools that give it devices; Pool
            # objects are memoised per pool, so an unchanged pool is the very same object.
            key = (id(node), tuple(id(p) for p in with_devices))
            block = reuse.get(name)
            if block is None or block.key != key:
                block = _node_block(key, node, with_devices, features, topology)
                self.rebuilt.append(name)
            self.blocks[name] = block
            invalid.append(
                any(p.invalid for p in pools.own) or any(i not in pools.hidden for i in shared_invalid)
            )
        self.node_has_invalid_pool = np.array(invalid, dtype=bool)
        self._build_rows()
        self._masks: SizedLRU[MaskKey, SelectorMask] = SizedLRU(max_entries=2**20, max_bytes=MASK_CACHE_BYTES)
        # The previous generation's masks, row ranges of re-used blocks, class selectors and blocks
        # (`carry_masks_from`); None for an index built from nothing.
        self._carry: (
            tuple[
                dict[tuple[str, tuple[str, ...]], SelectorMask],
                dict[int, tuple[int, int]],
                dict[str, tuple[str, ...]],
                dict[str, _NodeBlock],
            ]
            | None
        ) = None
        self._attribute_codes: SizedLRU[str, np.ndarray] = SizedLRU(
            max_entries=2**20, max_bytes=ATTRIBUTE_CODES_BYTES
        )
        # id(raw ResourceSlice) -> parsed Slice; lets the next build skip unchanged slices.
        self.parsed_by_raw: dict[int, Slice] = {}

    # ----------------------------------------------------------------- rows
    def _build_rows(self) -> None:
        blocks = [self.blocks[name] for name in self.node_names]
        sizes = [len(block.devices) for block in blocks]
        self.row_node = np.repeat(np.arange(len(blocks), dtype=np.int32), sizes)
        self.row_device = list(chain.from_iterable(block.devices for block in blocks))
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
        self.rows_of = RowsOf([device.id for device in self.row_device])

    @property
    def cached_masks(self) -> int:
        """How many selector masks this snapshot holds (grows as new selectors are seen)."""
        return len(self._masks)

    @property
    def num_rows(self) -> int:
        return len(self.row_device)

    # ----------------------------------------------------------------- masks
    def carry_masks_from(self, previous: DeviceIndex) -> None:
        """Let `mask` copy the previous generation's rows for the nodes whose block it re-uses.

        A node block is re-used only while the node, its slices and their pools are unchanged, so
        its rows (same Device objects, same order) select alike under the same class selectors;
        only the rows of rebuilt nodes are evaluated again. Only the previous generation's masks
        and row ranges are kept (not the previous index), so generations do not chain.
        """
        ranges: dict[int, tuple[int, int]] = {}
        for position, name in enumerate(previous.node_names):
            block = previous.blocks[name]
            ranges[id(block)] = (int(previous.node_start[position]), int(previous.node_start[position + 1]))
        keep = {id(block) for block in self.blocks.values()}
        self._carry = (
            dict(previous._masks.items()),
            {block_id: span for block_id, span in ranges.items() if block_id in keep},
            {name: tuple(s.expression or "" for s in c.selectors) for name, c in previous.classes.items()},
            previous.blocks,  # keeps the block objects alive, so their ids above stay theirs
        )

    def mask(self, class_name: str, selectors: tuple[str, ...]) -> SelectorMask:
        """Rows selected by the class selectors then the request selectors (cached).

        Evaluates CEL once per device and expression (results live on the devices); this is
        the only place the filter path can run CEL, and only the first time a selector is seen.
        Rows of nodes unchanged since the previous generation are copied from its mask.
        """
        key = (class_name, selectors)
        cached = self._masks.get(key)
        if cached is not None:
            return cached
        device_class = self.classes[class_name]
        class_exprs = tuple(s.expression or "" for s in device_class.selectors)
        carried = self._carried_mask(key, class_name, class_exprs)
        if carried is not None:
            match, error, todo = carried
        else:
            match = np.zeros(self.num_rows, dtype=bool)
            error = np.zeros(self.num_rows, dtype=bool)
            todo = [(0, self.num_rows)]
        verdicts: dict[int, tuple[bool, bool]] = {}
        for start, stop in todo:
            for row in range(start, stop):
                device = self.row_device[row]
                verdict = verdicts.get(id(device))
                if verdict is None:
                    verdict = self._evaluate(class_exprs, selectors, device)
                    verdicts[id(device)] = verdict
                match[row], error[row] = verdict
        result = SelectorMask(match=match, error=error)
        self._masks.put(key, result, _mask_size(key, result))
        return result

    def _carried_mask(
        self, key: tuple[str, tuple[str, ...]], class_name: str, class_exprs: tuple[str, ...]
    ) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]]] | None:
        """(match, error, row ranges still to evaluate) from the previous generation, or None."""
        carry = self._carry
        if carry is None:
            return None
        masks, spans, classes, _ = carry
        old = masks.get(key)
        if old is None or classes.get(class_name) != class_exprs:
            return None  # a new selector, or the class's selectors changed: evaluate everything
        match = np.zeros(self.num_rows, dtype=bool)
        error = np.zeros(self.num_rows, dtype=bool)
        todo: list[tuple[int, int]] = []
        for position, name in enumerate(self.node_names):
            start, stop = int(self.node_start[position]), int(self.node_start[position + 1])
            span = spans.get(id(self.blocks[name]))
            if span is not None and span[1] - span[0] == stop - start:
                match[start:stop] = old.match[span[0] : span[1]]
                error[start:stop] = old.error[span[0] : span[1]]
            elif stop > start:
                todo.append((start, stop))
        return match, error, todo

    def attribute_codes(self, name: str) -> np.ndarray:
        """Per row, an interned code of the device's attribute `name` (cached per generation).

        -1: the device lacks the attribute (or its type is unknown); -2: a list value, which the
        topology kernels do not model (such pods keep upstream's search for their device choice).
        Equal codes mean equal typed values, as matchAttribute/distinctAttribute compare them.
        """
        cached = self._attribute_codes.get(name)
        if cached is not None:
            return cached
        from extender.allocator.constraints import lookup_attribute

        codes = np.full(self.num_rows, -1, dtype=np.int32)
        interned: dict[tuple[str, Any], int] = {}
        by_device: dict[int, int] = {}
        for row, device in enumerate(self.row_device):
            code = by_device.get(id(device))
            if code is None:
                code = -1
                value = lookup_attribute(device, name)
                if value is not None:
                    if any(value.get(k) is not None for k in ("ints", "bools", "strings", "versions")):
                        code = -2
                    else:
                        for kind in ("int", "bool", "string", "version"):
                            if value.get(kind) is not None:
                                code = interned.setdefault((kind, value[kind]), len(interned))
                                break
                by_device[id(device)] = code
            codes[row] = code
        self._attribute_codes.put(name, codes, codes.nbytes + len(name) + _ENTRY_OVERHEAD)
        return codes

    def _evaluate(
        self, class_exprs: tuple[str, ...], request_exprs: tuple[str, ...], device: Device
    ) -> tuple[bool, bool]:
        from extender.errors import CelRuntimeError

        try:
            for expression in (*class_exprs, *request_exprs):
                if not self.evaluator.evaluate(expression, device):
                    return False, False
        except CelRuntimeError:
            return False, True
        return True, False


def build_index(
    state: ClusterState,
    features: Features,
    *,
    previous: DeviceIndex | None = None,
    evaluator: CachingEvaluator | None = None,
    topology: TopologyModel | None = None,
) -> DeviceIndex:
    """Build a snapshot from the state, re-using parsed slices of `previous` that did not change."""
    reuse: dict[int, Slice] = {}
    if previous is not None:
        reuse = previous.parsed_by_raw
    rule_taints = _taint_rules(state.iter("DeviceTaintRule")) if features.device_taint_rules else []
    parsed_by_raw: dict[int, Slice] = {}
    slices: list[Slice] = []
    for raw in state.iter("ResourceSlice"):
        slice_ = reuse.get(id(raw)) if not rule_taints else None
        if slice_ is None:
            try:
                slice_ = parse_slice(raw)
            except (KeyError, ValueError, TypeError) as exc:
                name = (raw.get("metadata") or {}).get("name", "?")
                log.warning("skipping ResourceSlice %s: %s", name, exc)
                continue
            if rule_taints:
                slice_ = _with_rule_taints(slice_, rule_taints)
        parsed_by_raw[id(raw)] = slice_
        slices.append(slice_)
    nodes = {(n.get("metadata") or {}).get("name", ""): n for n in state.iter("Node")}
    classes = {c["metadata"]["name"]: parse_device_class(c) for c in state.iter("DeviceClass")}
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
    )
    index.parsed_by_raw = parsed_by_raw
    if previous is not None and previous.evaluator is index.evaluator:
        index.carry_masks_from(previous)
    return index


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
