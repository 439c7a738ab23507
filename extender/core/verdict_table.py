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
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import repeat

import numpy as np

from extender.core.reasons import FAILED, PASSED, UNRESOLVABLE, NodeVerdict

#: Status codes of the table's entries (`_status`), -1 for an undecided position.
_CODES = {PASSED: 0, FAILED: 1, UNRESOLVABLE: 2}
_PASSED, _FAILED, _UNRESOLVABLE = 0, 1, 2
#: Name lists whose positions are remembered.
LOOKED_UP = 8


class Verdicts(Mapping[str, NodeVerdict]):
    """Node name -> verdict, stored per index position (see module docstring)."""

    def __init__(self) -> None:
        self._names: list[str] = []  # the bound index's node names (position -> name)
        self._pos: dict[str, int] = {}  # ... and name -> position
        self._entry = np.zeros(0, dtype=np.int32)  # per position: table entry, -1 undecided
        self._decided = 0  # positions decided
        self._extra: dict[str, int] = {}  # names the bound index does not know -> table entry
        self._table: list[NodeVerdict] = []
        self._ids: dict[NodeVerdict, int] = {}
        self._status = np.zeros(0, dtype=np.int8)  # per table entry: _PASSED, _FAILED, _UNRESOLVABLE
        self._texts = np.zeros(0, dtype=object)  # per table entry: its reason
        #: The positions of the last few name lists looked up (by identity and length: a call's
        #: lists pass from evaluate to the tiers to the answer and are not changed in place).
        self._looked_up: list[tuple[Sequence[str], np.ndarray]] = []

    # ----------------------------------------------------------------- positions
    def bind(self, node_names: list[str], node_pos: dict[str, int]) -> None:
        """Keep verdicts by the positions of this index's nodes (`DeviceIndex.node_names`,
        `node_pos`). A verdict kept for another index generation is carried over by name."""
        if node_pos is self._pos:
            return
        kept = dict(self.items())
        self._names, self._pos = node_names, node_pos
        self._looked_up = []
        self._entry = np.full(len(node_names), -1, dtype=np.int32)
        self._decided = 0
        self._extra = {}
        for name, verdict in kept.items():
            self[name] = verdict

    def positions(self, names: Sequence[str]) -> np.ndarray:
        """The bound index's position of each name, -1 for a name it does not know."""
        for listed, found in self._looked_up:
            if listed is names and len(found) == len(names):
                return found
        found = np.fromiter(map(self._pos.get, names, repeat(-1)), dtype=np.int64, count=len(names))
        self._remember(names, found)
        return found

    def _remember(self, names: Sequence[str], positions: np.ndarray) -> None:
        self._looked_up.append((names, positions))
        del self._looked_up[:-LOOKED_UP]

    def pick(self, names: Sequence[str], where: np.ndarray) -> list[str]:
        """The names where `where` (bool, aligned with them) is true, in order, as a new list whose
        positions are remembered (the tiers hand such lists on)."""
        if not len(names) or not where.any():
            return []
        positions = self.positions(names)
        picked: list[str] = list(names) if where.all() else np.array(names, dtype=object)[where].tolist()
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
            unknown = np.array(names, dtype=object)[~known].tolist()
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
        unique = list(dict.fromkeys(names))
        if len(unique) == len(names):
            unique = names  # no repeats: its positions serve the tiers and the answer too
        if not unique:
            return unique
        missing = self._entries(unique) < 0
        if missing.all():
            return unique
        return self.pick(unique, missing)

    def passed_among(self, names: Sequence[str]) -> list[str]:
        """The names that passed, in order (a name given twice is listed twice). All must be decided."""
        entries = self._decided_entries(names)
        passed = self._status[entries] == _PASSED
        return np.array(names, dtype=object)[passed].tolist()  # type: ignore[no-any-return]

    def answer(self, names: Sequence[str]) -> tuple[list[str], dict[str, str], dict[str, str]]:
        """Filter's answer for the names: (passed in order, failed name -> reason, unresolvable
        name -> reason), the maps in name order, built from arrays. All must be decided."""
        entries = self._decided_entries(names)
        status = self._status[entries]
        named = np.array(names, dtype=object)
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
