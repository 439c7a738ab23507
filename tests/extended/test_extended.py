"""Extended resources backed by DRA in the core (`extender.core.extended` through Placement):
which names qualify, which class a name maps to, what a pod needs, and filter, prioritize and
the bind choice on a small cluster with a DRA node, a device-plugin node and an empty node.
Upstream: kubernetes v1.36.3 extendeddynamicresources.go, extendedresourcecache.go."""

from __future__ import annotations

from typing import Any

import pytest

from extender.allocator.features import Features
from extender.cluster.state import ClusterState
from extender.core import binding, extended
from extender.core.assumed import AssumeCache
from extender.core.binding import IN_MEMORY, BindRefusal
from extender.core.placement import Placement
from extender.objects import Obj
from extender.pods import Pod, parse_pod
from tests.core import small_cluster as c

GPU = "example.com/gpu"


def gpu_pod(
    *containers: dict[str, Any], init: tuple[dict[str, Any], ...] = (), claims: tuple[Obj, ...] = ()
) -> Pod:
    spec: dict[str, Any] = {"containers": list(containers), "initContainers": list(init)}
    if claims:
        spec["resourceClaims"] = [
            {"name": f"c{i}", "resourceClaimName": x["metadata"]["name"]} for i, x in enumerate(claims)
        ]
    return parse_pod(
        {"kind": "Pod", "metadata": {"name": "job", "namespace": "default", "uid": "job-uid"}, "spec": spec}
    )


def limits(name: str, resources: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "image": "x", "resources": {"limits": resources}}


def mapped_class(name: str = c.GPU, resource: str | None = GPU, created: str | None = None) -> Obj:
    cls = c.gpu_class()
    cls["metadata"] = {"name": name, **({"creationTimestamp": created} if created else {})}
    if resource:
        cls["spec"] = {**cls["spec"], "extendedResourceName": resource}
    return cls


def plugin_node(name: str, amount: str) -> Obj:
    made = c.node(name)
    made["status"] = {"allocatable": {GPU: amount, "cpu": "8"}}
    return made


def cluster(*extra: Obj) -> list[Obj]:
    return [c.node("dra"), *c.gpus("dra", 4), plugin_node("dp", "8"), c.node("empty"), mapped_class(), *extra]


# ---------------------------------------------------------------------- names and classes


@pytest.mark.parametrize(
    ("name", "dra"),
    [
        (GPU, True),
        ("deviceclass.resource.kubernetes.io/gpu", True),  # implicit: in kubernetes.io, still DRA's
        ("cpu", False),
        ("hugepages-2Mi", False),
        ("kubernetes.io/foo", False),
        ("requests.example.com/gpu", False),
        ("example.com/", False),
        ("example.com/-bad", False),
    ],
)
def test_which_names_are_dra_extended_resource_names(name: str, dra: bool) -> None:
    assert extended.is_dra_extended_name(name) is dra


def test_explicit_and_implicit_names_map_to_their_class() -> None:
    state = ClusterState.from_objects([mapped_class("a", GPU), mapped_class("b", None)])
    assert extended.class_map(state) == {
        GPU: "a",
        "deviceclass.resource.kubernetes.io/a": "a",
        "deviceclass.resource.kubernetes.io/b": "b",
    }


def test_several_classes_with_one_name_the_newest_wins_then_the_lowest_name() -> None:
    older = mapped_class("zz-old", GPU, "2025-01-01T00:00:00Z")
    newer = mapped_class("yy-new", GPU, "2025-06-01T00:00:00Z")
    tie = mapped_class("aa-tie", GPU, "2025-06-01T00:00:00Z")
    assert extended.class_map(ClusterState.from_objects([newer, older]))[GPU] == "yy-new"
    assert extended.class_map(ClusterState.from_objects([older, newer]))[GPU] == "yy-new"
    assert extended.class_map(ClusterState.from_objects([newer, tie, older]))[GPU] == "aa-tie"


def test_the_map_follows_the_state() -> None:
    state = ClusterState.from_objects([mapped_class("a", None)])
    assert GPU not in extended.class_map(state)
    state.upsert({**mapped_class("a", GPU), "kind": "DeviceClass"})
    assert extended.class_map(state)[GPU] == "a"


