"""Topology kernels: per node, the best device set for a pod's requests, and scores of given sets.

What this package owns: the search and the score of DESIGN.md "Topology model", over the columnar
device index (a "row" is one device of one node; node `n` owns rows `node_start[n]:node_start[n+1]`).
It knows nothing of claims, CEL or Kubernetes: the caller passes per-request candidate masks (selector
match, free, not tainted, already ANDed), interned constraint values and topology coordinates, and gets
arrays back. It depends only on numpy and numba.

One kernel per module, each beside its plain-Python twin:

- `search.py`: `best_sets` (numba) and `best_sets_reference`: the best valid set per node, with
  its status;
- `score.py`: `score_sets` and `score_sets_reference`: the score of a given set per node, and the
  definition of distance and score that the search uses too;
- `partition.py`: `partition_terms` and `partition_terms_reference`: partition packing and
  headroom of a given set per node.

`inputs.py` holds the input records the kernels share, their builders and the argument checks
(a kernel and its twin raise the same errors); `warmup.py` the thread count and the warm-up.

The twins are serial over nodes and written to be read. They follow the same enumeration order,
count work the same way and add floating-point terms in the same order, so the kernels must
reproduce them exactly (status and chosen rows) and to rounding (scores); tests/kernels holds them
to that. Each public entry point runs its twin while the kernels compile in the background
(`kernels.warming`).

This module is the package's public API: callers use `kernels.topology.<name>` and never need to
know which module holds it.
"""

from kernels.topology.inputs import (
    DISTINCT_ATTRIBUTE,
    LEVELS,
    MATCH_ATTRIBUTE,
    NODE_LEVEL,
    PartitionInputs,
    SearchRequests,
    TopologyInputs,
    partition_inputs,
    search_requests,
    topology_inputs,
)
from kernels.topology.partition import PARTITION_EPSILON, partition_terms, partition_terms_reference
from kernels.topology.score import score_sets, score_sets_reference
from kernels.topology.search import (
    GREEDY_SEEDS,
    MAX_SET_SIZE,
    STATUS_BOUNDED,
    STATUS_EXACT,
    STATUS_NONE,
    STATUS_UNKNOWN,
    TIE_EPSILON,
    best_sets,
    best_sets_reference,
)
from kernels.topology.warmup import set_threads, warm_up

__all__ = [
    "DISTINCT_ATTRIBUTE",
    "GREEDY_SEEDS",
    "LEVELS",
    "MATCH_ATTRIBUTE",
    "MAX_SET_SIZE",
    "NODE_LEVEL",
    "PARTITION_EPSILON",
    "STATUS_BOUNDED",
    "STATUS_EXACT",
    "STATUS_NONE",
    "STATUS_UNKNOWN",
    "TIE_EPSILON",
    "PartitionInputs",
    "SearchRequests",
    "TopologyInputs",
    "best_sets",
    "best_sets_reference",
    "partition_inputs",
    "partition_terms",
    "partition_terms_reference",
    "score_sets",
    "score_sets_reference",
    "search_requests",
    "set_threads",
    "topology_inputs",
    "warm_up",
]
