"""The aiohttp application: routes, body limits, error mapping, health, readiness and metrics.

Handlers only parse (`wire`), call the placement/bind services and serialize. Status codes
follow the extender protocol: the scheduler accepts only HTTP 200, so a filter or bind that
fails for a reason the scheduler should see answers 200 with `Error`; 400/413 are kept for
requests that are malformed, 5xx for prioritize failures (which the scheduler ignores, so we
log and count them in `dra_extender_prioritize_errors_total`).

The event loop only reads requests and writes answers: the verbs' work (evaluation, the binders'
choose step) runs on the placement's single worker thread (`extender.worker`), so /healthz,
/readyz and /metrics answer at once while an expensive pod is evaluated. Filter and prioritize
wait for it at most `filter_timeout_seconds` and then answer with an error (the scheduler
retries); the overrunning work finishes on its own and leaves only complete cache entries.

Bodies are read with a deadline (`body_read_timeout_seconds`: 408 and the connection closed),
a body that does not decode as its `Content-Encoding` says is a 400, and a client that hangs up
mid-body is counted as code 499 (nginx's "client closed request"), not as a server error.

Browser requests from other origins that write (403) and verb bodies that are not JSON (415) are
refused before their body is read (`extender.origins`, docs/browser-requests.md).

Verbs are served at `/<verb>` and under any path prefix (`/scheduler/filter`), because the
scheduler's `urlPrefix` may carry a path.

Telemetry (collectors and helpers in `extender.telemetry`): one middleware wraps every verb
call in a SERVER span named after the verb (parent from an incoming W3C `traceparent`), times
it, counts it and writes one info log line with its key figures. Handlers fill a per-request
`_Outcome` with those figures and open the `decode`/`encode` child spans; span attributes are
built only when the span is recording, and with tracing off no span is created at all.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import orjson
import prometheus_client
from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry

from extender import origins, profiles, telemetry, verdicts, wire
from extender.errors import ExtenderError, IndexNotReady, InvalidRequest
from extender.pods import Pod, parse_pod
from extender.settings import Settings
from extender.telemetry import DURATION_BUCKETS, Metrics
from extender.verdicts import BindService, FilterVerdict, HostScore, HostScores, Placed, PlacementService
from extender.worker import PlacementWorker, WorkTimeout

__all__ = ["DURATION_BUCKETS", "VERBS", "Metrics", "make_app"]

logger = logging.getLogger(__name__)

VERBS: tuple[str, ...] = ("filter", "prioritize", "bind")
NOT_READY = "cluster state not ready"
_PREFIXED = "-prefixed"  # route-name suffix of the verb routes under a path prefix
#: The status recorded (never sent) when the client hung up before its body arrived (nginx's 499).
CLIENT_CLOSED = 499


@dataclass(frozen=True, slots=True)
class Tracing:
    """How an app traces: `tracer` None means tracing is off (no spans, no header parsing).

    `provider` is flushed on cleanup, and shut down too when the app `owns` it (it was passed
    to `make_app`); the global provider is only flushed, the SDK shuts it down at exit.
    """

    tracer: trace.Tracer | None = None
    provider: trace.TracerProvider | None = None
    owns: bool = False


#: The pod of a call that has none (bind, or a body that failed to decode).
_NO_POD = parse_pod({})


@dataclass(slots=True)
class _Outcome:
    """Key figures of one verb call: filled by the handler, reported by the middleware."""

    verb: str
    pod: Pod = _NO_POD
    namespace: str = ""
    name: str = ""
    uid: str = ""
    nodes_in: int = 0
    nodes_out: int = 0
    failed: int = 0  # filter: FailedNodes
    unresolvable: int = 0  # filter: FailedAndUnresolvableNodes
    scored: int = 0  # prioritize: nodes with a score above 0
    node: str = ""  # bind: the chosen node
    reason: str = ""  # bind: verdicts.BIND_REASONS; filter: telemetry.FILTER_ERROR_REASONS
    error: str = ""
    other_profile: bool = False  # filter/prioritize: the pod's profile is not in scheduler_names

    def set_pod(self, pod: Pod) -> None:
        self.pod = pod
        self.namespace = pod.namespace
        self.name = pod.name or "?"
        self.uid = pod.uid

    @property
    def pod_ref(self) -> str:
        return f"{self.namespace}/{self.name}" if self.name else "?"


#: The outcome of the verb call running in this context; set by the middleware.
_OUTCOME: contextvars.ContextVar[_Outcome | None] = contextvars.ContextVar(
    "dra_extender_outcome", default=None
)

SETTINGS_KEY = web.AppKey("settings", Settings)
PLACEMENT_KEY = web.AppKey("placement", PlacementService)
BINDER_KEY = web.AppKey("binder", BindService)
METRICS_KEY = web.AppKey("metrics", Metrics)
TRACING_KEY = web.AppKey("tracing", Tracing)
WORKER_KEY = web.AppKey("worker", PlacementWorker)
#: One-time log notices already written by this app (mutable: the app is frozen once it runs).
_NOTICES_KEY = web.AppKey("notices", set)


class _ClientGone(Exception):
    """The client closed the connection before its request body was complete."""


class _BodyTimeout(Exception):
    """The request body did not arrive within `body_read_timeout_seconds`."""


class _UnreadableBody(InvalidRequest):
    """The body does not decode (e.g. as its Content-Encoding says): 400, and the connection is
    closed, since where this request ends and the next begins is no longer certain."""


def _abandon_body(request: web.Request) -> None:
    """Stop reading a body we gave up on, so the answer goes out and the connection then closes.

    Without this aiohttp would keep reading ("lingering") the rest of the body for up to 10 s
    after the answer, and re-raise a decode error from it as an unhandled exception. Pausing the
    transport first means no more bytes are fed to the ended body stream.
    """
    if request.transport is not None:
        request.transport.pause_reading()
    request.content.feed_eof()


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


def _error(status: int, message: str) -> web.Response:
    outcome = _OUTCOME.get()
    if outcome is not None:
        outcome.error = message
    return _json({"error": message}, status)


async def _read_body(request: web.Request) -> bytes:
    """The whole body, within the size limit and the read deadline.

    Raises:
        web.HTTPRequestEntityTooLarge: larger than `max_body_bytes`.
        InvalidRequest: the body does not decode as its Content-Encoding says.
        _ClientGone: the client hung up before the body was complete.
        _BodyTimeout: the body was not complete within `body_read_timeout_seconds`.
    """
    settings = request.app[SETTINGS_KEY]
    limit = settings.max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=request.content_length)
    try:
        return await asyncio.wait_for(request.read(), settings.body_read_timeout_seconds)
    except TimeoutError:
        _abandon_body(request)
        raise _BodyTimeout() from None
    except ConnectionError:  # aiohttp's "Connection lost" while the body was still arriving
        raise _ClientGone() from None
    except RequestPayloadError as exc:
        _abandon_body(request)
        encoding = request.headers.get("Content-Encoding")
        detail = " ".join(str(exc).split()).removeprefix("400, message: ")
        if encoding:
            raise _UnreadableBody(
                f"request body does not match its Content-Encoding: {encoding} ({detail})"
            ) from None
        raise _UnreadableBody(f"request body cannot be read: {detail}") from None


def _outcome(verb: str) -> _Outcome:
    """The current call's outcome (a throwaway one when a handler runs outside the middleware)."""
    return _OUTCOME.get() or _Outcome(verb)


