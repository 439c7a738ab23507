"""The first-fit kernel (`kernels.counters.first_fit`) against its plain twin and hand-built cases.

Scope: on seeded random inputs (requests with counts, `All`, `firstAvailable`, shared counters with
held consumption, match/distinct constraints, taints, tiny budgets) the numba kernel and the recursive
Python twin give the same status, rows and slots on every node. Hand-built nodes check the semantics
the kernel exists for: counters shared by partitions, the subrequest fallback, `All`, the claim limit
and the budget hand-off.
"""

from __future__ import annotations

import numpy as np
import pytest

from kernels import counters

FOUND, NONE, UNKNOWN = counters.STATUS_FOUND, counters.STATUS_NONE, counters.STATUS_UNKNOWN


def all_nodes(case: counters.FirstFitInputs) -> np.ndarray:
    return np.arange(len(case.node_start) - 1, dtype=np.int64)


def i64(values: list[int]) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def random_case(rng: np.random.Generator) -> counters.FirstFitInputs:
    num_nodes = int(rng.integers(1, 6))
    sizes = rng.integers(0, 9, size=num_nodes)
    node_start = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(sizes, out=node_start[1:])
    rows = int(node_start[-1])
    # Counters: a few per node; each row consumes 0..2 of its node's counters.
    counter_node: list[int] = []
    for n in range(num_nodes):
        counter_node += [n] * int(rng.integers(0, 4))
    capacity = rng.integers(0, 6, size=len(counter_node)).astype(np.int64)
    ptr, row_counter, row_amount = [0], [], []
    for n in range(num_nodes):
        mine = [i for i, owner in enumerate(counter_node) if owner == n]
        for _ in range(int(sizes[n])):
            if mine and rng.random() < 0.6:
                for counter in rng.choice(mine, size=min(len(mine), int(rng.integers(1, 3))), replace=False):
                    row_counter.append(int(counter))
                    row_amount.append(int(rng.integers(0, 4)))
            ptr.append(len(row_counter))
    free = (rng.random(rows) < 0.8).astype(np.uint8)
    # Held consumption leaves every counter >= 0 (the caller hands overdrawn nodes to the search).
    available = np.maximum(capacity - rng.integers(0, 2, size=len(capacity)), 0).astype(np.int64)

    claims = int(rng.integers(1, 3))
    claim_first_req, req_first_slot, req_subs = [0], [], []
    slot_claim, slot_all, slot_count = [], [], []
    for c in range(claims):
        for _ in range(int(rng.integers(1, 3))):
            subs = int(rng.integers(2, 4)) if rng.random() < 0.3 else 0
            req_first_slot.append(len(slot_claim))
            req_subs.append(subs)
            for _ in range(max(subs, 1)):
                slot_claim.append(c)
                everything = rng.random() < 0.15
                slot_all.append(int(everything))
                slot_count.append(0 if everything else int(rng.integers(1, 4)))
        claim_first_req.append(len(req_subs))
    slots = len(slot_claim)
    candidates = (rng.random((slots, rows)) < 0.55).astype(np.uint8)
    candidates[(candidates == 1) & (rng.random((slots, rows)) < 0.1)] = 2
    kinds, applies, values = [], [], []
    for c in range(claims):
        for _ in range(int(rng.integers(0, 2))):
            kinds.append(int(rng.integers(0, 2)))
            applies.append([int(slot_claim[s] == c and rng.random() < 0.8) for s in range(slots)])
            values.append(rng.integers(-1, 3, size=rows))
    return counters.FirstFitInputs(
        node_start=node_start,
        claim_first_req=i64(claim_first_req),
        req_first_slot=i64(req_first_slot),
        req_subs=i64(req_subs),
        slot_claim=i64(slot_claim),
        slot_all=np.asarray(slot_all, dtype=np.uint8),
        slot_count=i64(slot_count),
        candidates=candidates,
        free=free,
        row_ptr=i64(ptr),
        row_counter=i64(row_counter),
        row_amount=i64(row_amount),
        available=available,
        constraint_kind=i64(kinds),
        constraint_applies=np.asarray(applies, dtype=np.uint8).reshape(len(kinds), slots),
        constraint_values=np.asarray(values, dtype=np.int32).reshape(len(kinds), rows),
    )


def both(
    case: counters.FirstFitInputs,
    max_work: int = 10**6,
    max_per_claim: int = 32,
    nodes: np.ndarray | None = None,
):
    nodes = all_nodes(case) if nodes is None else nodes
    fast = counters.first_fit(case, nodes=nodes, max_work=max_work, max_per_claim=max_per_claim)
    slow = counters.first_fit_reference(case, nodes=nodes, max_work=max_work, max_per_claim=max_per_claim)
    for a, b in zip(fast, slow, strict=True):
        np.testing.assert_array_equal(a, b)
    return fast


