"""The ClusterView: the device index, the held devices and the free row mask at one generation.

Everything a tier reads about the cluster comes from here. The index is rebuilt when the
device generation changes (`build_index` re-uses the blocks of unchanged nodes); the held
devices and the `free` mask follow the claims generation and the AssumeCache's version by
the diff of each change (`HeldLedger`). Results are new objects, never mutated in place:
a reader keeps the index and mask it was handed.

Lifecycle: one view per Placement, used on the placement's worker thread only (the thread that
also writes the ClusterState and the AssumeCache); the event loop reads `current_index()` and
`generation()` (atomic reads).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from extender.allocator.features import Features
from extender.allocator.inputs import AllocatedState
from extender.allocator.model import DeviceID
from extender.cluster.state import ClusterState
from extender.core import scoring
from extender.core.assumed import AssumeCache
from extender.core.held import HeldLedger
from extender.index.counters import counter_columns
from extender.index.snapshot import DeviceIndex, build_index
from extender.index.topology import TopologyModel, topology_attributes
from extender.verdicts import PlacementStats

log = logging.getLogger(__name__)

Generation = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The view at one moment: what one decision reads, so every tier sees the same devices held."""

    index: DeviceIndex
    allocated: AllocatedState  # devices in use (allocated in claims or assumed)
    free: np.ndarray  # bool [rows]: the index rows not in use


