"""HeldLedger: the devices held by allocated and assumed claims, updated by the diff of each change.

`collect_allocated` (extender.claims) answers the same question by scanning every claim; the
placement service asks after every claim event, so at scale that scan (and rebuilding the free
row mask from every allocation) dominated. The ledger keeps what each source holds (a claim's
`status.allocation`, or an assumed allocation whose claim write is not visible yet) and counts
per device, so a change costs the devices of the changed claims: it reads the claim keys changed
since its generation from the state's change log and re-parses only those allocations.

Rules kept from `collect_allocated`: results with adminAccess hold nothing; a share holds its
device and adds its consumed capacity; an assumed allocation whose claim already shows the same
devices (same uid) does not count twice, while one whose claim shows a *different* allocation
still counts (the double-allocation race written out at `collect_allocated`). `allocated()`
equals `collect_allocated` over the same claims and assumed entries (devices, shared ids, summed capacity).

Single-threaded: used by placement on its worker thread (`extender.worker`).
"""

from __future__ import annotations

from typing import Any

from extender.allocator.model import DeviceID
from extender.claims import AllocatedDevices, HeldDevices, held_devices, same_devices
from extender.cluster.state import ADDED, DELETED, ClusterState, Key, object_key
from extender.objects import Obj
from extender.quantity import Quantity

Source = tuple[str, Any]  # ("claim", state key) or ("assumed", claim uid)


