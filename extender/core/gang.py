"""Gang-aware placement across multi-node NVLink domains (cliques), e.g. GB200/GB300 NVL72 racks.

On rack-scale systems the NVLink domain spans nodes: every GPU of a rack shares a clique, which
NVIDIA publishes as the node label `nvidia.com/gpu.clique` (`<clusterUUID>.<cliqueId>`) and as a
device attribute of its DRA driver. A distributed job whose pods talk over NVLink (IMEX channels
of one ComputeDomain) must land in one clique; placing it should also cut as few cliques as
possible for the jobs after it.

This module owns three pure steps, and `Gangs`, which keeps their per-generation inputs (node
cliques, placed members) for one placement; `Placement` calls it from prioritize (and,
optionally, filter):

1. **Gang identity** (`gang_of`): from the pod, the first of
   - `spec.schedulingGroup.podGroupName` (Kubernetes 1.36 PodGroup API),
   - `spec.workloadRef` `name`/`podGroup`/`podGroupReplicaKey` (1.35 Workload API),
   - label pairs of the well-known gang controllers (`GANG_LABELS`): JobSet (jobset name +
     replicated job), LeaderWorkerSet (name + group index), scheduler-plugins coscheduling
     (`scheduling.x-k8s.io/pod-group`), Volcano (`volcano.sh/job-name`).
   The size is, first, the PodGroup's gang `minCount` (`extender.podgroups`; the Workload API,
   read in kube mode and from state files where the cluster serves it), then the annotation
   `GangSettings.size_annotation` (`gang.dra-extender.io/size`), then LeaderWorkerSet's own
   `leaderworkerset.sigs.k8s.io/size`; without any the size is unknown (see scoring below). A
   PodGroup's topology constraint (`schedulingConstraints.topology[0].key`) names the node label
   whose value all members share: its values are the gang's domains instead of the cliques
   (the clique label itself still falls back to the device attribute, step 2).
2. **Clique of a node** (`node_cliques`): the node label `GangSettings.clique_label`, else the
   device attribute `GangSettings.clique_attribute` of the first of the node's devices that has it.
   In the topology model this is the level above the node: devices of one node already share
   `nvlink`..`node`; nodes of one clique share the clique.
3. **Clique score** (`clique_scores`), per candidate node, in [0, 1], from the nodes that passed
   filter for this pod (each counts as one slot: one gang member per node, the NVL72 shape of one
   pod per 4-GPU tray) and the members already bound or assumed (`placed`):
   - first member (nothing placed): a clique with fewer slots than the gang scores 0; among the
     cliques that fit, the tightest fit scores 1 and looser ones less, down to `LOOSE_FIT` (best
     fit keeps large cliques whole for large gangs). Unknown size: every clique with a slot
     scores `LOOSE_FIT`;
   - later members: nodes of the clique that holds most placed members score 1 (`SAME_CLIQUE`)
     when it has room for the rest, `CROWDED_CLIQUE` when it does not; another clique that could
     still hold the whole rest scores `OTHER_CLIQUE` times its best-fit term; a clique that
     cannot hold the rest scores 0;
   - a node without a clique scores 0 when some candidate has one; with no clique anywhere the
     gang term is not used at all.
   `combine` blends it with the node's 0..10 topology priority:
   `round((weight * 10 * clique_score + priority) / (weight + 1))`.
   Once a member is placed, the nodes of other domains fail filter with a reason naming the gang
   and its domain: always for a PodGroup with a topology constraint once a member is bound or
   assumed (`outside_domain_reason`: the constraint is the user's, and without upstream's
   TopologyAwareWorkloadScheduling nothing else enforces it; nominations do not count, see
   `Gangs.outside_domain`), and for other gangs, counting nominations too, with the setting
   `filter_other_cliques` (`other_clique_reason`).

Members in flight. kube-scheduler binds asynchronously: the next member's filter and prioritize
arrive while the previous member's bind is still queued (seen with the real kube-scheduler 1.36:
four members scored back to back, then four binds), so neither the state nor the binder's assume
cache holds the previous member yet and every member would pick a clique on its own. `Gangs`
therefore records each member's top-scored node at prioritize as its *nomination* (kube-
scheduler's own term for a pod's expected node) for `NOMINATION_SECONDS`: the gang's later
members count it as placed (a bound or assumed node of the same pod wins), and the nominated node
is no slot for them (one member per node). For the first member, cliques that fit equally well
are ordered by name, the first scoring `1` and the others `TIED_CLIQUE`, so the node the
scheduler takes is in the clique the nomination names.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from extender.allocator.model import Device
from extender.objects import Obj
from extender.podgroups import PodGroup, parse_pod_group
from extender.pods import Pod, parse_pod
from extender.verdicts import FilterVerdict

if TYPE_CHECKING:
    from extender.cluster.state import ClusterState
    from extender.core.assumed import AssumeCache
    from extender.core.verdict_table import Verdicts
    from extender.index.snapshot import DeviceIndex

#: Node label carrying the NVLink clique (NVIDIA GPU feature discovery / DRA driver).
CLIQUE_LABEL = "nvidia.com/gpu.clique"
#: Device attribute carrying the clique (NVIDIA DRA driver), used when the node has no label.
CLIQUE_ATTRIBUTE = "gpu.nvidia.com/cliqueID"
#: Annotation giving a gang's size (number of pods), set by whoever creates the pods.
SIZE_ANNOTATION = "gang.dra-extender.io/size"
LWS_SIZE_ANNOTATION = "leaderworkerset.sigs.k8s.io/size"
#: (controller, label keys that together name one gang), tried in order.
GANG_LABELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("jobset", ("jobset.sigs.k8s.io/jobset-name", "jobset.sigs.k8s.io/replicatedjob-name")),
    ("leaderworkerset", ("leaderworkerset.sigs.k8s.io/name", "leaderworkerset.sigs.k8s.io/group-index")),
    ("podgroup", ("scheduling.x-k8s.io/pod-group",)),
    ("volcano", ("volcano.sh/job-name",)),
)

SAME_CLIQUE = 1.0
CROWDED_CLIQUE = 0.6
OTHER_CLIQUE = 0.3
LOOSE_FIT = 0.5
#: The first member's term for a clique that fits as tightly as the chosen one (see "Members in
#: flight"): low enough that the blended 0..10 priority of the chosen clique is higher.
TIED_CLIQUE = 0.8
#: How long a member's nomination counts without its bind (binds follow within a second).
NOMINATION_SECONDS = 30.0
#: Most nominations kept (oldest dropped first): a bound on what prioritize calls leave behind.
NOMINATION_LIMIT = 4096
#: Most parsed PodGroups kept (all dropped at once beyond it).
POD_GROUP_CACHE_LIMIT = 4096


@dataclass(frozen=True, slots=True)
class GangSettings:
    """How gangs and cliques are recognised and how much the clique term weighs."""

    clique_label: str = CLIQUE_LABEL
    clique_attribute: str = CLIQUE_ATTRIBUTE
    size_annotation: str = SIZE_ANNOTATION
    weight: float = 3.0
    filter_other_cliques: bool = False

    def __post_init__(self) -> None:
        if not (self.weight >= 0 and self.weight != float("inf")):
            raise ValueError("gang weight must be a finite number >= 0")


@dataclass(frozen=True, slots=True)
class Gang:
    """One gang: `key` is unique per namespace and controller; `size` None means unknown.
    `group` is the PodGroup it was read from, if any (its topology key and name)."""

    key: str
    size: int | None
    group: PodGroup | None = None

    @property
    def topology_key(self) -> str | None:
        return self.group.topology_key if self.group is not None else None


def gang_of(pod: Pod, settings: GangSettings | None = None) -> Gang | None:
    """The pod's gang, or None for a pod that belongs to none (see module docstring)."""
    settings = settings or GangSettings()
    key = _key(pod)
    if key is None:
        return None
    return Gang(f"{pod.namespace}/{key}", _size(pod.annotations, settings))


