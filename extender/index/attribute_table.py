"""Every row's published attribute and capacity values, interned, kept as entries per name.

One pass over the devices interns each attribute value (`(kind, value)`) and capacity value
(`("quantity", text)`) and files it under the name as published (`gpu.nvidia.com/uuid`, or
bare `uuid`): per name the rows that carry it and their codes. Any column a mask or a constraint
needs (`DeviceIndex.attribute_codes`, the read values of `selector_groups`) is then a few array
operations over the entries of one or two names, not a Python call per device: the first pod of
a new claim shape at thousands of nodes no longer walks every device (issue 21 item 4).

A new index generation keeps the previous generation's entries for rows of unchanged nodes (the
row map of `carry_from`) and files the rebuilt nodes' devices again, so a slice change costs its
own devices plus array work over the entries. Memory is proportional to the published values
(8 bytes per value), whatever the number of distinct names.

Codes: >= 0 interned values (equal codes, equal typed values), -1 absent, LIST (-2) a list
value, MALFORMED (-4) a value of no single known kind (upstream's CEL refuses the device; the
constraints see no value). `plain` says per row whether the device's CEL input is built from
single scalar values of their declared kind (see `selector_groups`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from extender import cel
from extender.allocator.model import Device

LIST = -2
MALFORMED = -4
_SCALAR_TYPES: dict[str, type] = {"int": int, "bool": bool, "string": str, "version": str}
_LIST_KINDS = ("ints", "bools", "strings", "versions")
_SCALAR_KINDS = ("int", "bool", "string", "version")

Intern = Callable[[tuple[str, Any]], int]
Entries = Mapping[str, tuple[np.ndarray, np.ndarray]]  # name -> (rows int64, codes int32)


def value_code(value: Any, intern: Intern) -> int:
    """The code of one published attribute value (see the module docstring)."""
    if type(value) is not dict:
        return MALFORMED
    if len(value) == 1:  # the usual attribute: one scalar of its kind's type
        ((kind, item),) = value.items()
        if type(item) is _SCALAR_TYPES.get(kind):
            return intern((kind, item))
    if any(value.get(k) is not None for k in _LIST_KINDS):
        return LIST
    for kind in _SCALAR_KINDS:
        item = value.get(kind)
        if item is not None:
            return intern((kind, item)) if isinstance(item, int | str) else MALFORMED
    return MALFORMED


def plain(device: Device) -> bool:
    """Whether the device's CEL input is built from single scalar values of their declared kind."""
    for raw in device.attributes.values():
        if type(raw) is not dict or len(raw) != 1:
            return False
        ((kind, item),) = raw.items()
        if type(item) is not _SCALAR_TYPES.get(kind):
            return False
        if kind == "version" and not cel.is_version(str(item)):
            return False
    return True


class AttributeTable:
    """The interned attribute and capacity values of every row of one index generation."""

    __slots__ = ("attributes", "capacity", "driver", "multiple", "num_rows", "plain")

    def __init__(self, num_rows: int, attributes: Entries, capacity: Entries, flags: _Flags) -> None:
        self.num_rows = num_rows
        self.attributes = attributes
        self.capacity = capacity
        self.plain: np.ndarray = flags.plain  # bool per row
        self.driver: np.ndarray = flags.driver  # int32 per row: interned ("driver", name)
        self.multiple: np.ndarray = flags.multiple  # bool per row: allowMultipleAllocations

    @classmethod
    def build(
        cls, row_device: Sequence[Device], intern: Intern, known: Mapping[tuple[str, Any], int]
    ) -> AttributeTable:
        """File every row's values (one pass over the devices). `known` is what `intern` has
        interned so far (read directly: this runs once per published value)."""
        attributes, capacity, flags = _file(row_device, np.arange(len(row_device)), intern, known)
        return cls(len(row_device), attributes, capacity, flags)

    @classmethod
    def of_rows(
        cls,
        row_device: Sequence[Device],
        rows: np.ndarray,
        intern: Intern,
        known: Mapping[tuple[str, Any], int],
    ) -> AttributeTable:
        """The table of just `rows`, numbered 0..len(rows)-1 in their order: what a carried
        column or mask works out for the rows of rebuilt nodes (one pass over their devices,
        then the same array operations as over a whole table)."""
        attributes, capacity, flags = _file(row_device, rows, intern, known, local=True, lazy=True)
        return cls(len(rows), attributes, capacity, flags)

    def carried(
        self,
        row_device: Sequence[Device],
        gather: np.ndarray,
        fresh: np.ndarray,
        intern: Intern,
        known: Mapping[tuple[str, Any], int],
    ) -> AttributeTable:
        """This (previous) generation's entries on a new generation's rows.

        `gather[row]` is this table's row for a new row of an unchanged node, -1 for a `fresh`
        row (a rebuilt node's), whose devices are filed again.
        """
        new_row = np.full(self.num_rows, -1, dtype=np.int64)
        kept = np.flatnonzero(gather >= 0)
        new_row[gather[kept]] = kept
        added_attributes, added_capacity, added = _file(row_device, fresh, intern, known)
        flags = _Flags(
            np.zeros(len(gather), dtype=bool),
            np.full(len(gather), -1, dtype=np.int32),
            np.zeros(len(gather), dtype=bool),
        )
        for mine, theirs, new in zip(flags, (self.plain, self.driver, self.multiple), added, strict=True):
            mine[kept] = theirs[gather[kept]]
            mine[fresh] = new
        return AttributeTable(
            len(gather),
            _moved(self.attributes, new_row, added_attributes),
            _moved(self.capacity, new_row, added_capacity),
            flags,
        )

    def column(self, entries: Entries, name: str) -> np.ndarray:
        """Per row, the code filed under `name` in `entries` (-1 where absent)."""
        out = np.full(self.num_rows, -1, dtype=np.int32)
        found = entries.get(name)
        if found is not None:
            out[found[0]] = found[1]
        return out