def _child(name: str) -> AbstractContextManager[Any]:
    # Under a non-recording verb span (tracing off, or not sampled) a child would not record
    # either: skip it without touching the tracer.
    if not trace.get_current_span().is_recording():
        return nullcontext()
    return telemetry.span(name)


async def _decode_args(request: web.Request, verb: str) -> tuple[_Outcome, Pod, list[str], Any]:
    """Read and decode ExtenderArgs and parse the pod, once per call (under a decode span); the
    outcome records pod and node count."""
    outcome = _outcome(verb)
    body = await _read_body(request)
    with _child(telemetry.SPAN_DECODE):
        raw, node_names, node_items = wire.decode_extender_args(body)
        pod = parse_pod(raw)
    outcome.set_pod(pod)
    outcome.nodes_in = len(node_names)
    return outcome, pod, node_names, node_items


def _too_slow(verb: str, outcome: _Outcome, exc: WorkTimeout) -> str:
    message = (
        f"{verb} of pod {outcome.pod_ref} {exc} (filter_timeout_seconds): the pod's evaluation is "
        "expensive or the extender is busy with earlier calls; the scheduler retries"
    )
    logger.warning("%s", message)
    return message


async def handle_filter(request: web.Request) -> web.Response:
    """POST filter: which of the given nodes can hold the pod's claims."""
    outcome, pod, node_names, node_items = await _decode_args(request, "filter")
    placement = request.app[PLACEMENT_KEY]
    settings = request.app[SETTINGS_KEY]
    deadline = settings.filter_timeout_seconds
    try:
        if not profiles.places(settings.scheduler_names, pod):
            outcome.other_profile = True  # not ours: every node passes, nothing is evaluated
            verdict = FilterVerdict(passed=node_names)
        elif not placement.ready():
            raise IndexNotReady("the device inventory is not loaded or synced yet")
        else:
            verdict = await request.app[WORKER_KEY].run(placement.filter, pod, node_names, timeout=deadline)
    except IndexNotReady as exc:
        outcome.reason = "not_ready"
        verdict = FilterVerdict(error=f"{NOT_READY}: {exc}")
    except WorkTimeout as exc:
        outcome.reason = "timeout"
        verdict = FilterVerdict(error=_too_slow("filter", outcome, exc))
    except ExtenderError as exc:
        logger.warning("filter pod=%s failed: %s", outcome.pod_ref, exc)
        verdict = FilterVerdict(error=str(exc))
    except Exception as exc:
        logger.exception("filter pod=%s: unexpected error", outcome.pod_ref)
        verdict = FilterVerdict(error=f"internal error in filter: {type(exc).__name__}: {exc}")
    _account_filter(request.app[METRICS_KEY], outcome, verdict)
    with _child(telemetry.SPAN_ENCODE):
        answer = wire.encode_filter_result(verdict, node_items)
    return web.Response(body=answer, content_type="application/json")


