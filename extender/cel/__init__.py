"""The DRA CEL environment on cel-python.

Public API (other modules are internal):

- `compile_selector(text) -> CompiledSelector`, cached per text; raises `CelCompileError`;
- `CompiledSelector.evaluate(device) -> bool`; raises `CelRuntimeError`;
- `build_device_input(...) -> DeviceInput`, the CEL `device` variable, built once per device.

Layout: `parsing` (cel-python's grammar, extended for the optional syntax; cel-go's error
layout); `compiling` (tree walking and declaration checks) building closures from `programs`,
`comprehensions` and `literals`; `values` and `lookups` (runtime values, operators, lookups);
`libraries` (the function tables) over `conversions`, `strings`, `lists`, `quantities` and
`semvers`; `devices` (the `device` variable); `selectors` (the cache and public entry points).
"""

from extender.cel.devices import DeviceInput, build_device_input
from extender.cel.selectors import CompiledSelector, clear_compile_cache, compile_selector

__all__ = ["CompiledSelector", "DeviceInput", "build_device_input", "clear_compile_cache", "compile_selector"]
