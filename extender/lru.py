"""`SizedLRU`: a least-recently-used cache bounded by entry count and by size in bytes.

Why size as well as count: what a cache keeps per entry can grow with what a caller sends. Issue
22 item 3 measured it: 12 filters naming 100,000 nodes each added 166 MB to the evaluation cache
(its 256 entries would have held about 4 GB), and pods-seen kept 4,096 whole pods (with 1 MB of
annotations each, 5 GB). A count alone bounds none of that. Each entry here carries the size its
owner estimates (`deep_size` for plain objects, arithmetic for arrays); the cache evicts the least
recently used entries until both bounds hold. An entry larger than the whole byte bound is not
kept at all (and evicts nothing): its owner uses it for the call at hand, the next call
recomputes it.

Not thread-safe for writers: each owner writes from one thread (the placement's worker). `peek`
is a single dict read, safe from another thread (the event loop reads pods-seen with it).
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

__all__ = ["SizedLRU", "deep_size"]


class SizedLRU(Generic[K, V]):
    """At most `max_entries` entries and `max_bytes` of their sizes (see module docstring)."""

    def __init__(self, *, max_entries: int, max_bytes: int) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise ValueError(f"a cache needs room: max_entries={max_entries}, max_bytes={max_bytes}")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self.evictions = 0  # entries dropped to keep the bounds (for tests and metrics)

    @property
    def bytes(self) -> int:
        """The sum of the kept entries' sizes."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def get(self, key: K) -> V | None:
        """The entry (now the most recently used), or None."""
        found = self._entries.get(key)
        if found is None:
            return None
        self._entries.move_to_end(key)
        return found[0]

    def peek(self, key: K) -> V | None:
        """The entry without marking it used (one dict read: safe from another thread)."""
        found = self._entries.get(key)
        return None if found is None else found[0]

    def put(self, key: K, value: V, size: int) -> None:
        """Keep `value` under `key` (replacing any entry there) as the most recently used."""
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old[1]
        if size > self.max_bytes:  # could never fit: keep nothing, evict nothing for it
            return
        self._entries[key] = (value, size)
        self._bytes += size
        self._shrink()

    def resize(self, key: K, size: int) -> None:
        """The entry's size changed (it grew as its owner added to it); evict to fit if needed."""
        found = self._entries.get(key)
        if found is None:
            return
        self._entries[key] = (found[0], size)
        self._bytes += size - found[1]
        self._shrink()

    def discard(self, key: K) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old[1]

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0

    def values(self) -> list[V]:
        """The kept values, least recently used first (a copy)."""
        return [value for value, _ in self._entries.values()]

    def items(self) -> list[tuple[K, V]]:
        """The kept entries, least recently used first (a copy)."""
        return [(key, value) for key, (value, _) in self._entries.items()]

    def _shrink(self) -> None:
        while self._entries and (len(self._entries) > self.max_entries or self._bytes > self.max_bytes):
            _, (_, size) = self._entries.popitem(last=False)
            self._bytes -= size
            self.evictions += 1


def deep_size(value: Any) -> int:
    """Bytes `value` holds: `sys.getsizeof` over it and everything its dicts, lists, tuples and
    sets reach, each object once (plain decoded JSON/YAML: the pod objects the extender keeps).
    Iterative, so a deeply nested object cannot exhaust the stack."""
    getsizeof = sys.getsizeof
    seen: set[int] = set()  # containers only: a leaf met twice is counted twice (an upper bound)
    todo = [value]
    total = 0
    while todo:
        item = todo.pop()
        kind = type(item)
        if kind is dict:
            if id(item) in seen:
                continue
            seen.add(id(item))
            todo.extend(item.keys())
            todo.extend(item.values())
        elif kind is list or kind is tuple or kind is set or kind is frozenset:
            if id(item) in seen:
                continue
            seen.add(id(item))
            todo.extend(item)
        total += getsizeof(item)
    return total
