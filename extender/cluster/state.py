"""ClusterState: the Kubernetes objects the extender knows, by kind, with change generations.

Lifecycle: one writer at a time. In file mode the loader fills it once and the in-memory binder
then updates claims and pods; in cluster mode the watch tasks apply events. All writers and
readers run on the placement's worker thread (`extender.worker`), so no reader sees a
half-applied event. Readers that need a
consistent view across several calls (the device index, the allocator) take the generation
numbers and rebuild their derived views when they change.

Two generations are kept because they invalidate different things:
- `devices_generation` changes with Nodes, ResourceSlices, DeviceClasses and DeviceTaintRules
  (the device index and CEL masks depend on them);
- `claims_generation` changes with ResourceClaims, ResourceClaimTemplates, Pods and Namespaces
  (the allocated-device state and pod claim resolution depend on them).

Claim-side changes are also logged by key (`changed_since`), so a reader can update what it
derived from them (e.g. the devices held by allocated claims) by the diff instead of a rescan.
The log is bounded; a reader that fell further behind, or asks across a relist, gets None and
rescans. Device-side changes are logged the same way by devices generation
(`device_changes_since`), so the device index can re-read the objects that changed instead of
every slice and node.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator

from extender.cluster.compact import SHARED
from extender.objects import Obj

#: Kinds the extender reads. Everything else is skipped by the loaders.
KINDS: tuple[str, ...] = (
    "Node",
    "ResourceSlice",
    "DeviceClass",
    "ResourceClaim",
    "ResourceClaimTemplate",
    "Pod",
    "Namespace",
    "DeviceTaintRule",
    "PodGroup",
)
CLUSTER_SCOPED: frozenset[str] = frozenset(
    {"Node", "ResourceSlice", "DeviceClass", "Namespace", "DeviceTaintRule"}
)
DEVICE_KINDS: frozenset[str] = frozenset({"Node", "ResourceSlice", "DeviceClass", "DeviceTaintRule"})

Key = tuple[str, str]  # (namespace, name); namespace is "" for cluster-scoped kinds

#: Claim-side changes kept in the change log; half are dropped when it grows past this.
CHANGE_LOG_LIMIT = 8192
#: Change-log ops (`ClusterState.changes_since`).
ADDED, UPDATED, DELETED = "added", "updated", "deleted"


def object_key(obj: Obj) -> Key:
    """(namespace, name) of a raw object; cluster-scoped kinds get namespace ""."""
    meta = obj.get("metadata") or {}
    namespace = "" if obj.get("kind") in CLUSTER_SCOPED else meta.get("namespace") or "default"
    return namespace, meta.get("name", "")


class ClusterState:
    """Objects by kind and key, plus the two change generations (see module docstring)."""

    def __init__(self) -> None:
        self._objects: dict[str, dict[Key, Obj]] = {kind: {} for kind in KINDS}
        # Objects the kube source refused (extender.validation), with why: pods that use one
        # get that reason instead of "not found". Never holds an object that is also stored.
        self._rejected: dict[str, dict[Key, str]] = {kind: {} for kind in KINDS}
        self.devices_generation = 0
        self.claims_generation = 0
        # (claims_generation after the change, kind, key, op), one entry per claim-side change;
        # op is ADDED (a new key: it goes last in iteration order), UPDATED or DELETED.
        self._log: list[tuple[int, str, Key, str]] = []
        self._log_floor = 0  # the log holds every change after this claims generation...
        self._relisted: dict[str, int] = {}  # ...except for kinds relisted (replaced) since
        # The same for device-side kinds, by devices generation: (generation, kind, key, op).
        self._device_log: list[tuple[int, str, Key, str]] = []
        self._device_log_floor = 0
        self._device_relisted = -1  # devices generation of the last relist of a device kind
        # Shares the repeated parts of stored ResourceSlices (memory; extender.cluster.compact).
        self._compactor = SHARED

    @classmethod
    def from_objects(cls, objects: Iterable[Obj]) -> ClusterState:
        """Build a state from raw objects of the known kinds (others are ignored)."""
        state = cls()
        for obj in objects:
            if obj.get("kind") in KINDS:
                state.upsert(obj)
        return state

    @property
    def generation(self) -> tuple[int, int]:
        """Both generations; any change to either changes this value."""
        return self.devices_generation, self.claims_generation

    def _bump(self, kind: str, key: Key | None = None, op: str = "") -> None:
        """Count a change; a claim-side change of one object (`key`) is logged, a relist is not."""
        if kind in DEVICE_KINDS:
            self.devices_generation += 1
            if key is None:
                self._device_relisted = self.devices_generation
                return
            self._device_log.append((self.devices_generation, kind, key, op))
            if len(self._device_log) > CHANGE_LOG_LIMIT:
                drop = len(self._device_log) // 2
                self._device_log_floor = self._device_log[drop - 1][0]
                del self._device_log[:drop]
            return
        self.claims_generation += 1
        if key is None:
            self._relisted[kind] = self.claims_generation
            return
        self._log.append((self.claims_generation, kind, key, op))
        if len(self._log) > CHANGE_LOG_LIMIT:
            drop = len(self._log) // 2
            self._log_floor = self._log[drop - 1][0]
            del self._log[:drop]

    def changed_since(self, kind: str, generation: int) -> set[Key] | None:
        """Keys of `kind` objects upserted or deleted after claims generation `generation`.

        For claim-side kinds only. None when the log cannot tell (it no longer reaches back that
        far, the kind was relisted since, or the generation is not one this state has had): the
        caller must rescan the kind.
        """
        changes = self.changes_since(kind, generation)
        return None if changes is None else {key for key, _ in changes}

    def changes_since(self, kind: str, generation: int) -> list[tuple[Key, str]] | None:
        """Like `changed_since`, but every change in order, with its op (ADDED/UPDATED/DELETED).

        ADDED marks a key that was not present: it then iterates last, which lets a reader keep
        the state's iteration order without reading every key.
        """
        if kind in DEVICE_KINDS:
            raise ValueError(f"{kind} changes are not logged (only claim-side kinds are)")
        if generation < self._log_floor or generation > self.claims_generation:
            return None
        if self._relisted.get(kind, -1) > generation:
            return None
        start = bisect_right(self._log, generation, key=lambda entry: entry[0])
        return [(key, op) for _, changed, key, op in self._log[start:] if changed == kind]

    def device_changes_since(self, generation: int) -> list[tuple[str, Key, str]] | None:
        """(kind, key, op) of every device-side change after devices generation `generation`, in
        order; None when the log cannot tell (too far back, a relist since, or a generation this
        state has not had): the caller must rescan."""
        if generation < self._device_log_floor or generation > self.devices_generation:
            return None
        if self._device_relisted > generation:
            return None
        start = bisect_right(self._device_log, generation, key=lambda entry: entry[0])
        return [(kind, key, op) for _, kind, key, op in self._device_log[start:]]

    def get_by_key(self, kind: str, key: Key) -> Obj | None:
        """One object by its key (`object_key`), or None."""
        return self._objects[kind].get(key)

    def upsert(self, obj: Obj) -> None:
        """Add or replace one object. The object must carry `kind`; it is stored, not copied
        (its repeated parts are swapped for shared equal ones first: `extender.cluster.compact`),
        and must not be written into afterwards."""
        kind = obj["kind"]
        key = object_key(obj)
        objects = self._objects[kind]
        self._compactor.compact_once(obj, objects.get(key))
        op = UPDATED if key in objects else ADDED
        objects[key] = obj
        self._rejected[kind].pop(key, None)
        self._bump(kind, key, op)

    def delete(self, kind: str, name: str, namespace: str = "") -> Obj | None:
        """Remove one object; returns it, or None if it was not there."""
        key = ("" if kind in CLUSTER_SCOPED else namespace or "default", name)
        removed = self._objects[kind].pop(key, None)
        if self._rejected[kind].pop(key, None) is not None or removed is not None:
            self._bump(kind, key, DELETED)
        return removed

    def reject(self, kind: str, key: Key, reason: str) -> None:
        """Record that the object `key` of `kind` is invalid; a stored version of it is dropped."""
        self._objects[kind].pop(key, None)
        self._rejected[kind][key] = reason
        self._bump(kind, key, DELETED)  # for readers of the change log, the object is gone

    def rejection(self, kind: str, name: str, namespace: str = "") -> str | None:
        """Why the object was refused, or None if it was not."""
        key = ("" if kind in CLUSTER_SCOPED else namespace or "default", name)
        return self._rejected[kind].get(key)

    def replace_kind(self, kind: str, objects: Iterable[Obj], rejected: dict[Key, str] | None = None) -> None:
        """Swap in the full list of one kind (after a relist) in one step, with its refused objects."""
        self._objects[kind] = {object_key(obj): obj for obj in objects}
        for obj in self._objects[kind].values():
            self._compactor.compact_once(obj)  # the kube watch compacts what it lists (to validate)
        self._rejected[kind] = dict(rejected or {})
        self._bump(kind)

    def get(self, kind: str, name: str, namespace: str = "") -> Obj | None:
        """One object by name (and namespace for namespaced kinds), or None."""
        key = ("" if kind in CLUSTER_SCOPED else namespace or "default", name)
        return self._objects[kind].get(key)

    def list(self, kind: str) -> list[Obj]:
        """All objects of one kind, in insertion order."""
        return list(self._objects[kind].values())

    def iter(self, kind: str) -> Iterator[Obj]:
        """Iterate the objects of one kind without copying the list."""
        return iter(self._objects[kind].values())

    def count(self, kind: str) -> int:
        """How many objects of one kind are known."""
        return len(self._objects[kind])
