"""The topology model: where each device sits, as coordinates per locality level.

Levels, most local first (DESIGN.md "Topology model"): `nvlink` (one NVLink/NVSwitch domain,
xGMI hive, ICI domain, RoCE scale-up domain, NeuronLink group, or one physical GPU for MIG
slices), `pcie` (one PCIe root complex), `numa` (one NUMA node), `socket`; two devices on one
node that share none of these are `node`-local. Which device attribute feeds which level is a
setting per driver (`TopologySettings.drivers`); `DEFAULT_DRIVERS` covers NVIDIA, AMD, Intel
Gaudi, TPU, Neuron and `dra.net` NICs, and `*` (every driver) reads the standard
`resource.kubernetes.io/pcieRoot` and `resource.kubernetes.io/numaNode` attributes. For each
level the first attribute a device has wins; a list-valued attribute uses its first element.

Above the node sits the `clique`: a multi-node NVLink domain (one GB200/GB300 NVL72 rack), read
per node from the label `nvidia.com/gpu.clique` or the `cliqueID` device attribute. It is not a
device coordinate (devices of two nodes are never in one claim); `extender/core/gang.py` uses it to
keep the pods of one gang in one clique (docs/gangs.md).

Coordinates are interned integers (-1: unknown). They are only ever compared between devices of
one node, so one intern table serves the whole cluster; it lives as long as the model, so ids stay
stable across index generations and a node's cached rows can be re-used.

Partitions (MIG slices) name their parent device (NVIDIA `parentUUID`, matched against the
`uuid` of a device on the same node, `PARTITION_PARENTS`). A partition takes its parent's
coordinate at every level it does not publish itself, so a MIG slice sits on its GPU's PCIe root,
NUMA node and, where the GPU publishes one and the slice does not, NVLink domain. The nvlink level
of a slice is its parent GPU (`parentUUID`, in the NVIDIA defaults), the most local group a slice
can share. `partition_groups` adds a "parent GPU" grouping per row for the partition score terms:
devices that consume one shared counter set (the GPU and all its MIG placements under DynamicMIG),
else the devices that name one parent (static MIG slices, with the parent itself when published).

A node may carry a link matrix in the annotation `LINK_ANNOTATION`: JSON
`{"gpu-0": {"gpu-1": 900, ...}, ...}`, pairwise bandwidth (any unit, larger is closer) between
device names. For the pairs it names it overrides the levels: the pair's distance is
`d_min + (d_max - d_min) * (1 - bandwidth / max_bandwidth_on_node)`, so the node's best link is
as close as one NVLink domain and a zero-bandwidth pair is as far as the node level.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from extender.allocator.constraints import lookup_attribute
from extender.allocator.model import Device, PoolID
from extender.allocator.pools import Pool
from extender.quantity import Quantity

log = logging.getLogger(__name__)

LEVELS: tuple[str, ...] = ("nvlink", "pcie", "numa", "socket")
NODE_LEVEL = len(LEVELS)
NO_COORD = -1
LINK_ANNOTATION = "topology.dra-extender.io/link-bandwidth"
PACKING_POLICIES: tuple[str, ...] = ("binpack", "spread")

PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
NUMA_NODE = "resource.kubernetes.io/numaNode"

#: driver -> level -> attribute names tried in order (qualified names; a driver's own attributes
#: may be written bare in ResourceSlices, `lookup_attribute` resolves both forms).
DEFAULT_DRIVERS: dict[str, dict[str, tuple[str, ...]]] = {
    "*": {"pcie": (PCIE_ROOT,), "numa": (NUMA_NODE,)},
    "gpu.nvidia.com": {
        "nvlink": ("gpu.nvidia.com/nvlinkDomain", "gpu.nvidia.com/cliqueID", "gpu.nvidia.com/parentUUID"),
        "pcie": (PCIE_ROOT,),
        "numa": (NUMA_NODE, "gpu.nvidia.com/numa"),
    },
    "gpu.amd.com": {"nvlink": ("gpu.amd.com/xgmiHive",), "pcie": (PCIE_ROOT,), "numa": (NUMA_NODE,)},
    "gaudi.intel.com": {
        "nvlink": ("gaudi.intel.com/roceDomain",),
        "pcie": (PCIE_ROOT,),
        "numa": (NUMA_NODE,),
    },
    "tpu.google.com": {"nvlink": ("tpu.google.com/iciDomain",), "pcie": (PCIE_ROOT,), "numa": (NUMA_NODE,)},
    "neuron.amazonaws.com": {
        "nvlink": ("neuron.amazonaws.com/neuronLinkGroup",),
        "pcie": (PCIE_ROOT,),
        "numa": (NUMA_NODE,),
    },
    "dra.net": {"pcie": (PCIE_ROOT,), "numa": (NUMA_NODE, "dra.net/numaNode")},
}

#: driver -> (attribute naming a partition's parent device, attribute holding a device's own id).
PARTITION_PARENTS: dict[str, tuple[str, str]] = {
    "gpu.nvidia.com": ("gpu.nvidia.com/parentUUID", "gpu.nvidia.com/uuid"),
}


@dataclass(frozen=True, slots=True)
class TopologySettings:
    """How devices are placed in levels, and how candidate device sets are scored.

    The score of a set is `(locality_weight * locality + fragmentation_weight * fragmentation +
    packing_weight * packing + preference_weight * preference) / sum of the weights`, each term in
    [0, 1] (docs/scoring.md gives the formulas). Where the set takes partitions (MIG slices), the
    terms `partition_packing` and `partition_headroom` join with their weights.
    """

    drivers: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=lambda: DEFAULT_DRIVERS)
    level_distance: tuple[float, float, float, float, float] = (1.0, 2.0, 3.0, 4.0, 6.0)
    locality_weight: float = 4.0
    fragmentation_weight: float = 4.0
    packing_weight: float = 1.0
    preference_weight: float = 1.0
    cross_claim_weight: float = 1.0
    partition_packing_weight: float = 4.0
    partition_headroom_weight: float = 4.0
    packing: str = "binpack"
    max_work: int = 4096

    def __post_init__(self) -> None:
        distances = self.level_distance
        if len(distances) != NODE_LEVEL + 1 or any(b <= a for a, b in itertools.pairwise(distances)):
            raise ValueError(
                f"level_distance must be {NODE_LEVEL + 1} strictly increasing numbers, got {distances}"
            )
        weights = (
            self.locality_weight,
            self.fragmentation_weight,
            self.packing_weight,
            self.preference_weight,
            self.partition_packing_weight,
            self.partition_headroom_weight,
        )
        if any(w < 0 or not math.isfinite(w) for w in (*weights, self.cross_claim_weight)):
            raise ValueError("topology weights must be finite and >= 0")
        if self.packing not in PACKING_POLICIES:
            raise ValueError(
                f"packing {self.packing!r} is not a policy; allowed: {', '.join(PACKING_POLICIES)}"
            )
        if self.max_work < 1:
            raise ValueError("topology max_work must be >= 1")
        for driver, levels in self.drivers.items():
            unknown = set(levels) - set(LEVELS)
            if unknown:
                raise ValueError(
                    f"topology driver {driver}: unknown level(s) {', '.join(sorted(unknown))}; "
                    f"allowed: {', '.join(LEVELS)}"
                )

    def kernel_weights(self) -> np.ndarray:
        """The kernels' weight vector: locality, fragmentation, packing, cross-claim pair weight."""
        return np.array(
            [self.locality_weight, self.fragmentation_weight, self.packing_weight, self.cross_claim_weight]
        )


