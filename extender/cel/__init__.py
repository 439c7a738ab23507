"""The DRA CEL environment on cel-python.

Public API (other modules are internal):

- `compile_selector(text) -> CompiledSelector`, cached per text; raises `CelCompileError`
  (including upstream's "too complex, exceeds cost limit" when the estimated cost is too high);
- `CompiledSelector.evaluate(device, should_stop=...) -> bool`; raises `CelRuntimeError`, or
  `SelectorsInterrupted` (text from `interrupted(cause)`) once `should_stop` gives a cause;
- `build_device_input(...) -> DeviceInput`, the CEL `device` variable, built once per device;
- `enhance_runtime_error(text)`, Kubernetes 1.37's optional-chaining hint on "no such key";
- `evaluate_derived(text, device) -> attribute value`, a 1.37 derived attribute (`derived`).

Layout: `parsing` (cel-python's grammar, extended for the optional syntax; cel-go's error
layout); `compiling` (tree walking and declaration checks) building closures from `programs`,
`comprehensions` and `literals`; `values` and `lookups` (runtime values, operators, lookups);
`libraries` (the function tables) over `conversions`, `strings`, `lists`, `quantities` and
`semvers`; `costs` (cel-go's cost model: the compile-time estimate and the per-element runtime
charge); `devices` (the `device` variable); `selectors` (the cache and public entry points).
docs/cel.md has the environment audit and the cost model.
"""

from extender.cel.derived import evaluate_derived
from extender.cel.devices import DeviceInput, build_device_input
from extender.cel.hints import enhance_runtime_error
from extender.cel.selectors import CompiledSelector, clear_compile_cache, compile_selector, interrupted

__all__ = [
    "CompiledSelector",
    "DeviceInput",
    "build_device_input",
    "clear_compile_cache",
    "compile_selector",
    "enhance_runtime_error",
    "evaluate_derived",
    "interrupted",
]
