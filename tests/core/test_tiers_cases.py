"""Hand-built cases for the first-fit tier: its verdicts and reasons, and where it must step aside.

Scope: MIG-style nodes (a GPU whose full device and partitions share counters) decided by the
first-fit kernel with the same texts upstream's search gives ("in use" -> FailedNodes, "do not
exist" -> unresolvable); nodes the kernel must leave to the search (counters already overdrawn,
an `All` request counting more than 32 devices, which upstream rejects as a claim error even when
an earlier request already fails) get exactly the search's verdict.
"""

from __future__ import annotations

from typing import Any

from extender.allocator.features import Features
from extender.cluster.state import ClusterState
from extender.core.assumed import AssumeCache
from extender.core.reasons import FAILED, PASSED, UNRESOLVABLE, NodeVerdict
from extender.core.tiers import SearchTier
from extender.pods import parse_pod
from tests.core.test_tiers_property import DRIVER, RecordingPlacement, device

CLASS = {
    "kind": "DeviceClass",
    "metadata": {"name": "gpu"},
    "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
}


def gpu_node(node: str, partitions: int, extra_plain: int = 0) -> list[dict[str, Any]]:
    """One 8-slot GPU (full device consumes all 8) with `partitions` 1-slot partitions."""
    parent = f"{node}/gpu-0"
    devices = [device("gpu-0", "full", parent, 8, {"memory": "80Gi", "slots": "8"})]
    devices += [
        device(f"gpu-0-p{p}", "part", parent, 1, {"memory": "10Gi", "slots": "1"}) for p in range(partitions)
    ]
    devices += [device(f"nic-{k}", "nic", f"{node}/nic", 1, None) for k in range(extra_plain)]
    pool = {"name": node, "generation": 1, "resourceSliceCount": 2}
    counters = [{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}, "slots": {"value": "8"}}}]
    return [
        {"kind": "Node", "metadata": {"name": node}},
        {
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-devices"},
            "spec": {"driver": DRIVER, "pool": pool, "nodeName": node, "devices": devices},
        },
        {
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-counters"},
            "spec": {"driver": DRIVER, "pool": pool, "nodeName": node, "sharedCounters": counters},
        },
    ]


