"""`dra-extender serve --kube` as a process against the fake API server: wiring, readiness, shutdown.

Scope: the kubeconfig is honoured, /readyz turns 200 once the watch source synced, /filter
answers from the watched objects, /bind reports that the API-server binder is not in this
build, only list and watch calls reach the API, and SIGTERM stops the process cleanly.
"""

from __future__ import annotations

import copy
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import orjson

from extender.cluster.sample import sample_objects
from extender.explaining import load_pods
from tests.fakeapi.server import FakeApiServer

REPO = Path(__file__).resolve().parents[2]
PODS_FILE = REPO / "tests" / "data" / "pipeline_pods.yaml"
#: Generous: the first start in a fresh environment compiles the numba kernels.
READY_WITHIN_SECONDS = 120.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _request(url: str, body: bytes | None = None) -> tuple[int, bytes]:
    try:
        request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_serve_kube_syncs_answers_and_stops(fake_api: FakeApiServer, tmp_path: Path) -> None:
    """The process becomes ready from the fake API, filters from it and exits 0 on SIGTERM."""
    fake_api.put_objects(copy.deepcopy(sample_objects()))
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "extender", "serve", "--kube", "--listen", f"127.0.0.1:{port}"]
    argv += [
        "--kubeconfig",
        str(fake_api.write_kubeconfig(tmp_path / "kubeconfig")),
        "--log-level",
        "warning",
    ]
    process = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + READY_WITHIN_SECONDS
        status = 0
        while time.monotonic() < deadline and process.poll() is None:
            try:
                status, _ = _request(base + "/readyz")
            except OSError:
                status = 0  # not listening yet
            if status == 200:
                break
            time.sleep(0.1)
        assert status == 200, f"not ready; exit code {process.poll()}"

        pod = next(p for p in load_pods(PODS_FILE) if p["metadata"]["name"] == "tpu-inference")
        args = orjson.dumps({"Pod": pod, "NodeNames": ["tpu-v5e-node-01", "cpu-node-01"]})
        status, body = _request(base + "/filter", args)
        assert status == 200
        assert orjson.loads(body)["NodeNames"] == ["tpu-v5e-node-01"]

        bind = {
            "PodName": "tpu-inference",
            "PodNamespace": "ml-serving",
            "PodUID": "u",
            "Node": "tpu-v5e-node-01",
        }
        status, body = _request(base + "/bind", orjson.dumps(bind))
        assert status == 200
        # allocator-mode bind reads the pod it does not know from the API, and it is not there
        assert "does not exist" in orjson.loads(body)["Error"]
        assert {verb for verb, *_ in fake_api.request_log()} == {"list", "watch", "get"}
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
        stderr = process.stderr.read().decode() if process.stderr else ""
    assert code == 0, stderr
    assert "Traceback" not in stderr
