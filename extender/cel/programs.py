"""The runtime building blocks of compiled programs: closures over `env`, the per-evaluation slot
list (slot 0 `device`, slot 1 the comprehension budget, then one slot per macro variable).

`compiling.py` decides what to build from the parse tree; the functions here only build. Each
returns a `Program`, a callable `env -> value` that raises `CelEvalError` for CEL errors. The
logical operators are n-ary and commutative in cel-go's sense: an operand's error is kept aside
and loses to any operand that decides the result. Library calls with constant arguments are
folded here, once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from extender.cel import literals, lookups, values
from extender.cel.values import EVAL_ERRORS, CelEvalError, CelOptional, CostExceeded, as_cel_error

Program = Callable[[list[Any]], Any]


def failing(message: str) -> Program:
    """A program that always raises `message` (stands in for code that failed to compile)."""

    def fail(env: list[Any]) -> Any:
        raise CelEvalError(message)

    return fail


def conditional(cond: Program, then: Program, other: Program) -> Program:
    def choose(env: list[Any]) -> Any:
        chosen = cond(env)
        if chosen is True:
            return then(env)
        if chosen is False:
            return other(env)
        raise values.no_overload("_?_:_", chosen)

    return choose


def logical(operands: Sequence[Program], *, stop: bool, name: str) -> Program:
    """`a || b || ...` (stop=True) or `a && b && ...` (stop=False)."""

    def run(env: list[Any]) -> bool:
        error: BaseException | None = None
        for operand in operands:
            try:
                value: object = operand(env)  # `object`: `is stop` must not narrow to Any
            except CostExceeded:
                raise
            except EVAL_ERRORS as exc:
                error = error or exc
                continue
            if value is stop:
                return stop
            if value is not (not stop):
                error = error or values.no_overload(name, value)
        if error is not None:
            raise as_cel_error(error)
        return not stop

    return run


def fold(first: Program, rest: Sequence[tuple[Callable[[Any, Any], Any], Program]]) -> Program:
    """A left-associative chain `first op1 x1 op2 x2 ...`, evaluated in a loop."""
    if len(rest) == 1:
        (op, right), left = rest[0], first
        return lambda env: op(left(env), right(env))

    def run(env: list[Any]) -> Any:
        value = first(env)
        for op, right in rest:
            value = op(value, right(env))
        return value

    return run


def unary(inner: Program, op: Callable[[Any], Any]) -> Program:
    return lambda env: op(inner(env))


def select(target: Program, name: str) -> Program:
    """`target.name`, with a fast path for plain maps (the DRA attribute maps)."""

    def run(env: list[Any]) -> Any:
        obj = target(env)
        if type(obj) is dict:
            try:
                return obj[name]
            except KeyError:
                raise CelEvalError(f"no such key: {name}") from None
        return lookups.select(obj, name)

    return run


def optional_select(target: Program, key: Program | str) -> Program:
    """`target.?name` (key a str) or `target[?key]`."""
    if isinstance(key, str):
        name = key
        return lambda env: lookups.optional_index(target(env), name)
    return lambda env: lookups.optional_index(target(env), key(env))


def index(target: Program, key: Program) -> Program:
    return lambda env: lookups.index(target(env), key(env))


def has(target: Program, name: str) -> Program:
    return lambda env: lookups.has_field(target(env), name)


def bind(slot: int, init: Program, body: Program) -> Program:
    """`cel.bind(var, init, body)` with `var` in `slot`."""

    def run(env: list[Any]) -> Any:
        env[slot] = init(env)
        return body(env)

    return run


def call(name: str, function: Callable[..., Any], args: Sequence[Program]) -> Program:
    """A library call; folded to a constant when every argument is one and the call succeeds."""
    constants = [arg for arg in args if literals.is_const(arg)]
    if len(constants) == len(args):
        # A failure stays a runtime error, raised only if evaluation reaches the call.
        try:
            return literals.const(function(*(arg.cel_const for arg in constants)))
        except (*EVAL_ERRORS, RecursionError):
            pass

    def run(env: list[Any]) -> Any:
        actual = [arg(env) for arg in args]
        try:
            return function(*actual)
        except CelEvalError:
            raise
        except TypeError:
            raise values.no_overload(name, *actual) from None
        except EVAL_ERRORS as exc:
            raise CelEvalError(f"{name}: {as_cel_error(exc)}") from None

    return run


def optional_or(name: str, receiver: Program, fallback: Program) -> Program:
    """`opt.orValue(x)` / `opt.or(o)`: like cel-go, the argument is evaluated only if needed."""

    def run(env: list[Any]) -> Any:
        opt = receiver(env)
        if type(opt) is not CelOptional:
            raise values.no_overload(name, opt)
        if opt.has_value:
            return opt.value if name == "orValue" else opt
        other = fallback(env)
        if name == "or" and type(other) is not CelOptional:
            raise values.no_overload(name, opt, other)
        return other

    return run
