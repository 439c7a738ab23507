"""Deliberate differences from the upstream allocator v0.36.2 (docs/upstream-differences.md).

Each test is the minimal case from that document: upstream's answer breaks an invariant the API
itself states, ours keeps it. If one of these fails, either the allocator regressed to
upstream's defect or the document no longer describes what we do.
"""

from __future__ import annotations

from extender.allocator.features import Features
from tests.allocator.builders import claim, device, device_class, devices_of, pool_slices, request, run

DRIVER = "gpu.example.com"
ANY_CLASS = {"metadata": {"name": "any"}, "spec": {"selectors": [{"cel": {"expression": "true"}}]}}
TAINT = [{"key": "maintenance", "value": "soon", "effect": "NoSchedule"}]


def test_a_counters_of_a_device_turned_away_by_its_taint_are_given_back() -> None:
    """Upstream: gpu-0 passes the counter check, its taint rejects it, its 2 units stay consumed,
    so gpu-1 exceeds the set and the claim is unschedulable. Ours: gpu-1."""
    slices = pool_slices(
        DRIVER,
        "pool",
        [
            device("gpu-0", counters={"memory": {"mem": 2}}, taints=TAINT),
            device("gpu-1", counters={"memory": {"mem": 2}}),
        ],
        counter_sets={"memory": {"mem": 2}},
    )
    result = run(slices, [device_class("gpu", DRIVER)], [claim("c", [request("r", "gpu")])])
    assert devices_of(result) == [["gpu-1"]]


def test_a_counters_of_a_device_turned_away_by_a_constraint_are_given_back() -> None:
    """Same as above with a failed matchAttribute as the late rejection."""
    slices = pool_slices(
        DRIVER,
        "pool",
        [
            device("gpu-0", attrs={"group": 1}, counters={"memory": {"mem": 2}}),
            device("gpu-1", attrs={"group": 2}, counters={"memory": {"mem": 2}}),
            device("gpu-2", attrs={"group": 2}, counters={"memory": {"mem": 2}}),
        ],
        counter_sets={"memory": {"mem": 4}},
    )
    first = request(
        "first", "gpu", selectors=[{"cel": {"expression": 'device.attributes["gpu.example.com"].group == 2'}}]
    )
    claims = [claim("c", [first, request("second", "gpu")], [{"matchAttribute": f"{DRIVER}/group"}])]
    # first takes gpu-1 (2 units); second tries gpu-0: counters fit (4), the constraint rejects
    # it; upstream keeps its 2 units, so gpu-2 no longer fits (6 > 4).
    assert devices_of(run(slices, [device_class("gpu", DRIVER)], claims)) == [["gpu-1", "gpu-2"]]


def test_a_undoing_a_multi_allocatable_device_gives_its_counters_back() -> None:
    """Upstream: the first request takes the shared device mig-0 (2 units), the second request
    cannot match its group, the search backtracks, mig-0's 2 units stay consumed and gpu-1 no
    longer fits: unschedulable. Ours: gpu-1 and nic-1."""
    slices = pool_slices(
        DRIVER,
        "pool",
        [
            device(
                "mig-0", attrs={"group": 1}, counters={"memory": {"mem": 2}}, allowMultipleAllocations=True
            ),
            device("gpu-1", attrs={"group": 2}, counters={"memory": {"mem": 2}}),
            device("nic-1", attrs={"group": 2, "nic": True}),
        ],
        counter_sets={"memory": {"mem": 2}},
    )
    nic = [{"cel": {"expression": f'"nic" in device.attributes["{DRIVER}"]'}}]
    not_nic = [{"cel": {"expression": f'!("nic" in device.attributes["{DRIVER}"])'}}]
    claims = [
        claim(
            "c",
            [request("accel", "gpu", selectors=not_nic), request("net", "gpu", selectors=nic)],
            [{"matchAttribute": f"{DRIVER}/group"}],
        )
    ]
    assert devices_of(run(slices, [device_class("gpu", DRIVER)], claims)) == [["gpu-1", "nic-1"]]


def test_b_same_named_pools_of_two_drivers_have_separate_counters() -> None:
    """Upstream keys counter accounting by pool name: the second driver's device sees the first
    one's consumption (4 > 2) and the claim is unschedulable. Ours: one device of each."""
    slices = [
        *pool_slices(
            "a.example.com", "pool", [device("dev-a", counters={"cs": {"mem": 2}})], {"cs": {"mem": 2}}
        ),
        *pool_slices(
            "b.example.com", "pool", [device("dev-b", counters={"cs": {"mem": 2}})], {"cs": {"mem": 2}}
        ),
    ]
    result = run(slices, [ANY_CLASS], [claim("c", [request("r", "any", count=2)])])
    assert devices_of(result) == [["dev-a", "dev-b"]]


def test_b_same_named_pools_never_exceed_either_counter_set() -> None:
    """The other face of (b): with pool-name keys a set can also be over-allocated (the other
    driver's larger set hides the overflow). Each set here holds one device."""
    slices = [
        *pool_slices(
            "a.example.com",
            "pool",
            [device(f"dev-a{i}", counters={"cs": {"mem": 2}}) for i in range(2)],
            {"cs": {"mem": 2}},
        ),
        *pool_slices(
            "b.example.com", "pool", [device("dev-b", counters={"cs": {"mem": 1}})], {"cs": {"mem": 8}}
        ),
    ]
    assert run(slices, [ANY_CLASS], [claim("c", [request("r", "any", count=3)])]) is None
    result = run(slices, [ANY_CLASS], [claim("c", [request("r", "any", count=2)])])
    assert devices_of(result) == [["dev-a0", "dev-b"]]


def test_c_distinct_attribute_is_distinct_across_all_devices_of_a_request() -> None:
    """Upstream remembers one value per request: numa-0b is compared only with numa-1 (the last
    device of the request) and is taken, a duplicate. Ours skips it and takes numa-2."""
    slices = pool_slices(
        DRIVER,
        "pool",
        [
            device("numa-0a", attrs={"numa": 0}),
            device("numa-1", attrs={"numa": 1}),
            device("numa-0b", attrs={"numa": 0}),
            device("numa-2", attrs={"numa": 2}),
        ],
    )
    claims = [claim("c", [request("r", "gpu", count=3)], [{"distinctAttribute": f"{DRIVER}/numa"}])]
    assert devices_of(run(slices, [device_class("gpu", DRIVER)], claims)) == [["numa-0a", "numa-1", "numa-2"]]
    # Without numa-2 no three distinct values exist: upstream allocates a duplicate, we refuse.
    fewer = pool_slices(
        DRIVER, "pool", [device(n, attrs={"numa": v}) for n, v in (("a", 0), ("b", 1), ("c", 0))]
    )
    assert run(fewer, [device_class("gpu", DRIVER)], claims) is None


def test_features_default_is_kubernetes_1_36() -> None:
    assert Features() == Features.from_gates()
