"""The CEL environment declares exactly upstream's functions (docs/cel.md has the audit table).

Upstream: Kubernetes 1.36's k8s.io/dynamic-resource-allocation/cel, i.e. the Kubernetes base
environment (k8s.io/apiserver/pkg/cel/environment/base.go: standard library, ext.Strings v2,
ext.Sets, Kubernetes' URL, regex, lists, quantity, semver, IP/CIDR, format, image and authz
libraries, optional types, two-variable comprehensions) plus ext.Bindings v0 and `includes`.
cel-go's math and lists extensions are not in it: `math.greatest(1, 2)` is a compile error there.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from extender.cel import compile_selector, libraries
from extender.errors import CelCompileError

Evaluate = Callable[..., bool]

#: Every function upstream declares that we implement, by calling style (an independent list:
#: the tables in libraries.py must match it exactly).
UPSTREAM_GLOBAL = {
    *("size", "int", "uint", "double", "string", "bytes", "bool", "dyn", "type"),
    *("timestamp", "duration", "matches", "quantity", "isQuantity", "semver", "isSemver"),
}
UPSTREAM_MEMBER = {
    # CEL standard library
    *("size", "contains", "startsWith", "endsWith", "matches"),
    # ext.Strings v2 (reverse is v3; Kubernetes pins v2)
    *("charAt", "indexOf", "lastIndexOf", "lowerAscii", "upperAscii", "replace", "split", "join"),
    *("substring", "trim", "format"),
    # Kubernetes regex and lists libraries
    *("find", "findAll", "isSorted", "sum", "min", "max"),
    # Kubernetes quantity and semver libraries (no `mul`; `sign` is a member only)
    *("compareTo", "isGreaterThan", "isLessThan", "add", "sub", "sign", "isInteger", "asInteger"),
    *("asApproximateFloat", "major", "minor", "patch"),
    # optional types; DRA's includes
    *("hasValue", "value", "orValue", "or", "includes"),
}
UPSTREAM_NAMESPACED = {
    *("optional.of", "optional.none", "optional.ofNonZeroValue", "strings.quote"),
    *("sets.contains", "sets.equivalent", "sets.intersects"),
}


def compile_error(expression: str) -> str:
    with pytest.raises(CelCompileError) as info:
        compile_selector(expression)
    return str(info.value)


def test_function_tables_are_exactly_upstreams() -> None:
    assert set(libraries.GLOBAL_FUNCTIONS) == UPSTREAM_GLOBAL
    assert set(libraries.MEMBER_FUNCTIONS) == UPSTREAM_MEMBER
    assert set(libraries.NAMESPACED_FUNCTIONS) == UPSTREAM_NAMESPACED


def test_math_is_an_undeclared_reference_like_cel_go() -> None:
    assert compile_error("1 < math.greatest(1, 2)") == (
        "compilation failed: ERROR: <input>:1:5: undeclared reference to 'math' (in container '')\n"
        " | 1 < math.greatest(1, 2)\n"
        " | ....^\n"
        "ERROR: <input>:1:18: undeclared reference to 'greatest' (in container '')\n"
        " | 1 < math.greatest(1, 2)\n"
        " | .................^"
    )


@pytest.mark.parametrize(
    "call",
    [
        *("math.greatest(1, 2)", "math.least([1, 2])", "math.abs(-1)", "math.sign(-1)", "math.ceil(1.5)"),
        *("math.floor(1.5)", "math.round(1.5)", "math.trunc(1.5)", "math.sqrt(4.0)", "math.isNaN(1.0)"),
        *("math.isInf(1.0)", "math.isFinite(1.0)", "math.bitAnd(1, 2)", "math.bitOr(1, 2)"),
        *("math.bitXor(1, 2)", "math.bitNot(1)", "math.bitShiftLeft(1, 2)", "math.bitShiftRight(4, 1)"),
        "lists.range(3)",
    ],
)
def test_cel_go_extension_namespaces_are_undeclared(call: str) -> None:
    namespace = call.split(".", 1)[0]
    assert f"undeclared reference to '{namespace}' (in container '')" in compile_error(f"{call} == {call}")


@pytest.mark.parametrize(
    ("expression", "name"),
    [
        ("[1, 2].slice(0, 1) == [1]", "slice"),
        ("[[1]].flatten() == [1]", "flatten"),
        ("[1, 1].distinct() == [1]", "distinct"),
        ("[2, 1].sort() == [1, 2]", "sort"),
        ("[1, 2].reverse() == [2, 1]", "reverse"),
        ("'ab'.reverse() == 'ba'", "reverse"),
        ("[1].first().hasValue()", "first"),
        ("quantity('1').mul(2) == quantity('2')", "mul"),
        ("base64.encode(b'a') == 'YQ=='", "base64"),
    ],
)
def test_other_extension_functions_are_undeclared(expression: str, name: str) -> None:
    assert f"undeclared reference to '{name}' (in container '')" in compile_error(expression)


def test_member_only_function_called_globally_has_no_matching_overload() -> None:
    """`sign` is declared (as a quantity member): cel-go finds no overload, not an undeclared name."""
    assert compile_error("sign(quantity('1')) == 1") == (
        "compilation failed: ERROR: <input>:1:5: "
        "found no matching overload for 'sign' (call with 1 arguments)\n"
        " | sign(quantity('1')) == 1\n"
        " | ....^"
    )
    assert "found no matching overload for 'quantity' (receiver call" in compile_error("'1'.quantity()")


@pytest.mark.parametrize(
    ("expression", "name", "library"),
    [
        ("isIP('1.2.3.4')", "isIP", "Kubernetes IP/CIDR library"),
        ("cidr('10.0.0.0/8').containsIP('10.0.0.1')", "cidr", "Kubernetes IP/CIDR library"),
        ("isURL('https://a')", "isURL", "Kubernetes URL library"),
        ("isImage('nginx')", "isImage", "Kubernetes image library"),
        (
            "!format.dns1123Label().validate('a').hasValue()",
            "format.dns1123Label",
            "Kubernetes format library",
        ),
        ("timestamp('2024-01-01T00:00:00Z').getFullYear() == 2024", "getFullYear", "CEL standard"),
        ("optional.of(1).optMap(x, x + 1).hasValue()", "optMap", "CEL optional types"),
        ("[1].transformList(i, v, v + 1) == [2]", "transformList", "cel-go two-variable macros"),
    ],
)
def test_upstream_functions_we_do_not_implement_say_so(expression: str, name: str, library: str) -> None:
    message = compile_error(expression)
    assert f"function '{name}' ({library}" in message
    assert "is part of upstream's CEL environment but not supported here" in message
    assert "undeclared" not in message.split("\n")[0]


@pytest.mark.parametrize(
    "expression",
    [
        # standard functions and conversions
        "size('ab') == 2 && 'ab'.size() == 2 && int('1') == 1 && uint(1) == 1u && double(1) == 1.0",
        "string(1) == '1' && bytes('a') == b'a' && bool('true') && dyn(1) == 1 && type(1) == int",
        "timestamp('2024-01-01T00:00:00Z') < timestamp('2024-01-02T00:00:00Z')",
        "duration('1s') > duration('0s')",
        "matches('ab', 'a') && 'ab'.matches('b') && 'ab'.contains('a')",
        "'ab'.startsWith('a') && 'ab'.endsWith('b')",
        # ext.Strings v2
        "'abc'.charAt(1) == 'b' && 'abc'.indexOf('c') == 2 && 'aba'.lastIndexOf('a') == 2",
        "'Ab'.lowerAscii() == 'ab' && 'Ab'.upperAscii() == 'AB' && 'aa'.replace('a', 'b') == 'bb'",
        "'a,b'.split(',') == ['a', 'b'] && ['a', 'b'].join('-') == 'a-b' && 'abc'.substring(1) == 'bc'",
        "' a '.trim() == 'a' && '%d'.format([1]) == '1' && strings.quote('a') == '\"a\"'",
        # Kubernetes regex and lists libraries, ext.Sets
        "'a1'.find('[0-9]') == '1' && 'a1b2'.findAll('[0-9]') == ['1', '2']",
        "[1, 2].isSorted() && [1, 2].sum() == 3 && [1, 2].min() == 1 && [1, 2].max() == 2",
        "[1, 2].indexOf(2) == 1 && [1, 1].lastIndexOf(1) == 1",
        "sets.contains([1, 2], [1]) && sets.equivalent([1], [1]) && sets.intersects([1], [1, 2])",
        # quantity and semver
        "isQuantity('1Gi') && quantity('1Gi').compareTo(quantity('1Gi')) == 0 && quantity('2').sign() == 1",
        "quantity('1').add(1).isGreaterThan(quantity('1')) && quantity('2').sub(1).isLessThan(quantity('2'))",
        "quantity('1').isInteger() && quantity('1').asInteger() == 1",
        "quantity('1').asApproximateFloat() == 1.0",
        "isSemver('1.2.3') && semver('1.2.3').major() == 1 && semver('1.2.3').minor() == 2",
        "semver('1.2.3').patch() == 3 && semver('1.0', true).isLessThan(semver('1.2.3'))",
        # optional types, cel.bind, includes, macros (one- and two-variable)
        "optional.of(1).hasValue() && optional.none().orValue(2) == 2",
        "optional.ofNonZeroValue(0).or(optional.of(3)).value() == 3",
        "cel.bind(x, 1, x == 1) && (1).includes(1) && [1, 2].includes(2)",
        "has(device.driver) && [1].all(x, x > 0) && [1].exists(x, x > 0) && [1].exists_one(x, x > 0)",
        "[1].existsOne(x, x > 0) && [1].map(x, x + 1) == [2] && [1, 2].filter(x, x > 1) == [2]",
        "[1].map(x, x > 0, x) == [1] && [1].all(i, v, i == 0) && {'a': 1}.exists(k, v, v == 1)",
        "[1].existsOne(i, v, v == 1)",
    ],
)
def test_every_upstream_function_we_declare_compiles_and_runs(evaluate: Evaluate, expression: str) -> None:
    assert evaluate(expression) is True
