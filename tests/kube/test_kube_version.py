"""Kube mode without `kubernetes_version`: the API server's `/version` decides, read at start-up."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from extender.kube.version import read_server_version
from tests.fakeapi.server import FakeApiServer
from tests.kube.test_serve_kube import REPO


def test_reads_the_servers_version(fake_api: FakeApiServer) -> None:
    fake_api.git_version = "v1.37.2"
    assert read_server_version(fake_api.api_client()) == ("1.37", "v1.37.2")


def test_serve_refuses_an_unsupported_server_version(fake_api: FakeApiServer, tmp_path: Path) -> None:
    """No silent choice: start-up fails naming the supported versions and the overriding flag."""
    fake_api.git_version = "v1.38.0"
    kubeconfig = fake_api.write_kubeconfig(tmp_path / "kubeconfig")
    argv = [sys.executable, "-m", "extender", "serve", "--kube", "--kubeconfig", str(kubeconfig)]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Kubernetes 1.38" in done.stderr
    assert "supported: 1.36, 1.37" in done.stderr and "--kubernetes-version" in done.stderr
    assert "Traceback" not in done.stderr
