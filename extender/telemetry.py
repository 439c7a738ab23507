"""Tracing, metrics and logs: everything the extender reports about itself.

- **Tracing** (OpenTelemetry): `configure_tracing` builds an SDK `TracerProvider` exporting over
  OTLP when `--tracing` or `OTEL_TRACES_EXPORTER` asks for it, and nothing otherwise: then no
  provider exists, the API's no-op tracer answers, and the HTTP layer skips span work entirely.
  `span(name, **attributes)` opens a child span from any layer below the server (placement,
  binder) without knowing whether tracing is on or which provider an app was given.
- **Metrics** (prometheus-client): `Metrics` holds the collectors the request path updates, on a
  per-app registry; `StateCollector` reads index size, CEL counters, kernel time, watch health and
  assumed allocations from the placement service at scrape time, so the hot path keeps no books.
- **Logs**: `configure_logging` installs one stderr handler with `JsonFormatter` (one object per
  line) or `TextFormatter`; both add the `extra=` fields of a record and the current trace id.

What it leaves out: the verb spans, the request log line and metric updates live in `server.py`;
nothing here reads `os.environ` (the OTel SDK and exporters read their own `OTEL_*` variables).
"""

from __future__ import annotations

import contextvars
import datetime
import logging
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import orjson
from opentelemetry import trace
from opentelemetry.util.types import AttributeValue
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from extender import __version__, cgroup, verdicts
from extender.errors import KubeAPIError
from extender.settings import Settings
from extender.verdicts import PlacementService, PlacementStats
from kernels import warming

if TYPE_CHECKING:  # the SDK is imported only when tracing is configured
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

log = logging.getLogger(__name__)

T = TypeVar("T")

TRACER_NAME = "dra-topology-extender"
DEFAULT_SERVICE_NAME = "dra-topology-extender"
#: Where OTLP/HTTP receivers take traces; appended to an `--otlp-endpoint` given without a path.
OTLP_HTTP_TRACES_PATH = "/v1/traces"
GRPC_EXPORTER_PACKAGE = "opentelemetry-exporter-otlp-proto-grpc"

# Span names. The verb spans are named after the verb ("filter", "prioritize", "bind").
SPAN_DECODE = "decode"
SPAN_ENCODE = "encode"
SPAN_RESOLVE_CLAIMS = "resolve_claims"
SPAN_ALLOCATE = "allocate"
SPAN_SCORE = "score"
SPAN_API_WRITE = "api_write"

# Span attribute keys (semantic-convention names where one exists).
ATTR_NAMESPACE = "k8s.namespace.name"
ATTR_POD = "k8s.pod.name"
ATTR_POD_UID = "k8s.pod.uid"
ATTR_CLAIMS = "dra_extender.pod.claims"
ATTR_NODES_IN = "dra_extender.nodes.in"
ATTR_NODES_OUT = "dra_extender.nodes.out"
ATTR_NODES_FAILED = "dra_extender.nodes.failed"
ATTR_NODES_UNRESOLVABLE = "dra_extender.nodes.unresolvable"
ATTR_NODE = "dra_extender.node"
ATTR_INDEX_GENERATION = "dra_extender.index.generation"
ATTR_BIND_REASON = "dra_extender.bind.reason"
ATTR_ERROR = "dra_extender.error"

#: Latency buckets from 100 µs to 10 s: the filter budget is milliseconds, the hard limit seconds.
DURATION_BUCKETS: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
FILTER_NODE_RESULTS: tuple[str, ...] = ("passed", "failed", "unresolvable")
FILTER_ERROR_REASONS: tuple[str, ...] = ("not_ready", "timeout", "error")
PRIORITIZE_NODE_RESULTS: tuple[str, ...] = ("scored", "zero")
#: Distinct `shape` label values of the placed-pods counter; later shapes count as OTHER_SHAPE,
#: and so does a shape label longer than MAX_SHAPE_LABEL (a pod with dozens of requests).
MAX_PLACED_SHAPES = 64
MAX_SHAPE_LABEL = 200
OTHER_SHAPE = "other"


