"""The topology kernels against their plain twins and a brute-force oracle, plus semantic checks.

Scope: `kernels.topology.best_sets` / `score_sets` (numba) must equal `best_sets_reference` /
`score_sets_reference` (status and chosen rows exactly, scores to 1e-9) on hand-built, seeded random
and corner inputs, under every budget path (EXACT, NONE, BOUNDED, UNKNOWN). An independent oracle here
enumerates every valid assignment with itertools: EXACT must reach its best score with a valid set,
NONE must mean it finds none. Hand-built nodes check that the score prefers what it should (one NVLink
island, GPU and NIC on one PCIe root, binpack versus spread, filling a half-used island).
`partition_terms` must equal `partition_terms_reference` exactly on seeded random groups, and on
hand-built A100s (every MIG placement on 8 memory-slice and 7 compute-slice counters) prefer a GPU
already in use and a choice that keeps the larger profiles creatable.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

import numba
import numpy as np
import pytest

from kernels import topology

LEVEL_DISTANCE = (1.0, 2.0, 3.0, 4.0, 6.0)
WEIGHTS = (4.0, 2.0, 1.0, 1.0)
BIG_BUDGET = 10**7

# ---------------------------------------------------------------------------------------------------
# naive oracle: every valid assignment, scored straight from the definitions
# ---------------------------------------------------------------------------------------------------


def naive_distance(case: Case, n: int, i: int, j: int) -> float:
    """Pair distance from the definition (link entry of the upper triangle, else shared level, else node)."""
    lo, hi = int(case.node_start[n]), int(case.node_start[n + 1])
    off = int(case.link_offset[n])
    if off >= 0:
        a, b = sorted((i - lo, j - lo))
        d = case.link_distance[off + a * (hi - lo) + b]
        if not math.isnan(d):
            return float(d)
    shared = [lv for lv in range(4) if case.coords[i, lv] != -1 and case.coords[i, lv] == case.coords[j, lv]]
    return float(case.level_distance[shared[0] if shared else 4])


def naive_score(case: Case, n: int, rows: Sequence[int], claims: Sequence[int]) -> float:
    """The score of rows (serving claims) on node n, straight from the definitions."""
    lo, hi = int(case.node_start[n]), int(case.node_start[n + 1])
    pairs = list(itertools.combinations(range(len(rows)), 2))
    w = [1.0 if claims[a] == claims[b] else case.weights[3] for a, b in pairs]
    d = [naive_distance(case, n, rows[a], rows[b]) for a, b in pairs]
    d_min, d_max = case.level_distance[0], case.level_distance[4]
    locality = 1.0
    if sum(w) > 0:
        mean = sum(x * y for x, y in zip(w, d, strict=True)) / sum(w)
        locality = min(1.0, max(0.0, 1 - (mean - d_min) / (d_max - d_min)))
    node = np.arange(lo, hi)
    rel = node[case.relevant[lo:hi] == 1]
    touched = broken = 0
    for lv in range(4):
        for g in {int(case.coords[r, lv]) for r in rows} - {-1}:
            group = rel[case.coords[rel, lv] == g]
            size_g, free_g = len(group), int(case.free[group].sum())
            taken = sum(1 for r in rows if case.coords[r, lv] == g)
            touched += 1
            broken += free_g == size_g and taken < free_g
    fragmentation = 1 - broken / touched if touched else 1.0
    total, free_total = len(rel), int(case.free[rel].sum())
    packing = 0.5
    if total:
        packing = (total - free_total + sum(1 for r in rows if case.relevant[r])) / total
        packing = 1 - packing if case.spread else packing
    w0, w1, w2 = case.weights[:3]
    return (w0 * locality + w1 * fragmentation + w2 * packing) / (w0 + w1 + w2) if w0 + w1 + w2 else 0.0


def naive_valid(case: Case, n: int, rows: Sequence[int]) -> bool:
    """Whether rows (in slot order) is a valid set for the case's requests on node n."""
    lo, hi = int(case.node_start[n]), int(case.node_start[n + 1])
    slot_req = np.repeat(np.arange(len(case.counts)), case.counts)
    if len(rows) != len(slot_req) or len(set(rows)) != len(rows):
        return False
    if not all(lo <= r < hi and case.candidates[q, r] for r, q in zip(rows, slot_req, strict=True)):
        return False
    for c, kind in enumerate(case.constraint_kind):
        values = [
            int(case.constraint_values[c, r])
            for r, q in zip(rows, slot_req, strict=True)
            if case.constraint_members[c, q]
        ]
        if -1 in values:
            return False
        if (kind == 0 and len(set(values)) > 1) or (kind == 1 and len(set(values)) < len(values)):
            return False
    return True


def naive_assignments(case: Case, n: int) -> Iterator[list[int]]:
    """Every assignment of distinct candidate rows to the requests (slot order, valid or not)."""
    lo, hi = int(case.node_start[n]), int(case.node_start[n + 1])

    def extend(r: int, used: list[int]) -> Iterator[list[int]]:
        if r == len(case.counts):
            yield used
            return
        pool = [x for x in range(lo, hi) if case.candidates[r, x] and x not in used]
        for combo in itertools.combinations(pool, int(case.counts[r])):
            yield from extend(r + 1, used + list(combo))

    yield from extend(0, [])


