"""Tracing: verb spans, their children and attributes, traceparent, OTLP export, and tracing off."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind, StatusCode

from extender import server, telemetry
from extender.settings import Settings

from .conftest import BIND_BODY, FILTER_BODY, POD_UID, PRIORITIZE_BODY

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


def _by_name(spans: tuple[ReadableSpan, ...] | list[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {s.name: s for s in spans}


class _SpanningPlacement:
    """Delegates to the real placement, opening `telemetry.span` children as the lead's code will."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seen_spans: list[trace.Span] = []

    worker = None  # the app runs the verbs on a worker thread of its own

    def ready(self) -> bool:
        return self.inner.ready()

    def generation(self) -> tuple[int, int, int]:
        return self.inner.generation()  # type: ignore[no-any-return]

    def stats(self) -> Any:
        return self.inner.stats()

    def filter(self, pod: Any, node_names: list[str]) -> Any:
        with telemetry.span(telemetry.SPAN_ALLOCATE, nodes=len(node_names), skipped=None) as current:
            self.seen_spans.append(current)
            return self.inner.filter(pod, node_names)

    def prioritize(self, pod: Any, node_names: list[str]) -> Any:
        return self.inner.prioritize(pod, node_names)


async def test_filter_span_has_decode_and_encode_children_and_key_attributes(serve, provider, exporter):
    """One SERVER span `filter` with pod, node counts, claims and generation; the work below it.

    gpu-training has a matchAttribute constraint, so filter resolves claims, allocates (the
    kernel decides the nodes) and scores.
    """
    client = await serve(tracer_provider=provider)
    assert (await client.post("/filter", data=FILTER_BODY)).status == 200
    spans = _by_name(exporter.get_finished_spans())
    assert set(spans) == {"filter", "decode", "encode", "resolve_claims", "allocate", "score"}
    verb = spans["filter"]
    assert verb.kind is SpanKind.SERVER
    assert verb.parent is None
    assert spans["score"].parent.span_id == spans["allocate"].context.span_id
    for child in ("decode", "encode", "resolve_claims", "allocate"):
        assert spans[child].parent.span_id == verb.context.span_id
        assert spans[child].context.trace_id == verb.context.trace_id
    attributes = dict(verb.attributes)
    assert attributes[telemetry.ATTR_NAMESPACE] == "ml-training"
    assert attributes[telemetry.ATTR_POD] == "gpu-training"
    assert attributes[telemetry.ATTR_POD_UID] == POD_UID
    assert attributes[telemetry.ATTR_CLAIMS] == ("devices",)
    assert attributes[telemetry.ATTR_NODES_IN] == 3
    assert attributes[telemetry.ATTR_NODES_OUT] == 1
    assert attributes[telemetry.ATTR_NODES_FAILED] + attributes[telemetry.ATTR_NODES_UNRESOLVABLE] == 2
    assert isinstance(attributes[telemetry.ATTR_INDEX_GENERATION], int)
    assert attributes["http.response.status_code"] == 200
    assert verb.status.status_code is StatusCode.UNSET


async def test_prioritize_and_bind_spans_carry_node_counts_and_chosen_node(serve, provider, exporter):
    """prioritize: nodes in/out; bind: the chosen node and the outcome reason."""
    client = await serve(tracer_provider=provider)
    await client.post("/filter", data=FILTER_BODY)
    await client.post("/prioritize", data=PRIORITIZE_BODY)
    assert await (await client.post("/bind", data=BIND_BODY)).json() == {"Error": ""}
    spans = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.SERVER]
    assert [s.name for s in spans] == ["filter", "prioritize", "bind"]
    prioritize, bind = spans[1].attributes, spans[2].attributes
    assert (prioritize[telemetry.ATTR_NODES_IN], prioritize[telemetry.ATTR_NODES_OUT]) == (2, 2)
    assert bind[telemetry.ATTR_NODE] == "h100-node-01"
    assert bind[telemetry.ATTR_BIND_REASON] == "ok"
    assert (bind[telemetry.ATTR_POD], bind[telemetry.ATTR_POD_UID]) == ("gpu-training", POD_UID)


async def test_failed_bind_marks_the_span_as_error(serve, provider, exporter):
    """A bind answered with Error (here: a pod nobody has seen) is an ERROR span with the message."""
    client = await serve(tracer_provider=provider)
    body = BIND_BODY.replace(b"gpu-training", b"ghost")
    error = (await (await client.post("/bind", data=body)).json())["Error"]
    assert error
    (bind,) = [s for s in exporter.get_finished_spans() if s.name == "bind"]
    assert bind.status.status_code is StatusCode.ERROR
    assert bind.attributes[telemetry.ATTR_ERROR] == error
    assert bind.attributes[telemetry.ATTR_BIND_REASON] == "error"


