"""The clique term of prioritize for gang members (extender.core.gang.clique_scores / combine)."""

from __future__ import annotations

import pytest

from extender.core.gang import (
    CROWDED_CLIQUE,
    LOOSE_FIT,
    OTHER_CLIQUE,
    Gang,
    clique_scores,
    combine,
    home_clique,
    other_clique_reason,
    outside_of,
)

# Three racks: A has 6 free nodes, B has 4, C has 2; plus one node outside any clique.
CLIQUE_OF = {**{f"a{i}": "A" for i in range(6)}, **{f"b{i}": "B" for i in range(4)},
             **{f"c{i}": "C" for i in range(2)}}  # fmt: skip
CANDIDATES = [*CLIQUE_OF, "plain"]


def test_first_member_prefers_the_tightest_clique_that_holds_the_whole_gang() -> None:
    scores = clique_scores(Gang("g", 4), CANDIDATES, CLIQUE_OF, [])
    assert scores is not None
    assert scores["b0"] == 1.0  # B holds exactly 4
    assert LOOSE_FIT <= scores["a0"] < 1.0  # A fits, loosely: keep it whole for a bigger gang
    assert scores["c0"] == 0.0  # C cannot hold 4
    assert scores["plain"] == 0.0


def test_a_gang_no_clique_holds_scores_every_clique_zero() -> None:
    scores = clique_scores(Gang("g", 7), CANDIDATES, CLIQUE_OF, [])
    assert scores is not None and set(scores.values()) == {0.0}


def test_unknown_size_scores_every_clique_alike() -> None:
    scores = clique_scores(Gang("g", None), CANDIDATES, CLIQUE_OF, [])
    assert scores is not None
    assert {scores[n] for n in CLIQUE_OF} == {LOOSE_FIT} and scores["plain"] == 0.0


def test_later_members_follow_the_members_already_placed() -> None:
    # Two members already on rack A (bound or assumed, so their nodes are no longer candidates).
    candidates = [n for n in CANDIDATES if n not in ("a0", "a1")]
    scores = clique_scores(Gang("g", 4), candidates, CLIQUE_OF, ["a0", "a1"])
    assert scores is not None
    assert scores["a2"] == 1.0  # the home clique has room for the other two
    # Elsewhere, best fit for the two that are left: C (2 slots) is tight, B (4) loose.
    assert scores["c0"] == OTHER_CLIQUE
    assert scores["b0"] == pytest.approx(OTHER_CLIQUE * LOOSE_FIT)
    assert max(scores["b0"], scores["c0"]) < scores["a2"]


def test_a_full_home_clique_is_still_preferred_but_marked_crowded() -> None:
    candidates = ["a5", "b0", "b1", "b2", "b3"]
    scores = clique_scores(Gang("g", 8), candidates, CLIQUE_OF, ["a0", "a1", "a2", "a3", "a4"])
    assert scores is not None
    assert scores["a5"] == CROWDED_CLIQUE  # one slot left at home, three members to go
    assert scores["b0"] == OTHER_CLIQUE  # B could hold all three that are left
    assert scores["a5"] > scores["b0"]


def test_no_clique_anywhere_means_no_gang_term() -> None:
    assert clique_scores(Gang("g", 2), ["x", "y"], {}, []) is None


@pytest.mark.parametrize(
    ("priority", "clique", "weight", "expected"),
    [(10, 0.0, 3.0, 2), (0, 1.0, 3.0, 8), (10, 1.0, 3.0, 10), (5, 0.5, 0.0, 5), (0, 0.0, 3.0, 0)],
)
def test_combine_blends_the_clique_term_into_the_priority(
    priority: int, clique: float, weight: float, expected: int
) -> None:
    assert combine(priority, clique, weight) == expected


def test_home_clique_and_reason() -> None:
    assert home_clique(CLIQUE_OF, ["b0", "a1", "b2", "plain"]) == "B"
    assert home_clique(CLIQUE_OF, []) is None
    reason = other_clique_reason(Gang("ml/jobset:js/w", 4), "B", "A")
    assert "ml/jobset:js/w" in reason and "clique B" in reason and "clique A" in reason


def test_outside_of_names_every_node_off_home_with_one_text_per_domain() -> None:
    domains = {"a1": "rack-a", "a2": "rack-a", "b1": "rack-b", "b2": "rack-b"}
    asked: list[str | None] = []

    def reason(domain: str | None) -> str:
        asked.append(domain)
        return f"in {domain}"

    out = outside_of(["a1", "b1", "x", "a2", "b2"], domains, "rack-a", reason)
    assert out == {"b1": "in rack-b", "x": "in None", "b2": "in rack-b"}
    assert sorted(asked, key=str) == [None, "rack-b"]  # once per value, not per node
    assert outside_of(["a1", "a2"], domains, "rack-a", reason) == {}
    assert outside_of([], domains, "rack-a", reason) == {}
