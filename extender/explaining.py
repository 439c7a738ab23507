"""`dra-extender explain`: why a pod can or cannot go to each node, offline.

Runs the same placement code as /filter against a state (files or the embedded sample) and
prints, per node, the verdict, the reason and, for nodes that pass, the topology score with
its breakdown (locality, fragmentation, packing, preference), the 0..10 priority /prioritize
would return, and the devices bind would allocate.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from extender.allocator.features import Features
from extender.cluster.state import ClusterState
from extender.core.assumed import AssumeCache
from extender.core.placement import Placement
from extender.core.reasons import PASSED
from extender.index.topology import TopologySettings
from extender.objects import Obj
from extender.pods import parse_pod
from extender.validation import pod_problem


def load_pods(path: Path) -> list[Obj]:
    """Pods from a YAML/JSON file (one or several documents, or a List).

    Raises:
        ValueError: the file cannot be read or parsed, holds no Pod, or a Pod is malformed
            (the message names file, document, item and field, as the state loader does).
    """
    try:
        documents = list(yaml.safe_load_all(path.read_text()))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: cannot read pod: {' '.join(str(exc).split())}") from exc
    pods: list[Obj] = []
    for number, document in enumerate(documents):
        if document is None:
            continue
        label = f"{path}: document {number}"
        if not isinstance(document, dict):
            raise ValueError(f"{label}: must be an object, got {type(document).__name__}")
        if "items" in document:
            items = document["items"]
            if not isinstance(items, list):
                raise ValueError(f"{label}: items: must be a list, got {type(items).__name__}")
            labelled = [(f"{label} item {i}", item) for i, item in enumerate(items)]
        else:
            labelled = [(label, document)]
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
        raise ValueError(f"{path}: no Pod object found")
    return pods


def explain(
    state: ClusterState,
    pod: Obj,
    *,
    features: Features,
    nodes: list[str] | None = None,
    topology: TopologySettings | None = None,
) -> str:
    """A human-readable report of the pod (the object, parsed here) against the given nodes
    (default: all nodes)."""
    record = parse_pod(pod)
    placement = Placement(state, features=features, assumed=AssumeCache(), topology=topology)
    index = placement.index()
    names = nodes or list(index.node_names)
    evaluation = placement.evaluate(record, names)
    lines = [f"pod {record.namespace}/{record.name or '?'}"]
    if evaluation.error:
        lines.append(f"  error: {evaluation.error}")
        return "\n".join(lines)
    claims = evaluation.claims
    if claims.allocated:
        lines.append("  already allocated: " + ", ".join(c.ref for c in claims.allocated))
    if claims.pending:
        lines.append("  to allocate: " + ", ".join(c.ref for c in claims.pending))
    if not claims.uses_claims:
        lines.append("  uses no ResourceClaims: every node passes")
    priorities = {h.host: h.score for h in placement.prioritize(record, names)}
    scores = placement.scores(evaluation, [n for n in names if evaluation.verdicts[n].status == PASSED])
    passed = 0
    for name in names:
        verdict = evaluation.verdicts[name]
        lines.append(
            f"  {name}: {verdict.status.upper()}" + (f": {verdict.reason}" if verdict.reason else "")
        )
        if verdict.status != PASSED:
            continue
        passed += 1
        score = scores.get(name)
        if score is not None:
            lines.append(
                f"      priority {priorities.get(name, 0)}/10, score {score.score:.3f} = "
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
        for allocation in placement.choose_allocations(evaluation, name) or []:
            devices = ", ".join(f"{r.request_name}={r.device.id}" for r in allocation.devices)
            lines.append(f"      {allocation.claim.ref}: {devices}")
    lines.append(f"  {passed} of {len(names)} node(s) pass")
    return "\n".join(lines)


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
    parser.add_argument("--feature-gates", default="", help="Name=bool,... (Kubernetes 1.36 defaults)")
    return parser
