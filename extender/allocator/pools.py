"""Gather the resource pools usable from one node (spec dra.md §3.2), linear in the cluster.

A pool is complete when all `resourceSliceCount` slices of its newest generation are present,
obsolete when some slice of a newer generation exists elsewhere (the pool is ignored),
incomplete otherwise (kept as a marker: `All` requests fail on it), and invalid when its slices
contradict each other (duplicate device names, unknown counter sets). The order of the result
is the first-fit search order: pools without binding-condition devices first, each group sorted
by driver then pool name; slices by name; devices as listed.

Upstream gathers per node over every slice, which is quadratic in a cluster where every node
publishes a counter slice (a counter slice is relevant to every node). Here the node-independent
part is computed once per pool (`PoolFacts`): which slices are relevant everywhere, which only to
some nodes, generations, counter sets and the validation results. `PoolCatalog` then gives each
node only the pools its own slices touch, re-built per node, plus one shared tuple of the pools
every node sees the same way (`NodePools`). The result is exactly upstream's per-node list.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar, overload

from extender.allocator.compatibility import slice_uses_groups
from extender.allocator.features import Features
from extender.allocator.model import PoolID, Slice
from extender.allocator.nodeselection import Node, node_matches
from extender.quantity import Quantity

CounterSets = dict[str, dict[str, Quantity]]
_K = TypeVar("_K")
_V = TypeVar("_V")
_T = TypeVar("_T")
#: A `Replaced` map is made a plain dict again once this share of its keys was replaced.
_FLATTEN_SHARE = 16


class Replaced(Mapping[_K, _V], Generic[_K, _V]):
    """A dict shared with the catalog a later one was made from (`PoolCatalog.replacing`), plus
    the entries the later one replaced or added: a one-slice change copies none of the cluster's
    per-pool and per-node dicts (tens of thousands of entries at 5,000 nodes). Never changed in
    place; made a plain dict again once a sixteenth of its keys were replaced."""

    __slots__ = ("_added", "_base", "_changes")

    def __init__(self, base: Mapping[_K, _V], changes: Mapping[_K, _V]) -> None:
        if isinstance(base, Replaced):
            changes = {**base._changes, **changes}
            base = base._base
        if len(changes) * _FLATTEN_SHARE > len(base):
            base, changes = {**base, **changes}, {}
        self._base: Mapping[_K, _V] = base
        self._changes: dict[_K, _V] = dict(changes)
        self._added = sum(1 for key in self._changes if key not in base)

    def __getitem__(self, key: _K) -> _V:
        changes = self._changes
        if key in changes:
            return changes[key]
        return self._base[key]

    @overload
    def get(self, key: _K, /) -> _V | None: ...
    @overload
    def get(self, key: _K, default: _V | _T, /) -> _V | _T: ...
    def get(self, key: _K, default: object = None) -> object:
        changes = self._changes
        if key in changes:
            return changes[key]
        return self._base.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._changes or key in self._base

    def __iter__(self) -> Iterator[_K]:
        yield from self._base
        if self._added:
            yield from (key for key in self._changes if key not in self._base)

    def __len__(self) -> int:
        return len(self._base) + self._added


@dataclass(slots=True)
class Pool:
    """One pool as seen from one node. Shared by reference between nodes that see it alike."""

    id: PoolID
    incomplete: bool = False
    invalid: bool = False
    invalid_reason: str = ""
    slices: list[Slice] = field(default_factory=list)  # device slices targeting the node
    slices_not_targeting_node: list[Slice] = field(default_factory=list)
    counter_sets: CounterSets = field(default_factory=dict)
    # Cache of `has_binding_conditions` (pools are not changed after they are built).
    _binding: bool | None = field(default=None, repr=False, compare=False)

    @property
    def has_binding_conditions(self) -> bool:
        if self._binding is None:
            self._binding = any(d.binding_conditions for s in self.slices for d in s.devices)
        return self._binding


def search_key(pool: Pool) -> tuple[bool, PoolID]:
    """Where a pool goes in the search order: binding-condition pools last, then by id."""
    return pool.has_binding_conditions, pool.id


def invalid_pools_detail(pools: Iterable[Pool]) -> str:
    """Each invalid pool and why (upstream's error names neither), so an operator finds the slices."""
    return "; ".join(f"pool {p.id}: {p.invalid_reason}" for p in pools if p.invalid)


def slice_is_relevant(slice_: Slice, node: Node | None, features: Features) -> bool:
    """Whether a slice contributes to the pools seen from `node`."""
    if features.v137 and not features.compatibility_groups and slice_uses_groups(slice_):
        return False  # ignored while DRADeviceCompatibilityGroups is off (see PoolFacts)
    if not features.partitionable_devices and (slice_.per_device_node_selection or slice_.shared_counters):
        return False
    if slice_.shared_counters and not features.v137:
        return True  # 1.36: counter slices matter to every node; 1.37 goes by their node selection
    if slice_.node_name or slice_.all_nodes or slice_.node_selector is not None:
        return node_matches(
            node, node_name=slice_.node_name, all_nodes=slice_.all_nodes, node_selector=slice_.node_selector
        )
    if slice_.per_device_node_selection:
        return any(
            node_matches(node, node_name=d.node_name, all_nodes=d.all_nodes, node_selector=d.node_selector)
            for d in slice_.devices
        )
    return False  # some future selection mechanism we do not understand


# How a slice's relevance depends on the node (the same decisions as `slice_is_relevant`).
_NOWHERE, _EVERYWHERE, _NAMED, _SELECTED = range(4)


def _reach(slice_: Slice, features: Features) -> tuple[int, tuple[str, ...]]:
    """(kind, node names): relevant nowhere, everywhere, to the named nodes only, or per selector."""
    if not features.partitionable_devices and (slice_.per_device_node_selection or slice_.shared_counters):
        return _NOWHERE, ()
    if slice_.shared_counters and not features.v137:
        return _EVERYWHERE, ()
    if slice_.node_name:
        return _NAMED, (slice_.node_name,)
    if slice_.all_nodes:
        return _EVERYWHERE, ()
    if slice_.node_selector is not None:
        return _SELECTED, ()
    if slice_.per_device_node_selection:
        if any(not d.node_name and d.all_nodes for d in slice_.devices):
            return _EVERYWHERE, ()
        if any(not d.node_name and d.node_selector is not None for d in slice_.devices):
            return _SELECTED, ()
        names = tuple(dict.fromkeys(d.node_name for d in slice_.devices if d.node_name))
        return (_NAMED, names) if names else (_NOWHERE, ())
    return _NOWHERE, ()


class PoolFacts:
    """The node-independent part of one pool: computed once per pool, re-used while it is unchanged.

    `slices` are all slices of the pool in cluster order (also the ones no node can use: they
    still count for the obsolete/incomplete check). `gather` is spec steps 3-6 for one node's
    relevant slices; its results are memoised by the set of relevant slices, so every node that
    sees the pool alike gets the same Pool object.
    """

    __slots__ = (
        "_counter_sets",
        "_gathered",
        "_position",
        "_problems",
        "builds",
        "by_generation",
        "everywhere",
        "features",
        "id",
        "key",
        "max_generation",
        "named",
        "selected",
        "slices",
    )

    def __init__(self, pool_id: PoolID, slices: Sequence[Slice], features: Features) -> None:
        self.id = pool_id
        self.features = features
        self.slices = tuple(slices)
        self.key = tuple(id(s) for s in self.slices)  # the slices are held, so ids stay unique
        self.everywhere: list[Slice] = []
        self.named: dict[str, list[Slice]] = {}
        self.selected: list[Slice] = []
        self.by_generation: dict[int, list[Slice]] = {}
        # 1.37 with DRADeviceCompatibilityGroups off: slices that use groups are ignored (neither
        # relevant nor counted for completeness), which leaves their pool incomplete; they still
        # count for "obsolete" (max_generation), as upstream's checkSlicesInPool sees them.
        ignore_grouped = features.v137 and not features.compatibility_groups
        for slice_ in self.slices:
            if ignore_grouped and slice_uses_groups(slice_):
                continue
            self.by_generation.setdefault(slice_.generation, []).append(slice_)
            kind, names = _reach(slice_, features)
            if kind == _EVERYWHERE:
                self.everywhere.append(slice_)
            elif kind == _SELECTED:
                self.selected.append(slice_)
            elif kind == _NAMED:
                for name in names:
                    self.named.setdefault(name, []).append(slice_)
        self.max_generation: int | None = max((s.generation for s in self.slices), default=None)
        self._position = {id(s): i for i, s in enumerate(self.slices)}
        self._gathered: dict[tuple[int, ...], tuple[tuple[Slice, ...], Pool | None]] = {}
        self._counter_sets: dict[tuple[int, ...], tuple[tuple[Slice, ...], CounterSets, str]] = {}
        self._problems: dict[tuple[int, int], tuple[Slice, str]] = {}
        self.builds = 0  # pool builds done (not memo hits): the linearity tests count them

    # ----------------------------------------------------------------- per node
    def relevant_for(self, name: str, node: Node | None) -> list[Slice] | None:
        """The slices relevant to the node in cluster order; None if it sees only `everywhere`."""
        own = self.named.get(name, [])
        if self.selected:
            own = own + [s for s in self.selected if slice_is_relevant(s, node, self.features)]
        if not own:
            return None
        if not self.everywhere and len(own) == 1:
            return own
        position = self._position
        return sorted([*self.everywhere, *own], key=lambda s: position[id(s)])

    def shared_view(self) -> Pool | None:
        """The pool as seen by every node without slices of its own in it (None: not seen)."""
        return self.gather(self.everywhere) if self.everywhere else None

    def gather(self, relevant: Sequence[Slice]) -> Pool | None:
        """Spec §3.2 steps 3-6 for this pool given a node's relevant slices (cluster order).

        Returns None when the pool is obsolete for the node (it is then left out).
        """
        key = tuple(id(s) for s in relevant)
        memo = self._gathered.get(key)
        if memo is not None:
            return memo[1]
        pool = self._gather(relevant)
        self._gathered[key] = (tuple(relevant), pool)  # holding the slices keeps the key's ids unique
        return pool

    def _gather(self, relevant: Sequence[Slice]) -> Pool | None:
        generation = max(s.generation for s in relevant)
        group = [s for s in relevant if s.generation == generation]
        expected = group[0].resource_slice_count
        all_for_pool: list[Slice] | None = None
        if len(group) != expected:
            if self.max_generation is not None and generation < self.max_generation:
                return None  # obsolete: the driver is replacing this generation
            all_for_pool = self.by_generation.get(generation, [])
            if len(all_for_pool) != expected:
                return Pool(id=self.id, incomplete=True)
        self.builds += 1
        return self._build(group, all_for_pool)

    def _build(self, group: list[Slice], all_for_pool: list[Slice] | None) -> Pool:
        slices = sorted(group, key=lambda s: s.name)
        partitionable = self.features.partitionable_devices
        if partitionable:
            counter_slices = [s for s in slices if s.shared_counters]
            device_slices = [s for s in slices if not s.shared_counters]
            if self.features.v137:
                # 1.37: a counter slice not targeting the node is still the pool's (v0.37.2
                # pools_experimental.go converts every slice of the complete pool).
                counter_slices += [s for s in self._not_targeting(slices, all_for_pool) if s.shared_counters]
        else:
            counter_slices, device_slices = [], slices

        seen: set[str] = set()
        for slice_ in device_slices:
            for device in slice_.devices:
                if device.name in seen:
                    return Pool(
                        id=self.id, invalid=True, invalid_reason=f"duplicate device name {device.name}"
                    )
                seen.add(device.name)
        if not partitionable:
            return Pool(id=self.id, slices=device_slices)

        counter_sets, reason = self._counter_sets_of(counter_slices)
        if reason:
            return Pool(id=self.id, invalid=True, invalid_reason=reason)
        reason = self._consumption_problem(counter_sets, slices)
        if reason:
            return Pool(id=self.id, invalid=True, invalid_reason=reason)

        # Counter slices among them (1.37 only: 1.36 always counts them as targeting) hold no devices.
        not_targeting = [s for s in self._not_targeting(slices, all_for_pool) if not s.shared_counters]
        if not_targeting:
            reason = self._consumption_problem(counter_sets, not_targeting)
            if reason:
                return Pool(id=self.id, invalid=True, invalid_reason=reason)
        return Pool(
            id=self.id,
            slices=device_slices,
            slices_not_targeting_node=not_targeting,
            counter_sets=counter_sets,
        )

    def _not_targeting(self, slices: list[Slice], all_for_pool: list[Slice] | None) -> list[Slice]:
        """The slices of the complete pool the node's relevant slices leave out (cluster order).

        1.36 validates their devices' counter consumption; 1.37 also takes the counter sets of
        the counter slices among them (and validates the others' consumption).
        """
        if all_for_pool is None or len(all_for_pool) == len(slices):
            return []
        names = {s.name for s in slices}
        return [s for s in all_for_pool if s.name not in names]

    def _counter_sets_of(self, counter_slices: list[Slice]) -> tuple[CounterSets, str]:
        """The pool's counter sets from its counter slices (sorted by name), or a duplicate's reason.

        Memoised: the counter slices of one generation are the same for every node, and sharing
        the dict keeps one per pool (the allocator copies it before subtracting).
        """
        key = tuple(id(s) for s in counter_slices)
        memo = self._counter_sets.get(key)
        if memo is not None:
            return memo[1], memo[2]
        counter_sets: CounterSets = {}
        reason = ""
        for slice_ in counter_slices:
            for name, counters in slice_.shared_counters:
                if name in counter_sets:
                    reason = f"duplicate counter set name {name}"
                    break
                counter_sets[name] = counters
            if reason:
                break
        self._counter_sets[key] = (tuple(counter_slices), counter_sets, reason)
        return counter_sets, reason

    def _consumption_problem(self, counter_sets: CounterSets, slices: Iterable[Slice]) -> str:
        """The first unknown counter set or counter consumed by the slices' devices ("" if none)."""
        for slice_ in slices:
            key = (id(slice_), id(counter_sets))  # counter_sets is held by `_counter_sets`
            memo = self._problems.get(key)
            if memo is None:
                memo = (slice_, _counter_consumption_problem(counter_sets, (slice_,)))
                self._problems[key] = memo
            if memo[1]:
                return memo[1]
        return ""


class NodePools(Sequence[Pool]):
    """One node's pools in search order: its own pools merged into the cluster's shared tuple.

    `own` are the pools the node's slices touch (built for it), `hidden` the ids of those pools
    (also when the node sees the pool as obsolete), `shared` the pools every other node sees
    alike, in search order with `shared_keys`. Iterating merges them in O(len(shared) + len(own));
    nothing is copied per node, so the index holds each shared marker once.
    """

    __slots__ = ("hidden", "own", "own_keys", "shared", "shared_keys")

    def __init__(
        self,
        own: Sequence[Pool],
        hidden: frozenset[PoolID] | set[PoolID],
        shared: tuple[Pool, ...],
        shared_keys: tuple[tuple[bool, PoolID], ...],
    ) -> None:
        order = sorted(range(len(own)), key=lambda i: search_key(own[i]))
        self.own = tuple(own[i] for i in order)
        self.own_keys = tuple(search_key(p) for p in self.own)
        self.hidden = hidden
        self.shared = shared
        self.shared_keys = shared_keys

    def with_shared(
        self, shared: tuple[Pool, ...], shared_keys: tuple[tuple[bool, PoolID], ...]
    ) -> NodePools:
        """The same own pools merged into another shared tuple (nothing sorted again)."""
        pools = NodePools.__new__(NodePools)
        pools.own, pools.own_keys, pools.hidden = self.own, self.own_keys, self.hidden
        pools.shared, pools.shared_keys = shared, shared_keys
        return pools

    def __iter__(self) -> Iterator[Pool]:
        own, own_keys, hidden = self.own, self.own_keys, self.hidden
        if not own and not hidden:
            yield from self.shared
            return
        i = 0
        for pool, key in zip(self.shared, self.shared_keys, strict=True):
            while i < len(own) and own_keys[i] < key:
                yield own[i]
                i += 1
            if pool.id not in hidden:
                yield pool
        yield from own[i:]

    def __len__(self) -> int:
        if not self.hidden:
            return len(self.shared) + len(self.own)
        return len(self.own) + sum(1 for p in self.shared if p.id not in self.hidden)

    @overload
    def __getitem__(self, item: int) -> Pool: ...
    @overload
    def __getitem__(self, item: slice) -> list[Pool]: ...
    def __getitem__(self, item: int | slice) -> Pool | list[Pool]:
        return list(self)[item]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, NodePools | list | tuple):
            return list(self) == list(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"NodePools({list(self)!r})"


class PoolCatalog:
    """Every pool of the cluster, node-independent parts done once (see module docstring).

    Built from all parsed slices in cluster order; `previous` lends the PoolFacts (and with them
    the memoised Pool objects) of pools whose slices are the very same objects.
    """

    #: The pools every node sees alike, in search order, with their search keys (`NodePools`).
    shared: tuple[Pool, ...]
    shared_keys: tuple[tuple[bool, PoolID], ...]
    #: Shared pools whose devices every node can use (they give rows), and shared invalid pools.
    shared_with_devices: tuple[Pool, ...]
    shared_invalid: frozenset[PoolID]
    #: id(shared marker) -> its place in `shared` (`shared_positions`), made on first need.
    _shared_at: dict[int, int] | None

    def __init__(
        self, slices: Iterable[Slice], features: Features, previous: PoolCatalog | None = None
    ) -> None:
        self.features = features
        by_pool: dict[PoolID, list[Slice]] = {}
        for slice_ in slices:
            by_pool.setdefault(slice_.pool_id, []).append(slice_)
        self.by_pool: Mapping[PoolID, list[Slice]] = by_pool
        reuse: Mapping[PoolID, PoolFacts] = (
            previous.facts if previous is not None and previous.features == features else {}
        )
        facts_of: dict[PoolID, PoolFacts] = {}
        named: dict[str, list[PoolFacts]] = {}  # node name -> pools with slices naming it
        self.facts: Mapping[PoolID, PoolFacts] = facts_of
        self.named: Mapping[str, list[PoolFacts]] = named
        self.selected: list[PoolFacts] = []  # pools with slices that need a node-selector match
        self.reused = 0
        self._builds = 0  # pool builds done through this catalog (`builds`)
        #: Facts built for this catalog, and `previous`'s facts not re-used (changed or gone): the
        #: nodes they name are the only ones whose pools can differ from `previous`'s.
        self.fresh: list[PoolFacts] = []
        self.dropped: list[PoolFacts] = []
        shared: list[Pool] = []
        for pool_id, members in by_pool.items():
            facts = reuse.get(pool_id)
            if facts is not None and facts.key == tuple(id(s) for s in members):
                self.reused += 1
            else:
                facts = PoolFacts(pool_id, members, features)
                self.fresh.append(facts)
            facts_of[pool_id] = facts
            for name in facts.named:
                named.setdefault(name, []).append(facts)
            if facts.selected:
                self.selected.append(facts)
            before = facts.builds
            view = facts.shared_view()
            self._builds += facts.builds - before
            if view is not None:
                shared.append(view)
        shared.sort(key=search_key)
        self._set_shared(shared)
        # Pool id -> its place in cluster order (first slice), for `replacing` to keep lists in it.
        self._order = {pool_id: i for i, pool_id in enumerate(by_pool)}
        if reuse and self.reused != len(reuse):
            self.dropped = [f for pool_id, f in reuse.items() if self.facts.get(pool_id) is not f]

    @classmethod
    def replacing(cls, previous: PoolCatalog, replaced: Sequence[tuple[Slice, Slice]]) -> PoolCatalog | None:
        """`previous` with some slices replaced in place (old, new; same pool, same position in
        cluster order), the same as a catalog built from the new slice list; None when a
        replacement moves a slice to another pool. Costs the touched pools, not every pool."""
        by_pool = previous.by_pool
        members: dict[PoolID, list[Slice]] = {}
        for old, new in replaced:
            pool_id = old.pool_id
            if new.pool_id != pool_id or pool_id not in by_pool:
                return None
            current = members.get(pool_id)
            if current is None:
                current = members[pool_id] = list(by_pool[pool_id])
            at = next((i for i, s in enumerate(current) if s is old), -1)
            if at < 0:
                return None
            current[at] = new
        self = cls.__new__(cls)
        self.features = previous.features
        # The touched pools' entries over `previous`'s dicts, shared (`Replaced`).
        facts_changes: dict[PoolID, PoolFacts] = {}
        named_changes: dict[str, list[PoolFacts]] = {}
        unnamed: set[str] = set()  # nodes no pool names any more
        self.fresh, self.dropped = [], []
        self._builds = 0
        views: dict[int, Pool | None] = {}  # id(old shared view) -> the new one (None: gone)
        added: list[Pool] = []
        selected = list(previous.selected)
        for pool_id, slices in members.items():
            old_facts = previous.facts[pool_id]
            facts = PoolFacts(pool_id, slices, self.features)
            facts_changes[pool_id] = facts
            self.fresh.append(facts)
            self.dropped.append(old_facts)
            for name in {*old_facts.named, *facts.named}:
                earlier = named_changes.get(name)
                if earlier is None:
                    earlier = [] if name in unnamed else previous.named.get(name, [])
                listed = [f for f in earlier if f is not old_facts]
                if name in facts.named:
                    listed.append(facts)
                    listed.sort(key=lambda f: previous._order.get(f.id, 0))
                if listed:
                    named_changes[name] = listed
                    unnamed.discard(name)
                else:
                    named_changes.pop(name, None)
                    unnamed.add(name)
            if old_facts.selected or facts.selected:
                selected = [f for f in selected if f is not old_facts]
                if facts.selected:
                    selected.append(facts)
                    selected.sort(key=lambda f: previous._order.get(f.id, 0))
            old_view = old_facts.shared_view()
            before = facts.builds
            view = facts.shared_view()
            self._builds += facts.builds - before
            if old_view is not None:
                views[id(old_view)] = view
            elif view is not None:
                added.append(view)
        self.by_pool = Replaced(by_pool, members)
        self.facts = Replaced(previous.facts, facts_changes)
        unnamed = {name for name in unnamed if name in previous.named}  # not a set op: that walks the map
        if unnamed:  # keys go: a plain dict (rare: a pool stopped naming a node)
            named = {**previous.named, **named_changes}
            for name in unnamed:
                del named[name]
            self.named = named
        else:
            self.named = Replaced(previous.named, named_changes)
        self.selected = selected
        self._order = previous._order
        self.reused = len(self.facts) - len(self.fresh)
        if not views and not added:  # no shared marker changed (e.g. a node-local device slice)
            self._take_shared(previous)
            return self
        if not added and self._replace_in_place(previous, views):
            return self
        markers = [views.get(id(p), p) for p in previous.shared]
        shared = [p for p in markers if p is not None]
        shared += added
        shared.sort(key=search_key)
        self._set_shared(shared)
        return self

    def _take_shared(self, previous: PoolCatalog) -> None:
        self.shared = previous.shared
        self.shared_keys = previous.shared_keys
        self.shared_with_devices = previous.shared_with_devices
        self.shared_invalid = previous.shared_invalid
        self._shared_at = previous._shared_at

    def _replace_in_place(self, previous: PoolCatalog, views: dict[int, Pool | None]) -> bool:
        """Each changed marker in the place of the one it replaces, when it keeps that place's
        search key (mostly a pool re-published with the same devices): the shared keys stay,
        nothing is sorted, keyed or scanned again. False when a marker goes or moves."""
        at = previous.shared_positions()
        shared = list(previous.shared)
        keys = previous.shared_keys
        changed: list[tuple[Pool, Pool]] = []
        for old_id, view in views.items():
            i = at.get(old_id)
            if view is None or i is None or search_key(view) != keys[i]:
                return False
            if view is not shared[i]:
                changed.append((shared[i], view))
                shared[i] = view
        if not changed:
            self._take_shared(previous)
            return True
        self.shared = tuple(shared)
        self.shared_keys = keys
        pools = [pool for pair in changed for pool in pair]
        self.shared_with_devices = (
            tuple(p for p in self.shared if _gives_devices(p))
            if any(_gives_devices(p) for p in pools)
            else previous.shared_with_devices
        )
        self.shared_invalid = (
            frozenset(p.id for p in self.shared if p.invalid)
            if any(p.invalid for p in pools)
            else previous.shared_invalid
        )
        moved = dict(at)
        for old, new in changed:
            moved[id(new)] = moved.pop(id(old))
        self._shared_at = moved
        return True

    def shared_positions(self) -> dict[int, int]:
        """id(shared marker) -> its place in `shared` (made on first need; the markers are held
        by `shared`, so their ids stay theirs)."""
        if self._shared_at is None:
            self._shared_at = {id(p): i for i, p in enumerate(self.shared)}
        return self._shared_at

    def _set_shared(self, shared: list[Pool]) -> None:
        self.shared = tuple(shared)
        self.shared_keys = tuple(search_key(p) for p in self.shared)
        self.shared_with_devices = tuple(p for p in self.shared if _gives_devices(p))
        self.shared_invalid = frozenset(p.id for p in self.shared if p.invalid)
        self._shared_at = None

    def pools_for(self, name: str, node: Node | None) -> NodePools:
        """The node's pools, exactly as upstream's per-node gather would list them."""
        own: list[Pool] = []
        hidden: set[PoolID] = set()
        candidates = self.named.get(name, ())
        if self.selected:
            candidates = list(dict.fromkeys([*candidates, *self.selected]))
        for facts in candidates:
            relevant = facts.relevant_for(name, node)
            if relevant is None:
                continue
            hidden.add(facts.id)
            before = facts.builds
            pool = facts.gather(relevant)
            self._builds += facts.builds - before
            if pool is not None:
                own.append(pool)
        return NodePools(own, hidden, self.shared, self.shared_keys)

    @property
    def builds(self) -> int:
        """Pool builds done through this catalog so far (memo hits and other catalogs' do not
        count): counted as they happen, not summed over every pool."""
        return self._builds


def _gives_devices(pool: Pool) -> bool:
    """Whether a shared pool gives every node rows (`PoolCatalog.shared_with_devices`)."""
    return bool(pool.slices) and not pool.invalid and not pool.incomplete


def gather_pools(
    candidate_slices: Iterable[Slice],
    node: Node | None,
    features: Features,
    *,
    all_slices_of_pool: dict[PoolID, Sequence[Slice]],
) -> list[Pool]:
    """Pools usable from `node`, in search order (the one-node form, for callers without an index).

    Args:
        candidate_slices: slices that may be relevant for the node (a superset is fine).
        node: the Node object (labels matter for node selectors).
        features: allocator feature switches.
        all_slices_of_pool: every slice in the cluster by pool, for the obsolete/incomplete check.
    """
    grouped: dict[PoolID, list[Slice]] = {}
    for slice_ in candidate_slices:
        if slice_is_relevant(slice_, node, features):
            grouped.setdefault(slice_.pool_id, []).append(slice_)
    pools = []
    for pool_id, relevant in grouped.items():
        pool = PoolFacts(pool_id, all_slices_of_pool.get(pool_id, ()), features).gather(relevant)
        if pool is not None:
            pools.append(pool)
    pools.sort(key=search_key)
    return pools


def _counter_consumption_problem(counter_sets: CounterSets, slices: Iterable[Slice]) -> str:
    for slice_ in slices:
        for device in slice_.devices:
            for set_name, counters in device.consumes_counters:
                counter_set = counter_sets.get(set_name)
                if counter_set is None:
                    return f"counter set {set_name} not found"
                for counter in counters:
                    if counter not in counter_set:
                        return f"counter {counter} not found in counter set {set_name}"
    return ""
