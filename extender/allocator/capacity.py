"""Consumable capacity (DRAConsumableCapacity, spec dra.md §3.5).

A multi-allocatable device (`allowMultipleAllocations: true`) is shared: every allocation
consumes some of each capacity (the request rounded up by the capacity's request policy, or
the policy default, or the whole capacity when the request does not name it), and the sum over
existing shares, shares chosen in this search and the new one must stay within the capacity.
For a dedicated device a capacity request is only a filter: requested <= capacity.

Capacity names: Kubernetes 1.36 (allocator v0.36.2) matches request keys to device capacity keys
literally, so `<driver>/memory` in a request does not find a device capacity `memory`, nor the
reverse. Kubernetes 1.37 qualifies bare names with the driver's domain first (dra.md §3.5). Which
rule applies is `Features.capacity_names_1_37` (off by default: we reproduce 1.36); every function
here takes it as `qualified`.
"""

from __future__ import annotations

from fractions import Fraction

from extender.allocator.model import CapacitySpec, Device
from extender.errors import AllocationError
from extender.quantity import BINARY_SI, Quantity

Consumption = dict[str, Quantity]  # keyed by the capacity name as the device publishes it

_ZERO = Quantity.parse(0)


def _qualify(name: str, driver: str) -> str:
    return name if "/" in name else f"{driver}/{name}"


def _device_capacities(device: Device, qualified: bool) -> dict[str, tuple[str, CapacitySpec]]:
    """Lookup name -> (published name, spec).

    Literal (1.36): the published names themselves. Qualified (1.37): bare names get the
    driver's domain, and a qualified publication wins over a bare one of the same capacity.
    """
    if not qualified:
        return {name: (name, spec) for name, spec in device.capacity.items()}
    result: dict[str, tuple[str, CapacitySpec]] = {}
    for name, spec in device.capacity.items():
        key = _qualify(name, device.id.driver)
        if key in result and "/" not in name:
            continue
        result[key] = (name, spec)
    return result


def _requested(requests: dict[str, Quantity], driver: str, qualified_names: bool) -> dict[str, Quantity]:
    """Request lookup name -> amount; with 1.37 naming, one capacity named twice is an error."""
    if not qualified_names:
        return requests
    qualified: dict[str, Quantity] = {}
    original: dict[str, str] = {}
    for name, value in requests.items():
        key = _qualify(name, driver)
        if key in qualified:
            raise AllocationError(f'capacity "{key}" requested both as "{original[key]}" and as "{name}"')
        qualified[key] = value
        original[key] = name
    return qualified


def _round_up(spec: CapacitySpec, requested: Quantity) -> Quantity:
    if spec.range_min is not None:
        if requested < spec.range_min:
            return spec.range_min
        if spec.range_step is not None and spec.range_step.exact > 0:
            # v0.36.3 roundUpRange: whole numbers (Go's Value(), rounding up), written BinarySI.
            value, step, minimum = requested.value(), spec.range_step.value(), spec.range_min.value()
            added = value - minimum
            n = _go_div(added, step) + (1 if _go_mod(added, step) else 0)
            return Quantity.from_fraction(minimum + step * n, BINARY_SI)
        return requested
    for valid in spec.valid_values:
        if requested <= valid:
            return valid
    return requested


def _violates(spec: CapacitySpec, consumed: Quantity) -> bool:
    if not spec.has_policy:
        return False
    if spec.default is not None and consumed == spec.default:
        return False
    if spec.range_min is not None:
        if spec.range_max is not None and consumed > spec.range_max:
            return True
        if spec.range_step is not None and spec.range_step.exact > 0:
            # v0.36.3 violateValidRange: whole numbers (Go's Value()), Go's remainder.
            return _go_mod(consumed.value() - spec.range_min.value(), spec.range_step.value()) != 0
        return False
    if spec.valid_values:
        return consumed not in spec.valid_values
    return False


