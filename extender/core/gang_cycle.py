"""Upstream's pod-group cycle, seen from filter: each PodGroup member's node and devices held.

kube-scheduler with the Workload API (1.36 alpha, 1.37 beta; `schedule_one_podgroup.go`)
schedules a PodGroup's members in one cycle: for each candidate placement (with
TopologyAwareWorkloadScheduling one per value of the group's topology key, else one with every
node) it filters, scores and *assumes* every member in turn, reverts, takes the best placement
and, once the gang plugin's Permit admits the group, binds its members. The extender is called
per member and never hears of those assumptions, and in allocator mode DynamicResources is off,
so nothing in the scheduler counts an earlier member's devices either: every member found the
same free tray. Seen with the real scheduler (tests/e2e/test_gang_plugin.py): a 6-member gang
"scheduled" on the 2 free trays of a rack, a 7-member gang on a 6-tray rack, then binds that
admitted part of each gang.

So, for a member of a PodGroup the state has, filter decides the member's node itself and holds
its devices until the member binds:
1. the member's earlier hold is dropped first (a new cycle, or the next placement); if the
   member then fits nowhere, either every node was ruled out by the group's domain (another
   placement of the cycle: the earlier hold is put back) or its domain has no room (the
   scheduler reverts the whole placement: every hold of the group is dropped, so a gang that
   cannot fit holds nothing while it waits);
2. with a topology constraint and no member bound, assumed or held, the group's domain is chosen
   over the whole fleet: the value of the key whose nodes (one member per node, the clique
   term's slots) fit `minCount` most tightly (`gang.fit_terms`: best fit keeps large domains
   whole; ties by name). Nodes of other values fail, so the scheduler's other placements fail
   at their first member. Once a member is held, bound or assumed, `Gangs.outside_domain` keeps
   the rest in its domain;
3. of the nodes that pass, the one prioritize ranks first passes alone (the others fail, naming
   it), and the devices bind would choose there are assumed for the member (its *hold*: claim
   entries and the pod's node in the AssumeCache), so the next member's filter and prioritize
   count them as taken and the member as placed;
4. a hold ends when the member binds (the binder drops it and chooses for real), when the state
   shows the pod bound by someone else (advisory mode: the in-tree plugin) or re-created, or at
   the AssumeCache's TTL (a pod missing from the state may be one the watch has not delivered
   yet, so a deleted member's hold waits for the TTL).
Every two members are placed apart: the later one counted the earlier one's hold. A hold left by
a previous cycle only makes another member's answer stricter, and is replaced when its own
member is filtered again; no hold outlives the TTL.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from itertools import filterfalse
from typing import TYPE_CHECKING, Any

from extender.core.gang import Gang, fit_terms, outside_of
from extender.pods import Pod
from extender.verdicts import FilterVerdict

if TYPE_CHECKING:
    from extender.core.evaluation import PodEvaluation
    from extender.core.placement import Placement


@dataclass(frozen=True, slots=True)
class Hold:
    """One member's held node and devices (claim uid -> the assumed allocation object)."""

    group: str  # the gang key (`gang.Gang.key`)
    namespace: str
    name: str
    node: str
    claims: dict[str, dict[str, Any]]


