"""The Helm chart in deploy/helm/dra-topology-extender, rendered by the real helm v3.22.0.

- `helm lint --strict` passes with the default values and in each mode;
- with default values the chart renders what the real kustomize (v5.8.2) makes of deploy/, field
  by field, except the labels Helm's conventions add and the pod templates' checksum annotations;
- every other value does what values.yaml says: each rendering's extender command line goes
  through the real CLI parser and `load_settings` (with the settings file the chart renders),
  and the scheduler configuration of each mode is checked; the advisory ClusterRole is checked
  against the API calls the real watch makes (as tests/deploy/test_rbac_coverage.py does for
  deploy/rbac.yaml);
- wrong values are refused with a message naming the value (values.schema.json and the
  templates' checks);
- the PrometheusRule and the Grafana dashboard carry deploy/prometheus/ and deploy/grafana/'s
  files, also in the packaged chart (files/ holds links to them).

The real API server and kube-scheduler check the rendered objects in tests/e2e/test_helm.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender import wiring
from extender.__main__ import build_parser
from extender.objects import Obj
from extender.settings import _FIELD_KEYS, Settings, load_settings
from tests.deploy import chart
from tests.deploy.chart import CHART, HELM_LABELS, NAMESPACE, ROOT, one, render, render_error, run_helm
from tests.deploy.test_rbac_coverage import CLUSTER, grants_for
from tests.fakeapi.server import FakeApiServer
from tests.kube.cluster import until

EXTENDER = "dra-topology-extender"
SCHEDULER = "dra-topology-scheduler"
RULES = ROOT / "deploy" / "prometheus" / "dra-topology-extender.rules.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "dra-topology-extender.json"

#: Settings the chart sets itself (flags or env) from other values; a settings-file key for one
#: would be overridden without a word, so the templates refuse it.
MANAGED_SETTINGS = {
    "kube": "kube mode",
    "kubeconfig": "service account",
    "state_paths": "kube mode",
    "listen_host": "0.0.0.0:8443",
    "listen_port": "0.0.0.0:8443",
    "tls_cert_file": "tls.enabled",
    "tls_key_file": "tls.enabled",
    "client_ca_file": "tls.clientAuth",
    "leader_elect": "leaderElection.enabled",
    "leader_lease_namespace": "release namespace",
    "kubernetes_version": "kubernetesVersion",
    "ui": "use ui",
    "tracing": "tracing.otlpEndpoint",
    "otlp_endpoint": "tracing.otlpEndpoint",
    "otlp_protocol": "tracing.protocol",
    "log_json": "JSON",
    "kernel_threads": "kernelThreads",
    "scheduler_names": "mode",
}


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)


# ------------------------------------------------------------------ the extender's view of a rendering


def _container(deployment: Obj) -> Obj:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def _pod_env(deployment: Obj) -> dict[str, str]:
    env: dict[str, str] = {}
    for var in _container(deployment).get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        else:
            assert var["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace", var
            env[var["name"]] = deployment["metadata"]["namespace"]
    return env


def _mounts(deployment: Obj) -> dict[str, tuple[str, Obj]]:
    """Mount path -> (volume name, volume) of the extender container."""
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    return {m["mountPath"]: (m["name"], volumes[m["name"]]) for m in _container(deployment)["volumeMounts"]}


def extender_settings(objects: list[Obj], tmp_path: Path) -> Settings:
    """The settings the extender's pods would run with: their args and env through the real CLI
    parser and `load_settings`, the settings file from the rendered ConfigMap at the path the
    pod mounts it (rewritten into tmp_path)."""
    deployment = one(objects, "Deployment", EXTENDER)
    args = list(_container(deployment)["args"])
    if "--config" in args:
        path = args[args.index("--config") + 1]
        directory = str(Path(path).parent)
        _, volume = _mounts(deployment)[directory]
        configmap = one(objects, "ConfigMap", volume["configMap"]["name"])
        local = tmp_path / Path(path).name
        local.write_text(configmap["data"][Path(path).name])
        args[args.index("--config") + 1] = str(local)
    parsed = build_parser().parse_args(args)
    assert parsed.command == "serve"
    return load_settings(parsed, _pod_env(deployment))


# ------------------------------------------------------------------ lint


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"mode": "advisory"},
        {"mode": "both", "secondScheduler.enabled": "false"},
        {
            "replicas": "1",
            "leaderElection.enabled": "false",
            "tls.enabled": "false",
            "tls.clientAuth": "false",
        },
    ],
    ids=["default", "advisory", "both", "plain-http-single"],
)
def test_helm_lint_passes(values):
    args = [a for k, v in values.items() for a in ("--set", f"{k}={v}")]
    out = run_helm("lint", "--strict", "--namespace", NAMESPACE, *args)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 chart(s) failed" in out.stdout


# ------------------------------------------------------------------ default values = deploy/


def _without_helm_additions(obj: Obj) -> Obj:
    """`obj` less the labels Helm's conventions add and the pod templates' checksum annotations
    (both are what a chart adds; anything else must match deploy/)."""
    obj = json.loads(json.dumps(obj))
    labels = obj["metadata"].get("labels", {})
    for label in HELM_LABELS:
        labels.pop(label, None)
    template = obj.get("spec", {}).get("template", {}).get("metadata", {})
    annotations = template.get("annotations", {})
    for key in [k for k in annotations if k.startswith("checksum/")]:
        del annotations[key]
    if "annotations" in template and not annotations:
        del template["annotations"]
    if obj["kind"] == "ConfigMap" and "config.yaml" in obj.get("data", {}):
        # YAML inside YAML: compare the scheduler configuration as data, not as text.
        obj["data"]["config.yaml"] = yaml.safe_load(obj["data"]["config.yaml"])
    return obj


def _differences(helm: Any, kust: Any, path: str = "") -> list[str]:
    """Every path where the two differ, with both values (empty: equal)."""
    if isinstance(helm, dict) and isinstance(kust, dict):
        out: list[str] = []
        for key in sorted(set(helm) | set(kust)):
            if key not in kust:
                out.append(f"{path}.{key}: only in the chart ({helm[key]!r:.80})")
            elif key not in helm:
                out.append(f"{path}.{key}: only in deploy/ ({kust[key]!r:.80})")
            else:
                out += _differences(helm[key], kust[key], f"{path}.{key}")
        return out
    if isinstance(helm, list) and isinstance(kust, list):
        if len(helm) != len(kust):
            return [f"{path}: {len(helm)} items in the chart, {len(kust)} in deploy/"]
        return [
            d
            for i, (h, k) in enumerate(zip(helm, kust, strict=True))
            for d in _differences(h, k, f"{path}[{i}]")
        ]
    if helm != kust or type(helm) is not type(kust):
        return [f"{path}: chart {helm!r:.80} != deploy/ {kust!r:.80}"]
    return []


def _by_identity(objects: list[Obj]) -> dict[tuple[str, str, str, str], Obj]:
    out: dict[tuple[str, str, str, str], Obj] = {}
    for obj in objects:
        key = (obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        assert key not in out, f"{key} rendered twice"
        out[key] = obj
    return out


def kustomize_deploy() -> list[Obj]:
    out = subprocess.run(
        [str(chart.kustomize()), "build", str(ROOT / "deploy")], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def test_default_values_render_the_objects_of_kustomize_deploy():
    """Same objects (apiVersion, kind, namespace, name) and, in each, the same fields and values."""
    chart_objects = _by_identity([_without_helm_additions(o) for o in render()])
    deploy_objects = _by_identity([_without_helm_additions(o) for o in kustomize_deploy()])
    assert sorted(chart_objects) == sorted(deploy_objects)
    differences = [
        f"{kind} {name}{d}"
        for (api, kind, ns, name), obj in sorted(chart_objects.items())
        for d in _differences(obj, deploy_objects[(api, kind, ns, name)])
    ]
    assert not differences, "\n".join(differences)


def test_the_comparison_sees_a_difference():
    """The comparison is not blind: one changed field deep in a pod spec is reported by path."""
    objects = [_without_helm_additions(o) for o in kustomize_deploy()]
    changed = json.loads(json.dumps(objects))
    deployment = next(o for o in changed if o["kind"] == "Deployment" and o["metadata"]["name"] == EXTENDER)
    _container(deployment)["securityContext"]["runAsNonRoot"] = False
    found = [d for a, b in zip(changed, objects, strict=True) for d in _differences(a, b)]
    assert found == [
        ".spec.template.spec.containers[0].securityContext.runAsNonRoot: chart False != deploy/ True"
    ]


def test_helm_labels_are_on_every_object_and_never_in_a_selector():
    for obj in render():
        assert set(obj["metadata"]["labels"]) >= HELM_LABELS, f"{obj['kind']} {obj['metadata']['name']}"
        selector = obj.get("spec", {}).get("selector", {})
        assert not HELM_LABELS & set(selector.get("matchLabels", selector)), obj["metadata"]["name"]


def test_every_object_is_in_the_release_namespace():
    """`helm install -n NS`: every namespaced object lands in NS (the kube-system RoleBinding
    of the scheduler's delegated authentication excepted), and the Service name follows."""
    objects = render(namespace="gpu-scheduling")
    namespaced = [o for o in objects if o["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding")]
    elsewhere = {
        (o["kind"], o["metadata"]["name"])
        for o in namespaced
        if o["metadata"]["namespace"] != "gpu-scheduling"
    }
    assert elsewhere == {("RoleBinding", "dra-topology-scheduler-authentication-reader")}
    assert one(objects, "Namespace", "gpu-scheduling")
    extender = chart.scheduler_config(objects)["extenders"][0]
    assert extender["urlPrefix"] == "https://dra-topology-extender.gpu-scheduling.svc:8443"
    assert extender["tlsConfig"]["serverName"] == "dra-topology-extender.gpu-scheduling.svc"
    assert chart.scheduler_config(objects)["leaderElection"]["resourceNamespace"] == "gpu-scheduling"


# ------------------------------------------------------------------ modes


def test_default_is_allocator_mode(tmp_path):
    objects = render()
    settings = extender_settings(objects, tmp_path)
    assert settings.kube and settings.leader_elect
    assert settings.leader_lease_namespace == NAMESPACE
    assert settings.scheduler_names == ()
    assert settings.kubernetes_version is None  # read from the API server
    config = chart.scheduler_config(objects)
    assert [p["schedulerName"] for p in config["profiles"]] == [SCHEDULER]
    assert {"name": "DynamicResources"} in config["profiles"][0]["plugins"]["multiPoint"]["disabled"]
    (extender,) = config["extenders"]
    assert extender["bindVerb"] == "bind" and extender["ignorable"] is False


def test_advisory_mode_filters_and_scores_only(tmp_path):
    objects = render(mode="advisory", replicas="3", **{"leaderElection.enabled": "false"})
    config = chart.scheduler_config(objects)
    (profile,) = config["profiles"]
    assert profile == {"schedulerName": SCHEDULER}  # the in-tree DynamicResources plugin stays on
    (extender,) = config["extenders"]
    assert "bindVerb" not in extender
    assert extender["ignorable"] is True
    assert (extender["filterVerb"], extender["prioritizeVerb"], extender["weight"]) == (
        "filter",
        "prioritize",
        1,
    )
    settings = extender_settings(objects, tmp_path)
    assert not settings.leader_elect
    assert one(objects, "Deployment", EXTENDER)["spec"]["replicas"] == 3
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert ("Role", "dra-topology-extender-leader-election") not in kinds
    writes = {"create", "update", "patch", "delete"}
    role = one(objects, "ClusterRole", EXTENDER)
    assert not [r for r in role["rules"] if writes & set(r["verbs"])], role["rules"]


def test_both_mode_is_the_control_plane_schedulers_configuration(tmp_path):
    objects = render(
        mode="both",
        **{
            "secondScheduler.enabled": "false",
            "schedulerConfig.kubeconfig": "/etc/kubernetes/scheduler.conf",
        },
    )
    config = chart.scheduler_config(objects)
    assert [p["schedulerName"] for p in config["profiles"]] == ["default-scheduler", SCHEDULER]
    assert "plugins" not in config["profiles"][0]
    assert {"name": "DynamicResources"} in config["profiles"][1]["plugins"]["filter"]["disabled"]
    assert config["clientConnection"]["kubeconfig"] == "/etc/kubernetes/scheduler.conf"
    # The cluster's scheduler keeps its own Lease (kube-system/kube-scheduler).
    assert config["leaderElection"] == {"leaderElect": True}
    assert config["extenders"][0]["bindVerb"] == "bind"
    assert extender_settings(objects, tmp_path).scheduler_names == (SCHEDULER,)
    assert not [o for o in objects if o["metadata"]["name"] == SCHEDULER]  # no second scheduler


def test_both_mode_with_config_equals_the_shipped_allocator_config():
    """Mode both renders config/scheduler-allocator.yaml (the same fields and values)."""
    config = chart.scheduler_config(
        render(
            mode="both",
            **{
                "secondScheduler.enabled": "false",
                "schedulerConfig.kubeconfig": "/etc/kubernetes/scheduler.conf",
            },
        )
    )
    shipped = yaml.safe_load((ROOT / "config" / "scheduler-allocator.yaml").read_text())
    assert not _differences(config, shipped), _differences(config, shipped)


def test_the_rendered_extender_settings_of_every_mode_load(tmp_path):
    for values in (
        {"mode": "allocator"},
        {"mode": "advisory"},
        {"mode": "both", "secondScheduler.enabled": "false"},
    ):
        settings = extender_settings(render(**values), tmp_path)
        assert settings.kube, values


# ------------------------------------------------------------------ other values


def test_single_replica_without_leader_election(tmp_path):
    objects = render(replicas="1", **{"leaderElection.enabled": "false"})
    assert one(objects, "Deployment", EXTENDER)["spec"]["replicas"] == 1
    assert not extender_settings(objects, tmp_path).leader_elect
    kinds = {o["kind"] for o in objects}
    assert "PodDisruptionBudget" not in kinds  # minAvailable 1 of 1 would block every drain
    assert not [o for o in objects if o["metadata"]["name"] == f"{EXTENDER}-leader-election"]


def test_tls_secret_names(tmp_path):
    objects = render(
        **{"tls.secretName": "my-serving-cert", "secondScheduler.clientTLSSecretName": "my-client"}
    )
    extender = one(objects, "Deployment", EXTENDER)
    settings = extender_settings(objects, tmp_path)
    for path in (settings.tls_cert_file, settings.tls_key_file, settings.client_ca_file):
        assert path is not None
        _, volume = _mounts(extender)[str(path.parent)]
        assert volume["secret"]["secretName"] == "my-serving-cert"
    scheduler = one(objects, "Deployment", SCHEDULER)
    secrets = [
        v["secret"]["secretName"] for v in scheduler["spec"]["template"]["spec"]["volumes"] if "secret" in v
    ]
    assert secrets == ["my-client"]


def test_tls_without_client_certificates(tmp_path):
    objects = render(**{"tls.clientAuth": "false"})
    settings = extender_settings(objects, tmp_path)
    assert settings.tls_cert_file is not None and settings.client_ca_file is None
    container = _container(one(objects, "Deployment", EXTENDER))
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["scheme"] == "HTTPS"
    tls = chart.scheduler_config(objects)["extenders"][0]["tlsConfig"]
    assert set(tls) == {"caFile", "serverName"}  # no client certificate to present


def test_plain_http(tmp_path):
    objects = render(**{"tls.enabled": "false", "tls.clientAuth": "false"})
    settings = extender_settings(objects, tmp_path)
    assert settings.tls_cert_file is None and settings.client_ca_file is None
    extender = one(objects, "Deployment", EXTENDER)
    container = _container(extender)
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 8443, "scheme": "HTTP"}
    assert not [v for v in extender["spec"]["template"]["spec"]["volumes"] if "secret" in v]
    (entry,) = chart.scheduler_config(objects)["extenders"]
    assert entry["urlPrefix"].startswith("http://") and entry["enableHTTPS"] is False
    assert "tlsConfig" not in entry
    scheduler = one(objects, "Deployment", SCHEDULER)
    assert not [v for v in scheduler["spec"]["template"]["spec"]["volumes"] if "secret" in v]
    service = one(objects, "Service", EXTENDER)
    assert service["spec"]["ports"][0]["targetPort"] == container["ports"][0]["name"]


