"""The load-test generators (H100 fleet and mixed fleet) against the real loaders and placement.

Tiny clusters, fast.

Scope: checks that `loadtests.generate` emits objects the extender accepts (structural loader
checks, ClusterState) and pods that placement resolves to their generated claims, so the
benchmark measures real filter work instead of pod-level rejections. Placement rules
themselves are tested elsewhere.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson

from extender.cluster.loading import load_state_paths
from extender.cluster.state import ClusterState
from extender.core.placement import Placement
from extender.pods import parse_pod
from extender.settings import Settings
from extender.wiring import build_services
from loadtests.fleet import FLEET, MIXED_SHAPES, NODE_TYPE_LABEL, fleet_counts, generate_mixed_cluster
from loadtests.generate import SHAPE_LABEL, SHAPES, generate_cluster, main, write, write_json_state


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
        verdict = placement.filter(parse_pod(pod), names)
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
        assert placement.filter(parse_pod(pod), names).passed == names

    objects, pods = generate_cluster(nodes=2, seed=3, pods=12, allocated_fraction=1.0)
    _, placement = _services(objects)
    for pod in pods:
        verdict = placement.filter(parse_pod(pod), names)
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


# ----------------------------------------------------------------- the mixed fleet (loadtests.fleet)


def _gi(quantity: str) -> int:
    """The generator's quantities are plain integers or whole Gi."""
    return int(quantity.removesuffix("Gi")) * (1 << 30) if quantity.endswith("Gi") else int(quantity)


def _node_types(objects: list[dict]) -> dict[str, str]:
    return {
        o["metadata"]["name"]: o["metadata"]["labels"][NODE_TYPE_LABEL]
        for o in objects
        if o["kind"] == "Node"
    }


def test_mixed_fleet_composition_follows_the_shares() -> None:
    assert fleet_counts(1000) == {"h100": 350, "a100": 250, "l40s": 150, "mi300x": 100, "tpu": 100, "cpu": 50}
    assert sum(fleet_counts(37).values()) == 37
    objects, _ = generate_mixed_cluster(nodes=40, seed=2, pods=0)
    types = _node_types(objects)
    assert Counter(types.values()) == Counter(fleet_counts(40))
    devices: dict[str, Counter] = {name: Counter() for name in types}
    for obj in (o for o in objects if o["kind"] == "ResourceSlice"):
        spec = obj["spec"]
        assert not (spec.get("devices") and spec.get("sharedCounters")), "devices or counters, not both"
        if any("consumesCounters" in d for d in spec.get("devices") or ()):
            assert len(spec["devices"]) <= 64  # the limit with partitionable devices (dra.md §1.3)
        for device in spec.get("devices") or ():
            kind = device["attributes"].get("type", {}).get("string", "nic")
            devices[spec["nodeName"]][(spec["driver"], kind)] += 1
    expected = {
        "h100": {("gpu.nvidia.com", "gpu"): 8, ("dra.net", "nic"): 4},
        "a100": {("gpu.nvidia.com", "gpu"): 8, ("gpu.nvidia.com", "mig"): 8 * 14},
        "l40s": {("gpu.nvidia.com", "gpu"): 4},
        "mi300x": {("gpu.amd.com", "amdgpu"): 8},
        "tpu": {("tpu.google.com", "tpu"): 4},
        "cpu": {},
    }
    for name, node_type in types.items():
        assert devices[name] == Counter(expected[node_type]), name


def test_mixed_fleet_is_deterministic_per_seed() -> None:
    first = generate_mixed_cluster(nodes=12, seed=7, pods=10)
    assert first == generate_mixed_cluster(nodes=12, seed=7, pods=10)
    assert first != generate_mixed_cluster(nodes=12, seed=8, pods=10)
    # The pod mix depends on the seed only, not on the cluster size.
    shapes = [p["metadata"]["labels"][SHAPE_LABEL] for p in first[1]]
    assert shapes == [
        p["metadata"]["labels"][SHAPE_LABEL] for p in generate_mixed_cluster(nodes=30, seed=7, pods=10)[1]
    ]


#: Node types on which a pod of each mixed shape fits when nothing is held.
_FITS = {
    "mig-1g": {"a100"},
    "mig-pair-same-gpu": {"a100"},
    "gpu-mem-40gi": {"h100", "a100", "l40s"},
    "gpu-nic-pcie": {"h100"},
    "gpu4-nvlink-nic-numa": {"h100"},
    "first-available": {"h100", "mi300x", "a100"},
    "tpu-all": {"tpu"},
}


