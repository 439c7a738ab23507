"""Extended resources backed by DRA (KEP-5004, the `DRAExtendedResource` gate): pods that ask for
`example.com/gpu: 2` in their containers' resources, with no ResourceClaim.

Upstream (kubernetes v1.36.3 pkg/scheduler/framework/plugins/dynamicresources/
extendeddynamicresources.go; v1.37.2 is the same) and this module, rule by rule:

- Which resources: names that are extended resource names (`v1helper.IsExtendedResourceName`:
  a "/" outside `*kubernetes.io/`, not `requests.*`) or start with
  `deviceclass.resource.kubernetes.io/` (`schedutil.IsDRAExtendedResourceName`), with a
  non-zero quantity in the pod's requests (`resourcehelper.PodRequests`: containers summed,
  init containers as a maximum with the sidecars before them, plus the overhead).
- Which class: a DeviceClass whose `spec.extendedResourceName` is the name, or the class
  `<name>` of `deviceclass.resource.kubernetes.io/<name>` (always; `extendedresourcecache`).
  Several classes with one `extendedResourceName`: the newest `creationTimestamp` wins, on a
  tie the lowest name. A pod none of whose resources a class maps is not ours (nothing to do).
- Per node (`filterExtendedResources`): a mapped resource the node's `status.allocatable`
  lists as 0 or not at all goes to DRA; one the node advertises (a device plugin) is left to
  NodeResourcesFit. A requested DRA-style name that is neither mapped nor listed fails the node
  ("cannot fit resource", Unschedulable).
- The claim (`createRequestsAndMappings`): one request per container and resource, named
  `container-<i>-request-<j>` (i: the container's index in init containers + containers, j: the
  resource's index among the container's sorted request names), `exactly` the class, count the
  quantity; init containers that are not sidecars reuse later long-lived containers' requests
  and share the largest of their own; requests sorted by name. Each container's use is a
  `requestMapping` (containerName, resourceName, requestName).
- At bind (`bindClaim`): the claim is created with `generateName: <pod>-extended-resources-`,
  the annotation `resource.kubernetes.io/extended-resource-claim: "true"` and the pod as
  controller owner; it gets the finalizer, `status.allocation` and `reservedFor` like any
  claim; then the pod's `status.extendedResourceClaimStatus` names it and its mappings.
- A claim of the pod found in the state (annotation + controller owner, from an earlier cycle)
  with requests makes every node fail ("cannot schedule extended resource claim"), as upstream's
  Filter does before its PostFilter deletes the claim.

The core reads it through `Pod.extended`: `split` turns one pod into one variant per kind of
node (which of its resources DRA serves there), each carrying its claim as an extra pending
claim (`claims.resolve_pod_claims` appends it), so the tiers, the topology scoring and bind's
choice treat it like any claim. A pod that is not an extended-resource pod costs one pass over
its containers' request names.
"""

from __future__ import annotations

import copy
import dataclasses
import re
import secrets
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import repeat
from typing import Any

import numpy as np

from extender.cluster.state import ClusterState
from extender.core.reasons import FAILED, UNRESOLVABLE, NodeVerdict
from extender.objects import Obj
from extender.pods import ExtendedClaim, Pod
from extender.quantity import Quantity
from extender.verdicts import FilterVerdict, HostScores

#: resourceapi.ResourceDeviceClassPrefix: the implicit extended resource name of every class.
CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"
#: resourceapi.ExtendedResourceClaimAnnotation, on the claim the scheduler creates.
CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
#: The in-memory claim's name (specialClaimInMemName): deliberately not a valid object name.
IN_MEMORY_NAME = "<extended-resources>"
#: Suffix of the created claim's generateName (after the pod's name).
GENERATE_SUFFIX = "-extended-resources-"
#: The messages upstream's Filter returns.
CANNOT_FIT = "cannot fit resource"
STALE_CLAIM = "cannot schedule extended resource claim"

_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_EPOCH = datetime(1, 1, 1, tzinfo=UTC)  # a class without creationTimestamp is the oldest


