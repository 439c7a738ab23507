"""`PodGroup`: a gang as the Workload API declares it, parsed once by `parse_pod_group`.

Kubernetes schedules gangs itself from 1.35 on: a pod names its group in
`spec.schedulingGroup.podGroupName`, and the PodGroup (`scheduling.k8s.io` v1alpha2 in 1.36,
v1beta1 in 1.37; namespaced, same name space as its pods) carries
- the gang policy: `spec.schedulingPolicy.gang.minCount`, the pods that must fit at once for the
  scheduler to admit any of them (`basic` instead: no gang);
- `spec.schedulingConstraints.topology[].key` (at most one): a node label whose value every member
  must share, e.g. the NVLink clique label of rack-scale systems;
- up to four `spec.resourceClaims` shared by the group (`DRAWorkloadResourceClaims`), each a claim
  or a template; the claims made from templates are named in `status.resourceClaimStatuses`.

The extender reads the fields above and nothing else; the parser never raises (validation refuses
malformed PodGroups at the edge, `extender.validation`), a field of the wrong type reads as absent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from extender.objects import list_field, mapping_field, text_field

#: The apiVersions read, newest first (1.37's beta, 1.36's alpha).
API_VERSIONS: tuple[str, ...] = ("scheduling.k8s.io/v1beta1", "scheduling.k8s.io/v1alpha2")


@dataclass(frozen=True, slots=True)
class PodGroupClaim:
    """One `spec.resourceClaims` entry and, for a template, the claim made from it (status)."""

    name: str
    claim_name: str | None
    template_name: str | None


@dataclass(frozen=True, slots=True)
class PodGroup:
    """The fields of one PodGroup the gang terms read (see module docstring)."""

    namespace: str
    name: str
    #: `gang.minCount`; None for a `basic` (non-gang) policy or none at all.
    min_count: int | None
    #: The node label all members must share (`schedulingConstraints.topology[0].key`), or None.
    topology_key: str | None
    claims: tuple[PodGroupClaim, ...] = ()
    uid: str = ""  # metadata.uid: a claim reserved for the group names it (`reservedFor`)

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


def parse_pod_group(obj: Any) -> PodGroup:
    """The record of a PodGroup object (decoded JSON or YAML); never raises."""
    source = obj if isinstance(obj, dict) else {}
    meta = mapping_field(source.get("metadata"))
    spec = mapping_field(source.get("spec"))
    gang = mapping_field(mapping_field(spec.get("schedulingPolicy")).get("gang"))
    count = gang.get("minCount")
    topology = [
        text_field(t.get("key"))
        for t in list_field(mapping_field(spec.get("schedulingConstraints")).get("topology"))
        if isinstance(t, dict)
    ]
    made = {
        text_field(s.get("name")): s.get("resourceClaimName")
        for s in list_field(mapping_field(source.get("status")).get("resourceClaimStatuses"))
        if isinstance(s, dict)
    }
    claims = []
    for entry in list_field(spec.get("resourceClaims")):
        if not isinstance(entry, dict) or not text_field(entry.get("name")):
            continue
        name = text_field(entry["name"])
        direct, template = entry.get("resourceClaimName"), entry.get("resourceClaimTemplateName")
        claim = direct if isinstance(direct, str) else made.get(name)
        claims.append(
            PodGroupClaim(
                name,
                claim if isinstance(claim, str) and claim else None,
                template if isinstance(template, str) and template else None,
            )
        )
    return PodGroup(
        namespace=text_field(meta.get("namespace")) or "default",
        name=text_field(meta.get("name")),
        min_count=count if isinstance(count, int) and not isinstance(count, bool) and count >= 1 else None,
        topology_key=next((key for key in topology if key), None),
        claims=tuple(claims),
        uid=text_field(meta.get("uid")),
    )
