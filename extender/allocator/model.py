"""Parsed, immutable views of ResourceSlices and their devices.

The allocator never reads raw slice dicts: `parse_slice` turns one ResourceSlice into a `Slice`
holding `Device`s. A Device object lives as long as its slice is unchanged, so the per-device
caches it carries (the CEL input and selector results, see `extender.cel`) are reused across
scheduling cycles and thrown away with the slice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from extender.quantity import Quantity

_T = TypeVar("_T")


class DeviceID(NamedTuple):
    """driver/pool/device: the identity of a device across the cluster."""

    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


class PoolID(NamedTuple):
    """driver/pool."""

    driver: str
    pool: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}"


@dataclass(frozen=True, slots=True)
class Taint:
    """A device taint (from the slice or a DeviceTaintRule)."""

    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class CapacitySpec:
    """One device capacity: its value and, for multi-allocatable devices, the request policy."""

    value: Quantity
    default: Quantity | None = None
    valid_values: tuple[Quantity, ...] = ()
    range_min: Quantity | None = None
    range_max: Quantity | None = None
    range_step: Quantity | None = None

    @property
    def has_policy(self) -> bool:
        return self.default is not None or bool(self.valid_values) or self.range_min is not None


@dataclass(eq=False, slots=True)
class Device:
    """One device of a slice. Identity (eq/hash) is object identity: devices are never copied.

    Read-only apart from the caches below: `attributes` is the stored slice's own map, and
    devices that state the same capacity or counter consumption share one parse of it.

    `cel_input` and `selector_results` are caches owned by `extender.index.selecting`; they are the
    only mutable fields and are written only by the thread that evaluates selectors.
    `selector_results` stays None until the device's first result: most devices never get one
    (selectors run once per group of equal values), and an empty dict per device cost 12 MiB at
    5,000 mixed nodes (docs/memory-profile.md).
    """

    id: DeviceID
    slice_name: str
    attributes: dict[str, dict[str, Any]]
    capacity: dict[str, CapacitySpec]
    consumes_counters: tuple[tuple[str, dict[str, Quantity]], ...]
    taints: tuple[Taint, ...]
    binding_conditions: tuple[str, ...]
    binding_failure_conditions: tuple[str, ...]
    binds_to_node: bool
    allow_multiple_allocations: bool
    # Only meaningful when the slice uses perDeviceNodeSelection.
    node_name: str | None
    node_selector: dict[str, Any] | None
    all_nodes: bool
    #: 1.37 DRADeviceCompatibilityGroups: the groups of each counter consumption, aligned with
    #: `consumes_counters`; empty when no consumption names any (the common case).
    counter_groups: tuple[frozenset[str], ...] = ()
    cel_input: Any = None
    selector_results: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return self.id.device


@dataclass(frozen=True, slots=True)
class Slice:
    """A ResourceSlice, parsed. `devices` keep the order the driver listed them in."""

    name: str
    driver: str
    pool: str
    generation: int
    resource_slice_count: int
    node_name: str | None
    node_selector: dict[str, Any] | None
    all_nodes: bool
    per_device_node_selection: bool
    shared_counters: tuple[tuple[str, dict[str, Quantity]], ...]
    devices: tuple[Device, ...]
    #: 1.37 DRAOptionalNodeOperations: node operations the driver lets kubelet skip (`["*"]`).
    #: Only the 1.37 allocator reads it (a 1.36 API server drops the field).
    skip_node_operations: tuple[str, ...] = ()

    @property
    def pool_id(self) -> PoolID:
        return PoolID(self.driver, self.pool)


def _quantity(value: Any, where: str) -> Quantity:
    try:
        return Quantity.parse(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: invalid quantity {value!r}: {exc}") from exc


def _counters(raw: dict[str, Any] | None, where: str) -> dict[str, Quantity]:
    return {
        name: _quantity((counter or {}).get("value"), f"{where}.{name}")
        for name, counter in (raw or {}).items()
    }


def _capacity(name: str, raw: dict[str, Any], where: str) -> CapacitySpec:
    value = _quantity(raw.get("value"), f"{where}.{name}.value")
    policy = raw.get("requestPolicy") or {}
    default = policy.get("default")
    valid_range = policy.get("validRange") or {}
    return CapacitySpec(
        value=value,
        default=_quantity(default, f"{where}.{name}.requestPolicy.default") if default is not None else None,
        valid_values=tuple(
            _quantity(v, f"{where}.{name}.requestPolicy.validValues") for v in policy.get("validValues") or ()
        ),
        range_min=_quantity(valid_range["min"], where) if valid_range.get("min") is not None else None,
        range_max=_quantity(valid_range["max"], where) if valid_range.get("max") is not None else None,
        range_step=_quantity(valid_range["step"], where) if valid_range.get("step") is not None else None,
    )


#: Parsed capacity maps, counter consumptions and counter-set counters remembered by raw object
#: (see `_shared`); emptied when full.
SHARED_PARSE_LIMIT = 1 << 12
# (what the parse is, id(raw JSON value)) -> (raw value, its parse). The raw value is held, so no
# other object can take its id meanwhile. The stored ResourceSlices share one raw value between
# the devices that state the same one (`extender.cluster.compact`), so those devices share one
# parse too. One raw value can be two things: `{"memory": {"value": "80Gi"}}` is a capacity map
# and a counter set's counters, shared as one object since their JSON is the same.
_shared_parses: dict[tuple[str, int], tuple[Any, Any]] = {}


def _shared(what: str, raw: Any, parse: Callable[[], _T]) -> _T:
    """`parse()` of `raw` as `what`, once per raw object: equal devices then share one
    immutable parse."""
    key = (what, id(raw))
    known = _shared_parses.get(key)
    if known is not None and known[0] is raw:
        parsed: _T = known[1]
        return parsed
    parsed = parse()  # raises before anything is remembered
    if len(_shared_parses) >= SHARED_PARSE_LIMIT:
        _shared_parses.clear()
    _shared_parses[key] = (raw, parsed)
    return parsed


def _parse_capacity(raw: dict[str, Any], where: str) -> dict[str, CapacitySpec]:
    return {name: _capacity(name, cap or {}, where) for name, cap in raw.items()}


def _parse_consumes(
    raw: list[Any], where: str
) -> tuple[tuple[tuple[str, dict[str, Quantity]], ...], tuple[frozenset[str], ...]]:
    consumes = tuple(
        (c.get("counterSet", ""), _counters(c.get("counters"), f"{where}[{i}]")) for i, c in enumerate(raw)
    )
    groups = tuple(frozenset(c.get("compatibilityGroups") or ()) for c in raw)
    return consumes, groups if any(groups) else ()


def _shared_counters(raw: dict[str, Any] | None, where: str) -> dict[str, Quantity]:
    """A counter set's counters, parsed once per shared raw map (`extender.cluster.compact`)."""
    return _shared("counters", raw, lambda: _counters(raw, where)) if raw else {}