def test_tracing_endpoint_ui_and_kubernetes_version(tmp_path):
    objects = render(
        ui="true",
        kubernetesVersion="1.37",
        **{"tracing.otlpEndpoint": "http://jaeger.observability.svc:4318", "tracing.protocol": "grpc"},
    )
    settings = extender_settings(objects, tmp_path)
    assert settings.tracing and settings.otlp_endpoint == "http://jaeger.observability.svc:4318"
    assert settings.otlp_protocol == "grpc"
    assert settings.ui
    assert settings.kubernetes_version == "1.37"
    assert not extender_settings(render(), tmp_path).tracing


def test_settings_file(tmp_path):
    """`settings` becomes the --config file; the extender reads it as written, and a change rolls
    the pods (checksum annotation)."""
    objects = render(**{"settings.packing": "spread", "settings.featureGates.DRADeviceTaintRules": "true"})
    settings = extender_settings(objects, tmp_path)
    assert settings.packing == "spread"
    assert ("DRADeviceTaintRules", True) in settings.feature_gates
    other = render(**{"settings.packing": "binpack"})

    def checksum(objs: list[Obj]) -> str:
        annotations = one(objs, "Deployment", EXTENDER)["spec"]["template"]["metadata"]["annotations"]
        return str(annotations["checksum/settings"])

    assert checksum(objects) != checksum(other)
    assert not [o for o in render() if o["metadata"]["name"] == f"{EXTENDER}-settings"]


