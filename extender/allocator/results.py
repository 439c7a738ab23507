"""Turn a found solution into `status.allocation` objects (spec dra.md §3.8)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from extender.allocator.features import Features
from extender.allocator.inputs import DeviceClassSpec
from extender.allocator.model import Device, Slice
from extender.allocator.requests import ClaimSpec
from extender.errors import AllocationError
from extender.quantity import Quantity


@dataclass(frozen=True, slots=True)
class DeviceResult:
    """One chosen device of a claim, in allocation order."""

    request: str  # request name, or subrequest name when `parent` is set
    parent: str
    device: Device
    slice: Slice
    admin_access: bool
    tolerations: tuple[dict[str, Any], ...]
    share_id: str
    consumed_capacity: dict[str, Quantity] | None

    @property
    def request_name(self) -> str:
        return f"{self.parent}/{self.request}" if self.parent else self.request


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    """The allocation of one claim: the chosen devices and the `status.allocation` object."""

    claim: ClaimSpec
    devices: tuple[DeviceResult, ...]
    allocation: dict[str, Any]


def _result_json(result: DeviceResult, features: Features) -> dict[str, Any]:
    device = result.device
    out: dict[str, Any] = {
        "request": result.request_name,
        "driver": device.id.driver,
        "pool": device.id.pool,
        "device": device.id.device,
    }
    if result.admin_access:
        out["adminAccess"] = True
    if result.tolerations:
        out["tolerations"] = [dict(t) for t in result.tolerations]
    if features.device_binding_and_status:
        if device.binding_conditions:
            out["bindingConditions"] = list(device.binding_conditions)
        if device.binding_failure_conditions:
            out["bindingFailureConditions"] = list(device.binding_failure_conditions)
    if features.v137 and result.slice.skip_node_operations:
        out["skipNodeOperations"] = list(result.slice.skip_node_operations)
    if result.share_id:
        out["shareID"] = result.share_id
    if result.consumed_capacity:
        out["consumedCapacity"] = {name: str(q) for name, q in result.consumed_capacity.items()}
    return out


def _configs(
    claim: ClaimSpec,
    chosen_classes: Sequence[tuple[str, DeviceClassSpec]],
    selected_subrequests: dict[int, int],
    *,
    v137: bool = False,
) -> list[dict[str, Any]]:
    configs: list[dict[str, Any]] = []
    by_class: dict[str, list[dict[str, Any]]] = {}
    for request_name, device_class in chosen_classes:
        entries = by_class.get(device_class.name)
        if entries is None:
            entries = [{"source": "FromClass", "requests": [], **config} for config in device_class.config]
            by_class[device_class.name] = entries
            configs.extend(entries)
        for entry in entries:
            entry["requests"].append(request_name)
    for config in claim.config:
        names = config.get("requests") or []
        body = {k: v for k, v in config.items() if k != "requests"}
        if not names:
            configs.append({"source": "FromClaim", **body})
            continue
        for index, request in enumerate(claim.requests):
            if request.name in names:
                configs.append({"source": "FromClaim", "requests": list(names), **body})
            elif request.first_available:
                chosen = request.first_available[selected_subrequests.get(index, 0)]
                if f"{request.name}/{chosen.name}" in names:
                    configs.append({"source": "FromClaim", "requests": list(names), **body})
                else:
                    continue
            else:
                continue
            if v137:
                break  # 1.37: a config naming several requests is added once, not once per request
    if v137:
        # 1.37: a config that covers every request (by name, or its chosen subrequest's) is
        # written with no `requests`, which means "all".
        covering = _covering_names(claim, selected_subrequests)
        for config in configs:
            names = config.get("requests")
            if names and all(any(n in names for n in options) for options in covering):
                del config["requests"]
    return configs


def _covering_names(claim: ClaimSpec, selected_subrequests: dict[int, int]) -> list[tuple[str, ...]]:
    """Per request, the names under which a config covers it (request, or request/chosen subrequest)."""
    out: list[tuple[str, ...]] = []
    for index, request in enumerate(claim.requests):
        if request.first_available:
            chosen = request.first_available[selected_subrequests.get(index, 0)]
            out.append((request.name, f"{request.name}/{chosen.name}"))
        else:
            out.append((request.name,))
    return out


def _node_selector(results: Sequence[DeviceResult], node_name: str) -> dict[str, Any] | None:
    fields: list[dict[str, Any]] = []
    expressions: list[dict[str, Any]] = []
    for result in results:
        if result.slice.per_device_node_selection:
            name, selector = result.device.node_name, result.device.node_selector
        else:
            name, selector = result.slice.node_name, result.slice.node_selector
        if name or result.device.binds_to_node:
            return {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
                ]
            }
        terms = (selector or {}).get("nodeSelectorTerms") or []
        if len(terms) > 1:
            raise AllocationError(f"unsupported ResourceSlice.NodeSelector with {len(terms)} terms")
        if terms:
            _add_new(terms[0].get("matchFields") or [], fields)
            _add_new(terms[0].get("matchExpressions") or [], expressions)
    if not fields and not expressions:
        return None
    term: dict[str, Any] = {}
    if expressions:
        term["matchExpressions"] = expressions
    if fields:
        term["matchFields"] = fields
    return {"nodeSelectorTerms": [term]}


def _add_new(source: list[dict[str, Any]], target: list[dict[str, Any]]) -> None:
    for requirement in source:
        key = (
            requirement.get("key"),
            requirement.get("operator"),
            frozenset(requirement.get("values") or ()),
        )
        if not any(
            (r.get("key"), r.get("operator"), frozenset(r.get("values") or ())) == key for r in target
        ):
            target.append(requirement)


def build_allocation(
    claim: ClaimSpec,
    results: Sequence[DeviceResult],
    *,
    node_name: str,
    chosen_classes: Sequence[tuple[str, DeviceClassSpec]],
    selected_subrequests: dict[int, int],
    features: Features,
) -> ClaimAllocation:
    """The `status.allocation` of one claim from its chosen devices."""
    devices: dict[str, Any] = {"results": [_result_json(r, features) for r in results]}
    configs = _configs(claim, chosen_classes, selected_subrequests, v137=features.v137)
    if configs:
        devices["config"] = configs
    allocation: dict[str, Any] = {"devices": devices}
    try:
        selector = _node_selector(results, node_name)
    except AllocationError as exc:
        raise AllocationError(f"create NodeSelector for claim {claim.name}: {exc}") from exc
    if selector is not None:
        allocation["nodeSelector"] = selector
    return ClaimAllocation(claim=claim, devices=tuple(results), allocation=allocation)
