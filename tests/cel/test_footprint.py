"""The values of `device` an expression reads (extender.cel.footprint): a fixed set, or None."""

from __future__ import annotations

import pytest

from extender.cel import device_reads, union_of_reads

D = "gpu.example.com"


@pytest.mark.parametrize(
    ("expression", "reads"),
    [
        (f'device.driver == "{D}"', {("driver",)}),
        ("device.allowMultipleAllocations", {("allowMultipleAllocations",)}),
        (f'device.attributes["{D}"].model == "a"', {("attributes", D, "model")}),
        (f'device.attributes["{D}"]["model"] == "a"', {("attributes", D, "model")}),
        (f"device.attributes['{D}'].?model.orValue('') == ''", {("attributes", D, "model")}),
        (f'device.attributes["{D}"][?"model"].hasValue()', {("attributes", D, "model")}),
        (f'has(device.attributes["{D}"].model)', {("attributes", D, "model")}),
        (f'device.capacity["{D}"].memory.isGreaterThan(quantity("1Gi"))', {("capacity", D, "memory")}),
        (f'device.attributes["{D}"].tags.exists(t, t == "x")', {("attributes", D, "tags")}),
        (
            f'device.driver == "{D}" || device.attributes[r"{D}"].index > 1',
            {("driver",), ("attributes", D, "index")},
        ),
        ("1 + 1 == 2", set()),
    ],
)
def test_fixed_paths_are_the_footprint(expression: str, reads: set[tuple[str, ...]]) -> None:
    assert device_reads(expression) == frozenset(reads)


@pytest.mark.parametrize(
    "expression",
    [
        "device",  # the whole device
        f'"model" in device.attributes["{D}"]',  # a whole map
        f'device.attributes["{D}"].all(k, k != "")',
        "size(device.attributes) > 0",
        "device.attributes[device.driver].model == 1",  # a computed key
        f'device.attributes[?"{D}"].model == 1',  # an optional map
        "[1].exists(device, device == 1)",  # a macro variable shadows `device`
        "cel.bind(device, 1, device == 1)",
        '.device.driver == "x"',  # the leading-dot form
        "device.attributes[",  # does not parse
    ],
)
def test_other_uses_have_no_footprint(expression: str) -> None:
    assert device_reads(expression) is None


def test_the_union_needs_every_expression_to_have_a_footprint() -> None:
    a, b = f'device.driver == "{D}"', f'device.attributes["{D}"].model == "a"'
    assert union_of_reads((a, b)) == frozenset({("driver",), ("attributes", D, "model")})
    assert union_of_reads((a, "device")) is None
    assert union_of_reads(()) == frozenset()