def parse_drivers(raw: Any, where: str) -> dict[str, dict[str, tuple[str, ...]]]:
    """Driver level settings from a settings file: `{driver: {level: attr | [attrs]}}`.

    The given drivers replace the defaults driver by driver; other defaults stay.
    """
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: must map driver names to {{level: attribute(s)}}")
    out = {driver: dict(levels) for driver, levels in DEFAULT_DRIVERS.items()}
    for driver, levels in raw.items():
        if not isinstance(levels, Mapping):
            raise ValueError(f"{where}.{driver}: must map levels ({', '.join(LEVELS)}) to attribute names")
        parsed: dict[str, tuple[str, ...]] = {}
        for level, names in levels.items():
            if level not in LEVELS:
                raise ValueError(f"{where}.{driver}: unknown level {level!r}; allowed: {', '.join(LEVELS)}")
            items = [names] if isinstance(names, str) else names
            if not isinstance(items, list | tuple) or not all(isinstance(n, str) and n for n in items):
                raise ValueError(f"{where}.{driver}.{level}: must be an attribute name or a list of them")
            parsed[level] = tuple(n if "/" in n else f"{driver}/{n}" for n in items)
        out[str(driver)] = parsed
    return out


def topology_attributes(settings: TopologySettings) -> set[str]:
    """Every attribute name the settings read for a level, over all drivers."""
    return {name for levels in settings.drivers.values() for names in levels.values() for name in names}