def test_scheduler_config_change_rolls_the_second_scheduler():
    def checksum(objs: list[Obj]) -> str:
        template = one(objs, "Deployment", SCHEDULER)["spec"]["template"]
        return str(template["metadata"]["annotations"]["checksum/config"])

    assert checksum(render()) != checksum(render(**{"tls.clientAuth": "false"}))


def test_resources_and_node_placement():
    objects = render(
        **{
            "resources.limits.memory": "8Gi",
            "nodeSelector.node-role\\.kubernetes\\.io/control-plane": "",
            "tolerations[0].key": "node-role.kubernetes.io/control-plane",
            "tolerations[0].effect": "NoSchedule",
            "affinity": "null",
            "priorityClassName": "system-cluster-critical",
            "secondScheduler.image": "registry.k8s.io/kube-scheduler:v1.37.2",
            "secondScheduler.nodeSelector.kubernetes\\.io/os": "linux",
        }
    )
    pod = one(objects, "Deployment", EXTENDER)["spec"]["template"]["spec"]
    assert _container({"spec": {"template": {"spec": pod}}})["resources"]["limits"]["memory"] == "8Gi"
    assert pod["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}
    assert pod["tolerations"] == [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    assert "affinity" not in pod
    assert pod["priorityClassName"] == "system-cluster-critical"
    scheduler = one(objects, "Deployment", SCHEDULER)["spec"]["template"]["spec"]
    assert scheduler["containers"][0]["image"] == "registry.k8s.io/kube-scheduler:v1.37.2"
    assert scheduler["nodeSelector"] == {"kubernetes.io/os": "linux"}


def test_no_second_scheduler():
    objects = render(**{"secondScheduler.enabled": "false"})
    assert not [
        o for o in objects if o["metadata"]["name"].startswith(SCHEDULER) and o["kind"] != "ConfigMap"
    ]
    assert chart.scheduler_config(objects)["profiles"][0]["schedulerName"] == SCHEDULER


def test_namespace_not_created():
    assert "Namespace" not in {o["kind"] for o in render(**{"namespace.create": "false"})}


def test_image():
    objects = render(
        **{"image.repository": "registry.example.com/dra-topology-extender", "image.tag": "0.2.0"}
    )
    pod = one(objects, "Deployment", EXTENDER)["spec"]["template"]["spec"]
    images = {c["image"] for c in pod["containers"] + pod["initContainers"]}
    assert images == {"registry.example.com/dra-topology-extender:0.2.0"}


# ------------------------------------------------------------------ advisory RBAC against the real watch


async def test_advisory_cluster_role_allows_every_call_of_the_watch_and_nothing_more(tmp_path):
    """Advisory mode grants list and watch only: the real watch source lists and watches every
    kind under those grants, and every grant is used (no leader election, no binder)."""
    objects = render(mode="advisory", replicas="1", **{"leaderElection.enabled": "false"})
    rbac = [o for o in objects if o["apiVersion"].startswith("rbac.authorization.k8s.io")]
    deployment = one(objects, "Deployment", EXTENDER)
    account = (NAMESPACE, deployment["spec"]["template"]["spec"]["serviceAccountName"])
    settings = dataclasses.replace(extender_settings(objects, tmp_path), kernel_threads=0)
    with FakeApiServer(bookmark_interval=0.05) as api:
        api.put_objects(CLUSTER)
        _, _, source = wiring.build_kube_services(settings, api_client=api.api_client())
        source.start()
        try:
            await until(source.synced, timeout=15, what="the watch to list every kind")
            await until(lambda: api.open_watches() >= 8, timeout=15, what="a watch on every kind")
            await asyncio.sleep(0.2)
        finally:
            await source.stop()
        log = api.authorization_log()
    grants = grants_for(account, rbac)
    denied = sorted({e for e in log if not any(g.allows(e) for g in grants)})
    assert not denied, f"calls the advisory ClusterRole does not allow: {denied}"
    unused = sorted({(g.group, g.resource, g.verb) for g in grants if not any(g.allows(e) for e in log)})
    assert not unused, f"advisory grants no call used: {unused}"


# ------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"mode": "allocatr"}, "at '/mode': value must be one of 'allocator', 'advisory', 'both'"),
        ({"replicas": "0"}, "at '/replicas': minimum: got 0, want 1"),
        ({"kubernetesVersion": "1.35"}, "at '/kubernetesVersion': value must be one of"),
        ({"settings.packng": "spread"}, "at '/settings': additional properties 'packng' not allowed"),
        ({"tracing.otlpEndpoint": "jaeger:4318"}, "at '/tracing/otlpEndpoint'"),
        ({"tls.secretName": "Not_A_Name"}, "at '/tls/secretName'"),
        (
            {"secondScheduler.enabled": "yes please"},
            "at '/secondScheduler/enabled': got string, want boolean",
        ),
        ({"mode": "both"}, "mode both is the configuration of the cluster's own kube-scheduler"),
        (
            {"leaderElection.enabled": "false"},
            "mode allocator with 2 replicas needs leaderElection.enabled=true",
        ),
        ({"tls.enabled": "false"}, "tls.clientAuth=true needs tls.enabled=true"),
        ({"settings.ui": "true"}, "settings.ui is set by the chart: use ui"),
        (
            {"settings.leader_elect": "true"},
            "settings.leader_elect is set by the chart: use leaderElection.enabled",
        ),
    ],
)
def test_wrong_values_are_refused_with_a_message(values, message):
    assert message in render_error(**values)