def _key(pod: Pod) -> str | None:
    if pod.pod_group_name:
        return f"podgroup:{pod.pod_group_name}"
    ref = pod.workload_ref
    if ref is not None:
        return "workload:" + "/".join(ref)
    labels = pod.labels
    for controller, keys in GANG_LABELS:
        values = [labels.get(k) for k in keys]
        if all(values):
            return f"{controller}:" + "/".join(str(v) for v in values)
    return None


def _size(annotations: Mapping[str, str], settings: GangSettings) -> int | None:
    for name in (settings.size_annotation, LWS_SIZE_ANNOTATION):
        raw = annotations.get(name)
        if raw is None:
            continue
        try:
            size = int(raw.strip())
        except ValueError:
            continue  # a bad annotation costs the fit term, never the placement
        if size >= 1:
            return size
    return None


def node_cliques(
    nodes: Mapping[str, Obj], devices_of: Mapping[str, Iterable[Device]], settings: GangSettings | None = None
) -> dict[str, str]:
    """node name -> clique, for the nodes that have one (label first, then a device attribute).

    `devices_of` maps a node name to its devices (objects with an `attributes` dict keyed by
    qualified or driver-local names, as `extender.allocator.model.Device`).
    """
    settings = settings or GangSettings()
    out: dict[str, str] = {}
    driver, _, local = settings.clique_attribute.partition("/")
    for name, node in nodes.items():
        labels = (node.get("metadata") or {}).get("labels") or {}
        value = labels.get(settings.clique_label)
        if value:
            out[name] = str(value)
            continue
        for device in devices_of.get(name, ()):
            attrs = device.attributes
            own = device.id.driver == driver
            found = attrs.get(settings.clique_attribute) or (attrs.get(local) if own and local else None)
            text = _attribute_text(found)
            if text:
                out[name] = text
                break
    return out


