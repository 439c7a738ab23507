"""The one way the extender reads YAML: safe, bounded alias expansion, timestamps kept as text.

Every YAML input goes through here: `--state` files (`extender.cluster.loading`), the `--config`
settings file (`extender.settings`), pods to explain (`extender.explaining`, the CLI and the
dashboard's `POST /ui/api/explain`) and the embedded sample.

Aliases (issue 30 item 4). PyYAML's composer does not copy an aliased node: `*a` is the very
node `&a` named, so a "billion laughs" document (`a: &a [x, x, ...]`, `b: &b [*a, *a, ...]`,
eight levels of nine) parses in a millisecond into a graph whose expansion has 43 million nodes.
Whatever walks the decoded object afterwards (validation, the explain's depth check, JSON
encoding) walks the expansion: the dashboard's explain ran for minutes. So before a document is
constructed, its node graph's expanded size is counted without expanding it (each distinct node
once, its expanded size remembered) and a document whose aliases add more than
`max(MAX_ALIAS_NODES, nodes it writes)` nodes is refused (`AliasExpansionError`): what is
accepted is at most about twice what was written, plus a little, so the work after parsing stays
linear in the input. A node that contains an alias of itself (recursive YAML; JSON and
Kubernetes objects cannot be recursive) is refused as well. Real Kubernetes YAML (kubectl dumps,
Helm output) has no aliases; hand-written files that share a block through an anchor stay well
inside the bound.

Nesting (`max_nesting`, the explain's pods): PyYAML's scanner takes time quadratic in the depth
of flow collections (`[[[[...`: 2.5 s at 2,000 levels) and its composer recurses, so the depth is
checked in the scanner where a level opens (`TooDeep`). That needs the pure-Python scanner;
without a nesting bound libyaml's C loader is used where PyYAML has it (files are read about
four times faster).

Timestamps stay strings, as they are in the API's JSON (`creationTimestamp: 2025-11-20T09:14:03Z`
would otherwise become a `datetime`, which the validation and the extended-resource class
choice do not read as a time).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Any

import yaml

__all__ = ["MAX_ALIAS_NODES", "AliasExpansionError", "TooDeep", "load", "load_all"]

#: Nodes that aliases may add to one document beyond what it writes (see the module docstring).
MAX_ALIAS_NODES = 10_000

Source = str | bytes | IO[str] | IO[bytes]
RECURSIVE = "an alias refers to a node that contains it: recursive YAML is not accepted"


class AliasExpansionError(yaml.YAMLError):
    """A document whose aliases expand it beyond the bound, or refer to a node containing them.

    A `yaml.YAMLError`, so a caller that reports invalid YAML reports this too; the message says
    what was refused and why.
    """


class TooDeep(Exception):
    """The YAML being read nests deeper than the `max_nesting` it was read with."""


def _expanded_size(root: yaml.Node, cap: int) -> tuple[int, int]:
    """(distinct nodes in the graph, nodes of its expansion, counting stops past `cap`).

    Iterative (a document nested deeper than the stack is counted too); each distinct node's
    expanded size is computed once and re-used wherever an alias names it.

    Raises:
        AliasExpansionError: a node contains an alias of itself.
    """
    size: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        children = _children(node)
        if children_done:
            open_nodes.discard(key)
            size[key] = min(cap, 1 + sum(size[id(child)] for child in children))
            continue
        if key in size:
            continue
        open_nodes.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in open_nodes:  # an ancestor: the node contains an alias of itself
                raise AliasExpansionError(f"{_mark(child)}: {RECURSIVE}")
            if id(child) not in size:
                stack.append((child, False))
    return len(size), size[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _mark(node: yaml.Node) -> str:
    mark = node.start_mark
    return "the anchor" if mark is None else f"the anchor at line {mark.line + 1}, column {mark.column + 1}"


def check_aliases(root: yaml.Node) -> None:
    """Refuse a composed document whose aliases add more than the bound (module docstring).

    Raises:
        AliasExpansionError: what was found, in words a user can act on.
    """
    written, _ = _expanded_size(root, cap=1)  # distinct nodes only: the cap keeps sizes tiny
    allowed = max(MAX_ALIAS_NODES, written)
    _, expanded = _expanded_size(root, cap=written + allowed + 1)
    if expanded - written > allowed:
        raise AliasExpansionError(
            f"aliases expand this document from {written:,} written nodes to more than "
            f"{written + allowed:,}; at most {allowed:,} nodes may come from aliases "
            f"(max({MAX_ALIAS_NODES:,}, the nodes written)): refused as a possible alias bomb"
        )


class _AliasCheck:
    """Mixed into a loader: every document is checked (`check_aliases`) before it is constructed."""

    def construct_document(self, node: yaml.Node) -> Any:
        check_aliases(node)
        return super().construct_document(node)  # type: ignore[misc]


# The base is chosen at run time (libyaml's C loader when PyYAML was built with it), which
# mypy cannot follow: hence the ignore.
class SafeLoader(_AliasCheck, getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """Safe loader (C when available) with the alias bound; timestamps stay text."""


class NestingLoader(_AliasCheck, yaml.SafeLoader):
    """Pure-Python safe loader with the alias bound that stops at `max_nesting` levels as it scans.

    PyYAML's scanner keeps a possible simple key per open flow collection and walks them all at
    every token, so `[[[[...` costs time quadratic in its depth before the recursive composer
    fails with RecursionError; block nesting (`- - - ...`) hits the recursion limit too. The
    scanner knows the real depth (brackets in strings do not count), so the depth is checked
    where a level opens.
    """

    max_nesting = 100

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:
        if self.flow_level >= self.max_nesting:
            raise TooDeep
        super().fetch_flow_collection_start(TokenClass)

    def add_indent(self, column: int) -> bool:
        if len(self.indents) >= self.max_nesting:
            raise TooDeep
        return bool(super().add_indent(column))


def _timestamp_as_text(loader: NestingLoader, node: yaml.Node) -> str:
    return str(loader.construct_scalar(node))  # type: ignore[arg-type]  # a timestamp is a scalar


SafeLoader.add_constructor("tag:yaml.org,2002:timestamp", _timestamp_as_text)
NestingLoader.add_constructor("tag:yaml.org,2002:timestamp", _timestamp_as_text)


def load_all(stream: Source, *, max_nesting: int | None = None) -> Iterator[Any]:
    """The documents of `stream`, one at a time (an error surfaces with the document it is in).

    Raises:
        yaml.YAMLError: not YAML (`AliasExpansionError` for a refused alias expansion).
        TooDeep: with `max_nesting`, a document nests deeper than that.
        RecursionError: nesting too deep for the composer (only without `max_nesting`).
    """
    loader: Any
    if max_nesting is None:
        loader = SafeLoader(stream)
    else:
        loader = NestingLoader(stream)
        loader.max_nesting = max_nesting
    try:
        while loader.check_data():
            yield loader.get_data()
    finally:
        loader.dispose()


def load(stream: Source) -> Any:
    """The single document of `stream` (None when empty); raises as `load_all`, and
    `yaml.YAMLError` when there is more than one document."""
    loader = SafeLoader(stream)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