# ---------------------------------------------------------------------- the pod's needs


def test_limits_default_requests_and_init_containers_take_the_maximum() -> None:
    pod = gpu_pod(
        limits("a", {GPU: "1"}),
        limits("b", {GPU: 2}),
        init=(
            limits("i0", {GPU: "4"}),
            {**limits("side", {GPU: "1"}), "restartPolicy": "Always"},
            limits("i2", {GPU: "3"}),
        ),
    )
    needs = extended.needs_of(pod, {GPU: "gpu"})
    assert needs is not None
    # containers 1 + 2 + the sidecar 1 = 4; init peaks: i0 = 4, i2 = 3 + sidecar 1 = 4.
    assert dict(needs.totals) == {GPU: 4}
    assert [(x.name, dict(x.counts), x.long_lived) for x in needs.containers] == [
        ("i0", {GPU: 4}, False),
        ("side", {GPU: 1}, True),
        ("i2", {GPU: 3}, False),
        ("a", {GPU: 1}, True),
        ("b", {GPU: 2}, True),
    ]


def test_a_pod_no_class_maps_is_not_an_extended_resource_pod() -> None:
    assert extended.needs_of(gpu_pod(limits("a", {"other.com/fpga": "1"})), {GPU: "gpu"}) is None
    assert extended.needs_of(gpu_pod(limits("a", {GPU: "0"})), {GPU: "gpu"}) is None
    assert extended.needs_of(gpu_pod(limits("a", {"cpu": "1"})), {GPU: "gpu"}) is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("-1", "must be greater than or equal to 0, got -1"),
        ("1.5", "must be a whole number (extended resources are counted in devices), got 1.5"),
        ("500m", "must be a whole number (extended resources are counted in devices), got 500m"),
        ("two", "two"),
    ],
)
def test_a_bad_quantity_is_a_pod_problem_naming_the_field(value: str, message: str) -> None:
    needs = extended.needs_of(gpu_pod(limits("main", {GPU: value})), {GPU: "gpu"})
    assert needs is not None
    assert needs.problem.startswith(f'pod default/job: containers[main].resources.requests["{GPU}"]: ')
    assert message in needs.problem


# ---------------------------------------------------------------------- filter, prioritize, bind


def test_filter_dra_node_passes_device_plugin_node_is_left_to_the_plugin_empty_node_fails() -> None:
    placement = c.placement(cluster())
    verdict = placement.filter(gpu_pod(limits("main", {GPU: "2"})), ["dra", "dp", "empty"])
    assert verdict.error == ""
    assert verdict.passed == ["dra", "dp"]
    assert "2 device(s) of class gpu do not exist on the node" in verdict.unresolvable["empty"]
    assert "default/<extended-resources>" in verdict.unresolvable["empty"]


def test_filter_counts_devices_held_by_other_claims() -> None:
    placement = c.placement(cluster(c.held("taken", "dra", ["gpu-0", "gpu-1", "gpu-2"])))
    verdict = placement.filter(gpu_pod(limits("main", {GPU: "2"})), ["dra"])
    assert verdict.passed == []
    assert "dra" in verdict.failed  # in use: freeing devices would help


def test_a_node_listing_zero_goes_to_dra_and_an_unmapped_resource_fails_where_not_listed() -> None:
    zero = plugin_node("zero", "0")
    placement = c.placement([*cluster(zero), *c.gpus("zero", 2)])
    pod = gpu_pod(limits("main", {GPU: "2", "vendor.io/thing": "1"}))
    verdict = placement.filter(pod, ["dra", "zero"])
    assert verdict.passed == []
    assert verdict.failed["dra"].startswith("cannot fit resource vendor.io/thing")
    assert verdict.failed["zero"].startswith("cannot fit resource vendor.io/thing")
    assert placement.filter(gpu_pod(limits("main", {GPU: "2"})), ["zero"]).passed == ["zero"]


def test_a_bad_quantity_makes_every_node_unresolvable() -> None:
    placement = c.placement(cluster())
    verdict = placement.filter(gpu_pod(limits("main", {GPU: "1.5"})), ["dra", "dp"])
    assert verdict.passed == []
    assert set(verdict.unresolvable) == {"dra", "dp"}


