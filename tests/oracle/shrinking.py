"""Shrink a scenario on which our allocator and the oracle disagree, by deleting JSON.

Hypothesis shrinks the *draws* of a generator; a case found elsewhere (a fuzz run, a bug report)
has no draws, so this works on the JSON itself: try deleting every list element and every
mapping key, keep a deletion when the case still fails the same way, and repeat until nothing
can go. The result is what a person reads first, and what `tests/data/oracle-regressions/`
keeps.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

Path = tuple[str | int, ...]
KEEP = frozenset({"name", "expected", "features", "applyDefaults", "node", "implementation"})
# Fields without which an object is one the API server would refuse: shrinking into invalid input
# finds a different disagreement (or none worth keeping), so these are never deleted. An element
# of a list, or a whole entry of a map (an attribute, a counter), may still go.
REQUIRED = frozenset(
    {
        "metadata",
        "name",
        "spec",
        "driver",
        "pool",
        "generation",
        "resourceSliceCount",
        "nodeName",
        "value",
        "string",
        "int",
        "bool",
        "version",
        "strings",
        "ints",
        "bools",
        "versions",
        "deviceClassName",
        "counterSet",
        "expression",
        "key",
        "effect",
        "devices",
        "requests",
    }
)


def _paths(value: Any, prefix: Path = ()) -> Iterator[Path]:
    """Every deletable place, outermost first (deleting a whole slice beats deleting its fields)."""
    children: list[tuple[str | int, Any]] = []
    if isinstance(value, dict):
        children = [(k, v) for k, v in value.items() if k not in (KEEP if prefix == () else REQUIRED)]
    elif isinstance(value, list):
        children = list(enumerate(value))
    for key, _ in children:
        yield (*prefix, key)
    for key, child in children:
        yield from _paths(child, (*prefix, key))


def _without(value: Any, path: Path) -> Any:
    out = copy.deepcopy(value)
    parent = out
    for key in path[:-1]:
        parent = parent[key]
    del parent[path[-1]]
    return out


def shrink(
    case: dict[str, Any], still_fails: Callable[[dict[str, Any]], bool], *, max_checks: int = 5000
) -> dict[str, Any]:
    """The smallest case (by deletions) for which `still_fails` holds; `case` must fail."""
    checks = 0
    progress = True
    while progress and checks < max_checks:
        progress = False
        index = 0
        while checks < max_checks:
            paths = list(_paths(case))
            if index >= len(paths):
                break
            candidate = _without(case, paths[index])
            checks += 1
            if still_fails(candidate):
                case = candidate
                progress = True
            else:
                index += 1
    return case
