"""Gang members in flight (extender.core.gang, "Members in flight"): the real kube-scheduler scores
a gang's members back to back and binds them later, so prioritize's top node for one member
counts as placed for the next ones until its bind or the state shows it, or it expires."""

from __future__ import annotations

from typing import Any

from extender.core.gang import CLIQUE_LABEL, NOMINATION_SECONDS, TIED_CLIQUE, Gang, clique_scores
from extender.objects import Obj
from extender.pods import Pod, parse_pod
from tests.core import small_cluster as c

JOB = "volcano.sh/job-name"
NODES = [f"{rack}{i}" for rack in "ab" for i in range(4)]  # two racks of four free trays


def _node(name: str) -> Obj:
    return {"kind": "Node", "metadata": {"name": name, "labels": {CLIQUE_LABEL: f"rack-{name[0]}"}}}


def _member(name: str, node: str | None = None) -> Obj:
    spec: dict[str, Any] = {"nodeName": node} if node else {}
    return {
        "kind": "Pod",
        "metadata": {
            "name": name, "namespace": "default", "uid": f"uid-{name}", "labels": {JOB: "train"},
            "annotations": {"gang.dra-extender.io/size": "4"},
        },
        "spec": spec,
    }  # fmt: skip


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _setup(*extra: Obj) -> tuple[Any, Clock]:
    clock = Clock()
    placement = c.placement([*(_node(n) for n in NODES), *extra], clock=clock)
    return placement.gangs, clock


def _top(scores: dict[str, int]) -> set[str]:
    best = max(scores.values())
    return {n for n, s in scores.items() if s == best}


def _score(gangs: Any, pod: Pod) -> dict[str, int]:
    return gangs.with_term(pod, NODES, dict.fromkeys(NODES, 5), nominate=True)


def test_equally_tight_cliques_leave_one_clique_on_top() -> None:
    scores = clique_scores(Gang("g", 4), NODES, {n: f"rack-{n[0]}" for n in NODES}, [])
    assert scores is not None
    assert {scores[n] for n in NODES if n.startswith("a")} == {1.0}
    assert {scores[n] for n in NODES if n.startswith("b")} == {TIED_CLIQUE}


def test_members_scored_back_to_back_follow_the_first_into_its_clique() -> None:
    gangs, _ = _setup()
    first = _score(gangs, parse_pod(_member("w0")))
    assert _top(first) <= {n for n in NODES if n.startswith("a")}
    nominated = gangs.nominated(Gang("default/volcano:train", 4))
    assert set(nominated) == {"uid-w0"}
    for name in ("w1", "w2", "w3"):
        scores = _score(gangs, parse_pod(_member(name)))
        top = _top(scores)
        assert all(n.startswith("a") for n in top), (name, scores)
        taken = {
            node
            for uid, node in gangs.nominated(Gang("default/volcano:train", 4)).items()
            if uid != f"uid-{name}"
        }
        assert not top & taken, f"{name} is steered onto a node another member is nominated to"
    assert len(set(gangs.nominated(Gang("default/volcano:train", 4)).values())) == 4


def test_explaining_a_member_nominates_nothing() -> None:
    gangs, _ = _setup()
    gangs.with_term(parse_pod(_member("w0")), NODES, dict.fromkeys(NODES, 5))
    assert gangs.nominated(Gang("default/volcano:train", 4)) == {}


def test_a_bound_member_counts_where_it_is_bound_not_where_it_was_nominated() -> None:
    gangs, _ = _setup(_member("w0", node="b2"))  # the scheduler put w0 on rack b after all
    gangs.nominate(Gang("default/volcano:train", 4), "uid-w0", "a0")
    scores = _score(gangs, parse_pod(_member("w1")))
    assert all(n.startswith("b") for n in _top(scores)), scores


def test_nominations_expire() -> None:
    gangs, clock = _setup()
    gang = Gang("default/volcano:train", 4)
    gangs.nominate(gang, "uid-w0", "b0")
    assert gangs.nominated(gang) == {"uid-w0": "b0"}
    assert all(n.startswith("b") for n in _top(_score(gangs, parse_pod(_member("w1")))))
    clock.now += NOMINATION_SECONDS + 1
    assert "uid-w0" not in gangs.nominated(gang)
