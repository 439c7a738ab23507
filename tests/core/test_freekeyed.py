"""Kernel answers kept per node while the node's rows stay as free as they were
(`extender.core.freekeyed`, issue 21's steady cycle).

The memo itself: `sync` forgets exactly the nodes whose rows changed in the free mask (all of them
for another key), `get` runs the computation only on the distinct nodes it does not know, and a
computation of another layout makes every answer again. On the mixed fleet: through a run of
filter -> prioritize -> bind cycles, each bind taking devices on one node, the answers of a
placement that keeps them (verdicts with reasons, scores and the device sets scored) equal those
of an evaluation with no memo of any kind, for a pod of every claim shape.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from extender.allocator.features import Features
from extender.binder import InMemoryBinder
from extender.cluster.state import ClusterState
from extender.core import freekeyed, shapes
from extender.core.assumed import AssumeCache
from extender.core.placement import Placement
from extender.index.snapshot import Changes
from extender.pods import Pod, parse_pod
from loadtests.fleet import MIXED_SHAPES, generate_mixed_cluster
from loadtests.generate import SHAPE_LABEL
from tests.core.test_shapes_carry import _answers, no_memos

ROW_NODE = np.array([0, 0, 1, 1, 1, 2, 3, 3], dtype=np.int32)  # 4 nodes, 8 rows


def _squares(calls: list[list[int]]) -> freekeyed.Compute:
    def compute(todo: np.ndarray) -> tuple[np.ndarray, ...]:
        calls.append(todo.tolist())
        return (todo * todo, np.stack([todo, -todo], axis=1))

    return compute


def test_get_computes_only_the_nodes_it_does_not_know() -> None:
    memo = freekeyed.FreeKeyed.of(ROW_NODE, 4)
    calls: list[list[int]] = []
    free = np.ones(8, dtype=bool)
    memo.sync(free)
    squares, pairs = memo.get(np.array([2, 0, 2]), _squares(calls))
    assert calls == [[0, 2]]  # distinct, once each
    assert squares.tolist() == [4, 0, 4]
    assert pairs.tolist() == [[2, -2], [0, 0], [2, -2]]
    squares, _ = memo.get(np.array([3, 2, 1, 0]), _squares(calls))
    assert calls == [[0, 2], [1, 3]]
    assert squares.tolist() == [9, 4, 1, 0]


def test_sync_forgets_the_nodes_whose_rows_changed() -> None:
    memo = freekeyed.FreeKeyed.of(ROW_NODE, 4)
    calls: list[list[int]] = []
    free = np.ones(8, dtype=bool)
    memo.sync(free)
    memo.get(np.arange(4), _squares(calls))
    memo.sync(free)  # the same mask: nothing forgotten
    memo.get(np.arange(4), _squares(calls))
    assert calls == [[0, 1, 2, 3]]
    changed = free.copy()
    changed[[3, 6]] = False  # rows of nodes 1 and 3
    memo.sync(changed)
    memo.get(np.arange(4), _squares(calls))
    assert calls[-1] == [1, 3]
    memo.sync(changed.copy())  # an equal mask, another object: nothing forgotten
    memo.get(np.arange(4), _squares(calls))
    assert len(calls) == 2
    memo.sync(changed, key="other settings")
    memo.get(np.array([2]), _squares(calls))
    assert calls[-1] == [2]  # another key: every answer forgotten
    memo.get(np.array([0]), _squares(calls))
    assert calls[-1] == [0]


def test_another_layout_makes_every_answer_again() -> None:
    memo = freekeyed.FreeKeyed.of(ROW_NODE, 4)
    memo.sync(np.ones(8, dtype=bool))
    memo.get(np.array([0, 1]), lambda todo: (np.zeros((len(todo), 2)),))
    calls: list[list[int]] = []

    def wider(todo: np.ndarray) -> tuple[np.ndarray, ...]:
        calls.append(todo.tolist())
        return (np.ones((len(todo), 3)),)

    (values,) = memo.get(np.array([1, 2]), wider)
    assert calls == [[2], [1, 2]]  # node 1's narrow answer is not mixed in
    assert values.shape == (2, 3) and (values == 1).all()


class _Index:
    """What `freekeyed` reads of an index: the row -> node map and the node names."""

    row_node = ROW_NODE
    node_names = ("a", "b", "c", "d")


def test_a_later_generation_takes_the_answers_but_the_changed_nodes() -> None:
    old = freekeyed.FreeKeyed.of(ROW_NODE, 4)
    free = np.ones(8, dtype=bool)
    old.sync(free)
    calls: list[list[int]] = []
    old.get(np.arange(4), _squares(calls))
    later = shapes.ShapeData(inherited={"memo": (old, Changes(rebuilt=np.array([2]), touched=np.array([2])))})
    memo = freekeyed._memo(later, "memo", _Index())  # type: ignore[arg-type]
    memo.sync(free)
    squares, _ = memo.get(np.arange(4), _squares(calls))
    assert calls[-1] == [2] and squares.tolist() == [0, 1, 4, 9]  # only the changed node again
    # The earlier generation's memo gave its answers away: it works them out again if asked.
    (squares, _) = old.get(np.array([1]), _squares(calls))
    assert calls[-1] == [1] and squares.tolist() == [1]


def _pods_by_shape(pending: list[dict[str, object]]) -> list[Pod]:
    first: dict[str, Pod] = {}
    for raw in pending:
        labels = raw["metadata"]["labels"]  # type: ignore[index]
        first.setdefault(labels[SHAPE_LABEL], parse_pod(raw))
    assert set(first) == set(MIXED_SHAPES)
    return [first[name] for name in MIXED_SHAPES]


def _scored_sets(placement: Placement, pods: list[Pod]) -> list[dict[str, tuple[int, ...]]]:
    """Per pod, the device rows scored on each passed node (what bind turns into allocations)."""
    names = list(placement.index().node_names)
    out = []
    for pod in pods:
        placement.evaluations.clear()
        evaluation = placement.evaluate(pod, names)
        passed = evaluation.verdicts.passed_among(names)
        book = placement.scores(evaluation, passed)
        out.append({name: score.rows for name in passed if (score := book.get(name)) is not None})
    return out


@pytest.mark.parametrize("seed", [5, 6])
def test_answers_kept_through_binds_equal_fresh_ones(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    objects, pending = generate_mixed_cluster(nodes=24, seed=seed, pods=150)
    state = ClusterState.from_objects(objects)
    placement = Placement(state, features=Features.from_gates(), assumed=AssumeCache())
    binder = InMemoryBinder(state, placement)
    probes = _pods_by_shape(pending[40:])
    counts = {"asked": 0, "computed": 0}
    counting = [True]  # off while the fresh answers are made
    get = freekeyed.FreeKeyed.get

    def counted_get(
        memo: freekeyed.FreeKeyed, positions: np.ndarray, compute: freekeyed.Compute
    ) -> tuple[np.ndarray, ...]:
        def counted(todo: np.ndarray) -> tuple[np.ndarray, ...]:
            counts["computed"] += len(todo) * counting[0]
            return compute(todo)

        counts["asked"] += len(np.unique(positions)) * counting[0]
        return get(memo, positions, counted)

    monkeypatch.setattr(freekeyed.FreeKeyed, "get", counted_get)
    rng = random.Random(seed)
    bound = 0
    for raw in pending[:40]:
        pod = parse_pod(raw)
        names = list(placement.index().node_names)
        verdict = placement.filter(pod, names)
        if not verdict.passed:
            continue
        scores = placement.prioritize(pod, verdict.passed)
        top = max(s.score for s in scores)
        node = rng.choice([s.host for s in scores if s.score == top])
        error, _placed = binder._bind_or_explain(
            namespace=pod.namespace, name=pod.name, uid=pod.uid, node=node
        )
        assert error == ""
        bound += 1
        kept_answers, kept_sets = _answers(placement, probes), _scored_sets(placement, probes)
        counting[0] = False
        with no_memos(placement.index()):
            fresh_answers, fresh_sets = _answers(placement, probes), _scored_sets(placement, probes)
        counting[0] = True
        assert kept_answers == fresh_answers, pod.ref
        assert kept_sets == fresh_sets, pod.ref
    assert bound >= 25
    # The cycles answered most nodes from kept answers, and the binds made some be worked out again.
    assert 0 < counts["computed"] < counts["asked"] / 2, counts
