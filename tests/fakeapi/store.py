"""The object store behind the fake API server: resource types, resourceVersions, write rules, history.

Owns what the real API server's registry does for the resources the extender uses: one global
resourceVersion counter, uid/creationTimestamp on create, optimistic concurrency on update,
status-subresource rules, finalizers on delete, the pod binding subresource, and an event
history for watches with `compact` (410 for watches that start too far back). Leaves out
HTTP (see `server.py`).

Thread-safety: every public method takes `Store.lock`, so test threads, client worker threads
(through HTTP) and the server's event loop can all call it. Stored objects are never mutated
in place: each write stores a new dict, so history events and list results can share them.
"""

from __future__ import annotations

import builtins
import copy
import datetime
import secrets
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from extender.objects import Obj


@dataclass(frozen=True, slots=True)
class ResourceType:
    """One REST resource: where it lives, what it is called, how it is scoped."""

    group: str
    resource: str
    kind: str
    namespaced: bool
    versions: tuple[str, ...]
    has_status: bool

    @property
    def qualified(self) -> str:
        """`resourceclaims.resource.k8s.io`, or `pods` for the core group (as in API messages)."""
        return f"{self.resource}.{self.group}" if self.group else self.resource

    def api_version(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version


RESOURCE_TYPES: tuple[ResourceType, ...] = (
    ResourceType("", "nodes", "Node", False, ("v1",), True),
    ResourceType("", "namespaces", "Namespace", False, ("v1",), True),
    ResourceType("", "pods", "Pod", True, ("v1",), True),
    ResourceType(
        "resource.k8s.io", "resourceslices", "ResourceSlice", False, ("v1", "v1beta2", "v1beta1"), False
    ),
    ResourceType(
        "resource.k8s.io", "deviceclasses", "DeviceClass", False, ("v1", "v1beta2", "v1beta1"), False
    ),
    ResourceType(
        "resource.k8s.io", "resourceclaims", "ResourceClaim", True, ("v1", "v1beta2", "v1beta1"), True
    ),
    ResourceType(
        "resource.k8s.io",
        "resourceclaimtemplates",
        "ResourceClaimTemplate",
        True,
        ("v1", "v1beta2", "v1beta1"),
        False,
    ),
    # DeviceTaintRule: v1alpha3 first, v1beta2 in 1.36, v1 from 1.37; the v37 client has all three.
    ResourceType(
        "resource.k8s.io", "devicetaintrules", "DeviceTaintRule", False, ("v1", "v1beta2", "v1alpha3"), True
    ),
    ResourceType("coordination.k8s.io", "leases", "Lease", True, ("v1",), False),
    # PodGroup (Workload API): v1alpha2 in 1.36, v1beta1 in 1.37; the v37 client types only v1beta1.
    ResourceType("scheduling.k8s.io", "podgroups", "PodGroup", True, ("v1beta1", "v1alpha2"), True),
)
BY_KIND: dict[str, ResourceType] = {t.kind: t for t in RESOURCE_TYPES}
BY_RESOURCE: dict[tuple[str, str], ResourceType] = {(t.group, t.resource): t for t in RESOURCE_TYPES}

_REASONS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def status_object(code: int, message: str, reason: str = "", details: Obj | None = None) -> Obj:
    """A `Status` object shaped as the API server sends it for failures."""
    status: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason or _REASONS.get(code, "Unknown"),
        "code": code,
    }
    if details is not None:
        status["details"] = details
    return status


class ApiError(Exception):
    """A failure the server answers with a `Status` object and an HTTP code."""

    def __init__(self, code: int, message: str, reason: str = "", details: Obj | None = None) -> None:
        super().__init__(message)
        self.status = status_object(code, message, reason, details)
        self.code = code


def resolve_type(kind_or_resource: str) -> ResourceType:
    """The resource type for a Kind (`ResourceClaim`) or a plural (`resourceclaims`)."""
    if kind_or_resource in BY_KIND:
        return BY_KIND[kind_or_resource]
    for rtype in RESOURCE_TYPES:
        if rtype.resource == kind_or_resource:
            return rtype
    raise KeyError(f"unknown kind or resource {kind_or_resource!r}")


def _details(rtype: ResourceType, name: str) -> Obj:
    return {"name": name, "group": rtype.group, "kind": rtype.resource}


def not_found(rtype: ResourceType, name: str) -> ApiError:
    return ApiError(404, f'{rtype.qualified} "{name}" not found', "NotFound", _details(rtype, name))