def naive_best(case: Case, n: int) -> float | None:
    """The best score over every valid assignment on node n, None if there is none."""
    claims = [int(case.claim_of[r]) for r in range(len(case.counts)) for _ in range(int(case.counts[r]))]
    scores = [
        naive_score(case, n, rows, claims)
        for rows in naive_assignments(case, n)
        if naive_valid(case, n, rows)
    ]
    return max(scores) if scores else None


def naive_size(case: Case, n: int) -> int:
    """An upper bound of the oracle's enumeration on node n (to skip nodes too big to brute-force)."""
    lo, hi = int(case.node_start[n]), int(case.node_start[n + 1])
    return math.prod(
        math.comb(int(case.candidates[r, lo:hi].sum()), int(c)) for r, c in enumerate(case.counts)
    )


# ---------------------------------------------------------------------------------------------------
# builders
# ---------------------------------------------------------------------------------------------------


@dataclass
class Case:
    """One pod's kernel inputs over a small index, flat (`topology()` and `requests()` build the records)."""

    node_start: np.ndarray
    candidates: np.ndarray
    counts: np.ndarray
    claim_of: np.ndarray
    coords: np.ndarray
    free: np.ndarray
    relevant: np.ndarray
    constraint_kind: np.ndarray
    constraint_members: np.ndarray
    constraint_values: np.ndarray
    level_distance: np.ndarray
    link_offset: np.ndarray
    link_distance: np.ndarray
    weights: np.ndarray
    spread: bool
    nodes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def __post_init__(self) -> None:
        if self.nodes.size == 0:
            self.nodes = np.arange(len(self.node_start) - 1, dtype=np.int64)

    def topology(self) -> topology.TopologyInputs:
        """The case's topology record, as given (not converted: the input checks must see it)."""
        return topology.TopologyInputs(
            node_start=self.node_start,
            coords=self.coords,
            free=self.free,
            relevant=self.relevant,
            level_distance=self.level_distance,
            link_offset=self.link_offset,
            link_distance=self.link_distance,
            weights=self.weights,
            spread=self.spread,
        )

    def requests(self) -> topology.SearchRequests:
        """The case's requests record, as given."""
        return topology.SearchRequests(
            candidates=self.candidates,
            counts=self.counts,
            claim_of=self.claim_of,
            constraint_kind=self.constraint_kind,
            constraint_members=self.constraint_members,
            constraint_values=self.constraint_values,
        )

    def best(self, fn: Callable[..., tuple[np.ndarray, ...]], max_work: int) -> tuple[np.ndarray, ...]:
        return fn(self.topology(), self.requests(), nodes=self.nodes, max_work=max_work)

    def score(
        self, fn: Callable[..., tuple[np.ndarray, ...]], sets: np.ndarray, set_claim: np.ndarray
    ) -> tuple:
        return fn(self.topology(), nodes=self.nodes, sets=sets, set_claim=set_claim)


@dataclass
class NodeSpec:
    """A hand-built node: per row its coordinates and free flag; everything else has a default."""

    coords: list[tuple[int, int, int, int]]
    free: list[int]
    relevant: list[int] | None = None  # default: every row
    candidates: list[list[int]] | None = None  # per request, per row; default: the free rows
    values: list[list[int]] | None = None  # per constraint, per row; default: 0
    link: np.ndarray | None = None  # rows x rows, NaN where the levels decide


def build(
    specs: Sequence[NodeSpec],
    counts: Sequence[int],
    *,
    claim_of: Sequence[int] | None = None,
    constraints: Sequence[tuple[int, Sequence[int]]] = (),
    weights: Sequence[float] = WEIGHTS,
    spread: bool = False,
    level_distance: Sequence[float] = LEVEL_DISTANCE,
) -> Case:
    """Concatenate node specs into one index for one pod (constraints: (kind, member requests))."""
    n_req = len(counts)
    sizes = [len(s.coords) for s in specs]
    node_start = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    rows = int(node_start[-1])
    candidates = np.zeros((n_req, rows), np.uint8)
    values = np.zeros((len(constraints), rows), np.int32)
    link_offset = np.full(len(specs), -1, np.int64)
    links: list[np.ndarray] = []
    at = 0
    for n, spec in enumerate(specs):
        lo, hi = int(node_start[n]), int(node_start[n + 1])
        for r in range(n_req):
            candidates[r, lo:hi] = spec.candidates[r] if spec.candidates else spec.free
        if spec.values:
            values[:, lo:hi] = spec.values
        if spec.link is not None:
            link_offset[n] = at
            links.append(np.asarray(spec.link, np.float64).ravel())
            at += spec.link.size
    members = np.zeros((len(constraints), n_req), np.uint8)
    for c, (_, member) in enumerate(constraints):
        members[c, list(member)] = 1
    return Case(
        node_start=node_start,
        candidates=candidates,
        counts=np.asarray(counts, np.int64),
        claim_of=np.asarray(claim_of if claim_of is not None else [0] * n_req, np.int64),
        coords=np.asarray([c for s in specs for c in s.coords], np.int32).reshape(rows, 4),
        free=np.asarray([f for s in specs for f in s.free], np.uint8),
        relevant=np.asarray([x for s in specs for x in (s.relevant or [1] * len(s.coords))], np.uint8),
        constraint_kind=np.asarray([k for k, _ in constraints], np.int64),
        constraint_members=members,
        constraint_values=values,
        level_distance=np.asarray(level_distance, np.float64),
        link_offset=link_offset,
        link_distance=np.concatenate(links) if links else np.zeros(0),
        weights=np.asarray(weights, np.float64),
        spread=spread,
    )


