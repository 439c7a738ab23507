"""A gang through filter -> prioritize -> bind over HTTP on the sample's two NVL72-style racks.

The sample has rack a (3 free GB200 trays: gb200-rack-a-01 is in use) and rack b (4 free trays),
one NVLink clique each; tests/data/gang_pods.yaml holds a JobSet gang of 4 whole-tray pods. Acting
as kube-scheduler (take the best-scored node, ties in node order), the whole gang must land in
rack b with gang scoring, and must split without it (the control). Bound and assumed members both
steer the next member; with `gang_filter_other_cliques` the other clique fails filter by name.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from extender.cluster.sample import sample_objects
from extender.cluster.state import ClusterState
from extender.explaining import load_pods
from extender.pods import parse_pod
from extender.server import make_app
from extender.settings import Settings
from extender.wiring import build_services

GANG = load_pods(Path(__file__).resolve().parents[1] / "data" / "gang_pods.yaml")
RACK_A = [f"gb200-rack-a-{i:02d}" for i in range(1, 5)]
RACK_B = [f"gb200-rack-b-{i:02d}" for i in range(1, 5)]


async def _client(aiohttp_client, settings: Settings) -> tuple[Any, Any, list[str]]:
    state = ClusterState.from_objects(copy.deepcopy(sample_objects()))
    placement, binder = build_services(settings, state)
    app = make_app(settings, placement=placement, binder=binder, registry=CollectorRegistry())
    nodes = list(placement.index().node_names)
    return await aiohttp_client(app), placement, nodes


async def _schedule(client: Any, pod: dict[str, Any], nodes: list[str]) -> tuple[str, dict[str, Any]]:
    """One scheduling cycle as kube-scheduler runs it; returns the node and the filter answer."""
    args = orjson.dumps({"Pod": pod, "NodeNames": nodes})
    filtered = await (await client.post("/filter", data=args)).json()
    passed = filtered["NodeNames"]
    assert passed, filtered
    asked = orjson.dumps({"Pod": pod, "NodeNames": passed})
    scores = await (await client.post("/prioritize", data=asked)).json()
    best = max(scores, key=lambda s: (s["Score"], -passed.index(s["Host"])))["Host"]
    meta = pod["metadata"]
    bind = {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": best}
    assert (await (await client.post("/bind", data=orjson.dumps(bind))).json())["Error"] == ""
    return best, filtered


async def test_the_whole_gang_lands_in_the_one_clique_that_holds_it(aiohttp_client) -> None:
    client, _, nodes = await _client(aiohttp_client, Settings())
    chosen = [(await _schedule(client, copy.deepcopy(pod), nodes))[0] for pod in GANG]
    assert sorted(chosen) == RACK_B


async def test_without_gang_scoring_the_gang_is_split(aiohttp_client) -> None:
    client, _, nodes = await _client(aiohttp_client, Settings(gang_weight=0.0))
    chosen = [(await _schedule(client, copy.deepcopy(pod), nodes))[0] for pod in GANG]
    assert set(chosen) & set(RACK_A) and set(chosen) & set(RACK_B)  # the control: cut across racks


async def test_filter_other_cliques_names_the_gang_and_its_clique(aiohttp_client) -> None:
    client, placement, nodes = await _client(aiohttp_client, Settings(gang_filter_other_cliques=True))
    first, filtered = await _schedule(client, copy.deepcopy(GANG[0]), nodes)
    assert first in RACK_B and set(filtered["NodeNames"]) == set(RACK_A[1:] + RACK_B)  # nothing placed yet
    _, filtered = await _schedule(client, copy.deepcopy(GANG[1]), nodes)
    assert set(filtered["NodeNames"]) == set(RACK_B) - {first}
    clique_b = placement.gangs.node_cliques()[first]
    reason = filtered["FailedAndUnresolvableNodes"]["gb200-rack-a-02"]
    assert "nvl-racks/jobset:train-gang/worker" in reason and clique_b in reason


def test_an_assumed_member_steers_the_next_before_the_state_shows_it() -> None:
    state = ClusterState.from_objects(copy.deepcopy(sample_objects()))
    placement, _ = build_services(Settings(), state)
    first, second = copy.deepcopy(GANG[0]), copy.deepcopy(GANG[1])
    nodes = list(placement.index().node_names)
    placement.filter(parse_pod(first), nodes)  # seen in filter, as kube-scheduler's call would make it
    passed = placement.filter(parse_pod(second), nodes).passed
    scores = {s.host: s.score for s in placement.prioritize(parse_pod(second), passed)}
    assert all(scores[b] > scores[a] for a in RACK_A[1:] for b in RACK_B)  # nothing placed: rack b fits 4
    # The first member was bound to rack a by the kube binder; the watch has not shown it yet.
    placement.assumed.assume_pod(first["metadata"]["uid"], "gb200-rack-a-02")
    scores = {s.host: s.score for s in placement.prioritize(parse_pod(second), passed)}
    assert all(scores[a] > scores[b] for a in RACK_A[1:] for b in RACK_B)  # now: follow the member


@pytest.mark.parametrize("weight", [0.0, 3.0])
def test_pods_outside_gangs_score_as_before(weight: float) -> None:
    state = ClusterState.from_objects(copy.deepcopy(sample_objects()))
    placement, _ = build_services(Settings(gang_weight=weight), state)
    loner = copy.deepcopy(GANG[0])
    del loner["metadata"]["labels"]
    nodes = list(placement.index().node_names)
    passed = placement.filter(parse_pod(loner), nodes).passed
    assert {s.score for s in placement.prioritize(parse_pod(loner), passed)} == {10}  # identical trays tie
