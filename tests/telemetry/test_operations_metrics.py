"""The metrics the alert rules and the dashboard need beyond the request path (deploy/prometheus,
deploy/grafana): pods placed by shape and method, index build time, the leader gauge and the
memory limit of the process's cgroup."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from extender import cgroup
from extender.allocator.requests import parse_claim
from extender.core.binding import shape_label
from extender.core.scoring import BOUNDED, EXACT, FIRST_FIT, PARTITION
from extender.server import make_app
from extender.settings import Settings
from extender.telemetry import MAX_PLACED_SHAPES, OTHER_SHAPE, Metrics
from extender.verdicts import Placed

from .conftest import BIND_BODY, FILTER_BODY, POD, PRIORITIZE_BODY

PLACED = "dra_extender_placed_pods_total"


def _placed(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    return {
        (s.labels["shape"], s.labels["method"]): s.value
        for family in registry.collect()
        if family.name == "dra_extender_placed_pods"
        for s in family.samples
        if s.name == PLACED
    }


async def test_a_bind_counts_the_pod_by_shape_and_method(serve, services):
    """The README pod (4 H100 on one NVLink domain + a NIC) placed by the topology kernel: one
    count under its classes and counts and the method the scoring chose on the node; a repeated
    bind of the bound pod and a refused bind count nothing."""
    placement = services[0]
    registry = CollectorRegistry()
    client = await serve(registry=registry)
    await client.post("/filter", data=FILTER_BODY)
    await client.post("/prioritize", data=PRIORITIZE_BODY)
    assert _placed(registry) == {}
    evaluation = placement.evaluate(_pod(), ["h100-node-01"])  # the one bind re-uses
    method = placement.scores(evaluation, ["h100-node-01"]).get("h100-node-01").method
    resp = await client.post("/bind", data=BIND_BODY)
    assert (await resp.json())["Error"] == ""
    assert method in (EXACT, BOUNDED)  # four GPUs on one NVLink domain: the kernel's choice
    assert _placed(registry) == {("h100.nvidia.com:4+rdma.dra.net:1", method): 1}
    again = await client.post("/bind", data=BIND_BODY)  # already bound there: ok, nothing placed
    assert (await again.json())["Error"] == ""
    other = BIND_BODY.replace(b"h100-node-01", b"cpu-node-01")
    refused = await client.post("/bind", data=other)
    assert (await refused.json())["Error"]
    assert _placed(registry) == {("h100.nvidia.com:4+rdma.dra.net:1", method): 1}
    assert registry.get_sample_value("dra_extender_bind_outcomes_total", {"reason": "ok"}) == 2


def _pod() -> Any:
    from extender.pods import parse_pod

    return parse_pod(copy.deepcopy(POD))


def test_shape_label_names_classes_and_counts_sorted():
    claim = {
        "metadata": {"name": "c", "namespace": "n"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "z", "exactly": {"deviceClassName": "tpu.google.com", "allocationMode": "All"}},
                    {
                        "name": "a",
                        "firstAvailable": [
                            {"name": "big", "deviceClassName": "h100.nvidia.com", "count": 2},
                            {"name": "small", "deviceClassName": "mig.nvidia.com"},
                        ],
                    },
                    {"name": "m", "exactly": {"deviceClassName": "gpu.example.com", "count": 3}},
                ]
            }
        },
    }
    other = {"metadata": {"name": "d"}, "spec": {"devices": {"requests": [{"name": "x", "exactly": {}}]}}}
    specs = [parse_claim(claim), parse_claim(other)]
    expected = "(h100.nvidia.com:2|mig.nvidia.com:1)+:1+gpu.example.com:3+tpu.google.com:all"
    assert shape_label(specs) == expected
    assert shape_label([]) == "none"


def test_placed_shapes_are_capped():
    """Past MAX_PLACED_SHAPES distinct shapes (or an overlong one) pods count under "other"."""
    registry = CollectorRegistry()
    metrics = Metrics.create(registry, memory_limit=lambda: None)
    for i in range(MAX_PLACED_SHAPES + 5):
        metrics.count_placed(Placed(f"class-{i}:1", FIRST_FIT))
    metrics.count_placed(Placed("class-0:1", PARTITION))  # a known shape stays itself
    metrics.count_placed(Placed("x" * 300, FIRST_FIT))
    placed = _placed(registry)
    shapes = {shape for shape, _ in placed}
    assert len(shapes) == MAX_PLACED_SHAPES + 1
    assert placed[(OTHER_SHAPE, FIRST_FIT)] == 6
    assert placed[("class-0:1", PARTITION)] == 1


async def test_index_builds_are_counted_with_their_time(serve, services):
    placement = services[0]
    registry = CollectorRegistry()
    await serve(registry=registry)
    view = placement.view
    assert view.index_builds >= 1  # build_services built the index at start
    assert registry.get_sample_value("dra_extender_index_builds_total") == view.index_builds
    total = registry.get_sample_value("dra_extender_index_build_seconds_total")
    assert total == pytest.approx(view.index_build_seconds) and total > 0
    last = registry.get_sample_value("dra_extender_index_last_build_seconds")
    assert last == view.index_last_build_seconds and 0 < last <= total
    # A changed slice makes the next read build a new generation.
    slice_obj = copy.deepcopy(placement.state.list("ResourceSlice")[0])
    slice_obj["metadata"]["resourceVersion"] = "changed"
    slice_obj["spec"]["devices"] = slice_obj["spec"]["devices"][:-1]
    placement.state.upsert(slice_obj)
    builds = view.index_builds
    placement.index()
    assert registry.get_sample_value("dra_extender_index_builds_total") == builds + 1


async def test_leader_gauge_follows_the_elector(aiohttp_client, services):
    placement, binder = services
    leading = [False]
    registry = CollectorRegistry()
    await aiohttp_client(
        make_app(Settings(), placement=placement, binder=binder, registry=registry, leader=lambda: leading[0])
    )
    assert registry.get_sample_value("dra_extender_leader") == 0
    leading[0] = True
    assert registry.get_sample_value("dra_extender_leader") == 1
    without = CollectorRegistry()
    make_app(Settings(), placement=placement, binder=binder, registry=without)
    assert without.get_sample_value("dra_extender_leader") is None  # no election, no gauge


def test_memory_limit_family_is_exported_with_a_sample_only_when_limited():
    limited = CollectorRegistry()
    Metrics.create(limited, memory_limit=lambda: 2 * 2**30)
    assert limited.get_sample_value("dra_extender_memory_limit_bytes") == 2 * 2**30
    unlimited = CollectorRegistry()
    Metrics.create(unlimited, memory_limit=lambda: None)
    text = generate_latest(unlimited).decode()
    assert "# TYPE dra_extender_memory_limit_bytes gauge" in text
    assert unlimited.get_sample_value("dra_extender_memory_limit_bytes") is None


def _cgroup_tree(tmp_path: Path, proc: str, files: dict[str, str]) -> tuple[Path, Path]:
    mount = tmp_path / "cgroup"
    for relative, text in files.items():
        (mount / relative).parent.mkdir(parents=True, exist_ok=True)
        (mount / relative).write_text(text)
    proc_file = tmp_path / "proc-self-cgroup"
    proc_file.write_text(proc)
    return mount, proc_file


@pytest.mark.parametrize(
    ("proc", "files", "expected"),
    [
        # cgroup v2 with a cgroup namespace: the container sees its own cgroup at the mount
        ("0::/\n", {"memory.max": "2147483648\n"}, 2 * 2**30),
        ("0::/\n", {"memory.max": "max\n"}, None),
        # v2 without a namespace: the pod's limit on a parent, a larger one on the container
        (
            "0::/kubepods/pod1/ctr\n",
            {"kubepods/pod1/memory.max": "1073741824", "kubepods/pod1/ctr/memory.max": "4294967296"},
            2**30,
        ),
        # v1 (a memory controller line wins over the v2 line of a hybrid host)
        (
            "4:memory:/kubepods/ctr\n0::/\n",
            {"memory/kubepods/ctr/memory.limit_in_bytes": "536870912", "memory.max": "1"},
            512 * 2**20,
        ),
        ("9:cpu,memory:/x\n", {"memory/x/memory.limit_in_bytes": "9223372036854771712"}, None),
        ("0::/\n", {"memory.max": "lots"}, None),  # not a number: logged, no limit
        ("0::/\n", {}, None),  # no file
    ],
    ids=["v2", "v2-max", "v2-parent", "v1", "v1-unlimited", "garbage", "absent"],
)
def test_memory_limit_from_cgroup_files(tmp_path, proc, files, expected):
    mount, proc_file = _cgroup_tree(tmp_path, proc, files)
    assert cgroup.memory_limit_bytes(mount, proc_file) == expected


def test_memory_limit_without_proc_file_is_none(tmp_path):
    assert cgroup.memory_limit_bytes(tmp_path, tmp_path / "missing") is None