def is_extended_resource_name(name: str) -> bool:
    """`v1helper.IsExtendedResourceName`: not native (has a "/" outside `*kubernetes.io/`), not
    a quota `requests.` name, and `requests.<name>` is a qualified name."""
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    prefix, _, short = ("requests." + name).rpartition("/")
    return (
        0 < len(short) <= 63
        and bool(_QUALIFIED_NAME.match(short))
        and 0 < len(prefix) <= 253
        and bool(_DNS_SUBDOMAIN.match(prefix))
    )


def is_dra_extended_name(name: str) -> bool:
    """`schedutil.IsDRAExtendedResourceName`: an extended resource name or an implicit class name."""
    return is_extended_resource_name(name) or name.startswith(CLASS_PREFIX)


# ---------------------------------------------------------------------- resource -> class


_class_maps: dict[int, tuple[ClusterState, int, dict[str, str]]] = {}


def class_map(state: ClusterState) -> Mapping[str, str]:
    """Extended resource name -> DeviceClass name, as upstream's `ExtendedResourceCache` maps
    them (see module docstring); rebuilt when the state's devices generation changes."""
    entry = _class_maps.get(id(state))
    if entry is not None and entry[0] is state and entry[1] == state.devices_generation:
        return entry[2]
    mapping: dict[str, str] = {}
    explicit: dict[str, tuple[datetime, str]] = {}  # name -> (created, class) of the holder
    for obj in state.iter("DeviceClass"):
        meta = obj.get("metadata") or {}
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            continue
        mapping[CLASS_PREFIX + name] = name
        resource = (obj.get("spec") or {}).get("extendedResourceName")
        if not isinstance(resource, str) or not resource:
            continue
        created = _timestamp(meta.get("creationTimestamp"))
        holder = explicit.get(resource)
        # Newer wins; on equal timestamps the lower name (updateResourceName2class).
        if holder is None or created > holder[0] or (created == holder[0] and name < holder[1]):
            explicit[resource] = (created, name)
    for resource, (_, name) in explicit.items():
        mapping[resource] = name
    if len(_class_maps) > 8:
        _class_maps.clear()
    _class_maps[id(state)] = (state, state.devices_generation, mapping)
    return mapping


def _timestamp(value: Any) -> datetime:
    if not isinstance(value, str):
        return _EPOCH
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return _EPOCH
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


# ---------------------------------------------------------------------- the pod's needs


@dataclass(frozen=True, slots=True)
class Container:
    """One container as the claim's requests need it."""

    index: int  # in init containers + containers
    name: str
    request_names: tuple[str, ...]  # every resource name of its (defaulted) requests, sorted
    counts: Mapping[str, int]  # the DRA-style extended resources it requests, non-zero
    init: bool  # an init container (sidecars included)
    long_lived: bool  # a regular container or a sidecar (init container with restartPolicy Always)


@dataclass(frozen=True, slots=True)
class Needs:
    """What a pod asks for in DRA-style extended resources (see `needs_of`)."""

    totals: Mapping[str, int]  # resource -> the pod's request (PodRequests), non-zero only
    classes: Mapping[str, str]  # the mapped ones: resource -> DeviceClass
    containers: tuple[Container, ...]
    problem: str = ""  # a bad quantity: the pod is unschedulable everywhere


def needs_of(pod: Pod, classes: Mapping[str, str]) -> Needs | None:
    """The pod's DRA-style extended resources, or None if no class maps any of them (then the
    pod is not an extended-resource pod and nothing here applies, as upstream's PreFilter)."""
    spec = pod.source.get("spec")
    if not isinstance(spec, dict):
        return None
    init = spec.get("initContainers")
    regular = spec.get("containers")
    entries = [
        *((c, True) for c in (init if isinstance(init, list) else ()) if isinstance(c, dict)),
        *((c, False) for c in (regular if isinstance(regular, list) else ()) if isinstance(c, dict)),
    ]
    containers: list[Container] = []
    problems: list[str] = []
    for index, (raw, is_init) in enumerate(entries):
        requests = _defaulted_requests(raw.get("resources"))
        counts: dict[str, int] = {}
        for name, value in requests.items():
            if not is_dra_extended_name(name):
                continue
            count, problem = _count(value)
            if problem:
                where = "initContainers" if is_init else "containers"
                problems.append(f'{where}[{raw.get("name", index)}].resources.requests["{name}"]: {problem}')
            elif count:
                counts[name] = count
        sidecar = is_init and raw.get("restartPolicy") == "Always"
        container_name = raw.get("name")
        containers.append(
            Container(
                index=index,
                name=container_name if isinstance(container_name, str) else "",
                request_names=tuple(sorted(requests)),
                counts=counts,
                init=is_init,
                long_lived=not is_init or sidecar,
            )
        )
    totals = _pod_totals(containers, spec.get("overhead"))
    mapped = {name: classes[name] for name in totals if name in classes}
    if problems:
        if not any(name in classes for name, _ in _requested_names(entries)):
            return None
        return Needs({}, {}, (), problem=f"pod {pod.ref}: " + "; ".join(problems))
    if not mapped:
        return None
    return Needs(totals, mapped, tuple(containers))


