"""`Pod`: a pod as the core reads it, parsed once at the edge by `parse_pod`.

Owns: the typed record of the pod fields the extender reads (identity, `spec.nodeName`,
`spec.schedulerName`, the labels and annotations, the gang references, `spec.resourceClaims`
and `status.resourceClaimStatuses`) and its one parser. The edges parse (the wire's filter and
prioritize bodies, the binders' pod lookup, explain and the dashboard); the core, the claim
resolution and the gang terms read records only.

The parser never raises: whatever validation lets through is read, a field of the wrong type
counts as absent. What is wrong with the pod is `Pod.problem`: `validation.pod_problem`'s text,
worked out from the object on first use (claim resolution asks once per evaluation), so parsing
stays cheap for the calls that re-use a cached evaluation (prioritize) and for the pods of the
state the gang terms scan.

Lives beside `objects` and `validation` (shared helpers) rather than in `objects`, because it
needs `validation` and `validation` needs `objects`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

from extender.lru import deep_size
from extender.objects import Obj, list_field, mapping_field, text_field
from extender.validation import pod_problem

_EMPTY: Mapping[str, str] = MappingProxyType({})
#: The API server's default for `spec.schedulerName`, so a pod without one reads as it would in a cluster.
DEFAULT_SCHEDULER = "default-scheduler"


class PodResourceClaim(NamedTuple):
    """One `spec.resourceClaims` entry; None where the field is absent, null or not a string."""

    name: str | None
    resource_claim_name: str | None
    resource_claim_template_name: str | None


class PodResourceClaimStatus(NamedTuple):
    """One `status.resourceClaimStatuses` entry (the name of a claim made from a template)."""

    name: str | None
    resource_claim_name: str | None


@dataclass(frozen=True, slots=True)
class ExtendedClaim:
    """The claim the scheduler would create for a pod's DRA-backed extended resources on one kind
    of node (`extender.core.extended`); equal when it asks for the same devices (part of an
    evaluation's key)."""

    resources: tuple[str, ...]  # the pod's resources DRA serves on these nodes, sorted
    requests: tuple[tuple[str, str, int], ...]  # (request, class, count) of each of its requests
    source: Obj = field(compare=False, hash=False)  # the in-memory ResourceClaim object
    #: `status.extendedResourceClaimStatus.requestMappings` entries (API field names).
    mappings: tuple[Mapping[str, str], ...] = field(default=(), compare=False, hash=False)


class WorkloadRef(NamedTuple):
    """`spec.workloadRef` (Kubernetes 1.35 Workload API); each part '' when unset."""

    name: str
    pod_group: str
    pod_group_replica_key: str


@dataclass(frozen=True, slots=True)
class Pod:
    """The pod fields the extender reads (see module docstring). Build it with `parse_pod`."""

    namespace: str  # "default" when absent or empty
    name: str  # '' when absent
    uid: str  # '' when absent
    node_name: str  # spec.nodeName, '' when unbound
    scheduler_name: str = DEFAULT_SCHEDULER  # spec.schedulerName; DEFAULT_SCHEDULER when absent or empty
    #: Entries with string values (a label value of another type counts as absent).
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY, hash=False)
    #: Entries with string values; numbers written unquoted in hand-made YAML count as their text.
    annotations: Mapping[str, str] = field(default_factory=lambda: _EMPTY, hash=False)
    resource_claims: tuple[PodResourceClaim, ...] = ()  # entries that are objects, in order
    resource_claim_statuses: tuple[PodResourceClaimStatus, ...] = ()  # idem
    pod_group_name: str = ""  # spec.schedulingGroup.podGroupName (1.36 PodGroup API)
    workload_ref: WorkloadRef | None = None  # spec.workloadRef with a name
    #: Set on the per-node-kind variants of a pod asking for extended resources backed by DRA
    #: (`extender.core.extended.split`); claim resolution appends it as a pending claim.
    extended: ExtendedClaim | None = None
    #: The object as received. Only the edges that write the pod back read it (the file-mode
    #: binder stores a bound copy); `problem` validates it.
    source: Obj = field(default_factory=dict, repr=False, compare=False, hash=False)
    _problem: list[str] = field(default_factory=list, init=False, repr=False, compare=False, hash=False)
    _size: list[int] = field(default_factory=list, init=False, repr=False, compare=False, hash=False)

    @property
    def ref(self) -> str:
        """namespace/name."""
        return f"{self.namespace}/{self.name}"

    @property
    def key(self) -> str:
        """The pod among the pods seen and in the evaluation cache: its UID, else namespace/name."""
        return self.uid or self.ref

    @property
    def size(self) -> int:
        """Bytes the record keeps alive, about: `lru.deep_size` of its source (the parsed fields
        share its strings), worked out once per record. The caches that keep pods weigh them by it."""
        if not self._size:
            self._size.append(deep_size(self.source))
        return self._size[0]

    @property
    def problem(self) -> str:
        """What is wrong with the pod, in one line ('' if nothing): `validation.pod_problem`,
        worked out once per record (two threads racing both append the same text; the first wins)."""
        if not self._problem:
            self._problem.append(pod_problem(self.source))
        return self._problem[0]


def parse_pod(obj: Any) -> Pod:
    """The record of a pod object (decoded JSON or YAML); never raises (see module docstring)."""
    source = obj if isinstance(obj, dict) else {}
    meta = mapping_field(source.get("metadata"))
    spec = mapping_field(source.get("spec"))
    status = mapping_field(source.get("status"))
    group = mapping_field(spec.get("schedulingGroup")).get("podGroupName")
    ref = mapping_field(spec.get("workloadRef"))
    pod = Pod(
        namespace=text_field(meta.get("namespace")) or "default",
        name=text_field(meta.get("name")),
        uid=text_field(meta.get("uid")),
        node_name=text_field(spec.get("nodeName")),
        scheduler_name=text_field(spec.get("schedulerName")) or DEFAULT_SCHEDULER,
        labels=_labels(meta.get("labels")),
        annotations=_annotations(meta.get("annotations")),
        resource_claims=tuple(
            PodResourceClaim(
                _optional(e.get("name")),
                _optional(e.get("resourceClaimName")),
                _optional(e.get("resourceClaimTemplateName")),
            )
            for e in list_field(spec.get("resourceClaims"))
            if isinstance(e, dict)
        ),
        resource_claim_statuses=tuple(
            PodResourceClaimStatus(_optional(s.get("name")), _optional(s.get("resourceClaimName")))
            for s in list_field(status.get("resourceClaimStatuses"))
            if isinstance(s, dict)
        ),
        pod_group_name=str(group) if group else "",
        workload_ref=(
            WorkloadRef(
                str(ref["name"]), str(ref.get("podGroup") or ""), str(ref.get("podGroupReplicaKey") or "")
            )
            if ref.get("name")
            else None
        ),
        source=source,
    )
    if source is not obj:  # not an object at all: the problem says so
        pod._problem.append(pod_problem(obj))
    return pod


def _optional(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _labels(value: Any) -> Mapping[str, str]:
    if not isinstance(value, dict) or not value:
        return _EMPTY
    return MappingProxyType({k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)})


def _annotations(value: Any) -> Mapping[str, str]:
    if not isinstance(value, dict) or not value:
        return _EMPTY
    return MappingProxyType(
        {
            k: v if isinstance(v, str) else str(v)
            for k, v in value.items()
            if isinstance(k, str)
            and (isinstance(v, str) or (isinstance(v, int | float) and not isinstance(v, bool)))
        }
    )