@pytest.mark.parametrize("seed", range(40))
def test_kernel_equals_twin_on_random_cases(seed: int) -> None:
    rng = np.random.default_rng(seed)
    seen = set()
    for _ in range(25):
        case = random_case(rng)
        for max_work, limit in ((10**6, 32), (int(rng.integers(1, 6)), 32), (10**6, int(rng.integers(1, 4)))):
            status, _, _ = both(case, max_work, limit)
            seen.update(status.tolist())
    assert FOUND in seen and NONE in seen  # the generator exercises both outcomes


def test_random_cases_reach_every_status() -> None:
    seen = set()
    rng = np.random.default_rng(1234)
    for _ in range(200):
        case = random_case(rng)
        seen.update(both(case, max_work=3)[0].tolist())
    assert seen == {FOUND, NONE, UNKNOWN}


def mig_node(free: list[int] | None = None, available: list[int] | None = None) -> counters.FirstFitInputs:
    """One node, one GPU of 8 memory slices: rows 0 = full GPU (8), 1-2 = 4-slice, 3-6 = 2-slice."""
    amounts = [8, 4, 4, 2, 2, 2, 2]
    rows = len(amounts)
    return counters.FirstFitInputs(
        node_start=i64([0, rows]),
        claim_first_req=i64([0, 1]),
        req_first_slot=i64([0]),
        req_subs=i64([0]),
        slot_claim=i64([0]),
        slot_all=np.zeros(1, np.uint8),
        slot_count=i64([1]),
        candidates=np.ones((1, rows), np.uint8),
        free=np.asarray(free or [1] * rows, np.uint8),
        row_ptr=np.arange(rows + 1, dtype=np.int64),
        row_counter=np.zeros(rows, np.int64),
        row_amount=i64(amounts),
        available=i64(available or [8]),
        constraint_kind=np.zeros(0, np.int64),
        constraint_applies=np.zeros((0, 1), np.uint8),
        constraint_values=np.zeros((0, rows), np.int32),
    )


def test_partitions_share_the_parent_counter() -> None:
    case = mig_node()
    case = case._replace(slot_count=i64([3]))
    status, chosen, _ = both(case)
    # The full GPU (8) leaves nothing; first fit backtracks to 4 + 2 + 2.
    assert status[0] == FOUND and chosen[0, :3].tolist() == [1, 3, 4]
    case = case._replace(slot_count=i64([4]))
    status, chosen, _ = both(case)
    assert status[0] == FOUND and chosen[0, :4].tolist() == [3, 4, 5, 6]
    case = case._replace(slot_count=i64([5]))
    assert both(case)[0][0] == NONE


def test_held_consumption_shrinks_what_is_available() -> None:
    case = mig_node(free=[1, 0, 1, 1, 1, 1, 1], available=[4])  # a held 4-slice partition
    status, chosen, _ = both(case)
    assert status[0] == FOUND and chosen[0, 0] == 2  # the full GPU no longer fits
    case = case._replace(slot_count=i64([3]))
    assert both(case)[0][0] == NONE


def test_first_available_falls_back_and_backtracks_across_requests() -> None:
    # Request 0: firstAvailable [full GPU, a 4-slice]; request 1: two 2-slice partitions.
    case = mig_node()
    case = case._replace(
        claim_first_req=i64([0, 2]),
        req_first_slot=i64([0, 2]),
        req_subs=i64([2, 0]),
        slot_claim=i64([0, 0, 0]),
        slot_all=np.zeros(3, np.uint8),
        slot_count=i64([1, 1, 2]),
        candidates=np.array([[1, 0, 0, 0, 0, 0, 0], [0, 1, 1, 0, 0, 0, 0], [0, 0, 0, 1, 1, 1, 1]], np.uint8),
        constraint_applies=np.zeros((0, 3), np.uint8),
    )
    status, chosen, slots = both(case)
    # The full GPU fits request 0 but starves request 1: upstream backtracks to the 4-slice.
    assert status[0] == FOUND
    assert chosen[0, :3].tolist() == [1, 3, 4] and slots[0, :3].tolist() == [1, 2, 2]


def test_all_mode_takes_every_selected_device_and_fails_on_a_held_one() -> None:
    case = mig_node(available=[100])
    case = case._replace(
        slot_all=np.ones(1, np.uint8),
        slot_count=i64([0]),
        candidates=np.array([[0, 1, 1, 0, 0, 0, 0]], np.uint8),
    )
    status, chosen, _ = both(case)
    assert status[0] == FOUND and chosen[0, :3].tolist() == [1, 2, -1]
    case = case._replace(free=np.array([1, 1, 0, 1, 1, 1, 1], np.uint8))
    assert both(case)[0][0] == NONE
    case = case._replace(
        free=np.ones(7, np.uint8),
        candidates=np.array([[0, 1, 2, 0, 0, 0, 0]], np.uint8),  # an untolerated taint
    )
    assert both(case)[0][0] == NONE
    case = case._replace(candidates=np.zeros((1, 7), np.uint8))  # nothing selected: All fails
    assert both(case)[0][0] == NONE