def consumption(
    device: Device, requests: dict[str, Quantity] | None, *, qualified: bool = False
) -> Consumption | None:
    """What one allocation of a multi-allocatable device consumes; None if it cannot (policy or
    a requested capacity the device lacks)."""
    capacities = _device_capacities(device, qualified)
    wanted = _requested(requests or {}, device.id.driver, qualified)
    if any(key not in capacities for key in wanted):
        return None
    consumed: Consumption = {}
    for key, (published, spec) in capacities.items():
        if key in wanted:
            amount = _round_up(spec, wanted[key]) if spec.has_policy else wanted[key]
        else:
            amount = spec.default if spec.default is not None else spec.value
        if _violates(spec, amount):
            return None
        consumed[published] = amount
    return consumed


def fits(
    device: Device,
    requests: dict[str, Quantity] | None,
    *,
    multi: bool,
    existing: Consumption | None,
    allocating: Consumption | None,
    qualified: bool = False,
) -> bool:
    """Upstream CmpRequestOverCapacity: can this request take (a share of) the device?"""
    if not multi:
        capacities = _device_capacities(device, qualified)
        for key, value in _requested(requests or {}, device.id.driver, qualified).items():
            if key not in capacities or value > capacities[key][1].value:
                return False
        return True
    consumed = consumption(device, requests, qualified=qualified)
    if consumed is None:
        return False
    return _within_capacity(device, consumed, existing, allocating)


def _within_capacity(
    device: Device, consumed: Consumption, existing: Consumption | None, allocating: Consumption | None
) -> bool:
    """Whether `consumed`, on top of what is held and what this allocation already took, fits
    each capacity of the device (both versions compare the sums the same way)."""
    for name, amount in consumed.items():
        total = (
            amount.exact + (existing or {}).get(name, _ZERO).exact + (allocating or {}).get(name, _ZERO).exact
        )
        if total > device.capacity[name].value.exact:
            return False
    return True


# ---------------------------------------------------------------- Kubernetes 1.37 (v0.37.2)
#
# 1.37 rewrote the arithmetic (consumable_capacity.go): a request that cannot be represented in
# a range's arithmetic (past MaxInt64 on the integer path, past the milli range on the
# DRAFractionalCapacityRange path) or a negative consumption aborts the allocation instead of
# skipping the device; ranges round in integers (Go's `Value()`, rounding up) unless the
# fractional feature is on and min/max/step are exact in thousandths; the rounded value takes the
# step's format. Every capacity is resolved before any soft "does not fit" answer.

_MAX_INT64 = 2**63 - 1
_NOT_REPRESENTABLE = "capacity request cannot be represented in the device's range arithmetic"


class CapacityArithmeticError(Exception):
    """A 1.37 capacity request that aborts the allocation (text as upstream's wrapped error)."""


