"""The DRA CEL environment on cel-python.

Public API (other modules are internal):

- `compile_selector(text) -> CompiledSelector`, cached per text; raises `CelCompileError`
  (including upstream's "too complex, exceeds cost limit" when the estimated cost is too high);
- `CompiledSelector.evaluate(device, should_stop=...) -> bool`; raises `CelRuntimeError`, or
  `SelectorsInterrupted` (text from `interrupted(cause)`) once `should_stop` gives a cause;
- `build_device_input(...) -> DeviceInput`, the CEL `device` variable, built once per device;
- `enhance_runtime_error(text)`, Kubernetes 1.37's optional-chaining hint on "no such key";
- `evaluate_derived(text, device) -> attribute value`, a 1.37 derived attribute (`derived`);
- `union_of_reads(texts) -> frozenset[Read] | None`, the values of `device` the expressions read
  (`footprint`), for evaluating once per group of equal values; `is_version(text)`.

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
from extender.cel.footprint import Read, device_reads, union_of_reads
from extender.cel.hints import enhance_runtime_error
from extender.cel.selectors import CompiledSelector, clear_compile_cache, compile_selector, interrupted
from extender.cel.semvers import is_version

__all__ = [
    "CompiledSelector",
    "DeviceInput",
    "Read",
    "build_device_input",
    "clear_compile_cache",
    "compile_selector",
    "device_reads",
    "enhance_runtime_error",
    "evaluate_derived",
    "interrupted",
    "is_version",
    "union_of_reads",
]
