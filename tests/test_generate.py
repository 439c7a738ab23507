"""The load-test generator against the real loaders and placement (tiny clusters, fast).

Scope: checks that `loadtests.generate` emits objects the extender accepts (structural loader
checks, ClusterState) and pods that placement resolves to their generated claims, so the
benchmark measures real filter work instead of pod-level rejections. Placement rules
themselves are tested elsewhere.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from extender.cluster.loading import load_state_paths
from extender.cluster.state import ClusterState
from extender.placement import Placement
from extender.settings import Settings
from extender.wiring import build_services
from loadtests.generate import SHAPE_LABEL, SHAPES, generate_cluster, main


def _services(objects: list[dict]) -> tuple[ClusterState, Placement]:
    state = ClusterState.from_objects(objects)
    placement, _ = build_services(Settings(), state)
    return state, placement


def test_small_cluster_loads_and_pods_pass_filter() -> None:
    objects, pods = generate_cluster(nodes=3, seed=1, pods=5)
    state, placement = _services(objects)
    names = [f"gpu-node-{i:05d}" for i in (1, 2, 3)]
    assert state.count("Node") == 3
    assert state.count("ResourceSlice") == 6
    assert len(pods) == 5
    passing = 0
    for pod in pods:
        verdict = placement.filter(pod, names)
        assert not verdict.error
        assert sorted([*verdict.passed, *verdict.failed, *verdict.unresolvable]) == names
        # Failures must be per-node device shortages, never pod-level claim problems.
        for reason in [*verdict.failed.values(), *verdict.unresolvable.values()]:
            assert reason.startswith("cannot allocate all claims"), reason
        passing += bool(verdict.passed)
    assert passing >= 3


def test_empty_cluster_fits_every_shape_everywhere_and_full_cluster_none() -> None:
    objects, pods = generate_cluster(nodes=2, seed=3, pods=100, allocated_fraction=0.0)
    assert {pod["metadata"]["labels"][SHAPE_LABEL] for pod in pods} == set(SHAPES)
    _, placement = _services(objects)
    names = ["gpu-node-00001", "gpu-node-00002"]
    for pod in pods:
        assert placement.filter(pod, names).passed == names

    objects, pods = generate_cluster(nodes=2, seed=3, pods=12, allocated_fraction=1.0)
    _, placement = _services(objects)
    for pod in pods:
        verdict = placement.filter(pod, names)
        assert verdict.passed == []
        assert set(verdict.failed) == set(names)  # devices exist but are in use


def test_cli_writes_loadable_files(tmp_path: Path) -> None:
    assert main(["--nodes", "2", "--seed", "5", "--pods", "4", "--out", str(tmp_path)]) == 0
    objects = load_state_paths([tmp_path / "cluster.yaml"])
    claims = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ResourceClaim"}
    lines = (tmp_path / "pods.jsonl").read_bytes().splitlines()
    assert len(lines) == 4
    for line in lines:
        pod = orjson.loads(line)
        claim = claims[pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]]
        owner = claim["metadata"]["ownerReferences"][0]
        assert owner["controller"] and owner["uid"] == pod["metadata"]["uid"]
        assert "allocation" not in claim["status"]
    assert generate_cluster(nodes=2, seed=5, pods=4) == generate_cluster(nodes=2, seed=5, pods=4)