def conflict(rtype: ResourceType, name: str, why: str) -> ApiError:
    message = f'Operation cannot be fulfilled on {rtype.qualified} "{name}": {why}'
    return ApiError(409, message, "Conflict", _details(rtype, name))


MODIFIED_CONFLICT = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def _uid_precondition(wanted: str, actual: str | None) -> str:
    return f"Precondition failed: UID in precondition: {wanted}, UID in object meta: {actual}"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = obj["metadata"] = {}
    return meta


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of the watch history: the object as it was after write `rv`."""

    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    rtype: ResourceType
    namespace: str
    obj: Obj


class Expired(Exception):
    """A watch started from a resourceVersion older than the last `compact`."""

    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(f"too old resource version: {requested} ({oldest})")


class Store:
    """Objects by (group, resource) and (namespace, name), plus the event history."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._rv = 0
        self._objects: dict[tuple[str, str], dict[tuple[str, str], Obj]] = {
            (t.group, t.resource): {} for t in RESOURCE_TYPES
        }
        self._history: list[Event] = []
        self._compacted = 0  # watches from an RV below this get 410
        #: Called (under the lock) after every write; the server uses it to wake its watches.
        self.listeners: list[Callable[[], None]] = []

    # ------------------------------------------------------------------ basics
    @property
    def resource_version(self) -> int:
        with self.lock:
            return self._rv

    def _bucket(self, rtype: ResourceType) -> dict[tuple[str, str], Obj]:
        return self._objects[(rtype.group, rtype.resource)]

    @staticmethod
    def _key(rtype: ResourceType, namespace: str, name: str) -> tuple[str, str]:
        return (namespace or "default", name) if rtype.namespaced else ("", name)

    def _record(self, rtype: ResourceType, event_type: str, obj: Obj) -> Obj:
        """Bump the RV, stamp it on `obj`, store or drop it, append history, notify. Lock held."""
        self._rv += 1
        _meta(obj)["resourceVersion"] = str(self._rv)
        namespace, name = self._key(rtype, _meta(obj).get("namespace", ""), _meta(obj)["name"])
        if event_type == "DELETED":
            self._bucket(rtype).pop((namespace, name), None)
        else:
            self._bucket(rtype)[(namespace, name)] = obj
        self._history.append(Event(self._rv, event_type, rtype, namespace, obj))
        for listener in self.listeners:
            listener()
        return obj

    def get(self, rtype: ResourceType, namespace: str, name: str) -> Obj | None:
        with self.lock:
            return self._bucket(rtype).get(self._key(rtype, namespace, name))

    def list(self, rtype: ResourceType, namespace: str = "") -> tuple[list[Obj], int]:
        """Objects of one type (in one namespace, or all when ""), and the RV they are current at."""
        with self.lock:
            items = [
                obj
                for (ns, _), obj in self._bucket(rtype).items()
                if not namespace or not rtype.namespaced or ns == namespace
            ]
            return items, self._rv

    def events_after(
        self, rv: int, rtype: ResourceType, namespace: str = "", *, starting: bool = True
    ) -> tuple[builtins.list[Event], int]:  # `list` here is the method above
        """History events of one type after `rv`, and the RV the answer is complete up to.

        Args:
            starting: a watch is starting at `rv` (then a compacted `rv` is refused); False for
                streams already open, which keep streaming across a compaction as the real watch
                cache does for established watchers.

        Raises:
            Expired: a watch starting from an RV older than the last compaction.
        """
        with self.lock:
            if starting and rv < self._compacted:
                raise Expired(rv, self._compacted)
            # History is ordered by rv, so walk back from the end until rv is reached.
            start = len(self._history)
            while start > 0 and self._history[start - 1].rv > rv:
                start -= 1
            events = [
                e
                for e in self._history[start:]
                if e.rtype is rtype and (not namespace or not rtype.namespaced or e.namespace == namespace)
            ]
            return events, self._rv

    def compact(self, rv: int | None = None) -> int:
        """Compact up to `rv` (default: now): watches starting from an older RV then get 410.

        The history itself is kept (a test server's is small), so streams already open continue
        unaffected, as established watchers of the real watch cache do.
        """
        with self.lock:
            upto = self._rv if rv is None else rv
            self._compacted = max(self._compacted, upto)
            return self._compacted

    # ------------------------------------------------------------------ writes
    def _fill_new(self, rtype: ResourceType, obj: Obj, namespace: str) -> Obj:
        meta = _meta(obj)
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise ApiError(
                    422, f"{rtype.kind}.{rtype.group or 'core'} is invalid: metadata.name: Required value"
                )
            meta["name"] = meta["generateName"] + secrets.token_hex(3)[:5]
        if rtype.namespaced:
            meta["namespace"] = namespace or meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        meta["generation"] = 1
        meta.pop("deletionTimestamp", None)
        obj["kind"] = rtype.kind
        obj.setdefault("apiVersion", rtype.api_version(rtype.versions[0]))
        return obj

    def create(self, rtype: ResourceType, namespace: str, body: Obj) -> Obj:
        """POST: a new object; 409 AlreadyExists if the name is taken."""
        obj = copy.deepcopy(body)
        with self.lock:
            obj = self._fill_new(rtype, obj, namespace)
            name = _meta(obj)["name"]
            if self._bucket(rtype).get(self._key(rtype, namespace, name)) is not None:
                raise ApiError(
                    409, f'{rtype.qualified} "{name}" already exists', "AlreadyExists", _details(rtype, name)
                )
            return self._record(rtype, "ADDED", obj)

    def update(
        self, rtype: ResourceType, namespace: str, name: str, body: Obj, *, subresource: str = ""
    ) -> Obj:
        """PUT on the object or its `status`: optimistic concurrency and subresource rules."""
        new = copy.deepcopy(body)
        with self.lock:
            old = self.get(rtype, namespace, name)
            if old is None:
                raise not_found(rtype, name)
            wanted = str(_meta(new).get("resourceVersion") or "")
            if wanted and wanted != _meta(old)["resourceVersion"]:
                raise conflict(rtype, name, MODIFIED_CONFLICT)
            if subresource == "status":
                # The status subresource keeps everything of the stored object but its status.
                new_status = new.get("status")
                new = copy.deepcopy(old)
                if new_status is None:
                    new.pop("status", None)
                else:
                    new["status"] = new_status
            else:
                if _meta(new).get("name", name) != name:
                    raise ApiError(
                        400,
                        f"the name of the object ({_meta(new)['name']}) does not match the name on the URL "
                        f"({name})",
                    )
                if rtype.has_status:
                    # The main resource ignores status changes when a status subresource exists.
                    if "status" in old:
                        new["status"] = copy.deepcopy(old["status"])
                    else:
                        new.pop("status", None)
                meta, old_meta = _meta(new), _meta(old)
                for immutable in ("uid", "creationTimestamp", "deletionTimestamp", "name", "namespace"):
                    if immutable in old_meta:
                        meta[immutable] = old_meta[immutable]
                    else:
                        meta.pop(immutable, None)
                meta["generation"] = old_meta.get("generation", 1) + (new.get("spec") != old.get("spec"))
                new["kind"] = rtype.kind
                new["apiVersion"] = old.get("apiVersion", rtype.api_version(rtype.versions[0]))
            return self._store_update(rtype, new)

    def _store_update(self, rtype: ResourceType, new: Obj) -> Obj:
        meta = _meta(new)
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            # The last finalizer went away: the pending delete completes now.
            return self._record(rtype, "DELETED", new)
        return self._record(rtype, "MODIFIED", new)

    def patch(
        self, rtype: ResourceType, namespace: str, name: str, patch: Any, *, subresource: str = ""
    ) -> Obj:
        """PATCH: JSON patch (a list) or merge patch (a dict; strategic merge is treated as merge)."""
        with self.lock:
            old = self.get(rtype, namespace, name)
            if old is None:
                raise not_found(rtype, name)
            if isinstance(patch, list):
                patched = _json_patch(copy.deepcopy(old), patch)
            elif isinstance(patch, dict):
                patched = _merge_patch(copy.deepcopy(old), patch)
            else:
                raise ApiError(400, "patch body must be a JSON object or a JSON patch list")
            return self.update(rtype, namespace, name, patched, subresource=subresource)

    def delete(self, rtype: ResourceType, namespace: str, name: str, options: Obj | None = None) -> Obj:
        """DELETE: preconditions, finalizers (deletionTimestamp), else remove (DELETED event)."""
        with self.lock:
            old = self.get(rtype, namespace, name)
            if old is None:
                raise not_found(rtype, name)
            pre = (options or {}).get("preconditions") or {}
            meta = _meta(old)
            if pre.get("uid") and pre["uid"] != meta.get("uid"):
                why = _uid_precondition(pre["uid"], meta.get("uid"))
                raise conflict(rtype, name, why)
            if pre.get("resourceVersion") and pre["resourceVersion"] != meta.get("resourceVersion"):
                why = (
                    f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
                    f"ResourceVersion in object meta: {meta.get('resourceVersion')}"
                )
                raise conflict(rtype, name, why)
            new = copy.deepcopy(old)
            if meta.get("finalizers"):
                if meta.get("deletionTimestamp"):
                    return old
                _meta(new)["deletionTimestamp"] = _now()
                return self._record(rtype, "MODIFIED", new)
            return self._record(rtype, "DELETED", new)

    def bind(self, namespace: str, name: str, binding: Obj) -> None:
        """POST pods/{name}/binding: set spec.nodeName once (409 if the pod is already assigned)."""
        pods = BY_KIND["Pod"]
        target = (binding.get("target") or {}).get("name")
        if not target:
            raise ApiError(422, 'Binding.core "' + name + '" is invalid: target.name: Required value')
        with self.lock:
            pod = self.get(pods, namespace, name)
            if pod is None:
                raise not_found(pods, name)
            meta = _meta(pod)
            want_uid = (binding.get("metadata") or {}).get("uid")
            binding_type = ResourceType("", "pods/binding", "Binding", True, ("v1",), False)
            if want_uid and want_uid != meta.get("uid"):
                why = _uid_precondition(want_uid, meta.get("uid"))
                raise conflict(binding_type, name, why)
            if meta.get("deletionTimestamp"):
                raise conflict(
                    binding_type, name, f"pod {name} is being deleted, cannot be assigned to a host"
                )
            assigned = (pod.get("spec") or {}).get("nodeName")
            if assigned:
                raise conflict(binding_type, name, f'pod {name} is already assigned to node "{assigned}"')
            new = copy.deepcopy(pod)
            new.setdefault("spec", {})["nodeName"] = target
            status = new.setdefault("status", {})
            conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
            conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()})
            status["conditions"] = conditions
            self._record(pods, "MODIFIED", new)

    # ------------------------------------------------------------------ test hooks
    def put(self, obj: Obj) -> Obj:
        """Create or overwrite an object as given (no conflict checks); returns the stored copy."""
        obj = copy.deepcopy(obj)
        rtype = BY_KIND[obj["kind"]]
        with self.lock:
            meta = _meta(obj)
            old = self.get(rtype, meta.get("namespace", ""), meta.get("name", ""))
            if old is None:
                keep = {k: meta[k] for k in ("uid", "creationTimestamp") if meta.get(k)}
                obj = self._fill_new(rtype, obj, meta.get("namespace", ""))
                _meta(obj).update(keep)
                return copy.deepcopy(self._record(rtype, "ADDED", obj))
            for key in ("uid", "creationTimestamp"):
                meta.setdefault(key, _meta(old).get(key))
            if rtype.namespaced:
                meta["namespace"] = _meta(old)["namespace"]
            obj["kind"] = rtype.kind
            obj.setdefault("apiVersion", old.get("apiVersion"))
            return copy.deepcopy(self._store_update(rtype, obj))

    def put_many(self, objs: Iterable[Obj]) -> None:
        for obj in objs:
            if obj.get("kind") in BY_KIND:
                self.put(obj)


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(target, dict):
        target = {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = _merge_patch(target.get(key), value)
    return target


def _pointer(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]


def _json_patch(doc: Obj, ops: list[Any]) -> Obj:
    """RFC 6902 JSON patch: add, remove, replace and test."""
    for op in ops:
        parts = _pointer(op.get("path", ""))
        parent: Any = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent.setdefault(part, {})
        last = parts[-1] if parts else ""
        kind = op.get("op")
        try:
            if kind == "test":
                current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
                if current != op.get("value"):
                    raise ApiError(
                        422,
                        "the server rejected our request due to an error in our request: "
                        f"test failed at {op['path']}",
                    )
            elif kind == "remove":
                del parent[int(last) if isinstance(parent, list) else last]
            elif kind in ("add", "replace"):
                if isinstance(parent, list):
                    if last == "-":
                        parent.append(op["value"])
                    elif kind == "add":
                        parent.insert(int(last), op["value"])
                    else:
                        parent[int(last)] = op["value"]
                else:
                    parent[last] = op["value"]
            else:
                raise ApiError(422, f"unsupported JSON patch op {kind!r}")
        except (KeyError, IndexError, ValueError) as exc:
            raise ApiError(422, f"the server rejected our request: JSON patch {op} failed: {exc}") from None
    return doc
