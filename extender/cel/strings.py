"""String functions: CEL's built-ins, cel-go's `ext.Strings` and Kubernetes' regex library.

Indexes count code points, as cel-go's do (it works on `[]rune`), and out-of-range errors use
cel-go's texts. `matches`, `find` and `findAll` use RE2 (the `google-re2` module cel-python
already depends on), so patterns mean what they mean in cel-go. `format` supports the verbs
DRA selectors plausibly use (`%s %d %f %e %x %X %o %b %%`, with precision); any other verb is a
runtime error rather than a guess.
"""

from __future__ import annotations

import functools
from typing import Any

import re2

from extender.cel.values import CelEvalError, is_list, no_overload, type_name

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_ASCII_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _text(value: Any, function: str, *args: Any) -> str:
    if type(value) is not str:
        raise no_overload(function, value, *args)
    return value


def _int(value: Any, function: str, *args: Any) -> int:
    if type(value) is not int:
        raise no_overload(function, *args)
    return value


def starts_with(s: Any, prefix: Any) -> bool:
    return _text(s, "startsWith", prefix).startswith(_text(prefix, "startsWith", s))


def ends_with(s: Any, suffix: Any) -> bool:
    return _text(s, "endsWith", suffix).endswith(_text(suffix, "endsWith", s))


def contains(s: Any, sub: Any) -> bool:
    return _text(sub, "contains", s) in _text(s, "contains", sub)


def char_at(s: Any, i: Any) -> str:
    text, i = _text(s, "charAt", i), _int(i, "charAt", s, i)
    if i < 0 or i > len(text):
        raise CelEvalError(f"index out of range: {i}")
    return text[i] if i < len(text) else ""


def index_of(s: Any, sub: Any, offset: Any = 0) -> int:
    text, sub = _text(s, "indexOf", sub), _text(sub, "indexOf", s)
    at = _int(offset, "indexOf", s, sub, offset)
    if not sub:
        return at
    if at < 0 or at >= len(text):
        raise CelEvalError(f"index out of range: {at}")
    return text.find(sub, at)


def last_index_of(s: Any, sub: Any, offset: Any = None) -> int:
    text, sub = _text(s, "lastIndexOf", sub), _text(sub, "lastIndexOf", s)
    if offset is None:
        if not sub:
            return len(text)
        offset = len(text) - 1
    at = _int(offset, "lastIndexOf", s, sub, offset)
    if not sub:
        return at
    if at < 0 or at >= len(text):
        raise CelEvalError(f"index out of range: {at}")
    return text.rfind(sub, 0, at + len(sub))


def lower_ascii(s: Any) -> str:
    return _text(s, "lowerAscii").translate(_ASCII_LOWER)


def upper_ascii(s: Any) -> str:
    return _text(s, "upperAscii").translate(_ASCII_UPPER)


def replace(s: Any, old: Any, new: Any, n: Any = -1) -> str:
    text = _text(s, "replace", old, new)
    old, new = _text(old, "replace", s), _text(new, "replace", s)
    return text.replace(old, new, _int(n, "replace", s, old, new, n))


def split(s: Any, sep: Any, n: Any = -1) -> list[str]:
    text, sep = _text(s, "split", sep), _text(sep, "split", s)
    n = _int(n, "split", s, sep, n)
    if n == 0:
        return []
    if sep == "":
        chars = list(text)
        return chars if n < 0 or n >= len(chars) else [*chars[: n - 1], "".join(chars[n - 1 :])]
    return text.split(sep, -1 if n < 0 else n - 1)


def join(items: Any, sep: Any = "") -> str:
    if not is_list(items) or any(type(i) is not str for i in items):
        raise no_overload("join", items, sep)
    return _text(sep, "join", items).join(items)