def test_schema_knows_every_setting_and_the_chart_refuses_exactly_the_managed_ones():
    """values.schema.json lists every key of the settings file (camelCase and snake_case), so a
    misspelt key fails at `helm install`; the templates refuse exactly the keys the chart sets
    from other values (each in both spellings)."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    listed = set(schema["properties"]["settings"]["properties"])
    assert listed == set(_FIELD_KEYS) | {_camel(k) for k in _FIELD_KEYS}

    def refused(spelling: str) -> bool:
        out = run_helm("template", "x", "--namespace", NAMESPACE, "--set", f"settings.{spelling}=1")
        assert out.returncode == 0 or f"settings.{spelling} is set by the chart" in out.stderr, out.stderr
        return out.returncode != 0

    assert {key for key in _FIELD_KEYS if refused(key)} == set(MANAGED_SETTINGS)
    assert all(refused(_camel(key)) for key in MANAGED_SETTINGS)


def test_every_flag_and_env_the_chart_sets_is_a_managed_setting(tmp_path):
    """A settings-file key for a setting the chart passes as a flag or env var would lose without
    a word (flags and env win over the file): each one the chart can render is refused."""
    everything = render(
        mode="both",
        ui="true",
        kubernetesVersion="1.37",
        **{
            "secondScheduler.enabled": "false",
            "tracing.otlpEndpoint": "http://otel:4318",
            "settings.packing": "spread",
        },
    )
    deployment = one(everything, "Deployment", EXTENDER)
    args = build_parser().parse_args(_container(deployment)["args"])
    given = {name for name, value in vars(args).items() if value is not None}
    given -= {"command", "config", "run"}
    if "listen" in given:
        given = (given - {"listen"}) | {"listen_host", "listen_port"}
    env = {
        name.removeprefix("DRA_EXTENDER_").lower()
        for name in _pod_env(deployment)
        if name.startswith("DRA_EXTENDER_")
    }
    assert given | env, "nothing parsed"
    assert (given | env) <= set(MANAGED_SETTINGS), (given | env) - set(MANAGED_SETTINGS)


# ------------------------------------------------------------------ the PrometheusRule and the dashboard


def test_linked_files_point_at_deploy():
    """files/ holds links (Helm reads nothing outside the chart); each resolves to deploy/'s file."""
    assert (CHART / "files" / RULES.name).resolve() == RULES.resolve()
    assert (CHART / "files" / DASHBOARD.name).resolve() == DASHBOARD.resolve()
    assert RULES.is_file() and DASHBOARD.is_file()


