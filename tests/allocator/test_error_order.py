"""Errors are reported claim by claim, in order, as upstream validates (dra.md §3.3).

Upstream validates each claim's requests in claim order (class lookup, then CEL compile, per
request; claim limits and constraints after the claim's requests), so the first claim's error
wins over a later claim's, whatever kind each is. Both the allocator alone and /filter (whose
pre-check runs before any node tier) must report that first error.
"""

from __future__ import annotations

import pytest

from extender.errors import AllocationError, CelCompileError, CelRuntimeError
from extender.pods import parse_pod
from tests.allocator.builders import claim, device, device_class, placement_and_pod, pool_slices, request, run

DRIVER = "gpu.example.com"
SLICES = pool_slices(DRIVER, "pool", [device("gpu-0", attrs={"model": "a100"}), device("gpu-1")])
CLASSES = [device_class("gpu", DRIVER)]
BAD_CEL = [{"cel": {"expression": "device.nosuch == 1"}}]
MISSING_CLASS = claim("second", [request("r", "no-such-class")])


def test_allocator_reports_an_earlier_claims_compile_error_before_a_later_missing_class() -> None:
    first = claim("first", [request("r", "gpu", selectors=BAD_CEL)])
    with pytest.raises(CelCompileError, match=r"^claim default/first: selector #0: CEL compile error"):
        run(SLICES, CLASSES, [first, MISSING_CLASS])


def test_allocator_still_reports_a_missing_class_first_when_it_comes_first() -> None:
    second = claim("second", [request("r", "gpu", selectors=BAD_CEL)])
    missing = claim("first", [request("r", "no-such-class")])
    with pytest.raises(AllocationError, match=r"^claim default/first, request r: could not retrieve"):
        run(SLICES, CLASSES, [missing, second])


def _filter_reason(claims: list[dict]) -> str:
    placement, pod = placement_and_pod(SLICES, CLASSES, claims)
    verdict = placement.filter(parse_pod(pod), ["node-1"])
    assert verdict.passed == [] and verdict.error == ""
    return verdict.unresolvable["node-1"]


def test_filter_reports_an_earlier_claims_compile_error() -> None:
    first = claim("first", [request("r", "gpu", selectors=BAD_CEL)])
    assert _filter_reason([first, MISSING_CLASS]).startswith("claim default/first: selector #0: CEL compile")


def test_filter_reports_an_earlier_claims_device_limit_before_a_later_missing_class() -> None:
    first = claim("first", [request("r", "gpu", count=33)])
    assert _filter_reason([first, MISSING_CLASS]) == (
        "claim default/first: number of requested devices 33 exceeds the claim limit of 32"
    )


def test_filter_reports_an_earlier_all_requests_runtime_error_before_a_later_missing_class() -> None:
    """An `All` request evaluates its selectors during validation: a runtime error there is the
    first claim's error, even though it depends on the node's devices."""
    selectors = [{"cel": {"expression": f'device.attributes["{DRIVER}"].model == "a100"'}}]
    first = claim("first", [request("r", "gpu", allocationMode="All", selectors=selectors)])
    with pytest.raises(CelRuntimeError):  # gpu-1 has no `model`: the search itself fails first
        run(SLICES, CLASSES, [first, MISSING_CLASS])
    assert "CEL runtime error" in _filter_reason([first, MISSING_CLASS])
