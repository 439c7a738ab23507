"""A local Kubernetes control plane of real upstream programs, for the end-to-end tests and people.

    python -m tests.e2e.cluster up [--mode advisory|allocator|baseline] [--sample]

starts etcd, kube-apiserver, kube-controller-manager (the resourceclaim, Job, garbage-collector
and service-account controllers), Jaeger, the extender in kube mode and kube-scheduler with the
shipped `config/scheduler-<mode>.yaml`, prints the admin kubeconfig and waits for Ctrl-C.

The programs are the ones `tests.gobuild` builds from upstream's published modules; nothing here
imitates one. Every server listens on 127.0.0.1 on a free port. By default there are no kubelets:
Node objects are created Ready (with status) and nothing runs the node lifecycle controller, so
they stay so, and a bound pod stays bound and never runs. `start_kwok` adds kwok, which plays
the kubelets through the API (tests/e2e/kwok.py): pods then run and finish, and their claims
are released by the resourceclaim controller.
ResourceSlices are published through the API as a DRA driver publishes them.

What this file may change in the shipped configs is what the issue allows: paths, URLs and ports
(`scheduler_config`); the extender runs under the ServiceAccount and RBAC of `deploy/`, with a
token the API server issues for that account.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import urllib3
import yaml

from tests import gobuild
from tests.e2e import kwok
from tests.e2e.pki import PKI, kubeconfig
from tests.e2e.proxy import RoundRobinProxy

ROOT = Path(__file__).resolve().parents[2]
#: The versions the suite runs against (`DRA_E2E_KUBERNETES=1.36,1.37`, the default: both, in
#: that order); the first is the default of `up` and of `ControlPlane`.
KUBERNETES_VERSIONS: tuple[str, ...] = tuple(
    v.strip() for v in os.environ.get("DRA_E2E_KUBERNETES", "1.36,1.37").split(",") if v.strip()
)
KUBERNETES_VERSION = KUBERNETES_VERSIONS[0] if KUBERNETES_VERSIONS else "1.36"
_BUILT_VERSIONS = tuple(n.removeprefix("kubernetes-") for n in gobuild.TARGETS if n.startswith("kubernetes-"))
if not KUBERNETES_VERSIONS or set(KUBERNETES_VERSIONS) - set(_BUILT_VERSIONS):
    raise SystemExit(
        f"DRA_E2E_KUBERNETES={os.environ.get('DRA_E2E_KUBERNETES')!r}: name one or more of "
        f"{', '.join(_BUILT_VERSIONS)} (comma-separated)"
    )
EXTENDER_SERVICE = "dra-topology-extender.dra-system.svc"
#: The extender's process names: one in advisory/allocator mode, two replicas in allocator-ha.
EXTENDERS = ("extender", "extender-a", "extender-b")

urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the test run or bench that started it dies, even
    by SIGKILL, so no control plane outlives its owner (Linux prctl; elsewhere a no-op)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(
    what: str,
    check: Callable[[], bool],
    timeout: float,
    process: subprocess.Popen[bytes] | None = None,
    log: Path | None = None,
) -> None:
    """Poll `check` until it holds; fail with the component's log tail if it exits or times out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}:\n{_tail(log)}")
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.2)
    raise TimeoutError(f"{what} not ready within {timeout:.0f} s:\n{_tail(log)}")


def _tail(log: Path | None, lines: int = 40) -> str:
    if log is None or not log.exists():
        return ""
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