# ===================================================================== tracing
#: The tracer `span()` uses inside a request: set by the server for the requests of a traced app,
#: so spans below the server land in that app's provider (tests give each app its own).
_request_tracer: contextvars.ContextVar[trace.Tracer | None] = contextvars.ContextVar(
    "dra_extender_tracer", default=None
)
#: The tracer `span()` uses elsewhere; set only by `configure_tracing(set_global=True)`, so with
#: tracing off `span()` does not even reach the API's no-op tracer.
_global_tracer: trace.Tracer | None = None


def configure_tracing(
    settings: Settings, environ: Mapping[str, str], *, set_global: bool = False
) -> TracerProvider | None:
    """Build the tracer provider the settings and `OTEL_*` variables ask for, or None (tracing off).

    Tracing is on when `settings.tracing` is true (`--tracing`) or `OTEL_TRACES_EXPORTER` names an
    exporter; `OTEL_TRACES_EXPORTER=none` and `OTEL_SDK_DISABLED=true` turn it off regardless, as
    in every OTel SDK. Exporters: `otlp` (default) and `console`, comma-separated. The OTLP
    transport is `settings.otlp_protocol` when set to something other than the default, else
    `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` / `OTEL_EXPORTER_OTLP_PROTOCOL`, else http/protobuf. The
    endpoint is `settings.otlp_endpoint` when given (an HTTP URL without a path gets `/v1/traces`),
    else the exporter's own `OTEL_EXPORTER_OTLP[_TRACES]_ENDPOINT` handling. Sampler
    (`OTEL_TRACES_SAMPLER[_ARG]`), batch limits (`OTEL_BSP_*`), headers, timeouts and resource
    attributes (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`) are read by the SDK itself.

    Args:
        settings: `tracing`, `otlp_endpoint` and `otlp_protocol` are used.
        environ: the process environment (only `__main__` passes `os.environ`).
        set_global: also install the provider as the global one, so `span()` outside requests
            and any instrumented library export through it; a process can do this once.

    Returns:
        The provider with a BatchSpanProcessor per exporter, or None when tracing is off.

    Raises:
        ValueError: unknown exporter or protocol, or gRPC asked for without its package installed.
    """
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    names = [n.strip().lower() for n in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
    if "none" in names or (not names and not settings.tracing):
        return None
    unknown = sorted(set(names) - {"otlp", "console"})
    if unknown:
        raise ValueError(
            f"OTEL_TRACES_EXPORTER: unsupported exporter(s) {unknown}; allowed: otlp, console, none"
        )

    from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    # Exporters first: a bad protocol fails before any processor thread is started.
    exporters = [
        _otlp_exporter(settings, environ) if n == "otlp" else ConsoleSpanExporter() for n in names or ["otlp"]
    ]
    resource = Resource.create({SERVICE_VERSION: __version__})
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    provider = TracerProvider(resource=resource)  # sampler from OTEL_TRACES_SAMPLER, via the SDK
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    if set_global:
        global _global_tracer
        trace.set_tracer_provider(provider)
        _global_tracer = provider.get_tracer(TRACER_NAME, __version__)
    log.info(
        "tracing on: exporters %s, service %s", ",".join(names or ["otlp"]), resource.attributes[SERVICE_NAME]
    )
    return provider


def otlp_protocol(settings: Settings, environ: Mapping[str, str]) -> str:
    """The OTLP transport in effect: a non-default setting wins over the standard env variables."""
    default = Settings().otlp_protocol
    if settings.otlp_protocol != default:
        return settings.otlp_protocol
    chosen = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    return (chosen or default).strip().lower()


def otlp_http_endpoint(url: str) -> str:
    """`url` as the OTLP/HTTP exporter wants it: a full signal URL (`http://host:4318/v1/traces`).

    The exporter uses an `endpoint=` argument verbatim (unlike `OTEL_EXPORTER_OTLP_ENDPOINT`, to
    which it appends `/v1/traces`), so a bare `http://host:4318` would POST to `/` and get 404.
    """
    return url.rstrip("/") + OTLP_HTTP_TRACES_PATH if urlsplit(url).path in ("", "/") else url


def _otlp_exporter(settings: Settings, environ: Mapping[str, str]) -> SpanExporter:
    protocol = otlp_protocol(settings, environ)
    endpoint = settings.otlp_endpoint or None
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc
        except ImportError as exc:
            raise ValueError(
                f"OTLP over gRPC needs the package {GRPC_EXPORTER_PACKAGE} (pip install "
                f"{GRPC_EXPORTER_PACKAGE}); or use --otlp-protocol http/protobuf"
            ) from exc
        exporter: SpanExporter = Grpc(endpoint=endpoint)  # Grpc is Any where the package is absent
        return exporter
    if protocol != "http/protobuf":
        raise ValueError(f"OTLP protocol {protocol!r} is not supported; allowed: http/protobuf, grpc")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http

    return Http(endpoint=otlp_http_endpoint(endpoint) if endpoint else None)


def use_tracer(tracer: trace.Tracer | None) -> contextvars.Token[trace.Tracer | None]:
    """Make `span()` use `tracer` in the current context (the server does this per request)."""
    return _request_tracer.set(tracer)


def reset_tracer(token: contextvars.Token[trace.Tracer | None]) -> None:
    """Undo `use_tracer`."""
    _request_tracer.reset(token)


@contextmanager
def span(name: str, **attributes: AttributeValue | None) -> Iterator[trace.Span]:
    """A child span of the current one, for work below the server (claims, allocation, API writes).

    Keyword names are the attribute keys, verbatim; pass dotted keys as `**{"k8s.pod.name": n}`.
    None values are dropped. Keep the values cheap: compute costly ones inside the block under
    `if s.is_recording():`. With tracing off this yields the invalid (non-recording) span and
    touches no OTel machinery. Exceptions are recorded on the span and re-raised.
    """
    tracer = _request_tracer.get() or _global_tracer
    if tracer is None:
        yield trace.INVALID_SPAN
        return
    with tracer.start_as_current_span(name) as current:
        if attributes and current.is_recording():
            current.set_attributes({k: v for k, v in attributes.items() if v is not None})
        yield current


# ===================================================================== metrics
@dataclass(frozen=True, slots=True)
class Metrics:
    """The Prometheus collectors of the request path, all registered on one (per-app) registry."""

    registry: CollectorRegistry
    request_duration: Histogram
    requests: Counter
    prioritize_errors: Counter
    filter_nodes: Counter
    filter_errors: Counter
    prioritize_nodes: Counter
    bind_outcomes: Counter
    placed_pods: Counter
    #: The `shape` values `placed_pods` has (at most MAX_PLACED_SHAPES); written on the event loop.
    placed_shapes: set[str]

    @classmethod
    def create(
        cls,
        registry: CollectorRegistry,
        *,
        placement: PlacementService | None = None,
        leader: Callable[[], bool] | None = None,
        memory_limit: Callable[[], int | None] = cgroup.memory_limit_bytes,
    ) -> Metrics:
        """Register the collectors on `registry` (once per registry).

        Args:
            registry: where to register.
            placement: when given, a `StateCollector` over it is registered too.
            leader: when given (leader election is on), `dra_extender_leader` reports it.
            memory_limit: the memory limit in bytes or None, read at scrape time
                (`dra_extender_memory_limit_bytes`; default: the process's cgroup).
        """

        def counter(name: str, doc: str, label: str | None = None, values: Iterable[str] = ()) -> Counter:
            made = Counter(name, doc, [label] if label else [], registry=registry)
            for value in values:  # export the fixed label values at 0, so rate() works from the start
                made.labels(value)
            return made

        metrics = cls(
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
            prioritize_errors=counter(
                "dra_extender_prioritize_errors",
                "Prioritize calls that failed (kube-scheduler ignores these silently).",
            ),
            filter_nodes=counter(
                "dra_extender_filter_nodes",
                "Nodes judged by filter, by result (passed, failed, unresolvable).",
                "result",
                FILTER_NODE_RESULTS,
            ),
            filter_errors=counter(
                "dra_extender_filter_errors",
                "Filter calls answered with Error (the scheduler retries the pod), by reason.",
                "reason",
                FILTER_ERROR_REASONS,
            ),
            prioritize_nodes=counter(
                "dra_extender_prioritize_nodes",
                "Nodes scored by prioritize, by result (scored: above 0, zero).",
                "result",
                PRIORITIZE_NODE_RESULTS,
            ),
            bind_outcomes=counter(
                "dra_extender_bind_outcomes",
                "Bind calls by outcome reason (" + ", ".join(verdicts.BIND_REASONS) + ").",
                "reason",
                verdicts.BIND_REASONS,
            ),
            placed_pods=Counter(
                "dra_extender_placed_pods",
                "Pods bound with their claims allocated by this process, by shape (device class:count "
                "of each request) and method (exact, bounded, first-fit, partition, none).",
                ["shape", "method"],
                registry=registry,
            ),
            placed_shapes=set(),
        )
        if placement is not None:
            registry.register(StateCollector(ready=placement.ready, stats=placement.stats))
        if leader is not None:
            registry.register(LeaderCollector(leader))
        registry.register(MemoryLimitCollector(memory_limit))
        return metrics

    def count_placed(self, placed: verdicts.Placed) -> None:
        """Count one placed pod; shapes past the first MAX_PLACED_SHAPES count as OTHER_SHAPE."""
        shape = placed.shape
        if shape not in self.placed_shapes:
            if len(self.placed_shapes) >= MAX_PLACED_SHAPES or len(shape) > MAX_SHAPE_LABEL:
                shape = OTHER_SHAPE
            else:
                self.placed_shapes.add(shape)
        self.placed_pods.labels(shape, placed.method).inc()


def bind_reason(outcome: verdicts.BindOutcome | BaseException) -> str:
    """The `reason` label for a bind: the binder's outcome, or the exception that escaped it.

    An outcome gives its own reason when that is one of `verdicts.BIND_REASONS`. An exception is "timeout"
    (a TimeoutError), "conflict" or "not_found" (a KubeAPIError with status 409 or 404); anything
    else is "error".
    """
    if isinstance(outcome, verdicts.BindOutcome):
        return outcome.reason if outcome.reason in verdicts.BIND_REASONS else verdicts.ERROR
    if isinstance(outcome, TimeoutError):
        return verdicts.TIMEOUT
    if isinstance(outcome, KubeAPIError):
        return {409: verdicts.CONFLICT, 404: verdicts.NODE_GONE}.get(outcome.status, verdicts.ERROR)
    return verdicts.ERROR


class StateCollector(Collector):
    """Gauges and counters read from the placement service at scrape time (no hot-path bookkeeping).

    Reads `ready()` and `stats()` (a `PlacementStats`): the index (nodes, device rows, generation,
    and the CEL counters of its evaluator; only while ready), the assumed allocations (when the
    service has an AssumeCache), the kernel totals and the watch source's stats (kube mode); and
    `kernels_compiled()` (by default `kernels.warming.compiled`: 0 while the kernels' twins answer
    during a background warm-up). A failing read is logged and skipped: a scrape never fails
    because of the state it reports on. Runs on the event loop (inside /metrics).
    """

    def __init__(
        self,
        *,
        ready: Callable[[], bool],
        stats: Callable[[], PlacementStats],
        kernels_compiled: Callable[[], bool] = warming.compiled,
    ) -> None:
        self._ready = ready
        self._stats = stats
        self._kernels_compiled = kernels_compiled

    def describe(self) -> Iterable[Metric]:
        # Names only, so registering does not call into placement (which may build the index).
        return []

    def collect(self) -> Iterable[Metric]:
        ready = _read(self._ready, "ready")
        if ready is not None:
            yield _gauge(
                "dra_extender_ready", "1 when the cluster state is loaded/synced, else 0.", float(bool(ready))
            )
        compiled = _read(self._kernels_compiled, "kernels_compiled")
        if compiled is not None:
            yield _gauge(
                "dra_extender_kernels_compiled",
                "1 once the numba kernels are compiled; 0 while their plain-Python twins answer "
                "(a background warm-up is running or failed, or none ran).",
                float(bool(compiled)),
            )
        stats = _read(self._stats, "stats")
        if stats is None:
            return
        # `stats().index` is the index as last built: a scrape never builds one (that belongs on
        # the placement worker thread).
        if ready and stats.index is not None:
            yield from self._index_metrics(stats.index)
        if stats.assumed is not None:
            yield _gauge(
                "dra_extender_assumed_allocations",
                "Claim allocations chosen by this process whose writes are still in flight.",
                stats.assumed,
            )
        yield _counter(
            "dra_extender_kernel_seconds",
            "Time spent in the topology scoring kernels.",
            float(stats.kernel_seconds),
        )
        yield _counter(
            "dra_extender_kernel_calls", "Calls of the topology scoring kernels.", float(stats.kernel_calls)
        )
        yield _counter(
            "dra_extender_index_builds", "Device index generations built.", float(stats.index_builds)
        )
        yield _counter(
            "dra_extender_index_build_seconds",
            "Time spent building device index generations.",
            float(stats.index_build_seconds),
        )
        last_build = GaugeMetricFamily(
            "dra_extender_index_last_build_seconds", "How long the last device index build took."
        )
        if stats.index_last_build_seconds is not None:
            last_build.add_metric([], stats.index_last_build_seconds)
        yield last_build
        if stats.source is not None:
            yield from self._source_metrics(stats.source)

    @staticmethod
    def _index_metrics(index: Any) -> Iterator[Metric]:
        yield _gauge("dra_extender_index_nodes", "Nodes in the device index.", len(index.node_names))
        yield _gauge("dra_extender_index_device_rows", "Device rows in the device index.", index.num_rows)
        yield _gauge("dra_extender_index_generation", "Generation of the device index.", index.generation)
        evaluator = getattr(index, "evaluator", None)
        if evaluator is not None:
            yield _counter(
                "dra_extender_cel_evaluations",
                "CEL selector evaluations actually run (per expression and device; cache misses).",
                getattr(evaluator, "evaluations", 0),
            )
            yield _counter(
                "dra_extender_cel_cache_hits",
                "CEL selector results served from the per-device cache.",
                getattr(evaluator, "hits", 0),
            )
            yield _gauge(
                "dra_extender_cel_result_cache_expressions",
                "Selector expressions whose per-device results are kept (an LRU of celResultCacheSize).",
                getattr(evaluator, "cached_expressions", 0),
            )
            yield _counter(
                "dra_extender_cel_result_cache_evictions",
                "Selector expressions evicted from the result cache (their results are recomputed on use).",
                getattr(evaluator, "evictions", 0),
            )

    @staticmethod
    def _source_metrics(stats: Mapping[str, Any]) -> Iterator[Metric]:
        families = (
            ("relists", CounterMetricFamily, "dra_extender_watch_relists", "Full relists, by object kind."),
            (
                "watch_restarts",
                CounterMetricFamily,
                "dra_extender_watch_restarts",
                "Watch restarts, by kind.",
            ),
            (
                "last_event_age_seconds",
                GaugeMetricFamily,
                "dra_extender_watch_last_event_age_seconds",
                "Seconds since the last watch event or bookmark, by kind (watch lag).",
            ),
            (
                "invalid_objects",
                CounterMetricFamily,
                "dra_extender_invalid_objects",
                "Objects refused by validation, by kind (each counted once until it is valid or gone).",
            ),
            (
                "rejected_objects",
                GaugeMetricFamily,
                "dra_extender_rejected_objects",
                "Objects currently refused by validation (treated as absent), by kind.",
            ),
        )
        for key, family_type, name, doc in families:
            family = family_type(name, doc, labels=["kind"])
            for kind, value in sorted((stats.get(key) or {}).items()):
                family.add_metric([str(kind)], float(value))
            yield family
        if "synced" in stats:
            yield _gauge(
                "dra_extender_synced",
                "1 when every watch has listed and is current.",
                float(bool(stats["synced"])),
            )


class LeaderCollector(Collector):
    """`dra_extender_leader`: 1 while this replica holds the leader Lease (and so binds), read
    at scrape time; registered only when leader election is on."""

    def __init__(self, is_leader: Callable[[], bool]) -> None:
        self._is_leader = is_leader

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        leading = _read(self._is_leader, "is_leader")
        if leading is not None:
            yield _gauge(
                "dra_extender_leader",
                "1 while this replica holds the leader Lease (only the leader binds), else 0.",
                float(bool(leading)),
            )


class MemoryLimitCollector(Collector):
    """`dra_extender_memory_limit_bytes`: the memory limit of the process's cgroup, read at scrape
    time (an in-place resize changes it). The family is always exported; it has a sample only
    when there is a limit, so `process_resident_memory_bytes / dra_extender_memory_limit_bytes`
    is empty (and alerts nothing) for a process without one."""

    def __init__(self, limit: Callable[[], int | None]) -> None:
        self._limit = limit

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(
            "dra_extender_memory_limit_bytes",
            "Memory limit of the process's cgroup (the container's limits.memory); no sample without one.",
        )
        limit = _read(self._limit, "memory_limit")
        if limit is not None:
            family.add_metric([], float(limit))
        yield family


def _read(method: Callable[[], T], name: str) -> T | None:
    try:
        return method()
    except Exception:
        log.warning("metrics: reading %s() failed", name, exc_info=True)
        return None


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


# ===================================================================== logs
#: Attributes every LogRecord has; anything else on a record came from `extra=`.
_RECORD_FIELDS = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}


