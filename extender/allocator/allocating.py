"""The upstream DRA allocator's search, reproduced (spec dra.md §3.3-§3.8).

`allocate` takes an immutable view (the node's pools, the allocated state, a DeviceClass
lookup, a selector evaluator) and returns one `ClaimAllocation` per claim, or None when the
claims do not fit on this node. Invalid input raises `AllocationError` (fatal for the pod);
a node-only problem (invalid pools) raises `NodeScopedError`. The caller persists results.

The search is upstream's depth-first backtracking: claims in order, requests in order,
`firstAvailable` subrequests in priority order, devices in pool/slice/device order. For the
devices of one request it enumerates combinations rather than permutations (the next device
starts after the previous one's position), as upstream's newer allocators do; since every
check is a property of the set, the first solution found is the same.

Where upstream v0.36.2 breaks an invariant of the API we keep the invariant instead
(docs/upstream-differences.md): counters of a device that is turned away or undone are given
back, counters are kept per (driver, pool), and `distinctAttribute` compares every device.

Two additions make the search cheaper without changing its answer: a claim with a
`distinctAttribute` constraint is pruned by bipartite matching (`distinct`; only where no error
could hide in the pruned branches), and shared counters are integers (`counters`). `SearchStats`
reports the steps taken and whether anything was refused only because other claims hold it,
which lets the caller word a failure without searching again.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from extender import cel
from extender.allocator import capacity
from extender.allocator.compatibility import CompatibilityState
from extender.allocator.constraints import UNTYPED, Constraint, Lookup, lookup_attribute
from extender.allocator.counters import PoolCounters
from extender.allocator.distinct import Demand, can_fill, viable_values
from extender.allocator.features import Features
from extender.allocator.inputs import AllocatedState, ClassLookup, DeviceClassSpec, SelectorEvaluator
from extender.allocator.model import Device, DeviceID, Slice
from extender.allocator.nodeselection import Node, node_matches
from extender.allocator.pools import Pool, invalid_pools_detail
from extender.allocator.requests import ALL, EXACT_COUNT, ClaimSpec, RequestSpec, Selector
from extender.allocator.results import ClaimAllocation, DeviceResult, build_allocation
from extender.allocator.taints import all_tolerated
from extender.errors import (
    AllocationAborted,
    AllocationError,
    CelCompileError,
    CelRuntimeError,
    NodeScopedError,
)
from extender.quantity import Quantity

#: The node-declared feature a device with skipNodeOperations needs (1.37,
#: k8s.io/component-helpers nodedeclaredfeatures/features/draoptionalnodeoperations).
OPTIONAL_NODE_OPERATIONS = "DRAOptionalNodeOperations"

#: resourceapi.AllocationResultsMaxSize: devices per claim.
MAX_DEVICES_PER_CLAIM = 32


class _MaxSizeExceeded:
    """Sentinel result: the 32-device claim limit would be exceeded on this branch."""


MAX_EXCEEDED = _MaxSizeExceeded()
Outcome = bool | _MaxSizeExceeded


@dataclass(slots=True)
class SearchStats:
    """What one `allocate` call did; pass one in to read it (tests, reasons, metrics)."""

    steps: int = 0  # recursive search steps (upstream's allocateOne calls)
    pruned: int = 0  # branches cut because the distinct matching proved them empty
    #: Some device, counter or capacity was refused only because other claims hold it. When
    #: False after a failed search, the search with nothing in use would fail the same way.
    held_back: bool = False


@dataclass(slots=True)
class _Request:
    """requestData: one request or subrequest of one claim, validated."""

    spec: RequestSpec
    parent: str  # parent request name for a subrequest, "" otherwise
    device_class: DeviceClassSpec
    num_devices: int
    all_devices: list[tuple[Device, Slice, Pool]] | None = None


@dataclass(slots=True)
class _Candidate:
    device: Device
    slice: Slice
    pool: Pool


def allocate(
    claims: Sequence[ClaimSpec],
    *,
    node: Node,
    pools: Sequence[Pool],
    features: Features,
    classes: ClassLookup,
    allocated: AllocatedState,
    evaluator: SelectorEvaluator,
    should_stop: Callable[[], str | None] = lambda: None,
    new_share_id: Callable[[], str] = lambda: str(uuid.uuid4()),
    stats: SearchStats | None = None,
    prune_distinct: bool = True,
) -> list[ClaimAllocation] | None:
    """Allocate devices for all `claims` on `node`; see the module docstring for outcomes.

    Args:
        should_stop: polled once per search step; a non-empty cause aborts the search with
            `AllocationAborted("filter operation aborted: <cause>")`.
        new_share_id: makes the shareID of each share of a multi-allocatable device.
        stats: filled in with what the search did.
        prune_distinct: cut branches the distinct matching proves empty (module `distinct`);
            False gives the plain search, for tests that compare the two.
    """
    search = _Search(claims, node, pools, features, classes, allocated, evaluator)
    search.should_stop = should_stop
    search.new_share_id = new_share_id
    if stats is not None:
        search.stats = stats
    search.prune_distinct = prune_distinct
    return search.run()


class _NodeDependent(Exception):
    """Validation reached a step that depends on the node's pools (an `All` request)."""