class TopologyModel:
    """Device coordinates and node link matrices under one TopologySettings."""

    def __init__(self, settings: TopologySettings | None = None) -> None:
        self.settings = settings or TopologySettings()
        self._ids: dict[tuple[int, str], int] = {}
        self._default = self.settings.drivers.get("*", {})

    def coords(self, device: Device) -> tuple[int, int, int, int]:
        """The device's coordinate per level (NO_COORD where the device says nothing)."""
        levels = self.settings.drivers.get(device.id.driver, self._default)
        out = [NO_COORD] * NODE_LEVEL
        for position, level in enumerate(LEVELS):
            for name in levels.get(level, ()):
                value = _attribute_text(device, name)
                if value is not None:
                    out[position] = self._ids.setdefault((position, value), len(self._ids))
                    break
        return out[0], out[1], out[2], out[3]

    def parent_of(self, device: Device) -> str | None:
        """The id of the device's parent (a partition's GPU), or None for a device that is no partition."""
        names = PARTITION_PARENTS.get(device.id.driver)
        return _attribute_text(device, names[0]) if names else None

    def own_id(self, device: Device) -> str | None:
        """The id partitions use to name this device as their parent (NVIDIA `uuid`), or None."""
        names = PARTITION_PARENTS.get(device.id.driver)
        return _attribute_text(device, names[1]) if names else None

    def node_coords(self, devices: Sequence[Device]) -> np.ndarray:
        """Coordinates (int32, devices x levels) of one node's devices, partitions completed from parents.

        A partition whose parent is among `devices` takes the parent's coordinate at each level
        where it has none of its own: a MIG slice that does not publish `pcieRoot` still sits on
        its GPU's root complex.
        """
        coords = np.array([self.coords(d) for d in devices], dtype=np.int32).reshape(len(devices), NODE_LEVEL)
        owners: dict[str, int] = {}
        for row, device in enumerate(devices):
            own = self.own_id(device)
            if own is not None:
                owners.setdefault(own, row)
        if not owners:
            return coords
        targets: list[int] = []
        sources: list[int] = []
        for row, device in enumerate(devices):
            parent = self.parent_of(device)
            source = owners.get(parent) if parent is not None else None
            if source is not None and source != row:
                targets.append(row)
                sources.append(source)
        if not targets:
            return coords
        if set(targets).isdisjoint(sources):  # no parent completed itself first: one array step
            rows, parents = np.array(targets), np.array(sources)
            coords[rows] = np.where(coords[rows] == NO_COORD, coords[parents], coords[rows])
            return coords
        for row, source in zip(targets, sources, strict=True):  # in device order, as listed
            missing = coords[row] == NO_COORD
            coords[row, missing] = coords[source, missing]
        return coords

    def link_matrix(self, node: Mapping[str, Any], device_names: Sequence[str]) -> np.ndarray | None:
        """Pairwise distances from the node's link annotation over its rows (NaN: not named).

        None when the node has no (usable) annotation; a malformed one is logged and ignored, so a
        typo in an annotation costs topology precision, never placement.
        """
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        text = annotations.get(LINK_ANNOTATION)
        if not text:
            return None
        try:
            raw = orjson.loads(text)
            pairs = _bandwidth_pairs(raw)
        except (orjson.JSONDecodeError, ValueError, TypeError) as exc:
            name = (node.get("metadata") or {}).get("name", "?")
            log.warning("node %s: ignoring annotation %s: %s", name, LINK_ANNOTATION, exc)
            return None
        best = max(pairs.values(), default=0.0)
        if best <= 0:
            return None
        d_min, d_max = self.settings.level_distance[0], self.settings.level_distance[-1]
        size = len(device_names)
        matrix = np.full((size, size), np.nan)
        positions: dict[str, list[int]] = {}
        for i, device_name in enumerate(device_names):
            positions.setdefault(device_name, []).append(i)
        for (a, b), bandwidth in pairs.items():
            distance = d_min + (d_max - d_min) * (1.0 - min(bandwidth, best) / best)
            for i in positions.get(a, ()):
                for j in positions.get(b, ()):
                    matrix[i, j] = matrix[j, i] = distance
        return matrix


def _bandwidth_pairs(raw: Any) -> dict[tuple[str, str], float]:
    if not isinstance(raw, dict):
        raise ValueError("must be a JSON object {device: {device: bandwidth}}")
    pairs: dict[tuple[str, str], float] = {}
    for a, row in raw.items():
        if not isinstance(row, dict):
            raise ValueError(f"entry {a!r} must be an object {{device: bandwidth}}")
        for b, bandwidth in row.items():
            if isinstance(bandwidth, bool) or not isinstance(bandwidth, int | float) or bandwidth < 0:
                raise ValueError(f"bandwidth {a}-{b} must be a number >= 0")
            pairs[(a, b)] = max(pairs.get((a, b), 0.0), float(bandwidth))
    return pairs


