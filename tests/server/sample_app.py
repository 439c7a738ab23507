"""The real app over the embedded sample cluster, served on a private event loop, for fuzz tests.

Hypothesis runs a test's examples synchronously, so the app cannot live on pytest's loop: `Served`
starts it on a loop of its own and `post` runs one request to completion. `served_app` is the
module-scoped lifetime: it keeps every record that the extender, aiohttp and asyncio loggers emit
at WARNING and above in `Served.records` (their levels set to WARNING meanwhile, since other tests
may leave them higher), and closes the client, the loop and the placement worker at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from collections.abc import Iterator
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from extender.cluster.sample import sample_objects
from extender.cluster.state import ClusterState
from extender.server import make_app
from extender.settings import Settings
from extender.wiring import build_services
from tests.conftest import JSON_HEADERS

#: The loggers whose records `served_app` keeps.
WATCHED = ("extender", "aiohttp", "asyncio")


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class Served:
    """The app over a fresh copy of the sample cluster, built with `settings`."""

    def __init__(self, settings: Settings) -> None:
        self.loop = asyncio.new_event_loop()
        self.settings = settings
        self.placement, binder = build_services(
            settings, ClusterState.from_objects(copy.deepcopy(sample_objects()))
        )
        app = make_app(settings, placement=self.placement, binder=binder, registry=CollectorRegistry())

        async def start() -> TestClient[Any, Any]:
            client: TestClient[Any, Any] = TestClient(TestServer(app), headers=JSON_HEADERS)
            await client.start_server()
            return client

        self.client = self.loop.run_until_complete(start())
        self._logs = _Records()
        #: WARNING and above from the `WATCHED` loggers while `served_app` runs; tests clear it.
        self.records = self._logs.records

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """POST `body` (with `Content-Type: application/json`); the status and the raw answer."""

        async def call() -> tuple[int, bytes]:
            resp = await self.client.post(path, data=body)
            return resp.status, await resp.read()

        return self.loop.run_until_complete(call())

    def close(self) -> None:
        self.loop.run_until_complete(self.client.close())
        self.loop.close()
        self.placement.worker.close()


@contextlib.contextmanager
def served_app(settings: Settings) -> Iterator[Served]:
    """A `Served` app whose `records` collect the `WATCHED` loggers' warnings and errors."""
    server = Served(settings)
    watched = [logging.getLogger(name) for name in WATCHED]
    levels = [logger.level for logger in watched]
    for logger in watched:  # other tests may leave the root at ERROR: see warnings and errors here
        logger.setLevel(logging.WARNING)
        logger.addHandler(server._logs)
    try:
        yield server
    finally:
        for logger, level in zip(watched, levels, strict=True):
            logger.removeHandler(server._logs)
            logger.setLevel(level)
        server.close()
