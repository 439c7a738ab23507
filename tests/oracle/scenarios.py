"""Hypothesis strategies for allocator scenarios, in the format of tests/data/conformance.

One scenario is one node (`node-1`), the slices of two drivers (some on another node, some
incomplete or invalid), three device classes, one or two claims allocated together, devices and
shares held by other claims, and the allocator's feature switches. Every feature the allocator
has is drawn: shared counters (partitionable devices), `firstAvailable`, `allocationMode: All`,
match/distinct constraints over scalar and list attributes, taints and tolerations, consumable
capacity and multi-allocatable devices, admin access, binding conditions, per-device node
selection, and invalid pools; and Kubernetes 1.37's fields (compatibility groups, derived
attributes, skipped node operations with the node's declared features, fractional capacity
ranges), which the 1.36 oracle and ours as 1.36 ignore. Sizes stay small (a handful of devices
per pool): disagreements show up on small inputs, and small inputs keep thousands of cases within a CI budget.

A rare event is drawn as `integers(0, N) == N`, not `== 0`: hypothesis starts from and shrinks
towards small draws, and the rare branch should not be its default.

Objects are what the API server would accept (names, one value per attribute, counters that
exist); what upstream's allocator refuses by itself (unknown classes, invalid pools) is drawn on
purpose now and then.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

Obj = dict[str, Any]
NODE = "node-1"
OTHER_NODE = "node-2"
DRIVERS = ("gpu.example.com", "nic.example.com")
FEATURES = (
    "AdminAccess",
    "PrioritizedList",
    "PartitionableDevices",
    "DeviceTaints",
    "ConsumableCapacity",
    "DeviceBindingAndStatus",
    "ListTypeAttributes",
    # Kubernetes 1.37's (the 1.36 oracle and ours as 1.36 ignore them, as their Features do).
    "CompatibilityGroups",
    "DerivedAttributes",
    "FractionalCapacityRange",
    "OptionalNodeOperations",
)
# Kubernetes 1.37 derived attributes a request may define, and constraints may then compare.
DERIVED = (
    ("example.com/fam", "device.attributes[device.driver].family"),
    ("example.com/fam", '"same"'),
    ("example.com/fam", "device.attributes[device.driver].model"),
)
FAMILIES = ("ampere", "hopper", "ada")
TAINT_EFFECTS = ("NoSchedule", "NoExecute", "None")
CLASSES: list[Obj] = [
    {
        "metadata": {"name": "gpu"},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]},
    },
    {
        "metadata": {"name": "nic"},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "nic.example.com"'}}]},
    },
    {"metadata": {"name": "any"}, "spec": {}},
]
CLASS_CONFIG: Obj = {
    "opaque": {"driver": "gpu.example.com", "parameters": {"apiVersion": "example.com/v1", "kind": "Config"}}
}
# Guarded so that most devices evaluate without error (`false && error` is false in CEL); the last
# one fails at runtime on devices without the key, which upstream reports as an error.
SELECTORS = (
    'device.driver == "gpu.example.com" && device.attributes["gpu.example.com"].model == "x"',
    '"family" in device.attributes[device.driver] && device.attributes[device.driver].family != "ada"',
    '"numa" in device.attributes["nic.example.com"]',
    '"memory" in device.capacity[device.driver] && '
    'device.capacity[device.driver].memory.compareTo(quantity("16Gi")) >= 0',
    'device.attributes["gpu.example.com"].family == "hopper"',
)


@st.composite
def features(draw: Any) -> dict[str, bool]:
    # All on half the time (most code paths need their feature); else each off now and then,
    # to see it refused or ignored.
    if draw(st.booleans()):
        return dict.fromkeys(FEATURES, True)
    return {name: draw(st.integers(0, 7)) > 0 for name in FEATURES}


@st.composite
def _attributes(draw: Any, lists: bool) -> Obj:
    out: Obj = {"model": {"string": draw(st.sampled_from(["x", "y"]))}}
    if draw(st.integers(0, 5)) > 0:
        out["family"] = {"string": draw(st.sampled_from(FAMILIES))}
    if draw(st.integers(0, 5)) > 0:
        out["numa"] = {"int": draw(st.integers(0, 2))}
    if draw(st.booleans()):
        out["resource.kubernetes.io/numaNode"] = {"int": draw(st.integers(0, 1))}
    if lists and draw(st.booleans()):
        out["numas"] = {"ints": sorted(draw(st.sets(st.integers(0, 3), min_size=1, max_size=3)))}
    return out


@st.composite
def _device(draw: Any, name: str, counter_sets: dict[str, int], *, per_device_node: bool, lists: bool) -> Obj:
    device: Obj = {"name": name, "attributes": draw(_attributes(lists))}
    shape = draw(st.integers(0, 9))
    if shape == 0:
        # Multi-allocatable with a capacity policy: shares consume capacity.
        device["allowMultipleAllocations"] = True
        device["capacity"] = {
            "memory": {
                "value": "40Gi",
                "requestPolicy": {
                    "default": "10Gi",
                    "validRange": {"min": "10Gi", "max": "40Gi", "step": "10Gi"},
                },
            }
        }
        if draw(st.integers(0, 3)) == 3:
            # A fractional range (1.37 DRAFractionalCapacityRange; whole numbers without it).
            device["capacity"]["memory"] = {
                "value": "4",
                "requestPolicy": {
                    "default": "500m",
                    "validRange": {"min": "500m", "max": "4", "step": "250m"},
                },
            }
    elif shape < 5:
        device["capacity"] = {"memory": {"value": f"{draw(st.sampled_from([8, 16, 40]))}Gi"}}
    if counter_sets and draw(st.booleans()):
        counter_set = draw(st.sampled_from(sorted(counter_sets)))
        device["consumesCounters"] = [
            {"counterSet": counter_set, "counters": {"mem": {"value": f"{draw(st.integers(1, 3))}Gi"}}}
        ]
        if draw(st.integers(0, 4)) == 4:
            # 1.37 compatibility groups (a slice using them is ignored while the gate is off).
            groups = draw(st.sampled_from([["a"], ["b"], ["a", "b"]]))
            device["consumesCounters"][0]["compatibilityGroups"] = groups
    if draw(st.integers(0, 5)) == 5:
        taint: Obj = {"key": "example.com/maintenance", "effect": draw(st.sampled_from(TAINT_EFFECTS))}
        if draw(st.booleans()):
            taint["value"] = "soon"
        device["taints"] = [taint]
    if draw(st.integers(0, 7)) == 7:
        device["bindingConditions"] = ["example.com/ready"]
        device["bindingFailureConditions"] = ["example.com/failed"]
        if draw(st.booleans()):
            device["bindsToNode"] = True
    if per_device_node:
        where = draw(st.integers(0, 3))
        if where == 0:
            device["nodeName"] = NODE
        elif where == 1:
            device["nodeName"] = OTHER_NODE
        elif where == 2:
            device["allNodes"] = True
        else:
            device["nodeSelector"] = _zone_selector(draw(st.sampled_from(["a", "b"])))
    return device


def _zone_selector(zone: str) -> Obj:
    return {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": [zone]}]}]
    }


@st.composite
def _pool(draw: Any, driver: str, number: int, *, shared_names: bool, lists: bool) -> list[Obj]:
    """The slices of one pool: devices in one or two slices, maybe a counter slice."""
    prefix = driver.split(".")[0]
    # Pools of two drivers named alike share upstream's counter bookkeeping (difference (b)).
    pool = f"pool-{number}" if shared_names else f"{prefix}-pool-{number}"
    counter_sets = (
        {f"cs-{i}": draw(st.integers(2, 6)) for i in range(draw(st.integers(1, 2)))}
        if draw(st.booleans())
        else {}
    )
    placement = draw(
        st.sampled_from(["node", "node", "node", "other-node", "all-nodes", "per-device", "selector"])
    )
    per_device = placement == "per-device"
    names = [f"{prefix}-{number}-{i}" for i in range(draw(st.integers(1, 5)))]
    if draw(st.integers(0, 30)) == 30 and len(names) > 1:
        names[-1] = names[0]  # a device name twice: the pool is invalid
    devices = [draw(_device(name, counter_sets, per_device_node=per_device, lists=lists)) for name in names]
    split = draw(st.integers(0, len(devices)))
    groups = [g for g in (devices[:split], devices[split:]) if g] or [[]]
    counters_slice: list[Obj] = []
    if counter_sets:
        counters_slice = [
            {
                "sharedCounters": [
                    {"name": name, "counters": {"mem": {"value": f"{amount}Gi"}}}
                    for name, amount in counter_sets.items()
                ]
            }
        ]
    specs = [{"devices": g} for g in groups] + counters_slice
    count = len(specs) + (1 if draw(st.integers(0, 30)) == 30 else 0)  # now and then incomplete
    # Now and then a stale slice of an older generation, which the allocator must ignore.
    stale = draw(st.integers(0, 20)) == 20
    zone = draw(st.sampled_from(["a", "a", "b"]))
    skip_operations = draw(st.integers(0, 8)) == 8
    slices = []
    for index, extra in enumerate(specs):
        generation = 1 if stale and index == 0 else (2 if stale else 1)
        spec: Obj = {
            "driver": driver,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
        }
        if placement == "node" or (placement == "per-device" and "sharedCounters" in extra):
            spec["nodeName"] = NODE
        elif placement == "other-node":
            spec["nodeName"] = OTHER_NODE
        elif placement == "all-nodes":
            spec["allNodes"] = True
        elif placement == "selector":
            spec["nodeSelector"] = _zone_selector(zone)
        else:
            spec["perDeviceNodeSelection"] = True
        spec.update(extra)
        if skip_operations and "devices" in extra:
            spec["skipNodeOperations"] = ["*"]  # 1.37 DRAOptionalNodeOperations
        slices.append({"metadata": {"name": f"{prefix}-{pool}-{index}"}, "spec": spec})
    return slices


@st.composite
def _request_body(draw: Any, class_names: list[str]) -> Obj:
    body: Obj = {"deviceClassName": draw(st.sampled_from(class_names))}
    if draw(st.integers(0, 5)) == 5:
        body["allocationMode"] = "All"
    else:
        body["count"] = draw(st.integers(1, 3))
    if draw(st.integers(0, 4)) == 4:
        body["selectors"] = [{"cel": {"expression": draw(st.sampled_from(SELECTORS))}}]
    if draw(st.integers(0, 3)) == 3:
        toleration: Obj = {"key": "example.com/maintenance"}
        if draw(st.booleans()):
            toleration["operator"] = "Exists"
        else:
            toleration["value"] = "soon"
        if draw(st.booleans()):
            toleration["effect"] = draw(st.sampled_from(TAINT_EFFECTS[:2]))
        body["tolerations"] = [toleration]
    if draw(st.integers(0, 4)) == 4:
        amount = draw(st.sampled_from(["5Gi", "10Gi", "20Gi", "20Gi", "750m"]))
        body["capacity"] = {"requests": {"memory": amount}}
    if draw(st.integers(0, 6)) == 6:
        name, expression = draw(st.sampled_from(DERIVED))
        body["derivedAttributes"] = [{"name": name, "expression": expression}]
    if draw(st.integers(0, 12)) == 12:
        body["adminAccess"] = True
    return body


@st.composite
def _claim(draw: Any, number: int) -> Obj:
    class_names = [c["metadata"]["name"] for c in CLASSES]
    if draw(st.integers(0, 60)) == 60:
        class_names = ["missing"]  # an unknown class: an error, not unschedulable
    requests = []
    for r in range(draw(st.integers(1, 2))):
        name = f"req-{r}"
        if draw(st.integers(0, 3)) == 3:
            subs = [
                {"name": f"sub-{s}", **draw(_request_body(class_names))}
                for s in range(draw(st.integers(1, 3)))
            ]
            requests.append({"name": name, "firstAvailable": subs})
        else:
            requests.append({"name": name, "exactly": draw(_request_body(class_names))})
    devices: Obj = {"requests": requests}
    constraints = []
    for _ in range(draw(st.integers(0, 2))):
        kind = draw(st.sampled_from(["matchAttribute", "distinctAttribute"]))
        attribute = draw(
            st.sampled_from(
                [
                    "gpu.example.com/numa",
                    "gpu.example.com/family",
                    "resource.kubernetes.io/numaNode",
                    "resource.kubernetes.io/numas",
                    "example.com/fam",
                ]
            )
        )
        constraint: Obj = {kind: attribute}
        if len(requests) > 1 and draw(st.booleans()):
            constraint["requests"] = [requests[0]["name"]]
        constraints.append(constraint)
    if constraints:
        devices["constraints"] = constraints
    if draw(st.integers(0, 5)) == 5:
        config: Obj = {"opaque": {"driver": "gpu.example.com", "parameters": {"kind": "ClaimConfig"}}}
        if draw(st.booleans()):
            config["requests"] = [requests[0]["name"]]
        devices["config"] = [config]
    return {"metadata": {"name": f"claim-{number}", "namespace": "default"}, "spec": {"devices": devices}}


def _device_ids(slices: list[Obj]) -> list[str]:
    return sorted(
        {
            f"{s['spec']['driver']}/{s['spec']['pool']['name']}/{d['name']}"
            for s in slices
            for d in s["spec"].get("devices", [])
        }
    )


@st.composite
def scenarios(draw: Any) -> Obj:
    """One scenario; `name` is filled in by the caller."""
    switches = draw(features())
    # List attributes without the feature make CEL fail on the device: now and then only.
    lists = switches["ListTypeAttributes"] or draw(st.integers(0, 9)) == 9
    slices: list[Obj] = []
    shared_names = draw(st.integers(0, 3)) == 3
    for driver in draw(st.sampled_from([DRIVERS[:1], DRIVERS, DRIVERS])):
        for number in range(draw(st.integers(1, 2))):
            slices += draw(_pool(driver, number, shared_names=shared_names, lists=lists))
    # The list attribute is a standard one, so constraints can compare it across drivers.
    for s in slices:
        for device in s["spec"].get("devices", []):
            for attribute in ("numas",):
                if attribute in device["attributes"]:
                    device["attributes"][f"resource.kubernetes.io/{attribute}"] = device["attributes"].pop(
                        attribute
                    )
    classes = [dict(c) for c in CLASSES]
    if draw(st.integers(0, 4)) == 4:
        classes[0] = {**classes[0], "spec": {**classes[0]["spec"], "config": [CLASS_CONFIG]}}
    ids = _device_ids(slices)
    held = sorted(draw(st.sets(st.sampled_from(ids), max_size=3))) if ids and draw(st.booleans()) else []
    scenario: Obj = {
        "features": switches,
        "applyDefaults": True,
        "deviceClasses": classes,
        "resourceSlices": slices,
        "claims": [draw(_claim(n)) for n in range(draw(st.integers(1, 2)))],
        "node": {"metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE, "zone": "a"}}},
    }
    if draw(st.booleans()):
        scenario["node"]["status"] = {"declaredFeatures": ["DRAOptionalNodeOperations"]}
    if held:
        # Shares exist in the scheduler's allocated state only with DRAConsumableCapacity on: with
        # it off, kube-scheduler turns every shared device ID into its device ID (v1.36.3
        # dynamicresources/dra_manager.go), so a share then holds the whole device.
        multi = {
            f"{s['spec']['driver']}/{s['spec']['pool']['name']}/{d['name']}"
            for s in slices
            for d in s["spec"].get("devices", [])
            if d.get("allowMultipleAllocations") and switches.get("ConsumableCapacity")
        }
        scenario["allocatedDevices"] = [h for h in held if h not in multi]
        shares = [h for h in held if h in multi]
        if shares:
            scenario["allocatedSharedDeviceIDs"] = [
                {
                    **dict(zip(("driver", "pool", "device"), h.split("/", 2), strict=True)),
                    "shareID": f"0000000{i}-0000-0000-0000-000000000000",
                }
                for i, h in enumerate(shares)
            ]
            scenario["aggregatedCapacity"] = [
                {
                    **dict(zip(("driver", "pool", "device"), h.split("/", 2), strict=True)),
                    "consumedCapacity": {"memory": "20Gi"},
                }
                for h in shares
            ]
    return scenario
