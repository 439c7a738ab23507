"""Bind turns the first-fit kernel's set into claim allocations by upstream's search over just
those devices (`Search.only`, `binding.choose_allocations`): on the mixed fleet, with devices
already held, for a pod of every claim shape and every node scored by its first-fit set, that
search takes exactly the set, and what it returns equals upstream's search over the whole node
(the allocation written, and each device result but the slice copy it points to)."""

from __future__ import annotations

import pytest

from extender.allocator.features import Features
from extender.allocator.results import ClaimAllocation
from extender.cluster.state import ClusterState
from extender.core import binding
from extender.core.assumed import AssumeCache
from extender.core.placement import Placement
from extender.core.scoring import FIRST_FIT
from extender.pods import parse_pod
from loadtests.fleet import MIXED_SHAPES, generate_mixed_cluster
from loadtests.generate import SHAPE_LABEL


def _written(allocations: list[ClaimAllocation] | None) -> object:
    assert allocations is not None
    return [
        (
            a.claim,
            a.allocation,
            [
                (
                    r.request,
                    r.parent,
                    r.device.id,
                    r.admin_access,
                    r.tolerations,
                    r.share_id,
                    r.consumed_capacity,
                )
                for r in a.devices
            ],
        )
        for a in allocations
    ]


@pytest.mark.parametrize("seed", [3, 4])
def test_search_over_the_first_fit_set_alone_writes_the_whole_node_search(seed: int) -> None:
    objects, pending = generate_mixed_cluster(nodes=30, seed=seed, pods=60)
    placement = Placement(
        ClusterState.from_objects(objects), features=Features.from_gates(), assumed=AssumeCache()
    )
    index = placement.index()
    names = list(index.node_names)
    allocated, _ = placement.view.allocated_state()
    checked: dict[str, int] = dict.fromkeys(MIXED_SHAPES, 0)
    for raw in pending:
        shape = raw["metadata"]["labels"][SHAPE_LABEL]
        evaluation = placement.evaluate(parse_pod(raw), names)
        passed = evaluation.verdicts.passed_among(names)
        book = placement.scores(evaluation, passed)
        for name in passed:
            score = book.get(name)
            assert score is not None
            if score.method != FIRST_FIT or not binding._kernel_first_fit(evaluation, name, score.rows):
                continue
            only = placement.search.only(evaluation, index, name, score.rows, in_order=True)
            whole = placement.search.run(
                evaluation.specs, index, name, allocated, placement.search.budget.deadline()
            )
            assert only is not None, (shape, name, score.rows)
            assert _written(only) == _written(whole), (shape, name)
            assert placement.choose_allocations(evaluation, name) == only
            checked[shape] += 1
    # Every shape that first-fit scores was checked (the others are the topology kernel's).
    assert sum(checked.values()) > 100, checked
    assert sum(1 for count in checked.values() if count) >= 3, checked