def validate_claims(claims: Sequence[ClaimSpec], *, features: Features, classes: ClassLookup) -> None:
    """Upstream's claim validation (dra.md §3.3) as far as it does not depend on the node.

    Claims and requests are checked in order, exactly as `allocate` checks them, and the first
    error is raised. An `All` request makes the rest of the validation node-dependent (it
    evaluates selectors against the node's devices), so the check stops there: `allocate` will
    finish it per node, still in claim order.
    """
    search = _Search(claims, {}, (), features, classes, AllocatedState(), _NoEvaluation())
    search.node_known = False
    try:
        for claim_index, claim in enumerate(claims):
            search._validate_claim(claim_index, claim)
    except _NodeDependent:
        return


class _NoEvaluation:
    def evaluate(self, expression: str, device: Device) -> bool:
        raise AssertionError("node-independent validation evaluates no selector")


class _Search:
    """State of one `allocate` call (upstream's `allocator`); used by one thread only."""

    def __init__(
        self,
        claims: Sequence[ClaimSpec],
        node: Node,
        pools: Sequence[Pool],
        features: Features,
        classes: ClassLookup,
        allocated: AllocatedState,
        evaluator: SelectorEvaluator,
    ) -> None:
        self.claims = claims
        self.node = node
        self.pools = pools
        self.features = features
        self.classes = classes
        self.allocated = allocated
        self.evaluator = evaluator
        self.should_stop: Callable[[], str | None] = lambda: None
        self.new_share_id: Callable[[], str] = lambda: str(uuid.uuid4())
        self.compile_selector: Callable[[str], object] = cel.compile_selector
        self.stats = SearchStats()
        self.prune_distinct = True
        # Per claim: the distinct constraints the matching may prune, or None (not safe, see
        # `_distinct_guards`); per (claim, constraint, request key): the values its devices carry.
        self.distinct_guards: dict[int, list[int] | None] = {}
        self.distinct_held: dict[int, bool] = {}  # claim -> options left out devices others hold
        self.distinct_options: dict[tuple[int, int, tuple[int, int, int]], frozenset[Any]] = {}
        self.node_known = True  # False: `validate_claims`, which has no pools to look at
        self.requests: dict[tuple[int, int, int], _Request] = {}
        self.selected_sub: dict[tuple[int, int], int] = {}
        self.constraints: list[list[Constraint]] = []
        self.matches: dict[tuple[int, int, int, int], bool] = {}  # (id(device), claim, req, sub)
        self.allocating: dict[DeviceID, set[int]] = {}
        self.allocating_capacity: dict[DeviceID, dict[str, Quantity]] = {}
        # Shares of each multi-allocatable device this search holds, whatever they consume:
        # upstream's "capacity in use" marker (an entry in allocatingCapacity, kept while any
        # share holds it since v0.36.3) that lets later shares skip the counter check.
        self.allocating_shares: dict[DeviceID, int] = {}
        self.counters: dict[int, PoolCounters] = {}  # by id(pool)
        self.compatibility = CompatibilityState(self._holds_counters)  # 1.37 DRADeviceCompatibilityGroups
        self.derived_values: dict[tuple[int, str], dict[str, Any]] = {}  # (id(device), expression)
        self.results: list[list[DeviceResult]] = [[] for _ in claims]
        self.shared_devices = {device_id for device_id, _ in allocated.shared_ids} | set(
            allocated.aggregated_capacity
        )
        self.candidates = [
            _Candidate(device, slice_, pool)
            for pool in pools
            if not pool.incomplete and not pool.invalid
            for slice_ in pool.slices
            for device in slice_.devices
        ]
        self.position = {id(c.device): i for i, c in enumerate(self.candidates)}

    # ----------------------------------------------------------------- validation
    def run(self) -> list[ClaimAllocation] | None:
        for claim_index, claim in enumerate(self.claims):
            self._validate_claim(claim_index, claim)
        done = False if self._doomed() else self._allocate_one(0, 0, 0, 0, in_subrequest=False, start=0)
        if done is not True:
            if any(pool.invalid for pool in self.pools):
                raise NodeScopedError(
                    "invalid resource pools were encountered", detail=invalid_pools_detail(self.pools)
                )
            return None
        return [
            build_allocation(
                claim,
                self.results[index],
                node_name=(self.node.get("metadata") or {}).get("name", ""),
                chosen_classes=self._chosen_classes(index),
                selected_subrequests={r: s for (c, r), s in self.selected_sub.items() if c == index},
                features=self.features,
            )
            for index, claim in enumerate(self.claims)
        ]

    def _doomed(self) -> bool:
        """Does every branch of the search fail at one `All` request, without an error?

        An `All` request takes every matching device; if one of them can never be allocated
        (held by other claims, an untolerated taint, counters without the feature: none depends
        on the branch), upstream's search fails there in every branch, after trying every
        combination of the requests before it (fuzz-s101-0258: 574,119 steps, seconds in Go and
        past the 10 s deadline here). The answer is then "unschedulable", the same as upstream's,
        provided nothing on the way could have raised instead: no selector of a request reached
        before it fails to evaluate on any device, and no `All` request on the way (nor this
        one) has a claim constraint to break, which upstream reports as an error.
        """
        for c, claim in enumerate(self.claims):
            for r in range(len(claim.requests)):
                data = self.requests[(c, r, 0)]
                if data.parent or data.spec.mode != ALL or claim.constraints or data.spec.is_admin:
                    continue
                blocked = [d for d, _, _ in data.all_devices or () if self._never_allocatable(data, d)]
                if self.features.capacity_names_1_37 or not blocked:
                    continue
                if not self._reached_without_error(c, r):
                    return False
                # As the search would have noted (`_allocate_device`): a device other claims
                # hold was in the way, so the node may fit once they let go.
                multi = self.features.consumable_capacity
                held = [d for d in blocked if not (multi and d.allow_multiple_allocations)]
                if any(self._held_by_others(d) for d in held):
                    self.stats.held_back = True
                return True
        return False

    def _derived_lookup(self, data: _Request) -> Lookup:
        """1.37 lookupAttribute: the request's derived attribute of that name first (evaluated
        once per device and expression), else the device's own attribute."""
        derived = dict(data.spec.derived_attributes)

        def lookup(device: Device, name: str) -> dict[str, Any] | None:
            expression = derived.get(name)
            if expression is None:
                return lookup_attribute(device, name)
            key = (id(device), expression)
            value = self.derived_values.get(key)
            if value is None:
                try:
                    device_input = cel.build_device_input(
                        device.id.driver,
                        device.attributes,
                        {n: {"value": str(spec.value)} for n, spec in device.capacity.items()},
                        device.allow_multiple_allocations,
                        consumable_capacity=True,
                        list_type_attributes=True,
                    )
                    value = cel.evaluate_derived(expression, device_input)
                except CelCompileError as exc:
                    raise AllocationError(f"compile derived attribute {name} failed: {exc}") from exc
                except CelRuntimeError as exc:
                    raise AllocationError(
                        f"evaluate derived attribute {name} on device {device.id} failed: {exc}"
                    ) from exc
                self.derived_values[key] = value
            return value

        return lookup

    def _node_skips_operations(self) -> bool:
        """1.37: may devices whose slice sets skipNodeOperations go to this node? Only with
        DRAOptionalNodeOperations on and the node declaring the feature (node.status.declaredFeatures)."""
        if not self.features.optional_node_operations:
            return False
        declared = (self.node.get("status") or {}).get("declaredFeatures") or ()
        return OPTIONAL_NODE_OPERATIONS in declared

    def _never_allocatable(self, data: _Request, device: Device) -> bool:
        multi = self.features.consumable_capacity and device.allow_multiple_allocations
        return (
            (not multi and self._held_by_others(device))
            or (bool(device.consumes_counters) and not self.features.partitionable_devices)
            or (self.features.device_taints and not all_tolerated(device.taints, data.spec.tolerations))
        )

    def _reached_without_error(self, c: int, r: int) -> bool:
        """Can no request before (c, r) raise during the search (see `_doomed`)?"""
        for key, data in self.requests.items():
            if key[:2] >= (c, r):
                continue
            if data.spec.mode == ALL and self.claims[key[0]].constraints:
                return False
            for candidate in self.candidates:
                try:
                    self._selectable(key, data, candidate.device, candidate.slice)
                except (CelRuntimeError, AllocationError):
                    return False
        return True

    def _chosen_classes(self, claim_index: int) -> list[tuple[str, DeviceClassSpec]]:
        chosen = []
        for request_index, request in enumerate(self.claims[claim_index].requests):
            if request.first_available:
                sub = self.selected_sub.get((claim_index, request_index), 0)
                data = self.requests[(claim_index, request_index, sub)]
                chosen.append((f"{request.name}/{data.spec.name}", data.device_class))
            else:
                chosen.append((request.name, self.requests[(claim_index, request_index, 0)].device_class))
        return chosen

    def _validate_claim(self, claim_index: int, claim: ClaimSpec) -> None:
        min_devices = 0
        for request_index, request in enumerate(claim.requests):
            if request.first_available and not self.features.prioritized_list:
                raise AllocationError(
                    f"claim {claim.ref}, request {request.name}: has subrequests, "
                    "but the DRAPrioritizedList feature is disabled"
                )
            if (
                not self.features.consumable_capacity
                and request.exactly is not None
                and request.exactly.capacity is not None
            ):
                raise AllocationError(
                    f"claim {claim.ref}, request {request.name}: has capacity requests, "
                    "but the DRAConsumableCapacity feature is disabled"
                )
            # Upstream checks every subrequest for capacity requests before validating any.
            for sub in request.first_available if not self.features.consumable_capacity else ():
                if sub.capacity is not None:
                    raise AllocationError(
                        f"claim {claim.ref}, subrequest {sub.name}: has capacity requests, "
                        "but the DRAConsumableCapacity feature is disabled"
                    )
            if request.first_available:
                fewest = None
                for sub_index, sub in enumerate(request.first_available):
                    data = self._validate_request(
                        claim, claim_index, request_index, sub_index, sub, request.name
                    )
                    fewest = data.num_devices if fewest is None else min(fewest, data.num_devices)
                adding = fewest or 0
            elif request.exactly is not None:
                data = self._validate_request(claim, claim_index, request_index, 0, request.exactly, "")
                adding = data.num_devices
            else:
                raise AllocationError(
                    f"claim {claim.ref}, request {request.name}: missing device class name "
                    "(unsupported request type?)"
                )
            if self.features.v137 and adding > MAX_DEVICES_PER_CLAIM - min_devices:
                # 1.37 checks the limit per request while adding (v0.37.2 allocator_experimental.go).
                raise AllocationError(
                    f"claim {claim.ref}, request {request.name}: adding {adding} devices exceeds "
                    f"the claim limit of {MAX_DEVICES_PER_CLAIM}, with {min_devices} already accounted for"
                )
            min_devices += adding
        if min_devices > MAX_DEVICES_PER_CLAIM:
            raise AllocationError(
                f"claim {claim.ref}: number of requested devices {min_devices} "
                f"exceeds the claim limit of {MAX_DEVICES_PER_CLAIM}"
            )
        constraints = []
        for index, spec in enumerate(claim.constraints):
            if spec.match_attribute is None and spec.distinct_attribute is None:
                raise AllocationError(
                    f"claim {claim.ref}, constraint #{index}: empty constraint (unsupported constraint type?)"
                )
            constraints.append(Constraint(spec, list_types=self.features.list_type_constraints))
        self.constraints.append(constraints)

    def _validate_request(
        self,
        claim: ClaimSpec,
        claim_index: int,
        request_index: int,
        sub_index: int,
        spec: RequestSpec,
        parent: str,
    ) -> _Request:
        if self.features.v137 and spec.derived_attributes and not self.features.derived_attributes:
            raise AllocationError(
                f"claim {claim.ref}, request {spec.name}: cannot handle request with derived attributes, "
                "the feature is disabled"
            )
        for index, selector in enumerate(spec.selectors):
            if selector.expression is None:
                raise AllocationError(
                    f"claim {claim.ref}, request {spec.name}, selector #{index}: "
                    "CEL expression empty (unsupported selector type?)"
                )
        if not self.features.admin_access and spec.admin_access is not None:
            raise AllocationError(
                f"claim {claim.ref}, request {spec.name}: "
                "admin access is requested, but the feature is disabled"
            )
        if not spec.class_name:
            raise AllocationError(
                f"claim {claim.ref}, request {spec.name}: "
                "missing device class name (unsupported request type?)"
            )
        device_class = self.classes.get_class(spec.class_name)
        if device_class is None:
            raise AllocationError(
                f"claim {claim.ref}, request {spec.name}: could not retrieve device class {spec.class_name}: "
                f'deviceclass.resource.k8s.io "{spec.class_name}" not found'
            )
        # Upstream compiles a request's CEL right after its class lookup, claim by claim, so a
        # compile error in an earlier claim is reported before a missing class in a later one.
        self._compile_selectors(device_class.selectors, f"class {device_class.name}")
        self._compile_selectors(spec.selectors, f"claim {claim.ref}")
        key = (claim_index, request_index, sub_index)
        data = _Request(spec=spec, parent=parent, device_class=device_class, num_devices=0)
        self.requests[key] = data
        if spec.mode == EXACT_COUNT:
            data.num_devices = spec.count
        elif spec.mode == ALL:
            if not self.node_known:
                raise _NodeDependent
            data.all_devices = []
            for pool in self.pools:
                if pool.incomplete:
                    raise AllocationError(
                        f"claim {claim.ref}, request {spec.name}: asks for all devices, "
                        f"but resource pool {pool.id} is currently being updated"
                    )
                if pool.invalid:
                    raise AllocationError(
                        f"claim {claim.ref}, request {spec.name}: asks for all devices, "
                        f"but resource pool {pool.id} is currently invalid"
                    )
                for slice_ in pool.slices:
                    for device in slice_.devices:
                        if not self._selectable(key, data, device, slice_):
                            continue
                        if self.features.consumable_capacity and not (
                            self._capacity_fits_137(data, device, static=True, device_name=device.id.device)
                            if self.features.v137
                            else self._capacity_fits(data, device)
                        ):
                            continue
                        data.all_devices.append((device, slice_, pool))
            data.num_devices = len(data.all_devices)
        else:
            raise AllocationError(
                f"claim {claim.ref}, request {spec.name}: unsupported count mode {spec.mode}"
            )
        return data

    def _compile_selectors(self, selectors: Sequence[Selector], owner: str) -> None:
        for index, selector in enumerate(selectors):
            if selector.expression is None:
                continue
            try:
                self.compile_selector(selector.expression)
            except CelCompileError as exc:
                raise CelCompileError(f"{owner}: selector #{index}: CEL compile error: {exc}") from exc

    # ----------------------------------------------------------------- selection
    def _selectable(self, key: tuple[int, int, int], data: _Request, device: Device, slice_: Slice) -> bool:
        if not self.features.device_binding_and_status and device.binding_conditions:
            return False
        memo_key = (id(device), *key)
        cached = self.matches.get(memo_key)
        if cached is not None:
            return cached
        result = self._selectors_match(data.device_class.selectors, device, f"class {data.device_class.name}")
        if result:
            claim = self.claims[key[0]]
            result = self._selectors_match(data.spec.selectors, device, f"claim {claim.ref}")
        if result and slice_.per_device_node_selection:
            result = node_matches(
                self.node,
                node_name=device.node_name,
                all_nodes=device.all_nodes,
                node_selector=device.node_selector,
            )
        self.matches[memo_key] = result
        return result

    def _selectors_match(self, selectors: Sequence[Selector], device: Device, owner: str) -> bool:
        for index, selector in enumerate(selectors):
            try:
                if not self.evaluator.evaluate(selector.expression or "", device):
                    return False
            except CelCompileError as exc:
                raise CelCompileError(f"{owner}: selector #{index}: CEL compile error: {exc}") from exc
            except CelRuntimeError as exc:
                if self.features.v137:
                    raise CelRuntimeError(
                        f"{owner}: selector #{index} on device {device.id}: CEL runtime error: "
                        f"{cel.enhance_runtime_error(str(exc))}"
                    ) from exc
                raise CelRuntimeError(f"{owner}: selector #{index}: CEL runtime error: {exc}") from exc
        return True

    def _capacity_fits_137(self, data: _Request, device: Device, *, static: bool, device_name: str) -> bool:
        """1.37 CmpRequestOverCapacity; `static`: against the device's capacity alone (`All`
        validation, v0.37.2), so a device other shares exhaust stays in and `All` fails."""
        multi = self.features.consumable_capacity and device.allow_multiple_allocations
        existing = None if static else self.allocated.aggregated_capacity.get(device.id)
        try:
            fits = capacity.fits_137(
                device,
                data.spec.capacity,
                existing=existing,
                allocating=None if static else self.allocating_capacity.get(device.id),
                fractional=self.features.fractional_capacity_range,
            )
        except capacity.CapacityArithmeticError as exc:
            claim = self._claim_of(data)
            raise AllocationError(
                f"claim {claim.ref}, request {data.spec.name}: "
                f"checking capacity for device {device_name}: {exc}"
            ) from None
        if not fits and existing and multi and not self.stats.held_back:
            self.stats.held_back = capacity.fits_137(
                device,
                data.spec.capacity,
                existing=None,
                allocating=self.allocating_capacity.get(device.id),
                fractional=self.features.fractional_capacity_range,
            )
        return fits

    def _claim_of(self, data: _Request) -> ClaimSpec:
        for (c, _, _), other in self.requests.items():
            if other is data:
                return self.claims[c]
        raise AssertionError("request data of no claim")

    def _capacity_fits(self, data: _Request, device: Device) -> bool:
        if self.features.v137:
            return self._capacity_fits_137(data, device, static=False, device_name=str(device.id))
        multi = self.features.consumable_capacity and device.allow_multiple_allocations
        if not multi and not data.spec.capacity:
            return True  # a dedicated device and nothing requested: nothing to compare
        existing = self.allocated.aggregated_capacity.get(device.id)
        fits = capacity.fits(
            device,
            data.spec.capacity,
            multi=multi,
            existing=existing,
            allocating=self.allocating_capacity.get(device.id),
            qualified=self.features.capacity_names_1_37,
        )
        if not fits and existing and multi and not self.stats.held_back:
            # Refused only because of other claims' shares?
            self.stats.held_back = capacity.fits(
                device,
                data.spec.capacity,
                multi=multi,
                existing=None,
                allocating=self.allocating_capacity.get(device.id),
                qualified=self.features.capacity_names_1_37,
            )
        return fits

    # ----------------------------------------------------------------- search
    def _allocate_one(self, c: int, r: int, s: int, d: int, *, in_subrequest: bool, start: int) -> Outcome:
        self.stats.steps += 1
        cause = self.should_stop()
        if cause:
            raise AllocationAborted(f"filter operation aborted: {cause}")
        if c >= len(self.claims):
            return True
        claim = self.claims[c]
        if r >= len(claim.requests):
            outcome = self._allocate_one(c + 1, 0, 0, 0, in_subrequest=False, start=0)
            return False if outcome is MAX_EXCEEDED else outcome
        data = self.requests[(c, r, s)]
        if not in_subrequest and data.parent:
            all_exceeded = True
            for sub in range(len(claim.requests[r].first_available)):
                outcome = self._allocate_one(c, r, sub, 0, in_subrequest=True, start=0)
                if outcome is MAX_EXCEEDED:
                    continue
                all_exceeded = False
                if outcome is True:
                    self.selected_sub[(c, r)] = sub
                    return True
            return MAX_EXCEEDED if all_exceeded else False

        spec = data.spec
        if spec.mode == ALL and not data.all_devices:
            return False
        if d >= data.num_devices:
            return self._allocate_one(c, r + 1, 0, 0, in_subrequest=False, start=0)
        if len(self.results[c]) + data.num_devices - d > MAX_DEVICES_PER_CLAIM:
            return MAX_EXCEEDED

        if spec.mode == ALL:
            assert data.all_devices is not None
            device, slice_, pool = data.all_devices[d]
            undo = self._allocate_device(c, r, s, data, _Candidate(device, slice_, pool), must=True)
            if undo is None:
                return False
            outcome = self._allocate_one(c, r, s, d + 1, in_subrequest=in_subrequest, start=0)
            if outcome is not True:
                undo()
            return outcome

        key = (c, r, s)
        allowed = self._distinct_allowed(c, r, s, d, data) if self.claims[c].constraints else None
        if allowed is not None and any(not values for _, values in allowed):
            self._note_pruned(c)
            return False
        for position in range(start, len(self.candidates)):
            candidate = self.candidates[position]
            device = candidate.device
            if spec.is_admin:
                if c in self.allocating.get(device.id, ()):
                    continue
            elif self._in_use(device):
                if not self.stats.held_back and not self.allocating.get(device.id):
                    self._note_held(key, data, candidate)
                continue
            if not self._selectable(key, data, device, candidate.slice):
                continue
            if allowed is not None and not all(
                self._distinct_value(constraint, device) in values for constraint, values in allowed
            ):
                self._note_pruned(c)
                continue
            if self.features.consumable_capacity and not self._capacity_fits(data, device):
                continue
            undo = self._allocate_device(c, r, s, data, candidate, must=False)
            if undo is None:
                continue
            outcome = self._allocate_one(c, r, s, d + 1, in_subrequest=in_subrequest, start=position + 1)
            if outcome is True:
                return True
            undo()
            if outcome is MAX_EXCEEDED:
                return outcome
        return False

    # ----------------------------------------------------------------- distinct pruning
    def _distinct_allowed(
        self, c: int, r: int, s: int, d: int, data: _Request
    ) -> list[tuple[Constraint, frozenset[Any]]] | None:
        """Per prunable distinct constraint of claim `c`: the values the next device of this
        request may carry (see `distinct`). None: nothing to prune here; an empty set: no
        device can complete the claim on this branch."""
        guards = self._distinct_guards(c)
        if not guards:
            return None
        claim = self.claims[c]
        request_name, sub_name = (data.parent, data.spec.name) if data.parent else (data.spec.name, "")
        allowed: list[tuple[Constraint, frozenset[Any]]] = []
        for index in guards:
            constraint = self.constraints[c][index]
            later = [
                Demand(
                    self.requests[(c, later_r, 0)].num_devices,
                    self.distinct_options[(c, index, (c, later_r, 0))],
                )
                for later_r in range(r + 1, len(claim.requests))
                if claim.requests[later_r].exactly is not None
                and constraint.applies_to(claim.requests[later_r].name, "")
            ]
            taken = frozenset(_scalar(e) for e in constraint.used_elements())
            if not constraint.applies_to(request_name, sub_name):
                if not can_fill(later, taken):
                    return [(constraint, frozenset())]
                continue
            current = Demand(data.num_devices - d, self.distinct_options[(c, index, (c, r, s))])
            allowed.append((constraint, viable_values(current, later, taken)))
        return allowed or None

    def _note_pruned(self, c: int) -> None:
        self.stats.pruned += 1
        if self.distinct_held.get(c):
            self.stats.held_back = True

    def _distinct_guards(self, c: int) -> list[int] | None:
        """The distinct constraints of claim `c` the matching may prune with, or None.

        Cutting a branch is exact only if upstream's search could not have met anything but
        failure inside it. Within one claim that holds when no selector of the claim errs on a
        device of the node, no constraint attribute is malformed, there is no `All` request
        (its constraint failure is an error) and the claim cannot reach the 32-device limit.
        Checking this evaluates the claim's selectors on every device of the node once
        (memoised), which the search would mostly do anyway.
        """
        if not self.prune_distinct:
            return None
        if c in self.distinct_guards:
            return self.distinct_guards[c]
        guards: list[int] | None = None
        try:
            guards = self._find_distinct_guards(c)
        except AllocationError:
            guards = None  # an error upstream may or may not reach: search without pruning
        self.distinct_guards[c] = guards
        return guards

    def _find_distinct_guards(self, c: int) -> list[int] | None:
        claim = self.claims[c]
        constraints = self.constraints[c]
        distinct = [i for i, constraint in enumerate(constraints) if constraint.is_distinct]
        if not distinct or self.features.list_type_constraints:
            return None
        keys = [key for key in self.requests if key[0] == c]
        most = sum(
            max(self.requests[(c, r, s)].num_devices for (_, rr, s) in keys if rr == r)
            for r in range(len(claim.requests))
        )
        if most > MAX_DEVICES_PER_CLAIM:
            return None
        for key in keys:
            data = self.requests[key]
            if data.spec.mode == ALL or (self.features.v137 and data.spec.derived_attributes):
                return None  # All: a broken constraint is an error; derived: values per request
            if self.features.capacity_names_1_37 and data.spec.capacity:
                return None  # a capacity named twice is an error upstream meets per device
        for candidate in self.candidates:
            for constraint in constraints:
                if constraint.elements_of(candidate.device) == UNTYPED:
                    return None  # upstream may take it as a first device: no count to prune by
        for index in distinct:
            constraint = constraints[index]
            for key in keys:
                data = self.requests[key]
                values = set()
                for candidate in self.candidates:
                    device = candidate.device
                    if not self._selectable(key, data, device, candidate.slice):
                        continue
                    if not data.spec.is_admin and self._held_by_others(device):
                        self.distinct_held[c] = True  # pruning may then be due to others' devices
                        continue
                    value = self._distinct_value(constraint, device)
                    if value is not None:
                        values.add(value)
                self.distinct_options[(c, index, key)] = frozenset(values)
        return distinct

    def _distinct_value(self, constraint: Constraint, device: Device) -> Any:
        elements = constraint.elements_of(device)
        return _scalar(elements) if elements else None

    def _held_by_others(self, device: Device) -> bool:
        """In use by other claims before this search started (never changes during it)."""
        if device.id in self.allocated.devices:
            return True
        multi = self.features.consumable_capacity and device.allow_multiple_allocations
        return not multi and device.id in self.shared_devices

    def _note_held(self, key: tuple[int, int, int], data: _Request, candidate: _Candidate) -> None:
        """A device other claims hold was passed over: note it if the request could use it."""
        device = candidate.device
        if self.features.device_taints and not all_tolerated(device.taints, data.spec.tolerations):
            return  # refused anyway, held or not
        if device.consumes_counters and not self.features.partitionable_devices:
            return
        try:
            usable = self._selectable(key, data, device, candidate.slice)
        except AllocationError:
            usable = True  # upstream never evaluates it here; an error must not surface from us
        self.stats.held_back = usable

    def _in_use(self, device: Device) -> bool:
        if device.id in self.allocated.devices or self.allocating.get(device.id):
            return True
        multi = self.features.consumable_capacity and device.allow_multiple_allocations
        return not multi and device.id in self.shared_devices

    def _allocate_device(
        self, c: int, r: int, s: int, data: _Request, candidate: _Candidate, *, must: bool
    ) -> Callable[[], None] | None:
        """Try to add one device; returns an undo function, or None if it cannot be added."""
        device = candidate.device
        spec = data.spec
        claim = self.claims[c]
        multi = self.features.consumable_capacity and device.allow_multiple_allocations
        if spec.is_admin:
            if not multi and c in self.allocating.get(device.id, ()):
                return None
        elif self._in_use(device):
            if must and self._held_by_others(device):
                self.stats.held_back = True  # an `All` device other claims hold
            return None
        if self.features.v137 and candidate.slice.skip_node_operations and not self._node_skips_operations():
            return None
        if device.consumes_counters and not self.features.partitionable_devices:
            return None
        counters_taken = False
        skip_counters = multi and self._has_capacity_in_use(device)
        groups_undo: Callable[[], None] | None = None
        if self.features.compatibility_groups and device.consumes_counters and not skip_counters:
            pool = candidate.pool
            groups_undo = self.compatibility.take(
                pool.id, [*pool.slices, *pool.slices_not_targeting_node], device
            )
            if groups_undo is None:
                return None
        if device.consumes_counters and not skip_counters:
            if not self._take_counters(candidate):
                if groups_undo is not None:
                    groups_undo()
                return None
            counters_taken = True
        if self.features.device_taints and not all_tolerated(device.taints, spec.tolerations):
            if groups_undo is not None:
                groups_undo()
            if counters_taken:
                self._release_counters(candidate)
            return None

        request_name, sub_name = (data.parent, spec.name) if data.parent else (spec.name, "")
        constraints = self.constraints[c]
        lookup = self._derived_lookup(data) if spec.derived_attributes and self.features.v137 else None
        for index, constraint in enumerate(constraints):
            if not constraint.add(request_name, sub_name, device, lookup):
                if must:
                    raise AllocationError(
                        f"claim {claim.ref}, request {spec.name}: cannot add device {device.id} "
                        "because a claim constraint would not be satisfied"
                    )
                for previous in constraints[:index]:
                    previous.remove(request_name, sub_name)
                if groups_undo is not None:
                    groups_undo()
                if counters_taken:
                    self._release_counters(candidate)
                return None

        consumed: dict[str, Quantity] | None = None
        share_id = ""
        if self.features.consumable_capacity:
            if not self._capacity_fits(data, device):
                for constraint in constraints:
                    constraint.remove(request_name, sub_name)
                if groups_undo is not None:
                    groups_undo()
                if counters_taken:
                    self._release_counters(candidate)
                return None
            if multi:
                if self.features.v137:
                    # Cannot raise: `_capacity_fits` resolved the same request on this device.
                    consumed = (
                        capacity.consumption_137(
                            device, spec.capacity, fractional=self.features.fractional_capacity_range
                        )
                        or {}
                    )
                else:
                    qualified = self.features.capacity_names_1_37
                    consumed = capacity.consumption(device, spec.capacity, qualified=qualified) or {}
                share_id = self.new_share_id()
                self._add_capacity(device.id, consumed, +1)
                self.allocating_shares[device.id] = self.allocating_shares.get(device.id, 0) + 1
        if not multi:
            self.allocating.setdefault(device.id, set()).add(c)

        self.results[c].append(
            DeviceResult(
                request=spec.name,
                parent=data.parent,
                device=device,
                slice=candidate.slice,
                admin_access=spec.is_admin,
                tolerations=spec.tolerations,
                share_id=share_id,
                consumed_capacity=consumed or None,
            )
        )

        def undo() -> None:
            self.results[c].pop()
            for constraint in constraints:
                constraint.remove(request_name, sub_name)
            if multi:
                if consumed is not None:
                    self._add_capacity(device.id, consumed, -1)
                    self.allocating_shares[device.id] -= 1
            else:
                self.allocating[device.id].discard(c)
            if groups_undo is not None:
                groups_undo()
            if counters_taken:
                self._release_counters(candidate)

        return undo

    # ----------------------------------------------------------------- counters and capacity
    def _has_capacity_in_use(self, device: Device) -> bool:
        if self.features.v137 and device.id in self.shared_devices:
            # 1.37: a persisted share without consumed capacity (only a share ID) counts too.
            return True
        return device.id in self.allocated.aggregated_capacity or self.allocating_shares.get(device.id, 0) > 0

    def _add_capacity(self, device_id: DeviceID, consumed: dict[str, Quantity], sign: int) -> None:
        current = self.allocating_capacity.setdefault(device_id, {})
        for name, amount in consumed.items():
            base = current.get(name)
            current[name] = amount if base is None and sign > 0 else _combine(base, amount, sign)
        if sign < 0 and all(q.exact == 0 for q in current.values()):
            del self.allocating_capacity[device_id]

    def _pool_counters(self, pool: Pool) -> PoolCounters:
        counters = self.counters.get(id(pool))
        if counters is None:
            counters = PoolCounters(pool, self._holds_counters)
            self.counters[id(pool)] = counters
        return counters

    def _holds_counters(self, device_id: DeviceID) -> bool:
        # Dedicated allocations and existing shares both hold the device's counters.
        return device_id in self.allocated.devices or device_id in self.shared_devices

    def _take_counters(self, candidate: _Candidate) -> bool:
        counters = self._pool_counters(candidate.pool)
        cost = counters.cost(candidate.device)
        if counters.take(cost):
            return True
        if not self.stats.held_back and counters.fits_without_others(cost):
            self.stats.held_back = True
        return False

    def _release_counters(self, candidate: _Candidate) -> None:
        counters = self.counters[id(candidate.pool)]
        counters.give_back(counters.cost(candidate.device))


def _scalar(elements: frozenset[Any] | tuple[str, Any]) -> Any:
    """The one typed element of a scalar attribute value (a frozenset of one element)."""
    if isinstance(elements, frozenset):
        (element,) = elements
        return element
    return elements


def _combine(base: Quantity | None, amount: Quantity, sign: int) -> Quantity:
    if base is None:
        return amount if sign > 0 else Quantity.from_fraction(-amount.exact, amount.fmt)
    return base + amount if sign > 0 else base - amount
