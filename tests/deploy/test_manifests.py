"""The manifests in deploy/: they parse, fit together, and the Deployment's command line is valid.

Cross-references are checked rather than trusted: the Deployment's args go through the real CLI
parser and `load_settings` (with the env the pod would get), the TLS paths must lie in the
mounted Secret, the Service must reach the container port, the scheduler's urlPrefix must name
the Service, and every RBAC binding must name the ServiceAccount the pods run as. RBAC *content*
is checked against the code's real API calls in tests/deploy/test_rbac_coverage.py.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

import pytest
import yaml

from extender.__main__ import build_parser
from extender.objects import Obj
from extender.settings import load_settings
from tests import gobuild

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
EXTENDER = "dra-topology-extender"
SCHEDULER = "dra-topology-scheduler"


def _documents() -> dict[str, list[Obj]]:
    """File name -> its YAML documents, for every manifest in deploy/."""
    out: dict[str, list[Obj]] = {}
    for path in sorted(DEPLOY.glob("*.yaml")):
        out[path.name] = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    return out


DOCS = _documents()
OBJECTS = [doc for name, docs in DOCS.items() if name != "kustomization.yaml" for doc in docs]


def _one(kind: str, name: str) -> Obj:
    found = [o for o in OBJECTS if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def _container(deployment: Obj) -> Obj:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def _mounted_sources(deployment: Obj) -> dict[str, str]:
    """ConfigMap or Secret name -> the path the container mounts it at."""
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    out: dict[str, str] = {}
    for mount in _container(deployment)["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "configMap" in volume:
            out[volume["configMap"]["name"]] = mount["mountPath"]
        elif "secret" in volume:
            out[volume["secret"]["secretName"]] = mount["mountPath"]
    return out


def _under(path: str, mount: str) -> bool:
    return PurePosixPath(mount) in PurePosixPath(path).parents


EXTENDER_DEPLOYMENT = _one("Deployment", EXTENDER)
NAMESPACE = EXTENDER_DEPLOYMENT["metadata"]["namespace"]


# ------------------------------------------------------------------ files and kustomization


def test_every_manifest_parses_as_kubernetes_objects():
    """Each document has apiVersion, kind and a name; namespaced objects carry a namespace."""
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
    for obj in OBJECTS:
        assert obj.get("apiVersion") and obj.get("kind") and obj["metadata"].get("name"), obj
        if obj["kind"] not in cluster_scoped:
            assert obj["metadata"].get("namespace"), f"{obj['kind']} {obj['metadata']['name']}"


def test_kustomization_lists_every_manifest():
    """kustomization.yaml lists exactly the other YAML files of deploy/."""
    kustomization = DOCS["kustomization.yaml"][0]
    assert kustomization["kind"] == "Kustomization"
    assert sorted(kustomization["resources"]) == sorted(n for n in DOCS if n != "kustomization.yaml")


def test_kustomize_builds():
    """`kustomize build deploy/` (the real kustomize v5.8.2, `python -m tests.gobuild kustomize`;
    what `kubectl kustomize` embeds) renders every object (no network needed)."""
    kustomize = gobuild.binaries("kustomize")["kustomize"]
    out = subprocess.run([str(kustomize), "build", str(DEPLOY)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rendered = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert len(rendered) == len(OBJECTS)
    image = _container(
        next(d for d in rendered if d["metadata"]["name"] == EXTENDER and d["kind"] == "Deployment")
    )
    assert image["image"].startswith(EXTENDER)


# ------------------------------------------------------------------ the extender Deployment


def test_extender_runs_two_spread_replicas_with_a_pdb():
    """Two replicas, spread over nodes, rolled without losing one, and a PDB keeping one."""
    spec = EXTENDER_DEPLOYMENT["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    terms = spec["template"]["spec"]["affinity"]["podAntiAffinity"]
    term = terms["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"].items() <= labels.items()
    pdb = _one("PodDisruptionBudget", EXTENDER)
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()


@pytest.mark.parametrize("name", [EXTENDER, SCHEDULER])
def test_pods_are_locked_down(name):
    """Non-root, read-only root filesystem, no capabilities, no privilege escalation, seccomp."""
    deployment = _one("Deployment", name)
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    security = _container(deployment)["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert security["seccompProfile"]["type"] == "RuntimeDefault"
    resources = _container(deployment)["resources"]
    assert resources["requests"]["cpu"] and resources["requests"]["memory"] and resources["limits"]["memory"]


def _probe_path(probe: Obj) -> str:
    if "httpGet" in probe:
        return probe["httpGet"]["path"]
    command = probe["exec"]["command"]
    return command[-1]


def test_extender_probes_hit_healthz_and_readyz_over_https():
    """Startup and liveness check /healthz, readiness /readyz, on the serving port over TLS."""
    container = _container(EXTENDER_DEPLOYMENT)
    assert _probe_path(container["startupProbe"]) == "/healthz"
    assert _probe_path(container["livenessProbe"]) == "/healthz"
    assert _probe_path(container["readinessProbe"]) == "/readyz"
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        script = container[kind]["exec"]["command"][2]
        assert "https://127.0.0.1:8443" in script
        # The probe presents a client certificate: --client-ca-file makes every handshake need one.
        assert "load_cert_chain" in script


def _pod_env(deployment: Obj) -> dict[str, str]:
    """The container's env as the pod would see it (downward-API namespace resolved)."""
    env: dict[str, str] = {}
    for var in _container(deployment).get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        elif var["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace":
            env[var["name"]] = deployment["metadata"]["namespace"]
        else:
            raise AssertionError(f"unexpected env source {var}")
    return env


def test_extender_args_are_accepted_by_the_real_cli():
    """The Deployment's args parse with build_parser() and load into the intended settings."""
    container = _container(EXTENDER_DEPLOYMENT)
    args = build_parser().parse_args(container["args"])
    assert args.command == "serve"
    settings = load_settings(args, _pod_env(EXTENDER_DEPLOYMENT))
    assert settings.kube is True and settings.leader_elect is True
    assert (settings.listen_host, settings.listen_port) == ("0.0.0.0", container["ports"][0]["containerPort"])
    assert settings.leader_lease_namespace == NAMESPACE  # where rbac.yaml's Role for leases is
    assert settings.kernel_threads == int(float(container["resources"]["limits"]["cpu"]))
    tls_mount = _mounted_sources(EXTENDER_DEPLOYMENT)[f"{EXTENDER}-tls"]
    for path in (settings.tls_cert_file, settings.tls_key_file, settings.client_ca_file):
        assert path is not None and _under(str(path), tls_mount), path


def test_numba_cache_dir_is_writable():
    """NUMBA_CACHE_DIR points into an emptyDir: the root filesystem is read-only."""
    container = _container(EXTENDER_DEPLOYMENT)
    cache = _pod_env(EXTENDER_DEPLOYMENT)["NUMBA_CACHE_DIR"]
    volumes = {v["name"]: v for v in EXTENDER_DEPLOYMENT["spec"]["template"]["spec"]["volumes"]}
    writable = [
        m["mountPath"]
        for m in container["volumeMounts"]
        if "emptyDir" in volumes[m["name"]] and not m.get("readOnly")
    ]
    assert any(cache == mount or _under(cache, mount) for mount in writable)


def test_service_reaches_the_container_port():
    """The Service selects the extender pods and targets the named container port."""
    service = _one("Service", EXTENDER)
    labels = EXTENDER_DEPLOYMENT["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    ports = {p["name"]: p["containerPort"] for p in _container(EXTENDER_DEPLOYMENT)["ports"]}
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] in ports


def test_bindings_name_the_pods_service_accounts():
    """Every (Cluster)RoleBinding subject is a ServiceAccount that exists and that a pod runs as."""
    accounts = {
        (o["metadata"]["namespace"], o["metadata"]["name"]) for o in OBJECTS if o["kind"] == "ServiceAccount"
    }
    used = {
        (d["metadata"]["namespace"], d["spec"]["template"]["spec"]["serviceAccountName"])
        for d in OBJECTS
        if d["kind"] == "Deployment"
    }
    assert used <= accounts
    for binding in (o for o in OBJECTS if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        for subject in binding["subjects"]:
            assert (subject["namespace"], subject["name"]) in used, binding["metadata"]["name"]
    lease_role = _one("Role", f"{EXTENDER}-leader-election")
    assert lease_role["metadata"]["namespace"] == NAMESPACE


# ------------------------------------------------------------------ the scheduler side


def _scheduler_config() -> Obj:
    config_map = _one("ConfigMap", f"{SCHEDULER}-config")
    return yaml.safe_load(config_map["data"]["config.yaml"])


def test_scheduler_config_is_allocator_mode_for_the_dra_profile_only():
    """One profile (not default-scheduler: a second scheduler must not take the cluster's pods)."""
    config = _scheduler_config()
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["percentageOfNodesToScore"] == 100
    (profile,) = config["profiles"]
    assert profile["schedulerName"] == SCHEDULER
    for point, settings in profile["plugins"].items():
        if point == "preEnqueue":  # only holds pods back until their claims exist
            assert settings == {"enabled": [{"name": "DynamicResources"}]}
            continue
        assert {"name": "DynamicResources"} in settings["disabled"], point
    assert "multiPoint" in profile["plugins"]
    (extender,) = config["extenders"]
    assert (extender["filterVerb"], extender["prioritizeVerb"], extender["bindVerb"]) == (
        "filter",
        "prioritize",
        "bind",
    )
    assert extender["ignorable"] is False and extender["nodeCacheCapable"] is True
    assert extender["managedResources"] == [] and extender["weight"] > 0
    assert config["leaderElection"]["resourceNamespace"] == NAMESPACE


def test_scheduler_url_names_the_service_and_its_port():
    """urlPrefix is https://<service>.<namespace>.svc:<service port>, matching the cert's serverName."""
    extender = _scheduler_config()["extenders"][0]
    url = urlsplit(extender["urlPrefix"])
    service = _one("Service", EXTENDER)
    assert url.scheme == "https" and extender["enableHTTPS"] is True
    assert url.hostname == f"{EXTENDER}.{service['metadata']['namespace']}.svc"
    assert url.port == service["spec"]["ports"][0]["port"]
    assert extender["tlsConfig"]["serverName"] == url.hostname


def test_scheduler_deployment_mounts_its_config_and_client_certificate():
    """--config and the tlsConfig files point into the mounted ConfigMap and Secret."""
    deployment = _one("Deployment", SCHEDULER)
    container = _container(deployment)
    mounts = _mounted_sources(deployment)
    config_flag = next(a for a in container["command"] if a.startswith("--config="))
    config_path = config_flag.removeprefix("--config=")
    assert config_path == f"{mounts[SCHEDULER + '-config']}/config.yaml"
    tls = _scheduler_config()["extenders"][0]["tlsConfig"]
    for key in ("caFile", "certFile", "keyFile"):
        assert _under(tls[key], mounts[f"{SCHEDULER}-client-tls"]), key


# ------------------------------------------------------------------ image


def test_dockerfile_runs_the_cli_as_the_deployments_non_root_user():
    """python:3.11-slim base, installs the project, numeric non-root USER, ENTRYPOINT dra-extender."""
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(r"^FROM python:3\.11-slim\b", text, flags=re.MULTILINE)
    assert re.search(r"^RUN pip install .* \.$", text, flags=re.MULTILINE)
    user = re.findall(r"^USER (\d+)(?::(\d+))?$", text, flags=re.MULTILINE)
    assert user and user[-1][0] != "0"
    pod_security = EXTENDER_DEPLOYMENT["spec"]["template"]["spec"]["securityContext"]
    assert int(user[-1][0]) == pod_security["runAsUser"]
    assert re.search(r'^ENTRYPOINT \["dra-extender"\]$', text, flags=re.MULTILINE)
    assert _container(EXTENDER_DEPLOYMENT)["args"][0] == "serve"


def _final_stage() -> list[str]:
    """The Dockerfile's last stage as logical instructions (continuation lines joined, comments out)."""
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n\s*", " ", "\n".join(lines))
    instructions = [line.strip() for line in joined.splitlines() if line.strip()]
    last_from = max(i for i, line in enumerate(instructions) if line.startswith("FROM "))
    return instructions[last_from:]


def test_dockerfile_compiles_the_kernels_into_the_runtime_cache_dir():
    """The image ships compiled kernels: `python -m kernels` runs at build time, as the runtime
    user, after the ENV that sets NUMBA_CACHE_DIR for the container, into a directory that user
    owns (numba only uses a cache directory it can write)."""
    stage = _final_stage()
    env = [i for i, line in enumerate(stage) if line.startswith("ENV ") and "NUMBA_CACHE_DIR=" in line]
    assert len(env) == 1, "NUMBA_CACHE_DIR is set once, for build and runtime alike"
    (cache,) = re.findall(r"NUMBA_CACHE_DIR=(\S+)", stage[env[0]])
    warm = [i for i, line in enumerate(stage) if re.fullmatch(r"RUN python -m kernels", line)]
    users = [i for i, line in enumerate(stage) if line.startswith("USER ")]
    assert warm and users and env[0] < warm[0] and users[-1] < warm[0]
    runtime_user = stage[users[-1]].split()[1].split(":")[0]
    made = [line for line in stage[: warm[0]] if line.startswith("RUN install -d ") and line.endswith(cache)]
    assert made and f"-o {runtime_user}" in made[0], "the build creates the cache dir for the runtime user"
    assert not any(re.search(r"NUMBA_CACHE_DIR|NUMBA_DISABLE_JIT", line) for line in stage[warm[0] :])


def test_deployment_seeds_its_cache_volume_from_the_image():
    """The pod's NUMBA_CACHE_DIR is the image's; an init container of the same image copies the
    compiled kernels from that path into the emptyDir the extender mounts over it."""
    stage = _final_stage()
    (image_cache,) = re.findall(r"NUMBA_CACHE_DIR=(\S+)", " ".join(stage))
    cache = _pod_env(EXTENDER_DEPLOYMENT)["NUMBA_CACHE_DIR"]
    assert cache == image_cache
    pod = EXTENDER_DEPLOYMENT["spec"]["template"]["spec"]
    (init,) = [c for c in pod.get("initContainers", []) if c["name"] == "numba-cache"]
    assert init["image"] == _container(EXTENDER_DEPLOYMENT)["image"]
    volume = next(
        m["name"] for m in _container(EXTENDER_DEPLOYMENT)["volumeMounts"] if m["mountPath"] == cache
    )
    (seed,) = [m["mountPath"] for m in init["volumeMounts"] if m["name"] == volume]
    assert not _under(seed, cache) and seed != cache, "the init container must still see the image's files"
    assert init["command"] == ["cp", "-R", f"{cache}/.", f"{seed}/"]
    assert init["securityContext"] == _container(EXTENDER_DEPLOYMENT)["securityContext"]