def _account_filter(metrics: Metrics, outcome: _Outcome, verdict: FilterVerdict) -> None:
    outcome.nodes_out = len(verdict.passed)
    outcome.failed = len(verdict.failed)
    outcome.unresolvable = len(verdict.unresolvable)
    metrics.filter_nodes.labels("passed").inc(outcome.nodes_out)
    metrics.filter_nodes.labels("failed").inc(outcome.failed)
    metrics.filter_nodes.labels("unresolvable").inc(outcome.unresolvable)
    if verdict.error:
        outcome.error = verdict.error
        outcome.reason = outcome.reason or "error"
        metrics.filter_errors.labels(outcome.reason).inc()
    if logger.isEnabledFor(logging.DEBUG):  # per-node detail (DESIGN: explain every no)
        for result, reasons in (("failed", verdict.failed), ("unresolvable", verdict.unresolvable)):
            for node, reason in reasons.items():
                extra = {"verb": "filter", "pod": outcome.pod_ref, "node": node, "result": result}
                extra["reason"] = reason
                logger.debug("filter %s: node %s %s: %s", outcome.pod_ref, node, result, reason, extra=extra)


async def handle_prioritize(request: web.Request) -> web.Response:
    """POST prioritize: a 0..10 score per node."""
    outcome, pod, node_names, _ = await _decode_args(request, "prioritize")
    placement = request.app[PLACEMENT_KEY]
    settings = request.app[SETTINGS_KEY]
    if not profiles.places(settings.scheduler_names, pod):
        outcome.other_profile = True  # not ours: no preference among the nodes
        scores: Sequence[HostScore] = HostScores.zeros(node_names)
    elif not placement.ready():
        logger.warning("prioritize pod=%s: %s", outcome.pod_ref, NOT_READY)
        return _error(503, f"{NOT_READY}: the device inventory is not loaded or synced yet")
    else:
        try:
            scores = await request.app[WORKER_KEY].run(
                placement.prioritize, pod, node_names, timeout=settings.filter_timeout_seconds
            )
        except WorkTimeout as exc:
            return _error(503, _too_slow("prioritize", outcome, exc))
        except Exception as exc:
            logger.exception("prioritize pod=%s: failed", outcome.pod_ref)
            return _error(500, f"prioritize failed: {type(exc).__name__}: {exc}")
    _account_prioritize(request.app[METRICS_KEY], outcome, scores)
    with _child(telemetry.SPAN_ENCODE):
        answer = wire.encode_host_priorities(scores)
    return web.Response(body=answer, content_type="application/json")