def test_every_mixed_shape_loads_and_fits_exactly_its_node_types(tmp_path: Path) -> None:
    assert set(_FITS) == set(MIXED_SHAPES)
    objects, pods = generate_mixed_cluster(nodes=20, seed=4, pods=120, held_fraction=0.0)
    write(objects, pods, tmp_path)
    loaded = load_state_paths([tmp_path / "cluster.yaml"])  # the structural checks of the loader
    assert loaded == objects
    json_loaded = load_state_paths([write_json_state(objects, tmp_path / "json" / "cluster.json")])
    assert json_loaded == objects
    _, placement = _services(loaded)
    types = _node_types(objects)
    names = list(types)
    firsts = {}
    for pod in pods:
        firsts.setdefault(pod["metadata"]["labels"][SHAPE_LABEL], pod)
    assert set(firsts) == set(MIXED_SHAPES)
    for shape, pod in firsts.items():
        verdict = placement.filter(parse_pod(pod), names)
        assert not verdict.error, (shape, verdict.error)
        assert {types[n] for n in verdict.passed} == _FITS[shape], shape
        assert {n for n in names if types[n] in _FITS[shape]} == set(verdict.passed), shape


def test_held_devices_follow_the_fraction_and_mig_holds_stay_within_counters() -> None:
    objects, _ = generate_mixed_cluster(nodes=40, seed=5, pods=0, held_fraction=0.3)
    types = _node_types(objects)
    slices = [o for o in objects if o["kind"] == "ResourceSlice"]
    capacity = {
        (s["spec"]["nodeName"], cs["name"], counter): _gi(value["value"])
        for s in slices
        for cs in s["spec"].get("sharedCounters") or ()
        for counter, value in cs["counters"].items()
    }
    consumes = {
        (s["spec"]["nodeName"], d["name"]): d.get("consumesCounters") or []
        for s in slices
        for d in s["spec"].get("devices") or ()
    }
    held: Counter = Counter()
    used: Counter = Counter()
    seen: set[tuple[str, str]] = set()
    mig_held = 0
    for claim in (o for o in objects if o["kind"] == "ResourceClaim"):
        allocation = (claim.get("status") or {}).get("allocation")
        if not allocation:
            continue
        for result in allocation["devices"]["results"]:
            key = (result["pool"], result["device"])
            assert key in consumes, key  # every held device exists on its node
            assert key not in seen, key  # and is held once
            seen.add(key)
            held[
                (
                    types[result["pool"]],
                    result["device"].split("-mig-")[0] if "-mig-" in result["device"] else "dev",
                )
            ] += 1
            mig_held += "-mig-" in result["device"]
            for consumption in consumes[key]:
                for counter, value in consumption["counters"].items():
                    used[(result["pool"], consumption["counterSet"], counter)] += _gi(value["value"])
    assert mig_held > 0
    assert used, "held A100 devices consume counters"
    for key, amount in used.items():
        assert amount <= capacity[key], key
    # 30 % of the devices of each kind (A100: of the physical GPUs, whole or partitioned).
    counts = Counter(types.values())
    for node_type, per_node in (("h100", 8), ("l40s", 4), ("mi300x", 8), ("tpu", 4)):
        assert held[(node_type, "dev")] == round(0.3 * per_node * counts[node_type]), node_type
    a100_gpus_in_use = {(pool, dev.split("-mig-")[0]) for pool, dev in seen if types[pool] == "a100"}
    assert len(a100_gpus_in_use) == round(0.3 * 8 * counts["a100"])


def test_cli_writes_the_mixed_fleet(tmp_path: Path) -> None:
    assert main(["--nodes", "6", "--fleet", "mixed", "--pods", "5", "--out", str(tmp_path)]) == 0
    objects = load_state_paths([tmp_path / "cluster.yaml"])
    assert {o["metadata"]["labels"][NODE_TYPE_LABEL] for o in objects if o["kind"] == "Node"} <= set(FLEET)
    assert len((tmp_path / "pods.jsonl").read_bytes().splitlines()) == 5


