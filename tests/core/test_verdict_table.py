"""`Verdicts`: node verdicts kept by index position, read back as filter's answer and as a mapping."""

from __future__ import annotations

import numpy as np
import pytest

from extender.core.reasons import FAILED, PASSED, UNKNOWN_NODE, UNRESOLVABLE, NodeVerdict
from extender.core.verdict_table import Verdicts

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