def _attribute_text(device: Device, name: str) -> str | None:
    value = lookup_attribute(device, name)
    if value is None:
        return None
    for kind in ("string", "int", "bool", "version"):
        if value.get(kind) is not None:
            return f"{kind}:{value[kind]}"
    for kind in ("strings", "ints", "bools", "versions"):
        items = value.get(kind)
        if items:
            return f"{kind[:-1]}:{items[0]}"
    return None


@dataclass(frozen=True, slots=True)
class Partitions:
    """The "parent GPU" grouping of an index's rows, for the partition score terms.

    A group is one physical device that partitions share: the rows that consume one shared
    counter set of one pool on one node (DynamicMIG: the GPU and every MIG placement), else the
    rows naming one parent (static MIG slices, and the parent when it is published). Costs are
    shares of the group's counters (consumption / counter value), so every group's capacity is 1
    per counter; a group without counters has `group_counters` 0 and costs 0.
    """

    row_group: np.ndarray  # int64 [rows]: group id, -1 where the row is no partition
    row_cost: np.ndarray  # float64 [rows, C]: share of each of the group's counters the row consumes
    group_counters: np.ndarray  # int64 [G]: how many of the C cost columns the group uses
    #: bool [rows]: the row consumes counters and nothing else sends it to upstream's search (no
    #: binding conditions, shared allocation or per-device node selection): for such a row alone,
    #: "free and its costs fit the group's free counters" is upstream's whole counter check
    row_counters_only: np.ndarray

    @property
    def num_groups(self) -> int:
        return int(self.group_counters.shape[0])


#: The share a row is charged for a counter whose value is 0 (or less) and that it consumes: more
#: than any group ever has free, so such a row never fits, as upstream's counter check says.
UNFITTABLE_SHARE = 2.0


@dataclass(frozen=True, slots=True)
class NodePartitions:
    """One node's share of `Partitions`, with node-local row and group ids (cacheable per node
    block: it depends only on the node's devices and the pools that give them)."""

    row_group: np.ndarray  # int64 [node rows]: local group id, -1 where no partition
    row_cost: np.ndarray  # float64 [node rows, local width]
    group_counters: np.ndarray  # int64 [local groups]
    counters_only: np.ndarray  # bool [node rows]


_NO_PARTITIONS_COST = np.zeros((0, 1), dtype=np.float64)


#: (id(amount), id(capacity)) -> (amount, capacity, share): quantities parsed from the same text
#: are one object (`Quantity.parse`), so a fleet's few distinct pairs are found by identity.
_SHARES: dict[tuple[int, int], tuple[Quantity, Quantity, float]] = {}
#: Pairs remembered (the table starts again when full).
SHARES = 4096


def _share(amount: Quantity, capacity: Quantity) -> float:
    """The share of a counter of value `capacity` that consuming `amount` takes: 0 for nothing,
    `UNFITTABLE_SHARE` for a counter of value 0 or less, else the ratio (once per distinct pair:
    every MIG placement of one profile consumes the same share of the same counters)."""
    key = (id(amount), id(capacity))
    found = _SHARES.get(key)
    if found is not None and found[0] is amount and found[1] is capacity:
        return found[2]
    if amount.exact == 0:
        share = 0.0
    elif capacity.exact <= 0:
        share = UNFITTABLE_SHARE
    else:
        share = float(amount.exact / capacity.exact)
    if len(_SHARES) >= SHARES:
        _SHARES.clear()
    _SHARES[key] = (amount, capacity, share)
    return share


def _counter_pools_of(devices: Sequence[Device], pools: Sequence[Pool]) -> dict[int, tuple[Pool, Any]]:
    """id(device) -> (its pool, its slice) for the devices that consume counters of a pool with
    counter sets. Only the pools those devices name are walked, the node's own pools first: a
    node's pool sequence also holds every pool the cluster shares (about 1,250 counter markers per
    node of the mixed 5,000-node fleet), and walking them all for every node was quadratic."""
    wanted = {PoolID(d.id.driver, d.id.pool) for d in devices if d.consumes_counters}
    found: dict[int, tuple[Pool, Any]] = {}
    own = getattr(pools, "own", None)  # NodePools: the pools the node's own slices touch
    for group in (own, pools) if own is not None else (pools,):
        for pool in group:
            if not wanted:
                return found
            if pool.id not in wanted or not pool.counter_sets:
                continue
            wanted.discard(pool.id)
            for slice_ in pool.slices:
                for device in slice_.devices:
                    found[id(device)] = (pool, slice_)
    return found


