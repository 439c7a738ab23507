"""`dra-extender explain`: why a pod can or cannot go to each node.

Runs the placement's own steps, the ones /filter and /prioritize run, and prints, per node, the
verdict filter would give (gang clique rule included), the reason and, for nodes that pass, the
topology score with its breakdown (locality, fragmentation, packing, preference), the 0..10
priority /prioritize would return when kube-scheduler sends it the nodes that passed, and the
devices bind would allocate. A pod asking for extended resources a DeviceClass maps is split per
kind of node exactly as /filter and /prioritize split it (`Placement.extended_parts`,
`merged_verdict`); the report adds the claim the scheduler generates and the nodes whose device
plugin serves the resource.

Two callers:
- the CLI builds a Placement over a state file and explains against it (`explain`);
- the dashboard explains against the *live* placement, on its worker thread, in small steps
  (`Explanation.step`): the worker is the thread every verb runs on, so one long explain would
  hold up the scheduler's calls. Between steps the worker runs whatever verb work is queued.
  The explanation writes nothing a verb reads except what a filter would also leave (selector
  masks, index columns): its evaluation is its own, never in the placement's cache, and its pod
  is not remembered for bind.

Pod text is parsed by `extender.yamlsafe` with a nesting limit that the scanner checks as it
reads: PyYAML's scanner takes time quadratic in the depth of flow collections (`[[[[...`: 2.5 s
at 2,000 levels) and its composer recurses, so a deeply nested paste would stall or raise
RecursionError; and aliases may not expand a paste much beyond what it writes (a YAML alias bomb
stalled the dashboard's explain for minutes: issue 30).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from extender import yamlsafe
from extender.allocator.features import Features
from extender.allocator.results import ClaimAllocation
from extender.cluster.state import ClusterState
from extender.core import extended
from extender.core.assumed import AssumeCache
from extender.core.evaluation import PodEvaluation
from extender.core.extended import merged_verdict
from extender.core.gang import GangSettings
from extender.core.placement import Placement
from extender.core.scoring import ScoreBook
from extender.core.view import Generation
from extender.index.topology import TopologySettings
from extender.objects import Obj
from extender.pods import Pod, parse_pod
from extender.validation import pod_problem
from extender.verdicts import FilterVerdict

#: Deepest nesting of objects and lists accepted in a pod to explain. Real Pods are about 10
#: levels deep (affinity terms, managedFields); the limit only keeps parsing and the checks that
#: walk the object cheap.
MAX_NESTING = 100
#: Nodes decided, and nodes scored, per piece of work (the bind choice goes node by node: it
#: is the slowest per node, about 0.5 ms on the mixed fleet).
DECIDE_GROUP = 8
SCORE_GROUP = 4
#: Times an explanation starts over because the cluster state changed under it, before it gives up.
MAX_RESTARTS = 3


class StateChanging(Exception):
    """The cluster's devices changed under an explanation more than MAX_RESTARTS times."""


def parse_pod_documents(text: str, label: str) -> list[Any]:
    """The YAML/JSON documents of `text`, refusing nesting deeper than MAX_NESTING and aliases
    that would expand it beyond `extender.yamlsafe`'s bound.

    Raises:
        ValueError: not YAML or JSON, nested too deeply, or an alias bomb (the message starts
            with `label`).
    """
    too_deep = f"{label}: nested deeper than {MAX_NESTING} levels (a Pod is about 10 levels deep)"
    try:
        documents = list(yamlsafe.load_all(text, max_nesting=MAX_NESTING))
    except yamlsafe.AliasExpansionError as exc:
        raise ValueError(f"{label}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{label}: not YAML or JSON: {' '.join(str(exc).split())}") from None
    except (yamlsafe.TooDeep, RecursionError):
        raise ValueError(too_deep) from None
    if any(_depth(document) > MAX_NESTING for document in documents):  # flow inside block levels
        raise ValueError(too_deep)
    return documents


