"""Per-shape memos carried across index generations (extender.core.shapes, issue 21): after each
of a sequence of slice, node and class changes, the answers built from memos carried from
earlier generations (filter verdicts with their reasons, prioritize scores) equal those of a
fresh evaluation with every memo cleared, on the mixed fleet and every claim shape."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

from extender.allocator.features import Features
from extender.cluster.state import ClusterState
from extender.core import feasibility, firstfit, scoring, shapes
from extender.core.assumed import AssumeCache
from extender.core.placement import Placement
from extender.index.snapshot import DeviceIndex
from extender.objects import Obj
from extender.pods import Pod, parse_pod
from loadtests.fleet import MIXED_SHAPES, generate_mixed_cluster
from loadtests.generate import SHAPE_LABEL

Answer = tuple[list[str], dict[str, str], dict[str, str], str, list[tuple[str, int]]]


def _answers(placement: Placement, pods: list[Pod]) -> list[Answer]:
    names = list(placement.index().node_names)
    out: list[Answer] = []
    for pod in pods:
        placement.evaluations.clear()  # every call does a new pod's work, as in the benchmark
        verdict = placement.filter(pod, names)
        scores = placement.prioritize(pod, verdict.passed) if verdict.passed else []
        out.append(
            (
                verdict.passed,
                verdict.failed,
                verdict.unresolvable,
                verdict.error,
                [(s.host, s.score) for s in scores],
            )
        )
    return out


@contextmanager
def no_memos(index: DeviceIndex) -> Iterator[None]:
    """Inside: no memo of this or any earlier generation (per-shape data, partition choices).
    The memos are put back after, so the next generation carries from them (not from what was
    made inside)."""
    kept = (
        dict(shapes._LATEST),
        shapes._SHAPES.pop(index, None),
        dict(scoring._LATEST_CHOICES),
        scoring._CHOICES.pop(index, None),
    )
    shapes._LATEST.clear()
    scoring._LATEST_CHOICES.clear()
    try:
        yield
    finally:
        shapes._LATEST.clear()
        shapes._LATEST.update(kept[0])
        shapes._SHAPES.pop(index, None)
        if kept[1] is not None:
            shapes._SHAPES[index] = kept[1]
        scoring._LATEST_CHOICES.clear()
        scoring._LATEST_CHOICES.update(kept[2])
        scoring._CHOICES.pop(index, None)
        if kept[3] is not None:
            scoring._CHOICES[index] = kept[3]


def _fresh_answers(placement: Placement, pods: list[Pod]) -> list[Answer]:
    """The answers with no memo of this or any earlier generation (`no_memos`)."""
    with no_memos(placement.index()):
        return _answers(placement, pods)


def _republish(state: ClusterState, raw: Obj, step: int) -> Obj:
    raw["metadata"]["resourceVersion"] = f"{raw['metadata'].get('resourceVersion', '')}-{step}"
    state.upsert(raw)
    return raw


def _slices(state: ClusterState, rng: random.Random, test: Callable[[Obj], bool], node: str = "") -> Obj:
    """A copy of a random slice that passes `test`, of a node whose name starts with `node`."""
    slices = state.list("ResourceSlice")
    return copy.deepcopy(
        rng.choice([s for s in slices if test(s) and (s["spec"].get("nodeName") or "").startswith(node)])
    )


def _devices(raw: Obj) -> list[Obj]:
    devices: list[Obj] = raw["spec"].get("devices") or []
    return devices


def _rewrite(
    state: ClusterState, rng: random.Random, step: int, node: str, field: str, key: str, value: Obj
) -> None:
    """Republish a slice of `node` (any node if "") with `field[key]` set to `value` on each of
    its devices that has it."""
    raw = _slices(state, rng, lambda s: any(key in (d.get(field) or {}) for d in _devices(s)), node)
    for device in _devices(raw):
        if key in (device.get(field) or {}):
            device[field][key] = value
    _republish(state, raw, step)


def _change(state: ClusterState, rng: random.Random, step: int, kind: str, removed: list[Obj]) -> None:
    """One change of `kind` to the state (`kind:prefix`: to a node whose name has the prefix)."""
    kind, _, node = kind.partition(":")
    if kind == "same content":
        _republish(state, _slices(state, rng, lambda s: True, node), step)
    elif kind == "attribute":  # a value the classes' selectors read: the devices leave the class
        _rewrite(state, rng, step, node, "attributes", "type", {"string": "retired"})
    elif kind == "capacity":
        _rewrite(state, rng, step, node, "capacity", "memory", {"value": "8Gi"})
    elif kind == "taint":  # every device of the slice: no request here tolerates it
        raw = _slices(state, rng, lambda s: bool(_devices(s)), node)
        for device in _devices(raw):
            device["taints"] = [{"key": "example.com/broken", "effect": "NoSchedule"}]
        _republish(state, raw, step)
    elif kind == "counters":  # a counter slice: its node's partitions fit differently
        raw = _slices(state, rng, lambda s: bool(s["spec"].get("sharedCounters")), node)
        for counter_set in raw["spec"]["sharedCounters"]:
            for counter in counter_set["counters"].values():
                counter["value"] = "1"
        _republish(state, raw, step)
    elif kind == "device removed":  # the row layout changes: nothing is carried past it
        raw = _slices(state, rng, lambda s: len(_devices(s)) > 1, node)
        _devices(raw).pop()
        _republish(state, raw, step)
    elif kind == "slice removed":
        raw = _slices(state, rng, lambda s: bool(_devices(s)), node)
        state.delete("ResourceSlice", raw["metadata"]["name"])
        removed.append(raw)
    elif kind == "slice added":
        _republish(state, removed.pop(), step)
    elif kind == "node":
        node = copy.deepcopy(rng.choice(state.list("Node")))
        node["metadata"].setdefault("labels", {})["example.com/step"] = str(step)
        state.upsert(node)
    elif kind == "class":  # selection may differ on every node: memos start afresh
        device_class = copy.deepcopy(rng.choice(state.list("DeviceClass")))
        device_class["spec"].setdefault("selectors", []).append({"cel": {"expression": f"{step} > 0"}})
        _republish(state, device_class, step)
    else:
        raise ValueError(kind)


#: Changes between two rounds of calls (several in a row: the memos are carried over generations
#: no call of the shape saw).
STEPS = [
    ["same content"],
    ["attribute:a100"],
    ["counters"],
    ["same content", "taint:tpu", "capacity:h100"],
    ["taint:a100"],
    ["slice removed"],
    ["same content"],
    ["slice added"],
    ["counters", "attribute:h100"],
    ["node"],
    ["taint:h100", "same content"],
    ["class"],
    ["taint:mi300x"],
    ["attribute:l40s", "taint:a100"],
    ["device removed"],
    ["same content", "counters"],
    ["capacity"],
    ["taint:tpu"],
]


def _counting(counts: dict[str, int], name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        counts[name] += 1
        return function(*args, **kwargs)

    return counted


@pytest.mark.parametrize("seed", [11, 12])
def test_carried_memos_answer_as_fresh_ones(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    objects, pending = generate_mixed_cluster(nodes=40, seed=seed, pods=80)
    placement = Placement(
        ClusterState.from_objects(objects), features=Features.from_gates(), assumed=AssumeCache()
    )
    by_shape: dict[str, Obj] = {}
    for pod in pending:
        by_shape.setdefault(pod["metadata"]["labels"][SHAPE_LABEL], pod)
    assert set(by_shape) == set(MIXED_SHAPES)
    pods = [parse_pod(by_shape[name]) for name in MIXED_SHAPES]
    counts = dict.fromkeys(("node memo", "feasibility", "first fit", "choices"), 0)
    monkeypatch.setattr(shapes.NodeMemo, "carried", _counting(counts, "node memo", shapes.NodeMemo.carried))
    monkeypatch.setattr(feasibility, "_carry", _counting(counts, "feasibility", feasibility._carry))
    monkeypatch.setattr(firstfit, "carried", _counting(counts, "first fit", firstfit.carried))
    carried_choices = scoring._carried_choices

    def choices(index: DeviceIndex, key: tuple[str, int, str], free: np.ndarray) -> scoring._ChoiceMemo:
        memo = carried_choices(index, key, free)
        counts["choices"] += bool((memo.chosen != scoring._UNKNOWN).any())
        return memo

    monkeypatch.setattr(scoring, "_carried_choices", choices)

    assert _answers(placement, pods) == _fresh_answers(placement, pods)
    rng = random.Random(seed)
    removed: list[Obj] = []
    lineage: list[int] = []
    before = placement.index()
    for step, kinds in enumerate(STEPS):
        for kind in kinds:  # a generation per change: those between calls are asked nothing
            _change(placement.state, rng, step, kind, removed)
            placement.index()
        index = placement.index()
        assert index is not before
        lineage.append(len(index.lineage))
        carried = _answers(placement, pods)
        assert carried == _fresh_answers(placement, pods), (step, kinds)
        before = index
    # The sequence exercised the carry (and its breaks: a class change, a new row layout).
    assert all(counts.values()), counts
    assert max(lineage) >= 3 and 0 in lineage, lineage


def test_changes_since_names_the_patched_nodes_over_generations() -> None:
    objects, _ = generate_mixed_cluster(nodes=12, seed=3, pods=1)
    placement = Placement(
        ClusterState.from_objects(objects), features=Features.from_gates(), assumed=AssumeCache()
    )
    state = placement.state
    first = placement.index()
    rng = random.Random(1)
    nodes: list[str] = []
    for step in range(3):
        raw = _slices(state, rng, lambda s: bool(_devices(s)))
        nodes.append(raw["spec"]["nodeName"])
        _republish(state, raw, step)
        placement.index()
    last = placement.index()
    changes = last.changes_since(first.serial)
    assert changes is not None
    assert sorted(last.node_names[p] for p in changes.touched.tolist()) == sorted(set(nodes))
    assert set(changes.rebuilt.tolist()) <= set(changes.touched.tolist())
    empty = last.changes_since(last.serial)
    assert empty is not None and not len(empty.touched)
    assert last.changes_since(-1) is None  # not in its lineage
