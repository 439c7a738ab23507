"""A list shared between index generations, with the spans later generations wrote over it.

A new index generation after a one-node change has the previous generation's rows but that
node's (`DeviceIndex._patch_rows`). Copying the row list (one reference per device row, 180,000
at 5,000 mixed nodes) cost more than everything else the change did: every reference is an
incref on a device object that is cold in the cache, the copy is a young container the garbage
collector then walks (another cache miss per row), and the previous generation's copy is freed
(a decref per row). `SpannedList` instead shares the list with the generation it came from and
keeps the rebuilt nodes' rows as spans: a new generation costs the spans it writes.

The spans are flattened into a new shared list once they cover a sixteenth of the rows (or
there are `MAX_SPANS` of them), so reads stay one dict lookup and a bisect, and that O(rows)
copy is paid once per many changes, not once per change. Nothing is changed in place: readers
of an older generation keep what they had.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import islice
from operator import index as as_index
from typing import Generic, SupportsIndex, TypeVar, overload

_T = TypeVar("_T")
#: Spans kept before a patch flattens them into a new list (reads bisect over the span starts).
MAX_SPANS = 1024


class SpannedList(Sequence[_T], Generic[_T]):
    """`base` with `spans` (start -> values, non-overlapping, each within `base`) written over it."""

    __slots__ = ("_base", "_spans", "_starts", "_written")

    def __init__(self, base: list[_T], spans: dict[int, list[_T]] | None = None) -> None:
        self._base = base  # shared with other generations: never changed
        self._spans: dict[int, list[_T]] = spans or {}
        self._starts = sorted(self._spans)
        self._written = sum(map(len, self._spans.values()))

    def patched(self, writes: Iterable[tuple[int, list[_T]]]) -> SpannedList[_T]:
        """This list with `values` at `start` for each write (a new object; this one is kept).

        A write must cover exactly the rows of any span it overlaps, or none of them (rows of one
        node are rebuilt together), else the spans are flattened first.
        """
        writes = list(writes)
        spans = dict(self._spans)
        for start, values in writes:
            old = spans.get(start)
            if old is None and self._overlaps(start, len(values)):
                return SpannedList(self._flat_with(writes))
            if old is not None and len(old) != len(values):
                return SpannedList(self._flat_with(writes))
            if start < 0 or start + len(values) > len(self._base):
                raise IndexError(f"span {start}:{start + len(values)} outside {len(self._base)} rows")
            spans[start] = values
        written = sum(map(len, spans.values()))
        if len(spans) > MAX_SPANS or written * 16 > len(self._base):
            return SpannedList(_flatten(self._base, spans))
        return SpannedList(self._base, spans)

    def _overlaps(self, start: int, size: int) -> bool:
        j = bisect_right(self._starts, start + size - 1) - 1
        if j < 0:
            return False
        first = self._starts[j]
        return first + len(self._spans[first]) > start

    def _flat_with(self, writes: Iterable[tuple[int, list[_T]]]) -> list[_T]:
        flat = _flatten(self._base, self._spans)
        for start, values in writes:
            flat[start : start + len(values)] = values
        return flat

    def __len__(self) -> int:
        return len(self._base)

    @overload
    def __getitem__(self, item: SupportsIndex) -> _T: ...
    @overload
    def __getitem__(self, item: slice) -> list[_T]: ...
    def __getitem__(self, item: SupportsIndex | slice) -> _T | list[_T]:
        if isinstance(item, slice):
            return self._slice(item)
        if not self._spans:
            return self._base[item]
        size = len(self._base)
        row = as_index(item)
        row = row + size if row < 0 else row
        if not 0 <= row < size:
            raise IndexError("row out of range")
        j = bisect_right(self._starts, row) - 1
        if j >= 0:
            start = self._starts[j]
            values = self._spans[start]
            if row - start < len(values):
                return values[row - start]
        return self._base[row]

    def _slice(self, item: slice) -> list[_T]:
        out = self._base[item]
        if not self._spans:
            return out
        lo, hi, step = item.indices(len(self._base))
        if step != 1:
            return _flatten(self._base, self._spans)[item]
        if hi <= lo:
            return out
        # Spans that end after `lo` and start before `hi`.
        j = max(bisect_right(self._starts, lo) - 1, 0)
        for start in islice(self._starts, j, None):
            if start >= hi:
                break
            values = self._spans[start]
            a, b = max(start, lo), min(start + len(values), hi)
            if a < b:
                out[a - lo : b - lo] = values[a - start : b - start]
        return out

    def __iter__(self) -> Iterator[_T]:
        if not self._spans:
            yield from self._base
            return
        at = 0
        base = self._base
        for start in self._starts:
            yield from islice(base, at, start)
            values = self._spans[start]
            yield from values
            at = start + len(values)
        yield from islice(base, at, None)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SpannedList | list | tuple):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable-looking sequence: compared by value

    def __repr__(self) -> str:
        return f"SpannedList({list(self)!r})"

    @property
    def spans(self) -> int:
        """How many spans are written over the shared list (0: it is the list itself)."""
        return len(self._spans)


def _flatten(base: Sequence[_T], spans: dict[int, list[_T]]) -> list[_T]:
    flat = list(base)
    for start, values in spans.items():
        flat[start : start + len(values)] = values
    return flat


_K = TypeVar("_K")
_V = TypeVar("_V")


class OverlayDict(Mapping[_K, _V], Generic[_K, _V]):
    """A dict shared between generations plus the entries later generations replaced.

    Keys are never added or removed (a generation with other keys builds a new dict): iteration
    is the shared dict's order. Flattened into a new dict once a sixteenth of the keys changed.
    """

    __slots__ = ("_base", "_changes")

    def __init__(self, base: dict[_K, _V], changes: dict[_K, _V] | None = None) -> None:
        self._base = base  # shared with other generations: never changed
        self._changes: dict[_K, _V] = changes or {}

    def replacing(self, changes: Mapping[_K, _V]) -> OverlayDict[_K, _V]:
        """This mapping with the values of `changes` (existing keys only; a new object)."""
        for key in changes:
            if key not in self._base:
                raise KeyError(key)
        merged = {**self._changes, **changes}
        if len(merged) * 16 > len(self._base):
            return OverlayDict({**self._base, **merged})
        return OverlayDict(self._base, merged)

    def __getitem__(self, key: _K) -> _V:
        changes = self._changes
        if changes and key in changes:
            return changes[key]
        return self._base[key]

    def __contains__(self, key: object) -> bool:
        return key in self._base

    def __iter__(self) -> Iterator[_K]:
        return iter(self._base)

    def __len__(self) -> int:
        return len(self._base)

    def __repr__(self) -> str:
        return f"OverlayDict({dict(self)!r})"
