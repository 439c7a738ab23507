"""`scoring.group_state` worked out from the previous free mask's state (`_group_state_since`):
through a run of masks that each change a few rows (a bind), many rows, or none, the state is
bit for bit the one worked out from scratch, and most masks are answered from the previous one."""

from __future__ import annotations

import numpy as np
import pytest

from extender.allocator.features import Features
from extender.cluster.state import ClusterState
from extender.core import scoring
from extender.core.assumed import AssumeCache
from extender.core.placement import Placement
from loadtests.fleet import generate_mixed_cluster


@pytest.mark.parametrize("seed", [1, 2])
def test_state_from_the_previous_mask_equals_the_state_from_scratch(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects, _ = generate_mixed_cluster(nodes=40, seed=seed, pods=1)
    placement = Placement(
        ClusterState.from_objects(objects), features=Features.from_gates(), assumed=AssumeCache()
    )
    index = placement.index()
    groups = scoring.partitions(index)
    assert groups.num_groups > 8
    partition_rows = np.flatnonzero(groups.row_group >= 0)
    from_scratch = scoring._group_state
    calls = [0]

    def counted(groups: scoring.Partitions, free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        calls[0] += 1
        return from_scratch(groups, free)

    monkeypatch.setattr(scoring, "_group_state", counted)
    scoring._GROUP_STATE.clear()
    rng = np.random.default_rng(seed)
    free = np.ones(index.num_rows, dtype=bool)
    steps = 80
    for step in range(steps):
        free = free.copy()  # a new mask per change, as the view makes them
        if step % 20 == 19:
            flips = rng.choice(partition_rows, size=len(partition_rows) // 2, replace=False)  # a relist
        elif step % 10 == 9:
            flips = np.zeros(0, dtype=np.int64)  # a claim change elsewhere: no row changes
        else:
            node = int(rng.integers(len(index.node_names)))  # a bind: rows of one node
            rows = np.arange(index.node_start[node], index.node_start[node + 1])
            flips = rng.choice(rows, size=min(len(rows), 3), replace=False) if len(rows) else rows
        free[flips] = ~free[flips]
        got = scoring.group_state(groups, free)
        want = from_scratch(groups, free)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    assert calls[0] <= steps // 4, calls  # only the first mask and the relists from scratch
