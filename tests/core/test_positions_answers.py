"""Filter and prioritize answers built from node positions equal the name-by-name answers (issue 21).

On a mixed fleet (`loadtests.fleet`), for a pod of each claim shape and each way a call may list
its nodes (index order, reversed, with names the index does not know, with repeats, a subset,
none), the answer `Placement.filter` builds from arrays equals the one read name by name from the
evaluation's verdicts, and `Placement.prioritize`'s arrays equal the scores looked up by name from
the ranking of the passed nodes; the wire bytes equal orjson's encoding of those reference answers.
Each list is sent as kube-scheduler sends it: new string objects every call (decoded from JSON),
so the second call of an equal list is answered from the shared name lookup.
"""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from extender import wire
from extender.allocator.inputs import AllocatedState
from extender.cluster.state import ClusterState
from extender.core import scoring
from extender.core.binding import InUse
from extender.core.placement import Placement
from extender.core.reasons import FAILED, PASSED
from extender.core.scoring import FIRST_FIT, PARTITION
from extender.pods import parse_pod
from extender.settings import Settings
from extender.verdicts import FilterVerdict, HostScores
from extender.wiring import build_services
from loadtests.fleet import MIXED_SHAPES, generate_mixed_cluster
from loadtests.generate import SHAPE_LABEL
from loadtests.scenarios import PodEntry

Obj = dict[str, Any]
GHOSTS = ["ghost-node-1", 'odd "name" \\ with ünïcode ✓', "ghost-node-2"]


@pytest.fixture(scope="module")
def fleet() -> tuple[Placement, dict[str, Obj]]:
    objects, pending = generate_mixed_cluster(nodes=48, seed=3, pods=60)
    placement, _ = build_services(Settings(kernel_warmup="blocking"), ClusterState.from_objects(objects))
    by_shape: dict[str, Obj] = {}
    for pod in pending:
        by_shape.setdefault(pod["metadata"]["labels"][SHAPE_LABEL], pod)
    assert set(by_shape) == set(MIXED_SHAPES), "every claim shape has a pod"
    return placement, by_shape


def _variants(names: list[str]) -> dict[str, list[str]]:
    return {
        "index order": list(names),
        "reversed": names[::-1],
        "unknown names": [GHOSTS[0], *names[:20], GHOSTS[1], *names[20:], GHOSTS[2]],
        "repeats": [*names[5:9], *names, names[0], GHOSTS[0], GHOSTS[0]],
        "every third": names[::3],
        "one": names[7:8],
        "empty": [],
    }


def _as_sent(names: list[str]) -> list[str]:
    """The list as the server decodes it from a request: new string objects."""
    sent: list[str] = orjson.loads(orjson.dumps(names))
    return sent


def _reference_filter(placement: Placement, pod: Obj, names: list[str]) -> FilterVerdict:
    evaluation = placement.evaluate(parse_pod(pod), names)
    if evaluation.error:
        return FilterVerdict(error=evaluation.error)
    verdict = FilterVerdict()
    for name in names:
        outcome = evaluation.verdicts[name]
        if outcome.status == PASSED:
            verdict.passed.append(name)
        elif outcome.status == FAILED:
            verdict.failed[name] = outcome.reason
        else:
            verdict.unresolvable[name] = outcome.reason
    return verdict


def _reference_scores(placement: Placement, pod: Obj, names: list[str]) -> list[tuple[str, int]]:
    evaluation = placement.evaluate(parse_pod(pod), names)
    by_node: dict[str, int] = {}
    if not evaluation.error and evaluation.specs:
        passed = [name for name in names if evaluation.verdicts[name].status == PASSED]
        scores = placement.scores(evaluation, passed)
        scored = scores.scored_among(passed)
        values = scoring.by_preference(scoring.priorities(scores.values(scored)), scores.preferences(scored))
        by_node = dict(zip(scored, values.tolist(), strict=True))
    return [(name, by_node.get(name, 0)) for name in names]


def _fresh(pod: Obj, seq: int) -> Obj:
    """The pod under a new name and UID, its claims named directly (as the benchmarks send it)."""
    return PodEntry(pod, "").instance("fresh", random.Random(seq), seq)