class HeldLedger:
    """Per-source holdings and per-device counts (see module docstring)."""

    def __init__(self) -> None:
        self.parsed = 0  # allocations parsed so far (tests count re-parses)
        self._reset()

    def _reset(self) -> None:
        self.generation: int | None = None  # claims generation the claim part reflects
        self._sources: dict[Source, tuple[Obj, HeldDevices]] = {}
        self._rank: dict[Key, int] = {}  # every claim's place in the state's iteration order
        self._next_rank = 0
        self._claim_uid: dict[Key, Any] = {}  # allocated claims' uids, for the assumed rule
        self._written: dict[Any, set[Key]] = {}  # uid -> keys of the allocated claims carrying it
        self._assumed: dict[str, Obj] = {}  # the assumed entries seen last
        self._exclusive: dict[DeviceID, int] = {}
        self._shares: dict[tuple[DeviceID, str], int] = {}
        self._consumed: dict[DeviceID, dict[Source, list[dict[str, Quantity]]]] = {}
        self._aggregated: dict[DeviceID, dict[str, Quantity]] = {}
        self.held: dict[DeviceID, int] = {}  # holdings per device (exclusive and shares)

    # ----------------------------------------------------------------- updates
    def update(self, state: ClusterState, assumed: dict[str, Obj]) -> set[DeviceID] | None:
        """Catch up with the state and the active assumed entries.

        Returns the devices whose holdings changed, or None after a full rescan (first call,
        relist, or the change log no longer reaches back): then every device may have changed.
        """
        touched: set[DeviceID] = set()
        uids: set[Any] = set()  # uids whose claim's allocation came or went
        changes = (
            state.changes_since("ResourceClaim", self.generation) if self.generation is not None else None
        )
        if changes is None:
            self._rescan(state)
        else:
            for key, op in changes:
                if op == ADDED:
                    self._rank[key] = self._next_rank
                    self._next_rank += 1
                elif op == DELETED:
                    self._rank.pop(key, None)
            for namespace, name in dict.fromkeys(key for key, _ in changes):
                claim = state.get("ResourceClaim", name, namespace)
                uids.update(self._set_claim((namespace, name), claim, touched))
        self._update_assumed(assumed, uids, touched)
        self.generation = state.claims_generation
        self._recompute_capacity(touched if changes is not None else set(self._consumed))
        return touched if changes is not None else None

    def _rescan(self, state: ClusterState) -> None:
        """Start over from every claim, re-using the parse of allocations seen before."""
        previous = {id(allocation): held for allocation, held in self._sources.values()}
        keep_alive = self._sources  # the ids above stay unique while the old entries live
        self._reset()
        for claim in state.iter("ResourceClaim"):
            key = object_key(claim)
            self._rank[key] = self._next_rank
            self._next_rank += 1
            allocation = (claim.get("status") or {}).get("allocation")
            if allocation:
                held = previous.get(id(allocation))
                self._add_claim(key, claim, allocation, held, set())
        del keep_alive

    def _set_claim(self, key: Key, claim: Obj | None, touched: set[DeviceID]) -> set[Any]:
        """Make the claim's source match `claim` (None: deleted); returns uids whose written
        state may have changed (their assumed entries are re-checked)."""
        source: Source = ("claim", key)
        allocation = ((claim or {}).get("status") or {}).get("allocation") or None
        current = self._sources.get(source)
        if current is not None and current[0] is allocation:
            return set()
        uids: set[Any] = set()
        if current is not None:
            self._remove(source, touched)
            uid = self._claim_uid.pop(key)
            self._written[uid].discard(key)
            if not self._written[uid]:
                del self._written[uid]
            uids.add(uid)
        if claim is not None and allocation:
            uids.add(self._add_claim(key, claim, allocation, None, touched))
        return uids

    def _add_claim(
        self, key: Key, claim: Obj, allocation: Obj, held: HeldDevices | None, touched: set[DeviceID]
    ) -> Any:
        uid = (claim.get("metadata") or {}).get("uid", "")
        self._claim_uid[key] = uid
        self._written.setdefault(uid, set()).add(key)
        self._add(("claim", key), allocation, held, touched)
        return uid

    def _update_assumed(self, assumed: dict[str, Obj], uids: set[Any], touched: set[DeviceID]) -> None:
        """Assumed entries count unless their claim (same uid) visibly holds the same devices."""
        for uid in {*assumed, *self._assumed, *uids}:
            source: Source = ("assumed", uid)
            wanted = assumed.get(uid)
            if wanted is not None and any(
                same_devices(self._sources[("claim", key)][0], wanted) for key in self._written.get(uid, ())
            ):
                wanted = None  # its write is visible: counted once, as the claim's
            current = self._sources.get(source)
            if current is not None and current[0] is wanted:
                continue
            if current is not None:
                self._remove(source, touched)
            if wanted:
                self._add(source, wanted, None, touched)
        self._assumed = dict(assumed)

    def _add(self, source: Source, allocation: Obj, held: HeldDevices | None, touched: set[DeviceID]) -> None:
        if held is None:
            held = held_devices(allocation)
            self.parsed += 1
        self._sources[source] = (allocation, held)
        for device_id in held.devices:
            self._exclusive[device_id] = self._exclusive.get(device_id, 0) + 1
            self.held[device_id] = self.held.get(device_id, 0) + 1
            touched.add(device_id)
        for device_id, share_id, consumed in held.shares:
            self._shares[(device_id, share_id)] = self._shares.get((device_id, share_id), 0) + 1
            self.held[device_id] = self.held.get(device_id, 0) + 1
            self._consumed.setdefault(device_id, {}).setdefault(source, []).append(consumed)
            touched.add(device_id)

    def _remove(self, source: Source, touched: set[DeviceID]) -> None:
        _, held = self._sources.pop(source)
        for device_id in held.devices:
            _decrement(self._exclusive, device_id)
            _decrement(self.held, device_id)
            touched.add(device_id)
        for device_id, share_id, _ in held.shares:
            _decrement(self._shares, (device_id, share_id))
            _decrement(self.held, device_id)
            parts = self._consumed[device_id]
            parts.pop(source, None)
            if not parts:
                del self._consumed[device_id]
            touched.add(device_id)

    def _recompute_capacity(self, devices: set[DeviceID]) -> None:
        """Re-sum the consumed capacity of the devices (a new dict each: readers keep the old).

        Parts are added in `collect_allocated`'s order (claims as the state lists them, then the
        assumed entries), so even the text format of a sum (its first part's) is the same.
        """
        assumed_position: dict[str, int] | None = None
        for device_id in devices:
            parts = self._consumed.get(device_id)
            if parts is None:
                self._aggregated.pop(device_id, None)
                continue
            sources = list(parts)
            if len(sources) > 1:
                if assumed_position is None:
                    assumed_position = {uid: i for i, uid in enumerate(self._assumed)}
                order = assumed_position
                sources.sort(key=lambda s: (0, self._rank[s[1]]) if s[0] == "claim" else (1, order[s[1]]))
            total: dict[str, Quantity] = {}
            for consumed_list in map(parts.__getitem__, sources):
                for consumed in consumed_list:
                    for name, amount in consumed.items():
                        total[name] = total[name] + amount if name in total else amount
            self._aggregated[device_id] = total

    # ----------------------------------------------------------------- reading
    def allocated(self) -> AllocatedDevices:
        """What `collect_allocated` would return now (fresh immutable sets; the dict is a copy)."""
        return AllocatedDevices(frozenset(self._exclusive), frozenset(self._shares), dict(self._aggregated))


def _decrement(counts: dict[Any, int], key: Any) -> None:
    left = counts[key] - 1
    if left:
        counts[key] = left
    else:
        del counts[key]