async def test_malformed_request_is_not_an_error_on_the_server_span(serve, provider, exporter):
    """400 is the caller's fault (OTel HTTP conventions); the decode child records the exception."""
    client = await serve(tracer_provider=provider)
    assert (await client.post("/filter", data=b"nope")).status == 400
    spans = _by_name(exporter.get_finished_spans())
    assert spans["filter"].attributes["http.response.status_code"] == 400
    assert spans["filter"].status.status_code is StatusCode.UNSET
    assert spans["decode"].status.status_code is StatusCode.ERROR
    assert any(event.name == "exception" for event in spans["decode"].events)


async def test_incoming_traceparent_becomes_the_parent(serve, provider, exporter):
    """A W3C traceparent header puts the verb span in the caller's trace, under the caller's span."""
    client = await serve(tracer_provider=provider)
    headers = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}
    await client.post("/filter", data=FILTER_BODY, headers=headers)
    verb = _by_name(exporter.get_finished_spans())["filter"]
    assert trace.format_trace_id(verb.context.trace_id) == TRACE_ID
    assert trace.format_span_id(verb.parent.span_id) == PARENT_ID
    assert verb.parent.is_remote


async def test_span_helper_nests_under_the_verb_span_in_the_apps_provider(
    serve, services, exporter, provider
):
    """`telemetry.span` below the server lands in the app's provider, as a child of the verb span."""
    placement = _SpanningPlacement(services[0])
    client = await serve(tracer_provider=provider, placement=placement)
    await client.post("/filter", data=FILTER_BODY)
    spans = _by_name(exporter.get_finished_spans())
    allocate = spans[telemetry.SPAN_ALLOCATE]
    assert allocate.parent.span_id == spans["filter"].context.span_id
    assert dict(allocate.attributes) == {"nodes": 3}  # None values are dropped
    assert placement.seen_spans[0].get_span_context() == allocate.context


async def test_tracing_off_creates_no_spans_and_verbs_still_work(serve, services, exporter):
    """No provider given and none installed: answers unchanged, nothing recorded, nothing current."""
    assert not isinstance(trace.get_tracer_provider(), TracerProvider)  # no test installs one
    placement = _SpanningPlacement(services[0])
    client = await serve(placement=placement)
    assert client.app[server.TRACING_KEY].tracer is None
    headers = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}
    answer = await (await client.post("/filter", data=FILTER_BODY, headers=headers)).json()
    assert answer["NodeNames"] == ["h100-node-01"]
    assert (await client.post("/prioritize", data=PRIORITIZE_BODY)).status == 200
    assert await (await client.post("/bind", data=BIND_BODY)).json() == {"Error": ""}
    assert placement.seen_spans == [trace.INVALID_SPAN]
    assert exporter.get_finished_spans() == ()


