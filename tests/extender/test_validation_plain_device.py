"""The plain-device fast path of ResourceSlice validation finds exactly what the full check finds.

`validation._plain_device` accepts the usual device (a name, scalar attributes, plain capacities)
without building a path per field. Each case below is a plain device with one thing changed; the
problems reported must be the same with the fast path switched off, and a changed device must
never be accepted when the full check refuses it.
"""

from __future__ import annotations

import copy
from typing import Any
from unittest import mock

import pytest

from extender import validation

PLAIN: dict[str, Any] = {
    "name": "gpu-0",
    "attributes": {
        "model": {"string": "h100"},
        "index": {"int": 0},
        "gpu.example.com/ecc": {"bool": True},
        "driverVersion": {"version": "1.2.3"},
    },
    "capacity": {"memory": {"value": "80Gi"}},
    "consumesCounters": [{"counterSet": "gpu-0-counters", "counters": {"memory": {"value": "10Gi"}}}],
}

CHANGES: dict[str, Any] = {
    "unchanged": lambda d: None,
    "no name": lambda d: d.pop("name"),
    "bad name": lambda d: d.update(name="GPU_0"),
    "attributes a list": lambda d: d.update(attributes=[]),
    "capacity a list": lambda d: d.update(capacity=[]),
    "attributes null": lambda d: d.update(attributes=None),
    "bad attribute name": lambda d: d["attributes"].update({"bad name!": {"int": 1}}),
    "two kinds": lambda d: d["attributes"].update(model={"string": "a", "int": 1}),
    "wrong type": lambda d: d["attributes"].update(index={"int": "0"}),
    "bad version": lambda d: d["attributes"].update(driverVersion={"version": "v1"}),
    "a list attribute": lambda d: d["attributes"].update(tags={"strings": ["a"]}),
    "long string": lambda d: d["attributes"].update(model={"string": "x" * 100}),
    "int out of range": lambda d: d["attributes"].update(index={"int": 2**63}),
    "bad quantity": lambda d: d["capacity"].update(memory={"value": "80 gigs"}),
    "numeric quantity": lambda d: d["capacity"].update(memory={"value": 80}),
    "request policy": lambda d: d["capacity"]["memory"].update(requestPolicy={"default": "1Gi"}),
    "capacity without value": lambda d: d["capacity"].update(memory={}),
    "too many": lambda d: d["attributes"].update({f"a{i}": {"int": i} for i in range(40)}),
    "taints": lambda d: d.update(taints=[{"key": "k", "effect": "NoSchedule"}]),
    "node name": lambda d: d.update(nodeName="node-1"),
    "multiple allocations": lambda d: d.update(allowMultipleAllocations="yes"),
    "no consumptions": lambda d: d.pop("consumesCounters"),
    "empty consumptions": lambda d: d.update(consumesCounters=[]),
    "consumptions not a list": lambda d: d.update(consumesCounters={}),
    "three consumptions": lambda d: d.update(consumesCounters=[{"counterSet": f"s{i}"} for i in range(3)]),
    "duplicate set": lambda d: d.update(consumesCounters=[{"counterSet": "s"}, {"counterSet": "s"}]),
    "no set name": lambda d: d.update(consumesCounters=[{"counters": {}}]),
    "bad set name": lambda d: d["consumesCounters"][0].update(counterSet="Bad_Set"),
    "counters null": lambda d: d["consumesCounters"][0].update(counters=None),
    "counters a list": lambda d: d["consumesCounters"][0].update(counters=[]),
    "bad counter name": lambda d: d["consumesCounters"][0]["counters"].update({"Bad Name": {"value": "1"}}),
    "bad counter value": lambda d: d["consumesCounters"][0]["counters"].update(memory={"value": "lots"}),
    "counter without value": lambda d: d["consumesCounters"][0]["counters"].update(memory={}),
    "compatibility groups": lambda d: d["consumesCounters"][0].update(compatibilityGroups=["a"]),
}


def _slice(device: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "s"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": "node-1",
            "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
            "devices": [device],
        },
    }


@pytest.mark.parametrize("change", list(CHANGES))
def test_the_fast_path_reports_what_the_full_check_reports(change: str) -> None:
    device = copy.deepcopy(PLAIN)
    CHANGES[change](device)
    fast = validation.problems(_slice(device))
    with mock.patch.object(validation, "_plain_device", lambda device: False):
        full = validation.problems(_slice(device))
    assert fast == full
    if validation._plain_device(device):
        assert not full, "the fast path accepted a device the full check refuses"


def test_the_unchanged_device_takes_the_fast_path() -> None:
    assert validation._plain_device(copy.deepcopy(PLAIN))


def _sharing(changed: dict[str, Any], plain: dict[str, Any]) -> dict[str, Any]:
    """`changed` with every part equal to `plain`'s being `plain`'s very object, as the loader's
    compaction shares them between devices (attribute values, capacity map, consumptions)."""
    device = dict(changed)
    attributes = changed.get("attributes")
    if isinstance(attributes, dict):
        device["attributes"] = {
            key: plain["attributes"][key] if plain["attributes"].get(key) == value else value
            for key, value in attributes.items()
        }
    for part in ("capacity", "consumesCounters"):
        if part in changed and changed[part] == plain[part]:
            device[part] = plain[part]
    return device


@pytest.mark.parametrize("change", list(CHANGES))
def test_parts_seen_plain_on_another_device_change_nothing(change: str) -> None:
    """A value, capacity map or consumption list already found plain (on the slice's first
    device) is not checked again: the second device's answer must still be the full check's."""
    validation._PLAIN_SEEN.clear()
    plain = copy.deepcopy(PLAIN)
    changed = copy.deepcopy(PLAIN)
    CHANGES[change](changed)
    if changed.get("name") == "gpu-0":
        changed["name"] = "gpu-1"  # two devices of one name is a problem of its own
    second = _sharing(changed, plain)
    both = _slice(plain)
    both["spec"]["devices"].append(second)
    fast = validation.problems(both)
    assert validation._PLAIN_SEEN  # the first device's parts were remembered
    with mock.patch.object(validation, "_plain_device", lambda device: False):
        full = validation.problems(both)
    assert fast == full