@pytest.mark.parametrize("shape", list(MIXED_SHAPES))
def test_answers_from_positions_equal_the_answers_by_name(
    fleet: tuple[Placement, dict[str, Obj]], shape: str
) -> None:
    placement, by_shape = fleet
    names = list(placement.index().node_names)
    decided: dict[str, tuple[int, int, int]] = {}
    seq = 0
    for label, listed in _variants(names).items():
        for call in range(2):  # the second call's equal list is answered from the shared lookup
            seq += 1
            pod = _fresh(by_shape[shape], seq)
            sent = _as_sent(listed)
            verdict = placement.filter(parse_pod(pod), sent)
            expected = _reference_filter(placement, pod, listed)
            assert verdict == expected, (shape, label, call)
            if label == "index order":
                assert not verdict.error, verdict.error
                decided[shape] = (len(verdict.passed), len(verdict.failed), len(verdict.unresolvable))
            assert wire.encode_filter_result(verdict, None) == orjson.dumps(
                {
                    "Nodes": None,
                    "NodeNames": None if expected.error else expected.passed,
                    "FailedNodes": expected.failed,
                    "FailedAndUnresolvableNodes": expected.unresolvable,
                    "Error": expected.error,
                }
            )
            passed = _as_sent(verdict.passed)
            scores = placement.prioritize(parse_pod(pod), passed)
            assert isinstance(scores, HostScores)
            reference = _reference_scores(placement, pod, verdict.passed)
            assert [(s.host, s.score) for s in scores] == reference, (shape, label, call)
            assert wire.encode_host_priorities(scores) == orjson.dumps(
                [{"Host": host, "Score": score} for host, score in reference]
            )
            # All the call's names, passed or not, as the scheduler's prioritize may send them.
            everything = placement.prioritize(parse_pod(pod), sent)
            assert [(s.host, s.score) for s in everything] == _reference_scores(placement, pod, listed)
    # The fleet is busy enough that each shape's answer has more than one kind of node in it.
    passed, failed, unresolvable = decided[shape]
    assert passed + failed + unresolvable == len(names)
    assert (failed or unresolvable) and (passed or shape == "tpu-all"), decided[shape]


def test_the_scheduler_profile_check_answers_zeros_as_arrays() -> None:
    """`HostScores.zeros` (a pod of another profile) encodes as a score of 0 per name, in order."""
    names = ["b", "a", "b"]
    zeros = HostScores.zeros(names)
    assert wire.encode_host_priorities(zeros) == orjson.dumps([{"Host": n, "Score": 0} for n in names])
    assert zeros.positive() == 0


def test_bind_restricts_the_search_to_the_kernel_choice_without_copying_the_devices_in_use(
    fleet: tuple[Placement, dict[str, Obj]],
) -> None:
    """Where a topology kernel chose a node's set, bind's allocation (upstream's search with every
    other device of the node counted as in use, `binding.InUse`) has exactly the chosen devices
    and equals the search over a copied set of the devices in use, as bind built it before."""
    placement, by_shape = fleet
    names = list(placement.index().node_names)
    index = placement.index()
    allocated = placement.allocated_state()[0]
    checked = 0
    for seq, pod in enumerate(by_shape.values(), start=1000):
        fresh = parse_pod(_fresh(pod, seq))
        verdict = placement.filter(fresh, names)
        placement.prioritize(fresh, verdict.passed)
        evaluation = placement.evaluate(fresh, names)
        for name in verdict.passed:
            score = placement.scores(evaluation, [name]).get(name)
            if score is None or score.method in (FIRST_FIT, PARTITION):
                continue
            chosen = {index.row_device[row].id for row in score.rows}
            result = placement.choose_allocations(evaluation, name)
            assert result is not None and {r.device.id for a in result for r in a.devices} == chosen
            position = index.node_pos[name]
            node_rows = range(index.node_start[position], index.node_start[position + 1])
            others = {index.row_device[row].id for row in node_rows} - chosen
            copied = AllocatedState(
                devices=frozenset(allocated.devices) | others,
                shared_ids=allocated.shared_ids,
                aggregated_capacity=allocated.aggregated_capacity,
            )
            assert result == placement.search.run(evaluation.specs, index, name, copied, float("inf"))
            checked += 1
    assert checked > 0, "no node's set was chosen by a topology kernel here"


def test_in_use_reads_as_the_union_it_replaces() -> None:
    base = frozenset({"a", "b", "c"})
    in_use = InUse(base, frozenset({"c", "d"}))
    assert "d" in in_use and "a" in in_use and "e" not in in_use
    assert len(in_use) == 4 and set(in_use) == {"a", "b", "c", "d"} == in_use