def _depth(value: Any) -> int:
    """Nesting depth of decoded YAML/JSON (iterative, stops past MAX_NESTING)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if depth > MAX_NESTING:
                return depth
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest


def pods_of(documents: list[Any], label: str) -> list[Obj]:
    """The Pods of parsed documents (one or several, or a List), each checked like /filter's.

    Raises:
        ValueError: a document or item is not an object, a Pod is malformed (the message names
            `label`, document, item and field, as the state loader does), or there is no Pod.
    """
    pods: list[Obj] = []
    for number, document in enumerate(documents):
        if document is None:
            continue
        where_doc = f"{label}: document {number}"
        if not isinstance(document, dict):
            raise ValueError(f"{where_doc}: must be an object, got {type(document).__name__}")
        if "items" in document:
            items = document["items"]
            if not isinstance(items, list):
                raise ValueError(f"{where_doc}: items: must be a list, got {type(items).__name__}")
            labelled = [(f"{where_doc} item {i}", item) for i, item in enumerate(items)]
        else:
            labelled = [(where_doc, document)]
        for where, item in labelled:
            if not isinstance(item, dict):
                raise ValueError(f"{where}: must be an object, got {type(item).__name__}")
            if item.get("kind", "Pod") != "Pod":
                continue
            problem = pod_problem(item)
            if problem:
                raise ValueError(f"{where}: {problem}")
            pods.append(item)
    if not pods:
        raise ValueError(f"{label}: no Pod object found")
    return pods


def load_pods(path: Path) -> list[Obj]:
    """Pods from a YAML/JSON file (one or several documents, or a List).

    Raises:
        ValueError: the file cannot be read or parsed, is nested too deeply, holds no Pod, or a
            Pod is malformed (the message names file, document, item and field).
    """
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read pod: {' '.join(str(exc).split())}") from exc
    return pods_of(parse_pod_documents(text, str(path)), str(path))


class Explanation:
    """One pod explained against a placement, in steps (see the module docstring).

    Lifecycle: made and stepped on the placement's worker thread (or, for the CLI, on the
    caller's thread with a placement of its own); `step` until it returns True, then read
    `report`. A change of the placement's generation between steps starts it over (at most
    MAX_RESTARTS times), so the report describes one generation. After that, a change of claims or
    bind choices (a busy cluster makes them all the time) is carried over with a note in the
    report, while a change of the devices (the index rows move) raises `StateChanging`.
    """

    def __init__(
        self,
        placement: Placement,
        pod: Obj,
        *,
        nodes: list[str] | None = None,
        time_limit: float | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        """`time_limit`: seconds of `step` work after which the report is a timeout error
        (the dashboard passes filter_timeout_seconds, the deadline a filter of the pod has);
        None: no limit beyond the placement's search deadline per group of nodes."""
        self._placement = placement
        self._record = parse_pod(pod)
        self._nodes = nodes
        self._time_limit = time_limit
        self._clock = clock
        self._restarts = 0
        self._outdated = False  # carried on over a claims change (see `step`)
        self._worked = 0.0  # seconds spent in `step`, held to filter_timeout_seconds
        self.report = ""
        self._generation: Generation = placement.generation()
        self._work = self._steps()

    def step(self, seconds: float) -> bool:
        """Work for about `seconds` (at least one group of nodes); True once `report` is ready.

        Raises:
            StateChanging: the cluster's devices kept changing between steps.
        """
        if self.report:
            return True
        now = self._placement.generation()
        if now != self._generation:
            if self._restarts < MAX_RESTARTS:
                self._restarts += 1
                self._work = self._steps()
            elif now[0] != self._generation[0]:  # the devices changed: index rows moved
                raise StateChanging(
                    f"the cluster's devices changed while explaining, after {MAX_RESTARTS} restarts; "
                    "try again"
                )
            else:  # claims or bind choices changed, as they do all the time in a busy cluster
                self._outdated = True
            self._generation = now
        started = self._clock()
        limit = self._time_limit
        try:
            for _ in self._work:
                elapsed = self._clock() - started
                if limit is not None and self._worked + elapsed > limit:
                    self.report = self._timed_out(limit)
                    break
                if elapsed >= seconds:
                    break
        finally:
            self._worked += self._clock() - started
        return bool(self.report)

    def _timed_out(self, limit: float) -> str:
        pod = self._record
        return "\n".join(
            [
                f"pod {pod.namespace}/{pod.name or '?'}",
                f"  error: explain did not finish within {limit:g} s (filter_timeout_seconds) of work; "
                "a filter of this pod would run into the same deadline",
            ]
        )

    def _steps(self) -> Iterator[None]:
        """The work, yielding between groups of nodes; sets `report` at the end.

        An extended-resource pod is split as /filter and /prioritize split it
        (`Placement.extended_parts`): one variant per kind of node, each with its own claim and
        evaluation; the verdicts are merged as /filter merges them and each variant's nodes are
        ranked among themselves, as /prioritize ranks them."""
        placement, pod = self._placement, self._record
        names = list(self._nodes or placement.index().node_names)
        split = placement.extended_parts(pod, names)
        parts = [
            _Part(variant, group, placement.new_evaluation(variant))  # its own: never in the cache
            for variant, group in (split.parts if split is not None else [(pod, names)])
        ]
        error = ""
        for part in parts:
            for group in _groups(part.names, DECIDE_GROUP):
                placement.decide(part.evaluation, group)
                yield
                if part.evaluation.error:
                    break
            error = part.evaluation.error
            if error:  # filter answers the first variant's error, in the same order
                break
        placement.view.freeze_new_caches()
        if error:
            verdict = FilterVerdict(error=error)
        else:
            verdicts = [placement.filter_verdict(p.pod, p.evaluation, p.names) for p in parts]
            verdict = verdicts[0] if split is None else merged_verdict(verdicts, split, names)
        part_of: dict[str, _Part] = {}
        for part in parts:
            for name in part.names:
                part_of.setdefault(name, part)
        for part in parts:
            passed = [name for name in verdict.passed if part_of.get(name) is part]
            for group in _groups(passed, SCORE_GROUP):
                placement.scores(part.evaluation, group)
                yield
            part.priorities = placement.priorities(part.pod, part.evaluation, passed)
            part.scores = placement.scores(part.evaluation, passed)
            for name in passed:
                part.devices[name] = placement.choose_allocations(part.evaluation, name) or []
                yield
        needs = extended.needs_of(pod, extended.class_map(placement.state)) if split is not None else None
        report = _report(pod, verdict, parts, part_of, names, needs)
        if self._outdated:
            report += (
                "\n  note: claims changed while explaining (more than "
                f"{MAX_RESTARTS} times); verdicts of the first nodes may be from before the change"
            )
        self.report = report


