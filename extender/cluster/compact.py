"""Share the repeated parts of stored objects (ResourceSlices above all, also pods, claims and
nodes), so that a large fleet's raw objects cost a fraction of what the JSON parser made of them
(docs/memory-profile.md).

Thousands of devices state the same attribute values (`{"string": "NVIDIA H100 80GB HBM3"}`),
the same capacity map and the same counter consumption; the JSON parser makes a new dict and a
new string for each. `Compactor.compact_slice` replaces them, in place, by one shared object per
distinct value; `Compactor.compact_sections` does the same for the string, dict and list fields
of pods, claims and nodes (containers, tolerations, labels, requests, node selectors). The maps
that stay an object's own (a device, its attributes, a pod's `spec`) are rebuilt key-sharing
(`Compactor.keyshared`): one key table per key sequence, each map holding only its values.
Equality, key order and `type(x) is dict` are unchanged, so every reader sees the same object
content; in return stored objects are read-only (the extender never writes into a stored object:
writers deep-copy it and replace the whole object, `ClusterState.upsert`). A deep copy keeps the
aliases within one object: a pod, claim or node never holds one shared value twice, but the
devices of one slice do share their equal capacity maps (edit a copied slice's device by
replacing its maps, not in place).

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
#: Distinct attribute kinds given a table of values (the API has four).
_KIND_LIMIT = 16
#: Distinct capacity maps and counter consumptions remembered; emptied when full.
SHAPE_LIMIT = 1 << 12
#: Loaded objects remembered as done (`Compactor.compact_loaded`); emptied when full.
LOADED_LIMIT = 1 << 17
#: Distinct pod, claim and node parts remembered, with their JSON text (a few MiB when full:
#: most parts are an object's own, a claim's `reservedFor`); emptied when full.
PART_LIMIT = 1 << 12
#: Distinct key sequences given a key-sharing class (`Compactor.keyshared`); past this, new key
#: sequences get plain dicts.
CLASS_LIMIT = 1 << 10
#: CPython shares at most this many keys per class (SHARED_KEYS_MAX_SIZE): longer maps stay plain.
_SHARED_KEYS_MAX = 30
#: Device fields whose whole JSON value is shared between devices that state the same one.
_SHAPED_FIELDS: tuple[str, ...] = ("capacity", "consumesCounters")
#: Kinds whose objects share the dict and list fields of these sections with other objects that
#: state the same value: the pods of one workload state the same containers, tolerations and
#: labels, the claims of one shape the same requests, the nodes of one type the same capacity.
_SECTIONED: dict[str, tuple[str, ...]] = {
    "Pod": ("metadata", "spec", "status"),
    "ResourceClaim": ("metadata", "spec", "status"),
    "Node": ("metadata", "spec", "status"),
}
#: Fields shared field by field one level further down: a claim's allocation names its own
#: devices, but its node selector is the one of every claim allocated on that node.
_NESTED: frozenset[str] = frozenset({"allocation"})


class Compactor:
    """Remembers one shared object per distinct value (`SHARED`: one per process). Its tables
    are plain dicts: two threads using it at once can at worst miss a share."""

    def __init__(self) -> None:
        # kind -> value for strings, (type, value) for ints and bools -> the shared {kind: value}.
        self._values: dict[str, dict[Any, dict[str, Any]]] = {}
        # JSON text -> the shared value (capacity maps, counter consumptions).
        self._shapes: dict[bytes, Any] = {}
        # The same for the sections of pods, claims and nodes (a table of its own: their unique
        # parts, such as a pod's claim names, would otherwise push the slices' shapes out).
        self._parts: dict[bytes, Any] = {}
        # Their string fields: one object per distinct text (emptied when full).
        self._strings: dict[str, str] = {}
        # Key sequence -> a class whose instances' __dict__ shares that key table (`keyshared`).
        self._classes: dict[tuple[str, ...], type] = {}
        # id() of the objects the file loader compacted, which the state then stores without a
        # second pass (`compact_once`). Ids, not objects: nothing is kept alive; a reused id
        # can at worst leave one slice uncompacted.
        self._loaded: set[int] = set()

    def compact(self, obj: Obj, kind: Any = None, previous: Obj | None = None) -> None:
        """Share the repeated parts of one stored object, in place: `compact_slice` for a
        ResourceSlice, `compact_sections` for a pod, claim or node; other kinds are left as
        they are. `kind`: the object's, when it does not say (a list item). `previous`: the
        stored version the object replaces, if any (`compact_slice`)."""
        if kind is None:
            kind = obj.get("kind")
        if kind == "ResourceSlice":
            self.compact_slice(obj, previous)
            metadata = obj.get("metadata")
            if type(metadata) is dict:  # the spec is compacted by `compact_slice`
                self._share_fields(metadata, set())
                obj["metadata"] = self.keyshared(metadata)
        elif kind in _SECTIONED:
            self.compact_sections(obj, _SECTIONED[kind])

    def compact_loaded(self, obj: Obj, kind: Any = None, previous: Obj | None = None) -> None:
        """`compact`, remembering that `obj` is done (for `compact_once`)."""
        self.compact(obj, kind, previous)
        if len(self._loaded) >= LOADED_LIMIT:
            self._loaded.clear()
        self._loaded.add(id(obj))

    def compact_once(self, obj: Obj, previous: Obj | None = None) -> None:
        """`compact`, unless the loader has just done it (`compact_loaded`)."""
        try:
            self._loaded.remove(id(obj))
        except KeyError:
            self.compact(obj, previous=previous)
        else:
            if not self._loaded:  # a set keeps its table when emptied (2 MiB at 5,000 nodes)
                self._loaded = set()

    def compact_sections(self, obj: Obj, sections: tuple[str, ...]) -> None:
        """Swap each string field, and each dict or list field, of `obj`, its
        `sections` and a `_NESTED` field in them for the shared equal one. Equal JSON text, key
        order included, is what makes two values equal here, so every reader sees the same
        content as before."""
        self._share_fields(obj, set(), sections)

    def _share_fields(
        self, part: dict[str, Any], used: set[int], sections: tuple[str, ...] | frozenset[str] = _NESTED
    ) -> None:
        """Share `part`'s string fields, its dict and list fields, and the fields of those of
        them named in `sections` (instead of the whole of them, which become key-sharing).

        `used`: ids of the shared values the object already holds. A value is shared between
        objects, never twice within one: `copy.deepcopy` keeps such an alias, and a writer that
        deep-copies a claim to append a finalizer would append it to an equal (empty)
        `reservedFor` as well."""
        strings, parts = self._strings, self._parts
        for field, value in list(part.items()):
            cls = value.__class__
            if cls is str:
                shared = strings.get(value)
                if shared is None:
                    if len(strings) >= VALUE_LIMIT:
                        strings.clear()
                    shared = strings[value] = value
                part[field] = shared  # "Running", "dra-extender-scheduler", an API version
            elif cls is not dict and cls is not list:
                continue
            elif field in sections and cls is dict:
                self._share_fields(value, used)
                part[field] = self.keyshared(value)
            else:  # `_shape` inlined: a pod has a dozen of these
                try:
                    key = orjson.dumps(value)
                except TypeError:  # not JSON (a hand-built object in a test): keep it as it is
                    continue
                shared = parts.get(key)
                if shared is None:
                    if len(parts) >= PART_LIMIT:
                        parts.clear()
                    shared = parts[key] = value
                if id(shared) not in used:  # else keep the object's own equal value
                    used.add(id(shared))
                    part[field] = shared

    def compact_slice(self, obj: Obj, previous: Obj | None = None) -> None:
        """Share the repeated attribute values, capacity maps and counter consumptions of one
        ResourceSlice's devices, and the counters of its counter sets, in place; each device
        map becomes key-sharing (`keyshared`). Objects the validator would refuse are not
        expected, but nothing here relies on their shape: anything unusual is left as it is.

        With `previous`, the stored slice this one replaces: a device's value equal to the one
        its namesake there holds is that very object. The tables here are emptied when full
        (each device's own UUID fills them), and the device index re-reads a republished device
        only where its values are not the objects it read before (issue 21: a slice change
        costs what changed)."""
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        counter_sets = spec.get("sharedCounters")
        if type(counter_sets) is list:
            for counter_set in counter_sets:  # each GPU's counter set states the same counters
                if type(counter_set) is dict and counter_set.get("counters"):
                    counter_set["counters"] = self._shape(counter_set["counters"])
        devices = spec.get("devices")
        if not isinstance(devices, list):
            return
        before = _devices_by_name(previous)
        for position, device in enumerate(devices):
            if type(device) is dict:
                devices[position] = self._device(device, before.get(device.get("name")))

    def _device(self, device: dict[str, Any], before: Any = None) -> dict[str, Any]:
        """A key-sharing copy of one device map (`keyshared`) with its name interned ("gpu-0" on
        every node), its attribute values, capacity and counter consumption shared (those equal
        to `before`'s, the device's stored version, are its objects)."""
        holder = self._holder(tuple(device))
        compacted: dict[str, Any] = {} if holder is None else holder().__dict__
        before = before if type(before) is dict else {}
        for field, value in device.items():
            if field == "attributes" and type(value) is dict:
                value = self._attributes(value, before.get(field))
            elif field in _SHAPED_FIELDS and value:
                kept = before.get(field)
                value = kept if kept is not None and _same_json(kept, value) else self._shape(value)
            elif field == "name" and type(value) is str:
                value = sys.intern(value)
            compacted[field] = value
        return compacted

    def keyshared(self, source: dict[str, Any]) -> dict[str, Any]:
        """An equal dict, with the same key order, whose key table is shared with every other
        dict this compactor made with the same keys: a CPython split table (the instance
        `__dict__` of a class per key sequence) holds only the values, 176 bytes instead of 464
        for 13 attributes and 80 instead of 184 for `{"string": uuid}`. It is a plain `dict` to
        every reader; writing a key out of order would only turn it back into a combined one.
        Maps with non-string keys, more keys than CPython shares, or new key sequences past
        `CLASS_LIMIT` are copied into a plain dict."""
        holder = self._holder(tuple(source))
        shared: dict[str, Any] = {} if holder is None else holder().__dict__
        for key, value in source.items():
            shared[key] = value
        return shared

    def _holder(self, keys: tuple[Any, ...]) -> type | None:
        """The class whose instances' `__dict__` share the table of `keys` (None: none can)."""
        holder = self._classes.get(keys)
        if holder is None:
            if (
                len(self._classes) >= CLASS_LIMIT
                or len(keys) > _SHARED_KEYS_MAX
                or not all(key.__class__ is str for key in keys)
            ):
                return None
            holder = self._classes[keys] = type("KeySharing", (), {})
        return holder  # the instance goes, its dict stays split

    def _attributes(self, attributes: dict[str, Any], before: Any = None) -> dict[str, Any]:
        """The map with each `{kind: scalar}` value swapped for the shared one (a first value is
        made key-sharing, `keyshared`: most are a device's own UUID or PCI address). It is a new,
        key-sharing map (`keyshared`): 176 bytes instead of the parser's 632 for 13 attributes."""
        by_kind = self._values
        holder = self._holder(tuple(attributes))
        compacted: dict[str, Any] = {} if holder is None else holder().__dict__
        before = before if type(before) is dict else {}
        for attribute, value in attributes.items():
            compacted[attribute] = value
            if value.__class__ is not dict or len(value) != 1:
                continue  # not an attribute value (the validator refuses it) or a list kind
            ((kind, scalar),) = value.items()
            scalar_type = scalar.__class__
            kept = before.get(attribute)
            if (
                kept.__class__ is dict
                and len(kept) == 1
                and scalar_type in _SCALARS
                and _same_scalar(kept, kind, scalar)
            ):
                compacted[attribute] = kept  # the stored device's own object
                continue
            if scalar_type is str:  # most values; a string never equals an int or a bool
                key: Any = scalar
            elif scalar_type is int or scalar_type is bool:
                key = (scalar_type, scalar)  # {"int": 1} and {"int": True} compare equal
            else:
                continue  # a list (or what the validator refuses): left as it is
            values = by_kind.get(kind)
            if values is None:
                if len(by_kind) >= _KIND_LIMIT:  # only an invalid object names other kinds
                    by_kind.clear()
                values = by_kind[kind] = {}
            shared = values.get(key)
            if shared is None:
                if len(values) >= VALUE_LIMIT:
                    values.clear()
                shared = values[key] = self.keyshared(value)
            compacted[attribute] = shared
        return compacted

    def _shape(self, value: Any) -> Any:
        """The shared value equal to `value` (by JSON text): capacity maps, counter consumptions
        and counters of slices."""
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


#: The attribute value types a stored device's value object is re-used for (list kinds are not:
#: `[1] == [True]` in Python).
_SCALARS = (str, int, bool)


def _devices_by_name(slice_: Obj | None) -> dict[Any, Any]:
    """A stored slice's device maps by name ({} when there is none, or it is odd)."""
    spec = slice_.get("spec") if isinstance(slice_, dict) else None
    devices = spec.get("devices") if isinstance(spec, dict) else None
    if type(devices) is not list:
        return {}
    return {d.get("name"): d for d in devices if type(d) is dict}


def _same_scalar(kept: dict[str, Any], kind: str, scalar: Any) -> bool:
    """Whether `{kind: scalar}` is the value `kept` holds, type included (`{"int": 1}` equals
    `{"int": True}` in Python, not in JSON)."""
    ((kept_kind, kept_scalar),) = kept.items()
    return kept_kind == kind and kept_scalar.__class__ is scalar.__class__ and kept_scalar == scalar


def _same_json(kept: Any, value: Any) -> bool:
    """Whether two parts of a device are the same JSON (types included, as `_shape` keys them)."""
    try:
        return orjson.dumps(kept) == orjson.dumps(value)
    except TypeError:
        return False


#: The process's compactor: the file loader and every `ClusterState` share it, so objects the
#: loader compacted are found already shared when the state stores them.
SHARED = Compactor()