def held(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    results = [{"request": "held", "driver": DRIVER, "pool": p, "device": d} for p, d in pairs]
    return {
        "kind": "ResourceClaim",
        "metadata": {"name": "held", "namespace": "default", "uid": "held-uid"},
        "spec": {"devices": {"requests": []}},
        "status": {"allocation": {"devices": {"results": results}}, "reservedFor": [{"uid": "x"}]},
    }


def claim(requests: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "kind": "ResourceClaim",
        "metadata": {"name": "want", "namespace": "default", "uid": "want-uid"},
        "spec": {"devices": {"requests": requests}},
    }


def of_type(kind: str, **extra: Any) -> dict[str, Any]:
    expression = f'device.attributes["{DRIVER}"].type == "{kind}"'
    return {"deviceClassName": "gpu", "selectors": [{"cel": {"expression": expression}}], **extra}


POD = {
    "metadata": {"name": "pod", "namespace": "default", "uid": "pod-uid"},
    "spec": {"resourceClaims": [{"name": "c", "resourceClaimName": "want"}]},
}


def decide(objects: list[dict[str, Any]]) -> tuple[RecordingPlacement, dict[str, NodeVerdict]]:
    state = ClusterState.from_objects(
        [{"kind": "Namespace", "metadata": {"name": "default"}}, CLASS, *objects]
    )
    placement = RecordingPlacement(state, features=Features.from_gates(), assumed=AssumeCache())
    placement.decided_by_first_fit = set()
    nodes = [o["metadata"]["name"] for o in objects if o["kind"] == "Node"]
    placement.filter(parse_pod(POD), nodes)
    return placement, placement.evaluate(parse_pod(POD), nodes).verdicts


def search_verdict(placement: RecordingPlacement, name: str) -> NodeVerdict:
    evaluation = placement.evaluate(parse_pod(POD), [name])
    allocated, _ = placement.allocated_state()
    return SearchTier(placement.search).verdict(evaluation, placement.index(), name, allocated, float("inf"))


def test_partitions_pass_fail_in_use_or_do_not_exist_with_the_searchs_reasons() -> None:
    objects = [*gpu_node("free", 2), *gpu_node("busy", 2), *gpu_node("none", 0)]
    objects.append(held([("busy", "gpu-0")]))  # the full GPU takes every counter
    objects.append(claim([{"name": "r", "exactly": of_type("part", count=2)}]))
    placement, verdicts = decide(objects)
    assert placement.decided_by_first_fit == {"free", "busy"}  # "none" has no counter devices: Hall
    assert verdicts["free"].status == PASSED
    assert verdicts["busy"].status == FAILED
    assert (
        verdicts["busy"].reason
        == "cannot allocate all claims: the devices claims default/want need are in use"
    )
    assert verdicts["none"].status == UNRESOLVABLE
    assert "claim default/want, request r: 2 device(s) of class gpu do not exist" in verdicts["none"].reason
    for name in ("free", "busy"):
        assert verdicts[name] == search_verdict(placement, name)


def test_first_available_falls_back_to_partitions_when_the_full_gpu_is_taken() -> None:
    objects = [*gpu_node("n", 3)]
    objects.append(held([("n", "gpu-0-p0")]))  # one partition held: the full GPU no longer fits
    objects.append(
        claim(
            [
                {
                    "name": "r",
                    "firstAvailable": [
                        {"name": "full", **of_type("full")},
                        {"name": "two", **of_type("part", count=2)},
                    ],
                }
            ]
        )
    )
    placement, verdicts = decide(objects)
    assert verdicts["n"].status == PASSED and "n" in placement.decided_by_first_fit
    evaluation = placement.evaluate(parse_pod(POD), ["n"])
    chosen, _ = evaluation.first_fit_sets.gather(["n"])
    index = placement.index()
    assert [index.row_device[r].name for r in chosen[0] if r >= 0] == ["gpu-0-p1", "gpu-0-p2"]
    scores = placement.scores(evaluation, ["n"])
    assert scores.get("n").preference == (8 - 1) / 8  # the second subrequest, as upstream scores it


def test_overdrawn_counters_are_left_to_the_search() -> None:
    objects = [*gpu_node("n", 2, extra_plain=1)]
    objects.append(held([("n", "gpu-0"), ("n", "gpu-0-p0")]))  # 8 + 1 slots of 8: overdrawn
    objects.append(claim([{"name": "r", "exactly": of_type("part")}]))
    placement, verdicts = decide(objects)
    assert "n" not in placement.decided_by_first_fit
    assert verdicts["n"] == search_verdict(placement, "n")


def test_all_over_the_claim_limit_is_the_searchs_error_even_behind_a_failing_request() -> None:
    objects = [*gpu_node("n", 0, extra_plain=40)]
    objects.append(
        claim(
            [
                {"name": "a", "exactly": of_type("part")},
                {"name": "b", "exactly": of_type("nic", allocationMode="All")},
            ]
        )
    )
    placement, verdicts = decide(objects)
    assert "n" not in placement.decided_by_first_fit
    assert verdicts["n"].status == UNRESOLVABLE
    assert "exceeds the claim limit of 32" in verdicts["n"].reason


def test_all_takes_every_selected_device_or_fails_when_one_is_held() -> None:
    objects = [*gpu_node("free", 3), *gpu_node("busy", 3)]
    objects.append(held([("busy", "gpu-0-p2")]))
    objects.append(claim([{"name": "r", "exactly": of_type("part", allocationMode="All")}]))
    placement, verdicts = decide(objects)
    assert placement.decided_by_first_fit == {"free", "busy"}
    assert verdicts["free"].status == PASSED
    assert verdicts["busy"] == search_verdict(placement, "busy")
    assert verdicts["busy"].status == FAILED
