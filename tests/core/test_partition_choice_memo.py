"""`scoring.partition_choices` keeps its per-node choices across calls (`_ChoiceMemo`) and works
out again only the nodes whose rows' free bits changed: after any sequence of changes its answer
equals a fresh computation over every node."""

from __future__ import annotations

import numpy as np

from extender.allocator.features import Features
from extender.cluster.state import ClusterState
from extender.core import scoring
from extender.core.assumed import AssumeCache
from extender.core.placement import Placement
from extender.index.topology import TopologySettings
from extender.pods import parse_pod
from loadtests.fleet import generate_mixed_cluster
from loadtests.generate import SHAPE_LABEL


def test_kept_choices_equal_fresh_ones_as_devices_are_taken_and_freed() -> None:
    objects, pending = generate_mixed_cluster(nodes=24, seed=5, pods=40)
    placement = Placement(
        ClusterState.from_objects(objects), features=Features.from_gates(), assumed=AssumeCache()
    )
    index = placement.index()
    pod = next(p for p in pending if p["metadata"]["labels"].get(SHAPE_LABEL) == "mig-1g")
    evaluation = placement.new_evaluation(parse_pod(pod))
    spec = scoring.single_partition_request(evaluation.specs, index)
    assert spec is not None
    relevant = scoring.relevant_rows(evaluation.specs, index)
    settings = TopologySettings()
    groups = scoring.partitions(index)
    everyone = np.arange(len(index.node_names), dtype=np.int64)
    rng = np.random.default_rng(7)
    free = rng.random(index.num_rows) < 0.7
    partitioned = np.unique(index.row_node[groups.row_group >= 0])
    assert 3 <= len(partitioned) < len(everyone)
    some_chosen = False
    changed_chosen = 0  # choices on nodes just changed (worked out again, alone when one or two)
    changed = np.zeros(0, dtype=np.int64)
    for step in range(16):
        asked = everyone if step % 2 else rng.choice(everyone, size=len(everyone) // 2, replace=False)
        got = scoring.partition_choices(index, asked, spec, free, relevant, settings)
        fresh = scoring._partition_choices(index, groups, everyone, spec, free, relevant, settings)
        assert got.tolist() == fresh[asked].tolist(), step
        some_chosen |= bool((got >= 0).any())
        changed_chosen += int((got[np.isin(asked, changed)] >= 0).sum())
        free = free.copy()  # as the view does: a new mask per change, a few nodes' rows flipped
        # 1-3 nodes with partitions, their GPUs freed or partly taken: with one or two, just
        # their rows are worked out again
        changed = rng.choice(partitioned, size=1 + step % 3, replace=False)
        for node in changed.tolist():
            lo, hi = int(index.node_start[node]), int(index.node_start[node + 1])
            free[lo:hi] = rng.random(hi - lo) < (0.5 if step % 4 == 3 else 0.99)
    assert some_chosen
    assert changed_chosen >= 4, changed_chosen
