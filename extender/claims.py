"""Pod -> ResourceClaims: which claims a pod uses, which are already allocated, which are pending.

Mirrors the in-tree DynamicResources plugin's PreEnqueue/PreFilter checks (extender-protocol.md
§7.1-§7.2): a template claim that is not created yet, a claim that is being deleted, a claim not
owned by the pod, or a claim whose consumers are full make the pod unschedulable everywhere.
Those are returned as `PodClaims.problem`, never raised, so one bad pod cannot affect another.

With `DRAWorkloadResourceClaims` (`pod_groups=True`) a pod may share claims with its PodGroup,
as k8s.io/dynamic-resource-allocation v0.37.2 `resourceclaim` decides: a pod entry whose name and
claim (or template) name equal one of the PodGroup's `spec.resourceClaims` is bound to the group
(`BindTo`: the claim is reserved for the PodGroup, once, not for each member); a claim made from a
template may be owned by the pod's PodGroup (`IsForPod`), and an entry reserving the PodGroup by
name counts as reserving each member (`IsReservedForPod`).

Malformed input gets the same treatment (defence in depth: the loaders already refuse invalid
objects, see `extender.validation`): a malformed pod, a claim the kube source refused, or a
malformed claim found in the state make only the pods that use it unschedulable, with the
validation message; allocation scans skip malformed results instead of failing every pod.

The resolution is the claims' edge: it reads the stored objects and hands on `Claim` records
(`parse_resource_claim`, once per claim and resolution), which the core reads; `Claim.source`
keeps the object for the binders that write it back and for the allocator's own parse
(`allocator.requests.parse_claim` into `ClaimSpec`). The held-device bookkeeping
(`collect_allocated`, `held_devices`) reads the state's objects directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from extender.allocator.model import DeviceID
from extender.allocator.nodeselection import selector_matches
from extender.cluster.state import ClusterState
from extender.objects import Obj, mapping_field, text_field
from extender.podgroups import PodGroup, parse_pod_group
from extender.pods import Pod, PodResourceClaim
from extender.quantity import Quantity
from extender.validation import problems

#: Namespace label that allows `adminAccess: true` requests (resource.kubernetes.io/admin-access).
ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"
#: resourceapi.ResourceClaimReservedForMaxSize.
RESERVED_FOR_MAX = 256
#: Finalizer the scheduler adds to claims it allocates (both binders write it).
DELETE_PROTECTION_FINALIZER = "resource.kubernetes.io/delete-protection"
#: A `reservedFor` entry naming a PodGroup has this apiGroup and resource (resourceclaim.BindTo).
POD_GROUP_API_GROUP = "scheduling.k8s.io"
POD_GROUP_RESOURCE = "podgroups"


@dataclass(frozen=True, slots=True)
class Claim:
    """The ResourceClaim fields the core and the binders read. Build it with `parse_resource_claim`."""

    namespace: str  # "default" when absent or empty
    name: str  # '' when absent
    uid: str  # '' when absent
    allocated: bool  # status.allocation is a non-empty object
    #: The allocation's nodeSelector (a NodeSelector object); None when unallocated, unset or empty.
    node_selector: Obj | None = field(default=None, hash=False)
    #: The `uid` of each `status.reservedFor` entry that is an object (None where it has none).
    reserved_for: tuple[str | None, ...] = ()
    #: The names of the PodGroups in `status.reservedFor` (a PodGroup entry reserves the claim for
    #: every member, which knows its group's name but not its uid).
    reserved_for_groups: tuple[str, ...] = ()
    #: The pod's entry for this claim is also its PodGroup's (set by `resolve_pod_claims` with
    #: `pod_groups`): the binders reserve it for the group (`PodClaims.group`), not the pod.
    for_group: bool = False
    #: The object as resolved (with an in-flight allocation merged into its status). Read by the
    #: binders, which write it back, and by the allocator's `parse_claim`.
    source: Obj = field(default_factory=dict, repr=False, compare=False, hash=False)

    @property
    def ref(self) -> str:
        """namespace/name."""
        return f"{self.namespace}/{self.name}"


def parse_resource_claim(obj: Any) -> Claim:
    """The record of a ResourceClaim object; never raises (a field of the wrong type counts as absent)."""
    source = obj if isinstance(obj, dict) else {}
    meta = mapping_field(source.get("metadata"))
    status = mapping_field(source.get("status"))
    allocation = allocation_of(source)
    selector = (allocation or {}).get("nodeSelector")
    reserved = status.get("reservedFor")
    return Claim(
        namespace=text_field(meta.get("namespace")) or "default",
        name=text_field(meta.get("name")),
        uid=text_field(meta.get("uid")),
        allocated=allocation is not None,
        node_selector=selector if isinstance(selector, dict) and selector else None,
        reserved_for=tuple(
            uid if isinstance(uid := r.get("uid"), str) else None
            for r in (reserved if isinstance(reserved, list) else ())
            if isinstance(r, dict)
        ),
        reserved_for_groups=tuple(
            r["name"]
            for r in (reserved if isinstance(reserved, list) else ())
            if isinstance(r, dict)
            and r.get("apiGroup") == POD_GROUP_API_GROUP
            and r.get("resource") == POD_GROUP_RESOURCE
            and isinstance(r.get("name"), str)
        ),
        source=source,
    )


@dataclass(slots=True)
class PodClaims:
    """The claims of one pod, split by state. `problem` non-empty: unschedulable everywhere."""

    pending: list[Claim] = field(default_factory=list)  # unallocated claims, in pod order
    allocated: list[Claim] = field(default_factory=list)  # allocated claims the pod uses
    problem: str = ""
    #: The `reservedFor` entry of the pod's PodGroup, when a claim is `for_group`; else None.
    group: dict[str, str] | None = None

    @property
    def uses_claims(self) -> bool:
        return bool(self.pending or self.allocated or self.problem)


def claim_ref(claim: Obj) -> str:
    meta = claim.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"


def resolve_pod_claims(
    pod: Pod, state: ClusterState, *, assumed: dict[str, Obj] | None = None, pod_groups: bool = False
) -> PodClaims:
    """Find the pod's claims in `state`; `assumed` maps claim uid -> in-flight allocation.

    `pod_groups`: `DRAWorkloadResourceClaims` is on (see the module docstring).
    """
    if pod.problem:
        return PodClaims(problem=pod.problem)
    namespace = pod.namespace
    pod_uid = pod.uid
    statuses = {s.name: s for s in pod.resource_claim_statuses}
    result = PodClaims()
    seen: set[str] = set()
    group_name = pod.pod_group_name if pod_groups else ""
    group: PodGroup | None = None
    if group_name and pod.resource_claims:
        # The in-tree plugin reads the group from its snapshot for every such pod (PreFilter's
        # podResourceClaimBindings); a missing one makes the pod unschedulable with the lister's error.
        group_obj = state.get("PodGroup", group_name, namespace)
        if group_obj is None:
            result.problem = f'podgroup.scheduling.k8s.io "{group_name}" not found'
            return result
        group = parse_pod_group(group_obj)
    for entry in pod.resource_claims:
        entry_name = entry.name or ""
        claim_name: str | None
        from_template = bool(entry.resource_claim_template_name)
        if entry.resource_claim_name:
            claim_name = entry.resource_claim_name
        elif from_template:
            status = statuses.get(entry_name)
            if status is None:
                result.problem = f'pod "{pod.ref}": ResourceClaim not created yet'
                return result
            claim_name = status.resource_claim_name
            if not claim_name:
                continue  # intentionally not created (e.g. no container uses it)
        else:
            result.problem = (
                f'pod "{pod.ref}": resourceClaims entry "{entry_name}" names no claim or template'
            )
            return result
        if claim_name in seen:
            continue
        seen.add(claim_name)
        claim = state.get("ResourceClaim", claim_name, namespace)
        if claim is None:
            rejected = state.rejection("ResourceClaim", claim_name, namespace)
            result.problem = (
                f"invalid ResourceClaim: {rejected}"
                if rejected
                else f'resourceclaim "{namespace}/{claim_name}" not found'
            )
            return result
        invalid = _claim_problem(claim)
        if invalid:
            result.problem = f"invalid ResourceClaim: {invalid}"
            return result
        claim_meta = claim.get("metadata") or {}
        if claim_meta.get("deletionTimestamp"):
            result.problem = f'resourceclaim "{claim_name}" is being deleted'
            return result
        if from_template and not _owned_by(claim, pod_uid):
            if not group_name:
                result.problem = (
                    f"ResourceClaim {namespace}/{claim_name} was not created for pod {pod.ref} "
                    "(pod is not owner)"
                )
                return result
            if not _owned_by_group(claim, group_name):
                result.problem = (
                    f"ResourceClaim {namespace}/{claim_name} was not created for pod {pod.ref} "
                    f"(neither pod nor PodGroup {group_name} is the owner)"
                )
                return result
        for_group = group is not None and _bound_to_group(group, entry)
        allocation = (claim.get("status") or {}).get("allocation") or (assumed or {}).get(
            claim_meta.get("uid", "")
        )
        if allocation:
            record = parse_resource_claim(_with_allocation(claim, allocation))
            reserved = record.reserved_for
            if (
                len(reserved) >= RESERVED_FOR_MAX
                and pod_uid not in reserved
                and not (group_name and group_name in record.reserved_for_groups)
            ):
                result.problem = "resourceclaim in use"
                return result
        else:
            problem = _admin_access_problem(claim, state)
            if problem:
                result.problem = problem
                return result
            record = parse_resource_claim(claim)
        if for_group and group is not None:
            record = replace(record, for_group=True)
            result.group = {
                "apiGroup": POD_GROUP_API_GROUP,
                "resource": POD_GROUP_RESOURCE,
                "name": group.name,
                "uid": group.uid,
            }
        (result.allocated if record.allocated else result.pending).append(record)
    if pod.extended is not None:  # the extended-resource claim comes last, as in upstream's claim store
        result.pending.append(parse_resource_claim(pod.extended.source))
    return result


def consumer_for(claim: Claim, claims: PodClaims, pod: dict[str, str]) -> dict[str, str]:
    """The `reservedFor` entry a binder adds for the claim: the PodGroup's for a claim the pod
    shares with its group (`Claim.for_group`), else `pod`'s."""
    return claims.group if claim.for_group and claims.group is not None else pod


