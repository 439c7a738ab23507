"""Find the items of a JSON `List` document without parsing it, so that the loader can parse
(and compact) one item at a time: parsing a 200 MB state file whole holds every raw object at
once, about seven times the file's size, before anything can be shared (docs/memory-profile.md).

`loads_list` is `orjson.loads` with that split: the state loader (which compacts each slice as
it is parsed) and the watch's list pages (a page of 500 ResourceSlices is megabytes of JSON, and
one `orjson.loads` of it holds the GIL for 50-120 ms, long enough to miss a liveness probe;
item by item, other threads run between items) both read Lists through it.

`split_items` scans the bytes with numpy, a block at a time: strings are found from their
unescaped quotes, and brackets and commas outside strings give the nesting depth. Anything it
does not recognise (no top-level object, no `"items"` array, two of them, unbalanced brackets)
returns None and the caller parses the document whole, so the answer never differs from
`orjson.loads`: the items are parsed with orjson itself, and an item that does not parse sends
the caller back to the whole-document parse for orjson's own error.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise
from typing import Any

import numpy as np
import orjson

#: Bytes scanned per step; bounds the scanner's temporary arrays (a few times this).
BLOCK = 1 << 23

_QUOTE, _BACKSLASH = ord('"'), ord("\\")
_OPEN = np.zeros(256, dtype=np.int8)
_OPEN[[ord("{"), ord("[")]] = 1
_OPEN[[ord("}"), ord("]")]] = -1
_WHITESPACE = b" \t\r\n"


def _escaped(data: bytes, quote: int) -> bool:
    """Whether the quote at `quote` follows an odd run of backslashes (inside a string)."""
    start = quote
    while start > 0 and data[start - 1] == _BACKSLASH:
        start -= 1
    return (quote - start) % 2 == 1


def split_items(data: bytes) -> tuple[bytes, list[memoryview]] | None:
    """(the document with its `items` array emptied, each item's bytes), or None (see module).

    The first part parses to the List's other fields (`kind`, `apiVersion`, ...); the items
    are views into `data`, in order.
    """
    view = np.frombuffer(data, dtype=np.uint8)
    start = len(data) - len(data.lstrip(_WHITESPACE))
    if start == len(data) or data[start] != ord("{"):
        return None
    in_string = False
    depth = 0
    arrays: list[int] = []  # '[' opened at depth 1 (arrays that are values of top-level keys)
    closes: list[int] = []  # ']' that close one of them
    commas: list[np.ndarray] = []  # ',' at depth 2 (between the items of those arrays)
    end = -1  # the '}' that closes the document
    for offset in range(0, len(data), BLOCK):
        block = view[offset : offset + BLOCK]
        found = block == _QUOTE
        for char in b"{}[],":
            found |= block == char
        marks = np.flatnonzero(found) + offset
        quotes = view[marks] == _QUOTE
        maybe = marks[quotes & (view[np.maximum(marks - 1, 0)] == _BACKSLASH)]
        for position in maybe.tolist():  # rare: a quote after a backslash
            if position > 0 and _escaped(data, position):
                quotes[np.searchsorted(marks, position)] = False
        # A mark is inside a string when an odd number of quotes precede it (counting the
        # string state carried in from the blocks before).
        before = np.cumsum(quotes, dtype=np.int64) + in_string
        if len(before):
            in_string = bool(before[-1] % 2 == 1)
        marks = marks[~quotes & (before % 2 == 0)]
        steps = _OPEN[view[marks]]
        after = depth + np.cumsum(steps, dtype=np.int64)  # depth after each mark
        if len(after) and after.min() < 0:
            return None
        if end < 0 and len(after) and (after == 0).any():
            end = int(marks[np.argmax(after == 0)])
        opened = marks[(steps == 1) & (after == 2)]
        arrays.extend(int(p) for p in opened if data[p] == ord("["))
        closed = marks[(steps == -1) & (after == 1)]
        closes.extend(int(p) for p in closed if data[p] == ord("]"))
        commas.append(marks[(steps == 0) & (after == 2)])
        if len(after):
            depth = int(after[-1])
    if in_string or depth != 0 or end < 0 or data[end + 1 :].strip(_WHITESPACE):
        return None
    if len(arrays) != len(closes):
        return None
    found = [(p, c) for p, c in zip(arrays, closes, strict=True) if _key_before(data, p) == b"items"]
    if len(found) != 1:
        return None
    first, last = found[0]
    between = np.concatenate(commas) if commas else np.empty(0, dtype=np.int64)
    between = between[(between > first) & (between < last)]
    bounds = [first, *between.tolist(), last]
    memory = memoryview(data)
    items = [memory[a + 1 : b] for a, b in pairwise(bounds)]
    if len(items) == 1 and not bytes(items[0]).strip(_WHITESPACE):
        items = []  # "items": []
    return data[: first + 1] + data[last:], items


def _key_before(data: bytes, position: int) -> bytes | None:
    """The plain key whose value starts at `position` (`"items": [`), or None."""
    head = data[max(0, position - 64) : position].rstrip(_WHITESPACE)
    if not head.endswith(b":"):
        return None
    head = head[:-1].rstrip(_WHITESPACE)
    if not head.endswith(b'"'):
        return None
    opening = head.rfind(b'"', 0, len(head) - 1)
    if opening < 0 or b"\\" in head[opening:]:
        return None  # an escaped key: leave it to the whole-document parse
    return head[opening + 1 : -1]


def loads_list(data: bytes, each: Callable[[Any, str | None], None] | None = None) -> Any:
    """`orjson.loads(data)`, with a List's items parsed one at a time (see module docstring).

    `each(item, item_kind)` is called on each item as soon as it is parsed (`item_kind`: the
    List's kind without "List", what `kind` an item without one is, or None). Whatever the split
    does not recognise, or an item orjson refuses, is parsed whole: the same answer, or the
    same error (`orjson.JSONDecodeError`), as `orjson.loads`.
    """
    split = split_items(data)
    if split is None:
        return orjson.loads(data)
    head, raw_items = split
    try:
        doc = orjson.loads(head)
        if doc.get("items") != []:
            return orjson.loads(data)  # a later duplicate "items" key: the whole parse decides
        kind = doc.get("kind")
        item_kind = kind[: -len("List")] if isinstance(kind, str) and kind.endswith("List") else None
        items = []
        for raw in raw_items:
            item = orjson.loads(raw)
            if each is not None:
                each(item, item_kind)
            items.append(item)
    except orjson.JSONDecodeError:
        return orjson.loads(data)  # raises orjson's own error for the whole document
    doc["items"] = items
    return doc