class Kube:
    """A small REST client of the API server (paths as in the API reference), admin by default."""

    def __init__(
        self,
        server: str,
        ca: Path,
        cert: Path | None = None,
        key: Path | None = None,
        token: str | None = None,
    ) -> None:
        self.server = server
        self.session = requests.Session()
        # REQUESTS_CA_BUNDLE (set on these machines) would otherwise win over session.verify.
        self.session.trust_env = False
        self.session.verify = str(ca)
        if cert and key:
            self.session.cert = (str(cert), str(key))
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        ok: tuple[int, ...] = (200, 201),
        *,
        timeout: float = 30,
    ) -> Any:
        response = self.session.request(method, self.server + path, json=body, timeout=timeout)
        if response.status_code not in ok:
            raise KubeError(method, path, response.status_code, response.text)
        return response.json() if response.content else None

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def create(self, obj: dict[str, Any]) -> Any:
        return self.request("POST", collection_path(obj), obj)

    def server_side_apply(
        self, obj: dict[str, Any], manager: str, *, dry_run: bool = False, force: bool = False
    ) -> Any:
        """Server-side apply of `obj` (PATCH application/apply-patch+yaml) as field manager
        `manager`, with strict field validation: an unknown or duplicate field is an error."""
        path = object_path(obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace"))
        query = f"?fieldManager={manager}&fieldValidation=Strict"
        query += "&dryRun=All" if dry_run else ""
        query += "&force=true" if force else ""
        response = self.session.patch(
            self.server + path + query,
            data=json.dumps(obj),  # JSON is YAML
            headers={"Content-Type": "application/apply-patch+yaml"},
            timeout=30,
        )
        if response.status_code not in (200, 201):
            raise KubeError("PATCH (apply)", path + query, response.status_code, response.text)
        return response.json()

    def apply_all(self, objects: list[dict[str, Any]]) -> None:
        """Create each object, leaving ones that already exist (409) as they are."""
        for obj in objects:
            self.request("POST", collection_path(obj), obj, ok=(200, 201, 409))


@dataclass
class KubeError(Exception):
    method: str
    path: str
    status: int
    body: str

    def __str__(self) -> str:
        return f"{self.method} {self.path}: HTTP {self.status}: {self.body[:500]}"


_GROUPS = {
    "Namespace": ("/api/v1", "namespaces", False),
    "Node": ("/api/v1", "nodes", False),
    "Pod": ("/api/v1", "pods", True),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "DeviceClass": ("/apis/resource.k8s.io/v1", "deviceclasses", False),
    "ResourceSlice": ("/apis/resource.k8s.io/v1", "resourceslices", False),
    "ResourceClaim": ("/apis/resource.k8s.io/v1", "resourceclaims", True),
    "ResourceClaimTemplate": ("/apis/resource.k8s.io/v1", "resourceclaimtemplates", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "Lease": ("/apis/coordination.k8s.io/v1", "leases", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "Service": ("/api/v1", "services", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "PodDisruptionBudget": ("/apis/policy/v1", "poddisruptionbudgets", True),
}


def collection_path(obj: dict[str, Any], kind: str | None = None, namespace: str | None = None) -> str:
    base, plural, namespaced = _GROUPS[kind or obj["kind"]]
    if namespaced:
        ns = namespace or obj.get("metadata", {}).get("namespace") or "default"
        return f"{base}/namespaces/{ns}/{plural}"
    return f"{base}/{plural}"


def object_path(kind: str, name: str, namespace: str | None = None) -> str:
    return f"{collection_path({'kind': kind}, namespace=namespace)}/{name}"


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def stop(self, timeout: float = 10) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


#: kube-controller-manager's controllers: the resourceclaim controller creates claims from
#: templates and keeps reservedFor; the garbage collector deletes a deleted pod's generated claims;
#: the Job controller runs batch Jobs; the service-account ones give each namespace its default
#: account (pods need it). No node lifecycle: without kwok (`start_kwok`) there are no kubelets,
#: and Nodes must stay Ready.
CONTROLLERS = (
    "resourceclaim-controller",
    "garbage-collector-controller",
    "job-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
)
#: With kwok the Nodes have a kubelet's heartbeats and Leases: the node lifecycle controller runs
#: too and would mark a Node that kwok stopped renewing NotReady.
KWOK_CONTROLLERS = (*CONTROLLERS, "node-lifecycle-controller")


@dataclass
class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + Jaeger, and on demand the extender and
    kube-scheduler in one mode. `start()` brings the base up; `use(mode)` (re)starts the pair."""

    work: Path
    version: str = KUBERNETES_VERSION
    processes: dict[str, Process] = field(default_factory=dict)
    mode: str | None = None
    proxy: RoundRobinProxy | None = None
    controllers: tuple[str, ...] = CONTROLLERS
    #: Client rate limits of kube-controller-manager (`--kube-api-qps/--kube-api-burst`) and of
    #: kube-scheduler (`clientConnection.qps/burst`); None keeps each program's defaults.
    client_qps: tuple[float, int] | None = None
    #: kwok's node Lease duration (it renews every quarter of it, as a kubelet does). A longer one
    #: cuts the Lease writes of a large fleet (2,000 nodes at 40 s: 200 writes/s); the node
    #: lifecycle controller's grace period is then raised with it so the Nodes stay Ready.
    node_lease_seconds: int = 40
    #: Feature gates of kube-apiserver, kube-controller-manager and kube-scheduler alike, and API
    #: versions the API server serves beyond its defaults (`--runtime-config`).
    feature_gates: dict[str, bool] = field(default_factory=dict)
    runtime_config: tuple[str, ...] = ()

    def _gates(self) -> tuple[str, ...]:
        """`--feature-gates=...` when any is set."""
        if not self.feature_gates:
            return ()
        return (
            "--feature-gates=" + ",".join(f"{k}={str(v).lower()}" for k, v in self.feature_gates.items()),
        )

    def __post_init__(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        self.pki = PKI(self.work / "pki")
        self.bins: dict[str, Path] = {}
        self.etcd_port, self.etcd_peer = free_port(), free_port()
        self.api_port = free_port()
        self.server = f"https://127.0.0.1:{self.api_port}"
        self.extender_port = free_port()
        #: The secure ports of kube-controller-manager and of the kube-scheduler started last, for
        #: `component_metrics`; each takes a free port when it starts (a test may run a second
        #: kube-scheduler beside the first).
        self.kcm_port = self.scheduler_port = 0
        self.jaeger_otlp, self.jaeger_query, self.jaeger_grpc, self.jaeger_health = (
            free_port() for _ in range(4)
        )

    # ---- programs -------------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Process:
        log = self.work / f"{name}.log"
        handle = log.open("ab")
        popen = subprocess.Popen(
            argv,
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            cwd=ROOT,
            preexec_fn=_die_with_parent,
        )
        handle.close()
        process = Process(name, popen, log)
        self.processes[name] = process
        return process

    def stop_component(self, name: str) -> None:
        if name in self.processes:
            self.processes.pop(name).stop()

    def stop(self) -> None:
        if self.proxy is not None:
            self.proxy.stop()
        for name in reversed(list(self.processes)):
            self.stop_component(name)

    def restart_apiserver(self, down_seconds: float = 0.0) -> None:
        """Stop kube-apiserver (every watch and connection to it breaks) and start it again on
        the same port with the same etcd: what a control-plane upgrade does to the extender."""
        self.stop_component("kube-apiserver")
        time.sleep(down_seconds)
        self.start_apiserver()

    def pause(self, name: str) -> None:
        """SIGSTOP a component: it keeps its sockets but reads nothing (a stalled process)."""
        self.processes[name].popen.send_signal(signal.SIGSTOP)

    def resume(self, name: str) -> None:
        self.processes[name].popen.send_signal(signal.SIGCONT)

    def start(self) -> ControlPlane:
        self.bins.update(gobuild.binaries(f"kubernetes-{self.version}"))
        self.bins.update(gobuild.binaries("etcd"))
        self.bins.update(gobuild.binaries("jaeger"))
        pki = self.pki
        self.serving = pki.issue(
            "apiserver", "kube-apiserver", dns=("kubernetes", "kubernetes.default"), server=True
        )
        admin = pki.issue("admin", "e2e-admin", groups=("system:masters",))
        kcm = pki.issue("kcm", "system:kube-controller-manager")
        sched = pki.issue("scheduler", "system:kube-scheduler")
        self.sa_key, self.sa_pub = pki.service_account_keys()
        # The extender's serving certificate carries the Service name the shipped scheduler
        # configs verify (tlsConfig.serverName); the scheduler's client certificate is the one
        # the extender's --client-ca-file checks (mTLS, as in deploy/).
        self.extender_tls = pki.issue(
            "extender", "dra-topology-extender", dns=(EXTENDER_SERVICE,), server=True
        )
        self.scheduler_tls = pki.issue("scheduler-client", "kube-scheduler-extender-client")
        self.admin_kubeconfig = kubeconfig(
            self.work / "admin.conf", self.server, pki.ca_cert, cert=admin[0], key=admin[1]
        )
        self.kcm_kubeconfig = kubeconfig(
            self.work / "kcm.conf", self.server, pki.ca_cert, cert=kcm[0], key=kcm[1]
        )
        self.scheduler_kubeconfig = kubeconfig(
            self.work / "scheduler.conf", self.server, pki.ca_cert, cert=sched[0], key=sched[1]
        )
        self.kube = Kube(self.server, pki.ca_cert, cert=admin[0], key=admin[1])
        self.start_etcd()
        self.start_apiserver()
        self.start_controller_manager()
        self.start_jaeger()
        self._install_extender_identity()
        return self

    def start_etcd(self) -> None:
        data = self.work / "etcd"
        p = self._spawn(
            "etcd",
            [
                str(self.bins["etcd"]),
                "--name=e2e",
                f"--data-dir={data}",
                f"--listen-client-urls=http://127.0.0.1:{self.etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{self.etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{self.etcd_peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{self.etcd_peer}",
                f"--initial-cluster=e2e=http://127.0.0.1:{self.etcd_peer}",
                # A test cluster: durability across power loss is not wanted, speed is.
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        url = f"http://127.0.0.1:{self.etcd_port}/health"
        wait_for("etcd", lambda: requests.get(url, timeout=2).json()["health"] == "true", 60, p.popen, p.log)

    def etcd_compact(self) -> int:
        """Compact etcd at its current revision (what forces a watch from an older one to 410)."""
        base = f"http://127.0.0.1:{self.etcd_port}/v3"
        revision = int(
            requests.post(f"{base}/kv/range", json={"key": "AA=="}, timeout=5).json()["header"]["revision"]
        )
        requests.post(
            f"{base}/kv/compaction", json={"revision": revision, "physical": True}, timeout=30
        ).raise_for_status()
        return revision

    def start_apiserver(self) -> None:
        cert, key = self.serving
        p = self._spawn(
            "kube-apiserver",
            [
                str(self.bins["kube-apiserver"]),
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                f"--tls-cert-file={cert}",
                f"--tls-private-key-file={key}",
                f"--client-ca-file={self.pki.ca_cert}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={self.sa_pub}",
                f"--service-account-signing-key-file={self.sa_key}",
                "--service-cluster-ip-range=10.96.0.0/16",
                # 127.0.0.1 is no valid Endpoints address; nothing here routes to the Service anyway.
                "--endpoint-reconciler-type=none",
                # Long enough that the compaction test, not the API server, decides when history goes.
                "--etcd-compaction-interval=0",
                "--profiling=false",
                *self._gates(),
                *((f"--runtime-config={','.join(self.runtime_config)}",) if self.runtime_config else ()),
                "--v=1",
            ],
        )
        wait_for(
            "kube-apiserver",
            lambda: self.kube.session.get(self.server + "/readyz", timeout=2).status_code == 200,
            120,
            p.popen,
            p.log,
        )

    def start_controller_manager(self) -> None:
        self.kcm_port = free_port()
        p = self._spawn(
            "kube-controller-manager",
            [
                str(self.bins["kube-controller-manager"]),
                f"--kubeconfig={self.kcm_kubeconfig}",
                f"--authentication-kubeconfig={self.kcm_kubeconfig}",
                f"--authorization-kubeconfig={self.kcm_kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.kcm_port}",
                *(
                    (f"--kube-api-qps={self.client_qps[0]}", f"--kube-api-burst={self.client_qps[1]}")
                    if self.client_qps
                    else ()
                ),
                f"--controllers={','.join(self.controllers)}",
                *self._gates(),
                *(
                    # upstream's default grace (50 s) is for kubelets' 40 s Leases
                    (f"--node-monitor-grace-period={self.node_lease_seconds + 10}s",)
                    if self.node_lease_seconds > 40
                    else ()
                ),
                # Each controller under its own bootstrap role, as kubeadm runs them.
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={self.sa_key}",
                f"--root-ca-file={self.pki.ca_cert}",
                "--leader-elect=false",
                "--v=1",
            ],
        )
        wait_for(
            "kube-controller-manager (default service account)",
            lambda: (
                self.kube.session.get(
                    self.server + object_path("ServiceAccount", "default", "default"), timeout=2
                ).status_code
                == 200
            ),
            120,
            p.popen,
            p.log,
        )

    def start_kwok(self) -> Process:
        """kwok managing every Node (tests/e2e/kwok.py): Ready with heartbeats and Leases, bound
        pods Running and, after their `kwok.RUN_FOR` delay, Succeeded; deleted pods removed.
        Returns once every Node published so far is in phase Running (taken over)."""
        self.bins.update(gobuild.binaries("kwok"))
        config = kwok.write_config(self.work / "kwok.yaml")
        p = self._spawn(
            "kwok",
            [
                str(self.bins["kwok"]),
                f"--kubeconfig={self.admin_kubeconfig}",
                f"--config={config}",
                "--manage-all-nodes=true",
                # A kubelet's Lease (kwok's own default is none: then only status heartbeats,
                # every 10 minutes, which the node lifecycle controller finds too old).
                f"--node-lease-duration-seconds={self.node_lease_seconds}",
            ],
        )

        def nodes_running() -> bool:
            nodes = self.kube.get("/api/v1/nodes")["items"]
            return all(n.get("status", {}).get("phase") == "Running" for n in nodes)

        wait_for("kwok (every Node in phase Running)", nodes_running, 180, p.popen, p.log)
        return p

    def start_jaeger(self) -> None:
        config = {
            "service": {
                "extensions": ["jaeger_storage", "jaeger_query", "healthcheckv2"],
                "pipelines": {
                    "traces": {
                        "receivers": ["otlp"],
                        "processors": ["batch"],
                        "exporters": ["jaeger_storage_exporter"],
                    }
                },
                "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "warn"}},
            },
            "extensions": {
                "jaeger_storage": {"backends": {"memstore": {"memory": {"max_traces": 100000}}}},
                "jaeger_query": {
                    "storage": {"traces": "memstore"},
                    "http": {"endpoint": f"127.0.0.1:{self.jaeger_query}"},
                    "grpc": {"endpoint": f"127.0.0.1:{self.jaeger_grpc}"},
                },
                "healthcheckv2": {"use_v2": True, "http": {"endpoint": f"127.0.0.1:{self.jaeger_health}"}},
            },
            "receivers": {"otlp": {"protocols": {"http": {"endpoint": f"127.0.0.1:{self.jaeger_otlp}"}}}},
            "processors": {"batch": {"timeout": "200ms"}},
            "exporters": {"jaeger_storage_exporter": {"trace_storage": "memstore"}},
        }
        path = self.work / "jaeger.yaml"
        path.write_text(yaml.safe_dump(config))
        p = self._spawn("jaeger", [str(self.bins["jaeger"]), f"--config={path}"])
        url = f"http://127.0.0.1:{self.jaeger_query}/api/services"
        wait_for("jaeger", lambda: requests.get(url, timeout=2).status_code == 200, 60, p.popen, p.log)

    def jaeger_traces(
        self, service: str, operation: str | None = None, limit: int = 200
    ) -> list[dict[str, Any]]:
        params: dict[str, str | int] = {"service": service, "limit": limit, "lookback": "1h"}
        if operation:
            params["operation"] = operation
        response = requests.get(f"http://127.0.0.1:{self.jaeger_query}/api/traces", params=params, timeout=10)
        response.raise_for_status()
        return list(response.json().get("data") or [])

    # ---- the extender's identity (deploy/) ------------------------------------------------------
    def _install_extender_identity(self) -> None:
        objects: list[dict[str, Any]] = []
        for name in ("namespace.yaml", "serviceaccount.yaml", "rbac.yaml"):
            objects += [d for d in yaml.safe_load_all((ROOT / "deploy" / name).read_text()) if d]
        self.kube.apply_all(objects)
        sa = next(o for o in objects if o["kind"] == "ServiceAccount")["metadata"]
        self.extender_namespace = sa["namespace"]
        self.extender_kubeconfig = self.account_kubeconfig(sa, self.work / "extender.conf")

    def account_kubeconfig(self, account: dict[str, Any], path: Path) -> Path:
        """A kubeconfig with a token the API server issues for ServiceAccount `account` (its
        metadata), as a pod of that account would get."""
        token_path = object_path("ServiceAccount", account["name"], account["namespace"]) + "/token"
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 24 * 3600},
        }
        token = self.kube.request("POST", token_path, request)["status"]["token"]
        return kubeconfig(path, self.server, self.pki.ca_cert, token=token, user=account["name"])

    # ---- extender and scheduler, per mode ------------------------------------------------------
    def start_extender(
        self,
        name: str = "extender",
        port: int | None = None,
        *,
        leader_elect: bool = False,
        extra: tuple[str, ...] = (),
    ) -> Process:
        cert, key = self.extender_tls
        port = port or self.extender_port
        argv = [
            sys.executable,
            "-m",
            "extender",
            "serve",
            # The shipped settings file; what differs here (paths, ports, tracing) comes as flags.
            f"--config={ROOT / 'config' / 'extender-settings.yaml'}",
            "--kube",
            f"--kubeconfig={self.extender_kubeconfig}",
            f"--listen=127.0.0.1:{port}",
            f"--tls-cert-file={cert}",
            f"--tls-key-file={key}",
            f"--client-ca-file={self.pki.ca_cert}",
            "--tracing",
            f"--otlp-endpoint=http://127.0.0.1:{self.jaeger_otlp}",
            "--ui",
            *extra,
        ]
        if leader_elect:
            argv += [
                "--leader-elect",
                f"--leader-lease-namespace={self.extender_namespace}",
                "--lease-duration-seconds=6",
                "--renew-deadline-seconds=4",
                "--retry-period-seconds=1",
            ]
        p = self._spawn(
            name, argv, env={"OTEL_SERVICE_NAME": "dra-topology-extender", "OTEL_BSP_SCHEDULE_DELAY": "200"}
        )
        wait_for(name, lambda: self.extender_get("/readyz", port).status_code == 200, 180, p.popen, p.log)
        return p

    def component_metrics(self, name: str) -> str:
        """The Prometheus text of kube-controller-manager's or kube-scheduler's `/metrics` (their
        secure ports, read as the admin)."""
        port = {"kube-controller-manager": self.kcm_port, "kube-scheduler": self.scheduler_port}[name]
        response = self.kube.session.get(f"https://127.0.0.1:{port}/metrics", verify=False, timeout=10)
        response.raise_for_status()
        return response.text

    def extender_get(self, path: str, port: int | None = None) -> requests.Response:
        return requests.get(
            f"https://127.0.0.1:{port or self.extender_port}{path}",
            timeout=5,
            verify=str(self.pki.ca_cert),
            cert=(str(self.scheduler_tls[0]), str(self.scheduler_tls[1])),
            headers={"Host": EXTENDER_SERVICE},
        )

    def scheduler_config(self, mode: str) -> Path:
        """The shipped config of `mode` with only paths, URLs and ports rewritten."""
        config = yaml.safe_load((ROOT / "config" / f"scheduler-{mode}.yaml").read_text())
        config["clientConnection"]["kubeconfig"] = str(self.scheduler_kubeconfig)
        self._point_extenders(config)
        path = self.work / f"scheduler-{mode}.yaml"
        path.write_text(yaml.safe_dump(config))
        return path

    def deploy_scheduler_config(self) -> Path:
        """deploy/'s second kube-scheduler: the KubeSchedulerConfiguration of its ConfigMap under
        the identity deploy/scheduler.yaml gives it (ServiceAccount, bindings, Lease Role), with
        only the kubeconfig (in-cluster there), URL and certificate paths rewritten."""
        documents = [d for d in yaml.safe_load_all((ROOT / "deploy" / "scheduler.yaml").read_text()) if d]
        self.kube.apply_all([d for d in documents if d["kind"] != "Deployment"])
        account = next(d for d in documents if d["kind"] == "ServiceAccount")["metadata"]
        conf = self.work / "deploy-scheduler.conf"
        self.deploy_scheduler_kubeconfig = self.account_kubeconfig(account, conf)
        configmap = yaml.safe_load((ROOT / "deploy" / "scheduler-config.yaml").read_text())
        config = yaml.safe_load(configmap["data"]["config.yaml"])
        assert config["clientConnection"]["kubeconfig"] == "", "deploy/ runs the scheduler in-cluster"
        config["clientConnection"]["kubeconfig"] = str(self.deploy_scheduler_kubeconfig)
        self._point_extenders(config)
        out = self.work / "scheduler-deploy.yaml"
        out.write_text(yaml.safe_dump(config))
        return out

    def _point_extenders(self, config: dict[str, Any]) -> None:
        """Rewrite each extender's URL (host and port only: the scheme stays) and TLS file paths."""
        for extender in config.get("extenders", []):
            scheme = extender["urlPrefix"].split("://", 1)[0]
            extender["urlPrefix"] = f"{scheme}://127.0.0.1:{self.extender_port}"
            # Only the files a config names (plain HTTP has none, TLS without a client
            # certificate only the CA).
            tls = extender.get("tlsConfig", {})
            ours = {
                "caFile": self.pki.ca_cert,
                "certFile": self.scheduler_tls[0],
                "keyFile": self.scheduler_tls[1],
            }
            for key in ours.keys() & tls.keys():
                tls[key] = str(ours[key])

    def start_scheduler(self, mode: str) -> Process:
        kubeconfig_path = self.scheduler_kubeconfig
        if mode == "deploy":
            path = self.deploy_scheduler_config()
            kubeconfig_path = self.deploy_scheduler_kubeconfig
        elif mode == "baseline":
            config = yaml.safe_load((ROOT / "config" / "scheduler-advisory.yaml").read_text())
            config.pop("extenders")  # the upstream baseline: the in-tree DynamicResources plugin alone
            config["clientConnection"]["kubeconfig"] = str(self.scheduler_kubeconfig)
            path = self.work / "scheduler-baseline.yaml"
            path.write_text(yaml.safe_dump(config))
        else:
            path = self.scheduler_config(mode)
        return self.run_scheduler(path, kubeconfig_path)

    def run_scheduler_config(self, config: dict[str, Any], kubeconfig_path: Path, name: str) -> Process:
        """kube-scheduler loading `config` (a KubeSchedulerConfiguration rendered elsewhere, e.g.
        by the Helm chart) as the identity of `kubeconfig_path`, with only the kubeconfig, the
        extenders' URLs and their certificate paths rewritten; written to `<work>/<name>.yaml`."""
        config = {
            **config,
            "clientConnection": {**config["clientConnection"], "kubeconfig": str(kubeconfig_path)},
        }
        self._point_extenders(config)
        path = self.work / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config))
        return self.run_scheduler(path, kubeconfig_path)

    def completed_scheduler_config(
        self, config: dict[str, Any], kubeconfig_path: Path, name: str
    ) -> dict[str, Any]:
        """What kube-scheduler makes of `config` (rewritten as in `run_scheduler_config`):
        `--write-config-to` decodes, validates and defaults it, builds every profile's plugins
        and the extenders' clients (reading their certificates), writes the completed
        configuration and exits; a configuration it cannot load fails here with its message."""
        config = {
            **config,
            "clientConnection": {**config["clientConnection"], "kubeconfig": str(kubeconfig_path)},
        }
        self._point_extenders(config)
        path, out = self.work / f"{name}.yaml", self.work / f"{name}-completed.yaml"
        path.write_text(yaml.safe_dump(config))
        run = subprocess.run(
            [
                str(self.bins["kube-scheduler"]),
                f"--config={path}",
                f"--write-config-to={out}",
                f"--authentication-kubeconfig={kubeconfig_path}",
                f"--authorization-kubeconfig={kubeconfig_path}",
                "--secure-port=0",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if run.returncode != 0:
            raise AssertionError(f"kube-scheduler refused {path}:\n{run.stderr[-3000:]}")
        completed: dict[str, Any] = yaml.safe_load(out.read_text())
        return completed

    def run_scheduler(self, path: Path, kubeconfig_path: Path) -> Process:
        """kube-scheduler with `--config=path` (process name `kube-scheduler`), its secure port
        delegating authentication and authorization as `kubeconfig_path`; returns once /healthz
        answers (kube-scheduler exits at start-up on a configuration it cannot load)."""
        port = self.scheduler_port = free_port()
        if self.client_qps:
            config = yaml.safe_load(path.read_text())
            config["clientConnection"] |= {"qps": self.client_qps[0], "burst": self.client_qps[1]}
            path.write_text(yaml.safe_dump(config))
        p = self._spawn(
            "kube-scheduler",
            [
                str(self.bins["kube-scheduler"]),
                f"--config={path}",
                f"--authentication-kubeconfig={kubeconfig_path}",
                f"--authorization-kubeconfig={kubeconfig_path}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                *self._gates(),
                "--v=2",
            ],
        )
        url = f"https://127.0.0.1:{port}/healthz"
        wait_for(
            "kube-scheduler",
            lambda: requests.get(url, verify=False, timeout=2).status_code == 200,
            120,
            p.popen,
            p.log,
        )
        return p

    def use(self, mode: str) -> None:
        """Run kube-scheduler with the shipped config of `mode` (advisory, allocator) and the
        extender it calls; allocator-ha: the allocator config calling two leader-electing
        replicas through a round-robin forwarder (the Service); deploy: deploy/'s second
        kube-scheduler (only the dra-topology-scheduler profile) under its own identity;
        baseline: kube-scheduler alone with its in-tree DRA plugin."""
        if mode == self.mode:
            return
        self.stop_component("kube-scheduler")
        for name in EXTENDERS:
            self.stop_component(name)
        if self.proxy is not None:
            self.proxy.stop()
            self.proxy = None
        if mode == "allocator-ha":
            # Two replicas as deploy/ runs them (both --leader-elect), behind one address.
            ports = [free_port(), free_port()]
            for name, port in zip(EXTENDERS[1:], ports, strict=True):
                self.start_extender(name, port, leader_elect=True)
            self.proxy = RoundRobinProxy(self.extender_port, ports).start()
            self.start_scheduler("allocator")
        else:
            if mode != "baseline":
                self.start_extender(leader_elect=(mode in ("allocator", "deploy")))
            self.start_scheduler(mode)
        self.mode = mode


class KwokPlane(ControlPlane):
    """A control plane whose Nodes kwok will manage (`start_kwok`): the node lifecycle
    controller runs too (KWOK_CONTROLLERS)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.controllers = KWOK_CONTROLLERS


@contextlib.contextmanager
def running(
    work: Path | None = None,
    version: str = KUBERNETES_VERSION,
    *,
    name: str = "",
    kind: type[ControlPlane] = ControlPlane,
) -> Iterator[ControlPlane]:
    """A started control plane (of `kind`) in `work`, or in a new temporary directory named after
    `name` and the version that is removed afterwards unless `DRA_E2E_KEEP` is set."""
    owned = work is None
    directory = work or Path(tempfile.mkdtemp(prefix=f"dra-e2e-{name + '-' if name else ''}{version}-"))
    plane = kind(directory, version)
    try:
        yield plane.start()
    finally:
        plane.stop()
        if os.environ.get("DRA_E2E_KEEP"):
            print(f"\nend-to-end logs kept in {directory}")
        elif owned:
            shutil.rmtree(directory, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.e2e.cluster", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start the control plane and wait for Ctrl-C")
    up.add_argument(
        "--mode", choices=("advisory", "allocator", "allocator-ha", "deploy", "baseline"), default="allocator"
    )
    up.add_argument("--version", choices=_BUILT_VERSIONS, default=KUBERNETES_VERSION)
    up.add_argument("--sample", action="store_true", help="load the embedded sample cluster's objects")
    up.add_argument("--work", type=Path, help="keep logs, certificates and kubeconfigs here")
    args = parser.parse_args(argv)
    from tests.e2e import objects

    with running(args.work, args.version) as plane:
        if args.sample:
            objects.publish(plane.kube, objects.sample_fleet())
        plane.use(args.mode)
        print(f"kubeconfig: {plane.admin_kubeconfig}")
        print(f"extender:   https://127.0.0.1:{plane.extender_port} (mode {args.mode})")
        print(f"jaeger:     http://127.0.0.1:{plane.jaeger_query}")
        print(f"logs:       {plane.work}/*.log")
        print("Ctrl-C (or SIGTERM) stops everything.", flush=True)
        # Blocked first, so sigwait receives them instead of their default actions.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    return 0


if __name__ == "__main__":
    sys.exit(main())