@dataclass(slots=True)
class _Part:
    """One variant of the pod (the pod itself unless it asks for extended resources) and what
    explain found for its nodes."""

    pod: Pod
    names: list[str]
    evaluation: PodEvaluation
    priorities: dict[str, int] = field(default_factory=dict)
    scores: ScoreBook | None = None
    devices: dict[str, list[ClaimAllocation]] = field(default_factory=dict)

    def plugin_served(self, needs: extended.Needs | None) -> list[str]:
        """The pod's extended resources this variant leaves to the nodes' device plugins."""
        if needs is None:
            return []
        served = self.pod.extended.resources if self.pod.extended is not None else ()
        return [name for name in sorted(needs.totals) if name not in served]


def _groups(names: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(names), size):
        yield names[start : start + size]


def _report(
    pod: Pod,
    verdict: FilterVerdict,
    parts: list[_Part],
    part_of: dict[str, _Part],
    names: list[str],
    needs: extended.Needs | None,
) -> str:
    lines = [f"pod {pod.namespace}/{pod.name or '?'}"]
    if verdict.error:
        lines.append(f"  error: {verdict.error}")
        return "\n".join(lines)
    if needs is not None:
        lines.extend(_extended_lines(needs, parts))
    allocated: dict[str, None] = {}
    pending: dict[str, None] = {}
    for part in parts:
        claims = part.evaluation.claims
        allocated.update(dict.fromkeys(c.ref for c in claims.allocated))
        made = part.pod.extended.source if part.pod.extended is not None else None
        pending.update(dict.fromkeys(c.ref for c in claims.pending if c.source is not made))
    if allocated:
        lines.append("  already allocated: " + ", ".join(allocated))
    if pending:
        lines.append("  to allocate: " + ", ".join(pending))
    if needs is None and not any(p.evaluation.claims.uses_claims for p in parts):
        lines.append("  uses no ResourceClaims: every node passes")
    passed = set(verdict.passed)
    for name in names:
        if name in verdict.failed:
            lines.append(f"  {name}: FAILED: {verdict.failed[name]}")
            continue
        if name not in passed:
            lines.append(f"  {name}: UNRESOLVABLE: {verdict.unresolvable.get(name, '')}")
            continue
        lines.append(f"  {name}: PASSED")
        part = part_of[name]
        score = part.scores.get(name) if part.scores is not None else None
        priority = part.priorities.get(name, 0)
        if score is not None:
            lines.append(
                f"      priority {priority}/10, score {score.score:.3f} = "
                f"locality {score.locality:.3f}, fragmentation {score.fragmentation:.3f}, "
                f"packing {score.packing:.3f}, preference {score.preference:.3f}"
                + (
                    f", partition packing {score.partition_packing:.3f}, "
                    f"partition headroom {score.partition_headroom:.3f}"
                    if score.partition_packing is not None and score.partition_headroom is not None
                    else ""
                )
                + f" (device choice: {score.method})"
            )
        plugin = part.plugin_served(needs)
        if plugin:
            lines.append(
                f"      {', '.join(plugin)}: the node's device plugin (status.allocatable); "
                "left to kube-scheduler's NodeResourcesFit"
                + ("" if score is not None else f"; priority {priority}/10")
            )
        for allocation in part.devices.get(name, []):
            devices = ", ".join(f"{r.request_name}={r.device.id}" for r in allocation.devices)
            lines.append(f"      {allocation.claim.ref}: {devices}")
    lines.append(f"  {len(passed)} of {len(names)} node(s) pass")
    return "\n".join(lines)


