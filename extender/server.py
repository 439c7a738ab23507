"""The aiohttp application: routes, body limits, error mapping, health, readiness and metrics.

Handlers only parse (`wire`), call the placement/bind services and serialize. Status codes
follow the extender protocol: the scheduler accepts only HTTP 200, so a filter or bind that
fails for a reason the scheduler should see answers 200 with `Error`; 400/413 are kept for
requests that are malformed, 5xx for prioritize failures (which the scheduler ignores, so we
log and count them in `dra_extender_prioritize_errors_total`).

Verbs are served at `/<verb>` and under any path prefix (`/scheduler/filter`), because the
scheduler's `urlPrefix` may carry a path.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
import prometheus_client
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram

from extender import wire
from extender.errors import ExtenderError, IndexNotReady, InvalidRequest
from extender.settings import Settings
from extender.verdicts import BindService, FilterVerdict, PlacementService

logger = logging.getLogger(__name__)

#: Latency buckets from 100 us to 10 s: the filter budget is milliseconds, the hard limit seconds.
DURATION_BUCKETS: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
VERBS: tuple[str, ...] = ("filter", "prioritize", "bind")
NOT_READY = "cluster state not ready"
_PREFIXED = "-prefixed"  # route-name suffix of the verb routes under a path prefix


@dataclass(frozen=True, slots=True)
class Metrics:
    """The Prometheus collectors of the HTTP layer, all registered on one registry."""

    registry: CollectorRegistry
    request_duration: Histogram
    requests: Counter
    prioritize_errors: Counter
    filter_nodes: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> Metrics:
        """Register the collectors on `registry` (once per registry)."""
        return cls(
            registry=registry,
            request_duration=Histogram(
                "dra_extender_request_duration_seconds",
                "Time to answer one extender request, by verb.",
                ["verb"],
                buckets=DURATION_BUCKETS,
                registry=registry,
            ),
            requests=Counter(
                "dra_extender_requests",
                "Extender requests by verb and HTTP status.",
                ["verb", "code"],
                registry=registry,
            ),
            prioritize_errors=Counter(
                "dra_extender_prioritize_errors",
                "Prioritize calls that failed (kube-scheduler ignores these silently).",
                registry=registry,
            ),
            filter_nodes=Counter(
                "dra_extender_filter_nodes",
                "Nodes judged by filter, by result (passed, failed, unresolvable).",
                ["result"],
                registry=registry,
            ),
        )


SETTINGS_KEY = web.AppKey("settings", Settings)
PLACEMENT_KEY = web.AppKey("placement", PlacementService)
BINDER_KEY = web.AppKey("binder", BindService)
METRICS_KEY = web.AppKey("metrics", Metrics)


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


def _error(status: int, message: str) -> web.Response:
    return _json({"error": message}, status)


async def _read_body(request: web.Request) -> bytes:
    limit = request.app[SETTINGS_KEY].max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=request.content_length)
    return await request.read()


def _pod_ref(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name', '?')}" if isinstance(meta, dict) else "?"


def _log_request(verb: str, *, pod: str, nodes_in: int, nodes_out: int, started: float) -> None:
    if logger.isEnabledFor(logging.DEBUG):
        ms = (time.perf_counter() - started) * 1000
        logger.debug(
            "%s pod=%s nodes_in=%d nodes_out=%d duration_ms=%.3f", verb, pod, nodes_in, nodes_out, ms
        )


async def handle_filter(request: web.Request) -> web.Response:
    """POST filter: which of the given nodes can hold the pod's claims."""
    started = time.perf_counter()
    pod, node_names, node_items = wire.decode_extender_args(await _read_body(request))
    placement = request.app[PLACEMENT_KEY]
    try:
        if not placement.ready():
            raise IndexNotReady("the device inventory is not loaded or synced yet")
        verdict = placement.filter(pod, node_names)
    except IndexNotReady as exc:
        verdict = FilterVerdict(error=f"{NOT_READY}: {exc}")
    except ExtenderError as exc:
        logger.warning("filter pod=%s failed: %s", _pod_ref(pod), exc)
        verdict = FilterVerdict(error=str(exc))
    except Exception as exc:
        logger.exception("filter pod=%s: unexpected error", _pod_ref(pod))
        verdict = FilterVerdict(error=f"internal error in filter: {type(exc).__name__}: {exc}")
    nodes = request.app[METRICS_KEY].filter_nodes
    nodes.labels("passed").inc(len(verdict.passed))
    nodes.labels("failed").inc(len(verdict.failed))
    nodes.labels("unresolvable").inc(len(verdict.unresolvable))
    _log_request(
        "filter", pod=_pod_ref(pod), nodes_in=len(node_names), nodes_out=len(verdict.passed), started=started
    )
    return web.Response(body=wire.encode_filter_result(verdict, node_items), content_type="application/json")


