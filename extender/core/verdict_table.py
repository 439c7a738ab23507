"""The node verdicts of one pod evaluation, kept as arrays over the index's node positions.

A filter call with every node of a large fleet decides thousands of nodes, but they share a
handful of verdicts (passed, and a few reason texts). So `Verdicts` keeps one small table of the
distinct `NodeVerdict`s and, per node position of the index, the number of its entry: the tiers
write whole groups of positions at once (`assign`, `assign_groups`), and filter and prioritize read
their answers for a call's names with array operations (`answer`, `passed_among`, `undecided`):
no Python runs once per node on those paths. Names the index does not know (a request may name
any) are kept by name.

It is also a `Mapping[str, NodeVerdict]` (with `__setitem__`), which is how explain, bind and the
tests read single verdicts; a verdict read back is the very object written (interned by value).

Names become positions once per distinct list (`NameLookup`): kube-scheduler sends every node name
in every filter call (`nodeCacheCapable: true`), the same list again and again, each time as new
string objects. One lookup per index generation, shared by every pod's `Verdicts`, remembers the
last few lists by value: a list equal to one seen before (one C-level list comparison) re-uses its
positions, whether its names are distinct and its names as a numpy array, so a steady filter pays
no dict lookup per name.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from itertools import repeat

import numpy as np

from extender.core.reasons import FAILED, PASSED, UNRESOLVABLE, NodeVerdict

#: Status codes of the table's entries (`_status`), -1 for an undecided position.
_CODES = {PASSED: 0, FAILED: 1, UNRESOLVABLE: 2}
_PASSED, _FAILED, _UNRESOLVABLE = 0, 1, 2
#: Name lists whose positions are remembered (per evaluation by identity, per index by value).
LOOKED_UP = 8
#: Index generations whose name lookups are kept (the current one and the one before it).
LOOKUPS_KEPT = 2
#: Names a lookup remembers in all, beyond twice its index's node count: requests may name any
#: number of nodes the index does not know, and a remembered list keeps its names alive.
LOOKUP_SLACK = 4096


class Looked:
    """One name list as a lookup saw it: each name's position (-1: not in the index), whether the
    names are distinct (None: not known), and the names as a numpy object array (made on first
    use)."""

    __slots__ = ("_array", "_origin", "distinct", "names", "positions")

    def __init__(self, names: Sequence[str], positions: np.ndarray, distinct: bool | None) -> None:
        self.names = names
        self.positions = positions
        self.distinct = distinct
        self._array: np.ndarray | None = None
        self._origin: Looked | None = None  # the shared lookup's entry this one aliases

    def alias(self, names: Sequence[str]) -> Looked:
        """The same lookup for `names`, a list equal to this one's (shares its arrays)."""
        twin = Looked(names, self.positions, self.distinct)
        twin._origin = self
        return twin

    def array(self) -> np.ndarray:
        """The names as a 1-d object array (for masks: `array()[mask].tolist()`)."""
        if self._origin is not None:
            return self._origin.array()
        if self._array is None:
            array = np.empty(len(self.names), dtype=object)
            array[:] = self.names  # a list of strings; `np.array` would make a `<U` array of other input
            self._array = array
        return self._array


class NameLookup:
    """Positions of names in one index generation (`node_pos`), the last `LOOKED_UP` lists
    remembered by value, most recently used first (see module docstring)."""

    def __init__(self, node_pos: dict[str, int]) -> None:
        self.node_pos = node_pos
        self._recent: list[Looked] = []
        self._budget = 2 * len(node_pos) + LOOKUP_SLACK  # names remembered in all, at most
        # One placement's lookups run on its worker thread; the lock keeps the list whole when
        # two placements of one process (tests) share an index generation's lookup.
        self._lock = threading.Lock()

    def remembered(self, names: Sequence[str]) -> Looked | None:
        """The remembered list equal to `names` (now the most recently used), or None."""
        count = len(names)
        with self._lock:
            recent = self._recent
            for i, looked in enumerate(recent):
                if len(looked.names) == count and (looked.names is names or looked.names == names):
                    if i:
                        recent.insert(0, recent.pop(i))
                    return looked
        return None

    def find(self, names: Sequence[str]) -> Looked:
        """`names` looked up: a remembered list equal to it, or a new lookup (then remembered)."""
        found = self.remembered(names)
        if found is not None:
            return found
        count = len(names)
        positions = np.fromiter(map(self.node_pos.get, names, repeat(-1)), dtype=np.int64, count=count)
        looked = Looked(list(names), positions, _distinct(names, positions, len(self.node_pos)))
        if count > self._budget:  # not remembered: it would push out the lists that are
            return looked
        with self._lock:
            recent = self._recent
            recent.insert(0, looked)
            del recent[LOOKED_UP:]
            total = sum(len(kept.names) for kept in recent)
            while total > self._budget:
                total -= len(recent.pop().names)
        return looked


