"""Each deciding tier alone (extender.core.tiers): what it decides, with which words, and what it
hands on; and the order Placement runs them in."""

from __future__ import annotations

from extender.core.evaluation import PodEvaluation
from extender.core.placement import Placement
from extender.core.reasons import FAILED, PASSED, UNRESOLVABLE
from extender.core.tiers import FirstFitTier, KernelTier, SearchTier, VectorisedTier
from tests.allocator import builders
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


def _evaluation(claim: c.Obj) -> tuple[Placement, PodEvaluation]:
    placement = c.placement(_cluster(claim))
    evaluation = placement.new_evaluation(c.pod([claim]))
    assert not evaluation.problem
    return placement, evaluation


def _statuses(evaluation: PodEvaluation) -> dict[str, str]:
    return {name: verdict.status for name, verdict in evaluation.verdicts.items()}


def test_placement_runs_the_tiers_cheapest_first() -> None:
    placement = c.placement(_cluster())
    assert [type(t) for t in placement.tiers] == [VectorisedTier, KernelTier, FirstFitTier, SearchTier]


def test_the_vectorised_tier_decides_simple_pods_with_the_search_words() -> None:
    placement, evaluation = _evaluation(c.claim("two", 2))
    left = VectorisedTier().decide(evaluation, placement.view.snapshot(), ["a", "b", "c"], INF)
    assert left == []
    assert _statuses(evaluation) == {"a": PASSED, "b": UNRESOLVABLE, "c": FAILED}
    what = "claim default/two, request r: 2 device(s) of class gpu"
    assert evaluation.verdicts["b"].reason == f"cannot allocate all claims: {what} do not exist on the node"
    assert (
        evaluation.verdicts["c"].reason
        == f"cannot allocate all claims: {what} are not free on the node (in use)"
    )


def test_the_vectorised_tier_hands_on_pods_that_are_not_simple() -> None:
    placement, evaluation = _evaluation(c.claim("near", 2, constraints=NUMA))
    assert VectorisedTier().decide(evaluation, placement.view.snapshot(), ["a", "b"], INF) == ["a", "b"]
    assert evaluation.verdicts == {}


def test_the_kernel_tier_decides_constrained_pods_and_keeps_their_scores() -> None:
    placement, evaluation = _evaluation(c.claim("near", 2, constraints=NUMA))
    left = KernelTier(placement.ranker).decide(evaluation, placement.view.snapshot(), ["a", "b", "c"], INF)
    assert left == []
    assert _statuses(evaluation) == {"a": PASSED, "b": UNRESOLVABLE, "c": UNRESOLVABLE}
    assert "a" in evaluation.scores  # the set found in filter is prioritize's
    assert evaluation.verdicts["b"].reason == (
        "cannot allocate all claims: claim default/near, request r: 2 device(s) of class gpu do not exist "
        "on the node"
    )
    assert evaluation.verdicts["c"].reason == (
        "cannot allocate all claims: no combination of the node's devices satisfies claims default/near "
        "(constraints, shared counters or capacity)"
    )


def test_the_kernel_tier_leaves_simple_pods_to_the_vectorised_tier_unless_asked_to_settle() -> None:
    placement, evaluation = _evaluation(c.claim("two", 2))
    tier = KernelTier(placement.ranker)
    assert tier.decide(evaluation, placement.view.snapshot(), ["a", "b"], INF) == ["a", "b"]
    assert evaluation.verdicts == {}
    assert tier.settle(evaluation, placement.view.snapshot(), ["a", "b"]) == []
    assert _statuses(evaluation) == {"a": PASSED, "b": UNRESOLVABLE}


