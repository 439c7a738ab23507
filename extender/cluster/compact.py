"""Share the repeated parts of stored ResourceSlices, so that a large fleet's raw objects cost
a fraction of what the JSON parser made of them (docs/memory-profile.md).

Thousands of devices state the same attribute values (`{"string": "NVIDIA H100 80GB HBM3"}`),
the same capacity map and the same counter consumption; the JSON parser makes a new dict and a
new string for each. `Compactor.compact_slice` replaces them, in place, by one shared object per
distinct value. Equality is unchanged, so every reader sees the same object content; in return
stored objects are read-only below `spec.devices[*]` (the extender never writes into a stored
object: writers replace whole objects, `ClusterState.upsert`).

The tables that find the shared object are bounded: when one is full it is emptied and refills,
so values seen only once (device UUIDs) cannot grow it without limit in a long-running watch.
"""

from __future__ import annotations

import sys
from typing import Any

import orjson

from extender.objects import Obj

#: Distinct attribute values remembered; emptied when full (a value seen after that is shared
#: with the values that follow, not with those before).
VALUE_LIMIT = 1 << 15
#: Distinct capacity maps and counter consumptions remembered; emptied when full.
SHAPE_LIMIT = 1 << 12
#: Loaded slices remembered as done (`Compactor.compact_loaded`); emptied when full.
LOADED_LIMIT = 1 << 17
#: Device fields whose whole JSON value is shared between devices that state the same one.
_SHAPED_FIELDS: tuple[str, ...] = ("capacity", "consumesCounters")


class Compactor:
    """Remembers one shared object per distinct value (`SHARED`: one per process). Its tables
    are plain dicts: two threads using it at once can at worst miss a share."""

    def __init__(self) -> None:
        # (kind, value) for strings, (kind, type, value) for ints and bools -> the shared
        # {kind: value}.
        self._values: dict[tuple[Any, ...], dict[str, Any]] = {}
        # JSON text -> the shared value (capacity maps, counter consumptions).
        self._shapes: dict[bytes, Any] = {}
        # id() of the slices the file loader compacted, which the state then stores without a
        # second pass (`compact_once`). Ids, not objects: nothing is kept alive; a reused id
        # can at worst leave one slice uncompacted.
        self._loaded: set[int] = set()

    def compact_loaded(self, obj: Obj) -> None:
        """`compact_slice`, remembering that `obj` is done (for `compact_once`)."""
        self.compact_slice(obj)
        if len(self._loaded) >= LOADED_LIMIT:
            self._loaded.clear()
        self._loaded.add(id(obj))

    def compact_once(self, obj: Obj) -> None:
        """`compact_slice`, unless the loader has just done it (`compact_loaded`)."""
        try:
            self._loaded.remove(id(obj))
        except KeyError:
            self.compact_slice(obj)

    def compact_slice(self, obj: Obj) -> None:
        """Share the repeated attribute values, capacity maps and counter consumptions of one
        ResourceSlice's devices, in place. Objects the validator would refuse are not expected,
        but nothing here relies on their shape: anything unusual is left as it is."""
        spec = obj.get("spec")
        devices = spec.get("devices") if isinstance(spec, dict) else None
        if not isinstance(devices, list):
            return
        for device in devices:
            if not isinstance(device, dict):
                continue
            name = device.get("name")
            if type(name) is str:
                device["name"] = sys.intern(name)  # "gpu-0" on every node
            attributes = device.get("attributes")
            if type(attributes) is dict:
                device["attributes"] = self._attributes(attributes)
            for field in _SHAPED_FIELDS:
                value = device.get(field)
                if value:
                    device[field] = self._shape(value)

    def _attributes(self, attributes: dict[str, Any]) -> dict[str, Any]:
        """The map with each `{kind: scalar}` value swapped for the shared one. It is a new map:
        one filled key by key takes about a quarter less memory than the parser's (464 bytes
        instead of 632 for 13 attributes)."""
        values = self._values
        compacted: dict[str, Any] = {}
        for attribute, value in attributes.items():
            compacted[attribute] = value
            if value.__class__ is not dict or len(value) != 1:
                continue  # not an attribute value (the validator refuses it) or a list kind
            ((kind, scalar),) = value.items()
            scalar_type = scalar.__class__
            if scalar_type is str:  # most values; a string never equals an int or a bool
                key: tuple[Any, ...] = (kind, scalar)
            elif scalar_type is int or scalar_type is bool:
                key = (kind, scalar_type, scalar)  # {"int": 1} and {"int": True} compare equal
            else:
                continue  # a list (or what the validator refuses): left as it is
            shared = values.get(key)
            if shared is None:
                if len(values) >= VALUE_LIMIT:
                    values.clear()
                shared = values[key] = value
            compacted[attribute] = shared
        return compacted

    def _shape(self, value: Any) -> Any:
        try:
            key = orjson.dumps(value)
        except TypeError:  # not JSON (a hand-built object in a test): keep it as it is
            return value
        shared = self._shapes.get(key)
        if shared is None:
            if len(self._shapes) >= SHAPE_LIMIT:
                self._shapes.clear()
            shared = self._shapes[key] = value
        return shared


#: The process's compactor: the file loader and every `ClusterState` share it, so objects the
#: loader compacted are found already shared when the state stores them.
SHARED = Compactor()