def _account_prioritize(metrics: Metrics, outcome: _Outcome, scores: Sequence[HostScore]) -> None:
    outcome.nodes_out = len(scores)
    if isinstance(scores, HostScores):
        outcome.scored = scores.positive()
    else:
        outcome.scored = sum(1 for s in scores if s.score > 0)
    metrics.prioritize_nodes.labels("scored").inc(outcome.scored)
    metrics.prioritize_nodes.labels("zero").inc(outcome.nodes_out - outcome.scored)
    if logger.isEnabledFor(logging.DEBUG):
        for s in scores:
            extra = {"verb": "prioritize", "pod": outcome.pod_ref, "node": s.host, "score": s.score}
            logger.debug("prioritize %s: node %s score %d", outcome.pod_ref, s.host, s.score, extra=extra)


async def handle_bind(request: web.Request) -> web.Response:
    """POST bind: allocate the pod's pending claims on the chosen node and bind it."""
    outcome = _outcome("bind")
    body = await _read_body(request)
    with _child(telemetry.SPAN_DECODE):
        args = wire.decode_binding_args(body)
    outcome.namespace, outcome.name, outcome.uid = args["PodNamespace"], args["PodName"], args["PodUID"]
    outcome.node, outcome.nodes_in = args["Node"], 1
    placed: Placed | None = None
    try:
        if not request.app[PLACEMENT_KEY].ready():
            raise IndexNotReady("the device inventory is not loaded or synced yet")
        result = await request.app[BINDER_KEY].bind(
            namespace=args["PodNamespace"], name=args["PodName"], uid=args["PodUID"], node=args["Node"]
        )
        error, outcome.reason = result.error, telemetry.bind_reason(result)
        placed = result.placed if not error else None
    except IndexNotReady as exc:
        outcome.reason, error = verdicts.NOT_READY, f"{NOT_READY}: {exc}"
    except Exception as exc:
        logger.exception("bind pod=%s node=%s: unexpected error", outcome.pod_ref, args["Node"])
        outcome.reason = telemetry.bind_reason(exc)
        error = f"internal error in bind: {type(exc).__name__}: {exc}"
    request.app[METRICS_KEY].bind_outcomes.labels(outcome.reason).inc()
    if placed is not None:
        request.app[METRICS_KEY].count_placed(placed)
    outcome.error, outcome.nodes_out = error, 0 if error else 1
    with _child(telemetry.SPAN_ENCODE):
        answer = wire.encode_binding_result(error)
    response = web.Response(body=answer, content_type="application/json")
    if outcome.reason == verdicts.NOT_LEADER:
        # kube-scheduler keeps its connections open, and the Service (kube-proxy) chooses a
        # replica per connection: on a connection to a follower every retry would come back
        # here. Closing it makes the retry open a new connection, which may reach the leader.
        response.force_close()
    return response


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


