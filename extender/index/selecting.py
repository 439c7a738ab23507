"""Selector evaluation with per-device memoisation.

Each CEL expression is compiled once (by text, in `extender.cel`) and evaluated at most once per
device object: the result, or the runtime error, is kept on the device itself. Device objects
live as long as their ResourceSlice is unchanged, so steady-state scheduling re-uses every
result and runs no CEL at all. A compile error is not cached per device (it is a property of the
expression alone and `extender.cel` caches compilation).

Concurrency: results are written by whichever thread evaluates; a race can only make two
threads compute the same value, never a wrong one (dict assignment is atomic in CPython).
"""

from __future__ import annotations

from extender import cel
from extender.allocator.features import Features
from extender.allocator.model import Device
from extender.errors import CelRuntimeError


class CachingEvaluator:
    """`SelectorEvaluator` for the allocator, memoising results on the devices."""

    def __init__(self, features: Features) -> None:
        self._features = features
        # Counters for metrics (read at scrape time by extender.telemetry); a race between
        # threads can lose an increment, which is harmless for monitoring.
        self.evaluations = 0  # CEL programs actually run (cache misses), including failed runs
        self.hits = 0  # results (or cached runtime errors) served from a device's cache

    def device_input(self, device: Device) -> object:
        """The CEL `device` variable for a device, built once; raises CelRuntimeError if unusable."""
        if device.cel_input is None:
            try:
                device.cel_input = cel.build_device_input(
                    device.id.driver,
                    device.attributes,
                    {name: {"value": str(spec.value)} for name, spec in device.capacity.items()},
                    device.allow_multiple_allocations,
                    consumable_capacity=self._features.consumable_capacity,
                    list_type_attributes=self._features.list_type_attributes,
                )
            except CelRuntimeError as exc:
                device.cel_input = exc
        if isinstance(device.cel_input, CelRuntimeError):
            raise device.cel_input
        return device.cel_input

    def evaluate(self, expression: str, device: Device) -> bool:
        """Evaluate one selector against one device (cached)."""
        cached = device.selector_results.get(expression)
        if cached is not None:
            self.hits += 1
            if isinstance(cached, CelRuntimeError):
                raise cached
            return bool(cached)
        compiled = cel.compile_selector(expression)
        self.evaluations += 1
        try:
            result = compiled.evaluate(self.device_input(device))
        except CelRuntimeError as exc:
            device.selector_results[expression] = exc
            raise
        device.selector_results[expression] = result
        return result
