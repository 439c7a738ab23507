"""The real `serve --ui` process: a YAML alias bomb gets a 400 at once, and SIGTERM stops the
server within `shutdown_grace_seconds` whatever is running (issue 30 item 4).

Before: `POST /ui/api/explain` with a body of nested anchors (eight levels of nine) did not answer
within 75 s, every other explain got 429 meanwhile, and SIGTERM did not stop the server: the
parse ran on a thread the interpreter waits for at exit. Each test starts the server as a user
does (`python -m extender serve --ui` on the embedded sample, a free port).
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from extender.explaining import load_pods
from tests.extender.test_yamlsafe import pod_bomb

REPO = Path(__file__).resolve().parents[2]
PODS_FILE = REPO / "tests" / "data" / "pipeline_pods.yaml"
#: Generous: the first start in a fresh environment compiles the numba kernels.
READY_WITHIN_SECONDS = 120.0
GRACE_SECONDS = 3.0
#: What a loaded machine may add to the grace before the process is gone.
EXIT_SLACK_SECONDS = 5.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _post(url: str, body: bytes, content_type: str, timeout: float = 30) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


#: Runs the real `main` after making one step of an explain take ten minutes: `parse` (the
#: dashboard parses pasted text on the default executor's thread) or `worker` (an explain step on
#: the placement worker). Only a body containing SLOW is slowed.
_SLOWED = """
import sys, time
from extender import explaining
where = sys.argv[1]
if where == "parse":
    real = explaining.parse_pod_documents
    def parse(text, label):
        if "SLOW" in text:
            time.sleep(600)
        return real(text, label)
    explaining.parse_pod_documents = parse
elif where == "worker":
    def step(self, seconds):
        time.sleep(600)
    explaining.Explanation.step = step
from extender.__main__ import main
sys.exit(main(sys.argv[2:]))
"""


class Served:
    def __init__(self, process: subprocess.Popen[bytes], port: int) -> None:
        self.process = process
        self.base = f"http://127.0.0.1:{port}"


def _serve(slowed: str | None = None) -> Served:
    port = _free_port()
    args = ["serve", "--ui", "--listen", f"127.0.0.1:{port}", "--shutdown-grace-seconds", str(GRACE_SECONDS)]
    if slowed is None:
        argv = [sys.executable, "-m", "extender", *args]
    else:
        argv = [sys.executable, "-c", _SLOWED, slowed, *args]
    process = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    served = Served(process, port)
    deadline = time.monotonic() + READY_WITHIN_SECONDS
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if _get(served.base + "/readyz")[0] == 200:
                return served
        except OSError:
            pass  # not listening yet
        time.sleep(0.1)
    process.kill()
    raise AssertionError(f"serve not ready; exit code {process.poll()}")


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[Served]:
    served = _serve(getattr(request, "param", None))
    try:
        yield served
    finally:
        if served.process.poll() is None:
            served.process.kill()
        served.process.wait()


def _explain_body(*, slow: bool = False) -> bytes:
    """A pending pipeline pod of the sample, as pasted into the dashboard's explain form."""
    pod = next(p for p in load_pods(PODS_FILE) if p["metadata"]["name"] == "tpu-inference")
    if slow:
        pod["metadata"].setdefault("annotations", {})["note"] = "SLOW"
    return orjson.dumps(pod)


@pytest.mark.parametrize("content_type", ["text/plain", "application/yaml"])
def test_an_alias_bomb_gets_a_400_in_under_a_second_and_explain_stays_usable(
    server: Served, content_type: str
) -> None:
    url = server.base + "/ui/api/explain"
    assert _post(url, b"kind: [", content_type)[0] == 400  # the route's first call, untimed
    started = time.perf_counter()
    status, body = _post(url, pod_bomb().encode(), content_type)
    elapsed = time.perf_counter() - started
    assert status == 400, body
    assert "alias bomb" in orjson.loads(body)["error"]
    assert elapsed < 1.0, f"answered in {elapsed:.2f} s"
    # The one-at-a-time gate is free again: an ordinary explain is answered, not 429.
    status, body = _post(url, _explain_body(), "application/json", timeout=60)
    assert status == 200, body


@pytest.mark.parametrize("server", ["parse", "worker"], indirect=True)
def test_sigterm_stops_the_server_within_its_grace_while_a_request_runs(server: Served) -> None:
    """An explain whose parse (default executor) or step (placement worker) takes ten minutes is
    running when SIGTERM comes: the process is gone within the grace, and says what it left."""
    body = _explain_body(slow=True)
    answers: list[object] = []

    def call() -> None:
        try:
            answers.append(_post(server.base + "/ui/api/explain", body, "application/json", timeout=120))
        except OSError as exc:  # the server went away mid-request
            answers.append(exc)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    time.sleep(2.0)  # the request is in its ten-minute step by now
    assert server.process.poll() is None and not answers
    started = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    try:
        code = server.process.wait(GRACE_SECONDS + EXIT_SLACK_SECONDS)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running {GRACE_SECONDS + EXIT_SLACK_SECONDS:g} s after SIGTERM")
    took = time.monotonic() - started
    stderr = server.process.stderr.read().decode() if server.process.stderr else ""
    assert code == 0, stderr
    assert f"still running after the {GRACE_SECONDS:g} s grace" in stderr
    assert took >= GRACE_SECONDS * 0.9  # it did wait for the grace, not just die