def parse_device(raw: dict[str, Any], *, driver: str, pool: str, slice_name: str, where: str) -> Device:
    """Parse one entry of `spec.devices`; raises ValueError naming the field on bad input.

    The parse keeps the raw `attributes` map itself (not a copy) and may share its capacity and
    counter parses with other devices: all of them are read-only (`Device`)."""
    taints = tuple(
        Taint(key=t.get("key", ""), value=t.get("value", "") or "", effect=t.get("effect", "") or "")
        for t in raw.get("taints") or ()
    )
    raw_consumes = raw.get("consumesCounters")
    consumes, groups = (
        _shared("consumes", raw_consumes, lambda: _parse_consumes(raw_consumes, f"{where}.consumesCounters"))
        if raw_consumes
        else ((), ())
    )
    raw_capacity = raw.get("capacity")
    capacity = (
        _shared("capacity", raw_capacity, lambda: _parse_capacity(raw_capacity, f"{where}.capacity"))
        if raw_capacity
        else {}
    )
    attributes = raw.get("attributes")
    return Device(
        id=DeviceID(driver, pool, raw["name"]),
        slice_name=slice_name,
        attributes=attributes if type(attributes) is dict else dict(attributes or {}),
        capacity=capacity,
        consumes_counters=consumes,
        taints=taints,
        binding_conditions=tuple(raw.get("bindingConditions") or ()),
        binding_failure_conditions=tuple(raw.get("bindingFailureConditions") or ()),
        binds_to_node=bool(raw.get("bindsToNode")),
        allow_multiple_allocations=bool(raw.get("allowMultipleAllocations")),
        node_name=raw.get("nodeName") or None,
        node_selector=raw.get("nodeSelector"),
        all_nodes=bool(raw.get("allNodes")),
        counter_groups=groups,
    )


def parse_slice(raw: dict[str, Any]) -> Slice:
    """Parse one ResourceSlice object; raises ValueError naming the field on bad input."""
    name = (raw.get("metadata") or {}).get("name", "")
    spec = raw.get("spec") or {}
    driver = spec.get("driver", "")
    pool = spec.get("pool") or {}
    pool_name = pool.get("name", "")
    devices = tuple(
        parse_device(d, driver=driver, pool=pool_name, slice_name=name, where=f"spec.devices[{i}]")
        for i, d in enumerate(spec.get("devices") or ())
    )
    return Slice(
        name=name,
        driver=driver,
        pool=pool_name,
        generation=int(pool.get("generation") or 0),
        resource_slice_count=int(pool.get("resourceSliceCount") or 0),
        node_name=spec.get("nodeName") or None,
        node_selector=spec.get("nodeSelector"),
        all_nodes=bool(spec.get("allNodes")),
        per_device_node_selection=bool(spec.get("perDeviceNodeSelection")),
        shared_counters=tuple(
            (cs.get("name", ""), _shared_counters(cs.get("counters"), f"spec.sharedCounters[{i}]"))
            for i, cs in enumerate(spec.get("sharedCounters") or ())
        ),
        devices=devices,
        skip_node_operations=tuple(spec.get("skipNodeOperations") or ()),
    )