def random_case(rng: np.random.Generator, n_nodes: int, max_rows: int = 16, max_count: int = 4) -> Case:
    """A seeded random pod over random small nodes (coords with unknowns, some link matrices, 0-2
    constraints over small value ranges so that they bite)."""
    n_req = int(rng.integers(1, 4))
    counts = rng.integers(1, max_count + 1, n_req)
    # most nodes big enough for the pod, some not
    k_total = int(counts.sum())
    sizes = rng.integers(max(1, k_total - 1), max(max_rows, k_total + 3) + 1, n_nodes)
    rows = int(sizes.sum())
    coords = rng.integers(0, 3, (rows, 4)).astype(np.int32)
    coords[rng.random((rows, 4)) < 0.25] = -1
    if rng.random() < 0.2:
        coords[:] = -1
    free = (rng.random(rows) < 0.85).astype(np.uint8)
    relevant = (rng.random(rows) < 0.85).astype(np.uint8)
    candidates = ((rng.random((n_req, rows)) < 0.8) & (free == 1)).astype(np.uint8)
    n_con = int(rng.integers(0, 3))
    kinds = rng.integers(0, 2, n_con).astype(np.int64)
    members = (rng.random((n_con, n_req)) < 0.7).astype(np.uint8)
    # few values for matchAttribute, more for distinctAttribute, so that both bite but rarely forbid
    values = np.where(
        kinds[:, None] == 0, rng.integers(0, 2, (n_con, rows)), rng.integers(0, 9, (n_con, rows))
    )
    values[rng.random((n_con, rows)) < 0.1] = -1
    values = values.astype(np.int32)
    link_offset = np.full(n_nodes, -1, np.int64)
    links = []
    at = 0
    for n, size in enumerate(sizes):
        if rng.random() < 0.3:
            m = rng.uniform(1.0, 6.0, (size, size))
            m[rng.random((size, size)) < 0.3] = np.nan
            links.append(np.triu(m) + np.triu(m, 1).T)
            link_offset[n] = at
            at += size * size
    level_distance = np.cumsum(rng.uniform(0.5, 2.0, 5)) if rng.random() < 0.5 else np.array(LEVEL_DISTANCE)
    weights = rng.choice([0.0, 0.5, 1.0, 3.0], 4)
    return Case(
        node_start=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        candidates=candidates,
        counts=counts.astype(np.int64),
        claim_of=rng.integers(0, 2, n_req).astype(np.int64),
        coords=coords,
        free=free,
        relevant=relevant,
        constraint_kind=kinds,
        constraint_members=members,
        constraint_values=values,
        level_distance=level_distance,
        link_offset=link_offset,
        link_distance=np.concatenate([x.ravel() for x in links]) if links else np.zeros(0),
        weights=weights,
        spread=bool(rng.random() < 0.5),
    )


def assert_twins(case: Case, max_work: int) -> tuple[np.ndarray, ...]:
    """best_sets equals best_sets_reference on the case; returns the kernel's result."""
    status, score, parts, chosen = case.best(topology.best_sets, max_work)
    ref = case.best(topology.best_sets_reference, max_work)
    np.testing.assert_array_equal(status, ref[0])
    np.testing.assert_array_equal(chosen, ref[3])
    np.testing.assert_allclose(score, ref[1], rtol=0, atol=1e-9)
    np.testing.assert_allclose(parts, ref[2], rtol=0, atol=1e-9)
    return status, score, parts, chosen


def gpus(n: int, nvlink: Sequence[int], pcie: Sequence[int] | None = None) -> list[tuple[int, int, int, int]]:
    """Coordinates of n GPUs: the given NVLink domains, PCIe roots (default: pairs), NUMA = NVLink."""
    pcie = pcie if pcie is not None else [i // 2 for i in range(n)]
    return [(nvlink[i], pcie[i], nvlink[i], 0) for i in range(n)]


# ---------------------------------------------------------------------------------------------------
# kernel == twin == oracle
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(12))
def test_random_kernel_matches_twin_under_every_budget(seed: int) -> None:
    """Same status, rows and scores on random pods, from no budget (greedy only) to exact search."""
    rng = np.random.default_rng(seed)
    case = random_case(rng, n_nodes=10, max_rows=12)
    statuses = set()
    for max_work in (0, 1, 4, 30, 300):
        statuses |= set(assert_twins(case, max_work)[0].tolist())
    assert statuses, "no nodes"


