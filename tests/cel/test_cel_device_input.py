"""Building the CEL `device` variable from ResourceSlice JSON: domains, value kinds, list
attributes behind their feature, unsupported values (upstream's error), capacity quantities and
`allowMultipleAllocations` behind DRAConsumableCapacity."""

from __future__ import annotations

from typing import Any

import pytest

from extender.cel import build_device_input
from extender.cel.semvers import parse_semver
from extender.errors import CelRuntimeError
from extender.quantity import Quantity

DRIVER = "gpu.example.com"


def build(attributes: dict[str, Any], capacity: dict[str, Any] | None = None, **flags: Any) -> dict[str, Any]:
    options = {"consumable_capacity": False, "list_type_attributes": False} | flags
    return dict(build_device_input(DRIVER, attributes, capacity or {}, None, **options).root)


def test_names_are_split_into_domain_and_id() -> None:
    root = build({"model": {"string": "a"}, "resource.kubernetes.io/pcieRoot": {"string": "p"}})
    assert root["driver"] == DRIVER
    assert root["attributes"] == {DRIVER: {"model": "a"}, "resource.kubernetes.io": {"pcieRoot": "p"}}


def test_scalar_value_kinds() -> None:
    root = build({"i": {"int": 7}, "b": {"bool": True}, "s": {"string": "x"}, "v": {"version": "1.2.3-rc.1"}})
    assert root["attributes"][DRIVER] == {"i": 7, "b": True, "s": "x", "v": parse_semver("1.2.3-rc.1")}


def test_list_kinds_need_list_type_attributes() -> None:
    attributes = {
        "m": {"strings": ["a", "b"]},
        "n": {"ints": [1]},
        "f": {"bools": [False]},
        "v": {"versions": ["1.0.0"]},
    }
    root = build(attributes, list_type_attributes=True)
    assert root["attributes"][DRIVER] == {
        "m": ("a", "b"),
        "n": (1,),
        "f": (False,),
        "v": (parse_semver("1.0.0"),),
    }


@pytest.mark.parametrize(
    ("attributes", "flags"),
    [
        ({"stringAttribute": {}}, {"list_type_attributes": True}),
        ({"stringAttribute": {"string": None}}, {}),
        ({"stringAttribute": {"strings": ["a"]}}, {"list_type_attributes": False}),
        ({"stringAttribute": {"strings": []}}, {"list_type_attributes": True}),
        ({"stringAttribute": {"int": "7"}}, {}),
    ],
)
def test_unsupported_attribute_value(attributes: dict[str, Any], flags: dict[str, bool]) -> None:
    """Upstream's exact text, naming the attribute as the slice spells it."""
    with pytest.raises(CelRuntimeError) as info:
        build(attributes, **flags)
    assert str(info.value) == "attribute stringAttribute: unsupported attribute value"


def test_qualified_name_is_reported_as_written() -> None:
    with pytest.raises(CelRuntimeError, match=r"^attribute example\.com/x: unsupported attribute value$"):
        build({"example.com/x": {}})


def test_capacity_values_are_quantities() -> None:
    root = build(
        {}, {"memory": {"value": "80Gi", "requestPolicy": {"default": "1Gi"}}, "a.b/bw": {"value": 5}}
    )
    assert root["capacity"] == {
        DRIVER: {"memory": Quantity.parse("80Gi")},
        "a.b": {"bw": Quantity.parse("5")},
    }


def test_unparsable_capacity_is_a_runtime_error() -> None:
    with pytest.raises(CelRuntimeError, match=r"^capacity memory: unable to parse quantity's suffix$"):
        build({}, {"memory": {"value": "80Mm"}})


def test_allow_multiple_allocations_only_with_consumable_capacity() -> None:
    assert "allowMultipleAllocations" not in build({})
    assert build({}, consumable_capacity=True)["allowMultipleAllocations"] is False
    device = build_device_input(DRIVER, {}, {}, True, consumable_capacity=True, list_type_attributes=False)
    assert device.root["allowMultipleAllocations"] is True