def test_prometheus_rule_carries_the_rule_groups():
    assert "PrometheusRule" not in {o["kind"] for o in render()}
    objects = render(
        **{"prometheusRule.enabled": "true", "prometheusRule.labels.release": "kube-prometheus-stack"}
    )
    rule = one(objects, "PrometheusRule", EXTENDER)
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]


def test_grafana_dashboard_configmap_carries_the_dashboard():
    objects = render(**{"grafanaDashboard.enabled": "true", "grafanaDashboard.namespace": "monitoring"})
    (configmap,) = [o for o in objects if o["metadata"].get("labels", {}).get("grafana_dashboard") == "1"]
    assert configmap["kind"] == "ConfigMap" and configmap["metadata"]["namespace"] == "monitoring"
    assert json.loads(configmap["data"][DASHBOARD.name]) == json.loads(DASHBOARD.read_text())


def test_packaged_chart_holds_the_files_not_links(tmp_path):
    out = subprocess.run(
        [str(chart.helm()), "package", str(CHART), "--destination", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    (package,) = tmp_path.glob("dra-topology-extender-*.tgz")
    with tarfile.open(package) as tar:
        members = {m.name: m for m in tar.getmembers()}
        for source in (RULES, DASHBOARD):
            member = members[f"dra-topology-extender/files/{source.name}"]
            assert member.isfile()
            data = tar.extractfile(member)
            assert data is not None and data.read() == source.read_bytes()
    # The packaged chart renders the same as the directory.
    packaged = subprocess.run(
        [str(chart.helm()), "template", chart.RELEASE, str(package), "--namespace", NAMESPACE],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert packaged.returncode == 0, packaged.stderr
    assert [d for d in yaml.safe_load_all(packaged.stdout) if d] == render()


def test_values_file_documents_every_top_level_value():
    """Each top-level key of values.yaml has a comment block or is in the chart README's table."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()
    missing = [key for key in values if not re.search(rf"`{re.escape(key)}[`.]", readme)]
    assert not missing, f"values not in deploy/helm/dra-topology-extender/README.md: {missing}"