def _requested_names(entries: Iterable[tuple[Obj, bool]]) -> Iterable[tuple[str, bool]]:
    for raw, is_init in entries:
        for name in _defaulted_requests(raw.get("resources")):
            yield name, is_init


def _defaulted_requests(resources: Any) -> dict[str, Any]:
    """The container's requests as the API server stores them: a limit without a request
    defaults the request (`SetDefaults_Pod`)."""
    if not isinstance(resources, dict):
        return {}
    requests = resources.get("requests")
    limits = resources.get("limits")
    out: dict[str, Any] = dict(limits) if isinstance(limits, dict) else {}
    if isinstance(requests, dict):
        out.update(requests)
    return {k: v for k, v in out.items() if isinstance(k, str)}


def _count(value: Any) -> tuple[int, str]:
    """A whole, non-negative device count, or the problem (the API's rules for extended resources)."""
    try:
        quantity = Quantity.parse(value)
    except ValueError as exc:
        return 0, str(exc)
    if quantity.sign() < 0:
        return 0, f"must be greater than or equal to 0, got {value}"
    if not quantity.is_integer():
        return 0, f"must be a whole number (extended resources are counted in devices), got {value}"
    return quantity.value(), ""


def _pod_totals(containers: list[Container], overhead: Any) -> dict[str, int]:
    """`resourcehelper.PodRequests` for these resources: regular containers and sidecars add up;
    each plain init container needs its own request plus the sidecars started before it; the
    pod needs the larger of the two; the overhead is added."""
    total: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for c in containers:
        if not c.init:
            _add(total, c.counts)
            continue
        if c.long_lived:  # a sidecar: runs beside everything after it
            _add(total, c.counts)
            _add(sidecars, c.counts)
            use = dict(sidecars)
        else:
            use = dict(sidecars)
            _add(use, c.counts)
        for name, n in use.items():
            init_peak[name] = max(init_peak.get(name, 0), n)
    for name, n in init_peak.items():
        total[name] = max(total.get(name, 0), n)
    if isinstance(overhead, dict):
        for name, value in overhead.items():
            if isinstance(name, str) and is_dra_extended_name(name):
                count, problem = _count(value)
                if not problem:
                    total[name] = total.get(name, 0) + count
    return {name: n for name, n in total.items() if n}


def _add(into: dict[str, int], counts: Mapping[str, int]) -> None:
    for name, n in counts.items():
        into[name] = into.get(name, 0) + n


# ---------------------------------------------------------------------- the claim's requests


@dataclass(frozen=True, slots=True)
class Mapping_:
    """One `status.extendedResourceClaimStatus.requestMappings` entry."""

    container_name: str
    resource_name: str
    request_name: str

    def to_api(self) -> dict[str, str]:
        return {
            "containerName": self.container_name,
            "resourceName": self.resource_name,
            "requestName": self.request_name,
        }