def test_user_claims_and_extended_resources_must_fit_together() -> None:
    mine = c.claim("mine", 3)
    placement = c.placement(cluster(mine))
    both = gpu_pod(limits("main", {GPU: "2"}), claims=(mine,))
    verdict = placement.filter(both, ["dra", "dp"])
    # dra: 3 + 2 of its 4 GPUs; dp: its device plugin would serve the 2, but the claim's 3 have no
    # devices there.
    assert verdict.passed == []
    assert "cannot allocate all claims" in verdict.unresolvable["dra"]
    assert "default/mine" in verdict.unresolvable["dp"]
    one = gpu_pod(limits("main", {GPU: "1"}), claims=(mine,))
    assert placement.filter(one, ["dra"]).passed == ["dra"]


def test_prioritize_scores_dra_nodes_and_gives_device_plugin_nodes_zero() -> None:
    placement = c.placement([*cluster(), c.node("dra2"), *c.gpus("dra2", 2)])
    scores = {
        s.host: s.score
        for s in placement.prioritize(gpu_pod(limits("main", {GPU: "2"})), ["dra", "dra2", "dp"])
    }
    assert scores["dp"] == 0
    assert max(scores["dra"], scores["dra2"]) == 10  # a DRA node is ranked by its devices


def test_bind_choice_carries_the_claim_to_create_and_its_mappings() -> None:
    placement = c.placement(cluster())
    pod = gpu_pod(limits("main", {GPU: "2"}))
    choice = binding.choose_for_bind(placement, pod, "dra", wording=IN_MEMORY)
    assert choice.extended is not None
    assert [x.name for x in choice.claims.pending] == [extended.IN_MEMORY_NAME]
    assert choice.extended.mappings == (
        {"containerName": "main", "resourceName": GPU, "requestName": "container-0-request-0"},
    )
    [allocation] = choice.allocations
    assert len(allocation.devices) == 2
    source = choice.extended.source
    assert source["metadata"]["generateName"] == "job-extended-resources-"
    assert source["metadata"]["annotations"] == {extended.CLAIM_ANNOTATION: "true"}
    body = extended.for_create(source)
    assert "name" not in body["metadata"] and "uid" not in body["metadata"]


def test_bind_choice_on_a_device_plugin_node_creates_nothing() -> None:
    choice = binding.choose_for_bind(
        c.placement(cluster()), gpu_pod(limits("main", {GPU: "2"})), "dp", wording=IN_MEMORY
    )
    assert choice.extended is None and choice.allocations == []


def test_bind_refuses_a_node_missing_an_unmapped_resource() -> None:
    pod = gpu_pod(limits("main", {GPU: "1", "vendor.io/thing": "1"}))
    with pytest.raises(BindRefusal) as caught:
        binding.choose_for_bind(c.placement(cluster()), pod, "dra", wording=IN_MEMORY)
    assert "cannot fit resource vendor.io/thing" in caught.value.message


def test_a_claim_left_from_an_earlier_cycle_fails_every_node() -> None:
    stale = c.claim("job-extended-resources-abcde", 2)
    stale["metadata"]["annotations"] = {extended.CLAIM_ANNOTATION: "true"}
    stale["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "job", "uid": "job-uid", "controller": True}
    ]
    verdict = c.placement(cluster(stale)).filter(gpu_pod(limits("main", {GPU: "2"})), ["dra", "dp"])
    assert verdict.passed == []
    assert verdict.failed["dra"].startswith(extended.STALE_CLAIM)  # Unschedulable: FailedNodes


def test_with_the_gate_off_extended_resources_are_not_ours() -> None:
    """DRAExtendedResource=false: upstream's plugin and NodeResourcesFit ignore the mapping;
    the pod has nothing for the extender (every node passes, bind writes nothing)."""
    placement = Placement(
        ClusterState.from_objects(cluster()),
        features=Features.from_gates({"DRAExtendedResource": False}),
        assumed=AssumeCache(clock=lambda: 0.0),
    )
    pod = gpu_pod(limits("main", {GPU: "2"}))
    assert placement.filter(pod, ["dra", "empty"]).passed == ["dra", "empty"]
    choice = binding.choose_for_bind(placement, pod, "dra", wording=IN_MEMORY)
    assert choice.extended is None and choice.allocations == []