#: id(claim) -> (the claim, kept alive so the id stays unique; its validation problem or "").
_checked_claims: dict[int, tuple[Obj, str]] = {}
#: Claims whose check is remembered (the table starts again when full); wiring sets it to
#: `Settings.pods_seen_cache_size`: the claims of the pods kept for bind (`set_checked_claims_size`).
_CHECKED_CLAIMS_MAX = 4096


def set_checked_claims_size(size: int) -> None:
    """Remember the checks of at most `size` claims from now on."""
    global _CHECKED_CLAIMS_MAX
    if size < 1:
        raise ValueError(f"checked-claims table size must be at least 1, not {size}")
    _CHECKED_CLAIMS_MAX = size


def _claim_problem(claim: Obj) -> str:
    """The type problem of a stored claim ('' if none), checked once per claim object.

    Not strict (see `validation.problems`): the loaders already applied the API's rules.
    """
    entry = _checked_claims.get(id(claim))
    if entry is not None and entry[0] is claim:
        return entry[1]
    found = problems({**claim, "kind": "ResourceClaim"}, strict=False)
    problem = f"ResourceClaim {claim_ref(claim)}: {found[0]}" if found else ""
    if len(_checked_claims) >= _CHECKED_CLAIMS_MAX:
        _checked_claims.clear()  # claims are replaced, not edited: old entries are dead weight
    _checked_claims[id(claim)] = (claim, problem)
    return problem