def requests_and_mappings(
    needs: Needs, resources: Iterable[str]
) -> tuple[list[dict[str, Any]], list[Mapping_]]:
    """The claim's device requests and the container mappings for the resources DRA serves
    (`createRequestsAndMappings`, rule for rule)."""
    requests: list[dict[str, Any]] = []
    mappings: list[Mapping_] = []
    containers = needs.containers
    for resource in sorted(resources):
        class_name = needs.classes.get(resource)
        if class_name is None:
            continue
        long_requests: list[dict[str, Any] | None] = [None] * len(containers)
        long_mappings: list[Mapping_] = []
        for c in containers:
            if c.long_lived:
                request, found = _container_request(c, resource, class_name, [])
                long_requests[c.index] = request
                long_mappings.extend(found)
        largest: dict[str, Any] | None = None
        short_names: set[str] = set()
        short_mappings: list[Mapping_] = []
        for c in containers:
            if c.long_lived:
                continue
            request, found = _container_request(c, resource, class_name, long_requests[c.index :])
            if request is not None:
                short_names.add(request["name"])
                if largest is None or largest["exactly"]["count"] < request["exactly"]["count"]:
                    largest = request
            short_mappings.extend(found)
        if largest is not None and len(short_names) > 1:
            short_names.discard(largest["name"])
            short_mappings = [
                dataclasses.replace(m, request_name=largest["name"]) if m.request_name in short_names else m
                for m in short_mappings
            ]
        if largest is not None:
            requests.append(largest)
        requests.extend(r for r in long_requests if r is not None)
        mappings.extend(long_mappings)
        mappings.extend(short_mappings)
    requests.sort(key=lambda r: str(r["name"]))
    return requests, mappings


def _container_request(
    c: Container, resource: str, class_name: str, reusable: list[dict[str, Any] | None]
) -> tuple[dict[str, Any] | None, list[Mapping_]]:
    """`createResourceRequestAndMappings` for one container and resource."""
    wanted = c.counts.get(resource, 0)
    if not wanted:
        return None, []
    mappings: list[Mapping_] = []
    covered = 0
    for request in reusable:
        if request is None:
            continue
        covered += request["exactly"]["count"]
        mappings.append(Mapping_(c.name, resource, request["name"]))
        if covered >= wanted:
            return None, mappings
    name = f"container-{c.index}-request-{c.request_names.index(resource)}"
    request = {
        "name": name,
        "exactly": {
            "deviceClassName": class_name,
            "allocationMode": "ExactCount",
            "count": wanted - covered,
        },
    }
    mappings.append(Mapping_(c.name, resource, name))
    return request, mappings


# ---------------------------------------------------------------------- per node


def node_resources(needs: Needs, listed: Mapping[str, Mapping[str, int]], node: str) -> tuple[str, ...] | str:
    """The pod's resources DRA serves on this node, sorted, or why the node cannot run the pod
    (`filterExtendedResources`). `listed` is `allocatable_index`'s."""
    dra: list[str] = []
    for resource in sorted(needs.totals):
        amount = listed.get(resource, _NONE).get(node)
        if resource in needs.classes and not amount:
            dra.append(resource)
        elif amount is None:
            return (
                f"{CANNOT_FIT} {resource}: the node does not advertise it in status.allocatable "
                "and no DeviceClass maps it"
            )
    return tuple(dra)


_NONE: Mapping[str, int] = {}
_allocatable: dict[int, tuple[ClusterState, int, dict[str, dict[str, int]]]] = {}


def allocatable_index(state: ClusterState) -> Mapping[str, Mapping[str, int]]:
    """DRA-style extended resource -> {node: its `status.allocatable` amount} for the nodes
    that list it; built once per devices generation (Nodes are device-side objects), so a call
    reads dicts instead of parsing every node's quantities."""
    entry = _allocatable.get(id(state))
    if entry is not None and entry[0] is state and entry[1] == state.devices_generation:
        return entry[2]
    index: dict[str, dict[str, int]] = {}
    for node in state.iter("Node"):
        name = (node.get("metadata") or {}).get("name")
        status = node.get("status")
        allocatable = status.get("allocatable") if isinstance(status, dict) else None
        if not isinstance(name, str) or not isinstance(allocatable, dict):
            continue
        for resource, value in allocatable.items():
            if isinstance(resource, str) and is_dra_extended_name(resource):
                index.setdefault(resource, {})[name] = _amount(value)
    if len(_allocatable) > 8:
        _allocatable.clear()
    _allocatable[id(state)] = (state, state.devices_generation, index)
    return index


def _amount(value: Any) -> int:
    try:
        return Quantity.parse(value).value()
    except ValueError:
        return 0


_owned: dict[int, tuple[ClusterState, int, dict[tuple[str, str, str], Obj]]] = {}