def _extended_lines(needs: extended.Needs, parts: list[_Part]) -> list[str]:
    """What the pod asks for in extended resources and, per kind of node, the claim the
    scheduler would generate or the device plugin left to serve it."""
    asked = ", ".join(
        f"{name}: {count} ("
        + (f"DeviceClass {needs.classes[name]}" if name in needs.classes else "no DeviceClass maps it")
        + ")"
        for name, count in sorted(needs.totals.items())
    )
    lines = [f"  extended resources: {asked}"] if asked else []
    for part in parts:
        claim = part.pod.extended
        count = len(part.names)
        if claim is None:
            served = ", ".join(sorted(needs.totals))
            lines.append(
                f"  on {count} node(s) a device plugin advertises {served}: no claim, "
                "left to kube-scheduler's NodeResourcesFit"
            )
            continue
        meta = claim.source.get("metadata") or {}
        requests = "; ".join(
            f"request {request}: {wanted} of class {class_name}"
            for request, class_name, wanted in claim.requests
        )
        mappings = ", ".join(
            f"{m.get('containerName', '')} {m.get('resourceName', '')} -> {m.get('requestName', '')}"
            for m in claim.mappings
        )
        lines.append(
            f"  on {count} node(s) DRA serves {', '.join(claim.resources)}: claim "
            f"{meta.get('namespace', 'default')}/{meta.get('name', '')}, {requests}; "
            f"bind creates it as {meta.get('generateName', '')}<random> (containers: {mappings})"
        )
    return lines


def explain(
    state: ClusterState,
    pod: Obj,
    *,
    features: Features,
    nodes: list[str] | None = None,
    topology: TopologySettings | None = None,
    gang_settings: GangSettings | None = None,
    filter_timeout_seconds: float = 10.0,
) -> str:
    """A human-readable report of the pod (the object, parsed here) against the given nodes
    (default: all nodes), with a placement of its own over `state` and these settings."""
    placement = Placement(
        state,
        features=features,
        assumed=AssumeCache(),
        topology=topology,
        gang_settings=gang_settings,
        filter_timeout_seconds=filter_timeout_seconds,
    )
    explanation = Explanation(placement, pod, nodes=nodes)
    while not explanation.step(float("inf")):
        pass
    return explanation.report


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `explain` on the CLI's subparsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "explain",
        help="explain, per node, whether a pod's claims can be allocated and which devices",
        description="Evaluate a pod against a cluster state exactly as /filter does and print why.",
    )
    parser.add_argument(
        "--state",
        action="append",
        type=Path,
        default=[],
        help="state file or directory (repeatable; default: the embedded sample)",
    )
    parser.add_argument(
        "--pod",
        type=Path,
        required=True,
        help="YAML/JSON file with the Pod (several pods: each is explained)",
    )
    parser.add_argument(
        "--node", action="append", default=[], help="only these nodes (repeatable; default: all)"
    )
    parser.add_argument("--feature-gates", default="", help="Name=bool,... (defaults: the version's)")
    parser.add_argument("--kubernetes-version", default="1.36", help="1.36 or 1.37: whose allocator rules")
    return parser