def trace_fields() -> dict[str, str]:
    """`trace_id` and `span_id` of the current span, or {} outside a (valid) span."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    return {
        "trace_id": trace.format_trace_id(context.trace_id),
        "span_id": trace.format_span_id(context.span_id),
    }


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The `extra=` fields of a record, plus `trace_id`/`span_id` of the current span when valid."""
    fields = {k: v for k, v in record.__dict__.items() if k not in _RECORD_FIELDS}
    return {**trace_fields(), **fields}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts (UTC, ISO 8601), level, logger, msg, extra fields, exception."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record_fields(record).items():
            entry.setdefault(key, value)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


#: Control characters (C0, DEL, C1, Unicode line/paragraph separators) -> a visible escape.
_CONTROL_ESCAPES: dict[int, str] = {
    **{c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))},
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    ord("\t"): "\\t",
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}


def escape_controls(text: str) -> str:
    """`text` with control characters escaped (`\\n`, `\\x1b`, ...), so that a value from a request
    (a pod name with a newline) cannot start a forged line in a plain-text log."""
    return text.translate(_CONTROL_ESCAPES)


class TextFormatter(logging.Formatter):
    """`time LEVEL logger: message [trace_id=...]`.

    The message is meant to stand alone (callers write the figures into it, `key=value`), so the
    `extra=` fields are left to the JSON formatter; only the current trace id is appended. Control
    characters in the message are escaped (one record, one line: no log injection); a traceback
    appended after it keeps its lines.
    """

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:  # logging's own (camelCase) hook
        # `format()` sets `record.message` afresh for every formatter, so escaping it here does
        # not leak into other handlers.
        record.message = escape_controls(record.message)
        text = super().formatMessage(record)
        trace_id = getattr(record, "trace_id", None) or trace_fields().get("trace_id")
        return f"{text} trace_id={trace_id}" if trace_id else text


def logfmt(value: object) -> str:
    """`value` as a logfmt value: floats with 3 decimals, quoted (JSON style, which escapes control
    characters) if it has spaces, quotes, `=` or control characters."""
    text = f"{value:.3f}" if isinstance(value, float) else str(value)
    plain = text and not any(c in text for c in ' "=') and escape_controls(text) == text
    return text if plain else orjson.dumps(text).decode()


def configure_logging(settings: Settings, *, stream: IO[str] | None = None) -> logging.Handler:
    """Send every log record to `stream` (stderr) at `settings.log_level`, JSON if `log_json`.

    Replaces the root logger's handlers (called once at start-up, and by tests).

    Returns:
        The installed handler.
    """
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if settings.log_json else TextFormatter())
    logging.basicConfig(level=settings.log_level.upper(), handlers=[handler], force=True)
    return handler
