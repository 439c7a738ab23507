"""Thread count and warm-up of the topology kernels: compile (or load) all three on a tiny index.

`warm_up` calls each kernel's numba path directly (not the public entry points, which answer with
the twins while `kernels.warming` says the kernels are compiling), the search on both its exact
and its budget-exceeded greedy path.
"""

from __future__ import annotations

import time

import numba
import numpy as np

from kernels.topology.inputs import (
    SearchRequests,
    TopologyInputs,
    partition_inputs,
    search_requests,
    topology_inputs,
)
from kernels.topology.partition import _partition_terms_kernel
from kernels.topology.score import _score_sets_kernel
from kernels.topology.search import _best_sets_kernel


def set_threads(n: int) -> None:
    """Use n numba threads for the parallel drivers; 0 leaves numba's default (NUMBA_NUM_THREADS)."""
    if n < 0:
        raise ValueError("threads must be >= 0")
    if n:
        numba.set_num_threads(n)


def warm_up() -> float:
    """Compile (or load from numba's cache) the kernels on a tiny index; returns the seconds taken.

    The service calls this at start-up so the first scheduling cycle does not pay for compilation.
    Both the exact path and the budget-exceeded greedy path run.
    """
    started = time.perf_counter()
    topology, requests = _tiny_index()
    nodes = np.array([0, 1], np.int64)
    for max_work in (1, 1000):
        _best_sets_kernel(topology, requests, nodes=nodes, max_work=max_work)
    sets = np.array([[0, 2], [-1, -1]], np.int64)
    _score_sets_kernel(topology, nodes=nodes, sets=sets, set_claim=np.zeros(2, np.int64))
    partitions = partition_inputs(
        node_start=topology.node_start,
        row_group=np.array([0, 0, -1, -1, 1, 1, 1, -1], np.int64),
        row_cost=np.array([[0.5, 0.5]] * 4 + [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0]]),
        group_counters=np.array([2, 0], np.int64),
        group_free=np.ones((2, 2)),
        group_used=np.array([1, 0], np.int64),
        free=topology.free,
    )
    _partition_terms_kernel(partitions, nodes=nodes, sets=sets)
    return time.perf_counter() - started


def _tiny_index() -> tuple[TopologyInputs, SearchRequests]:
    """Two nodes of 4 rows, one request of 2 with a matchAttribute, one node with a link matrix."""
    rows = 8
    coords = np.repeat(np.array([[0, 1, 2, 3]], np.int32), rows, axis=0)
    coords[1::2, 0] = -1
    link = np.full(16, np.nan)
    link[1] = 1.5
    topology = topology_inputs(
        node_start=np.array([0, 4, 8], np.int64),
        coords=coords,
        free=np.ones(rows, np.uint8),
        relevant=np.ones(rows, np.uint8),
        level_distance=(1.0, 2.0, 3.0, 4.0, 6.0),
        link_offset=np.array([-1, 0], np.int64),
        link_distance=link,
        weights=(4.0, 2.0, 1.0, 1.0),
        spread=False,
    )
    requests = search_requests(
        candidates=np.ones((1, rows), np.uint8),
        counts=np.array([2], np.int64),
        claim_of=np.zeros(1, np.int64),
        constraint_kind=np.zeros(1, np.int64),
        constraint_members=np.ones((1, 1), np.uint8),
        constraint_values=np.zeros((1, rows), np.int32),
    )
    return topology, requests