def substring(s: Any, start: Any, end: Any = None) -> str:
    text = _text(s, "substring", start)
    start = _int(start, "substring", s, start)
    end = len(text) if end is None else _int(end, "substring", s, start, end)
    if start > end:
        raise CelEvalError(f"invalid substring range. start: {start}, end: {end}")
    for bound in (start, end):
        if bound < 0 or bound > len(text):
            raise CelEvalError(f"index out of range: {bound}")
    return text[start:end]


def trim(s: Any) -> str:
    return _text(s, "trim").strip()


def quote(s: Any) -> str:
    text = _text(s, "strings.quote")
    escapes = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}
    escapes |= {"\\": "\\\\", '"': '\\"'}
    return '"' + "".join(escapes.get(c, c) for c in text) + '"'


@functools.lru_cache(maxsize=256)
def _regex(pattern: str) -> Any:
    try:
        return re2.compile(pattern)
    except re2.error as exc:
        raise CelEvalError(f"error parsing regexp: {exc}") from None


def matches(s: Any, pattern: Any) -> bool:
    text, pattern = _text(s, "matches", pattern), _text(pattern, "matches", s)
    return _regex(pattern).search(text) is not None


def find(s: Any, pattern: Any) -> str:
    text, pattern = _text(s, "find", pattern), _text(pattern, "find", s)
    found = _regex(pattern).search(text)
    return found.group(0) if found else ""


def find_all(s: Any, pattern: Any, n: Any = -1) -> list[str]:
    text, pattern = _text(s, "findAll", pattern), _text(pattern, "findAll", s)
    n = _int(n, "findAll", s, pattern, n)
    if n == 0:
        return []
    found = [m.group(0) for m in _regex(pattern).finditer(text)]
    return found if n < 0 else found[:n]


def format_string(s: Any, args: Any) -> str:
    """`"%s is %d".format([a, b])` for the common verbs (see the module docstring)."""
    text = _text(s, "format", args)
    if not is_list(args):
        raise no_overload("format", s, args)
    out, i, used = [], 0, 0
    while i < len(text):
        c = text[i]
        if c != "%":
            out.append(c)
            i += 1
            continue
        j = i + 1
        while j < len(text) and (text[j].isdigit() or text[j] == "."):
            j += 1
        if j >= len(text):
            raise CelEvalError("unexpected end of format string")
        verb, precision = text[j], text[i + 1 : j]
        i = j + 1
        if verb == "%":
            out.append("%")
            continue
        if used >= len(args):
            raise CelEvalError(f"index {used} out of range")
        out.append(_format_one(verb, precision, args[used]))
        used += 1
    return "".join(out)


def _format_one(verb: str, precision: str, value: Any) -> str:
    digits = int(precision[1:] or 0) if precision.startswith(".") else 6
    if verb == "s":
        return to_display(value)
    if verb in "dxXob" and (type(value) is int or type(value).__name__ == "UintType"):
        spec = {"d": "d", "x": "x", "X": "X", "o": "o", "b": "b"}[verb]
        return format(int(value), spec)
    if verb in "xX" and type(value) in (str, bytes):
        raw = value.encode() if type(value) is str else value
        hexed = raw.hex()
        return hexed.upper() if verb == "X" else hexed
    if verb in "fe" and type(value) in (int, float):
        return format(float(value), f".{digits}{verb}")
    raise CelEvalError(f"could not format value of type {type_name(value)} with clause '%{verb}'")


def to_display(value: Any) -> str:
    """How `%s` and `string()` show a value."""
    if type(value) is str:
        return value
    if type(value) is bool:
        return "true" if value else "false"
    if value is None:
        return "null"
    if type(value) is bytes:
        return value.decode("utf-8", errors="replace")
    if type(value) is float:
        return repr(value) if not value.is_integer() or abs(value) >= 1e21 else str(int(value))
    if is_list(value):
        return "[" + ", ".join(_quoted(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_quoted(k)}: {_quoted(v)}" for k, v in value.items()) + "}"
    return str(value)


def _quoted(value: Any) -> str:
    return quote(value) if type(value) is str else to_display(value)