async def _answer(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Run the handler and map our errors to JSON responses."""
    try:
        return await handler(request)
    except _UnreadableBody as exc:
        response = _error(400, str(exc))
        response.force_close()
        return response
    except InvalidRequest as exc:
        return _error(400, str(exc))
    except web.HTTPRequestEntityTooLarge:
        limit = request.app[SETTINGS_KEY].max_body_bytes
        return _error(413, f"request body larger than the limit of {limit} bytes (max_body_bytes)")
    except _BodyTimeout:
        seconds = request.app[SETTINGS_KEY].body_read_timeout_seconds
        response = _error(408, f"request body not complete within {seconds:g} s (body_read_timeout_seconds)")
        response.force_close()  # the rest of the body may still come: do not read it as a request
        return response
    except _ClientGone:
        _client_gone(request)
        return _error(CLIENT_CLOSED, "client closed the connection before sending the whole body")
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error(exc.status, exc.reason)
    except Exception as exc:  # a bug in a handler: answer, log, keep serving
        logger.exception("%s %s: unhandled error", request.method, request.path)
        return _error(500, f"internal error: {type(exc).__name__}: {exc}")


def _client_gone(request: web.Request) -> None:
    """Log a hang-up mid-body: once at info (what it means), then at debug; it is counted as 499."""
    notices = request.app[_NOTICES_KEY]
    level = logging.DEBUG if "client_gone" in notices else logging.INFO
    notices.add("client_gone")
    logger.log(
        level,
        "%s %s: the client closed the connection before sending the whole body; counted as code %d "
        "in dra_extender_requests_total (further ones are logged at debug)",
        request.method,
        request.path,
        CLIENT_CLOSED,
    )


def _verb_span(tracing: Tracing, request: web.Request, verb: str) -> AbstractContextManager[trace.Span]:
    if tracing.tracer is None:
        return nullcontext(trace.INVALID_SPAN)
    # The propagator API (W3C tracecontext + baggage unless OTEL_PROPAGATORS says otherwise).
    parent = propagate.extract(request.headers)
    return tracing.tracer.start_as_current_span(verb, context=parent, kind=SpanKind.SERVER)


@web.middleware
async def _errors_and_telemetry(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Map our errors to JSON responses; around verbs also span, time, count and log the call."""
    route = (request.match_info.route.name or "").removesuffix(_PREFIXED)
    if route not in VERBS:
        return await _answer(request, handler)
    tracing = request.app[TRACING_KEY]
    outcome = _Outcome(route)
    outcome_token = _OUTCOME.set(outcome)
    tracer_token = telemetry.use_tracer(tracing.tracer) if tracing.tracer is not None else None
    started = time.perf_counter()
    try:
        with _verb_span(tracing, request, route) as span:
            response = await _answer(request, handler)
            duration = time.perf_counter() - started
            _count(request.app[METRICS_KEY], route, response.status, duration)
            if span.is_recording():
                _annotate(span, request, outcome, response.status)
            _log_call(outcome, response.status, duration)
    finally:
        if tracer_token is not None:
            telemetry.reset_tracer(tracer_token)
        _OUTCOME.reset(outcome_token)
    return response


@web.middleware
async def _browser_guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse cross-origin browser writes (403) and verb bodies that are not JSON (415), before
    the body is read (`extender.origins` says why). Inside `_errors_and_telemetry`, so a refused
    verb call is still counted and logged with its status."""
    refusal = origins.cross_origin_refusal(request.method, request.headers)
    status = 403
    route = (request.match_info.route.name or "").removesuffix(_PREFIXED)
    if not refusal and route in VERBS:
        refusal, status = origins.json_refusal(request.headers.get("Content-Type")), 415
    if not refusal:
        return await handler(request)
    # A verb's call line (`_log_call`) already carries the status and the error.
    level = logging.DEBUG if route in VERBS else logging.INFO
    logger.log(level, "%s %s refused with HTTP %d: %s", request.method, request.path, status, refusal)
    response = _error(status, refusal)
    response.force_close()  # the body is not read: do not take what follows it for a request
    return response


def _count(metrics: Metrics, verb: str, status: int, duration: float) -> None:
    metrics.request_duration.labels(verb).observe(duration)
    metrics.requests.labels(verb, str(status)).inc()
    if verb == "prioritize" and status not in (200, CLIENT_CLOSED):
        metrics.prioritize_errors.inc()
        if status < 500:
            logger.warning("prioritize rejected with HTTP %d", status)


def _annotate(span: trace.Span, request: web.Request, outcome: _Outcome, status: int) -> None:
    """Span attributes and status; called only for a recording span (the dict costs time)."""
    attributes: dict[str, Any] = {
        "http.request.method": request.method,
        "url.path": request.path,
        "http.response.status_code": status,
        telemetry.ATTR_NODES_IN: outcome.nodes_in,
        telemetry.ATTR_NODES_OUT: outcome.nodes_out,
    }
    if outcome.name:
        attributes.update({telemetry.ATTR_NAMESPACE: outcome.namespace, telemetry.ATTR_POD: outcome.name})
    if outcome.uid:
        attributes[telemetry.ATTR_POD_UID] = outcome.uid
    spec = outcome.pod.source.get("spec")  # present as a list, even an empty one: the attribute is set
    if isinstance(spec, dict) and isinstance(spec.get("resourceClaims"), list):
        attributes[telemetry.ATTR_CLAIMS] = [c.name for c in outcome.pod.resource_claims if c.name]
    if outcome.verb == "filter":
        attributes[telemetry.ATTR_NODES_FAILED] = outcome.failed
        attributes[telemetry.ATTR_NODES_UNRESOLVABLE] = outcome.unresolvable
    if outcome.verb == "bind":
        attributes[telemetry.ATTR_NODE] = outcome.node
        attributes[telemetry.ATTR_BIND_REASON] = outcome.reason
    generation = _index_generation(request.app[PLACEMENT_KEY])
    if generation is not None:
        attributes[telemetry.ATTR_INDEX_GENERATION] = generation
    if outcome.error:
        attributes[telemetry.ATTR_ERROR] = outcome.error
    span.set_attributes(attributes)
    # A SERVER span is an error for 5xx, or when the answer carries an Error (filter, bind);
    # 4xx is the client's fault (OTel HTTP conventions).
    if (outcome.error and status < 400) or status >= 500:
        span.set_status(Status(StatusCode.ERROR, outcome.error or f"HTTP {status}"))


def _index_generation(placement: PlacementService) -> int | None:
    """The device index generation (the first of `generation()`), None if it cannot be read."""
    try:
        return placement.generation()[0]
    except Exception:
        return None


def _log_call(outcome: _Outcome, status: int, duration: float) -> None:
    """One info line per verb call with its key figures (the trace id is added by the formatter).

    The message is `<verb> key=value ...` for people and plain-text logs; the same figures go in
    `extra=` for the JSON formatter.
    """
    # A hang-up was already logged by `_client_gone`; its call line is detail.
    level = logging.DEBUG if status == CLIENT_CLOSED else logging.INFO
    if not logger.isEnabledFor(level):
        return
    fields: dict[str, Any] = {
        "pod": outcome.pod_ref,
        "nodes_in": outcome.nodes_in,
        "nodes_out": outcome.nodes_out,
        "duration_ms": round(duration * 1000, 3),
    }
    if outcome.verb == "filter":
        fields.update(passed=outcome.nodes_out, failed=outcome.failed, unresolvable=outcome.unresolvable)
    elif outcome.verb == "prioritize":
        fields["scored"] = outcome.scored
    else:
        fields.update(node=outcome.node, reason=outcome.reason)
    if outcome.other_profile:
        fields["skipped"] = f"profile {outcome.pod.scheduler_name} not in scheduler_names"
    fields["code"] = status
    if outcome.error:
        fields["error"] = outcome.error
    text = " ".join([outcome.verb, *(f"{k}={telemetry.logfmt(v)}" for k, v in fields.items())])
    logger.log(level, "%s", text, extra={"verb": outcome.verb, **fields})


def _tracing_for(provider: trace.TracerProvider | None) -> Tracing:
    if provider is not None:
        return Tracing(provider.get_tracer(telemetry.TRACER_NAME), provider, owns=True)
    installed = trace.get_tracer_provider()
    if isinstance(installed, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return Tracing()  # nothing installed: tracing off, zero per-request work
    return Tracing(installed.get_tracer(telemetry.TRACER_NAME), installed, owns=False)


def make_app(
    settings: Settings,
    *,
    placement: PlacementService,
    binder: BindService,
    registry: CollectorRegistry | None = None,
    tracer_provider: trace.TracerProvider | None = None,
    leader: Callable[[], bool] | None = None,
) -> web.Application:
    """Build the extender's aiohttp application; the only place where the HTTP side is wired.

    Args:
        settings: the effective settings (body size limit and read timeout, the verbs' deadline).
        placement: answers filter and prioritize, and says whether the state is ready; its
            `stats()` (index size, CEL counters, ...) are exported by a scrape-time collector.
            Its `worker`, when not None, runs the verb work; otherwise the app makes a worker
            thread of its own and closes it on cleanup.
        binder: answers bind.
        registry: where to register the metrics; None creates a private registry that also
            carries the process and platform collectors.
        tracer_provider: spans of this app go here, and the app shuts the provider down on
            cleanup. None uses the global provider if one is installed when the app is built
            (`telemetry.configure_tracing(..., set_global=True)`; flushed on cleanup) and
            otherwise traces nothing.
        leader: whether this replica holds the leader Lease (leader election on), exported as
            `dra_extender_leader`; None: no such metric.

    Returns:
        The application, ready for `web.run_app` or a test client.
    """
    if registry is None:
        registry = CollectorRegistry()
        prometheus_client.ProcessCollector(registry=registry)
        prometheus_client.PlatformCollector(registry=registry)
    app = web.Application(
        client_max_size=settings.max_body_bytes, middlewares=[_errors_and_telemetry, _browser_guard]
    )
    app[SETTINGS_KEY] = settings
    app[PLACEMENT_KEY] = placement
    app[BINDER_KEY] = binder
    app[METRICS_KEY] = Metrics.create(registry, placement=placement, leader=leader)
    app[TRACING_KEY] = _tracing_for(tracer_provider)
    app[_NOTICES_KEY] = set()
    worker = placement.worker
    if worker is None:  # a service without its own thread: the app's
        worker = PlacementWorker()
        app.on_cleanup.append(lambda _: _close(worker))
    app[WORKER_KEY] = worker
    app.cleanup_ctx.append(_flush_spans)
    handlers = {"filter": handle_filter, "prioritize": handle_prioritize, "bind": handle_bind}
    for verb, handler in handlers.items():
        app.router.add_post(f"/{verb}", handler, name=verb)
        app.router.add_post(f"/{{prefix:.+}}/{verb}", handler, name=verb + _PREFIXED)
    app.router.add_get("/healthz", handle_healthz, name="healthz")
    app.router.add_get("/readyz", handle_readyz, name="readyz")
    app.router.add_get("/metrics", handle_metrics, name="metrics")
    return app


async def _close(worker: PlacementWorker) -> None:
    worker.close()


async def _flush_spans(app: web.Application) -> AsyncIterator[None]:
    """On cleanup, export the spans still queued (in a thread: the exporter blocks on I/O)."""
    yield
    tracing = app[TRACING_KEY]
    finish = getattr(tracing.provider, "shutdown" if tracing.owns else "force_flush", None)
    if tracing.tracer is not None and callable(finish):
        await asyncio.to_thread(finish)