def test_constraint_failure_on_an_all_device_is_left_to_the_search() -> None:
    case = mig_node(available=[100])
    case = case._replace(
        slot_all=np.ones(1, np.uint8),
        slot_count=i64([0]),
        candidates=np.array([[0, 1, 1, 0, 0, 0, 0]], np.uint8),
        constraint_kind=i64([0]),
        constraint_applies=np.ones((1, 1), np.uint8),
        constraint_values=np.array([[0, 1, 2, 0, 0, 0, 0]], np.int32),
    )
    assert both(case)[0][0] == UNKNOWN  # upstream raises "cannot add device ... constraint"


def test_match_and_distinct_constraints() -> None:
    case = mig_node(available=[100])
    case = case._replace(
        slot_count=i64([2]),
        constraint_kind=i64([0]),
        constraint_applies=np.ones((1, 1), np.uint8),
        constraint_values=np.array([[0, 1, 2, 2, -1, 3, 3]], np.int32),
    )
    status, chosen, _ = both(case)
    assert status[0] == FOUND and chosen[0, :2].tolist() == [2, 3]
    case = case._replace(constraint_kind=i64([1]))
    status, chosen, _ = both(case)
    assert status[0] == FOUND and chosen[0, :2].tolist() == [0, 1]


def test_claim_limit_and_budget_hand_the_node_over() -> None:
    case = mig_node(available=[100])
    case = case._replace(slot_count=i64([3]))
    assert both(case, max_per_claim=2)[0][0] == UNKNOWN
    case = case._replace(
        slot_count=i64([7]),
        row_amount=i64([8, 4, 4, 2, 2, 2, 2]),
        available=i64([15]),  # no 7 fit: an exhaustive failure
    )
    assert both(case, max_work=10**6)[0][0] == NONE
    assert both(case, max_work=5)[0][0] == UNKNOWN


def test_only_the_requested_nodes_are_solved() -> None:
    rng = np.random.default_rng(7)
    case = random_case(rng)
    while len(case.node_start) < 4:
        case = random_case(rng)
    nodes = np.array([len(case.node_start) - 2, 0], np.int64)
    status, chosen, _ = both(case, nodes=nodes)
    full_status, full_chosen, _ = both(case)
    assert status.tolist() == full_status[nodes].tolist()
    np.testing.assert_array_equal(chosen, full_chosen[nodes])


def test_bad_inputs_raise_clear_errors() -> None:
    case = mig_node()
    with pytest.raises(TypeError, match="free must be a 1-d uint8"):
        counters.first_fit(case._replace(free=case.free.astype(bool)), nodes=all_nodes(case), max_work=10)
    case = case._replace(candidates=np.ones((2, 7), np.uint8))
    with pytest.raises(ValueError, match="candidates must be"):
        counters.first_fit(case, nodes=all_nodes(case), max_work=10)
    with pytest.raises(ValueError, match="candidates must be"):
        counters.first_fit_reference(case, nodes=all_nodes(case), max_work=10)


def test_range_checks_run_again_for_other_index_columns() -> None:
    """The O(rows) range checks are skipped only for the very arrays that passed them last: a new
    row_counter, node_start, or fewer counters are checked again."""
    case = mig_node()
    counters.first_fit(case, nodes=all_nodes(case), max_work=10)  # passes: these arrays are known
    counters.first_fit(case, nodes=all_nodes(case), max_work=10)
    out_of_range = case.row_counter.copy()
    out_of_range[0] = len(case.available)
    with pytest.raises(ValueError, match="row_counter entries must index available"):
        counters.first_fit(case._replace(row_counter=out_of_range), nodes=all_nodes(case), max_work=10)
    with pytest.raises(ValueError, match="row_counter entries must index available"):
        counters.first_fit(case._replace(available=case.available[:0]), nodes=all_nodes(case), max_work=10)
    rows = int(case.node_start[-1])
    decreasing = np.array([0, rows + 1, rows], np.int64)  # ends at the rows, but goes back
    with pytest.raises(ValueError, match="node_start must be non-decreasing"):
        counters.first_fit(case._replace(node_start=decreasing), nodes=np.zeros(1, np.int64), max_work=10)


def test_warm_up_compiles() -> None:
    assert counters.warm_up() >= 0
