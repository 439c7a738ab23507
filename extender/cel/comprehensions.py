"""Evaluation of CEL's comprehension macros, with cel-go's error semantics.

`all` and `exists` absorb errors the way `&&` and `||` do: an element for which the predicate
errs does not matter if another element decides the result (`false` for `all`, `true` for
`exists`); otherwise the first error is raised. `exists_one`, `map` and `filter` raise at the
first error. A predicate that yields a non-bool is an error. Lists range over elements and maps
over keys; the two-variable forms (`all(i, v, p)`, ...) get (index, element) or (key, value).

Every element spends its cost (overhead plus the body's static cost, see `costs.py`) from the
per-evaluation budget in `env[BUDGET_SLOT]`; running out raises `CostExceeded`, which nothing
absorbs. The budget cell is `[left, check_at, should_stop]`: whenever `left` drops below
`check_at` (every `CHECK_EVERY` units when the caller gave a `should_stop`, else only at 0), the
loop checks both the budget and `should_stop`, so an evaluation within its cost limit still stops
within about a millisecond of its caller's deadline (issue 22: one selector under the cost limit
ran 0.2 s per device, and nothing stopped a mask of many devices).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from extender.cel import lookups, values
from extender.cel.values import EVAL_ERRORS, CostExceeded, Interrupted, as_cel_error

Program = Callable[[list[Any]], Any]

BUDGET_SLOT = 1
#: Cost units between two calls of `should_stop` (about 1 ms of comprehension steps).
CHECK_EVERY = 10_000


def budget_cell(budget: int, should_stop: Callable[[], str | None] | None) -> list[Any]:
    """A fresh `env[BUDGET_SLOT]`: `budget` units, checked against `should_stop` when given."""
    if should_stop is None:
        return [budget, 0, None]
    return [budget, max(budget - CHECK_EVERY, 0), should_stop]


def _checkpoint(cell: list[Any]) -> None:
    """Out of budget (`CostExceeded`), or asked to stop (`Interrupted`); else the next check's mark."""
    left = cell[0]
    if left < 0:
        raise CostExceeded()
    cause = cell[2]()
    if cause:
        raise Interrupted(cause)
    cell[1] = max(left - CHECK_EVERY, 0)


def _loop(name: str, source: Program, slots: Sequence[int], cost: list[int]) -> Callable[[list[Any]], Any]:
    """An iterator factory that binds each element (or pair) into its slot(s) before yielding.

    Each element first spends `cost[0]` units of the budget in `env[BUDGET_SLOT]`: one
    subtraction and one comparison per element, not one per evaluated node.
    """
    if len(slots) == 1:
        (slot,) = slots

        def one(env: list[Any]) -> Any:
            budget, step = env[BUDGET_SLOT], cost[0]
            for item in lookups.iterate(source(env), name):
                budget[0] -= step
                if budget[0] < budget[1]:
                    _checkpoint(budget)
                env[slot] = item
                yield item

        return one
    first, second = slots

    def two(env: list[Any]) -> Any:
        budget, step = env[BUDGET_SLOT], cost[0]
        for key, item in lookups.iterate_pairs(source(env), name):
            budget[0] -= step
            if budget[0] < budget[1]:
                _checkpoint(budget)
            env[first], env[second] = key, item
            yield item

    return two


def build(
    name: str, source: Program, slots: Sequence[int], bodies: Sequence[Program], cost: list[int]
) -> Program:
    """The program for `source.<name>(vars..., bodies...)`; arguments were checked by the caller.

    `cost` is a one-element cell: what each element costs (set once compilation has estimated it).
    """
    loop = _loop(name, source, slots, cost)
    if name in ("all", "exists"):
        return _quantifier(name, loop, bodies[0], decisive=name == "exists")
    if name in ("exists_one", "existsOne"):
        return _exists_one(name, loop, bodies[0])
    if name == "filter" or (name == "map" and len(bodies) == 2):
        return _filter_map(name, loop, bodies[0], bodies[1] if name == "map" else None)
    transform = bodies[0]

    def map_all(env: list[Any]) -> list[Any]:
        return [transform(env) for _ in loop(env)]

    return map_all


def _quantifier(
    name: str, loop: Callable[[list[Any]], Any], predicate: Program, *, decisive: bool
) -> Program:
    def quantify(env: list[Any]) -> bool:
        error: BaseException | None = None
        for _ in loop(env):
            try:
                result: object = predicate(env)  # `object`: `is decisive` must not narrow to Any
            except CostExceeded:
                raise
            except EVAL_ERRORS as exc:
                error = error or exc
                continue
            if result is decisive:
                return decisive
            if result is not (not decisive):
                error = error or values.no_overload(name, result)
        if error is not None:
            raise as_cel_error(error)
        return not decisive

    return quantify


def _exists_one(name: str, loop: Callable[[list[Any]], Any], predicate: Program) -> Program:
    def exists_one(env: list[Any]) -> bool:
        count = 0
        for _ in loop(env):
            result = predicate(env)
            if type(result) is not bool:
                raise values.no_overload(name, result)
            count += result
        return count == 1

    return exists_one


def _filter_map(
    name: str, loop: Callable[[list[Any]], Any], predicate: Program, transform: Program | None
) -> Program:
    def filter_map(env: list[Any]) -> list[Any]:
        out = []
        for item in loop(env):
            keep = predicate(env)
            if type(keep) is not bool:
                raise values.no_overload(name, keep)
            if keep:
                out.append(item if transform is None else transform(env))
        return out

    return filter_map