def test_locust_shape_groups_cover_the_mixed_shapes() -> None:
    from loadtests import scenarios

    _, pods = generate_mixed_cluster(nodes=3, seed=1, pods=60)
    exact = scenarios.select_shapes(pods, ["exact"])
    fast = scenarios.select_shapes(pods, ["fast"])
    assert len(exact) + len(fast) == len(pods)
    assert {scenarios.pod_shape(p) for p in exact} == {n for n, s in MIXED_SHAPES.items() if s.exact_search}
    assert {"mig-pair-same-gpu", "gpu-nic-pcie", "gpu4-nvlink-nic-numa"} <= {
        scenarios.pod_shape(p) for p in exact
    }


def _pinned_pod(name: str, device_class: str, expression: str) -> tuple[dict, dict]:
    """A pending pod and its standalone claim for one device of `device_class` matching `expression`."""
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "bench", "uid": f"uid-claim-{name}", "resourceVersion": "1"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "one",
                        "exactly": {
                            "deviceClassName": device_class,
                            "count": 1,
                            "selectors": [{"cel": {"expression": expression}}],
                        },
                    }
                ]
            }
        },
        "status": {},
    }
    pod = {
        "metadata": {"name": name, "namespace": "bench", "uid": f"uid-pod-{name}"},
        "spec": {
            "containers": [{"name": "main", "image": "x", "resources": {"claims": [{"name": "devices"}]}}],
            "resourceClaims": [{"name": "devices", "resourceClaimName": name}],
            "schedulerName": "dra-extender-scheduler",
        },
        "status": {"phase": "Pending"},
    }
    return claim, pod


def test_the_extender_sees_held_mig_partitions_through_the_counters() -> None:
    """Per A100 GPU: a 1g.10gb and the full GPU fit exactly where the held devices leave room."""
    objects, _ = generate_mixed_cluster(nodes=12, seed=11, pods=0, held_fraction=0.7)
    types = _node_types(objects)
    devices = {
        (s["spec"]["nodeName"], d["name"]): d
        for s in objects
        if s["kind"] == "ResourceSlice"
        for d in s["spec"].get("devices") or ()
    }
    held_by_parent: dict[str, list[dict]] = {}
    for claim in (o for o in objects if o["kind"] == "ResourceClaim"):
        for result in claim["status"]["allocation"]["devices"]["results"]:
            if types[result["pool"]] != "a100":
                continue
            device = devices[(result["pool"], result["device"])]
            parent = device["attributes"].get("parentUUID", device["attributes"]["uuid"])["string"]
            held_by_parent.setdefault(parent, []).append(device)
    pods = []
    expected: dict[str, tuple[str, bool]] = {}
    for (node, name), device in devices.items():
        if types[node] != "a100" or device["attributes"]["type"]["string"] != "gpu":
            continue
        parent = device["attributes"]["uuid"]["string"]
        held = held_by_parent.get(parent, [])
        used = {
            c for d in held for c in d["consumesCounters"][0]["counters"] if c.startswith("memory-slice-")
        }
        memory = sum(_gi(d["capacity"]["memory"]["value"]) for d in held)
        sms = sum(int(d["consumesCounters"][0]["counters"]["multiprocessors"]["value"]) for d in held)
        room_1g = memory + _gi("10Gi") <= _gi("80Gi") and sms + 14 <= 108
        fits_1g = room_1g and any(f"memory-slice-{k}" not in used for k in range(7))
        on_parent = f'device.attributes["gpu.nvidia.com"].parentUUID == "{parent}"'
        mig = f'{on_parent} && device.attributes["gpu.nvidia.com"].profile == "1g.10gb"'
        whole = f'device.attributes["gpu.nvidia.com"].uuid == "{parent}"'
        for suffix, device_class, expression, fits in (
            ("mig", "mig.nvidia.com", mig, fits_1g),
            ("gpu", "gpu.nvidia.com", whole, not held),
        ):
            claim, pod = _pinned_pod(f"{node}-{name}-{suffix}", device_class, expression)
            objects.append(claim)
            pods.append(pod)
            expected[pod["metadata"]["name"]] = (node, fits)
    assert {fits for _, fits in expected.values()} == {True, False}  # the seed gives both cases
    _, placement = _services(objects)
    names = list(types)
    for pod in pods:
        node, fits = expected[pod["metadata"]["name"]]
        verdict = placement.filter(parse_pod(pod), names)
        assert not verdict.error
        assert verdict.passed == ([node] if fits else []), pod["metadata"]["name"]
