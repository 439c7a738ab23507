"""Node selection: which nodes a slice or device is available on (core v1 NodeSelector rules)."""

from __future__ import annotations

from typing import Any

Node = dict[str, Any]


def _requirement_matches(requirement: dict[str, Any], values: dict[str, str]) -> bool:
    key = requirement.get("key", "")
    operator = requirement.get("operator", "")
    wanted = requirement.get("values") or []
    present = key in values
    if operator == "In":
        return present and values[key] in wanted
    if operator == "NotIn":
        return not present or values[key] not in wanted
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt"):
        if not present or len(wanted) != 1:
            return False
        try:
            have, limit = int(values[key]), int(wanted[0])
        except ValueError:
            return False
        return have > limit if operator == "Gt" else have < limit
    return False


def _term_matches(term: dict[str, Any], labels: dict[str, str], fields: dict[str, str]) -> bool:
    expressions = term.get("matchExpressions") or []
    match_fields = term.get("matchFields") or []
    if not expressions and not match_fields:
        # An empty term matches no objects (core v1 NodeSelectorTerm).
        return False
    return all(_requirement_matches(r, labels) for r in expressions) and all(
        _requirement_matches(r, fields) for r in match_fields
    )


def selector_matches(node: Node, selector: dict[str, Any]) -> bool:
    """True if the node satisfies the NodeSelector (terms are ORed, requirements ANDed)."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    fields = {"metadata.name": meta.get("name", "")}
    return any(_term_matches(t, labels, fields) for t in selector.get("nodeSelectorTerms") or [])


def node_matches(
    node: Node | None, *, node_name: str | None, all_nodes: bool, node_selector: dict[str, Any] | None
) -> bool:
    """Upstream `NodeMatches`: nodeName, then allNodes, then the selector; nothing set -> False."""
    if node_name:
        return node is not None and (node.get("metadata") or {}).get("name") == node_name
    if all_nodes:
        return True
    if node_selector is not None:
        return node is not None and selector_matches(node, node_selector)
    return False