async def test_unsampled_requests_build_no_attributes(serve, exporter, monkeypatch):
    """With a sampler that drops everything, spans don't record and no attribute dict is built."""
    provider = TracerProvider(sampler=ALWAYS_OFF, shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    def fail(*args: Any) -> None:
        raise AssertionError("attributes built for a non-recording span")

    monkeypatch.setattr(server, "_annotate", fail)
    client = await serve(tracer_provider=provider)
    assert (await client.post("/filter", data=FILTER_BODY)).status == 200
    assert exporter.get_finished_spans() == ()


async def test_owned_provider_is_shut_down_on_app_cleanup(serve, exporter):
    """A provider passed to make_app is shut down (flushed) when the app is cleaned up."""
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    client = await serve(tracer_provider=provider)
    await client.post("/filter", data=FILTER_BODY)
    await client.close()
    assert exporter._stopped  # InMemorySpanExporter.shutdown() was called by the provider


# ------------------------------------------------------------------ configure_tracing


def test_tracing_is_off_by_default():
    """No --tracing and no OTEL_TRACES_EXPORTER: no provider at all."""
    assert telemetry.configure_tracing(Settings(), {}) is None


@pytest.mark.parametrize(
    "environ",
    [{"OTEL_TRACES_EXPORTER": "none"}, {"OTEL_SDK_DISABLED": "true"}],
    ids=["exporter-none", "sdk-disabled"],
)
def test_standard_kill_switches_win_over_the_flag(environ):
    """OTEL_TRACES_EXPORTER=none and OTEL_SDK_DISABLED=true turn tracing off even with --tracing."""
    assert telemetry.configure_tracing(Settings(tracing=True), environ) is None


def test_otel_traces_exporter_otlp_turns_tracing_on():
    """OTEL_TRACES_EXPORTER=otlp alone enables tracing, with a batch processor."""
    provider = telemetry.configure_tracing(Settings(), {"OTEL_TRACES_EXPORTER": "otlp"})
    try:
        assert isinstance(provider, TracerProvider)
        processors = provider._active_span_processor._span_processors
        assert [type(p).__name__ for p in processors] == ["BatchSpanProcessor"]
    finally:
        provider.shutdown()


def test_unknown_exporter_is_rejected_with_the_allowed_values():
    with pytest.raises(ValueError, match="allowed: otlp, console, none"):
        telemetry.configure_tracing(Settings(), {"OTEL_TRACES_EXPORTER": "zipkin"})


def test_grpc_without_its_package_names_the_package():
    """gRPC is optional: without the exporter installed, the error says what to pip install."""
    try:
        import opentelemetry.exporter.otlp.proto.grpc  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("the gRPC exporter is installed here")
    with pytest.raises(ValueError, match=telemetry.GRPC_EXPORTER_PACKAGE):
        telemetry.configure_tracing(Settings(tracing=True, otlp_protocol="grpc"), {})


def test_protocol_from_env_applies_when_the_setting_is_default():
    """OTEL_EXPORTER_OTLP_TRACES_PROTOCOL beats OTEL_EXPORTER_OTLP_PROTOCOL; a set flag beats both."""
    env = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    assert telemetry.otlp_protocol(Settings(), env) == "grpc"
    env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "http/protobuf"
    assert telemetry.otlp_protocol(Settings(), env) == "http/protobuf"
    assert telemetry.otlp_protocol(Settings(otlp_protocol="grpc"), {}) == "grpc"


@pytest.mark.parametrize(
    ("given", "used"),
    [
        ("http://localhost:4318", "http://localhost:4318/v1/traces"),
        ("http://localhost:4318/", "http://localhost:4318/v1/traces"),
        ("http://localhost:4318/v1/traces", "http://localhost:4318/v1/traces"),
        ("https://otel.example:443/custom/path", "https://otel.example:443/custom/path"),
    ],
)
def test_otlp_http_endpoint_gets_the_signal_path_only_when_it_has_none(given, used):
    assert telemetry.otlp_http_endpoint(given) == used


def test_service_name_defaults_to_ours_and_follows_otel_service_name(monkeypatch):
    """service.name is dra-topology-extender unless OTEL_SERVICE_NAME says otherwise (SDK-read)."""
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    provider = telemetry.configure_tracing(Settings(tracing=True), {})
    assert provider.resource.attributes["service.name"] == telemetry.DEFAULT_SERVICE_NAME
    provider.shutdown()
    monkeypatch.setenv("OTEL_SERVICE_NAME", "extender-eu-1")
    provider = telemetry.configure_tracing(Settings(tracing=True), {})
    assert provider.resource.attributes["service.name"] == "extender-eu-1"
    provider.shutdown()


# ------------------------------------------------------------------ OTLP/HTTP export


def _attributes(key_values: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in key_values:
        kind = kv.value.WhichOneof("value")
        if kind == "array_value":
            out[kv.key] = [v.string_value for v in kv.value.array_value.values]
        else:
            out[kv.key] = getattr(kv.value, kind)
    return out


async def test_otlp_http_receiver_gets_well_formed_spans_when_the_app_is_cleaned_up(aiohttp_server, serve):
    """--otlp-endpoint without a path: spans arrive as protobuf at /v1/traces, flushed on cleanup."""
    received: list[bytes] = []

    async def collect(request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf"
        received.append(await request.read())
        return web.Response(body=b"", content_type="application/x-protobuf")

    receiver = web.Application()
    receiver.router.add_post("/v1/traces", collect)
    collector = await aiohttp_server(receiver)
    endpoint = str(collector.make_url("/"))
    provider = telemetry.configure_tracing(Settings(tracing=True, otlp_endpoint=endpoint), {})
    client = await serve(tracer_provider=provider)
    await client.post("/filter", data=FILTER_BODY)
    await client.post("/bind", data=BIND_BODY)
    await client.close()  # cleanup shuts the provider down in a thread: the batch is exported now
    assert received
    spans, resources = [], []
    for body in received:
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            resources.append(_attributes(resource_spans.resource.attributes))
            for scope_spans in resource_spans.scope_spans:
                assert scope_spans.scope.name == telemetry.TRACER_NAME
                spans.extend(scope_spans.spans)
    assert resources[0]["service.name"] == telemetry.DEFAULT_SERVICE_NAME
    by_name = {s.name: s for s in spans}
    assert {"filter", "decode", "encode", "bind"} <= set(by_name)
    filter_attributes = _attributes(by_name["filter"].attributes)
    assert filter_attributes[telemetry.ATTR_POD] == "gpu-training"
    assert filter_attributes[telemetry.ATTR_NODES_IN] == 3
    assert filter_attributes[telemetry.ATTR_CLAIMS] == ["devices"]
    assert _attributes(by_name["bind"].attributes)[telemetry.ATTR_NODE] == "h100-node-01"
    assert by_name["decode"].parent_span_id in {s.span_id for s in spans if s.name in ("filter", "bind")}
    assert len(by_name["filter"].trace_id) == 16
