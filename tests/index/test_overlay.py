"""SpannedList and OverlayDict read exactly as the list or dict they stand for, across generations."""

from __future__ import annotations

import random

import pytest

from extender.index import overlay
from extender.index.overlay import OverlayDict, SpannedList


def _check(spanned: SpannedList[int], model: list[int], rng: random.Random) -> None:
    assert len(spanned) == len(model)
    assert list(spanned) == model
    assert spanned == model
    for _ in range(20):
        row = rng.randrange(-len(model), len(model))
        assert spanned[row] == model[row]
        lo, hi = sorted(rng.randrange(len(model) + 1) for _ in range(2))
        assert spanned[lo:hi] == model[lo:hi]
    assert spanned[::3] == model[::3]
    with pytest.raises(IndexError):
        spanned[len(model)]


@pytest.mark.parametrize("seed", range(8))
def test_spanned_list_reads_as_the_patched_list(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Node-sized spans written generation after generation (also rewriting a span, writing a
    span across two, and flattening past the span limit): every generation reads as its list,
    and older generations keep theirs."""
    monkeypatch.setattr(overlay, "MAX_SPANS", 6)
    rng = random.Random(seed)
    sizes = [rng.randrange(1, 5) for _ in range(60)]
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    model = list(range(sum(sizes)))
    current = SpannedList(list(model))
    history: list[tuple[SpannedList[int], list[int]]] = []
    for generation in range(40):
        writes = []
        for node in rng.sample(range(len(sizes)), rng.randrange(1, 3)):
            values = [1000 * (generation + 1) + i for i in range(sizes[node])]
            writes.append((starts[node], values))
        if generation % 13 == 12:  # one write across two nodes' rows: the spans are flattened
            node = rng.randrange(len(sizes) - 1)
            writes = [(starts[node], [-1] * (sizes[node] + sizes[node + 1]))]
        history.append((current, list(model)))
        current = current.patched(writes)
        for start, values in writes:
            model[start : start + len(values)] = values
        _check(current, model, rng)
    for old, old_model in history:
        assert list(old) == old_model


def test_spanned_list_refuses_a_span_outside_the_rows() -> None:
    with pytest.raises(IndexError):
        SpannedList([1, 2, 3]).patched([(2, [7, 8])])


@pytest.mark.parametrize("seed", range(4))
def test_overlay_dict_reads_as_the_updated_dict(seed: int) -> None:
    rng = random.Random(seed)
    model = {f"node-{i}": i for i in range(100)}
    current = OverlayDict(dict(model))
    history: list[tuple[OverlayDict[str, int], dict[str, int]]] = []
    for generation in range(30):
        changes = {f"node-{rng.randrange(100)}": -generation for _ in range(rng.randrange(1, 4))}
        history.append((current, dict(model)))
        current = current.replacing(changes)
        model.update(changes)
        assert dict(current) == model
        assert list(current) == list(model)  # the shared dict's order
        assert current.get("node-7") == model["node-7"] and current.get("absent") is None
        assert "absent" not in current and "node-3" in current
    for old, old_model in history:
        assert dict(old) == old_model
    with pytest.raises(KeyError):
        current.replacing({"absent": 1})  # keys are never added: a new key makes a new dict
