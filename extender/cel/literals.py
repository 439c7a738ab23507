"""Literal values and list/map constructors for compiled programs.

Scalar literals are decoded once at compile time (strings and bytes with cel-python's own
escape handling, `celstr`/`celbytes`); ints and uints are range-checked as cel-go's parser does.
A list literal whose elements are all constants becomes a constant tuple (`x in ["a", "b"]`
builds nothing per evaluation). Optional elements (`[?x]`) and entries (`{?k: v}`) are kept only
when their optional value is present.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeGuard, cast

import lark
from celpy.celtypes import UintType
from celpy.evaluation import celbytes, celstr

from extender.cel import lookups, values
from extender.cel.values import CelEvalError, CelOptional

Program = Callable[[list[Any]], Any]


class InvalidLiteral(ValueError):
    """A literal cel-go's parser rejects; the message is the parser's ("invalid int literal")."""


class Constant(Protocol):
    """A program that returns `cel_const` whatever the slots hold; calls on constants fold."""

    cel_const: Any

    def __call__(self, env: list[Any], /) -> Any: ...


def const(value: Any) -> Constant:
    """A program that returns `value`; `cel_const` marks it for folding."""

    def constant(env: list[Any]) -> Any:
        return value

    # A closure with an attribute, not an object with `__call__`: constants are evaluated often.
    program = cast(Constant, constant)
    program.cel_const = value
    return program


def is_const(program: Program) -> TypeGuard[Constant]:
    return hasattr(program, "cel_const")


def literal_value(token: lark.Token) -> Any:
    """The value of a literal token of cel-python's grammar.

    Raises:
        InvalidLiteral: an out-of-range number or an undecodable string.
    """
    kind, text = token.type, str(token)
    try:
        if kind == "INT_LIT":
            negative, digits = text.startswith("-"), text.lstrip("-")
            number = int(digits[2:], 16) if digits[:2] in ("0x", "0X") else int(digits, 10)
            return values.check_int(-number if negative else number)
        if kind == "UINT_LIT":
            digits = text[:-1]
            return values.check_uint(int(digits[2:], 16) if digits[:2] in ("0x", "0X") else int(digits, 10))
        if kind == "FLOAT_LIT":
            return float(text)
        if kind in ("STRING_LIT", "MLSTRING_LIT"):
            return str(celstr(token))
        if kind == "BYTES_LIT":
            return bytes(celbytes(token))
        if kind == "BOOL_LIT":
            return text == "true"
        return None
    except (CelEvalError, ValueError):
        noun = {"INT_LIT": "int", "UINT_LIT": "uint", "BYTES_LIT": "bytes"}.get(kind, "string")
        raise InvalidLiteral(f"invalid {noun} literal") from None


def build_list(elements: Sequence[tuple[bool, Program]]) -> Program:
    """`[a, ?b, ...]` from (optional?, program) pairs."""
    constants = [p for _, p in elements if is_const(p)]
    if not any(optional for optional, _ in elements) and len(constants) == len(elements):
        return const(tuple(p.cel_const for p in constants))

    def build(env: list[Any]) -> list[Any]:
        out = []
        for optional, element in elements:
            value = element(env)
            if not optional:
                out.append(value)
            elif type(value) is not CelOptional:
                raise values.no_overload("optional list element", value)
            elif value.has_value:
                out.append(value.value)
        return out

    return build


def build_map(entries: Sequence[tuple[bool, Program, Program]]) -> Program:
    """`{k: v, ?k2: opt, ...}` from (optional?, key program, value program) triples."""

    def build(env: list[Any]) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for optional, key_program, value_program in entries:
            key, value = key_program(env), value_program(env)
            if type(key) not in (str, int, bool, UintType):
                raise CelEvalError(f"unsupported map key type: {values.type_name(key)}")
            if optional:
                if type(value) is not CelOptional:
                    raise values.no_overload("optional map entry", value)
                if not value.has_value:
                    continue
                value = value.value
            if lookups.map_has(out, key):
                raise CelEvalError(f"Failed with repeated key: {key}")
            out[key] = value
        return out

    return build
