"""Compile-time errors: cel-go's exact text and layout for undeclared references, syntax errors,
unknown functions and fields, bad macro arguments, and the expression length limit."""

from __future__ import annotations

import pytest

from extender.cel import compile_selector
from extender.cel.selectors import MAX_EXPRESSION_LENGTH
from extender.errors import CelCompileError


def compile_error(expression: str) -> str:
    with pytest.raises(CelCompileError) as info:
        compile_selector(expression)
    return str(info.value)


def test_undeclared_reference_reads_exactly_like_cel_go() -> None:
    """The conformance cases compare this text byte for byte."""
    assert compile_error("noSuchVar") == (
        "compilation failed: ERROR: <input>:1:1: undeclared reference to 'noSuchVar' (in container '')\n"
        " | noSuchVar\n"
        " | ^"
    )


def test_undeclared_reference_mid_line_is_marked_with_dots() -> None:
    """cel-go pads the caret line with one '.' per code point before the column."""
    assert compile_error('device.driver == "a" && other') == (
        "compilation failed: ERROR: <input>:1:25: undeclared reference to 'other' (in container '')\n"
        ' | device.driver == "a" && other\n'
        " | ........................^"
    )


def test_undeclared_reference_on_a_later_line() -> None:
    message = compile_error('device.driver == "a" &&\n  bogus.x == 1')
    assert message.startswith("compilation failed: ERROR: <input>:2:3: undeclared reference to 'bogus'")
    assert message.endswith(" |   bogus.x == 1\n | ..^")


def test_non_ascii_prefix_uses_wide_dots() -> None:
    message = compile_error('"é" == nope')
    assert message.endswith(' | "é" == nope\n | .\uff0e.....^')


def test_all_undeclared_references_are_reported_in_source_order() -> None:
    message = compile_error("b == 1 || a == 2")
    assert message.count("ERROR: <input>") == 2
    assert message.index("'b'") < message.index("'a'")
    assert "\nERROR: <input>:1:11: undeclared reference to 'a'" in message


@pytest.mark.parametrize(
    "expression",
    [
        "device.driver == 'x'",
        "[1, 2].all(x, x > 0)",
        "[1].map(device, device + 1) == [2]",
        "cel.bind(d, device.attributes['a'], size(d) == 0)",
        "type(1) == int && type('a') == string",
        "[1, 2].max() == 2 && optional.none().hasValue() == false",
        "strings.quote('a') == '\"a\"' && sets.contains([1], [1])",
        ".device.driver == 'x'",
    ],
)
def test_declared_names_compile(expression: str) -> None:
    assert compile_selector(expression).expression == expression


def test_comprehension_variable_is_not_visible_outside_its_macro() -> None:
    assert "undeclared reference to 'x'" in compile_error("[1].all(x, x > 0) && x > 0")


def test_bind_variable_is_visible_only_in_the_body() -> None:
    assert "undeclared reference to 'v'" in compile_error("cel.bind(v, v, true)")


def test_unknown_global_function_is_located_at_its_parenthesis() -> None:
    assert compile_error("frobnicate(1)") == (
        "compilation failed: ERROR: <input>:1:11: undeclared reference to 'frobnicate' (in container '')\n"
        " | frobnicate(1)\n"
        " | ..........^"
    )


def test_unknown_member_function() -> None:
    assert "undeclared reference to 'frobnicate'" in compile_error("device.driver.frobnicate()")


def test_unknown_namespace_function_reports_the_namespace_and_the_function() -> None:
    message = compile_error("math.frobnicate(1) == 1")
    assert "undeclared reference to 'math'" in message
    assert "undeclared reference to 'frobnicate'" in message


def test_wrong_argument_count_is_a_compile_error() -> None:
    assert "found no matching overload for 'charAt'" in compile_error("'abc'.charAt() == 'a'")


def test_unknown_device_field_is_undefined() -> None:
    assert compile_error("device.vendor == 'x'") == (
        "compilation failed: ERROR: <input>:1:7: undefined field 'vendor'\n"
        " | device.vendor == 'x'\n"
        " | ......^"
    )


def test_syntax_error_layout() -> None:
    message = compile_error("device.driver ==")
    assert message.startswith(
        "compilation failed: ERROR: <input>:1:17: Syntax error: mismatched input '<EOF>'"
    )
    assert message.endswith(" | device.driver ==\n | ................^")


def test_token_recognition_error() -> None:
    assert compile_error("1 # 2") == (
        "compilation failed: ERROR: <input>:1:3: Syntax error: token recognition error at: '#'\n"
        " | 1 # 2\n"
        " | ..^"
    )


def test_reserved_identifier() -> None:
    assert "reserved identifier: if" in compile_error("if")


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("[1].all(1, true)", "argument must be a simple name"),
        ("has(device)", "invalid argument to has() macro"),
        ("has(device.attributes['x'])", "invalid argument to has() macro"),
        ("[1].filter(x, y, true)", "undeclared reference to 'filter'"),
        ("cel.bind(x, 1)", "cel.bind() requires exactly 3 arguments"),
        ("Msg{a: 1}", "unsupported construct: message creation"),
        ("9223372036854775808 > 0", "invalid int literal"),
        ("18446744073709551616u > 0u", "invalid uint literal"),
    ],
)
def test_malformed_constructs(expression: str, message: str) -> None:
    assert message in compile_error(expression)


def test_expression_length_limit() -> None:
    limit_sized = "true" + " " * (MAX_EXPRESSION_LENGTH - 4)
    assert compile_selector(limit_sized).expression == limit_sized
    message = compile_error(limit_sized + " ")
    assert (
        message == f"expression too long: {MAX_EXPRESSION_LENGTH + 1} bytes, more than the maximum of 10240"
    )


def test_deeply_nested_expression_is_a_compile_error_not_a_crash() -> None:
    nested = "[" * 500 + "1" + "]" * 500
    assert "max recursion depth exceeded" in compile_error(nested + " == []")


def test_long_flat_chains_are_not_nesting() -> None:
    chain = " || ".join(f"device.driver == 'd{i}'" for i in range(300))
    assert compile_selector(chain).expression == chain
