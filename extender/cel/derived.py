"""Derived attributes (Kubernetes 1.37 DRADerivedAttributes): a CEL expression per request that
computes an attribute of each device, which the claim's constraints then compare.

Mirrors `EvaluateDerivedAttribute` and `valToDeviceAttribute` of dynamic-resource-allocation
v0.37.2 cel/compile.go: the expression sees the same `device` as a selector, and its value must
be a bool, int, string or semver, or a list of one of those; it becomes an attribute value in the
ResourceSlice's JSON shape (`{"int": 3}`, `{"strings": [...]}`). Compiled expressions share the
selector cache (`compile_selector` compiles any expression; only `evaluate` insists on a bool).
"""

from __future__ import annotations

from typing import Any

from extender.cel.devices import DeviceInput
from extender.cel.selectors import compile_selector
from extender.cel.semvers import Semver
from extender.errors import CelRuntimeError

_SCALARS: dict[type, str] = {bool: "bool", int: "int", str: "string"}
# Go's %T of the values valToDeviceAttribute refuses, for its error text.
_GO_TYPES: dict[str, str] = {"float": "float64", "UintType": "uint64", "bytes": "[]uint8"}


def evaluate_derived(expression: str, device: DeviceInput) -> dict[str, Any]:
    """The derived attribute's value for one device, as a ResourceSlice attribute.

    Raises:
        CelCompileError: the expression does not compile.
        CelRuntimeError: evaluation failed, or the value is not an attribute value.
        SelectorsInterrupted: never here (no deadline is polled: one expression on one device).
    """
    value = compile_selector(expression).value(device)
    return attribute_value(value)


def attribute_value(value: Any) -> dict[str, Any]:
    """valToDeviceAttribute: a CEL value as an attribute value, else CelRuntimeError."""
    kind = _SCALARS.get(type(value))
    if kind is not None:
        return {kind: value}
    if isinstance(value, Semver):
        return {"version": _semver_text(value)}
    if type(value) is list or type(value) is tuple:
        if not value:
            return {"strings": []}
        first = value[0]
        kind = "version" if isinstance(first, Semver) else _SCALARS.get(type(first))
        if kind is None:
            raise CelRuntimeError(f"unsupported list element type: {_go_type(first)}")
        items = []
        for index, item in enumerate(value):
            same = isinstance(item, Semver) if kind == "version" else type(item) is type(first)
            if not same:
                go = {"bool": "bool", "int": "int", "string": "string", "version": "semver"}[kind]
                raise CelRuntimeError(
                    f"expected list element at index {index} to be {go}, got {_go_type(item)}"
                )
            items.append(_semver_text(item) if kind == "version" else item)
        return {kind + "s": items}
    raise CelRuntimeError(f"unsupported CEL return type: {_go_type(value)}")


def _go_type(value: Any) -> str:
    name = type(value).__name__
    return _GO_TYPES.get(name, {"bool": "bool", "int": "int64", "str": "string"}.get(name, name))


def _semver_text(version: Semver) -> str:
    text = f"{version.major}.{version.minor}.{version.patch}"
    if version.pre:
        text += "-" + ".".join(str(p) for p in version.pre)
    if version.build:
        text += "+" + ".".join(version.build)
    return text
