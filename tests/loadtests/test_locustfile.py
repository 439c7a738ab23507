"""The load test's request bodies and answer checks, with no server and no network.

Scope: `loadtests.scenarios` builds what the locust user sends and judges what comes back. These
tests decode every body with the extender's own decoder (`extender.wire`), check that the fresh
pod copies a cycle sends still ask placement for the same devices, run the answer checks on
canned answers, and import `loadtests/locustfile.py` in a subprocess, because importing locust
monkey-patches the standard library (gevent), which must not leak into this test session.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest

from extender import wire
from extender.cluster.sample import sample_objects
from extender.cluster.state import ClusterState
from extender.pods import parse_pod
from extender.settings import Settings
from extender.wiring import build_services
from loadtests import scenarios
from loadtests.generate import SHAPES, generate_cluster, write

REPO = Path(__file__).resolve().parents[2]
EXPECTED_NODES = "test.dra-extender.io/expected-nodes"


@functools.cache
def _bodies(cache: bool) -> scenarios.Bodies:
    return scenarios.Bodies(scenarios.load_nodes(None), node_cache_capable=cache)


def _answer(**fields: object) -> bytes:
    base = {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }
    return orjson.dumps(base | fields)


@pytest.mark.parametrize("cache", [True, False], ids=["nodeCacheCapable", "full-NodeList"])
def test_sample_bodies_decode_as_extender_args(cache: bool) -> None:
    bodies = _bodies(cache)
    assert len(bodies.names) == 18
    rng = random.Random(1)
    for seq, raw in enumerate(scenarios.load_pods(None)):
        pod = scenarios.PodEntry(raw, scenarios.pod_shape(raw)).instance("fresh", rng, seq)
        decoded, names, items = wire.decode_extender_args(bodies.filter(pod))
        assert decoded == pod
        assert names == bodies.names
        if cache:
            assert items is None
        else:
            assert [i["metadata"]["name"] for i in items or []] == bodies.names
            assert all("kind" not in i and "apiVersion" not in i for i in items or [])
        _, names, items = wire.decode_extender_args(bodies.prioritize(pod, bodies.names[:2]))
        assert names == bodies.names[:2]
        assert (items is None) is cache
        bind = wire.decode_binding_args(scenarios.Bodies.bind(pod, "h100-node-01"))
        meta = pod["metadata"]
        assert bind == {
            "PodName": meta["name"],
            "PodNamespace": meta["namespace"],
            "PodUID": meta["uid"],
            "Node": "h100-node-01",
        }


def test_filter_body_keeps_go_field_order_and_nulls() -> None:
    pod = scenarios.load_pods(None)[0]
    assert list(orjson.loads(_bodies(True).filter(pod))) == ["Pod", "Nodes", "NodeNames"]
    body = orjson.loads(_bodies(False).filter(pod))
    assert body["NodeNames"] is None and body["Nodes"]["metadata"] == {}


def test_fresh_copies_ask_for_the_same_devices_as_the_sample_pods() -> None:
    """A fresh copy (new UID, claim named directly) passes exactly the nodes its original passes."""
    placement, _ = build_services(Settings(), ClusterState.from_objects(sample_objects()))
    names = _bodies(True).names
    rng = random.Random(2)
    for raw in scenarios.load_pods(None):
        entry = scenarios.PodEntry(raw, scenarios.pod_shape(raw))
        fresh, again = entry.instance("fresh", rng, 1), entry.instance("fresh", rng, 2)
        assert entry.instance("original", rng, 3) is raw
        assert fresh["metadata"]["uid"] != raw["metadata"]["uid"] != again["metadata"]["uid"]
        assert fresh["metadata"]["name"] == raw["metadata"]["name"] + "-lt1"
        assert all("resourceClaimTemplateName" not in c for c in fresh["spec"]["resourceClaims"])
        assert "resourceClaimStatuses" not in fresh["status"]
        assert "resourceClaimTemplateName" in raw["spec"]["resourceClaims"][0]  # original untouched
        expected = set(raw["metadata"]["annotations"][EXPECTED_NODES].split(","))
        assert set(placement.filter(parse_pod(raw), names).passed) == expected
        assert set(placement.filter(parse_pod(fresh), names).passed) == expected


def test_generated_scenario_files_load(tmp_path: Path) -> None:
    objects, pods = generate_cluster(nodes=3, seed=1, pods=40)
    cluster, pods_file = write(objects, pods, tmp_path)
    nodes = scenarios.load_nodes([cluster])
    assert [n["metadata"]["name"] for n in nodes] == ["gpu-node-00001", "gpu-node-00002", "gpu-node-00003"]
    assert scenarios.load_nodes([tmp_path]) == nodes  # a directory, as for `serve --state DIR`
    loaded = scenarios.load_pods(pods_file)
    assert loaded == pods
    fast = scenarios.select_shapes(loaded, ["fast"])
    exact = scenarios.select_shapes(loaded, ["exact"])
    assert len(fast) + len(exact) == len(loaded)
    assert all(not SHAPES[scenarios.pod_shape(p)].exact_search for p in fast)
    assert scenarios.select_shapes(loaded, []) == loaded
    with pytest.raises(ValueError, match="no pod has shape gpu-16"):
        scenarios.select_shapes(loaded, ["gpu-1", "gpu-16"])

    placement, _ = build_services(Settings(), ClusterState.from_objects(objects))
    bodies = scenarios.Bodies(nodes, node_cache_capable=False)
    pod = scenarios.PodEntry(loaded[0], "").instance("fresh", random.Random(3), 1)
    decoded, names, items = wire.decode_extender_args(bodies.filter(pod))
    verdict = placement.filter(parse_pod(decoded), names)
    assert not verdict.error and verdict.passed  # real device work, not a pod-level rejection
    assert items is not None and len(items) == 3


def test_bound_pods_are_not_loaded_as_pending(tmp_path: Path) -> None:
    running = [o for o in sample_objects() if o["kind"] == "Pod"]
    path = tmp_path / "pods.yaml"
    path.write_text(json.dumps({"kind": "List", "items": running}))
    with pytest.raises(ValueError, match="no pending Pod"):
        scenarios.load_pods(path)


def test_check_filter_accepts_a_complete_answer() -> None:
    bodies = _bodies(True)
    names = bodies.names
    ok = _answer(
        NodeNames=names[:2],
        FailedNodes={names[2]: "in use"},
        FailedAndUnresolvableNodes={n: "no such devices" for n in names[3:]},
    )
    answer = scenarios.check_filter(200, ok, bodies)
    assert (answer.passed, answer.failed, answer.unresolvable, answer.problem) == (names[:2], 1, 15, "")
    everything_failed = _answer(FailedAndUnresolvableNodes=dict.fromkeys(names, "x"))
    assert scenarios.check_filter(200, everything_failed, bodies) == scenarios.FilterAnswer([], 0, 18)


def test_check_filter_reads_nodes_when_not_node_cache_capable() -> None:
    bodies = _bodies(False)
    names = bodies.names
    rest = {"FailedAndUnresolvableNodes": {n: "x" for n in names[1:]}}
    items = {"metadata": {}, "items": [{"metadata": {"name": names[0]}}]}
    assert scenarios.check_filter(200, _answer(Nodes=items, **rest), bodies).passed == names[:1]
    # The scheduler reads Nodes here: NodeNames alone would make it see no node pass.
    only_names = scenarios.check_filter(200, _answer(NodeNames=names[:1], **rest), bodies)
    assert "NodeNames but no Nodes" in only_names.problem


@pytest.mark.parametrize(
    ("status", "body", "problem"),
    [
        (500, b'{"error": "boom"}', "HTTP 500"),
        (200, b"{not json", "invalid JSON"),
        (200, b"[]", "not a JSON object"),
        (200, _answer(Error="cluster state not ready: x"), "Error: cluster state not ready"),
        (200, _answer(NodeNames=["ghost-node"]), "not sent"),
        (200, _answer(NodeNames=["h100-node-01"]), "each node must be in exactly one"),
    ],
)
def test_check_filter_failures(status: int, body: bytes, problem: str) -> None:
    assert problem in scenarios.check_filter(status, body, _bodies(True)).problem


def test_check_filter_rejects_a_node_in_two_results() -> None:
    bodies = _bodies(True)
    names = bodies.names
    both = _answer(NodeNames=names, FailedNodes={names[0]: "x"})
    assert "exactly one" in scenarios.check_filter(200, both, bodies).problem


def test_check_prioritize() -> None:
    sent = ["a", "b"]
    good = orjson.dumps([{"Host": "a", "Score": 10}, {"Host": "b", "Score": 0}])
    assert scenarios.check_prioritize(200, good, sent) == ({"a": 10, "b": 0}, "")
    for bad in (
        [{"Host": "a", "Score": 11}],
        [{"Host": "c", "Score": 1}],
        [{"Host": "a", "Score": True}],
        [{"Host": "a", "Score": 1.5}],
        {"Host": "a"},
    ):
        scores, problem = scenarios.check_prioritize(200, orjson.dumps(bad), sent)
        assert problem and scores == {}, bad
    assert scenarios.check_prioritize(503, b'{"error": "not ready"}', sent)[1].startswith("HTTP 503")


def test_check_bind_counts_in_use_as_conflict_only_when_another_bind_overlapped() -> None:
    in_use = orjson.dumps(
        {"Error": "pod bench/job-1-lt9 cannot be bound to node n: cannot allocate all claims: "
         "claim bench/c, request gpus: 2 device(s) of class gpu.nvidia.com are not free on the node (in use)"}
    )  # fmt: skip
    assert scenarios.check_bind(200, b'{"Error": ""}', overlapped=False) == (scenarios.BOUND, "")
    assert scenarios.check_bind(200, b"{}", overlapped=False)[0] == scenarios.BOUND  # missing = success
    assert scenarios.check_bind(200, in_use, overlapped=True)[0] == scenarios.CONFLICT
    assert scenarios.check_bind(200, in_use, overlapped=False)[0] == scenarios.FAILURE
    unknown = orjson.dumps({"Error": "pod bench/x (uid u) is unknown"})
    assert scenarios.check_bind(200, unknown, overlapped=True)[0] == scenarios.FAILURE
    assert scenarios.check_bind(500, b"oops", overlapped=True) == (scenarios.FAILURE, "HTTP 500: oops")


def test_pod_pool_binds_each_pod_once_up_to_the_limit() -> None:
    pods = scenarios.load_pods(None)
    pool = scenarios.PodPool(pods, bind_limit=3, rng=random.Random(4))
    taken = [pool.take(for_bind=True) for _ in range(3)]
    assert None not in taken and len(set(taken)) == 3
    assert pool.take(for_bind=True) is None  # the limit counts binds in flight
    pool.release(taken[0])
    pool.mark_bound(taken[1])
    assert pool.pending == len(pods) - 1 and pool.bound == 1
    again = pool.take(for_bind=True)
    assert again is not None and again not in taken[1:]
    assert all(pool.take(for_bind=False) != taken[1] for _ in range(200))  # bound pods are gone


def test_bind_overlap_marks() -> None:
    pool = scenarios.PodPool(scenarios.load_pods(None), bind_limit=4, rng=random.Random(5))
    mark = pool.mark()
    assert not pool.overlapped(mark)
    pool.binds_started += 1
    assert pool.overlapped(mark)  # a bind started after our filter was sent
    pool.binds_in_flight += 1
    later = pool.mark()
    assert pool.overlapped(later)  # a bind still in flight when our filter was sent


def test_best_node_and_percentile() -> None:
    rng = random.Random(6)
    assert scenarios.best_node(["a", "b", "c"], {"a": 1, "b": 7, "c": 7}, rng) in {"b", "c"}
    assert {scenarios.best_node(["a", "b"], {}, rng) for _ in range(50)} == {"a", "b"}
    samples = [float(i) for i in range(1, 101)]
    assert [scenarios.percentile(samples, q) for q in (0.5, 0.95, 0.99, 1.0)] == [50.0, 95.0, 99.0, 100.0]
    assert scenarios.percentile([], 0.5) == 0.0


@pytest.mark.skipif(importlib.util.find_spec("locust") is None, reason="locust not installed (extra 'load')")
def test_locustfile_imports_and_builds_valid_bodies() -> None:
    script = textwrap.dedent(
        """
        import json, random, sys
        import loadtests.locustfile as lf
        from locust import FastHttpUser
        from locust.argument_parser import get_parser
        from extender import wire

        args = ["--dra-node-cache-capable", "off", "--dra-shapes", "gpu-training,mig-notebook"]
        options = get_parser().parse_args([*args, "--dra-seed", "1"])
        run = lf.build_run(options)
        pod = run.pool.entries[0].instance(run.identity, random.Random(1), 1)
        decoded, names, items = wire.decode_extender_args(run.bodies.filter(pod))
        bind = wire.decode_binding_args(run.bodies.bind(pod, names[0]))
        print(json.dumps({
            "user": issubclass(lf.SchedulerUser, FastHttpUser),
            "pods": len(run.pool.entries), "limit": run.pool.bind_limit, "ratio": run.bind_ratio,
            "names": len(names), "items": len(items), "uid": decoded["metadata"]["uid"] == bind["PodUID"],
        }))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {
        "user": True,
        "pods": 2,
        "limit": 1,
        "ratio": 0.1,
        "names": 18,
        "items": 18,
        "uid": True,
    }