def stale_claim(pod: Pod, state: ClusterState) -> Obj | None:
    """The pod's extended-resource claim from an earlier cycle (`findExtendedResourceClaim`):
    annotated, with the pod as controller owner. The annotated claims are indexed by
    (namespace, owner name, owner UID) once per claims generation."""
    if not pod.uid:
        return None
    entry = _owned.get(id(state))
    if entry is None or entry[0] is not state or entry[1] != state.claims_generation:
        index: dict[tuple[str, str, str], Obj] = {}
        for claim in state.iter("ResourceClaim"):
            meta = claim.get("metadata") or {}
            if (meta.get("annotations") or {}).get(CLAIM_ANNOTATION) != "true":
                continue
            for owner in meta.get("ownerReferences") or ():
                if isinstance(owner, dict) and owner.get("controller"):
                    key = (meta.get("namespace") or "default", str(owner.get("name")), str(owner.get("uid")))
                    index.setdefault(key, claim)
        if len(_owned) > 8:
            _owned.clear()
        entry = _owned[id(state)] = (state, state.claims_generation, index)
    return entry[2].get((pod.namespace, pod.name, pod.uid))


def holds_for(claim: Obj, pod_uid: str) -> bool:
    """The claim is allocated and reserved for the pod."""
    status = claim.get("status") or {}
    return bool(status.get("allocation")) and any(
        isinstance(r, dict) and r.get("uid") == pod_uid for r in status.get("reservedFor") or ()
    )


