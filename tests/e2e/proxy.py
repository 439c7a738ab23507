"""A TCP forwarder standing in for the extender's Service: kube-scheduler has one `urlPrefix`,
and in a cluster kube-proxy spreads its connections over the ready replicas. Each accepted
connection goes to the next backend that accepts a TCP connect (round robin), bytes are copied
both ways untouched (TLS, and so mutual TLS, stays end to end between the real programs).

With one backend it is a plain forwarder, which the fault tests put between the extender and
the API server: `cut()` closes every connection through it at once (every watch, every request
in flight), as a restarted load balancer or proxy in between does, and keeps accepting.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Sequence


class RoundRobinProxy:
    def __init__(self, port: int, backends: Sequence[int]) -> None:
        self.port = port
        self.backends = list(backends)
        self._next = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="e2e-proxy", daemon=True)
        self._server: asyncio.base_events.Server | None = None
        #: (client side, backend side) of each connection open now.
        self._open: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()

    def start(self) -> RoundRobinProxy:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", self.port), self._loop
        )
        self._server = future.result(10)
        return self

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def cut(self) -> int:
        """Abort every open connection at both ends (a reset, no orderly close); new connections
        are accepted as before. Returns how many were cut."""

        async def abort_all() -> int:
            pairs = list(self._open)
            for client, backend in pairs:
                client.transport.abort()
                backend.transport.abort()
            return len(pairs)

        return asyncio.run_coroutine_threadsafe(abort_all(), self._loop).result(10)

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        for _ in range(len(self.backends)):
            port = self.backends[self._next % len(self.backends)]
            self._next += 1
            with contextlib.suppress(OSError):
                return await asyncio.open_connection("127.0.0.1", port)
        return None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        backend = await self._connect()
        if backend is None:
            writer.close()
            return
        upstream_reader, upstream_writer = backend

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                with contextlib.suppress(Exception):
                    sink.close()

        pair = (writer, upstream_writer)
        self._open.add(pair)
        try:
            with contextlib.suppress(asyncio.CancelledError):  # stop() cancels open connections
                await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))
        finally:
            self._open.discard(pair)
