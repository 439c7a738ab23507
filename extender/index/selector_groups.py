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

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from extender import cel
from extender.allocator.model import Device

if TYPE_CHECKING:
    from extender.index.snapshot import DeviceIndex

Verdict = tuple[bool, bool]  # (selected, a CEL runtime error)
#: Code of a read value the groups cannot vouch for (see the module docstring).
ALONE = -3
_PLAIN_TYPES: dict[str, type] = {"int": int, "bool": bool, "string": str}


def evaluate_rows(
    index: DeviceIndex,
    rows: np.ndarray,
    expressions: tuple[str, ...],
    verdict_of: Callable[[Device], Verdict],
    match: np.ndarray,
    error: np.ndarray,
) -> None:
    """Write `verdict_of`'s answer for every row of `rows` into `match` and `error`.

    `verdict_of` evaluates `expressions` on one device; it runs once per group of rows whose
    devices read equal values, or once per device where grouping does not apply.
    """
    if len(rows) == 0:
        return
    reads = cel.union_of_reads(expressions)
    if reads is None:
        _one_by_one(index, rows, verdict_of, match, error)
        return
    columns = [index.device_column("cel:plain", _plain_code, rows)]
    columns += [
        index.device_column(_column_name(read), _code_of(index, read), rows) for read in sorted(reads)
    ]
    keys = np.stack([column[rows] for column in columns])
    alone = (keys[0] == 0) | (keys[1:] == ALONE).any(axis=0)
    _one_by_one(index, rows[alone], verdict_of, match, error)
    grouped = rows[~alone]
    if len(grouped) == 0:
        return
    group = _group_ids(keys[1:, ~alone])
    _, first = np.unique(group, return_index=True)
    verdicts = [verdict_of(index.row_device[row]) for row in grouped[first].tolist()]
    selected = np.fromiter((v[0] for v in verdicts), dtype=bool, count=len(verdicts))
    failed = np.fromiter((v[1] for v in verdicts), dtype=bool, count=len(verdicts))
    match[grouped] = selected[group]
    error[grouped] = failed[group]


def _one_by_one(
    index: DeviceIndex,
    rows: np.ndarray,
    verdict_of: Callable[[Device], Verdict],
    match: np.ndarray,
    error: np.ndarray,
) -> None:
    verdicts: dict[int, Verdict] = {}
    row_device = index.row_device
    for row in rows.tolist():
        device = row_device[row]
        verdict = verdicts.get(id(device))
        if verdict is None:
            verdict = verdicts[id(device)] = verdict_of(device)
        match[row], error[row] = verdict


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


def _code_of(index: DeviceIndex, read: cel.Read) -> Callable[[Device], int]:
    """Per device, the interned code of the value `read` names (-1 absent, ALONE see above)."""
    if read == ("driver",):
        return lambda device: index.intern(("driver", device.id.driver))
    if read == ("allowMultipleAllocations",):
        return lambda device: int(device.allow_multiple_allocations)
    kind, domain, name = read
    if "/" in domain:  # no published name splits into such a domain: CEL sees an empty map
        return lambda device: -1
    qualified = f"{domain}/{name}"
    bare = None if "/" in name else name  # a bare name never holds a slash (it would be qualified)
    if kind == "attributes":
        return lambda device: _attribute_code(index, device, qualified, bare, domain)
    return lambda device: _capacity_code(index, device, qualified, bare, domain)


def _attribute_code(index: DeviceIndex, device: Device, qualified: str, bare: str | None, domain: str) -> int:
    attributes = device.attributes
    value = attributes.get(qualified)
    if bare is not None and device.id.driver == domain and bare in attributes:
        if value is not None:
            return ALONE
        value = attributes[bare]
    code = index.value_code(value)
    return ALONE if code == -2 else code


def _capacity_code(index: DeviceIndex, device: Device, qualified: str, bare: str | None, domain: str) -> int:
    capacity = device.capacity
    spec = capacity.get(qualified)
    if bare is not None and device.id.driver == domain and bare in capacity:
        if spec is not None:
            return ALONE
        spec = capacity[bare]
    return -1 if spec is None else index.intern(("quantity", str(spec.value)))


def _plain_code(device: Device) -> int:
    """1 when the device's CEL input is built from single scalar values of their declared kind."""
    for raw in device.attributes.values():
        if type(raw) is not dict or len(raw) != 1:
            return 0
        ((kind, value),) = raw.items()
        expected = _PLAIN_TYPES.get(kind)
        if expected is not None:
            if type(value) is not expected:
                return 0
        elif kind != "version" or type(value) is not str or not cel.is_version(value):
            return 0
    return 1