def _distinct(names: Sequence[str], positions: np.ndarray, size: int) -> bool:
    """True when no name repeats: known names by their positions (one bincount), the others by
    name (a request may name any node)."""
    known = positions >= 0
    if not known.all():
        unknown = [names[i] for i in np.flatnonzero(~known).tolist()]
        if len(set(unknown)) != len(unknown):
            return False
        positions = positions[known]
    return not len(positions) or int(np.bincount(positions, minlength=size).max()) <= 1


#: The lookups of the last `LOOKUPS_KEPT` index generations, newest first, by their `node_pos`
#: (kept by identity: a generation's map is built once and never changed).
_LOOKUPS: list[NameLookup] = []
_LOOKUPS_LOCK = threading.Lock()


def lookup_for(node_pos: dict[str, int]) -> NameLookup:
    """The shared lookup of the index generation whose name -> position map is `node_pos`."""
    with _LOOKUPS_LOCK:
        for lookup in _LOOKUPS:
            if lookup.node_pos is node_pos:
                return lookup
        lookup = NameLookup(node_pos)
        _LOOKUPS.insert(0, lookup)
        del _LOOKUPS[LOOKUPS_KEPT:]
        return lookup


class Verdicts(Mapping[str, NodeVerdict]):
    """Node name -> verdict, stored per index position (see module docstring)."""

    def __init__(self) -> None:
        self._names: list[str] = []  # the bound index's node names (position -> name)
        self._pos: dict[str, int] = {}  # ... and name -> position
        self._lookup = NameLookup(self._pos)  # ... and lists of names -> positions (shared)
        self._entry = np.zeros(0, dtype=np.int32)  # per position: table entry, -1 undecided
        self._decided = 0  # positions decided
        self._extra: dict[str, int] = {}  # names the bound index does not know -> table entry
        self._table: list[NodeVerdict] = []
        self._ids: dict[NodeVerdict, int] = {}
        self._status = np.zeros(0, dtype=np.int8)  # per table entry: _PASSED, _FAILED, _UNRESOLVABLE
        self._texts = np.zeros(0, dtype=object)  # per table entry: its reason
        #: The last few name lists looked up (by identity and length: a call's lists pass from
        #: evaluate to the tiers to the answer and are not changed in place).
        self._looked_up: list[Looked] = []

    # ----------------------------------------------------------------- positions
    def bind(self, node_names: list[str], node_pos: dict[str, int]) -> None:
        """Keep verdicts by the positions of this index's nodes (`DeviceIndex.node_names`,
        `node_pos`). A verdict kept for another index generation is carried over by name."""
        if node_pos is self._pos:
            return
        kept = dict(self.items())
        self._names, self._pos = node_names, node_pos
        self._lookup = lookup_for(node_pos)
        self._looked_up = []
        self._entry = np.full(len(node_names), -1, dtype=np.int32)
        self._decided = 0
        self._extra = {}
        for name, verdict in kept.items():
            self[name] = verdict

    def positions(self, names: Sequence[str]) -> np.ndarray:
        """The bound index's position of each name, -1 for a name it does not know."""
        return self._looked(names).positions

    def _looked(self, names: Sequence[str]) -> Looked:
        """`names` as looked up: by identity among this evaluation's recent lists, else from the
        shared lookup (by value: the request's list, equal from call to call)."""
        for looked in self._looked_up:
            if looked.names is names and len(looked.positions) == len(names):
                return looked
        found = self._lookup.find(names)
        if found.names is not names:  # the shared lookup keeps a copy: remember this very list
            found = found.alias(names)
        self._looked_up.append(found)
        del self._looked_up[:-LOOKED_UP]
        return found

    def _array(self, names: Sequence[str]) -> np.ndarray:
        """`names` as a numpy object array (made once per list looked up)."""
        return self._looked(names).array()

    def _remember(self, names: Sequence[str], positions: np.ndarray) -> None:
        """A list made from a looked-up one (`pick`), with its positions: no lookup needed."""
        self._looked_up.append(Looked(names, positions, distinct=None))
        del self._looked_up[:-LOOKED_UP]

    def pick(self, names: Sequence[str], where: np.ndarray) -> list[str]:
        """The names where `where` (bool, aligned with them) is true, in order, as a new list whose
        positions are remembered (the tiers hand such lists on)."""
        if not len(names) or not where.any():
            return []
        positions = self.positions(names)
        picked: list[str] = list(names) if where.all() else self._array(names)[where].tolist()
        self._remember(picked, positions[where])
        return picked

    def _intern(self, verdict: NodeVerdict) -> int:
        found = self._ids.get(verdict)
        if found is None:
            found = self._ids[verdict] = len(self._table)
            self._table.append(verdict)
            self._status = np.append(self._status, np.int8(_CODES[verdict.status]))
            texts = np.empty(len(self._table), dtype=object)
            texts[:-1] = self._texts
            texts[-1] = verdict.reason
            self._texts = texts
        return found

    def assign(self, positions: np.ndarray, verdict: NodeVerdict) -> None:
        """The same verdict for every position given (positions of the bound index)."""
        if len(positions):
            self._write(positions, np.full(len(positions), self._intern(verdict), dtype=np.int32))

    def assign_groups(
        self, positions: np.ndarray, group: np.ndarray, verdicts: Sequence[NodeVerdict]
    ) -> None:
        """Position `positions[i]` gets `verdicts[group[i]]` (a few verdicts for many nodes)."""
        if len(positions):
            ids = np.array([self._intern(v) for v in verdicts], dtype=np.int32)
            self._write(positions, ids[group])

    def assign_names(self, names: Sequence[str], verdict: NodeVerdict) -> None:
        """The same verdict for every name given, known to the bound index or not."""
        positions = self.positions(names)
        known = positions >= 0
        self.assign(positions[known], verdict)
        if not known.all():
            unknown = self._array(names)[~known].tolist()
            self._extra.update(dict.fromkeys(unknown, self._intern(verdict)))

    def _write(self, positions: np.ndarray, entries: np.ndarray) -> None:
        self._entry[positions] = entries
        self._decided = int(np.count_nonzero(self._entry >= 0))  # positions may repeat

    def _entries(self, names: Sequence[str]) -> np.ndarray:
        """Table entry per name, -1 where undecided."""
        positions = self.positions(names)
        known = positions >= 0
        entries = np.full(len(names), -1, dtype=np.int32)
        entries[known] = self._entry[positions[known]]
        if not known.all():
            extra = self._extra
            for i in np.flatnonzero(~known).tolist():
                entries[i] = extra.get(names[i], -1)
        return entries

    # ----------------------------------------------------------------- answers
    def undecided(self, names: list[str]) -> list[str]:
        """The names without a verdict yet, each once, in first-seen order (`names` itself when
        that is all of them)."""
        if not names:
            return names
        unique = names  # no repeats: its positions serve the tiers and the answer too
        distinct = self._looked(names).distinct if self._pos else len(set(names)) == len(names)
        if distinct is None:
            distinct = len(set(names)) == len(names)
        if not distinct:
            unique = list(dict.fromkeys(names))
        if not self._decided and not self._extra:  # nothing decided yet (a new evaluation)
            return unique
        missing = self._entries(unique) < 0
        if missing.all():
            return unique
        return self.pick(unique, missing)

    def passed_among(self, names: Sequence[str]) -> list[str]:
        """The names that passed, in order (a name given twice is listed twice). All must be decided."""
        entries = self._decided_entries(names)
        passed = self._status[entries] == _PASSED
        if passed.all():
            return list(names)
        return self._array(names)[passed].tolist()  # type: ignore[no-any-return]

    def answer(self, names: Sequence[str]) -> tuple[list[str], dict[str, str], dict[str, str]]:
        """Filter's answer for the names: (passed in order, failed name -> reason, unresolvable
        name -> reason), the maps in name order, built from arrays. All must be decided."""
        entries = self._decided_entries(names)
        status = self._status[entries]
        named = self._array(names)
        passed: list[str] = named[status == _PASSED].tolist()
        maps: list[dict[str, str]] = []
        for code in (_FAILED, _UNRESOLVABLE):
            chosen = status == code
            maps.append(
                dict(zip(named[chosen].tolist(), self._texts[entries[chosen]].tolist(), strict=True))
                if chosen.any()
                else {}
            )
        return passed, maps[0], maps[1]

    def spread(self, names: Sequence[str], scored: Sequence[str], values: np.ndarray) -> np.ndarray:
        """`values` (aligned with `scored`) laid over `names`: each name's value, 0 for a name not
        in `scored`; int64, aligned with `names` (a name given twice gets its value twice)."""
        out = np.zeros(len(names), dtype=np.int64)
        if not len(scored) or not len(names):
            return out
        at = self.positions(scored)
        if (at < 0).any():  # a name the index does not know: by name
            by_name = dict(zip(scored, np.asarray(values).tolist(), strict=True))
            return np.fromiter(map(by_name.get, names, repeat(0)), dtype=np.int64, count=len(names))
        table = np.zeros(len(self._names) + 1, dtype=np.int64)  # the last entry: unknown names (-1)
        table[at] = values
        return table[self.positions(names)]  # type: ignore[no-any-return]

    def _decided_entries(self, names: Sequence[str]) -> np.ndarray:
        entries = self._entries(names)
        if (entries < 0).any():
            raise KeyError(names[int(np.flatnonzero(entries < 0)[0])])
        return entries

    # ----------------------------------------------------------------- the mapping
    def __getitem__(self, name: str) -> NodeVerdict:
        position = self._pos.get(name)
        entry = self._extra.get(name, -1) if position is None else int(self._entry[position])
        if entry < 0:
            raise KeyError(name)
        return self._table[entry]

    def __setitem__(self, name: str, verdict: NodeVerdict) -> None:
        entry = self._intern(verdict)
        position = self._pos.get(name)
        if position is None:
            self._extra[name] = entry
        else:
            self._decided += int(self._entry[position] < 0)
            self._entry[position] = entry

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        position = self._pos.get(name)
        return name in self._extra if position is None else bool(self._entry[position] >= 0)

    def __iter__(self) -> Iterator[str]:
        names = self._names
        yield from (names[i] for i in np.flatnonzero(self._entry >= 0).tolist())
        yield from self._extra

    def __len__(self) -> int:
        return self._decided + len(self._extra)
