"""Fixtures for the CEL tests: a sample GPU device and a one-call `evaluate(expression)` helper."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from extender.cel import DeviceInput, build_device_input, clear_compile_cache, compile_selector

DRIVER = "gpu.example.com"

GPU_ATTRIBUTES = {
    "productName": {"string": "H100"},
    "index": {"int": 3},
    "mig": {"bool": False},
    "driverVersion": {"version": "550.54.15"},
    "resource.kubernetes.io/pcieRoot": {"string": "pci0000:15"},
}
GPU_CAPACITY = {"memory": {"value": "80Gi"}, "example.com/bandwidth": {"value": "100G"}}


@pytest.fixture(autouse=True)
def _fresh_compile_cache() -> Iterator[None]:
    clear_compile_cache()
    yield
    clear_compile_cache()


@pytest.fixture
def gpu() -> DeviceInput:
    """A device with scalar attributes of every kind and two capacities, both features on."""
    return build_device_input(
        DRIVER, GPU_ATTRIBUTES, GPU_CAPACITY, None, consumable_capacity=True, list_type_attributes=True
    )


@pytest.fixture
def evaluate(gpu: DeviceInput) -> Callable[..., bool]:
    """Compile and evaluate an expression against `gpu` (or the device given)."""

    def run(expression: str, device: DeviceInput | None = None) -> bool:
        return compile_selector(expression).evaluate(device or gpu)

    return run
