"""The one bind choice both binders make (extender.core.binding.choose_for_bind), alone: what it
returns, and each refusal with its reason and each binder's words."""

from __future__ import annotations

import pytest

from extender.core import binding
from extender.core.binding import IN_MEMORY, WATCHED, BindRefusal
from extender.core.evaluation import PodEvaluation
from extender.core.view import Snapshot
from extender.errors import AllocationAborted
from extender.verdicts import CLAIM_GONE, NO_FIT, NODE_GONE
from tests.core import small_cluster as c


def _cluster(*claims: c.Obj) -> list[c.Obj]:
    return [c.node("a"), *c.gpus("a", 2), c.node("b"), *c.gpus("b", 1), c.gpu_class(), *claims]


def _refusal(placement: c.Placement, pod: c.Obj, node: str, wording: binding.Wording) -> BindRefusal:
    with pytest.raises(BindRefusal) as caught:
        binding.choose_for_bind(placement, pod, node, wording=wording)
    return caught.value


def test_one_allocation_per_pending_claim_on_a_node_that_fits() -> None:
    one, two = c.claim("one", 1), c.claim("two", 1)
    placement = c.placement(_cluster(one, two))
    choice = binding.choose_for_bind(placement, c.pod([one, two]), "a", wording=IN_MEMORY)
    assert [claim.name for claim in choice.claims.pending] == ["one", "two"]
    assert [a.claim.ref for a in choice.allocations] == ["default/one", "default/two"]
    devices = [r.device.name for a in choice.allocations for r in a.devices]
    assert sorted(devices) == ["gpu-0", "gpu-1"]


@pytest.mark.parametrize(
    ("wording", "message"),
    [
        (IN_MEMORY, "node ghost does not exist in the cluster state"),
        (WATCHED, "node ghost does not exist (not in the watched cluster state)"),
    ],
)
def test_an_unknown_node_is_worded_by_the_binder(wording: binding.Wording, message: str) -> None:
    one = c.claim("one", 1)
    refusal = _refusal(c.placement(_cluster(one)), c.pod([one]), "ghost", wording)
    assert (refusal.message, refusal.reason) == (message, NODE_GONE)


def test_a_missing_claim_is_claim_gone_in_the_resolvers_words() -> None:
    one = c.claim("one", 1)
    refusal = _refusal(c.placement(_cluster()), c.pod([one]), "a", WATCHED)
    assert (refusal.message, refusal.reason) == ('resourceclaim "default/one" not found', CLAIM_GONE)


def test_claim_problems_map_to_reasons() -> None:
    assert binding.problem_reason('pod "ns/p": ResourceClaim not created yet') == CLAIM_GONE
    assert binding.problem_reason('resourceclaim "c" is being deleted') == CLAIM_GONE
    assert binding.problem_reason("resourceclaim in use") == NO_FIT


def test_a_node_that_does_not_pass_is_no_fit_with_the_verdicts_reason() -> None:
    two = c.claim("two", 2)
    refusal = _refusal(c.placement(_cluster(two)), c.pod([two]), "b", IN_MEMORY)
    assert refusal.reason == NO_FIT
    assert refusal.message == (
        "pod default/pod cannot be bound to node b: cannot allocate all claims: "
        "claim default/two, request r: 2 device(s) of class gpu do not exist on the node"
    )


def test_an_allocated_claim_elsewhere_is_no_fit_and_admitted_claims_are_seen_in_order() -> None:
    on_a, on_b = (
        c.held("on-a", "a", ["gpu-0"], pod_uid="pod-uid"),
        c.held("on-b", "b", ["gpu-0"], pod_uid="pod-uid"),
    )
    placement = c.placement(_cluster(on_a, on_b))
    admitted: list[str] = []
    with pytest.raises(BindRefusal) as caught:
        binding.choose_for_bind(
            placement, c.pod([on_a, on_b]), "a", wording=WATCHED,
            admit_allocated=lambda claim, _: admitted.append(claim.name),
        )  # fmt: skip
    assert (caught.value.message, caught.value.reason) == (
        "resourceclaim default/on-b not available on node a",
        NO_FIT,
    )
    assert admitted == ["on-a"]  # admitted after its own fit check, before the next claim's


def test_without_pending_claims_nothing_is_evaluated() -> None:
    on_a = c.held("on-a", "a", ["gpu-0"], pod_uid="pod-uid")
    placement = c.placement(_cluster(on_a))
    choice = binding.choose_for_bind(placement, c.pod([on_a]), "a", wording=IN_MEMORY)
    assert choice.allocations == [] and [x.name for x in choice.claims.allocated] == ["on-a"]
    assert len(placement.evaluations) == 0


class _TimingOut:
    def decide(
        self, evaluation: PodEvaluation, view: Snapshot, names: list[str], deadline: float
    ) -> list[str]:
        raise AllocationAborted("context deadline exceeded")


@pytest.mark.parametrize(
    ("wording", "message"),
    [
        (IN_MEMORY, "timed out trying to allocate devices: context deadline exceeded"),
        (WATCHED, "pod default/pod: timed out trying to allocate devices: context deadline exceeded"),
    ],
)
def test_an_evaluation_error_is_worded_by_the_binder(wording: binding.Wording, message: str) -> None:
    one = c.claim("one", 1)
    placement = c.placement(_cluster(one))
    placement.tiers = (_TimingOut(),)
    refusal = _refusal(placement, c.pod([one]), "a", wording)
    assert (refusal.message, refusal.reason) == (message, NO_FIT)


def test_the_facade_delegates_with_the_same_answer() -> None:
    one = c.claim("one", 1)
    placement = c.placement(_cluster(one))
    choice = placement.choose_for_bind(c.pod([one]), "b", wording=WATCHED)
    assert [r.device.name for a in choice.allocations for r in a.devices] == ["gpu-0"]