def test_random_budget_paths_all_reached() -> None:
    """Across seeded random pods the four statuses all occur, so every path is compared above."""
    seen: set[int] = set()
    for seed in range(12):
        case = random_case(np.random.default_rng(seed), n_nodes=10, max_rows=12)
        for max_work in (0, 1, 4, 30, 300):
            seen |= set(case.best(topology.best_sets, max_work)[0].tolist())
    assert seen == {
        topology.STATUS_NONE,
        topology.STATUS_EXACT,
        topology.STATUS_BOUNDED,
        topology.STATUS_UNKNOWN,
    }


@pytest.mark.parametrize("seed", range(100, 112))
def test_random_exact_matches_oracle(seed: int) -> None:
    """EXACT reaches the oracle's best score with a valid set; NONE iff the oracle finds no valid set."""
    rng = np.random.default_rng(seed)
    case = random_case(rng, n_nodes=16, max_rows=10, max_count=3)
    status, score, _, chosen = assert_twins(case, BIG_BUDGET)
    checked = 0
    for m, n in enumerate(case.nodes):
        if naive_size(case, n) > 3000:
            continue
        checked += 1
        best = naive_best(case, n)
        assert status[m] in (topology.STATUS_EXACT, topology.STATUS_NONE)
        if best is None:
            assert status[m] == topology.STATUS_NONE
            assert (chosen[m] == -1).all()
        else:
            assert status[m] == topology.STATUS_EXACT
            assert naive_valid(case, n, chosen[m].tolist())
            assert score[m] == pytest.approx(best, abs=1e-9)
    assert checked >= 4


@pytest.mark.parametrize("seed", range(200, 206))
def test_bounded_sets_are_valid_and_not_better_than_oracle(seed: int) -> None:
    """Under a budget of 2, BOUNDED sets are valid and score at most the oracle's best, and the nodes
    that still finish (EXACT, NONE) agree with the oracle."""
    case = random_case(np.random.default_rng(seed), n_nodes=16, max_rows=10, max_count=3)
    status, score, _, chosen = assert_twins(case, 2)
    for m, n in enumerate(case.nodes):
        if naive_size(case, n) > 3000:
            continue
        best = naive_best(case, n)
        if status[m] == topology.STATUS_BOUNDED:
            assert naive_valid(case, n, chosen[m].tolist())
            assert best is not None and score[m] <= best + 1e-9
        if status[m] == topology.STATUS_EXACT:
            assert best is not None and score[m] == pytest.approx(best, abs=1e-9)
        if status[m] == topology.STATUS_NONE:
            assert best is None


