"""The one way this package calls the API server: threads, errors and raw JSON.

Owns: running the synchronous `kubernetes` client off the event loop (`CallPool`), turning
whatever a call raises for API or transport reasons into one error type (`KubeAPIError`, the
client's error chained as its cause), reading raw response bodies as JSON (`read_json`, `read_list_json`), and
the one-line description of an error for logs and answers (`describe`). Leaves out: what the
calls are for (watch, bind and lease decide that) and the client configuration (`watch`).

Why raw JSON: callers pass `_preload_content=False`, so the client's models never see a
response and nothing is dropped or reformatted on the way in (a model drops fields it does not
know, and the Binding answer is a Status, which the V1Binding model rejects).

Why one pool per component, each made here: a Lease renewal must never queue behind bind writes
(the leader would lose its Lease while binding), so the elector and the binder each own a pool;
the watch blocks in its own long-lived threads and calls `call` there directly.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import orjson
import urllib3
from kubernetes.client.exceptions import ApiException

from extender.cluster.jsonitems import loads_list
from extender.errors import KubeAPIError
from extender.objects import Obj

T = TypeVar("T")

#: What a client call raises for API or transport reasons; `call` turns each into a KubeAPIError.
_CLIENT_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError)


def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run one blocking client call; its API and transport failures raise KubeAPIError.

    Raises:
        KubeAPIError: with the HTTP status and reason of an ApiException, or status 0 and the
            exception's type and text for a transport error (urllib3, OSError); the client's
            exception is the cause.
    """
    try:
        return fn(*args, **kwargs)
    except _CLIENT_ERRORS as exc:
        raise _api_error(exc) from exc


#: The longest API-server message kept in an error (a 422 lists every invalid field).
_MESSAGE_LIMIT = 1024


def _api_error(exc: BaseException) -> KubeAPIError:
    if isinstance(exc, ApiException):
        reason = str(exc.reason or "")
        text = f"HTTP {exc.status} {reason}".strip()
        message = _status_message(exc.body)
        if message:
            text = f"{text}: {message}"
        return KubeAPIError(text, status=int(exc.status or 0), reason=reason)
    return KubeAPIError(f"{type(exc).__name__}: {exc}")


def _status_message(body: Any) -> str:
    """The `message` of the API server's Status answer ("ResourceClaim.resource.k8s.io "x" is
    invalid: status.allocation...: Invalid value ..."): the only place a 422 or 403 says what
    was wrong. Empty when the body is no Status."""
    if not body:
        return ""
    try:
        status = orjson.loads(body)
    except (orjson.JSONDecodeError, TypeError):
        return ""
    message = status.get("message") if isinstance(status, dict) else None
    if not isinstance(message, str):
        return ""
    message = " ".join(message.split())
    return message if len(message) <= _MESSAGE_LIMIT else message[: _MESSAGE_LIMIT - 3] + "..."


def read_json(response: Any) -> Obj:
    """The JSON object of a raw (`_preload_content=False`) response.

    Raises:
        KubeAPIError: the body is JSON but not an object (status 0).
        orjson.JSONDecodeError: the body is not JSON at all.
    """
    return _object(orjson.loads(response.data))


def read_list_json(response: Any) -> Obj:
    """`read_json` for a list page, its items parsed one at a time (`loads_list`): one parse of
    a page of 500 ResourceSlices holds the GIL for up to about 120 ms, and the event loop must
    answer `/healthz` meanwhile; between items, other threads run.

    Raises:
        KubeAPIError: the body is JSON but not an object (status 0).
        orjson.JSONDecodeError: the body is not JSON at all.
    """
    return _object(loads_list(response.data))


def _object(data: Any) -> Obj:
    if not isinstance(data, dict):
        reason = f"unexpected response body of type {type(data).__name__}"
        raise KubeAPIError(f"HTTP 0 {reason}", status=0, reason=reason)
    return data


def describe(exc: BaseException) -> str:
    """One line for logs and error answers: a KubeAPIError's message ("HTTP 409 Conflict",
    "MaxRetryError: ..."), else the exception's type and text."""
    if isinstance(exc, KubeAPIError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


class CallPool:
    """One component's threads for blocking client work, awaited from the event loop.

    `run` runs any blocking routine (e.g. a read-then-write round that itself uses `call`);
    `call` runs one client call through `call` above. After `close`, work already queued still
    runs and new work raises RuntimeError (the loop's executor rule).
    """

    def __init__(self, *, name: str, max_workers: int) -> None:
        self._executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=name)

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Await `fn(*args, **kwargs)` run on this pool."""
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, functools.partial(fn, *args, **kwargs)
        )

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Await one client call on this pool; API and transport failures raise KubeAPIError."""
        return await self.run(call, fn, *args, **kwargs)

    def close(self) -> None:
        """Accept no new work; queued work still runs (a caller may be awaiting it)."""
        self._executor.shutdown(wait=False)