def _attribute_text(value: Any) -> str | None:
    if not isinstance(value, dict):
        return None
    for kind in ("string", "int", "version"):
        if value.get(kind) not in (None, ""):
            return str(value[kind])
    return None


def placed_members(
    gang: Gang,
    pods: Iterable[Pod],
    *,
    assumed: Mapping[str, str] | None = None,
    settings: GangSettings | None = None,
    exclude_uid: str = "",
) -> dict[str, str]:
    """pod uid -> node of the gang's members that are bound (spec.nodeName) or assumed.

    `assumed` maps pod uid -> node for pods this extender bound whose update is not visible yet
    (the binder records them); they count before the API server reflects them.
    """
    out: dict[str, str] = {}
    for pod in pods:
        if not pod.node_name or pod.uid == exclude_uid:
            continue
        other = gang_of(pod, settings)
        if other is not None and other.key == gang.key:
            out[pod.uid] = pod.node_name
    for uid, node in (assumed or {}).items():
        if uid != exclude_uid:
            out.setdefault(uid, node)
    return out


def clique_scores(
    gang: Gang, candidates: list[str], clique_of: Mapping[str, str], placed_nodes: Iterable[str]
) -> dict[str, float] | None:
    """Per candidate node, the clique term in [0, 1]; None when no candidate has a clique."""
    cliques = [clique_of.get(n) for n in candidates]
    if not any(cliques):
        return None
    slots = Counter(c for c in cliques if c)
    placed = list(placed_nodes)
    home = home_clique(clique_of, placed)
    rest = None if gang.size is None else max(gang.size - len(placed), 0)
    fit = fit_terms(slots, rest)
    out: dict[str, float] = {}
    for name, clique in zip(candidates, cliques, strict=True):
        if not clique:
            out[name] = 0.0
        elif home is None:
            out[name] = fit[clique]
        elif clique == home:
            out[name] = SAME_CLIQUE if rest is None or slots[clique] >= rest else CROWDED_CLIQUE
        else:
            out[name] = OTHER_CLIQUE * fit[clique]
    return out


def fit_terms(slots: Mapping[str, int], need: int | None) -> dict[str, float]:
    """Best fit: the tightest clique that holds `need` members scores 1, looser ones down to
    LOOSE_FIT, cliques that cannot hold them 0 (`need` None: LOOSE_FIT for all)."""
    if need is None:
        return dict.fromkeys(slots, LOOSE_FIT)
    fitting = {c: s for c, s in slots.items() if s >= need}
    if not fitting:
        return dict.fromkeys(slots, 0.0)
    tight, loose = min(fitting.values()), max(fitting.values())
    out = dict.fromkeys(slots, 0.0)
    for clique, count in fitting.items():
        out[clique] = 1.0 if loose == tight else 1.0 - (1.0 - LOOSE_FIT) * (count - tight) / (loose - tight)
    # One clique scores highest: among equally tight ones the first by name (see "Members in
    # flight" in the module docstring).
    chosen = min(c for c in fitting if out[c] == 1.0)
    for clique in fitting:
        if out[clique] == 1.0 and clique != chosen:
            out[clique] = TIED_CLIQUE
    return out