def allocation_of(claim: Obj) -> Obj | None:
    """`status.allocation` if it is an object (anything else counts as not allocated)."""
    status = claim.get("status")
    allocation = status.get("allocation") if isinstance(status, dict) else None
    return allocation if isinstance(allocation, dict) and allocation else None


def _owned_by(claim: Obj, pod_uid: str) -> bool:
    return any(
        ref.get("controller") and ref.get("kind") == "Pod" and ref.get("uid") == pod_uid
        for ref in (claim.get("metadata") or {}).get("ownerReferences") or ()
    )


def _owned_by_group(claim: Obj, group_name: str) -> bool:
    """The claim's controller is the PodGroup of that name (`isForPodGroupByPod`: a pod does not
    know its group's uid; the apiVersion's version part may change, its group may not)."""
    return any(
        ref.get("controller")
        and ref.get("kind") == "PodGroup"
        and ref.get("name") == group_name
        and str(ref.get("apiVersion") or "").startswith(POD_GROUP_API_GROUP + "/")
        for ref in (claim.get("metadata") or {}).get("ownerReferences") or ()
    )


def _bound_to_group(group: PodGroup, entry: PodResourceClaim) -> bool:
    """The pod's entry is one of the PodGroup's claims (`BindTo`): same entry name, same claim
    name or same template name."""
    return any(
        shared.name == entry.name
        and shared.template_name == entry.resource_claim_template_name
        and (shared.template_name is not None or shared.claim_name == entry.resource_claim_name)
        for shared in group.claims
    )


