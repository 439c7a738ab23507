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
    """Every deletable place, outermost first (deleting a whole slice beats deleting its fields).

    Required fields are not deletable themselves, but what they hold is searched too.
    """
    children: list[tuple[str | int, Any]] = []
    deletable: list[str | int] = []
    if isinstance(value, dict):
        children = list(value.items())
        protected = KEEP if prefix == () else REQUIRED
        deletable = [k for k in value if k not in protected]
    elif isinstance(value, list):
        children = list(enumerate(value))
        deletable = [i for i, _ in children]
    for key in deletable:
        yield (*prefix, key)
    for key, child in children:
        if prefix == () and key in ("expected", "features", "node"):
            continue
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


def main(argv: list[str] | None = None) -> int:
    """Shrink a case file on which our allocator and the 1.36 oracle disagree; print the result."""
    import argparse
    import json
    from pathlib import Path

    from tests.oracle import judging
    from tests.oracle.client import Oracle, binary

    parser = argparse.ArgumentParser(prog="python -m tests.oracle.shrinking", description=main.__doc__)
    parser.add_argument("case", type=Path, help="a case (or a regression file with a `case` key)")
    args = parser.parse_args(argv)
    document = json.loads(args.case.read_text())
    case = {k: v for k, v in document.get("case", document).items() if k != "expected"}
    with Oracle(binary("1.36")) as oracle:

        def signature(candidate: dict[str, Any]) -> tuple[str, str]:
            theirs = judging.upstream(oracle.judge(candidate))["status"]
            try:
                mine = judging.ours(candidate)["status"]
            except Exception:  # invalid input our parser refuses: not the same failure
                mine = "exception"
            return theirs, mine

        wanted = signature(case)
        if wanted[0] == wanted[1]:
            print(f"no disagreement to shrink: both {wanted[0]}")
            return 1
        print(json.dumps(shrink(case, lambda c: signature(c) == wanted), indent=1))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
