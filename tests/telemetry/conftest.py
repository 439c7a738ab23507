"""Fixtures for telemetry tests: real services on the embedded sample, and an in-memory tracer.

The services are the ones `serve` builds (`wiring.build_services`) over a fresh copy of the
sample cluster, so spans, metrics and logs are checked on real filter/prioritize/bind work.
No test installs a global tracer provider: providers are handed to `make_app`.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from extender.cluster.sample import sample_objects
from extender.cluster.state import ClusterState
from extender.server import make_app
from extender.settings import Settings
from extender.wiring import build_services

#: The README's example pod: one claim of 4 H100 GPUs on one NVLink domain plus an RDMA NIC.
POD_UID = "261134f3-5a87-4a70-b229-44da91e6a9d2"
POD = {
    "metadata": {"name": "gpu-training", "namespace": "ml-training", "uid": POD_UID},
    "spec": {
        "schedulerName": "dra-extender-scheduler",
        "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "devices"}]}}],
        "resourceClaims": [{"name": "devices", "resourceClaimName": "gpu-training-devices-vbdcr"}],
    },
}
#: h100-node-01 passes; the other two have no H100 GPUs (unresolvable).
NODES = ["h100-node-01", "l40s-node-01", "cpu-node-01"]
FILTER_BODY = orjson.dumps({"Pod": POD, "Nodes": None, "NodeNames": NODES})
PRIORITIZE_BODY = orjson.dumps({"Pod": POD, "Nodes": None, "NodeNames": ["h100-node-01", "h100-node-02"]})
BIND_BODY = orjson.dumps(
    {"PodName": "gpu-training", "PodNamespace": "ml-training", "PodUID": POD_UID, "Node": "h100-node-01"}
)


@pytest.fixture
def services() -> tuple[Any, Any]:
    """(placement, binder) over a fresh copy of the sample cluster."""
    return build_services(Settings(), ClusterState.from_objects(copy.deepcopy(sample_objects())))


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    """A private provider exporting synchronously into `exporter` (not installed globally)."""
    made = TracerProvider(shutdown_on_exit=False)
    made.add_span_processor(SimpleSpanProcessor(exporter))
    yield made
    made.shutdown()


@pytest.fixture
def serve(aiohttp_client: Any, services: tuple[Any, Any]) -> Callable[..., Awaitable[Any]]:
    """Factory: `await serve(**make_app_kwargs)` -> test client of the app over `services`."""

    async def make(**kwargs: Any) -> Any:
        kwargs.setdefault("placement", services[0])
        kwargs.setdefault("binder", services[1])
        kwargs.setdefault("registry", CollectorRegistry())
        return await aiohttp_client(make_app(Settings(), **kwargs))

    return make


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """Put the root logger back after a test that called `telemetry.configure_logging`."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