async def handle_prioritize(request: web.Request) -> web.Response:
    """POST prioritize: a 0..10 score per node."""
    started = time.perf_counter()
    pod, node_names, _ = wire.decode_extender_args(await _read_body(request))
    placement = request.app[PLACEMENT_KEY]
    if not placement.ready():
        logger.warning("prioritize pod=%s: %s", _pod_ref(pod), NOT_READY)
        return _error(503, f"{NOT_READY}: the device inventory is not loaded or synced yet")
    try:
        scores = placement.prioritize(pod, node_names)
    except Exception as exc:
        logger.exception("prioritize pod=%s: failed", _pod_ref(pod))
        return _error(500, f"prioritize failed: {type(exc).__name__}: {exc}")
    _log_request(
        "prioritize", pod=_pod_ref(pod), nodes_in=len(node_names), nodes_out=len(scores), started=started
    )
    return web.Response(body=wire.encode_host_priorities(scores), content_type="application/json")


async def handle_bind(request: web.Request) -> web.Response:
    """POST bind: allocate the pod's pending claims on the chosen node and bind it."""
    started = time.perf_counter()
    args = wire.decode_binding_args(await _read_body(request))
    pod = f"{args['PodNamespace']}/{args['PodName']}"
    try:
        error = await request.app[BINDER_KEY].bind(
            namespace=args["PodNamespace"], name=args["PodName"], uid=args["PodUID"], node=args["Node"]
        )
    except Exception as exc:
        logger.exception("bind pod=%s node=%s: unexpected error", pod, args["Node"])
        error = f"internal error in bind: {type(exc).__name__}: {exc}"
    if error:
        logger.info("bind pod=%s node=%s failed: %s", pod, args["Node"], error)
    _log_request("bind", pod=pod, nodes_in=1, nodes_out=0 if error else 1, started=started)
    return web.Response(body=wire.encode_binding_result(error), content_type="application/json")


async def handle_healthz(request: web.Request) -> web.Response:
    """GET healthz: 200 while the process serves."""
    return web.Response(text="ok")


async def handle_readyz(request: web.Request) -> web.Response:
    """GET readyz: 200 once placement is ready, else 503 with the reason."""
    if request.app[PLACEMENT_KEY].ready():
        return _json({"ready": True})
    return _json(
        {"ready": False, "reason": f"{NOT_READY}: the device inventory is not loaded or synced yet"}, 503
    )


async def handle_metrics(request: web.Request) -> web.Response:
    """GET metrics: Prometheus text exposition of the app's registry."""
    body = prometheus_client.generate_latest(request.app[METRICS_KEY].registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _errors_and_metrics(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Map our errors to JSON responses and record per-verb duration, status and failures."""
    route = (request.match_info.route.name or "").removesuffix(_PREFIXED)
    verb = route if route in VERBS else None
    started = time.perf_counter()
    try:
        response = await handler(request)
    except InvalidRequest as exc:
        response = _error(400, str(exc))
    except web.HTTPRequestEntityTooLarge:
        limit = request.app[SETTINGS_KEY].max_body_bytes
        response = _error(413, f"request body larger than the limit of {limit} bytes (max_body_bytes)")
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        response = _error(exc.status, exc.reason)
    except Exception as exc:  # a bug in a handler: answer, log, keep serving
        logger.exception("%s %s: unhandled error", request.method, request.path)
        response = _error(500, f"internal error: {type(exc).__name__}: {exc}")
    if verb is not None:
        metrics = request.app[METRICS_KEY]
        metrics.request_duration.labels(verb).observe(time.perf_counter() - started)
        metrics.requests.labels(verb, str(response.status)).inc()
        if verb == "prioritize" and response.status != 200:
            metrics.prioritize_errors.inc()
            if response.status < 500:
                logger.warning("prioritize rejected with HTTP %d", response.status)
    return response


def make_app(
    settings: Settings,
    *,
    placement: PlacementService,
    binder: BindService,
    registry: CollectorRegistry | None = None,
) -> web.Application:
    """Build the extender's aiohttp application; the only place where the HTTP side is wired.

    Args:
        settings: the effective settings (body limit).
        placement: answers filter and prioritize, and says whether the state is ready.
        binder: answers bind.
        registry: where to register the metrics; None creates a private registry that also
            carries the process and platform collectors.

    Returns:
        The application, ready for `web.run_app` or a test client.
    """
    if registry is None:
        registry = CollectorRegistry()
        prometheus_client.ProcessCollector(registry=registry)
        prometheus_client.PlatformCollector(registry=registry)
    app = web.Application(client_max_size=settings.max_body_bytes, middlewares=[_errors_and_metrics])
    app[SETTINGS_KEY] = settings
    app[PLACEMENT_KEY] = placement
    app[BINDER_KEY] = binder
    app[METRICS_KEY] = Metrics.create(registry)
    handlers = {"filter": handle_filter, "prioritize": handle_prioritize, "bind": handle_bind}
    for verb, handler in handlers.items():
        app.router.add_post(f"/{verb}", handler, name=verb)
        app.router.add_post(f"/{{prefix:.+}}/{verb}", handler, name=verb + _PREFIXED)
    app.router.add_get("/healthz", handle_healthz, name="healthz")
    app.router.add_get("/readyz", handle_readyz, name="readyz")
    app.router.add_get("/metrics", handle_metrics, name="metrics")
    return app