class _Flags(NamedTuple):
    plain: np.ndarray
    driver: np.ndarray
    multiple: np.ndarray


def _file(
    row_device: Sequence[Device],
    rows: np.ndarray,
    intern: Intern,
    known: Mapping[tuple[str, Any], int],
    *,
    local: bool = False,
    lazy: bool = False,
) -> tuple[Entries, Entries, _Flags]:
    """The entries and per-row flags of `rows` (filed under their row numbers, or with `local`
    under their positions in `rows`); with `lazy`, each name's arrays are made when read (a
    table of a few rows is read for a few names of the dozens filed).

    This loop runs once per published value (millions at 5,000 nodes), so it is written for
    speed: value objects are mostly shared between devices (`extender.cluster.compact`), so each
    is coded once per call (by identity: every one is alive for the whole call).
    """
    attributes: dict[str, tuple[list[int], list[int]]] = {}
    capacities: dict[str, tuple[list[int], list[int]]] = {}
    coded: dict[int, tuple[int, bool]] = {}  # id(value) -> (code, plain)
    quantities: dict[int, int] = {}  # id(CapacitySpec) -> code
    driver_codes: dict[str, int] = {}
    plains: list[bool] = []
    drivers: list[int] = []
    multiple: list[bool] = []
    # Every row in order: iterate (row_device may be a SpannedList, whose indexing bisects).
    everything = len(rows) == len(row_device) and (
        len(rows) == 0 or (rows[0] == 0 and rows[-1] == len(rows) - 1)
    )
    pairs: Iterable[tuple[int, Device]]
    if everything:
        pairs = enumerate(row_device)
    elif local:
        pairs = enumerate([row_device[row] for row in rows.tolist()])
    else:
        pairs = ((row, row_device[row]) for row in rows.tolist())
    for row, device in pairs:
        is_plain = True
        for name, raw in device.attributes.items():
            found = coded.get(id(raw))
            if found is None:
                found = coded[id(raw)] = _code_and_plain(raw, intern, known)
            code, plain_value = found
            is_plain = is_plain and plain_value
            entries = attributes.get(name)
            if entries is None:
                entries = attributes[name] = ([], [])
            entries[0].append(row)
            entries[1].append(code)
        for name, spec in device.capacity.items():
            code = quantities.get(id(spec), -1)
            if code < 0:
                code = quantities[id(spec)] = intern(("quantity", str(spec.value)))
            entries = capacities.get(name)
            if entries is None:
                entries = capacities[name] = ([], [])
            entries[0].append(row)
            entries[1].append(code)
        plains.append(is_plain)
        driver = device.id.driver
        code = driver_codes.get(driver, -1)
        if code < 0:
            code = driver_codes[driver] = intern(("driver", driver))
        drivers.append(code)
        multiple.append(device.allow_multiple_allocations)
    flags = _Flags(
        np.array(plains, dtype=bool), np.array(drivers, dtype=np.int32), np.array(multiple, dtype=bool)
    )
    if lazy:
        return _LazyEntries(attributes), _LazyEntries(capacities), flags
    return _arrays(attributes), _arrays(capacities), flags


def _code_and_plain(raw: Any, intern: Intern, known: Mapping[tuple[str, Any], int]) -> tuple[int, bool]:
    """A value's code, and whether CEL converts it plainly (`plain`)."""
    if type(raw) is dict and len(raw) == 1:
        ((kind, item),) = raw.items()
        if type(item) is _SCALAR_TYPES.get(kind):
            key = (kind, item)
            code = known.get(key, -1)
            if code < 0:
                code = intern(key)
            return code, kind != "version" or cel.is_version(str(item))
    return value_code(raw, intern), False


def _arrays(entries: dict[str, tuple[list[int], list[int]]]) -> Entries:
    return {
        name: (np.array(rows, dtype=np.int64), np.array(codes, dtype=np.int32))
        for name, (rows, codes) in entries.items()
    }


class _LazyEntries(Mapping[str, tuple[np.ndarray, np.ndarray]]):
    """Entries kept as the lists they were filed in, made arrays when read."""

    __slots__ = ("_lists",)

    def __init__(self, lists: dict[str, tuple[list[int], list[int]]]) -> None:
        self._lists = lists

    def __getitem__(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        rows, codes = self._lists[name]
        return np.array(rows, dtype=np.int64), np.array(codes, dtype=np.int32)

    def __iter__(self) -> Iterator[str]:
        return iter(self._lists)

    def __len__(self) -> int:
        return len(self._lists)


def _moved(entries: Entries, new_row: np.ndarray, added: Entries) -> Entries:
    """`entries` on the new rows (entries of rows that are gone dropped), plus `added`."""
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name, (rows, codes) in entries.items():
        moved = new_row[rows]
        keep = moved >= 0
        out[name] = (moved[keep], codes[keep])
    for name, (rows, codes) in added.items():
        if name in out:
            old_rows, old_codes = out[name]
            out[name] = (np.concatenate([old_rows, rows]), np.concatenate([old_codes, codes]))
        else:
            out[name] = (rows, codes)
    return {name: pair for name, pair in out.items() if len(pair[0])}