class ClusterView:
    """The index, held devices and free masks of a ClusterState (see module docstring)."""

    def __init__(
        self,
        state: ClusterState,
        *,
        features: Features,
        assumed: AssumeCache,
        topology: TopologyModel,
        freeze_caches: bool = False,
    ) -> None:
        self.state = state
        self.features = features
        self.assumed = assumed
        self._topology = topology
        self._freeze_caches = freeze_caches
        self._frozen_at: tuple[int, int, int] = (-1, -1, -1)
        self._index: DeviceIndex | None = None
        self._allocated_key: Generation | None = None
        self._allocated: AllocatedState = AllocatedState()
        self._free: np.ndarray = np.zeros(0, dtype=bool)
        self._free_serial = -1  # `DeviceIndex.serial` of the index `_free` was made for
        self._ledger = HeldLedger()
        #: Index builds so far and their total and last duration, for /metrics (written on the
        #: worker thread, read at scrape time: single attribute reads).
        self.index_builds = 0
        self.index_build_seconds = 0.0
        self.index_last_build_seconds: float | None = None

    def index(self) -> DeviceIndex:
        """The device index for the current device generation (rebuilt when it changed)."""
        if self._index is None or self._index.generation != self.state.devices_generation:
            started = time.perf_counter()
            # The first build is over the whole heap just loaded or synced: see `freeze_collected`.
            with self._collector_paused(collect=self._index is not None):
                self._index = build_index(
                    self.state, self.features, previous=self._index, topology=self._topology
                )
            took = time.perf_counter() - started
            self.index_builds += 1
            self.index_build_seconds += took
            self.index_last_build_seconds = took
            log.info(
                "device index generation %d: %d nodes, %d device rows, built in %.1f ms",
                self._index.generation,
                len(self._index.node_names),
                self._index.num_rows,
                took * 1000,
            )
        return self._index

    @contextlib.contextmanager
    def _collector_paused(self, *, collect: bool) -> Iterator[None]:
        """No cyclic garbage collection while a generation is built; with `freeze_caches`, what
        it made is frozen right after (as `freeze_new_caches` does after a call).

        A new generation makes a few containers that point at thousands of long-lived objects
        (the shared row list's spans, the node maps, the pool catalog's dicts). A collection of
        the youngest generation walks every pointer of every young container, and each one is a
        cache miss on a cold object: at 5,000 mixed nodes collections during and right after a
        one-slice change cost ~20 ms of a ~50 ms filter call. Frozen, they are never walked.
        """
        enabled = gc.isenabled()
        gc.disable()
        try:
            yield
        finally:
            if self._freeze_caches:
                freeze_collected(collect=collect)
            if enabled:
                gc.enable()

    def current_index(self) -> DeviceIndex | None:
        """The device index as last built, without building one (for /metrics on the event loop)."""
        return self._index

    def stats(
        self, kernel_seconds: float, kernel_calls: int, source: dict[str, Any] | None
    ) -> PlacementStats:
        """What /metrics reports of this view, with the kernels' totals and the watch source's
        stats (never builds the index)."""
        return PlacementStats(
            index=self._index,
            assumed=len(self.assumed),
            kernel_seconds=kernel_seconds,
            kernel_calls=kernel_calls,
            source=source,
            index_builds=self.index_builds,
            index_build_seconds=self.index_build_seconds,
            index_last_build_seconds=self.index_last_build_seconds,
        )

    def allocated_state(self) -> tuple[AllocatedState, np.ndarray]:
        """Devices in use (allocated or assumed) and the matching `free` row mask.

        Updated by the diff of each change: the ledger re-reads only the claims changed since it
        last looked (and the assumed entries), and `free` changes only at the rows of devices
        whose holdings changed. A new index generation (rows moved) or a ledger rescan rebuilds
        `free` from the held devices. Both results are new objects; readers keep the old ones.
        """
        index = self.index()
        active = self.assumed.active()
        key = (index.generation, self.state.claims_generation, self.assumed.version)
        if key != self._allocated_key:
            touched = self._ledger.update(self.state, active)
            if touched is None or touched or self._allocated_key is None:  # else as it was (a new index)
                collected = self._ledger.allocated()
                self._allocated = AllocatedState(
                    devices=collected.devices,
                    shared_ids=collected.shared_ids,
                    aggregated_capacity=collected.aggregated_capacity,
                )
            same_rows = self._allocated_key is not None and self._allocated_key[0] == index.generation
            # A generation whose rows are those `free` was made for but some nodes' (`patched`):
            # only those nodes' rows are read again, then the claim changes as below.
            patched = (
                not same_rows
                and index.patched is not None
                and index.patched[0] == self._free_serial
                and len(self._free) == index.num_rows
            )
            if touched is not None and patched and index.patched is not None:
                free = self._free.copy()
                held = self._ledger.held
                starts, row_device = index.node_start, index.row_device
                for position in index.patched[1].tolist():
                    for row in range(int(starts[position]), int(starts[position + 1])):
                        free[row] = row_device[row].id not in held
                for device_id in touched:
                    rows = index.rows_of.get(device_id)
                    if rows is not None:
                        free[rows] = device_id not in held
            elif touched is None or not same_rows or len(self._free) != index.num_rows:
                free = np.ones(index.num_rows, dtype=bool)
                free[_rows_held(index, self._ledger.held)] = False
            elif touched:
                free = self._free.copy()
                held = self._ledger.held
                for device_id in touched:
                    rows = index.rows_of.get(device_id)
                    if rows is not None:
                        free[rows] = device_id not in held
            else:
                free = self._free
            self._free = free
            self._free_serial = index.serial
            self._allocated_key = key
        return self._allocated, self._free

    def snapshot(self) -> Snapshot:
        """The index and the held devices as they are now."""
        index = self.index()
        allocated, free = self.allocated_state()
        return Snapshot(index, allocated, free)

    def generation(self) -> Generation:
        """(devices, claims, assumed) generations: an evaluation is valid while this is unchanged."""
        return self.state.devices_generation, self.state.claims_generation, self.assumed.version

    def warm(self) -> None:
        """Build now what the first pods would otherwise pay for in their filter call: the device
        index, the held devices, the counter columns of the first-fit tier and the parent-GPU
        groups of the partition terms (seconds at thousands of nodes; a cold first MIG pod at
        5,000 nodes otherwise ran into `filter_timeout_seconds`, docs/benchmarks.md)."""
        index = self.index()
        self.allocated_state()
        counter_columns(index)
        scoring.partitions(index)
        for class_name in index.classes:
            # Every DeviceClass's CEL over every device, once: the per-device results stay on the
            # devices, so a pod's first mask of that class costs lookups, not CEL (a cold MIG pod
            # at 10,000 nodes otherwise spent its whole filter deadline evaluating the class).
            with contextlib.suppress(Exception):  # a class whose CEL fails is the pod's error later
                index.mask(class_name, ())
        for name in sorted(topology_attributes(index.topology.settings)):
            # The attributes matchAttribute constraints name in practice (the topology levels'):
            # their interned columns would otherwise be built by the first pod of each shape.
            index.attribute_codes(name)

    def freeze_new_caches(self) -> None:
        """Move long-lived caches made since the last call out of the GC's generations (only when
        built with `freeze_caches`).

        A new index generation, new selector masks and the per-device CEL results they leave
        are kept for as long as the devices live; left in the young generations they make every
        full collection walk hundreds of thousands of objects (a ~175 ms pause at 5,000 nodes,
        docs/benchmarks.md). `gc.freeze` is a list splice; frozen objects are still freed by
        reference counting when their devices go.
        """
        index = self._index
        if not self._freeze_caches or index is None:
            return
        marker = (index.generation, index.cached_masks, index.evaluator.evaluations)
        if marker != self._frozen_at:
            self._frozen_at = marker
            freeze_collected()


def freeze_collected(*, collect: bool = True) -> None:
    """`gc.freeze()`, after collecting the cyclic garbage among the objects not frozen yet.

    Why collect first: frozen objects are never examined by the collector again, so a reference
    cycle that was garbage when it was frozen is kept for the life of the process (reference
    counting cannot free a cycle). Every call leaves some (an allocator `_Search` and the bound
    methods it hands its helpers, for one), and a call that meets a new selector text freezes: a
    stream of claims, each with its own selector, grew the server by about 5.5 KiB per claim
    without bound (issue 30 item 3). The collection walks only what is not frozen yet, which a
    freeze after every such call keeps to what the call made (about 1 ms on the sample).
    `collect=False` for the view's first index: nothing is frozen yet then, and one collection
    of a synced 5,000-node heap held the GIL for 1.9 s (`wiring.freeze_heap`). (Not decided by
    `gc.get_freeze_count()`: it walks every frozen object, 18 ms a call on the sample.)
    """
    if collect:
        gc.collect()
    gc.freeze()


def _rows_held(index: DeviceIndex, devices: Iterable[DeviceID]) -> np.ndarray:
    """Index rows of the devices (a device on no node's rows has none)."""
    return index.rows_of.rows_for(devices)
