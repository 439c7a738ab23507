"""An in-process fake Kubernetes API server for integration tests with the real `kubernetes` client.

It speaks the REST protocol for the resources the extender reads and writes (see
`store.RESOURCE_TYPES`): list, watch (chunked JSON lines, bookmarks, `timeoutSeconds`, 410 after
`compact`), get, create, update (PUT), update of `/status`, merge and JSON patch, delete (with
finalizers) and `pods/{name}/binding`. Errors are `Status` objects with the codes, reasons and
messages the real server uses.

The server runs its own event loop in a background thread, so the synchronous `kubernetes`
client can call it from any thread while the test's own loop runs the extender. Test hooks
(`put_object`, `delete_object`, `get_object`, `compact`, `stall_watches`, `end_watches`,
`fail_next`, `lose_answer_next`, `set_served`, `on_request`, `request_log`) are thread-safe.

Usage:

    with FakeApiServer(bookmark_interval=0.1) as api:
        api.put_object({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
        core = kubernetes.client.CoreV1Api(api.api_client())
        core.list_node()
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import threading
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes.client
import orjson
import yaml
from aiohttp import web

from extender.objects import Obj
from tests.fakeapi.store import (
    BY_RESOURCE,
    ApiError,
    Event,
    Expired,
    ResourceType,
    Store,
    not_found,
    resolve_type,
    status_object,
)

#: (verb, api group, resource, subresource, namespace): one entry per request, RBAC vocabulary.
RequestLogEntry = tuple[str, str, str, str, str]


@dataclass(slots=True)
class RequestInfo:
    """One parsed API request, as the `on_request` hook sees it."""

    verb: str  # RBAC verb: get, list, watch, create, update, patch, delete
    group: str
    version: str
    resource: str
    subresource: str
    namespace: str
    name: str
    method: str
    path: str
    query: dict[str, str]
    body: Any = None

    @property
    def log_entry(self) -> RequestLogEntry:
        return (self.verb, self.group, self.resource, self.subresource, self.namespace)


#: `_FailRule.status` of `lose_answer_next`: carry the request out, then drop the connection.
LOSE_ANSWER = 0
#: `_FailRule.status` of `drop_next`: drop the connection without carrying the request out.
DROP = -1


@dataclass(slots=True)
class _FailRule:
    remaining: int
    status: int
    verb: str | None
    resource: str | None
    subresource: str | None
    message: str

    def matches(self, info: RequestInfo) -> bool:
        return (
            (self.verb is None or self.verb == info.verb)
            and (self.resource is None or self.resource == info.resource)
            and (self.subresource is None or self.subresource == info.subresource)
        )


@dataclass(eq=False, slots=True)
class _Watcher:
    rtype: ResourceType
    wake: asyncio.Event
    ended: bool = False


@dataclass(slots=True)
class _Control:
    """State the hooks change from test threads; guarded by `FakeApiServer._control_lock`."""

    stalled_all: bool = False
    stalled: set[str] = field(default_factory=set)  # resource plurals
    unserved: set[tuple[str, str, str]] = field(default_factory=set)  # (group, version, resource)
    fail_rules: list[_FailRule] = field(default_factory=list)


def _truthy(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


def _with_version(obj: Obj, rtype: ResourceType, version: str) -> Obj:
    # Objects are stored once; the version a client asked for only changes apiVersion.
    return {**obj, "apiVersion": rtype.api_version(version)}


def _label_matches(obj: Obj, selector: str) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _field_value(obj: Obj, path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def _field_matches(obj: Obj, selector: str) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        negate = "!=" in term
        key, value = term.replace("!=", "=").replace("==", "=").split("=", 1)
        if (_field_value(obj, key.strip()) == value.strip()) == negate:
            return False
    return True


class FakeApiServer:
    """The fake API server (see module docstring). Use as a context manager or start()/stop()."""

    def __init__(self, *, bookmark_interval: float = 0.2, host: str = "127.0.0.1") -> None:
        """Args:
        bookmark_interval: seconds between BOOKMARK events on watches that allow them.
        host: address to listen on (a free port is picked).
        """
        self.store = Store()
        self.bookmark_interval = bookmark_interval
        self.host = host
        self.url = ""
        #: What `GET /version` answers as gitVersion (kube mode reads it when no version is set).
        self.git_version = "v1.36.3"
        #: Called with a RequestInfo after the request is read and before it is answered; it runs
        #: on the server's loop, so it must be quick or return an awaitable (which is awaited).
        self.on_request: Callable[[RequestInfo], Awaitable[None] | None] | None = None
        self._log: list[RequestLogEntry] = []
        self._authz: list[RequestLogEntry] = []
        self._control = _Control()
        self._control_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._watchers: set[_Watcher] = set()
        self._closing = False
        self._clients: list[kubernetes.client.ApiClient] = []
        #: Paged lists (`limit`): continue token -> (the rest of the list, its resourceVersion).
        self._pages: dict[str, tuple[list[Obj], int]] = {}
        self._page_tokens = itertools.count(1)
        self.store.listeners.append(self._notify)

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> FakeApiServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start the loop thread and listen; returns once the server accepts connections."""
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._start_site())
            except BaseException as exc:  # report to start() instead of dying silently
                failure.append(exc)
                started.set()
                return
            started.set()
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._thread = threading.Thread(target=run, name="fake-kube-api", daemon=True)
        self._thread.start()
        started.wait(10)
        if failure:
            raise failure[0]

    async def _start_site(self) -> None:
        app = web.Application(client_max_size=64 * 1024**2)
        app.router.add_get("/version", self._version)
        app.router.add_get("/version/", self._version)  # the python client asks with the slash
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://{self.host}:{port}"

    def stop(self) -> None:
        """End every watch, stop listening and join the thread."""
        for api_client in self._clients:
            api_client.close()
        loop = self._loop
        if loop is None or self._thread is None:
            return
        self._closing = True

        async def shutdown() -> None:
            self._wake_all()
            if self._runner is not None:
                await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(shutdown(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(10)

    def api_client(self) -> kubernetes.client.ApiClient:
        """A `kubernetes` ApiClient pointed at this server (closed by stop())."""
        configuration = kubernetes.client.Configuration(host=self.url)
        configuration.connection_pool_maxsize = 32
        api_client = kubernetes.client.ApiClient(configuration)
        self._clients.append(api_client)
        return api_client

    # ------------------------------------------------------------------ test hooks
    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig for this server at `path` (token auth, which the fake does not check)."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "not-checked"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
            "current-context": "fake",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    @property
    def resource_version(self) -> int:
        """The current global resourceVersion."""
        return self.store.resource_version

    def put_object(self, obj: Obj) -> Obj:
        """Create or overwrite an object directly (no conflict checks); returns the stored copy."""
        return self.store.put(obj)

    def put_objects(self, objs: Iterable[Obj]) -> None:
        """put_object for each object of a known kind (others are skipped)."""
        self.store.put_many(objs)

    def get_object(self, kind: str, name: str, namespace: str = "") -> Obj | None:
        """A deep copy of one stored object, or None. `kind` is a Kind or a resource plural."""
        obj = self.store.get(resolve_type(kind), namespace, name)
        return None if obj is None else orjson.loads(orjson.dumps(obj))

    def list_objects(self, kind: str) -> list[Obj]:
        """Deep copies of all stored objects of one kind."""
        items, _ = self.store.list(resolve_type(kind))
        copies: list[Obj] = orjson.loads(orjson.dumps(items))
        return copies

    def delete_object(self, kind: str, name: str, namespace: str = "") -> Obj | None:
        """Delete as the API would (finalizers set deletionTimestamp); None if it did not exist."""
        try:
            return self.store.delete(resolve_type(kind), namespace, name)
        except ApiError:
            return None

    def compact(self, rv: int | None = None) -> int:
        """Compact at `rv` (default: now): a watch starting from an older RV gets a 410 ERROR event.

        Streams already open keep streaming, as with the real API server; to make a client hit
        the 410, stall its stream, write, compact, then `end_watches` so it re-watches from its
        old RV.
        """
        return self.store.compact(rv)

    def stall_watches(self, kind: str | None = None) -> None:
        """Keep watch streams of `kind` (None: all) open but silent, bookmarks included."""
        with self.store.lock, self._control_lock:  # see _scan
            if kind is None:
                self._control.stalled_all = True
            else:
                self._control.stalled.add(resolve_type(kind).resource)

    def unstall(self, kind: str | None = None) -> None:
        """Undo stall_watches for `kind` (None: every stall)."""
        with self._control_lock:
            if kind is None:
                self._control.stalled_all = False
                self._control.stalled.clear()
            else:
                self._control.stalled.discard(resolve_type(kind).resource)
        self._notify()

    def end_watches(self, kind: str | None = None) -> None:
        """Close the open watch streams of `kind` (None: all) as a server-side timeout would."""
        resource = None if kind is None else resolve_type(kind).resource

        def end() -> None:
            for watcher in self._watchers:
                if resource is None or watcher.rtype.resource == resource:
                    watcher.ended = True
                    watcher.wake.set()

        if self._loop is not None:
            self._loop.call_soon_threadsafe(end)

    def open_watches(self, kind: str | None = None) -> int:
        """How many watch streams of `kind` (None: any) are open now."""
        resource = None if kind is None else resolve_type(kind).resource
        return sum(1 for w in list(self._watchers) if resource is None or w.rtype.resource == resource)

    def fail_next(
        self,
        n: int = 1,
        status: int = 500,
        *,
        verb: str | None = None,
        resource: str | None = None,
        subresource: str | None = None,
        message: str = "",
    ) -> None:
        """Answer the next `n` matching requests with a `Status` error of code `status`.

        `verb` is an RBAC verb (list, watch, get, create, update, patch, delete); `resource` a
        plural or a Kind; None matches anything.
        """
        plural = None if resource is None else resolve_type(resource).resource
        rule = _FailRule(n, status, verb, plural, subresource, message or f"injected failure ({status})")
        with self._control_lock:
            self._control.fail_rules.append(rule)

    def lose_answer_next(
        self,
        n: int = 1,
        *,
        verb: str | None = None,
        resource: str | None = None,
        subresource: str | None = None,
    ) -> None:
        """Carry out the next `n` matching requests, then close their connections without an
        answer: a write that reached the server and whose answer a cut connection lost."""
        self.fail_next(n, LOSE_ANSWER, verb=verb, resource=resource, subresource=subresource, message="-")

    def drop_next(
        self,
        n: int = 1,
        *,
        verb: str | None = None,
        resource: str | None = None,
        subresource: str | None = None,
    ) -> None:
        """Close the connections of the next `n` matching requests without carrying them out: a
        request lost on the way in (the client cannot tell it from a lost answer)."""
        self.fail_next(n, DROP, verb=verb, resource=resource, subresource=subresource, message="-")

    def set_served(self, kind: str, served: bool, version: str | None = None) -> None:
        """Serve or stop serving a resource (all its versions, or one): unserved paths answer 404."""
        rtype = resolve_type(kind)
        with self._control_lock:
            for v in (version,) if version else rtype.versions:
                key = (rtype.group, v, rtype.resource)
                if served:
                    self._control.unserved.discard(key)
                else:
                    self._control.unserved.add(key)

    def request_log(self) -> list[RequestLogEntry]:
        """(verb, api group, resource, subresource, namespace) of every request so far."""
        return list(self._log)

    def authorization_log(self) -> list[RequestLogEntry]:
        """Every authorization the real API server would make, in the request log's terms: one
        per request, plus the extra ones some writes need (`_authorize_claim_binding`)."""
        return list(self._authz)

    def clear_request_log(self) -> None:
        self._log.clear()
        self._authz.clear()

    # ------------------------------------------------------------------ watch wake-ups
    def _notify(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed between the check and the call
                loop.call_soon_threadsafe(self._wake_all)

    def _wake_all(self) -> None:
        for watcher in self._watchers:
            watcher.wake.set()

    def _stalled(self, rtype: ResourceType) -> bool:
        with self._control_lock:
            return self._control.stalled_all or rtype.resource in self._control.stalled

    def _scan(
        self, rtype: ResourceType, cursor: int, namespace: str, *, starting: bool
    ) -> tuple[list[Event], int] | None:
        """New events for one stream, or None while it is stalled.

        The stall check and the history read happen under the store lock, and stall_watches
        takes that lock too: a write made after stall_watches returned can never slip out on a
        stream that checked the flag just before.
        """
        with self.store.lock:
            if self._stalled(rtype):
                return None
            return self.store.events_after(cursor, rtype, namespace, starting=starting)

    # ------------------------------------------------------------------ HTTP
    def _parse(self, request: web.Request) -> RequestInfo:
        parts = [p for p in request.path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "the server could not find the requested resource", "NotFound", {})
        namespace = ""
        if len(rest) >= 3 and rest[0] == "namespaces" and (group, rest[2]) in BY_RESOURCE:
            namespace, rest = rest[1], rest[2:]
        if not rest or (group, rest[0]) not in BY_RESOURCE:
            raise ApiError(404, "the server could not find the requested resource", "NotFound", {})
        resource, name, subresource = rest[0], *[*rest[1:3], "", ""][:2]
        query = dict(request.query)
        method = request.method
        if method == "GET":
            verb = "get" if name else ("watch" if _truthy(query.get("watch")) else "list")
        else:
            verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, "")
            if not verb:
                raise ApiError(405, f"method {method} is not allowed", "MethodNotAllowed")
        return RequestInfo(
            verb, group, version, resource, subresource, namespace, name, method, request.path, query
        )

    def _take_failure(self, info: RequestInfo) -> ApiError | None:
        with self._control_lock:
            for rule in self._control.fail_rules:
                if rule.remaining > 0 and rule.matches(info):
                    rule.remaining -= 1
                    return ApiError(rule.status, rule.message)
            self._control.fail_rules = [r for r in self._control.fail_rules if r.remaining > 0]
        return None

    async def _version(self, request: web.Request) -> web.StreamResponse:
        major, minor = self.git_version.removeprefix("v").split(".")[:2]
        # Every field a real server sends (the client's model requires them all).
        info = {
            "major": major,
            "minor": minor,
            "gitVersion": self.git_version,
            "gitCommit": "0" * 40,
            "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "go1.26",
            "compiler": "gc",
            "platform": "linux/amd64",
        }
        return _json(info, 200)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            info = self._parse(request)
            if request.can_read_body:
                raw = await request.read()
                info.body = orjson.loads(raw) if raw.strip() else None
            self._log.append(info.log_entry)
            self._authz.append(info.log_entry)
            if self.on_request is not None:
                result = self.on_request(info)
                if inspect.isawaitable(result):
                    await result
            failure = self._take_failure(info)
            lose_answer = failure is not None and failure.code == LOSE_ANSWER
            if failure is not None and failure.code == DROP and request.transport is not None:
                request.transport.abort()  # never carried out, and the client never hears of it
                return web.Response(status=500)
            if failure is not None and not lose_answer:
                raise failure
            with self._control_lock:
                unserved = (info.group, info.version, info.resource) in self._control.unserved
            rtype = BY_RESOURCE[(info.group, info.resource)]
            if unserved or info.version not in rtype.versions:
                raise ApiError(404, "the server could not find the requested resource", "NotFound", {})
            if info.verb == "watch":
                return await self._watch(request, info, rtype)
            response = self._dispatch(info, rtype)
            if lose_answer and request.transport is not None:
                request.transport.abort()  # done, and the client never hears of it
            return response
        except ApiError as exc:
            return _json(exc.status, exc.code)
        except orjson.JSONDecodeError as exc:
            return _json(status_object(400, f"invalid JSON body: {exc}"), 400)

    def _dispatch(self, info: RequestInfo, rtype: ResourceType) -> web.Response:
        store, ns, name, sub = self.store, info.namespace, info.name, info.subresource
        version = info.version
        if rtype.namespaced and not ns and info.verb not in ("list",):
            raise ApiError(404, "the server could not find the requested resource", "NotFound", {})
        if (
            sub
            and not (sub == "status" and rtype.has_status)
            and not (sub == "binding" and rtype.kind == "Pod")
        ):
            raise ApiError(404, "the server could not find the requested resource", "NotFound", {})
        if info.verb == "list":
            token = info.query.get("continue")
            if token:  # a later page of a paged list: served from the list's first snapshot
                paged = self._pages.pop(token, None)
                if paged is None:
                    raise ApiError(410, "the provided continue parameter is too old", "Expired")
                items, rv = paged
            else:
                items, rv = store.list(rtype, ns)
                items = self._select(items, info.query)
            metadata: dict[str, str] = {"resourceVersion": str(rv)}
            limit = int(info.query.get("limit") or 0)
            if 0 < limit < len(items):  # paged as the API server does (`limit`, `continue`)
                next_token = f"page-{next(self._page_tokens)}"
                self._pages[next_token] = (items[limit:], rv)
                metadata["continue"] = next_token
                items = items[:limit]
            return _json(
                {
                    "kind": f"{rtype.kind}List",
                    "apiVersion": rtype.api_version(version),
                    "metadata": metadata,
                    "items": [_with_version(o, rtype, version) for o in items],
                }
            )
        if info.verb == "create" and sub == "binding":
            store.bind(ns, name, info.body or {})
            return _json(
                {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201
            )
        if info.verb == "create":
            if name:
                raise ApiError(405, "POST to a named object is not allowed", "MethodNotAllowed")
            body = info.body or {}
            body_ns = (body.get("metadata") or {}).get("namespace")
            if rtype.namespaced and body_ns and body_ns != ns:
                raise ApiError(
                    400,
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
            return _json(_with_version(store.create(rtype, ns, body), rtype, version), 201)
        if info.verb == "get":
            obj = store.get(rtype, ns, name)
            if obj is None:
                raise not_found(rtype, name)
            return _json(_with_version(obj, rtype, version))
        if info.verb == "update":
            if rtype.kind == "ResourceClaim" and sub == "status":
                self._authorize_claim_binding(info, store.get(rtype, ns, name))
            obj = store.update(rtype, ns, name, info.body or {}, subresource=sub)
            return _json(_with_version(obj, rtype, version))
        if info.verb == "patch":
            obj = store.patch(rtype, ns, name, info.body, subresource=sub)
            return _json(_with_version(obj, rtype, version))
        if info.verb == "delete":
            obj = store.delete(rtype, ns, name, info.body if isinstance(info.body, dict) else None)
            return _json(_with_version(obj, rtype, version))
        raise ApiError(405, f"verb {info.verb} is not supported", "MethodNotAllowed")

    def _authorize_claim_binding(self, info: RequestInfo, stored: Obj | None) -> None:
        """kube-apiserver 1.36 authorizes a status update that changes `allocation` or
        `reservedFor` a second time, as `update` of the synthetic subresource
        `resourceclaims/binding` (its answer otherwise: 422, "changing status.allocation or
        status.reservedFor requires resource="resourceclaims/binding", verb="update"
        permission"); `authorization_log` records that check, so RBAC tests see it."""
        old = (stored or {}).get("status") or {}
        new = (info.body or {}).get("status") or {}
        if any(old.get(key) != new.get(key) for key in ("allocation", "reservedFor")):
            self._authz.append(("update", info.group, info.resource, "binding", info.namespace))

    @staticmethod
    def _select(items: list[Obj], query: dict[str, str]) -> list[Obj]:
        if query.get("labelSelector"):
            items = [o for o in items if _label_matches(o, query["labelSelector"])]
        if query.get("fieldSelector"):
            items = [o for o in items if _field_matches(o, query["fieldSelector"])]
        return items

    async def _watch(
        self, request: web.Request, info: RequestInfo, rtype: ResourceType
    ) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        query = info.query
        timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else None
        deadline = None if timeout is None else loop.time() + timeout
        bookmarks = _truthy(query.get("allowWatchBookmarks"))
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        watcher = _Watcher(rtype, asyncio.Event())
        self._watchers.add(watcher)

        async def send(event_type: str, obj: Obj) -> None:
            await response.write(orjson.dumps({"type": event_type, "object": obj}) + b"\n")

        try:
            requested = query.get("resourceVersion", "")
            if requested in ("", "0"):
                # No RV: the real server starts with synthetic ADDED events for the current state.
                items, cursor = self.store.list(rtype, info.namespace)
                for obj in self._select(items, query):
                    await send("ADDED", _with_version(obj, rtype, info.version))
            else:
                cursor = int(requested)
            next_bookmark = loop.time() + self.bookmark_interval
            starting = True
            while not self._closing and not watcher.ended:
                watcher.wake.clear()
                try:
                    scanned = self._scan(rtype, cursor, info.namespace, starting=starting)
                except Expired as exc:
                    await send("ERROR", status_object(410, str(exc), "Expired"))
                    break
                if scanned is not None:
                    events, upto = scanned
                    for event in events:
                        if self._select([event.obj], query):
                            await send(event.type, _with_version(event.obj, rtype, info.version))
                    cursor, starting = upto, False
                    if bookmarks and loop.time() >= next_bookmark:
                        bookmark = {
                            "kind": rtype.kind,
                            "apiVersion": rtype.api_version(info.version),
                            "metadata": {"resourceVersion": str(cursor)},
                        }
                        await send("BOOKMARK", bookmark)
                        next_bookmark = loop.time() + self.bookmark_interval
                wait_until = next_bookmark if bookmarks else loop.time() + 3600.0
                if deadline is not None:
                    if loop.time() >= deadline:
                        break
                    wait_until = min(wait_until, deadline)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(watcher.wake.wait(), max(0.0, wait_until - loop.time()))
                if bookmarks and loop.time() >= next_bookmark and self._stalled(rtype):
                    next_bookmark = loop.time() + self.bookmark_interval  # a stalled stream skips them
            await response.write_eof()
        except ConnectionResetError:
            pass  # the client went away
        finally:
            self._watchers.discard(watcher)
        return response
