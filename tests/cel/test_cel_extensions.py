"""Library functions beyond the core operators: strings (built-in and cel-go's ext.Strings),
regular expressions, Kubernetes' lists library, cel-go's sets extension and the standard
conversions. (cel-go's lists and math extensions are not in upstream's environment: see
test_cel_environment_audit.py.)"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from extender.errors import CelRuntimeError

Evaluate = Callable[..., bool]


@pytest.mark.parametrize(
    "expression",
    [
        "'hello'.startsWith('he') && 'hello'.endsWith('lo') && 'hello'.contains('ell')",
        "'hello'.size() == 5 && size('héllo') == 5 && size(b'ab') == 2",
        "'hello'.charAt(1) == 'e' && 'hello'.charAt(5) == ''",
        "'hello'.indexOf('l') == 2 && 'hello'.indexOf('l', 3) == 3 && 'hello'.indexOf('') == 0",
        "'hello'.indexOf('z') == -1 && 'héllo'.indexOf('l') == 2",
        "'hello'.lastIndexOf('l') == 3 && 'hello'.lastIndexOf('l', 2) == 2 && 'hello'.lastIndexOf('') == 5",
        "'TacoCat'.lowerAscii() == 'tacocat' && 'TacoCÄt'.upperAscii() == 'TACOCÄT'",
        "'a-b-c'.replace('-', '+') == 'a+b+c' && 'a-b-c'.replace('-', '+', 1) == 'a+b-c'",
        "'a,b,c'.split(',') == ['a', 'b', 'c'] && 'a,b,c'.split(',', 2) == ['a', 'b,c']",
        "'a,b'.split(',', 0) == [] && 'abc'.split('') == ['a', 'b', 'c']",
        "['a', 'b'].join() == 'ab' && ['a', 'b'].join('-') == 'a-b'",
        "'tacocat'.substring(4) == 'cat' && 'tacocat'.substring(0, 4) == 'taco'",
        "'  \\ttrim\\n '.trim() == 'trim'",
        "strings.quote('a\"b\\n') == '\"a\\\\\"b\\\\n\"'",
        "'%s has %d GPUs, %.2f%% used'.format(['node', 8, 12.5]) == 'node has 8 GPUs, 12.50% used'",
        "'%x %X %o %b'.format([255, 255, 8, 5]) == 'ff FF 10 101'",
        "'%s'.format([[1, 'a']]) == '[1, \"a\"]' && '%s %s'.format([true, null]) == 'true null'",
    ],
)
def test_strings(evaluate: Evaluate, expression: str) -> None:
    assert evaluate(expression) is True


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        ("'abc'.substring(2, 1) == ''", "invalid substring range. start: 2, end: 1"),
        ("'abc'.substring(4) == ''", "invalid substring range. start: 4, end: 3"),
        ("'abc'.substring(-1, 2) == ''", "index out of range: -1"),
        ("'abc'.indexOf('a', 7) == 0", "index out of range: 7"),
        ("'%q'.format([1]) == ''", "could not format value of type int with clause '%q'"),
        ("'abc'.matches('(') == true", "error parsing regexp"),
        ("(1).contains(1)", "found no matching overload for 'contains' applied to '(int, int)'"),
    ],
)
def test_string_errors(evaluate: Evaluate, expression: str, error: str) -> None:
    with pytest.raises(CelRuntimeError) as info:
        evaluate(expression)
    assert str(info.value).startswith(error)


@pytest.mark.parametrize(
    "expression",
    [
        "'gpu-a100'.matches('^gpu-[a-z][0-9]+$') && matches('x1', '[0-9]') && !'abc'.matches('^b')",
        "'abc 123 def 456'.find('[0-9]+') == '123' && 'abc'.find('[0-9]') == ''",
        "'a1 b2 c3'.findAll('[a-z][0-9]') == ['a1', 'b2', 'c3'] && 'a1 b2'.findAll('[0-9]', 1) == ['1']",
    ],
)
def test_regex(evaluate: Evaluate, expression: str) -> None:
    assert evaluate(expression) is True


@pytest.mark.parametrize(
    "expression",
    [
        "[1, 2, 3].isSorted() && !['b', 'a'].isSorted() && [].isSorted()",
        "[1, 2, 3].sum() == 6 && [1.5, 2.5].sum() == 4.0 && [].sum() == 0",
        "[3, 1, 2].min() == 1 && [3, 1, 2].max() == 3 && ['b', 'a'].min() == 'a'",
        "[1, 2, 1].indexOf(1) == 0 && [1, 2, 1].lastIndexOf(1) == 2 && [1].indexOf(9) == -1",
        "sets.contains([1, 2, 3], [3, 1]) && !sets.contains([1], [2]) && sets.contains([1], [])",
        "sets.equivalent([1, 2, 2], [2, 1]) && !sets.equivalent([1], [1, 3])",
        "sets.intersects([1, 2], [2, 3]) && !sets.intersects([1], [2]) && sets.intersects([1], [1.0])",
    ],
)
def test_lists_and_sets(evaluate: Evaluate, expression: str) -> None:
    assert evaluate(expression) is True


def test_min_of_an_empty_list_is_an_error(evaluate: Evaluate) -> None:
    with pytest.raises(CelRuntimeError, match="min called on empty list"):
        evaluate("[].min() == 0")


@pytest.mark.parametrize(
    "expression",
    [
        "int('42') == 42 && int(3.9) == 3 && int(-3.9) == -3 && int(7u) == 7",
        "uint(7) == 7u && uint('8') == 8u && double(2) == 2.0 && double('1.5') == 1.5",
        "string(1) == '1' && string(1.5) == '1.5' && string(1e6) == '1e+06' && string(true) == 'true'",
        "string(b'abc') == 'abc' && bytes('abc') == b'abc' && bool('true') && !bool('0')",
        "timestamp('2024-01-01T00:00:00Z') < timestamp('2024-06-01T00:00:00Z')",
        "duration('1h') > duration('30m') && timestamp('2024-01-01T00:00:00Z') + duration('24h') > "
        "timestamp('2024-01-01T12:00:00Z')",
    ],
)
def test_conversions(evaluate: Evaluate, expression: str) -> None:
    assert evaluate(expression) is True


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        ("int('x') == 0", "cannot convert string 'x' to int"),
        ("int(1e19) == 0", "integer overflow"),
        ("uint(-1) == 0u", "unsigned integer overflow"),
        ("bool('maybe')", "type conversion error from 'string' to 'bool'"),
    ],
)
def test_conversion_errors(evaluate: Evaluate, expression: str, error: str) -> None:
    with pytest.raises(CelRuntimeError) as info:
        evaluate(expression)
    assert str(info.value).startswith(error)