def _go_div(a: int, b: int) -> int:
    """Go's integer division (truncates towards zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _go_mod(a: int, b: int) -> int:
    return a - b * _go_div(a, b)


def _safe_milli(q: Quantity) -> int | None:
    """`q` in thousandths when that is exact and fits int64 (upstream's safeMilliValue), else None."""
    milli = q.exact * 1000
    if milli.denominator != 1 or abs(milli) > _MAX_INT64:
        return None
    return int(milli)


def _use_milli(spec: CapacitySpec, fractional: bool) -> bool:
    if not fractional:
        return False
    for q in (spec.range_min, spec.range_max, spec.range_step):
        if q is not None and _safe_milli(q) is None:
            return False
    step = _safe_milli(spec.range_step) if spec.range_step is not None else None
    return step is None or step >= 1


def _round_up_137(spec: CapacitySpec, requested: Quantity, fractional: bool) -> Quantity:
    minimum, step = spec.range_min, spec.range_step
    assert minimum is not None
    if requested < minimum:
        return minimum
    if step is None:
        return requested
    if _use_milli(spec, fractional):
        value = _safe_milli(requested)
        if value is None:
            raise CapacityArithmeticError(
                f"{_NOT_REPRESENTABLE}: request {requested} is not a representable milli value"
            )
        step_m, min_m = step.milli_value(), minimum.milli_value()
        added = value - min_m
        n = _go_div(added, step_m) + (1 if _go_mod(added, step_m) else 0)
        if n > _go_div(_MAX_INT64 - min_m, step_m):
            raise CapacityArithmeticError(
                f"{_NOT_REPRESENTABLE}: rounding request {requested} up to the next step passes "
                "the milli-value range"
            )
        return Quantity.from_fraction(Fraction(min_m + step_m * n, 1000), step.fmt)
    if requested.exact > _MAX_INT64:
        raise CapacityArithmeticError(f"{_NOT_REPRESENTABLE}: request {requested} exceeds MaxInt64")
    value, step_i, min_i = requested.value(), step.value(), minimum.value()
    added = value - min_i
    n = _go_div(added, step_i) + (1 if _go_mod(added, step_i) else 0)
    if min_i >= 0 and n > _go_div(_MAX_INT64 - min_i, step_i):
        raise CapacityArithmeticError(
            f"{_NOT_REPRESENTABLE}: rounding request {requested} up to the next step passes MaxInt64"
        )
    return Quantity.from_fraction(min_i + step_i * n, step.fmt)


def _consumed_137(spec: CapacitySpec, requested: Quantity | None, fractional: bool) -> Quantity:
    if requested is None:
        return spec.default if spec.default is not None else spec.value
    if spec.range_min is not None:
        return _round_up_137(spec, requested, fractional)
    for valid in spec.valid_values:
        if requested <= valid:
            return valid
    return requested


def _violates_137(spec: CapacitySpec, consumed: Quantity, fractional: bool) -> bool:
    if not spec.has_policy:
        return False
    if spec.default is not None and consumed == spec.default:
        return False
    if spec.range_min is not None:
        if spec.range_max is not None and consumed > spec.range_max:
            return True
        step = spec.range_step
        if step is not None:
            if _use_milli(spec, fractional):
                value = _safe_milli(consumed)
                if value is None:
                    return True
                return _go_mod(value - spec.range_min.milli_value(), step.milli_value()) != 0
            return _go_mod(consumed.value() - spec.range_min.value(), step.value()) != 0
        return False
    if spec.valid_values:
        return consumed not in spec.valid_values
    return False


def consumption_137(
    device: Device, requests: dict[str, Quantity] | None, *, fractional: bool
) -> Consumption | None:
    """1.37: what one allocation consumes of every capacity; None if a requested capacity is
    missing or a policy refuses; CapacityArithmeticError when upstream aborts."""
    wanted = requests or {}
    if any(name not in device.capacity for name in wanted):
        return None
    consumed: Consumption = {}
    for name, spec in device.capacity.items():  # resolve all first: an abort must not depend on order
        try:
            amount = _consumed_137(spec, wanted.get(name), fractional)
        except CapacityArithmeticError as exc:
            raise CapacityArithmeticError(f'capacity "{name}": {exc}') from None
        if amount.sign() < 0:
            raise CapacityArithmeticError(f'capacity "{name}": capacity value is negative')
        consumed[name] = amount
    for name, spec in device.capacity.items():
        if _violates_137(spec, consumed[name], fractional):
            return None
    return consumed


def fits_137(
    device: Device,
    requests: dict[str, Quantity] | None,
    *,
    existing: Consumption | None,
    allocating: Consumption | None,
    fractional: bool,
) -> bool:
    """1.37 CmpRequestOverCapacity, for every device (dedicated ones have no existing/allocating)."""
    consumed = consumption_137(device, requests, fractional=fractional)  # may raise: the caller words it
    if consumed is None:
        return False
    return _within_capacity(device, consumed, existing, allocating)
