"""Names the cluster state does not know (issue 22 item 2).

Before: every unknown name in a filter went to upstream's search (about 120 us each), so
200,000 of them kept the worker busy until the deadline, and the reason claimed a capacity
problem ("no combination of the node's devices ..."). Now each is decided once, in O(1), with
the words bind refuses such a node with: it is not in the cluster state. The cost bound is
counted (searches run, verdict objects made), not timed.
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.core.reasons import PASSED, UNKNOWN_NODE, UNRESOLVABLE
from extender.core.searching import Search
from tests.core import small_cluster as c

NUMA = [{"requests": ["r"], "matchAttribute": f"{c.DRIVER}/numa"}]
GHOSTS = [f"ghost-{i:05d}" for i in range(20_000)]


def _cluster(*claims: c.Obj) -> list[c.Obj]:
    return [c.node("a"), *c.gpus("a", 2, numa=[0, 0]), c.gpu_class(), *claims]


@pytest.fixture
def searches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The nodes upstream's search ran on."""
    ran: list[str] = []
    original = Search.run

    def counting(self: Search, specs: Any, index: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        ran.append(name)
        return original(self, specs, index, name, *args, **kwargs)

    monkeypatch.setattr(Search, "run", counting)
    return ran


@pytest.mark.parametrize(
    "claim",
    [c.claim("two", 2), c.claim("near", 2, constraints=NUMA)],
    ids=["simple", "constrained"],
)
def test_unknown_names_are_unresolvable_without_a_search(claim: c.Obj, searches: list[str]) -> None:
    placement = c.placement(_cluster(claim))
    verdict = placement.filter(c.pod([claim]), ["a", *GHOSTS])
    assert verdict.passed == ["a"]
    assert searches == []
    assert len(verdict.unresolvable) == len(GHOSTS)
    assert set(verdict.unresolvable.values()) == {"node does not exist in the cluster state"}
    evaluation = placement.evaluate(c.pod([claim]), ["a"])
    # One shared verdict, not one object per name.
    assert all(evaluation.verdicts[name] is UNKNOWN_NODE for name in GHOSTS)
    assert UNKNOWN_NODE.status == UNRESOLVABLE


def test_a_pod_with_nothing_pending_still_passes_unknown_nodes(searches: list[str]) -> None:
    """Nothing to allocate: the extender has nothing to say about any node (as before)."""
    placement = c.placement(_cluster())
    verdict = placement.filter(c.pod([]), ["a", "ghost"])
    assert verdict.passed == ["a", "ghost"]
    assert searches == []


def test_repeated_names_are_decided_once(searches: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A request naming one node 20,000 times decides it once (and answers it every time)."""
    claim = c.claim("near", 2, constraints=NUMA)
    placement = c.placement(_cluster(claim))
    decided: list[int] = []
    original = placement.decide

    def recording(evaluation: Any, names: list[str]) -> None:
        decided.append(len(names))
        original(evaluation, names)

    monkeypatch.setattr(placement, "decide", recording)
    verdict = placement.filter(c.pod([claim]), ["a"] * 20_000 + ["ghost"] * 20_000)
    assert decided == [2]
    assert verdict.passed == ["a"] * 20_000
    assert verdict.unresolvable == {"ghost": UNKNOWN_NODE.reason}
    assert placement.evaluate(c.pod([claim]), ["a"]).verdicts["a"].status == PASSED
