"""A list-then-watch of one API collection on a thread, for the benchmarks' measurements."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import requests

from tests.e2e.cluster import Kube

Obj = dict[str, Any]


class Watch:
    """A list-then-watch of one collection, calling `on_event(type, object, monotonic time)` for
    the listing (as ADDED) and every event after it, on a thread, until `stop()`."""

    def __init__(self, kube: Kube, path: str, on_event: Callable[[str, Obj, float], None]) -> None:
        self.kube, self.path, self.on_event = kube, path, on_event
        self._stop = threading.Event()
        listing = kube.get(path)
        now = time.monotonic()
        for item in listing["items"]:
            on_event("ADDED", item, now)
        self._version = listing["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"watch {path}")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            url = (
                f"{self.kube.server}{self.path}?watch=1&allowWatchBookmarks=true"
                f"&resourceVersion={self._version}&timeoutSeconds=30"
            )
            try:
                with self.kube.session.get(url, stream=True, timeout=60) as response:
                    for line in response.iter_lines():
                        if self._stop.is_set():
                            return
                        if line:
                            event = json.loads(line)
                            obj = event.get("object", {})
                            self._version = obj.get("metadata", {}).get("resourceVersion", self._version)
                            if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                                self.on_event(event["type"], obj, time.monotonic())
            except requests.RequestException:
                time.sleep(0.2)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=65)