def _with_allocation(claim: Obj, allocation: Obj) -> Obj:
    if (claim.get("status") or {}).get("allocation") is allocation:
        return claim
    return {**claim, "status": {**(claim.get("status") or {}), "allocation": allocation}}


def _admin_access_problem(claim: Obj, state: ClusterState) -> str:
    requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or ()
    if not any((r.get("exactly") or {}).get("adminAccess") for r in requests):
        return ""
    namespace = (claim.get("metadata") or {}).get("namespace") or "default"
    ns = state.get("Namespace", namespace)
    labels = ((ns or {}).get("metadata") or {}).get("labels") or {}
    if labels.get(ADMIN_ACCESS_LABEL) == "true":
        return ""
    return (
        f"claim {claim_ref(claim)}: admin access requires the namespace {namespace} "
        f'to carry the label {ADMIN_ACCESS_LABEL}="true"'
    )


def allocation_fits_node(claim: Claim, node: Obj | None, *, v137: bool = False) -> bool:
    """An allocated claim is usable on a node iff its allocation's nodeSelector matches (or is unset).

    `v137`: Kubernetes 1.37's scheduler also requires a node that declares
    `DRAOptionalNodeOperations` when a device of the allocation skips node operations
    (v1.37.2 dynamicresources.go, allocationResultRequiresDRAOptionalNodeOperations).
    """
    if v137 and skips_node_operations(claim) and not _declares_optional_node_operations(node):
        return False
    selector = claim.node_selector
    if selector is None:
        return True
    return node is not None and selector_matches(node, selector)


def skips_node_operations(claim: Claim) -> bool:
    """Whether a device of the claim's allocation skips node operations (Kubernetes 1.37)."""
    devices = mapping_field((allocation_of(claim.source) or {}).get("devices"))
    results = devices.get("results")
    return isinstance(results, list) and any(
        isinstance(r, dict) and bool(r.get("skipNodeOperations")) for r in results
    )


def _declares_optional_node_operations(node: Obj | None) -> bool:
    declared = mapping_field((node or {}).get("status")).get("declaredFeatures")
    return isinstance(declared, list) and "DRAOptionalNodeOperations" in declared


@dataclass(frozen=True, slots=True)
class AllocatedDevices:
    """Devices held by allocated (or assumed) claims, as the allocator's AllocatedState needs them."""

    devices: frozenset[DeviceID]
    shared_ids: frozenset[tuple[DeviceID, str]]
    aggregated_capacity: dict[DeviceID, dict[str, Quantity]]


@dataclass(frozen=True, slots=True)
class HeldDevices:
    """What one allocation holds: exclusive devices and shares (with consumed capacity)."""

    devices: tuple[DeviceID, ...]
    shares: tuple[tuple[DeviceID, str, dict[str, Quantity]], ...]


#: id(allocation dict) -> (the dict, kept alive so the id stays unique; what it holds).
AllocationMemo = dict[int, tuple[Obj, HeldDevices]]


