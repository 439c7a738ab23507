"""Differential property test: the three ways /filter decides a node agree on feasibility.

For generated clusters (nodes, pools of one or two drivers with same-named pools, shared
counters, taints, capacities, devices held by other claims) and pods (claims with ExactCount
requests, selectors, tolerations, matchAttribute/distinctAttribute, now and then a
firstAvailable or capacity request), every node is decided by:

- the exact search (`SearchTier.verdict`, upstream's allocator): the reference;
- the vectorised Hall check (`feasibility.check`), on the nodes it claims to decide, both
  with the devices currently free (`fits`) and with everything free (`fits_if_free`);
- the kernel tier (`KernelTier.settle`), on the nodes it decides;
- `Placement.filter` end to end.

A disagreement is a bug in a fast tier (or in the search). CI runs a fixed, derandomised set of
examples (well under 60 s on a shared 2-core machine). A longer, random run:

    DIFFERENTIAL_EXAMPLES=5000 DIFFERENTIAL_RANDOM=1 \\
        python -m pytest tests/allocator/test_allocating_differential.py -q -p no:cacheprovider
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.allocator.features import Features
from extender.allocator.inputs import AllocatedState
from extender.cluster.state import ClusterState
from extender.core import feasibility, tiers
from extender.core.assumed import AssumeCache
from extender.core.placement import Placement
from extender.core.reasons import PASSED
from extender.core.tiers import KernelTier, SearchTier
from extender.errors import AllocationError
from extender.objects import Obj
from extender.pods import parse_pod

EXAMPLES = int(os.environ.get("DIFFERENTIAL_EXAMPLES", "120"))
DERANDOMIZE = os.environ.get("DIFFERENTIAL_RANDOM", "") != "1"

DRIVERS = ("a.example.com", "b.example.com")


def _attribute(value: Any) -> Obj:
    return {"int": value} if isinstance(value, int) else {"string": value}


@st.composite
def _device(draw: Any, name: str, driver: str, counter_sets: dict[str, int]) -> Obj:
    attributes = {"model": _attribute(draw(st.sampled_from(["x", "y"])))}
    if draw(st.integers(0, 7)) > 0:
        attributes["numa"] = _attribute(draw(st.integers(0, 2)))
    raw: Obj = {"name": name, "attributes": attributes}
    if draw(st.booleans()):
        raw["capacity"] = {"memory": {"value": f"{draw(st.integers(1, 4)) * 8}Gi"}}
    if counter_sets and draw(st.booleans()):
        counter_set = draw(st.sampled_from(sorted(counter_sets)))
        raw["consumesCounters"] = [
            {"counterSet": counter_set, "counters": {"slices": {"value": str(draw(st.integers(1, 3)))}}}
        ]
    if draw(st.integers(0, 5)) == 0:
        raw["taints"] = [{"key": "maintenance", "value": "soon", "effect": "NoSchedule"}]
    return raw


@st.composite
def _pools(draw: Any, node: str) -> list[Obj]:
    slices: list[Obj] = []
    for driver in draw(st.sampled_from([DRIVERS[:1], DRIVERS[1:], DRIVERS])):
        counter_sets = (
            {f"gpu-{i}": draw(st.integers(1, 4)) for i in range(draw(st.integers(1, 2)))}
            if draw(st.booleans())
            else {}
        )
        devices = [
            draw(_device(f"{node}-{driver[0]}-{i}", driver, counter_sets))
            for i in range(draw(st.integers(0, 7)))
        ]
        count = 2 if counter_sets else 1
        # Same pool name for both drivers: counters must still be kept apart.
        pool = {"name": f"{node}-pool", "generation": 1, "resourceSliceCount": count}
        slices.append(
            {
                "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-{driver}-devices"},
                "spec": {"driver": driver, "pool": pool, "nodeName": node, "devices": devices},
            }
        )
        if counter_sets:
            slices.append(
                {
                    "kind": "ResourceSlice",
                    "metadata": {"name": f"{node}-{driver}-counters"},
                    "spec": {
                        "driver": driver,
                        "pool": pool,
                        "nodeName": node,
                        "sharedCounters": [
                            {"name": name, "counters": {"slices": {"value": str(value)}}}
                            for name, value in counter_sets.items()
                        ],
                    },
                }
            )
    return slices


CLASSES: list[Obj] = [
    {"kind": "DeviceClass", "metadata": {"name": "any"}, "spec": {}},
    *(
        {
            "kind": "DeviceClass",
            "metadata": {"name": driver.split(".")[0]},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
        }
        for driver in DRIVERS
    ),
]


@st.composite
def _request(draw: Any, name: str) -> Obj:
    spec: Obj = {
        "deviceClassName": draw(st.sampled_from(["any", "any", "a", "b"])),
        "count": draw(st.sampled_from([1, 1, 1, 2, 3])),
    }
    model = draw(st.sampled_from([None, None, "x", "y"]))
    if model:
        spec["selectors"] = [{"cel": {"expression": f'device.attributes[device.driver].model == "{model}"'}}]
    if draw(st.integers(0, 3)) == 0:
        spec["tolerations"] = [{"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}]
    shape = draw(st.integers(0, 9))
    if shape == 0:
        return {
            "name": name,
            "firstAvailable": [{"name": "big", **spec}, {"name": "one", **spec, "count": 1}],
        }
    if shape == 1:
        spec["capacity"] = {"requests": {"memory": f"{draw(st.integers(1, 4)) * 8}Gi"}}
    return {"name": name, "exactly": spec}


@st.composite
def _claim(draw: Any, name: str) -> Obj:
    requests = [draw(_request(f"r{i}")) for i in range(draw(st.sampled_from([1, 1, 2, 3])))]
    names = [r["name"] for r in requests]
    constraints = []
    for kind in ("matchAttribute", "distinctAttribute"):
        if draw(st.integers(0, 3)) == 0:
            attribute = draw(st.sampled_from([f"{DRIVERS[0]}/numa", f"{DRIVERS[1]}/numa"]))
            constraints.append({kind: attribute, "requests": draw(st.sampled_from([[], names[:1], names]))})
    return {
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": requests, "constraints": constraints}},
    }


@st.composite
def _cluster(draw: Any) -> tuple[list[Obj], Obj, list[str]]:
    nodes = [f"n{i}" for i in range(draw(st.integers(1, 3)))]
    objects: list[Obj] = [{"kind": "Node", "metadata": {"name": n, "labels": {}}} for n in nodes]
    for node in nodes:
        objects += draw(_pools(node))
    objects += CLASSES
    devices = [
        (s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"])
        for s in objects
        if s["kind"] == "ResourceSlice"
        for d in s["spec"].get("devices") or ()
    ]
    held = [d for d in devices if draw(st.integers(0, 4)) == 0]
    if held:
        objects.append(
            {
                "kind": "ResourceClaim",
                "metadata": {"name": "held", "namespace": "default", "uid": "held-uid"},
                "spec": {"devices": {"requests": []}},
                "status": {
                    "allocation": {
                        "devices": {
                            "results": [
                                {"request": "r", "driver": d, "pool": p, "device": n} for d, p, n in held
                            ]
                        }
                    },
                    "reservedFor": [{"uid": "someone-else"}],
                },
            }
        )
    claims = [draw(_claim(f"claim-{i}")) for i in range(draw(st.sampled_from([1, 1, 2])))]
    objects += claims
    pod = {
        "metadata": {"name": "pod", "namespace": "default", "uid": "pod-uid"},
        "spec": {
            "resourceClaims": [
                {"name": f"c{i}", "resourceClaimName": c["metadata"]["name"]} for i, c in enumerate(claims)
            ]
        },
    }
    return objects, pod, nodes


def _placement(objects: list[Obj]) -> Placement:
    return Placement(ClusterState.from_objects(objects), features=Features(), assumed=AssumeCache())


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=DERANDOMIZE,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(_cluster())
def test_fast_tiers_agree_with_the_search(case: tuple[list[Obj], Obj, list[str]]) -> None:
    objects, pod, nodes = case
    placement = _placement(objects)
    search_node = SearchTier(placement.search).verdict
    evaluation = placement.new_evaluation(parse_pod(pod))
    assert not evaluation.problem, evaluation.problem
    index = placement.index()
    allocated, free = placement.allocated_state()
    try:
        tiers.run(
            placement.new_evaluation(parse_pod(pod)),
            index,
            [],
            view=placement.view,
            tiers=placement.tiers,
            budget=placement.search.budget,
        )  # pod-level validation only
    except AllocationError:
        return  # invalid for every node alike (tested in tests/allocator/test_error_order.py)
    deadline = float("inf")

    truth = {n: search_node(evaluation, index, n, allocated, deadline).status == PASSED for n in nodes}

    requests = feasibility.simple_requests(evaluation.specs)
    if requests is not None:
        positions = np.array([index.node_pos[n] for n in nodes], dtype=np.int64)
        result = feasibility.check(index, requests, free, positions)
        empty = placement.new_evaluation(parse_pod(pod))
        for i, node in enumerate(nodes):
            if result.needs_search[i]:
                continue
            assert bool(result.fits[i]) == truth[node], ("vectorised", node)
            fits_if_free = search_node(empty, index, node, AllocatedState(), deadline).status == PASSED
            assert bool(result.fits_if_free[i]) == fits_if_free, ("vectorised, all free", node)

    kernel = placement.new_evaluation(parse_pod(pod))
    undecided = set(KernelTier(placement.ranker).settle(kernel, placement.view.snapshot(), list(nodes)))
    for node in nodes:
        if node not in undecided:
            assert (kernel.verdicts[node].status == PASSED) == truth[node], ("kernel", node)

    verdict = _placement(objects).filter(parse_pod(pod), list(nodes))
    assert verdict.error == ""
    assert {n: n in verdict.passed for n in nodes} == truth, ("filter", verdict)