def combine(priority: int, clique_score: float, weight: float) -> int:
    """A node's 0..10 priority from its topology priority and its clique term (in 0..1): their
    mean weighted `weight` : 1. Written as shares so a huge weight cannot overflow (1e308 once
    made this raise, and prioritize answer 500); the result is clamped to 0..10 whatever comes in."""
    share = weight / (weight + 1.0)
    value = share * 10.0 * clique_score + (1.0 - share) * priority
    return min(10, max(0, round(value))) if math.isfinite(value) else min(10, max(0, priority))


def home_clique(clique_of: Mapping[str, str], placed_nodes: Iterable[str]) -> str | None:
    """The clique holding most placed members (ties: the larger name), None if none placed."""
    placed = Counter(clique_of[n] for n in placed_nodes if n in clique_of)
    return max(placed, key=lambda c: (placed[c], c)) if placed else None


def with_pod_group(gang: Gang, group: PodGroup | None) -> Gang:
    """The gang as its PodGroup declares it: `minCount` before any other size source."""
    if group is None:
        return gang
    return Gang(gang.key, group.min_count or gang.size, group)


def outside_domain_reason(group: PodGroup, home: str, domain: str | None) -> str:
    """Filter reason for a node outside the domain a topology-constrained PodGroup is placed in."""
    key = group.topology_key
    where = f"{key}={domain}" if domain else f"no {key} label"
    return (
        f"PodGroup {group.ref} requires all its pods in one {key}; its placed pods are in "
        f"{key}={home}, this node has {where}"
    )


def filter_answer(verdicts: Verdicts, node_names: list[str], outside: Mapping[str, str]) -> FilterVerdict:
    """Filter's answer from the pod's verdicts, with the passed nodes in `outside` (node ->
    reason, `Gangs.outside_domain`) unresolvable. Built from the verdicts' arrays and C-level
    maps (no Python per node)."""
    passed, failed, unresolvable = verdicts.answer(node_names)
    if outside and passed:
        moved = np.fromiter(map(outside.__contains__, passed), dtype=bool, count=len(passed))
        if moved.any():
            named = np.array(passed, dtype=object)
            ruled_out = named[moved].tolist()
            passed = named[~moved].tolist()
            unresolvable.update(zip(ruled_out, map(outside.__getitem__, ruled_out), strict=True))
    return FilterVerdict(passed=passed, failed=failed, unresolvable=unresolvable)


def other_clique_reason(gang: Gang, home: str, clique: str | None) -> str:
    """Filter reason for a node outside the gang's clique (with `filter_other_cliques`)."""
    where = f"clique {clique}" if clique else "no NVLink clique"
    return f"gang {gang.key} is placed in NVLink clique {home}; this node is in {where}"


