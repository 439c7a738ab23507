"""A pod's already allocated claims restrict filter to the nodes their allocation selects.

`tiers.decide` checks them as array operations (a node mask per selector and index generation);
the answer must be the per-node one: the first allocated claim a node cannot use names it, a
name the state does not know is checked as a bare node, and a pod with nothing pending passes
wherever its allocated claims can be used.
"""

from __future__ import annotations

from extender.core.reasons import UNKNOWN_NODE
from tests.core import small_cluster as c

NODES = ["a", "b", "ghost", "c"]


def _objects() -> list[dict[str, object]]:
    objects: list[dict[str, object]] = [c.gpu_class()]
    for name in ("a", "b", "c"):
        objects += [c.node(name), *c.gpus(name, 2)]
    return objects


def test_nodes_an_allocated_claim_cannot_use_are_unresolvable() -> None:
    mine = c.held("mine", "a", ["gpu-0"], pod_uid="pod-uid")
    pending = c.claim("more", 1)
    placement = c.placement([*_objects(), mine, pending])
    verdict = placement.filter(c.pod([mine, pending]), NODES)
    unavailable = "resourceclaim default/mine not available on the node"
    assert verdict.passed == ["a"]
    assert verdict.failed == {}
    assert verdict.unresolvable == {"b": unavailable, "ghost": unavailable, "c": unavailable}
    # a second pod with the same allocation's selector gets the same answer (the mask is kept)
    again = placement.filter(c.pod([mine, pending], uid="pod-2", name="pod-2"), ["c", "a"])
    assert again.passed == ["a"] and again.unresolvable == {"c": unavailable}


def test_with_nothing_pending_the_allocated_claims_decide_alone() -> None:
    mine = c.held("mine", "b", ["gpu-1"], pod_uid="pod-uid")
    placement = c.placement([*_objects(), mine])
    verdict = placement.filter(c.pod([mine]), NODES)
    assert verdict.passed == ["b"]
    assert set(verdict.unresolvable) == {"a", "ghost", "c"}


def test_without_allocated_claims_an_unknown_name_is_unknown() -> None:
    pending = c.claim("more", 1)
    placement = c.placement([*_objects(), pending])
    verdict = placement.filter(c.pod([pending]), NODES)
    assert verdict.passed == ["a", "b", "c"]
    assert verdict.unresolvable == {"ghost": UNKNOWN_NODE.reason}