def held_devices(allocation: Obj) -> HeldDevices:
    """Parse one `status.allocation`: results without adminAccess hold devices.

    Malformed entries (not objects, non-string ids, bad quantities) are skipped: one bad
    allocation must not make every pod's filter fail (the loaders refuse such claims anyway).
    """
    devices: list[DeviceID] = []
    shares: list[tuple[DeviceID, str, dict[str, Quantity]]] = []
    section = allocation.get("devices") if isinstance(allocation, dict) else None
    results = section.get("results") if isinstance(section, dict) else None
    for result in results if isinstance(results, list) else ():
        if not isinstance(result, dict) or result.get("adminAccess"):
            continue
        ids = (result.get("driver", ""), result.get("pool", ""), result.get("device", ""))
        if not all(isinstance(part, str) for part in ids):
            continue
        device_id = DeviceID(*ids)
        share_id = result.get("shareID")
        if share_id and isinstance(share_id, str):
            consumed = _consumed(result.get("consumedCapacity"))
            if consumed is not None:
                shares.append((device_id, share_id, consumed))
        else:
            devices.append(device_id)
    return HeldDevices(tuple(devices), tuple(shares))


def _consumed(raw: Any) -> dict[str, Quantity] | None:
    if raw is None:
        return {}
    try:
        return {n: Quantity.parse(v) for n, v in raw.items()} if isinstance(raw, dict) else None
    except ValueError:
        return None


def _device_keys(allocation: Obj | None) -> list[tuple[str, str, str, str, str]]:
    results = ((allocation or {}).get("devices") or {}).get("results") or ()
    return sorted(
        (
            r.get("request", ""),
            r.get("driver", ""),
            r.get("pool", ""),
            r.get("device", ""),
            r.get("shareID", ""),
        )
        for r in results
    )


def same_devices(a: Obj | None, b: Obj | None) -> bool:
    """Two allocations hand out the same devices for the same requests (format-insensitive)."""
    return a is b or _device_keys(a) == _device_keys(b)


def collect_allocated(
    claims: list[Obj], assumed: dict[str, Obj], memo: AllocationMemo | None = None
) -> AllocatedDevices:
    """Scan allocations: results without adminAccess hold devices; shares add up capacity.

    `memo` (optional, updated in place) keeps each allocation's parse by object identity, so a
    rescan after one claim changed re-parses only that claim; entries of allocations no longer
    seen are dropped.
    """
    devices: set[DeviceID] = set()
    shared: set[tuple[DeviceID, str]] = set()
    aggregated: dict[DeviceID, dict[str, Quantity]] = {}
    allocations: list[Obj] = []
    written: dict[str, Obj] = {}
    for claim in claims:
        allocation = allocation_of(claim)
        if allocation:
            allocations.append(allocation)
            written[(claim.get("metadata") or {}).get("uid", "")] = allocation
    # An assumed allocation whose write already shows in the claim must not count twice. One whose
    # claim shows a *different* allocation still counts, or two claims get one device:
    # 1. bind A assumes c0 -> n0/gpu-0 and writes c0's finalizer;
    # 2. another scheduler allocates c0 elsewhere; the watch shows it; A's status write will 409;
    # 3. bind B (claim c1) evaluates n0: had c0's entry been skipped, gpu-0 looked free and B
    #    wrote c1 -> n0/gpu-0;
    # 4. c0 is deallocated (its user went away) before A re-reads it: A writes c0 -> n0/gpu-0.
    # Counted, gpu-0 stays taken until A forgets its entry (fails at the re-read, or writes and
    # the watch shows it). Pinned by tests/kube/test_binder_regressions.py.
    allocations.extend(
        a for uid, a in assumed.items() if uid not in written or not same_devices(written[uid], a)
    )
    seen: AllocationMemo = {}
    for allocation in allocations:
        entry = memo.get(id(allocation)) if memo is not None else None
        if entry is None or entry[0] is not allocation:
            entry = (allocation, held_devices(allocation))
        seen[id(allocation)] = entry
        held = entry[1]
        devices.update(held.devices)
        for device_id, share_id, consumed in held.shares:
            shared.add((device_id, share_id))
            total = aggregated.setdefault(device_id, {})
            for name, amount in consumed.items():
                total[name] = total[name] + amount if name in total else amount
    if memo is not None:
        memo.clear()
        memo.update(seen)
    return AllocatedDevices(frozenset(devices), frozenset(shared), aggregated)
