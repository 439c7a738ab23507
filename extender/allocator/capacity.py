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

from math import ceil

from extender.allocator.model import CapacitySpec, Device
from extender.errors import AllocationError
from extender.quantity import Quantity

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
            steps = ceil((requested.exact - spec.range_min.exact) / spec.range_step.exact)
            return Quantity.from_fraction(spec.range_min.exact + steps * spec.range_step.exact, requested.fmt)
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
            return (consumed.exact - spec.range_min.exact) % spec.range_step.exact != 0
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
    for name, amount in consumed.items():
        total = (
            amount.exact + (existing or {}).get(name, _ZERO).exact + (allocating or {}).get(name, _ZERO).exact
        )
        if total > device.capacity[name].value.exact:
            return False
    return True
