"""Cluster mode: list and watch the API server into a ClusterState.

Owns: the client configuration (kubeconfig or in-cluster), one worker thread per watched kind,
and readiness of the cache (`KubeSource.synced`). Leaves out: what the objects mean (the index
and the allocator read them from ClusterState) and writes to the API (the binder).

Each worker follows kopf's three tiers:
- *forever* (`_run`): never returns until stop; any error is logged and retried with
  exponential backoff and jitter (capped at `backoff_cap` seconds);
- *session* (`_session`): list (paginated), swap the kind into the state in one step, then
  watch from the list's resourceVersion, keeping the last one seen (bookmarks included). A 410
  (ERROR event or HTTP status) or a stalled stream returns, so the next session lists again;
- *request* (`_watch_once`): one HTTP watch stream with bookmarks, a server-side
  `timeoutSeconds`, and a client read timeout of `settings.watch_stall_seconds` so a silent
  stream (no events, no bookmarks) counts as stalled.

Invalid objects (`extender.validation`) from a list or a watch event are not applied: the state
records them as refused (`ClusterState.rejection`, so pods that use one get the reason), the
kind's `invalid_objects` counter goes up and one warning is logged per object, not on every
relist; a key is counted and logged again only after it was valid or deleted in between. A
MODIFIED event that makes a stored object invalid drops the old version too: the API server
would never serve such an object, and a stale slice could offer devices the driver removed.

Threads versus the loop: the `kubernetes` client is synchronous, so the workers block in their
own threads; they never touch ClusterState. They queue operations, and one callback on the
`loop` the source was given applies everything queued so far (`_drain`). In `serve` that loop
is the placement's worker thread (`extender.wiring.build_kube_services`; `extender.worker`), so
ClusterState is only mutated on the thread where placement reads it, and a burst of events costs
one callback, not thousands; without one given, the running event loop at `start()` plays that part.
Who writes what: `_KindWatch.rv`, counters and `known` are written by that kind's worker only;
`listed` and `behind_since` are read by `synced()` on the loop and written by both sides under
`KubeSource._lock`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import urllib3
from kubernetes import client, config
from kubernetes.watch.watch import iter_resp_lines

from extender.cluster.compact import SHARED
from extender.cluster.state import CLUSTER_SCOPED, ClusterState
from extender.errors import KubeAPIError
from extender.kube import api
from extender.objects import Obj
from extender.settings import Settings
from extender.validation import InvalidObject, validate

log = logging.getLogger(__name__)

ListFn = Callable[..., Any]

#: Items per list page: big clusters list in pages instead of one huge response.
LIST_PAGE_SIZE = 500
#: Connect timeout and read timeout of list calls (seconds).
LIST_TIMEOUT: tuple[float, float] = (10.0, 60.0)
WATCH_CONNECT_TIMEOUT = 10.0
#: Server-side watch duration is drawn from this range, as client-go does, to spread reconnects.
WATCH_SERVER_TIMEOUT: tuple[int, int] = (300, 600)
#: How often an optional kind whose API is not served is looked for again.
OPTIONAL_RETRY_SECONDS = 300.0

GONE, STALLED, ENDED = "gone", "stalled", "ended"

# The client's config loaders and watch line reader carry no annotations: typed once, here.
_load_kube_config: Callable[..., None] = config.load_kube_config
_load_incluster_config: Callable[..., None] = config.load_incluster_config
_iter_resp_lines: Callable[[Any], Iterator[str]] = iter_resp_lines


def _has_claims(obj: Obj) -> bool:
    spec = obj.get("spec")
    return isinstance(spec, dict) and bool(spec.get("resourceClaims"))


@dataclass(frozen=True, slots=True)
class WatchedKind:
    """One kind to mirror: its list functions by apiVersion (tried in order) and a client-side filter."""

    kind: str
    versions: tuple[tuple[str, Callable[[client.ApiClient], ListFn]], ...]
    optional: bool = False  # an unserved API (404 on every version) counts as empty and synced
    keep: Callable[[Obj], bool] | None = None  # objects failing it are treated as absent


def _lister(api: str, method: str) -> Callable[[client.ApiClient], ListFn]:
    """Factory of the typed list method `client.<api>(api_client).<method>`."""
    return lambda api_client: getattr(getattr(client, api)(api_client), method)


def _generic_lister(group: str, version: str, plural: str) -> Callable[[client.ApiClient], ListFn]:
    """A list-and-watch method for an API version the typed client lacks (same keyword arguments)."""
    return lambda api_client: functools.partial(
        client.CustomObjectsApi(api_client).list_cluster_custom_object, group, version, plural
    )


_DRA = "resource.k8s.io/"
WATCHED_KINDS: tuple[WatchedKind, ...] = (
    WatchedKind("Node", (("v1", _lister("CoreV1Api", "list_node")),)),
    WatchedKind("Namespace", (("v1", _lister("CoreV1Api", "list_namespace")),)),
    WatchedKind("Pod", (("v1", _lister("CoreV1Api", "list_pod_for_all_namespaces")),), keep=_has_claims),
    WatchedKind("ResourceSlice", ((_DRA + "v1", _lister("ResourceV1Api", "list_resource_slice")),)),
    WatchedKind("DeviceClass", ((_DRA + "v1", _lister("ResourceV1Api", "list_device_class")),)),
    WatchedKind(
        "ResourceClaim", ((_DRA + "v1", _lister("ResourceV1Api", "list_resource_claim_for_all_namespaces")),)
    ),
    WatchedKind(
        "ResourceClaimTemplate",
        ((_DRA + "v1", _lister("ResourceV1Api", "list_resource_claim_template_for_all_namespaces")),),
    ),
    # DeviceTaintRule is v1alpha3, then v1beta2 (1.36), then v1 (1.37); alpha/beta APIs are often off.
    WatchedKind(
        "DeviceTaintRule",
        tuple(
            (_DRA + version, _lister(api, "list_device_taint_rule"))
            for version, api in (
                ("v1", "ResourceV1Api"),
                ("v1beta2", "ResourceV1beta2Api"),
                ("v1alpha3", "ResourceV1alpha3Api"),
            )
        ),
        optional=True,
    ),
    # The Workload API's PodGroup (extender.podgroups): v1beta1 from 1.37, v1alpha2 in 1.36 (which
    # the typed client does not have: the generic lister reads it), off unless enabled.
    WatchedKind(
        "PodGroup",
        (
            (
                "scheduling.k8s.io/v1beta1",
                _lister("SchedulingV1beta1Api", "list_pod_group_for_all_namespaces"),
            ),
            ("scheduling.k8s.io/v1alpha2", _generic_lister("scheduling.k8s.io", "v1alpha2", "podgroups")),
        ),
        optional=True,
    ),
)


class WatchError(Exception):
    """The watch stream carried an ERROR event other than 410 Gone."""


class _NotServed(Exception):
    """Every apiVersion of an optional kind answered 404."""


def load_api_client(settings: Settings) -> client.ApiClient:
    """A client for `settings.kubeconfig`, else in-cluster config, else the default kubeconfig lookup.

    Raises:
        kubernetes.config.ConfigException: no usable configuration was found.
    """
    configuration = client.Configuration()
    if settings.kubeconfig is not None:
        _load_kube_config(config_file=str(settings.kubeconfig), client_configuration=configuration)
    else:
        try:
            # In a pod (service account token mounted, KUBERNETES_SERVICE_HOST set) this succeeds.
            _load_incluster_config(client_configuration=configuration)
        except config.ConfigException as in_cluster:
            try:
                _load_kube_config(client_configuration=configuration)
            except config.ConfigException as exc:
                # Name both attempts: in a pod the in-cluster failure is the one that matters.
                raise config.ConfigException(f"not in a cluster ({in_cluster}) and {exc}") from exc
    # One long-lived watch per kind plus lists and binder calls share the pool.
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize, 4 * len(WATCHED_KINDS))
    return client.ApiClient(configuration)


class _Backoff:
    """Exponential backoff with full jitter: delay in [base*2^n/2, base*2^n], capped."""

    def __init__(self, *, base: float, cap: float, rng: random.Random) -> None:
        self._base, self._cap, self._rng = base, cap, rng
        self._attempt = 0

    def next(self) -> float:
        ceiling = min(self._cap, self._base * 2.0**self._attempt)
        self._attempt = min(self._attempt + 1, 32)
        return ceiling / 2 + self._rng.random() * ceiling / 2

    def reset(self) -> None:
        self._attempt = 0


@dataclass(eq=False, slots=True)
class _KindWatch:
    """Per-kind state; see the module docstring for who writes which field."""

    spec: WatchedKind
    api_version: str = ""
    list_fn: ListFn | None = None
    rv: str | None = None  # None: the next session lists first
    listed: bool = False
    served: bool = True
    behind_since: float | None = None  # set while the cache may miss changes (relist, broken watch)
    relists: int = 0
    watch_restarts: int = 0
    watched: bool = False  # a watch was opened before (the next one is a restart)
    last_activity: float = 0.0
    known: set[tuple[str, str]] = field(default_factory=set)  # keys kept by a `keep` filter
    invalid: dict[tuple[str, str], str] = field(default_factory=dict)  # refused keys -> why (logged once)
    invalid_total: int = 0  # objects refused, counting a key again only after it was valid or gone
    response: Any = None  # the open HTTP response, closed by stop()
    thread: threading.Thread | None = None


#: ("replace", kind, ([objs], {key: why})) | ("upsert", kind, obj) | ("delete", kind, (ns, name))
#: | ("reject", kind, ((ns, name), why))
Op = tuple[str, str, Any]


class KubeSource:
    """Mirrors the watched kinds into a ClusterState (see module docstring)."""

    def __init__(
        self,
        state: ClusterState,
        settings: Settings,
        *,
        api_client: client.ApiClient,
        loop: asyncio.AbstractEventLoop | None = None,
        kinds: tuple[WatchedKind, ...] = WATCHED_KINDS,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        optional_retry_seconds: float = OPTIONAL_RETRY_SECONDS,
        server_timeout: tuple[int, int] = WATCH_SERVER_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self._state = state
        self._settings = settings
        self._api_client = api_client
        self._loop = loop
        self._backoff = (backoff_base, backoff_cap)
        self._optional_retry_seconds = optional_retry_seconds
        self._server_timeout = server_timeout
        self._clock = clock
        self._rng = rng or random.Random()
        self._watches = {spec.kind: _KindWatch(spec) for spec in kinds}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._pending: list[Op] = []
        self._drain_scheduled = False
        self._started_at = clock()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start one worker thread per kind; call on the event loop (the state's owner unless a
        `loop` was given)."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        self._started_at = self._clock()
        for watch in self._watches.values():
            watch.last_activity = self._started_at
            watch.thread = threading.Thread(
                target=self._run, args=(watch,), name=f"kube-watch-{watch.spec.kind}", daemon=True
            )
            watch.thread.start()

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop the workers: close their open responses so blocked reads return, then join."""
        self._stopping.set()
        for watch in self._watches.values():
            response = watch.response
            if response is not None:
                _shutdown(response)  # unblocks a read in progress on another thread
        deadline = time.monotonic() + timeout
        for watch in self._watches.values():
            if watch.thread is not None:
                await asyncio.to_thread(watch.thread.join, max(0.0, deadline - time.monotonic()))
                if watch.thread.is_alive():
                    log.warning("watch worker for %s did not stop within %.1f s", watch.spec.kind, timeout)

    async def app_context(self, app: Any) -> AsyncIterator[None]:
        """aiohttp `cleanup_ctx` entry: start on the app's loop, stop on shutdown."""
        self.start()
        yield
        await self.stop()

    # ------------------------------------------------------------------ readiness and telemetry
    def synced(self) -> bool:
        """True once every kind listed, unless some kind has been behind for `relist_ready_seconds`."""
        now = self._clock()
        limit = self._settings.relist_ready_seconds
        with self._lock:
            for watch in self._watches.values():
                if not watch.listed:
                    return False
                if watch.behind_since is not None and now - watch.behind_since > limit:
                    return False
        return True

    def stats(self) -> dict[str, Any]:
        """Counters for metrics: relists and watch restarts per kind, seconds since each kind's last
        event, bookmark or list, and whether the cache is synced."""
        now = self._clock()
        watches = self._watches.values()
        return {
            "relists": {w.spec.kind: w.relists for w in watches},
            "watch_restarts": {w.spec.kind: w.watch_restarts for w in watches},
            "last_event_age_seconds": {w.spec.kind: max(0.0, now - w.last_activity) for w in watches},
            "invalid_objects": {w.spec.kind: w.invalid_total for w in watches},
            "rejected_objects": {w.spec.kind: len(w.invalid) for w in watches},
            "synced": self.synced(),
        }

    # ------------------------------------------------------------------ applying on the state's loop
    def _submit(self, *ops: Op) -> None:
        with self._lock:
            self._pending.extend(ops)
            if self._drain_scheduled:
                return
            self._drain_scheduled = True
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed at shutdown; nobody reads the state
            loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            ops, self._pending, self._drain_scheduled = self._pending, [], False
        for action, kind, payload in ops:
            try:
                if action == "replace":
                    objects, rejected = payload
                    self._state.replace_kind(kind, objects, rejected)
                    watch = self._watches[kind]
                    with self._lock:
                        if watch.listed:
                            watch.relists += 1
                        watch.listed = True
                        watch.behind_since = None
                elif action == "upsert":
                    self._state.upsert(payload)
                elif action == "reject":
                    key, reason = payload
                    self._state.reject(kind, key, reason)
                else:
                    namespace, name = payload
                    self._state.delete(kind, name, namespace)
            except Exception:  # one bad object must not stop the others
                log.exception("cannot apply %s of a %s", action, kind)

    def _mark_behind(self, watch: _KindWatch) -> None:
        with self._lock:
            if watch.behind_since is None:
                watch.behind_since = self._clock()

    # ------------------------------------------------------------------ objects
    @staticmethod
    def _key(kind: str, obj: Obj) -> tuple[str, str] | None:
        """(namespace, name), or None when they are not strings (such an object cannot be keyed)."""
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            return None
        namespace = "" if kind in CLUSTER_SCOPED else meta.get("namespace") or "default"
        name = meta.get("name", "")
        return (namespace, name) if isinstance(namespace, str) and isinstance(name, str) else None

    def _prepare(self, watch: _KindWatch, obj: Obj) -> Obj:
        # Lists omit kind/apiVersion on items; ClusterState and the index expect kubectl-shaped objects.
        obj["kind"] = watch.spec.kind
        obj.setdefault("apiVersion", watch.api_version)
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            meta.pop("managedFields", None)  # large and never read
        return obj

    def _refusal(self, watch: _KindWatch, key: tuple[str, str], obj: Obj) -> str | None:
        """Why `obj` is refused (logged and counted once per key), or None if it is valid.

        A refused object is treated as absent: the API server would never have served it, so
        no version of it is trusted, not even an earlier valid one (a MODIFIED event that makes
        an object invalid drops it). Pods that use it get the reason (`ClusterState.rejection`).

        The object is compacted first, as the file loader does: validation remembers the values
        it found plain by identity (`extender.validation`), which then covers the thousands of
        devices sharing one; the state does not walk the object again (`ClusterState.upsert`).
        """
        # The stored version it replaces seeds it (read from this thread: a dict read, and only
        # values equal to what is read are re-used, so any version read is as good).
        previous = self._state.get(watch.spec.kind, key[1], key[0])
        SHARED.compact_loaded(obj, watch.spec.kind, previous)
        try:
            validate(obj)
        except InvalidObject as exc:
            reason = str(exc)
            if watch.invalid.get(key) != reason:
                if key not in watch.invalid:
                    watch.invalid_total += 1
                log.warning("%s: ignoring an invalid object: %s", watch.spec.kind, reason)
                watch.invalid[key] = reason
            return reason
        watch.invalid.pop(key, None)
        return None

    def _event_op(self, watch: _KindWatch, event_type: str, obj: Obj) -> Op | None:
        kind, keep = watch.spec.kind, watch.spec.keep
        obj = self._prepare(watch, obj)
        key = self._key(kind, obj)
        if key is None:
            log.warning("%s: ignoring a watch event for an object without a usable name", kind)
            return None
        if event_type == "DELETED" or (keep is not None and not keep(obj)):
            refused = watch.invalid.pop(key, None) is not None
            if keep is not None:
                if key not in watch.known and not refused:
                    return None  # never kept: the state does not have it, nothing to do
                watch.known.discard(key)
            return ("delete", kind, key)
        reason = self._refusal(watch, key, obj)
        if reason is not None:
            watch.known.discard(key)
            return ("reject", kind, (key, reason))
        if keep is not None:
            watch.known.add(key)
        return ("upsert", kind, obj)

    # ------------------------------------------------------------------ tiers
    def _run(self, watch: _KindWatch) -> None:
        """Forever tier: sessions until stop, backing off after errors."""
        backoff = _Backoff(base=self._backoff[0], cap=self._backoff[1], rng=self._rng)
        while not self._stopping.is_set():
            try:
                self._session(watch, backoff)
            except _NotServed:
                if watch.served or not watch.listed:
                    log.warning(
                        "%s: the API is not served (404 for %s); treating it as empty",
                        watch.spec.kind,
                        ", ".join(v for v, _ in watch.spec.versions),
                    )
                    watch.served = False
                    watch.known.clear()
                    watch.invalid.clear()
                    self._submit(("replace", watch.spec.kind, ([], {})))
                else:
                    # Still unserved, and already empty in the state: nothing was missed. The
                    # look (`_list`) and any refusal before it marked the kind behind; without
                    # this the source turned unsynced for good `relist_ready_seconds` later.
                    with self._lock:
                        watch.behind_since = None
                watch.last_activity = self._clock()
                self._stopping.wait(self._optional_retry_seconds)
            except Exception as exc:
                if self._stopping.is_set():
                    break
                delay = backoff.next()
                self._mark_behind(watch)
                if isinstance(exc, KubeAPIError) and exc.status == 404:
                    watch.rv = None  # the API went away: list again, which finds a served version
                log.warning("%s: %s; retrying in %.1f s", watch.spec.kind, api.describe(exc), delay)
                self._stopping.wait(delay)
            finally:
                watch.response = None

    def _session(self, watch: _KindWatch, backoff: _Backoff) -> None:
        """Session tier: list when needed, then watch until a relist is needed (or an error)."""
        if watch.rv is None:
            self._list(watch)
            backoff.reset()
        while not self._stopping.is_set():
            started = self._clock()
            try:
                outcome, lines = self._watch_once(watch)
            except KubeAPIError as exc:
                if exc.status != 410:
                    raise
                outcome, lines = GONE, 0  # refused up front rather than as an ERROR event
            if self._stopping.is_set():
                return
            if outcome in (GONE, STALLED):
                log.info(
                    "%s: watch %s at resourceVersion %s; listing again",
                    watch.spec.kind,
                    "expired (410)"
                    if outcome == GONE
                    else f"silent for {self._settings.watch_stall_seconds}s",
                    watch.rv,
                )
                watch.rv = None
                self._mark_behind(watch)
                return
            if lines == 0 and self._clock() - started < 1.0:
                # A stream that closes at once with nothing in it: don't hammer the server.
                self._stopping.wait(backoff.next())
            elif lines:
                backoff.reset()

    def _list(self, watch: _KindWatch) -> None:
        """List every page of the kind and queue the swap into the state."""
        self._mark_behind(watch)
        items: list[Obj] = []
        rv = ""
        for api_version, factory in watch.spec.versions:
            fn = factory(self._api_client)
            try:
                items, rv = self._list_pages(fn)
            except KubeAPIError as exc:
                if exc.status == 404 and (watch.spec.optional or len(watch.spec.versions) > 1):
                    continue  # try the next version
                raise
            watch.api_version, watch.list_fn = api_version, fn
            break
        else:
            if watch.spec.optional:
                raise _NotServed()
            raise WatchError(f"no served apiVersion among {[v for v, _ in watch.spec.versions]}")
        if not watch.served:
            log.info("%s: the API is served now (%s)", watch.spec.kind, watch.api_version)
            watch.served = True
        kept: list[Obj] = []
        rejected: dict[tuple[str, str], str] = {}
        watch.known.clear()
        keep = watch.spec.keep
        for obj in items:
            obj = self._prepare(watch, obj)
            key = self._key(watch.spec.kind, obj)
            if key is None:
                log.warning("%s: ignoring a listed object without a usable name", watch.spec.kind)
                continue
            if keep is None or keep(obj):
                reason = self._refusal(watch, key, obj)
                if reason is not None:
                    rejected[key] = reason
                    continue
                kept.append(obj)
                if keep is not None:
                    watch.known.add(key)
        for key in [k for k in watch.invalid if k not in rejected]:
            del watch.invalid[key]  # gone or valid now: a later refusal is logged and counted again
        watch.rv = rv
        watch.last_activity = self._clock()
        log.info(
            "%s: listed %d objects (%d kept, %d invalid) at resourceVersion %s",
            watch.spec.kind,
            len(items),
            len(kept),
            len(rejected),
            rv,
        )
        self._submit(("replace", watch.spec.kind, (kept, rejected)))

    def _list_pages(self, fn: ListFn) -> tuple[list[Obj], str]:
        items: list[Obj] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": LIST_PAGE_SIZE, "_preload_content": False}
            if token:
                kwargs["_continue"] = token
            response = api.call(fn, _request_timeout=LIST_TIMEOUT, **kwargs)
            try:
                page = api.read_list_json(response)
            finally:
                response.release_conn()
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                return items, str(meta.get("resourceVersion") or "")
            if self._stopping.is_set():
                raise WatchError("stopping")

    def _watch_once(self, watch: _KindWatch) -> tuple[str, int]:
        """Request tier: one watch stream. Returns (outcome, lines read); raises on errors."""
        assert watch.list_fn is not None
        if watch.watched:
            watch.watch_restarts += 1  # every new stream after the first, whatever ended the last one
        watch.watched = True
        response = api.call(
            watch.list_fn,
            watch=True,
            resource_version=watch.rv,
            allow_watch_bookmarks=True,
            timeout_seconds=self._rng.randint(*self._server_timeout),
            _preload_content=False,
            _request_timeout=(WATCH_CONNECT_TIMEOUT, self._settings.watch_stall_seconds),
        )
        watch.response = response
        if self._stopping.is_set():
            _shutdown(response)
        with self._lock:
            watch.behind_since = None if watch.listed else watch.behind_since  # connected: caught up
        lines = 0
        try:
            for line in _iter_resp_lines(response):
                if not line:
                    continue
                lines += 1
                watch.last_activity = self._clock()
                outcome = self._handle_line(watch, line)
                if outcome is not None:
                    return outcome, lines
        except urllib3.exceptions.ReadTimeoutError:
            return STALLED, lines
        finally:
            watch.response = None
            response.close()
            response.release_conn()
        return ENDED, lines

    def _handle_line(self, watch: _KindWatch, line: str) -> str | None:
        event = orjson.loads(line)
        event_type, obj = event.get("type"), event.get("object") or {}
        if event_type == "ERROR":
            if obj.get("code") == 410:
                return GONE
            raise WatchError(
                f"watch ERROR event: {obj.get('code')} {obj.get('reason')}: {obj.get('message')}"
            )
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if event_type == "BOOKMARK":
            watch.rv = rv or watch.rv
            return None
        if event_type not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning("%s: skipping a watch event of unknown type %r", watch.spec.kind, event_type)
            return None
        op = self._event_op(watch, event_type, obj)
        if op is not None:
            self._submit(op)
        watch.rv = rv or watch.rv
        return None


def _shutdown(response: Any) -> None:
    # The socket may already be closed or back in the pool; then there is no read to unblock.
    with contextlib.suppress(Exception):
        response.shutdown()
