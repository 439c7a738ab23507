"""The Argo Workflows controller in the end-to-end control plane: a workflow engine users run.

Argo Workflows v4.0.5 (`python -m tests.gobuild argo`, `cmd/workflow-controller`) is a test-only
program: v4.0.5 has published security advisories, so it is pinned here, runs only against the
throwaway e2e control plane, and is never shipped or deployed by this project.

`start` installs upstream's own minimal CRDs (read from the module, `manifests/base/crds/minimal`),
the controller's ConfigMap, and runs the controller for one namespace (`--namespaced`), without
leader election, requeueing a workflow 1 s after each pod event (`DEFAULT_REQUEUE_TIME`; its 10 s
default adds about 10 s per step). With kwok (tests/e2e/kwok.py) the controller needs nothing
Argo-specific to see a step finish: a step's pod that kwok moves to Succeeded is a Succeeded step
(v4.0.5 starts a pod step "task result synced"; only argoexec's WorkflowTaskResult, which nothing
creates here, could hold it back). What a Workflow here must carry, and why:
- the kwok delay annotation in `spec.podMetadata` (else its pods run forever);
- an explicit `command` on each container (else the controller asks the image's registry, which
  cannot be reached, for its entrypoint and never creates the pod);
- no template `outputs` (only argoexec delivers them);
- `spec.resourceClaims` through `podSpecPatch`: the v4 API has no field for them (its Kubernetes
  types are v0.33's, which know `resourceClaims` and container `resources.claims`).

Every server here listens on 127.0.0.1, Argo's included: its metrics server (all interfaces) is
turned off in the ConfigMap, and its health server, hard-coded to `:6060` on all interfaces
(upstream `cmd/workflow-controller/main.go`), finds the port taken by a listener `start` holds on
127.0.0.1:6060 and only logs that (the controller does not need it). `listening_addresses`
checks the controller's sockets.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tests import gobuild
from tests.e2e.cluster import ControlPlane, Process, wait_for

Obj = dict[str, Any]

MODULE = "github.com/argoproj/argo-workflows/v4"
#: Argo's health server's hard-coded port (`:6060`, every interface).
HEALTH_PORT = 6060
WORKFLOWS = "/apis/argoproj.io/v1alpha1/namespaces/{namespace}/workflows"


def crds() -> list[Obj]:
    """Upstream's minimal CustomResourceDefinitions of v4.0.5 (from its module)."""
    directory = gobuild.module_source("argo", MODULE) / "manifests" / "base" / "crds" / "minimal"
    return [yaml.safe_load(path.read_text()) for path in sorted(directory.glob("argoproj.io_*.yaml"))]


@contextlib.contextmanager
def _port_held(port: int) -> Iterator[None]:
    """Listen on 127.0.0.1:`port` (if free) so that a later bind of `:port` fails."""
    guard = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        with contextlib.suppress(OSError):  # taken already: nobody else gets it either
            guard.bind(("127.0.0.1", port))
            guard.listen(1)
        yield
    finally:
        guard.close()


@contextlib.contextmanager
def running(plane: ControlPlane, namespace: str) -> Iterator[Process]:
    """The CRDs, the ConfigMap and the controller for `namespace`; stopped on exit."""
    kube = plane.kube
    for crd in crds():
        kube.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd, ok=(201, 409))
    for crd in crds():
        name = crd["metadata"]["name"]

        def established(name: str = name) -> bool:
            got = kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            return any(
                c["type"] == "Established" and c["status"] == "True"
                for c in got.get("status", {}).get("conditions", [])
            )

        wait_for(f"CRD {name} established", established, 60)
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "workflow-controller-configmap", "namespace": namespace},
        # Metrics would listen on every interface: off (nothing here reads them).
        "data": {"metricsConfig": "enabled: false\n"},
    }
    kube.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", config, ok=(201, 409))
    binary = gobuild.binaries("argo")["workflow-controller"]
    with _port_held(HEALTH_PORT):
        process = plane._spawn(
            "workflow-controller",
            [
                str(binary),
                f"--kubeconfig={plane.admin_kubeconfig}",
                f"--namespace={namespace}",
                "--namespaced",
                # Never pulled (kwok runs no containers); the unstamped build would name v0.0.0.
                "--executor-image=quay.io/argoproj/argoexec:v4.0.5",
                "--loglevel=info",
            ],
            env={"LEADER_ELECTION_DISABLE": "true", "DEFAULT_REQUEUE_TIME": "1s"},
        )
        try:
            # Logged once its informers have synced (the cron controller starts last).
            wait_for(
                "workflow-controller (informers synced)",
                lambda: b"Starting CronWorkflow controller" in process.log.read_bytes(),
                120,
                process.popen,
                process.log,
            )
            yield process
        finally:
            process.stop()
            plane.processes.pop("workflow-controller", None)


def listening_addresses(pid: int) -> set[tuple[str, int]]:
    """(IPv4 address, port) of every TCP socket process `pid` listens on (from /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = fd.readlink().as_posix()
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    out = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A: LISTEN
                continue
            address, port = local.split(":")
            if len(address) == 8:
                ip = socket.inet_ntoa(bytes.fromhex(address)[::-1])
            else:
                ip = "::" if int(address, 16) == 0 else address
            out.add((ip, int(port, 16)))
    return out
