"""Shared fixtures: test doubles for the placement and bind services, and an HTTP client factory.

The doubles record every call and answer what the test configured, so HTTP tests exercise
only the server and the wire codec, never the allocator.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from extender.pods import Pod
from extender.server import make_app
from extender.settings import Settings
from extender.verdicts import OK, BindOutcome, FilterVerdict, HostScore, PlacementStats
from tests.fakeapi.server import FakeApiServer


class FakePlacement:
    """A PlacementService that records calls and returns the configured verdict and scores."""

    def __init__(self) -> None:
        self.is_ready = True
        self.verdict = FilterVerdict()
        self.scores: list[HostScore] = []
        self.raises: Exception | None = None
        #: (verb, the pod object as the scheduler sent it, node names); `records` has the parsed pods.
        self.calls: list[tuple[str, dict[str, Any], list[str]]] = []
        self.records: list[Pod] = []

    worker = None  # the app runs the verbs on a worker thread of its own

    def ready(self) -> bool:
        return self.is_ready

    def generation(self) -> tuple[int, int, int]:
        return (0, 0, 0)

    def stats(self) -> PlacementStats:
        return PlacementStats(index=None, assumed=None)

    def filter(self, pod: Pod, node_names: list[str]) -> FilterVerdict:
        self.calls.append(("filter", pod.source, list(node_names)))
        self.records.append(pod)
        if self.raises is not None:
            raise self.raises
        return self.verdict

    def prioritize(self, pod: Pod, node_names: list[str]) -> list[HostScore]:
        self.calls.append(("prioritize", pod.source, list(node_names)))
        self.records.append(pod)
        if self.raises is not None:
            raise self.raises
        return self.scores


class FakeBinder:
    """A BindService that records calls and returns the configured outcome."""

    def __init__(self) -> None:
        self.outcome = BindOutcome("", OK)
        self.raises: Exception | None = None
        self.calls: list[dict[str, str]] = []

    async def bind(self, *, namespace: str, name: str, uid: str, node: str) -> BindOutcome:
        self.calls.append({"namespace": namespace, "name": name, "uid": uid, "node": node})
        if self.raises is not None:
            raise self.raises
        return self.outcome


#: What kube-scheduler sends with every verb; the server refuses other bodies with 415.
JSON_HEADERS = {"Content-Type": "application/json"}


@pytest.fixture
def aiohttp_client(aiohttp_client: Any) -> Callable[..., Awaitable[Any]]:
    """pytest-aiohttp's client factory, sending `Content-Type: application/json` unless a test
    says otherwise (as kube-scheduler does); `headers=` per request still overrides it."""

    async def make(app: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("headers", JSON_HEADERS)
        return await aiohttp_client(app, **kwargs)

    return make


@pytest.fixture
def placement() -> FakePlacement:
    """A fresh, ready FakePlacement that passes no nodes."""
    return FakePlacement()


@pytest.fixture
def binder() -> FakeBinder:
    """A fresh FakeBinder that binds successfully."""
    return FakeBinder()


@pytest.fixture
def registry() -> CollectorRegistry:
    """A private metrics registry for one test."""
    return CollectorRegistry()


@pytest.fixture
def app_client(
    aiohttp_client: Any, placement: FakePlacement, binder: FakeBinder, registry: CollectorRegistry
) -> Callable[..., Awaitable[Any]]:
    """Factory: `await app_client(settings=...)` serves make_app with the fixture doubles."""

    async def make(settings: Settings | None = None) -> Any:
        app = make_app(settings or Settings(), placement=placement, binder=binder, registry=registry)
        return await aiohttp_client(app)

    return make


@pytest.fixture
def fake_api() -> Iterator[FakeApiServer]:
    """A running in-process fake Kubernetes API server (tests/fakeapi/server.py), fresh per test.

    Bookmarks every 0.1 s; `.url`, `.api_client()` and the test hooks are on the yielded object.
    """
    with FakeApiServer(bookmark_interval=0.1) as server:
        yield server
