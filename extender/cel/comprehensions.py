"""Evaluation of CEL's comprehension macros, with cel-go's error semantics.

`all` and `exists` absorb errors the way `&&` and `||` do: an element for which the predicate
errs does not matter if another element decides the result (`false` for `all`, `true` for
`exists`); otherwise the first error is raised. `exists_one`, `map` and `filter` raise at the
first error. A predicate that yields a non-bool is an error. Lists range over elements and maps
over keys; the two-variable forms (`all(i, v, p)`, ...) get (index, element) or (key, value).

Every element spends its cost (overhead plus the body's static cost, see `costs.py`) from the
per-evaluation budget in `env[BUDGET_SLOT]`; running out raises `CostExceeded`, which nothing
absorbs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from extender.cel import lookups, values
from extender.cel.values import EVAL_ERRORS, CostExceeded, as_cel_error

Program = Callable[[list[Any]], Any]

BUDGET_SLOT = 1


def _loop(name: str, source: Program, slots: Sequence[int], cost: list[int]) -> Callable[[list[Any]], Any]:
    """An iterator factory that binds each element (or pair) into its slot(s) before yielding.

    Each element first spends `cost[0]` units of the budget in `env[BUDGET_SLOT]`: one
    subtraction per element, not one per evaluated node.
    """
    if len(slots) == 1:
        (slot,) = slots

        def one(env: list[Any]) -> Any:
            budget, step = env[BUDGET_SLOT], cost[0]
            for item in lookups.iterate(source(env), name):
                budget[0] -= step
                if budget[0] < 0:
                    raise CostExceeded()
                env[slot] = item
                yield item

        return one
    first, second = slots

    def two(env: list[Any]) -> Any:
        budget, step = env[BUDGET_SLOT], cost[0]
        for key, item in lookups.iterate_pairs(source(env), name):
            budget[0] -= step
            if budget[0] < 0:
                raise CostExceeded()
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
