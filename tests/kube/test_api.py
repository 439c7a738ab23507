"""The shared API helper (extender.kube.api) alone: one error type, its description, raw JSON, pools.

Scope: `call` turns the client's ApiException (from the fake API server, with the real client)
and transport errors into KubeAPIError with status, reason and the cause chained, and lets other
exceptions through; `describe` words both kinds of error in one line; `read_json` reads raw
responses and refuses a body that is not an object; `CallPool` runs calls on its own named
threads and refuses new work once closed.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

import kubernetes.client as kc
import orjson
import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from extender.errors import KubeAPIError
from extender.kube import api
from tests.fakeapi.server import FakeApiServer

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}}


class _Raw:
    """A raw (`_preload_content=False`) response holding `data`."""

    def __init__(self, data: bytes) -> None:
        self.data = data


def _unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_api_error_becomes_kube_api_error_with_status_reason_and_cause(fake_api: FakeApiServer):
    core = kc.CoreV1Api(fake_api.api_client())
    with pytest.raises(KubeAPIError) as caught:
        api.call(core.read_node, "missing", _preload_content=False)
    error = caught.value
    # The API server's Status message is the only place that says what was wrong (a 422 names
    # the invalid field, a 403 the missing permission): it is part of the error.
    assert (error.status, error.reason) == (404, "Not Found")
    assert str(error) == 'HTTP 404 Not Found: nodes "missing" not found'
    assert isinstance(error.__cause__, ApiException) and error.__cause__.status == 404


def test_an_injected_conflict_keeps_its_status(fake_api: FakeApiServer):
    fake_api.fail_next(1, 409, verb="get", resource="Node")
    fake_api.put_object(NODE)
    core = kc.CoreV1Api(fake_api.api_client())
    with pytest.raises(KubeAPIError) as caught:
        api.call(core.read_node, "node-1", _preload_content=False)
    assert caught.value.status == 409
    assert api.describe(caught.value) == "HTTP 409 Conflict: injected failure (409)"
    # The next call is not failed: the same wrapper returns the client's result unchanged.
    node = api.read_json(api.call(core.read_node, "node-1", _preload_content=False))
    assert node["metadata"]["name"] == "node-1"


def test_a_transport_error_becomes_kube_api_error_with_status_0():
    configuration = kc.Configuration()
    configuration.host = f"http://127.0.0.1:{_unused_port()}"  # nothing listens there
    configuration.retries = 0
    core = kc.CoreV1Api(kc.ApiClient(configuration))
    with pytest.raises(KubeAPIError) as caught:
        api.call(core.read_node, "node-1", _preload_content=False, _request_timeout=2)
    error = caught.value
    assert (error.status, error.reason) == (0, "")
    assert isinstance(error.__cause__, urllib3.exceptions.HTTPError)
    assert str(error).startswith(f"{type(error.__cause__).__name__}: ")
    assert api.describe(error) == str(error)


def test_an_os_error_becomes_kube_api_error_naming_its_type():
    def reset() -> None:
        raise ConnectionResetError("api server went away")

    with pytest.raises(KubeAPIError) as caught:
        api.call(reset)
    assert str(caught.value) == "ConnectionResetError: api server went away"
    assert caught.value.status == 0


def test_other_exceptions_pass_through_unchanged():
    def broken(value: int) -> int:
        raise ValueError(f"bad value {value}")

    with pytest.raises(ValueError, match="bad value 3"):
        api.call(broken, 3)
    assert api.call(lambda a, *, b: a + b, 1, b=2) == 3


def test_describe_words_any_other_exception_by_type_and_text():
    assert api.describe(ValueError("boom")) == "ValueError: boom"
    assert api.describe(KubeAPIError("HTTP 500 Internal Server Error", status=500)) == (
        "HTTP 500 Internal Server Error"
    )


def test_an_api_exception_without_reason_is_described_without_it():
    def refused() -> None:
        raise ApiException(status=503)

    with pytest.raises(KubeAPIError) as caught:
        api.call(refused)
    assert (str(caught.value), caught.value.status, caught.value.reason) == ("HTTP 503", 503, "")


def test_read_json_reads_a_raw_response_from_the_server(fake_api: FakeApiServer):
    fake_api.put_object(NODE)
    raw = kc.CoreV1Api(fake_api.api_client()).read_node("node-1", _preload_content=False)
    node = api.read_json(raw)
    assert node["kind"] == "Node" and node["metadata"]["name"] == "node-1"
    assert node["metadata"]["resourceVersion"]  # as the server sent it, nothing dropped


@pytest.mark.parametrize(("body", "kind"), [(b"[1, 2]", "list"), (b'"text"', "str"), (b"null", "NoneType")])
def test_read_json_refuses_a_body_that_is_not_an_object(body: bytes, kind: str):
    with pytest.raises(KubeAPIError) as caught:
        api.read_json(_Raw(body))
    assert str(caught.value) == f"HTTP 0 unexpected response body of type {kind}"
    assert (caught.value.status, caught.value.reason) == (0, f"unexpected response body of type {kind}")


def test_read_json_lets_a_body_that_is_not_json_fail_as_such():
    with pytest.raises(orjson.JSONDecodeError):
        api.read_json(_Raw(b"<html>proxy error</html>"))


def test_read_list_json_reads_a_list_page_as_the_whole_parse_does(fake_api: FakeApiServer):
    for i in range(3):
        fake_api.put_object({**NODE, "metadata": {**NODE["metadata"], "name": f"node-{i}"}})
    raw = kc.CoreV1Api(fake_api.api_client()).list_node(_preload_content=False)
    body = raw.data
    page = api.read_list_json(raw)
    assert page == orjson.loads(body)
    assert [n["metadata"]["name"] for n in page["items"]] == ["node-0", "node-1", "node-2"]


@pytest.mark.parametrize(("body", "kind"), [(b"[1, 2]", "list"), (b'"text"', "str"), (b"null", "NoneType")])
def test_read_list_json_refuses_a_body_that_is_not_an_object(body: bytes, kind: str):
    with pytest.raises(KubeAPIError) as caught:
        api.read_list_json(_Raw(body))
    assert str(caught.value) == f"HTTP 0 unexpected response body of type {kind}"


def test_read_list_json_lets_a_body_that_is_not_json_fail_as_such():
    with pytest.raises(orjson.JSONDecodeError):
        api.read_list_json(_Raw(b'{"kind": "NodeList", "items": [<html>]}'))


async def test_a_pool_runs_calls_on_its_own_named_threads_and_converts_errors():
    pool = api.CallPool(name="kube-test", max_workers=1)
    try:
        assert (await pool.run(lambda: threading.current_thread().name)).startswith("kube-test")

        def refused(**kwargs: Any) -> None:
            raise ApiException(status=409, reason="Conflict")

        with pytest.raises(KubeAPIError) as caught:
            await pool.call(refused, _request_timeout=1.0)
        assert (caught.value.status, str(caught.value)) == (409, "HTTP 409 Conflict")
        assert await pool.call(lambda x, **kwargs: (x, kwargs), 1, _request_timeout=2.0) == (
            1,
            {"_request_timeout": 2.0},
        )
    finally:
        pool.close()


async def test_a_closed_pool_refuses_new_work():
    pool = api.CallPool(name="kube-test", max_workers=1)
    pool.close()
    with pytest.raises(RuntimeError):
        await pool.run(lambda: None)
