"""What pods of one claim shape share at one index generation (extender.core.shapes) and the
first-fit shortcut for nodes a request cannot be met on: kept answers equal fresh ones."""

from __future__ import annotations

import numpy as np

from extender.core import firstfit, scoring, shapes
from extender.core.tiers import FirstFitTier
from kernels import counters as counter_kernels
from tests.core import small_cluster as c

NUMA = [{"requests": ["r"], "matchAttribute": f"{c.DRIVER}/numa"}]
INF = float("inf")


def _cluster(*claims: c.Obj) -> list[c.Obj]:
    return [
        c.node("a"), *c.gpus("a", 2, numa=[0, 0]),
        c.node("b"), *c.gpus("b", 1, numa=[0]),
        c.node("c"), *c.gpus("c", 2, numa=[0, 1]), c.held("h", "c", ["gpu-0"]),
        c.gpu_class(), *claims,
    ]  # fmt: skip


def test_the_shape_key_ignores_what_claims_are_called_but_not_what_they_ask() -> None:
    two, other_two, three = c.claim("two", 2), c.claim("other", 2), c.claim("three", 3)
    placement = c.placement(_cluster(two, other_two, three))
    spec = [placement.new_evaluation(c.pod([claim])).specs for claim in (two, other_two, three)]
    assert shapes.shape_key(spec[0]) == shapes.shape_key(spec[1])
    assert shapes.shape_key(spec[0]) != shapes.shape_key(spec[2])
    index = placement.index()
    assert shapes.shape_data(spec[0], index) is shapes.shape_data(spec[1], index)
    assert shapes.shape_data(spec[0], index) is not shapes.shape_data(spec[2], index)


def test_the_shape_key_is_remembered_per_spec_list_and_not_confused_between_lists() -> None:
    two, three = c.claim("two", 2), c.claim("three", 3)
    placement = c.placement(_cluster(two, three))
    specs = [placement.new_evaluation(c.pod([claim])).specs for claim in (two, three) for _ in range(40)]
    keys = [shapes.shape_key(s) for s in specs]  # more lists than the memo keeps: it starts again
    assert [shapes.shape_key(s) for s in specs] == keys
    assert shapes.shape_key(specs[0]) is shapes.shape_key(specs[0])
    assert len(set(keys)) == 2 and keys[0] != keys[-1]
    assert keys[-1] == tuple((repr(s.requests), repr(s.constraints)) for s in specs[-1])


def test_a_node_memo_computes_each_node_once() -> None:
    memo = shapes.NodeMemo.of(5, np.int64)
    asked: list[list[int]] = []

    def compute(todo: np.ndarray) -> np.ndarray:
        asked.append(todo.tolist())
        return todo * 10

    assert memo.get(np.array([3, 1, 3]), compute).tolist() == [30, 10, 30]
    assert memo.get(np.array([1, 4]), compute).tolist() == [10, 40]
    assert asked == [[1, 3], [4]]


def test_short_request_codes_kept_per_node_equal_fresh_ones_and_name_the_pods_claim() -> None:
    two, other = c.claim("two", 2), c.claim("other", 2)
    placement = c.placement(_cluster(two, other))
    index = placement.index()
    first = placement.new_evaluation(c.pod([two])).specs
    codes, texts = scoring.short_request_codes(first, index, np.array([1, 0, 2]))
    assert codes.tolist() == [0, -1, -1]  # b has one GPU
    assert texts[0] == "claim default/two, request r: 2 device(s) of class gpu"
    second = placement.new_evaluation(c.pod([other], name="p2", uid="u2")).specs
    kept, worded = scoring.short_request_codes(second, index, np.array([2, 1]))
    assert kept.tolist() == [-1, 0]
    assert worded[0] == "claim default/other, request r: 2 device(s) of class gpu"


def test_the_first_fit_shortcut_answers_as_the_kernel_does() -> None:
    """Nodes a request cannot be met on get NONE without the kernel: the kernel says the same."""
    claim = c.claim("near", 2, constraints=NUMA)
    placement = c.placement(_cluster(claim))
    index = placement.index()
    specs = placement.new_evaluation(c.pod([claim])).specs
    plan = firstfit.plan(specs, index)
    assert plan is not None
    assert plan.short_nodes.tolist() == [False, True, False]
    free = placement.view.snapshot().free
    positions = np.arange(3, dtype=np.int64)
    for held in (False, True):
        quick = firstfit.run(plan, index, free, positions, nothing_held=held).status
        unplanned = firstfit.FirstFitPlan(**{
            **{name: getattr(plan, name) for name in firstfit.FirstFitPlan.__dataclass_fields__},
            "short_nodes": np.zeros(3, dtype=bool),
        })  # fmt: skip
        full = firstfit.run(unplanned, index, free, positions, nothing_held=held).status
        assert quick.tolist() == full.tolist()
        assert quick[1] == counter_kernels.STATUS_NONE


def test_a_second_pod_of_the_shape_gets_the_same_first_fit_verdicts() -> None:
    one, two = c.claim("near", 2, constraints=NUMA), c.claim("close", 2, constraints=NUMA)
    placement = c.placement(_cluster(one, two))
    reasons = []
    for claim, uid in ((one, "u1"), (two, "u2")):
        evaluation = placement.new_evaluation(c.pod([claim], uid=uid))
        assert FirstFitTier().decide(evaluation, placement.view.snapshot(), ["a", "b", "c"], INF) == []
        name = claim["metadata"]["name"]
        reasons.append({n: v.reason.replace(name, "X") for n, v in evaluation.verdicts.items()})
    assert reasons[0] == reasons[1]
    assert reasons[0]["a"] == ""