def test_the_first_fit_tier_decides_with_upstreams_first_set() -> None:
    placement, evaluation = _evaluation(c.claim("near", 2, constraints=NUMA))
    left = FirstFitTier().decide(evaluation, placement.view.snapshot(), ["a", "b", "c"], INF)
    assert left == []
    assert _statuses(evaluation) == {"a": PASSED, "b": UNRESOLVABLE, "c": UNRESOLVABLE}
    assert "a" in evaluation.first_fit_sets and "b" not in evaluation.first_fit_sets
    assert evaluation.verdicts["c"].reason.endswith("(constraints, shared counters or capacity)")


def test_the_search_tier_decides_every_node_it_is_handed() -> None:
    placement, evaluation = _evaluation(c.claim("two", 2))
    left = SearchTier(placement.search).decide(
        evaluation, placement.view.snapshot(), ["c", "ghost", "a"], INF
    )
    assert left == []
    assert _statuses(evaluation) == {"c": FAILED, "ghost": UNRESOLVABLE, "a": PASSED}
    assert evaluation.allocations["a"]  # upstream's allocation, kept for bind
    assert evaluation.verdicts["c"].reason == (
        "cannot allocate all claims: the devices claims default/two need are in use"
    )


def test_both_kernel_tiers_agree_with_filter() -> None:
    """Either kernel tier alone reaches the verdicts filter gives through the facade."""
    claim = c.claim("near", 2, constraints=NUMA)
    placement = c.placement(_cluster(claim))
    verdict = placement.filter(c.pod([claim]), ["a", "b", "c"])
    assert verdict.passed == ["a"] and set(verdict.unresolvable) == {"b", "c"}
    for tier in (KernelTier(placement.ranker), FirstFitTier()):
        _, evaluation = _evaluation(claim)
        tier.decide(evaluation, placement.view.snapshot(), ["a", "b", "c"], INF)
        assert evaluation.verdicts["a"].status == PASSED, tier
        assert {n: evaluation.verdicts[n].reason for n in ("b", "c")} == verdict.unresolvable, tier


def _tainted_cluster(claim: c.Obj) -> list[c.Obj]:
    """Node "t" has two GPUs, both with a taint the pod does not tolerate; node "a" two clean ones."""
    tainted = c.gpus("t", 2, numa=[0, 0])
    for made in tainted:
        for device in made["spec"]["devices"]:
            device["taints"] = [{"key": "broken", "value": "x", "effect": "NoSchedule"}]
    return [c.node("t"), *tainted, c.node("a"), *c.gpus("a", 2, numa=[0, 0]), c.gpu_class(), claim]


def test_every_tier_words_untolerated_tainted_devices_as_missing() -> None:
    """Devices a request cannot use because of their taints do not count as the node's, whichever
    tier decides: the vectorised check (plain count), the topology kernel (a constraint), the
    first-fit kernel (firstAvailable, All) and upstream's search, run alone."""
    first_available = {"name": "r", "firstAvailable": [{"name": "two", "deviceClassName": c.GPU, "count": 2}]}
    every = {"name": "r", "exactly": {"deviceClassName": c.GPU, "allocationMode": "All"}}
    claims = {
        "plain": (c.claim("plain", 2), 2),
        "constrained": (c.claim("constrained", 2, constraints=NUMA), 2),
        "first-available": (
            {**builders.claim("first-available", [first_available]), "kind": "ResourceClaim"},
            2,
        ),
        "all": ({**builders.claim("all", [every]), "kind": "ResourceClaim"}, 1),
    }
    for name, (claim, need) in claims.items():
        expected = (
            f"cannot allocate all claims: claim default/{name}, request r: {need} device(s) of class gpu "
            "do not exist on the node"
        )
        placement = c.placement(_tainted_cluster(claim))
        verdict = placement.filter(c.pod([claim]), ["t", "a"])
        assert verdict.passed == ["a"], name
        assert verdict.unresolvable == {"t": expected}, name
        alone = c.placement(_tainted_cluster(claim))
        evaluation = alone.new_evaluation(c.pod([claim]))
        SearchTier(alone.search).decide(evaluation, alone.view.snapshot(), ["t"], INF)
        assert evaluation.verdicts["t"].reason == expected, name
