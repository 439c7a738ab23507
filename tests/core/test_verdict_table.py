"""`Verdicts`: node verdicts kept by index position, read back as filter's answer and as a mapping."""

from __future__ import annotations

import numpy as np
import pytest

from extender.core.reasons import FAILED, PASSED, UNKNOWN_NODE, UNRESOLVABLE, NodeVerdict
from extender.core.verdict_table import LOOKED_UP, LOOKUP_SLACK, NameLookup, Verdicts, lookup_for

NAMES = ["a", "b", "c", "d"]
POS = {name: i for i, name in enumerate(NAMES)}
BUSY = NodeVerdict(FAILED, "in use")
GONE = NodeVerdict(UNRESOLVABLE, "no such devices")


def _table() -> Verdicts:
    verdicts = Verdicts()
    verdicts.bind(NAMES, POS)
    verdicts.assign(np.array([0, 3]), NodeVerdict(PASSED))
    verdicts.assign_groups(np.array([2, 1]), np.array([1, 0]), [BUSY, GONE])
    verdicts.assign_names(["ghost"], UNKNOWN_NODE)
    return verdicts


def test_the_answer_keeps_the_call_order_and_repeats() -> None:
    passed, failed, unresolvable = _table().answer(["d", "ghost", "b", "a", "c", "d"])
    assert passed == ["d", "a", "d"]
    assert failed == {"b": "in use"}
    assert list(unresolvable.items()) == [("ghost", UNKNOWN_NODE.reason), ("c", "no such devices")]


def test_it_reads_as_the_mapping_it_replaces() -> None:
    verdicts = _table()
    expected = {
        "a": NodeVerdict(PASSED),
        "b": BUSY,
        "c": GONE,
        "d": NodeVerdict(PASSED),
        "ghost": UNKNOWN_NODE,
    }
    assert verdicts == expected
    assert len(verdicts) == 5
    assert verdicts["ghost"] is UNKNOWN_NODE  # the very object written
    assert "e" not in verdicts and verdicts.get("e") is None
    with pytest.raises(KeyError):
        verdicts.answer(["a", "e"])


def test_undecided_and_passed_among() -> None:
    verdicts = Verdicts()
    verdicts.bind(NAMES, POS)
    verdicts["b"] = BUSY
    assert verdicts.undecided(["a", "b", "a", "x", "c"]) == ["a", "x", "c"]
    verdicts.assign(np.array([0, 2]), NodeVerdict(PASSED))
    assert verdicts.passed_among(["c", "b", "a"]) == ["c", "a"]


def test_a_new_index_generation_carries_the_verdicts_by_name() -> None:
    verdicts = _table()
    names = ["d", "c", "e"]
    verdicts.bind(names, {name: i for i, name in enumerate(names)})
    assert verdicts == {
        "a": NodeVerdict(PASSED),
        "b": BUSY,
        "c": GONE,
        "d": NodeVerdict(PASSED),
        "ghost": UNKNOWN_NODE,
    }
    assert verdicts.undecided(["e", "a"]) == ["e"]


# ----------------------------------------------------------------- the shared name lookup


def test_an_equal_list_of_new_strings_reuses_the_lookup() -> None:
    """kube-scheduler sends the same names in every call, each time as new string objects: the
    second list is answered from the first one's lookup (found by value)."""
    names = [f"node-{i}" for i in range(100)]
    lookup = NameLookup({name: i for i, name in enumerate(names)})
    first = lookup.find(names)
    again = lookup.find(["".join(("node-", str(i))) for i in range(100)])  # equal, not identical
    assert again is first
    assert first.positions.tolist() == list(range(100))
    changed = [*names[:-1], "node-x"]
    other = lookup.find(changed)
    assert other is not first and other.positions.tolist() == [*range(99), -1]
    assert first.array().tolist() == names


def test_distinct_tells_repeats_of_known_and_unknown_names() -> None:
    lookup = NameLookup(POS)
    assert lookup.find(["a", "b", "x", "y"]).distinct
    assert not lookup.find(["a", "b", "a"]).distinct
    assert not lookup.find(["x", "b", "x"]).distinct
    assert lookup.find([]).distinct


def test_a_lookup_remembers_a_bounded_number_of_names() -> None:
    """A request may name any number of unknown nodes; a list longer than the budget is looked up
    but not remembered, and older lists make room for newer ones."""
    lookup = NameLookup(POS)
    budget = 2 * len(POS) + LOOKUP_SLACK
    huge = [f"ghost-{i}" for i in range(budget + 1)]
    assert lookup.find(huge) is not lookup.find(huge)  # not remembered
    first = lookup.find(["a", "b"])
    for i in range(LOOKED_UP):
        lookup.find([f"other-{i}"])
    assert lookup.remembered(["a", "b"]) is None and lookup.find(["a", "b"]) is not first
    half = [f"g-{i}" for i in range(budget // 2 + 1)]
    kept = lookup.find(half)
    lookup.find([f"h-{i}" for i in range(budget // 2 + 1)])  # together beyond the budget
    assert lookup.remembered(half) is None and kept.positions.tolist() == [-1] * len(half)


def test_each_index_generation_has_its_own_shared_lookup() -> None:
    first, second = {"a": 0}, {"a": 1}
    assert lookup_for(first) is lookup_for(first)
    assert lookup_for(second) is not lookup_for(first)
    assert lookup_for(second).find(["a"]).positions.tolist() == [1]


def test_verdicts_of_two_pods_share_the_lookup_and_answer_alike() -> None:
    """Two evaluations bound to one index answer an equal list from one lookup."""
    one, two = _table(), _table()
    call = ["d", "ghost", "b", "a", "c", "d"]
    assert one.answer(call) == two.answer(list(call)) == one.answer([str(n) for n in call])


def test_undecided_on_an_unbound_table_still_drops_repeats() -> None:
    assert Verdicts().undecided(["a", "b", "a"]) == ["a", "b"]
    names = ["a", "b"]
    assert Verdicts().undecided(names) is names


def test_spread_lays_scores_over_the_call_order() -> None:
    verdicts = _table()
    scores = verdicts.spread(["d", "ghost", "a", "d", "c"], ["a", "d"], np.array([7, 3]))
    assert scores.tolist() == [3, 0, 7, 3, 0]
    # a scored name the index does not know is laid by name
    assert verdicts.spread(["ghost", "a"], ["ghost", "a"], np.array([5, 2])).tolist() == [5, 2]
    assert verdicts.spread([], ["a"], np.array([1])).tolist() == []
    assert verdicts.spread(["a"], [], np.zeros(0, dtype=np.int64)).tolist() == [0]