@pytest.mark.parametrize("seed", range(300, 306))
def test_random_score_sets_matches_twin_and_best_sets(seed: int) -> None:
    """score_sets equals its twin, and re-scores best_sets' chosen sets to the same score."""
    rng = np.random.default_rng(seed)
    case = random_case(rng, n_nodes=12, max_rows=12, max_count=3)
    _, score, parts, chosen = case.best(topology.best_sets, 500)
    set_claim = np.repeat(case.claim_of, case.counts)
    got = case.score(topology.score_sets, chosen, set_claim)
    ref = case.score(topology.score_sets_reference, chosen, set_claim)
    np.testing.assert_allclose(got[0], ref[0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(got[1], ref[1], rtol=0, atol=1e-12)
    np.testing.assert_allclose(got[0], score, rtol=0, atol=1e-9)
    np.testing.assert_allclose(got[1], parts, rtol=0, atol=1e-9)
    # random partial sets (holes of -1) of rows of each node, also checked against the oracle
    sets = np.full(chosen.shape, -1, np.int64)
    for m, n in enumerate(case.nodes):
        lo, hi = int(case.node_start[n]), int(case.node_start[n + 1])
        k = int(rng.integers(0, min(hi - lo, sets.shape[1]) + 1))
        sets[m, rng.choice(sets.shape[1], k, replace=False)] = rng.choice(np.arange(lo, hi), k, replace=False)
    got = case.score(topology.score_sets, sets, set_claim)
    ref = case.score(topology.score_sets_reference, sets, set_claim)
    np.testing.assert_allclose(got[0], ref[0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(got[1], ref[1], rtol=0, atol=1e-12)
    for m, n in enumerate(case.nodes):
        keep = sets[m] >= 0
        want = naive_score(case, n, sets[m][keep].tolist(), set_claim[keep].tolist()) if keep.any() else 0.0
        assert got[0][m] == pytest.approx(want, abs=1e-9)


def test_any_subset_and_order_of_nodes() -> None:
    """Solving a permuted subset of nodes gives those nodes' rows of the full solve."""
    case = random_case(np.random.default_rng(11), n_nodes=40, max_rows=12)
    full = case.best(topology.best_sets, 300)
    pick = np.array([37, 3, 3, 20, 0], np.int64)
    part = replace(case, nodes=pick).best(topology.best_sets, 300)
    for a, b in zip(full, part, strict=True):
        np.testing.assert_array_equal(a[pick], b)


def test_results_do_not_depend_on_thread_count() -> None:
    """One thread and numba's default give identical arrays (blocks write disjoint output rows)."""
    case = random_case(np.random.default_rng(7), n_nodes=150, max_rows=12)
    default = numba.get_num_threads()
    try:
        topology.set_threads(1)
        one = case.best(topology.best_sets, 200)
    finally:
        numba.set_num_threads(default)
    many = case.best(topology.best_sets, 200)
    for a, b in zip(one, many, strict=True):
        np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------------------------------------
# corner inputs
# ---------------------------------------------------------------------------------------------------


def test_no_candidates_and_too_few_candidates_are_none() -> None:
    node = NodeSpec(coords=gpus(4, [0, 0, 1, 1]), free=[1, 1, 1, 1])
    empty = replace(node, candidates=[[0, 0, 0, 0]])
    few = replace(node, candidates=[[1, 1, 0, 0]])
    case = build([empty, few, node], counts=[3])
    status, score, parts, chosen = assert_twins(case, BIG_BUDGET)
    assert status.tolist() == [topology.STATUS_NONE, topology.STATUS_NONE, topology.STATUS_EXACT]
    assert (chosen[:2] == -1).all() and (score[:2] == 0).all() and (parts[:2] == 0).all()
    # the count check needs no search, so even a zero budget proves NONE
    assert assert_twins(case, 0)[0].tolist()[:2] == [topology.STATUS_NONE, topology.STATUS_NONE]


def test_two_requests_cannot_share_a_row() -> None:
    """Two 1-device requests whose only candidate is the same row: NONE."""
    node = NodeSpec(coords=gpus(2, [0, 0]), free=[1, 1], candidates=[[1, 0], [1, 0]])
    assert assert_twins(build([node], counts=[1, 1]), BIG_BUDGET)[0].tolist() == [topology.STATUS_NONE]


def test_unknown_coords_everywhere_match_oracle() -> None:
    """All coordinates -1: every pair is node-distant, fragmentation 1, packing decides."""
    node = NodeSpec(coords=[(-1, -1, -1, -1)] * 5, free=[1, 0, 1, 1, 1])
    case = build([node], counts=[2])
    status, score, parts, chosen = assert_twins(case, BIG_BUDGET)
    assert status[0] == topology.STATUS_EXACT
    assert chosen[0].tolist() == [0, 2]  # all sets tie; the first in enumeration order wins
    assert parts[0].tolist() == [0.0, 1.0, pytest.approx(3 / 5)]
    assert score[0] == pytest.approx(naive_best(case, 0), abs=1e-12)


def test_zero_count_request_gives_the_empty_set() -> None:
    node = NodeSpec(coords=gpus(3, [0, 0, 0]), free=[1, 0, 0])
    status, _, parts, chosen = assert_twins(build([node], counts=[0]), BIG_BUDGET)
    assert status.tolist() == [topology.STATUS_EXACT] and chosen.shape == (1, 0)
    assert parts[0].tolist() == [1.0, 1.0, pytest.approx(2 / 3)]  # no pairs, nothing touched, 2 of 3 used


def test_budget_exceeded_falls_back_to_greedy() -> None:
    """max_work=1 stops the search at its second row; greedy still finds the best (tight) pair."""
    node = NodeSpec(coords=gpus(4, [0, 1, 1, 2], pcie=[0, 1, 2, 3]), free=[1, 1, 1, 1])
    case = build([node], counts=[2])
    exact = assert_twins(case, BIG_BUDGET)
    bounded = assert_twins(case, 1)
    assert exact[0][0] == topology.STATUS_EXACT and bounded[0][0] == topology.STATUS_BOUNDED
    assert bounded[3][0].tolist() == exact[3][0].tolist() == [1, 2]


def test_budget_exceeded_without_any_valid_set_is_unknown() -> None:
    """matchAttribute over values that never repeat: NONE with a budget, UNKNOWN without one."""
    node = NodeSpec(coords=gpus(4, [0, 0, 1, 1]), free=[1, 1, 1, 1], values=[[0, 1, 2, 3]])
    case = build([node], counts=[2], constraints=[(topology.MATCH_ATTRIBUTE, [0])])
    assert assert_twins(case, BIG_BUDGET)[0].tolist() == [topology.STATUS_NONE]
    assert assert_twins(case, 1)[0].tolist() == [topology.STATUS_UNKNOWN]
    assert assert_twins(case, 0)[0].tolist() == [topology.STATUS_UNKNOWN]


def test_constraints_match_and_distinct() -> None:
    """matchAttribute across two requests and distinctAttribute within one; -1 rows are excluded."""
    node = NodeSpec(
        coords=gpus(6, [0, 0, 0, 1, 1, 1]),
        free=[1] * 6,
        candidates=[[1, 1, 1, 1, 1, 0], [0, 0, 0, 0, 0, 1]],  # request 1 (a NIC) only row 5
        values=[[0, 0, 1, 1, 1, 1], [5, 5, 6, 7, -1, 8]],
    )
    case = build(
        [node],
        counts=[2, 1],
        claim_of=[0, 1],
        constraints=[(topology.MATCH_ATTRIBUTE, [0, 1]), (topology.DISTINCT_ATTRIBUTE, [0])],
    )
    status, _, _, chosen = assert_twins(case, BIG_BUDGET)
    # value 1 rows are 2..5; row 4 lacks the distinct attribute; rows 2, 3 have distinct values
    assert status[0] == topology.STATUS_EXACT and chosen[0].tolist() == [2, 3, 5]
    assert naive_valid(case, 0, chosen[0].tolist())


def test_link_matrix_overrides_levels() -> None:
    """The link matrix decides the pairs it names; NaN entries fall back to the levels."""
    coords = gpus(4, [0, 0, 1, 1], pcie=[0, 0, 1, 1])
    plain = NodeSpec(coords=coords, free=[1, 1, 1, 1], candidates=[[1, 0, 0, 0], [0, 1, 0, 1]])
    link = np.full((4, 4), np.nan)
    link[0, 1] = link[1, 0] = 6.0  # the same-domain pair is slow on this node
    link[0, 3] = link[3, 0] = 1.0  # and the cross-domain pair fast
    case = build([plain, replace(plain, link=link)], counts=[1, 1], weights=(1.0, 0.0, 0.0, 1.0))
    _, _, parts, chosen = assert_twins(case, BIG_BUDGET)
    assert chosen[0].tolist() == [0, 1] and chosen[1].tolist() == [4, 7]
    assert parts[:, 0].tolist() == [1.0, 1.0]


def test_input_checks() -> None:
    case = build([NodeSpec(coords=gpus(2, [0, 0]), free=[1, 1])], counts=[1])
    with pytest.raises(TypeError, match="coords must have dtype int32"):
        replace(case, coords=case.coords.astype(np.int64)).best(topology.best_sets, 10)
    with pytest.raises(ValueError, match="at most 64"):
        replace(case, counts=np.array([65], np.int64)).best(topology.best_sets, 10)
    with pytest.raises(ValueError, match="candidates must have shape"):
        replace(case, candidates=np.ones((2, 2), np.uint8)).best(topology.best_sets, 10)
    with pytest.raises(ValueError, match="a row of node"):
        case.score(topology.score_sets, np.array([[5]], np.int64), np.zeros(1, np.int64))
    with pytest.raises(ValueError, match="C-contiguous"):
        replace(case, coords=np.asfortranarray(np.zeros((2, 4), np.int32))).best(topology.best_sets, 10)


def test_score_sets_all_missing_is_zero() -> None:
    case = build([NodeSpec(coords=gpus(2, [0, 0]), free=[1, 1])] * 2, counts=[2])
    sets = np.array([[-1, -1], [0 + 2, 1 + 2]], np.int64)
    score, parts = case.score(topology.score_sets, sets, np.zeros(2, np.int64))
    assert score[0] == 0.0 and parts[0].tolist() == [0.0, 0.0, 0.0]
    assert score[1] > 0.0


# ---------------------------------------------------------------------------------------------------
# semantics of the score
# ---------------------------------------------------------------------------------------------------


def test_four_gpus_in_one_nvlink_domain_beat_two_plus_two() -> None:
    island = NodeSpec(coords=gpus(8, [0] * 4 + [1] * 4), free=[1, 1, 1, 1, 0, 0, 0, 0])
    split = NodeSpec(coords=gpus(8, [0] * 4 + [1] * 4), free=[0, 0, 1, 1, 1, 1, 0, 0])
    status, score, parts, chosen = assert_twins(build([island, split], counts=[4]), BIG_BUDGET)
    assert status.tolist() == [topology.STATUS_EXACT] * 2
    assert chosen[0].tolist() == [0, 1, 2, 3] and chosen[1].tolist() == [10, 11, 12, 13]
    assert parts[0, 0] > parts[1, 0] and score[0] > score[1]


@pytest.mark.parametrize("claim_of", [[0, 1], [0, 0]], ids=["two-claims", "one-claim"])
def test_gpu_and_nic_on_one_pcie_root_beat_different_numa(claim_of: list[int]) -> None:
    # rows: GPU0, NIC0 (same PCIe root and NUMA as GPU0), NIC1 (other root, other NUMA node)
    coords = [(0, 0, 0, 0), (-1, 0, 0, 0), (-1, 1, 1, 0)]
    both = NodeSpec(coords=coords, free=[1, 1, 1], candidates=[[1, 0, 0], [0, 1, 1]])
    far = NodeSpec(coords=coords, free=[1, 1, 1], candidates=[[1, 0, 0], [0, 0, 1]])
    case = build([both, far], counts=[1, 1], claim_of=claim_of)
    _, score, parts, chosen = assert_twins(case, BIG_BUDGET)
    assert chosen[0].tolist() == [0, 1]  # the NIC on the GPU's root
    assert chosen[1].tolist() == [3, 5]
    assert parts[0, 0] > parts[1, 0] and score[0] > score[1]


def test_binpack_prefers_the_fuller_node_and_spread_the_emptier() -> None:
    unknown = [(-1, -1, -1, -1)] * 8
    full = NodeSpec(coords=unknown, free=[0] * 7 + [1])
    empty = NodeSpec(coords=unknown, free=[1] * 8)
    _, binpack, _, _ = assert_twins(build([full, empty], counts=[1]), BIG_BUDGET)
    _, spread, _, _ = assert_twins(build([full, empty], counts=[1], spread=True), BIG_BUDGET)
    assert binpack[0] > binpack[1]
    assert spread[0] < spread[1]


def test_two_gpus_fill_the_half_used_island_not_the_free_one() -> None:
    node = NodeSpec(coords=gpus(8, [0] * 4 + [1] * 4), free=[1, 1, 1, 1, 0, 0, 1, 1])
    case = build([node], counts=[2])
    status, _, parts, chosen = assert_twins(case, BIG_BUDGET)
    assert status[0] == topology.STATUS_EXACT
    assert chosen[0].tolist() == [6, 7]
    assert parts[0, 1] == 1.0  # nothing wholly free was broken
    greedy = assert_twins(case, 0)  # the greedy pass alone reaches the same choice
    assert greedy[0][0] == topology.STATUS_BOUNDED and greedy[3][0].tolist() == [6, 7]


def test_warm_up_and_threads() -> None:
    assert topology.warm_up() >= 0.0
    topology.set_threads(0)  # leaves numba's default
    with pytest.raises(ValueError):
        topology.set_threads(-1)


# ---------------------------------------------------------------------------------------------------
# partition terms (parent-GPU packing and MIG profile headroom)
# ---------------------------------------------------------------------------------------------------

#: A100 MIG placements: (profile, first memory slice, memory slices, compute slices of 7).
A100_PLACEMENTS = (
    *(("1g", i, 1, 1) for i in range(7)),
    *(("2g", i, 2, 2) for i in (0, 2, 4)),
    ("3g", 0, 4, 3),
    ("3g", 4, 4, 3),
    ("4g", 0, 4, 4),
    ("7g", 0, 8, 7),
)


def a100_costs() -> np.ndarray:
    """Counter shares of every A100 placement: 8 memory-slice counters of 1, then 7 compute slices."""
    cost = np.zeros((len(A100_PLACEMENTS), 9))
    for row, (_, start, memory, compute) in enumerate(A100_PLACEMENTS):
        cost[row, start : start + memory] = 1.0
        cost[row, 8] = compute / 7
    return cost


def partition_case(used: list[list[int]]) -> tuple[np.ndarray, ...]:
    """One node of len(used) A100s; used[g] lists placements (A100_PLACEMENTS positions) allocated."""
    per = len(A100_PLACEMENTS)
    cost = np.concatenate([a100_costs()] * len(used))
    group = np.repeat(np.arange(len(used), dtype=np.int64), per)
    free = np.ones(len(group), np.uint8)
    group_free = np.ones((len(used), 9))
    group_used = np.zeros(len(used), np.int64)
    for g, rows in enumerate(used):
        for r in rows:
            free[g * per + r] = 0
            group_free[g] -= cost[g * per + r]
            group_used[g] += 1
    node_start = np.array([0, len(group)], np.int64)
    return node_start, group, cost, np.full(len(used), 9, np.int64), group_free, group_used, free


def terms(case: tuple[np.ndarray, ...], sets: list[list[int]], twin: bool = False) -> np.ndarray:
    node_start, group, cost, counters, group_free, group_used, free = case
    fn = topology.partition_terms_reference if twin else topology.partition_terms
    nodes = np.zeros(len(sets), np.int64)
    inputs = topology.PartitionInputs(node_start, group, cost, counters, group_free, group_used, free)
    return fn(inputs, nodes=nodes, sets=np.array(sets, np.int64))


def profile(name: str, start: int = 0) -> int:
    """The A100_PLACEMENTS position of a profile at a first memory slice."""
    return next(i for i, p in enumerate(A100_PLACEMENTS) if p[0] == name and p[1] == start)


def test_partly_used_parent_gpu_beats_a_fresh_one() -> None:
    """A 1g slice on the GPU that already runs a 1g scores 1 on packing; on a fresh GPU 0."""
    per = len(A100_PLACEMENTS)
    case = partition_case([[profile("1g", 0)], []])
    out = terms(case, [[profile("1g", 1)], [per + profile("1g", 0)]])
    assert out[:, 0].tolist() == [1.0, 0.0]
    assert out[0, 1] > out[1, 1]  # and it leaves the fresh GPU's 7g creatable
    np.testing.assert_array_equal(out, terms(case, [[profile("1g", 1)], [per + profile("1g", 0)]], True))


def test_choice_that_keeps_the_7g_creatable_beats_one_that_does_not() -> None:
    """Two free GPUs with a 3g each: both 1g choices open nothing, but only one keeps a whole GPU."""
    per = len(A100_PLACEMENTS)
    # GPU 0 runs a 4g (slices 0-3); GPU 1 is free: a 3g on GPU 0's free half fills it up (headroom 1),
    # a 3g on GPU 1 leaves it able to make a 4g at most (no 7g any more).
    case = partition_case([[profile("4g")], []])
    out = terms(case, [[profile("3g", 4)], [per + profile("3g", 4)]])
    assert out[0].tolist() == [1.0, 1.0]
    assert out[1, 0] == 0.0
    size_4g = (4 + 4 / 7) / 9  # mean share over the 9 counters
    assert out[1, 1] == pytest.approx(size_4g / 1.0)
    # the placement within a GPU matters too: a 1g at slice 6 keeps the 4g (slices 0-3) and a 2g at
    # 4; a 1g at slice 0 breaks the only 4g placement, leaving the 3g at 4 as the largest
    case = partition_case([[], []])
    out = terms(case, [[profile("1g", 6)], [profile("1g", 0)]])
    assert out[0, 1] > out[1, 1]


def test_sets_without_partitions_are_nan_and_whole_gpus_cost_nothing() -> None:
    case = partition_case([[], []])
    node_start, group, *rest = case
    plain = (node_start, np.where(np.arange(len(group)) < 5, -1, group), *rest)
    out = terms(plain, [[0, 1], [-1, -1]])
    assert np.isnan(out).all()
    # the whole GPU as one 7g opens no parent and loses nothing (as taking a whole NVLink island)
    out = terms(case, [[profile("7g"), -1]])
    assert out[0].tolist() == [1.0, 1.0]
    # two 1g slices of one fresh GPU: one opened parent for two partitions
    out = terms(case, [[profile("1g", 0), profile("1g", 1)]])
    assert out[0, 0] == 0.5


def random_partition_case(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
    """Nodes with random groups (0..4 counters, some without), random costs, held rows and sets."""
    sizes = rng.integers(0, 10, size=int(rng.integers(1, 8)))
    node_start = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    rows = int(node_start[-1])
    width = 4
    counters: list[int] = []
    group = np.full(rows, -1, np.int64)
    for n, size in enumerate(sizes):
        mine = [len(counters) + i for i in range(int(rng.integers(0, 3)))]
        counters.extend(int(rng.integers(0, width + 1)) for _ in mine)
        for r in range(int(node_start[n]), int(node_start[n]) + int(size)):
            if mine and rng.random() < 0.8:
                group[r] = rng.choice(mine)
    counters_arr = np.array(counters, np.int64)
    cost = np.zeros((rows, width))
    for r in np.flatnonzero(group >= 0):
        k = counters_arr[group[r]]
        cost[r, :k] = rng.choice([0.0, 0.125, 0.25, 0.5, 1.0], size=k)
    free = (rng.random(rows) < 0.7).astype(np.uint8)
    group_free = np.ones((len(counters), width))
    group_used = np.zeros(len(counters), np.int64)
    for r in np.flatnonzero((free == 0) & (group >= 0)):
        group_free[group[r]] -= cost[r]
        group_used[group[r]] += 1
    nodes = rng.integers(0, len(sizes), size=int(rng.integers(1, 12))).astype(np.int64)
    k = 4
    sets = np.full((len(nodes), k), -1, np.int64)
    for m, n in enumerate(nodes):
        lo, hi = int(node_start[n]), int(node_start[n + 1])
        take = int(rng.integers(0, min(hi - lo, k) + 1))
        sets[m, rng.choice(k, take, replace=False)] = rng.choice(np.arange(lo, hi), take, replace=False)
    return nodes, sets, (node_start, group, cost, counters_arr, group_free, group_used, free)


@pytest.mark.parametrize("seed", range(500, 530))
def test_random_partition_terms_match_twin(seed: int) -> None:
    nodes, sets, (node_start, *arrays) = random_partition_case(np.random.default_rng(seed))
    inputs = topology.PartitionInputs(node_start, *arrays)
    got = topology.partition_terms(inputs, nodes=nodes, sets=sets)
    want = topology.partition_terms_reference(inputs, nodes=nodes, sets=sets)
    np.testing.assert_array_equal(got, want)
    assert np.all(np.isnan(got) | ((got >= 0.0) & (got <= 1.0)))


def test_partition_input_checks() -> None:
    case = partition_case([[]])
    node_start, group, cost, counters, group_free, group_used, free = case
    inputs = topology.PartitionInputs(node_start, group, cost, counters, group_free, group_used, free)
    sets = np.array([[0]], np.int64)
    nodes = np.zeros(1, np.int64)
    with pytest.raises(TypeError, match="row_group must have dtype int64"):
        topology.partition_terms(inputs._replace(row_group=group.astype(np.int32)), nodes=nodes, sets=sets)
    with pytest.raises(ValueError, match="row of node"):
        topology.partition_terms(inputs, nodes=nodes, sets=np.array([[99]], np.int64))
    with pytest.raises(ValueError, match="group_free must have shape"):
        topology.partition_terms(inputs._replace(group_free=group_free[:, :3]), nodes=nodes, sets=sets)
    with pytest.raises(ValueError, match="finite"):
        topology.partition_terms(inputs._replace(group_free=group_free * np.inf), nodes=nodes, sets=sets)
    with pytest.raises(ValueError, match="group_counters"):
        topology.partition_terms(inputs._replace(group_counters=counters + 5), nodes=nodes, sets=sets)
    # The O(rows) checks are skipped only for the very arrays that passed them last.
    topology.partition_terms(inputs, nodes=nodes, sets=sets)
    topology.partition_terms(inputs, nodes=nodes, sets=sets)
    with pytest.raises(ValueError, match="finite"):
        topology.partition_terms(inputs._replace(row_cost=cost * np.nan), nodes=nodes, sets=sets)
    with pytest.raises(ValueError, match="row_group entries must be groups"):
        topology.partition_terms(inputs._replace(row_group=group + len(counters)), nodes=nodes, sets=sets)