def claim_object(pod: Pod, requests: list[dict[str, Any]], resources: tuple[str, ...]) -> Obj:
    """The in-memory claim (preFilterExtendedResources) with this node kind's requests. Its UID
    is a stand-in until the claim is created (upstream's is a random one)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "namespace": pod.namespace,
            "name": IN_MEMORY_NAME,
            "generateName": pod.name + GENERATE_SUFFIX,
            "uid": f"extended-resources/{pod.key}/{','.join(resources)}",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid, "controller": True}
            ],
            "annotations": {CLAIM_ANNOTATION: "true"},
        },
        "spec": {"devices": {"requests": requests}},
    }


@dataclass(slots=True)
class Split:
    """One pod's nodes by what DRA serves there: `parts` are (variant pod, its nodes); `refused`
    are nodes no variant can use, with their verdicts."""

    parts: list[tuple[Pod, list[str]]]
    refused: dict[str, NodeVerdict]


def split(pod: Pod, names: list[str], state: ClusterState) -> Split | None:
    """The pod's variants over `names`, or None if it is not an extended-resource pod (the
    caller goes on as before)."""
    needs = needs_of(pod, class_map(state))
    if needs is None:
        return None
    if needs.problem:
        return Split([], dict.fromkeys(names, NodeVerdict(UNRESOLVABLE, needs.problem)))
    stale = stale_claim(pod, state)
    if stale is not None and ((stale.get("spec") or {}).get("devices") or {}).get("requests"):
        meta = stale.get("metadata") or {}
        why = f"{STALE_CLAIM} {pod.namespace}/{meta.get('name', '')} (created in an earlier cycle)"
        return Split([], dict.fromkeys(names, NodeVerdict(FAILED, why)))
    groups: dict[tuple[str, ...], list[str]] = {}
    refused: dict[str, NodeVerdict] = {}
    listed = allocatable_index(state)
    for name in dict.fromkeys(names):
        outcome = node_resources(needs, listed, name)
        if isinstance(outcome, str):
            refused[name] = NodeVerdict(FAILED, outcome)
        else:
            groups.setdefault(outcome, []).append(name)
    return Split([(variant(pod, needs, resources), group) for resources, group in groups.items()], refused)


def filter_parts(
    parts: Split, node_names: list[str], verdict_of: Callable[[Pod, list[str]], FilterVerdict]
) -> FilterVerdict:
    """Filter's answer for an extended-resource pod: each part's verdict on its nodes
    (`verdict_of`, the facade's filter of one pod) merged with the nodes no part can use."""
    return merged_verdict([verdict_of(part, names) for part, names in parts.parts], parts, node_names)


def merged_verdict(verdicts: list[FilterVerdict], parts: Split, node_names: list[str]) -> FilterVerdict:
    """Filter's answer for an extended-resource pod from the verdicts of its parts (in
    `parts.parts` order) and the nodes no part can use (explain reuses it)."""
    error = next((v.error for v in verdicts if v.error), "")
    if error:
        return FilterVerdict(error=error)
    passed = {name for v in verdicts for name in v.passed}
    failed = {n: r for v in verdicts for n, r in v.failed.items()}
    unresolvable = {n: r for v in verdicts for n, r in v.unresolvable.items()}
    for name, outcome in parts.refused.items():
        (failed if outcome.status == FAILED else unresolvable)[name] = outcome.reason
    return FilterVerdict([n for n in dict.fromkeys(node_names) if n in passed], failed, unresolvable)


def prioritize_parts(
    parts: Split, node_names: list[str], priorities_of: Callable[[Pod, list[str]], dict[str, int]]
) -> HostScores:
    """Prioritize's answer for an extended-resource pod: each part's 0..10 on its nodes
    (`priorities_of`), 0 on the nodes no part can use."""
    by_node: dict[str, int] = {}
    for part, names in parts.parts:
        by_node.update(priorities_of(part, names))
    values = np.fromiter(map(by_node.get, node_names, repeat(0)), dtype=np.int64, count=len(node_names))
    return HostScores(node_names, values)


def variant(pod: Pod, needs: Needs, resources: tuple[str, ...]) -> Pod:
    """The pod with the claim for these DRA-served resources (none: the pod as it is)."""
    if not resources:
        return pod
    requests, mappings = requests_and_mappings(needs, resources)
    claim = ExtendedClaim(
        resources=resources,
        requests=tuple((r["name"], r["exactly"]["deviceClassName"], r["exactly"]["count"]) for r in requests),
        source=claim_object(pod, requests, resources),
        mappings=tuple(m.to_api() for m in mappings),
    )
    return dataclasses.replace(pod, extended=claim)


def for_node(pod: Pod, node: str, state: ClusterState) -> Pod | str | None:
    """The variant bind uses on `node`, the reason the pod cannot go there, or None when the pod
    is not an extended-resource pod."""
    if needs_of(pod, class_map(state)) is None:
        # Not an extended-resource pod. Checked first: the index of annotated claims behind
        # `stale_claim` is rebuilt per claims generation, which every bind moves (O(claims) per
        # bind at thousands of nodes), and only an extended-resource pod can have such a claim.
        return None
    made = stale_claim(pod, state)
    if made is not None and holds_for(made, pod.uid):
        # Its profile's DynamicResources plugin created and allocated it at PreBind, before this
        # bind (a profile this extender only binds for): nothing is left to create.
        return pod
    found = split(pod, [node], state)
    if found is None:
        return None
    if node in found.refused:
        return found.refused[node].reason
    return found.parts[0][0]


#: The API server's generateName alphabet and lengths (apiserver names.SimpleNameGenerator).
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_RANDOM_LENGTH = 5
_MAX_BASE = 63 - _RANDOM_LENGTH


def for_create(source: Obj) -> Obj:
    """The body that creates the claim: the in-memory claim without name, UID and status
    (createExtendedResourceClaimInAPI); the API server picks the name from generateName."""
    body = copy.deepcopy(source)
    meta = body["metadata"]
    meta.pop("name", None)
    meta.pop("uid", None)
    body.pop("status", None)
    return body


def created(source: Obj, state: ClusterState) -> Obj:
    """The claim as the API server would create it (file mode, which has none): a name from
    `generateName` the state does not hold yet, a new UID, a creation timestamp."""
    body = for_create(source)
    meta = body["metadata"]
    base = str(meta.get("generateName", ""))[:_MAX_BASE]
    namespace = str(meta.get("namespace", "default"))
    while True:
        name = base + "".join(secrets.choice(_NAME_ALPHABET) for _ in range(_RANDOM_LENGTH))
        if state.get("ResourceClaim", name, namespace) is None:
            break
    meta["name"] = name
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return body


def pod_status(claim_name: str, mappings: Iterable[Mapping[str, str]]) -> dict[str, Any]:
    """`status.extendedResourceClaimStatus` for the created claim."""
    return {"requestMappings": [dict(m) for m in mappings], "resourceClaimName": claim_name}
