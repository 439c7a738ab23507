"""Selector masks by groups of devices with equal read values: CEL runs once per group.

A selector reads a fixed set of values of `device` (its footprint, `extender.cel.footprint`).
Devices that agree on those values get the same result, so the rows to evaluate are grouped by
per-row codes of the values (interned columns of the index, `DeviceIndex.device_column`) and one
device per group is evaluated. On a fleet of a few device models this turns the class warm-up and
the first mask of a new claim shape from one CEL run per device into a few per distinct model.

A row's device is evaluated on its own (as without groups) when the grouping could not prove
equal results: its CEL input is not plainly built (an attribute with no single scalar value,
or a version that does not parse: the input itself fails or converts in ways the codes do not
capture), a value read is a list, or the same attribute is published both qualified and bare
under the device's driver (CEL then sees whichever comes later in the map).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from extender import cel
from extender.allocator.model import Device
from extender.index.attribute_table import LIST, MALFORMED, AttributeTable, plain, value_code

if TYPE_CHECKING:
    from extender.index.snapshot import DeviceIndex

Verdict = tuple[bool, bool]  # (selected, a CEL runtime error)
#: Code of a read value the groups cannot vouch for (see the module docstring).
ALONE = -3


def evaluate_rows(
    index: DeviceIndex,
    rows: np.ndarray,
    expressions: tuple[str, ...],
    verdict_of: Callable[[Device], Verdict],
    match: np.ndarray,
    error: np.ndarray,
    at: np.ndarray | None = None,
) -> None:
    """Write `verdict_of`'s answer for every row of `rows` into `match` and `error`, at the rows
    themselves or at `at` (aligned with `rows`).

    `verdict_of` evaluates `expressions` on one device; it runs once per group of rows whose
    devices read equal values, or once per device where grouping does not apply.
    """
    if len(rows) == 0:
        return
    if at is None:
        at = rows
    reads = cel.union_of_reads(expressions)
    if reads is None:
        _one_by_one(index, rows, verdict_of, match, error, at)
        return
    columns = [_plain_column(index, rows)]
    columns += [_read_column(index, read, rows) for read in sorted(reads)]
    keys = np.stack([column[rows] for column in columns])
    alone = (keys[0] == 0) | (keys[1:] == ALONE).any(axis=0)
    _one_by_one(index, rows[alone], verdict_of, match, error, at[alone])
    grouped = rows[~alone]
    if len(grouped) == 0:
        return
    group = _group_ids(keys[1:, ~alone])
    _, first = np.unique(group, return_index=True)
    verdicts = [verdict_of(index.row_device[row]) for row in grouped[first].tolist()]
    selected = np.fromiter((v[0] for v in verdicts), dtype=bool, count=len(verdicts))
    failed = np.fromiter((v[1] for v in verdicts), dtype=bool, count=len(verdicts))
    match[at[~alone]] = selected[group]
    error[at[~alone]] = failed[group]


def reads_unchanged(
    index: DeviceIndex, rows: np.ndarray, expressions: tuple[str, ...], before: Mapping[str, np.ndarray]
) -> bool:
    """Whether every row of `rows` reads, for `expressions`, what the same row read in the
    generation whose code columns are `before` (this one's rows are that one's but some nodes',
    and `rows` are theirs): then each row's verdict is the one it had there. True only when it is
    sure: the footprint is known, every row is plainly built and no read value is one the groups
    cannot vouch for, and each column came out as that generation's very array
    (`DeviceIndex.device_column` keeps it when the rows' codes are as before)."""
    reads = cel.union_of_reads(expressions)
    if reads is None:
        return False
    plain = _plain_column(index, rows)
    if plain is not before.get("cel:plain") or not plain[rows].all():
        return False
    for read in sorted(reads):
        column = _read_column(index, read, rows)
        if column is not before.get(_column_name(read)) or (column[rows] == ALONE).any():
            return False
    return True


def _one_by_one(
    index: DeviceIndex,
    rows: np.ndarray,
    verdict_of: Callable[[Device], Verdict],
    match: np.ndarray,
    error: np.ndarray,
    at: np.ndarray,
) -> None:
    verdicts: dict[int, Verdict] = {}
    row_device = index.row_device
    for row, where in zip(rows.tolist(), at.tolist(), strict=True):
        device = row_device[row]
        verdict = verdicts.get(id(device))
        if verdict is None:
            verdict = verdicts[id(device)] = verdict_of(device)
        match[where], error[where] = verdict


def _group_ids(keys: np.ndarray) -> np.ndarray:
    """Dense ids 0..g-1 of the distinct columns of `keys` (one key row per read)."""
    group = np.zeros(keys.shape[1], dtype=np.int64)
    for column in keys:
        _, dense = np.unique(column, return_inverse=True)
        group = group * (int(dense.max()) + 1) + dense  # < rows**2: no overflow before re-densing
        _, group = np.unique(group, return_inverse=True)
    return group.reshape(-1)


def _column_name(read: cel.Read) -> str:
    return "cel:" + "\0".join(read)


#: Per device, and per attribute table (called without one: the index's whole table).
Ways = tuple[Callable[[Device], int], Callable[..., np.ndarray]]


def _read_column(index: DeviceIndex, read: cel.Read, rows: np.ndarray) -> np.ndarray:
    """Per row (at least `rows`), the code of the value `read` names: -1 absent, ALONE see above."""
    one, whole = read_ways(index, read)
    return index.device_column(_column_name(read), one, rows, whole=whole)


def read_ways(index: DeviceIndex, read: cel.Read) -> Ways:
    """Two equal ways to the codes of `read`: `one` per device (the rows of rebuilt nodes in a
    generation that carries the column) and `whole` over every row from the index's attribute
    table (array operations)."""
    if read == ("driver",):
        return (
            lambda device: index.intern(("driver", device.id.driver)),
            lambda table=None: (table or index.attribute_table()).driver.copy(),
        )
    if read == ("allowMultipleAllocations",):
        return (
            lambda device: int(device.allow_multiple_allocations),
            lambda table=None: (table or index.attribute_table()).multiple.astype(np.int32),
        )
    kind, domain, name = read
    if "/" in domain:  # no published name splits into such a domain: CEL sees an empty map
        return (
            lambda device: -1,
            lambda table=None: np.full(
                index.num_rows if table is None else table.num_rows, -1, dtype=np.int32
            ),
        )
    qualified = f"{domain}/{name}"
    bare = None if "/" in name else name  # a bare name never holds a slash (it would be qualified)

    def one(device: Device) -> int:
        published: dict[str, Any] = device.attributes if kind == "attributes" else device.capacity
        has_qualified = qualified in published
        has_bare = bare is not None and device.id.driver == domain and bare in published
        if has_qualified and has_bare:
            return ALONE  # CEL sees whichever comes later in the map
        if not has_qualified and not has_bare:
            return -1
        value = published[qualified] if has_qualified else published[str(bare)]
        if kind == "capacity":
            return index.intern(("quantity", str(value.value)))
        code = value_code(value, index.intern)
        return ALONE if code in (LIST, MALFORMED) else code

    def whole(table: AttributeTable | None = None) -> np.ndarray:
        table = table or index.attribute_table()
        entries = table.attributes if kind == "attributes" else table.capacity
        codes = table.column(entries, qualified)
        if bare is not None:
            by_bare = table.column(entries, bare)
            by_bare[table.driver != index.intern(("driver", domain))] = -1
            both = (codes != -1) & (by_bare != -1)
            codes = np.where(codes != -1, codes, by_bare)
            codes[both] = ALONE
        codes[(codes == LIST) | (codes == MALFORMED)] = ALONE
        return codes

    return one, whole


def _plain_column(index: DeviceIndex, rows: np.ndarray) -> np.ndarray:
    return index.device_column(
        "cel:plain",
        lambda device: int(plain(device)),
        rows,
        whole=lambda table: table.plain.astype(np.int32),
    )