class Gangs:
    """The gang terms of one placement: node cliques per index generation and the gangs' placed
    members per claims generation, cached (placement's worker thread only)."""

    def __init__(
        self,
        settings: GangSettings,
        *,
        state: ClusterState,
        index: Callable[[], DeviceIndex],
        assumed: AssumeCache,
        seen: Callable[[str], Pod | None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._state = state
        self._index = index
        self._assumed = assumed
        self._seen = seen
        self._clock = clock
        #: pod uid -> (gang key, nominated node, expiry): members in flight (module docstring).
        self._nominated: dict[str, tuple[str, str, float]] = {}
        self._cliques: tuple[int, dict[str, str]] = (-1, {})  # (index generation, node -> clique)
        self._gang_pods: tuple[int, dict[str, dict[str, str]]] = (-1, {})  # (claims gen, key -> uid -> node)
        self._pods: tuple[int, dict[tuple[str, str], Pod]] = (-1, {})  # (claims gen, (ns, name) -> pod)
        self._labels: dict[str, tuple[int, dict[str, str]]] = {}  # key -> (index gen, node -> value)
        #: (namespace, name) -> (the state's PodGroup object, its parse): every member's filter
        #: and prioritize resolves its group, so the parse is kept while the object is the same.
        self._groups: dict[tuple[str, str], tuple[Obj, PodGroup]] = {}

    def node_cliques(self) -> dict[str, str]:
        """node -> multi-node NVLink clique, per index generation."""
        index = self._index()
        if self._cliques[0] != index.generation:
            devices = {name: block.devices for name, block in index.blocks.items()}
            self._cliques = (index.generation, node_cliques(index.nodes, devices, self.settings))
        return self._cliques[1]

    def node_domains(self, member: Gang) -> dict[str, str]:
        """node -> the member's domain: the value of its PodGroup's topology key (node labels;
        the clique label also from the device attribute), else the node's clique."""
        key = member.topology_key
        if key is None or key == self.settings.clique_label:
            return self.node_cliques()
        index = self._index()
        cached = self._labels.get(key)
        if cached is None or cached[0] != index.generation:
            values = {}
            for name, node in index.nodes.items():
                value = ((node.get("metadata") or {}).get("labels") or {}).get(key)
                if value:
                    values[name] = str(value)
            if len(self._labels) >= 16:  # a few keys in use at once; forget the oldest
                self._labels.pop(next(iter(self._labels)))
            cached = self._labels[key] = (index.generation, values)
        return cached[1]

    def resolve(self, pod: Pod) -> Gang | None:
        """The pod's gang (`gang_of`) with its PodGroup's size and topology, where the state
        has the PodGroup the pod names."""
        member = gang_of(pod, self.settings)
        if member is None or not pod.pod_group_name:
            return member
        obj = self._state.get("PodGroup", pod.pod_group_name, pod.namespace)
        if obj is None:
            return member
        key = (pod.namespace, pod.pod_group_name)
        cached = self._groups.get(key)
        if cached is None or cached[0] is not obj:  # the state replaces an object on every change
            if len(self._groups) >= POD_GROUP_CACHE_LIMIT:
                self._groups.clear()
            cached = self._groups[key] = (obj, parse_pod_group(obj))
        return with_pod_group(member, cached[1])

    def members(self, member: Gang, pod_uid: str) -> dict[str, str]:
        """pod uid -> node of the gang's other members: bound (in the state), assumed (bind) or,
        for members in flight, nominated (prioritize)."""
        members = self.known(member)
        members.update(self.in_flight(member, members))
        members.pop(pod_uid, None)
        return members

    def known(self, member: Gang) -> dict[str, str]:
        """pod uid -> node of the gang's members that are bound (in the state) or assumed (bind)."""
        generation = self._state.claims_generation
        if self._gang_pods[0] != generation:
            by_gang: dict[str, dict[str, str]] = {}
            for pod in self.state_pods():
                if not pod.node_name:
                    continue
                other = gang_of(pod, self.settings)
                if other is not None:
                    by_gang.setdefault(other.key, {})[pod.uid] = pod.node_name
            self._gang_pods = (generation, by_gang)
        members = dict(self._gang_pods[1].get(member.key, {}))
        assumed = self._assumed.pod_nodes()
        if assumed:
            for pod in self._candidates(assumed):
                other = gang_of(pod, self.settings)
                if other is not None and other.key == member.key:
                    members.setdefault(pod.uid, assumed[pod.uid])
        return members

    def in_flight(self, member: Gang, known: Mapping[str, str]) -> dict[str, str]:
        """pod uid -> nominated node of the gang's members not yet bound or assumed (`known`)."""
        return {uid: node for uid, node in self.nominated(member).items() if uid not in known}

    def nominated(self, member: Gang) -> dict[str, str]:
        """pod uid -> node of the gang's unexpired nominations."""
        now = self._clock()
        return {
            uid: node
            for uid, (key, node, until) in self._nominated.items()
            if key == member.key and until > now
        }

    def nominate(self, member: Gang, pod_uid: str, node: str) -> None:
        """Record `node` as where the member's pod is expected; expired ones are dropped."""
        now = self._clock()
        self._nominated.pop(pod_uid, None)
        self._nominated = {uid: entry for uid, entry in self._nominated.items() if entry[2] > now}
        while len(self._nominated) >= NOMINATION_LIMIT:
            self._nominated.pop(next(iter(self._nominated)))
        self._nominated[pod_uid] = (member.key, node, now + NOMINATION_SECONDS)

    def state_pods(self) -> Iterable[Pod]:
        """The state's pods, parsed. Per claims generation, only the pods the state's change log
        names are parsed again (all of them when the log cannot tell): a gang bind changes the
        claims generation, and the next member's prioritize would otherwise parse every pod."""
        generation = self._state.claims_generation
        parsed_at, pods = self._pods
        if parsed_at != generation:
            changed = self._state.changed_since("Pod", parsed_at) if parsed_at >= 0 else None
            if changed is None:
                pods = {(pod.namespace, pod.name): pod for pod in map(parse_pod, self._state.iter("Pod"))}
            else:
                for namespace, name in changed:
                    obj = self._state.get("Pod", name, namespace)
                    if obj is None:
                        pods.pop((namespace, name), None)
                    else:
                        pods[(namespace, name)] = parse_pod(obj)
            self._pods = (generation, pods)
        return pods.values()

    def _candidates(self, assumed: dict[str, str]) -> list[Pod]:
        """Pods behind assumed bindings: from the pods seen in filter, else the state."""
        found = [pod for uid in assumed if (pod := self._seen(uid)) is not None]
        if len(found) < len(assumed):
            found.extend(pod for pod in self.state_pods() if pod.uid in assumed)
        return found

    def blended(
        self, pod: Pod, passed: list[str], scored: list[str], values: np.ndarray, *, nominate: bool = False
    ) -> tuple[list[str], np.ndarray]:
        """Prioritize's scored names and 0..10 (int64, aligned) with the clique term of a gang
        member blended in (`with_term`); unchanged with the gang weight 0 or for other pods."""
        if self.settings.weight <= 0:
            return scored, values
        by_node = self.with_term(
            pod, passed, dict(zip(scored, values.tolist(), strict=True)), nominate=nominate
        )
        return list(by_node), np.fromiter(by_node.values(), dtype=np.int64, count=len(by_node))

    def with_term(
        self, pod: Pod, passed: list[str], by_node: dict[str, int], *, nominate: bool = False
    ) -> dict[str, int]:
        """Prioritize's 0..10 per node with the clique term of a gang member (`weight` > 0);
        `nominate` records the member's top node (prioritize does, explain does not)."""
        member = self.resolve(pod)
        if member is None or not passed:
            return by_node
        uid = pod.uid
        cliques = self.node_domains(member)
        known = self.known(member)
        in_flight = self.in_flight(member, known)
        in_flight.pop(uid, None)
        known.pop(uid, None)
        # A node another member is nominated to is no slot for this one (one member per node);
        # once that member is bound or assumed, filter says whether its node has room.
        taken = set(in_flight.values())
        slots = [name for name in passed if name not in taken]
        terms = clique_scores(member, slots, cliques, [*known.values(), *in_flight.values()])
        if terms is None:
            return by_node
        weight = self.settings.weight
        out = {name: combine(by_node.get(name, 0), terms.get(name, 0.0), weight) for name in passed}
        if nominate and uid and slots:
            self.nominate(member, uid, max(slots, key=lambda name: out[name]))
        return out

    def outside_domain(self, pod: Pod, node_names: list[str]) -> dict[str, str]:
        """Nodes outside a placed gang's domain -> reason: for a PodGroup with a topology
        constraint always, for other gangs with the setting `gang_filter_other_cliques`."""
        if not pod.pod_group_name and not self.settings.filter_other_cliques:
            return {}  # the common pod: no PodGroup, nothing to read
        member = self.resolve(pod)
        if member is None or (member.topology_key is None and not self.settings.filter_other_cliques):
            return {}
        domains = self.node_domains(member)
        group = member.group
        constrained = group is not None and group.topology_key is not None
        # A PodGroup's constraint counts bound and assumed members only: in upstream's pod-group
        # cycle every member is filtered before any binds, and with TopologyAwareWorkloadScheduling
        # once per candidate domain; a nomination from another candidate (or one prioritize never
        # refreshed: one feasible node skips scoring) must not fail this one.
        placed = self.known(member) if constrained else self.members(member, pod.uid)
        placed.pop(pod.uid, None)
        home = home_clique(domains, placed.values())
        if home is None:
            return {}
        if group is not None and group.topology_key is not None:
            return outside_of(node_names, domains, home, lambda d: outside_domain_reason(group, home, d))
        return outside_of(node_names, domains, home, lambda d: other_clique_reason(member, home, d))


def outside_of(
    node_names: Sequence[str], domains: Mapping[str, str], home: str, reason: Callable[[str | None], str]
) -> dict[str, str]:
    """Node -> reason for the nodes whose domain (`domains`; None: none) is not `home`: one text
    per domain value (`reason`), the map built by numpy and C-level maps, not a Python loop per
    node (a PodGroup member's filter asks it of every node of the fleet)."""
    labels = np.array(list(map(domains.get, node_names)), dtype=object)
    outside = labels != home
    if not outside.any():
        return {}
    names = np.array(node_names, dtype=object)[outside].tolist()
    values = labels[outside].tolist()
    texts = {value: reason(value) for value in set(values)}
    return dict(zip(names, map(texts.__getitem__, values), strict=True))