def node_partitions(model: TopologyModel, devices: Sequence[Device], pools: Sequence[Pool]) -> NodePartitions:
    """The "parent GPU" grouping of one node's rows (`devices` in row order, `pools` the node's)."""
    rows = len(devices)
    row_group = np.full(rows, -1, dtype=np.int64)
    counters_only = np.zeros(rows, dtype=bool)
    maybe = [d for d in devices if d.consumes_counters or d.id.driver in PARTITION_PARENTS]
    if not maybe:
        return NodePartitions(row_group, np.zeros((rows, 1)), np.zeros(0, dtype=np.int64), counters_only)
    keys: dict[tuple[Any, ...], int] = {}
    columns: list[list[str]] = []
    shares: list[tuple[int, list[float]]] = []
    pool_of = _counter_pools_of(maybe, pools)
    named = {p for d in maybe if (p := model.parent_of(d)) is not None}
    for row, device in enumerate(devices):
        pool, slice_ = pool_of.get(id(device), (None, None)) if device.consumes_counters else (None, None)
        counters = pool.counter_sets.get(device.consumes_counters[0][0]) if pool is not None else None
        if pool is not None and slice_ is not None and counters is not None:
            counters_only[row] = not (
                device.binding_conditions
                or device.allow_multiple_allocations
                or slice_.per_device_node_selection
                or pool.has_binding_conditions
                or slice_.skip_node_operations  # 1.37: node-dependent (DRAOptionalNodeOperations)
            )
            set_name, consumed = device.consumes_counters[0]
            key: tuple[Any, ...] = ("counters", pool.id, set_name)
            names = sorted(counters)
            share = []
            for name in names:
                amount = consumed.get(name)
                share.append(0.0 if amount is None else _share(amount, counters[name]))
        else:
            parent = model.parent_of(device)
            if parent is None:
                own = model.own_id(device)
                parent = own if own is not None and own in named else None
            if parent is None:
                continue
            key, names, share = ("parent", parent), [], []
        group = keys.get(key)
        if group is None:
            group = keys[key] = len(columns)
            columns.append(names)
        row_group[row] = group
        if share:
            shares.append((row, share))
    width = max((len(c) for c in columns), default=0) or 1
    row_cost = np.zeros((rows, width), dtype=np.float64)
    for row, share in shares:
        row_cost[row, : len(share)] = share
    group_counters = np.array([len(c) for c in columns], dtype=np.int64)
    return NodePartitions(row_group, row_cost, group_counters, counters_only)


def assemble_partitions(parts: Sequence[NodePartitions], node_start: np.ndarray) -> Partitions:
    """The cluster's `Partitions` from the nodes' parts (nodes in `node_start` order)."""
    rows = int(node_start[-1]) if len(node_start) else 0
    width = max((p.row_cost.shape[1] for p in parts), default=1) or 1
    row_group = np.full(rows, -1, dtype=np.int64)
    row_cost = np.zeros((rows, width), dtype=np.float64)
    counters_only = np.zeros(rows, dtype=bool)
    group_counters: list[np.ndarray] = []
    offset = 0
    for n, part in enumerate(parts):
        if not len(part.group_counters):
            continue  # no partition on this node: its rows keep -1 and cost 0
        lo, hi = int(node_start[n]), int(node_start[n + 1])
        local = part.row_group
        row_group[lo:hi] = np.where(local >= 0, local + offset, -1)
        row_cost[lo:hi, : part.row_cost.shape[1]] = part.row_cost
        counters_only[lo:hi] = part.counters_only
        group_counters.append(part.group_counters)
        offset += len(part.group_counters)
    counts = np.concatenate(group_counters) if group_counters else np.zeros(0, dtype=np.int64)
    return Partitions(row_group, row_cost, counts, counters_only)


def partition_groups(
    model: TopologyModel,
    row_device: Sequence[Device],
    node_start: np.ndarray,
    node_pools: Sequence[Sequence[Pool]],
) -> Partitions:
    """Group the rows of an index (nodes in `node_start` order, their pools in `node_pools`).

    A Python pass over every node's rows; `scoring.partitions` keeps the nodes' parts per node
    block instead, so a new index generation re-groups only the nodes whose block changed.
    """
    parts = [
        node_partitions(model, row_device[int(node_start[n]) : int(node_start[n + 1])], node_pools[n])
        for n in range(len(node_start) - 1)
    ]
    return assemble_partitions(parts, node_start)