class CycleHolds:
    """The holds of PodGroup members (see module docstring); placement's worker thread only."""

    def __init__(self, placement: Placement) -> None:
        self._placement = placement
        self._holds: dict[str, Hold] = {}  # pod uid -> its hold

    def __len__(self) -> int:
        return len(self._holds)

    def filter(self, pod: Pod, node_names: list[str]) -> FilterVerdict | None:
        """Filter's answer for a PodGroup member (one node passes, its devices held); None for
        any other pod (the plain answer applies)."""
        if not pod.pod_group_name:
            return None
        placement = self._placement
        member = placement.gangs.resolve(pod)
        if member is None or member.group is None:
            return None  # the PodGroup is not (yet) in the state: the plain answer
        self._prune()
        previous = self._holds.get(pod.uid)
        self.release(pod.uid)
        evaluation = placement.evaluate(pod, node_names)
        answer = placement.filter_verdict(pod, evaluation, node_names)
        outside = self._outside_chosen_domain(pod, member, answer.passed) if answer.passed else {}
        passed = list(filterfalse(outside.__contains__, answer.passed))
        failed = {**answer.failed, **outside}
        if passed and evaluation.claims.pending:
            top = self._hold_one(member, pod, evaluation, passed)
            others = dict.fromkeys(passed, self._elsewhere(pod, top))  # one text for every other node
            del others[top]
            failed.update(others)
            passed = [top]
        elif not passed:
            ruled_out = set(outside) | set(placement.gangs.outside_domain(pod, node_names))
            if not answer.error and not ruled_out.issuperset(node_names):
                self._release_group(member.key)  # no room in its domain: the scheduler reverts all
            elif previous is not None:  # another placement's nodes, or no answer: the hold stands
                self._restore(pod.uid, previous)
        unresolvable, error = answer.unresolvable, answer.error
        return FilterVerdict(passed=passed, failed=failed, unresolvable=unresolvable, error=error)

    def _restore(self, pod_uid: str, hold: Hold) -> None:
        assumed = self._placement.assumed
        for claim_uid, allocation in hold.claims.items():
            assumed.assume(claim_uid, allocation, pod_uid=pod_uid)
        assumed.assume_pod(pod_uid, hold.node)
        self._holds[pod_uid] = hold

    def _release_group(self, group_key: str) -> None:
        for uid in [uid for uid, hold in self._holds.items() if hold.group == group_key]:
            self.release(uid)

    def release(self, pod_uid: str) -> None:
        """Drop the pod's hold, if any (its bind chooses for real; it is filtered again)."""
        hold = self._holds.pop(pod_uid, None)
        if hold is None:
            return
        assumed = self._placement.assumed
        for claim_uid, allocation in hold.claims.items():
            if assumed.allocation_of(claim_uid) is allocation:  # never another writer's entry
                assumed.forget(claim_uid)
        if assumed.pod_nodes().get(pod_uid) == hold.node:
            assumed.forget_pod(pod_uid)

    def _prune(self) -> None:
        """Drop the holds of members the state shows bound or replaced, and expired ones."""
        if not self._holds:
            return
        placed = self._placement.assumed.pod_nodes()
        state = self._placement.state
        for uid, hold in list(self._holds.items()):
            obj = state.get("Pod", hold.name, hold.namespace)
            if obj is None:
                continue  # not watched yet, or deleted: the watch cannot tell, the TTL decides
            replaced = (obj.get("metadata") or {}).get("uid") != uid
            if replaced or (obj.get("spec") or {}).get("nodeName"):
                self.release(uid)
            elif uid not in placed:  # the TTL took its entries
                del self._holds[uid]

    def _outside_chosen_domain(self, pod: Pod, member: Gang, passed: list[str]) -> dict[str, str]:
        """Passed nodes outside the domain chosen for a topology-constrained group with nothing
        placed yet -> reason (step 2 of the module docstring)."""
        group = member.group
        key = member.topology_key
        if group is None or key is None or not member.size:
            return {}
        gangs = self._placement.gangs
        if any(uid != pod.uid for uid in gangs.known(member)):
            return {}  # a member is bound, assumed or held: its domain decides (Gangs.outside_domain)
        chosen = self._chosen_domain(pod, member)
        if chosen is None:
            return {}

        def reason(domain: str | None) -> str:
            where = f"{key}={domain}" if domain is not None else f"no {key} label"
            return (
                f"PodGroup {group.ref} requires all its pods in one {key}; the extender places "
                f"it in {key}={chosen}, where its {member.size} pods fit most tightly (this "
                f"node has {where})"
            )

        return outside_of(passed, gangs.node_domains(member), chosen, reason)

    def _chosen_domain(self, pod: Pod, member: Gang) -> str | None:
        """The value of the key whose nodes fit the group most tightly, over the whole fleet."""
        placement = self._placement
        everywhere = placement.index().node_names
        evaluation = placement.evaluate(pod, everywhere)
        if evaluation.error:
            return None
        domains = placement.gangs.node_domains(member)
        passed = evaluation.verdicts.passed_among(everywhere)
        slots = Counter(filter(None, map(domains.get, passed)))
        terms = fit_terms(slots, member.size)
        best = [domain for domain, term in terms.items() if term == 1.0]
        return best[0] if best else None

    def _hold_one(self, member: Gang, pod: Pod, evaluation: PodEvaluation, passed: list[str]) -> str:
        """The passed node prioritize ranks first, with the devices bind would choose there held."""
        placement = self._placement
        scored, values = placement.priority_arrays(pod, evaluation, passed)
        ranked = dict(zip(scored, values.tolist(), strict=True))
        top = max(passed, key=lambda name: (ranked.get(name, 0), name))
        allocations = placement.choose_allocations(evaluation, top)
        if allocations is None:
            return top  # the node cannot hold them after all (cannot happen for a passed node): unheld
        claims: dict[str, dict[str, Any]] = {}
        for claim, chosen in zip(evaluation.claims.pending, allocations, strict=True):
            placement.assumed.assume(claim.uid, chosen.allocation, pod_uid=pod.uid)
            claims[claim.uid] = chosen.allocation
        placement.assumed.assume_pod(pod.uid, top)
        self._holds[pod.uid] = Hold(member.key, pod.namespace, pod.name, top, claims)
        return top

    @staticmethod
    def _elsewhere(pod: Pod, top: str) -> str:
        return (
            f"PodGroup {pod.namespace}/{pod.pod_group_name}: this cycle places pod {pod.ref} on node "
            f"{top}, where the extender holds its devices until it binds (one node per member, so "
            "members never count the same devices)"
        )
