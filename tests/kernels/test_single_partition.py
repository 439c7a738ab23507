"""The one-device kernel (`kernels.single_partition`) against the general kernels it stands for.

`scoring.partition_choices` scores every candidate row as a set of one. With the kernels on it
uses `single_partition.single_terms`; its terms must be exactly (not approximately) what
`score_sets` and `partition_parts` give the same sets, or ties between partitions would break
differently. Checked on the mixed fleet (A100 MIG partitions on shared counters, and every other
node type) under random free and relevant rows, with both packing policies.
"""

from __future__ import annotations

import numpy as np
import pytest

from extender.allocator.features import Features
from extender.cluster.state import ClusterState
from extender.core import scoring
from extender.core.assumed import AssumeCache
from extender.core.placement import Placement
from extender.index.snapshot import DeviceIndex
from extender.index.topology import TopologySettings
from kernels import single_partition
from loadtests.fleet import generate_mixed_cluster


@pytest.fixture(scope="module")
def index() -> DeviceIndex:
    objects, _ = generate_mixed_cluster(nodes=24, seed=5, pods=1)
    placement = Placement(
        ClusterState.from_objects(objects), features=Features.from_gates(), assumed=AssumeCache()
    )
    return placement.index()


def _general(
    index: DeviceIndex, rows: np.ndarray, free: np.ndarray, relevant: np.ndarray, settings: TopologySettings
) -> np.ndarray:
    nodes = index.row_node[rows].astype(np.int64)
    sets = rows.reshape(-1, 1)
    _, parts = scoring.score_sets(index, nodes, sets, np.zeros(1, dtype=np.int64), free, relevant, settings)
    return scoring.partition_parts(index, nodes, sets, free, parts)


@pytest.mark.parametrize("packing", ["binpack", "spread"])
@pytest.mark.parametrize("seed", range(12))
def test_terms_equal_the_general_kernels(index: DeviceIndex, packing: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    settings = TopologySettings(packing=packing)
    groups = scoring.partitions(index)
    assert groups.num_groups > 0  # the fleet has A100 pools: the partition terms are exercised
    free = rng.random(index.num_rows) < rng.uniform(0.3, 1.0)
    relevant = rng.random(index.num_rows) < 0.8
    rows = np.flatnonzero(rng.random(index.num_rows) < 0.5)  # grouped and ungrouped rows alike
    nodes = index.row_node[rows].astype(np.int64)
    single = scoring._single_parts(index, groups, rows, nodes, free, relevant, settings)
    expected = _general(index, rows, free, relevant, settings)
    assert (groups.row_group[rows] >= 0).any() and (groups.row_group[rows] < 0).any()
    assert np.array_equal(single, expected, equal_nan=True)


def test_group_row_lists_hold_each_groups_rows_in_order() -> None:
    row_group = np.array([2, -1, 0, 2, 0, -1, 1], dtype=np.int64)
    start, rows = single_partition.group_row_lists(row_group, 3)
    assert [rows[start[g] : start[g + 1]].tolist() for g in range(3)] == [[2, 4], [6], [0, 3]]


def test_group_row_lists_with_costs_put_each_groups_largest_rows_first() -> None:
    """Sizes are the mean over the group's counters; ties keep row order; groups stay apart."""
    row_group = np.array([0, 0, -1, 1, 0, 1, 0], dtype=np.int64)
    row_cost = np.array([[0.25, 0.25], [1.0, 0.0], [9, 9], [0.5, 0.1], [0.5, 0.0], [0.1, 0.9], [0.5, 0.5]])
    group_counters = np.array([2, 1], dtype=np.int64)  # group 1 counts only its first column
    start, rows = single_partition.group_row_lists(row_group, 2, row_cost, group_counters)
    # group 0 sizes: row 0 0.25, row 1 0.5, row 4 0.25, row 6 0.5; group 1: row 3 0.5, row 5 0.1
    assert [rows[start[g] : start[g + 1]].tolist() for g in range(2)] == [[1, 6, 0, 4], [3, 5]]
