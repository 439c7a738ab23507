"""The vectorised Hall check alone (core/feasibility.py): which pods it takes, and its answer per node."""

from __future__ import annotations

import numpy as np

from extender.allocator.requests import ClaimSpec, parse_claim
from extender.core import feasibility
from tests.allocator import builders as b
from tests.core import small_cluster as c

NUMA = [{"requests": ["r"], "matchAttribute": f"{c.DRIVER}/numa"}]


def _specs(*claims: c.Obj) -> list[ClaimSpec]:
    return [parse_claim(claim) for claim in claims]


def test_simple_pods_are_exact_counts_without_constraints() -> None:
    assert feasibility.simple_requests(_specs(c.claim("one", 1), c.claim("two", 2))) is not None
    assert feasibility.simple_requests(_specs(c.claim("near", 2, constraints=NUMA))) is None
    all_mode = {**b.claim("all", [b.request("r", c.GPU, allocationMode="All")]), "kind": "ResourceClaim"}
    assert feasibility.simple_requests(_specs(all_mode)) is None
    many = {**b.claim("many", [b.request(f"r{i}", c.GPU) for i in range(9)]), "kind": "ResourceClaim"}
    assert feasibility.simple_requests(_specs(many)) is None  # 2^9 subsets: left to the search


def test_halls_condition_counts_devices_shared_by_requests_once() -> None:
    objects = [
        c.node("a"), *c.gpus("a", 3),
        c.node("b"), *c.gpus("b", 2),
        c.node("c"), *c.gpus("c", 3), c.held("h", "c", ["gpu-0", "gpu-1"]),
        c.gpu_class(),
    ]  # fmt: skip
    placement = c.placement(objects)
    index = placement.index()
    _, free = placement.allocated_state()
    requests = feasibility.simple_requests(_specs(c.claim("two", 2), c.claim("one", 1)))
    assert requests is not None
    positions = np.array([index.node_pos[n] for n in ("a", "b", "c")], dtype=np.int64)
    result = feasibility.check(index, requests, free, positions)
    assert result.fits.tolist() == [True, False, False]  # b: 2 devices for 2 + 1; c: 1 free
    assert result.fits_if_free.tolist() == [True, False, True]
    assert result.needs_search.tolist() == [False, False, False]
    assert result.short_request == [-1, -1, 0]  # b: each request alone fits, together they do not


def test_what_a_shape_keeps_gives_the_same_answers_whatever_is_free() -> None:
    """With the shape's data kept (`check(..., shape)`), a later pod of the shape, with other
    devices in use, gets what a check from nothing gives."""
    from extender.core.shapes import ShapeData

    objects = [c.node("a"), *c.gpus("a", 3), c.node("b"), *c.gpus("b", 2), c.gpu_class()]
    placement = c.placement(objects)
    index = placement.index()
    specs = _specs(c.claim("two", 2), c.claim("one", 1))
    requests = feasibility.simple_requests(specs)
    assert requests is not None
    positions = np.array([index.node_pos["a"], index.node_pos["b"]], dtype=np.int64)
    shape = ShapeData()
    frees = [np.ones(index.num_rows, dtype=bool), np.zeros(index.num_rows, dtype=bool)]
    frees.append(np.arange(index.num_rows) % 2 == 0)
    answers = []
    for free in frees:
        kept = feasibility.check(index, requests, free, positions, shape)
        fresh = feasibility.check(index, requests, free, positions)
        assert kept.fits.tolist() == fresh.fits.tolist() and kept.short_request == fresh.short_request
        assert kept.fits_if_free.tolist() == fresh.fits_if_free.tolist()
        answers.append(kept.fits.tolist())
    assert answers[0] != answers[1]  # the free masks matter: the kept data is not the answer
    assert "feasibility" in shape.items
