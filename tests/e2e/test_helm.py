"""The Helm chart's output (`helm template`, deploy/helm/dra-topology-extender) against the real
kube-apiserver and kube-scheduler:

- every object of the default rendering is applied server-side (PATCH
  application/apply-patch+yaml, a field manager of its own, fieldValidation=Strict), a second
  apply changes nothing, and the renderings of the other modes and options are accepted the same
  way as dry runs (they would replace the objects the rest of the suite runs under);
- kube-scheduler loads the KubeSchedulerConfiguration each mode renders (`--write-config-to`:
  it decodes, validates and defaults the configuration, builds every profile and the extender
  clients with their certificates, writes what it built and exits), and the default one, run for
  real as the chart's scheduler ServiceAccount, binds a pod through the extender.

The PrometheusRule is not applied: this control plane serves no monitoring.coreos.com CRD (its
content is checked against deploy/prometheus/ in tests/deploy/test_helm_chart.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.deploy import chart
from tests.e2e import objects
from tests.e2e.cluster import ControlPlane, KubeError
from tests.e2e.conftest import ALLOCATOR_SCHEDULER, wait_until

pytestmark = pytest.mark.e2e

MANAGER = "helm-e2e"
CHART_SCHEDULER = "dra-topology-scheduler"

#: The renderings applied as dry runs and whose scheduler configuration kube-scheduler loads.
VARIANTS: dict[str, dict[str, str]] = {
    "allocator": {},
    "advisory": {"mode": "advisory", "leaderElection.enabled": "false"},
    "both": {"mode": "both", "secondScheduler.enabled": "false"},
    "options": {
        "ui": "true",
        "kubernetesVersion": "1.37",
        "tracing.otlpEndpoint": "http://jaeger.observability.svc:4318",
        "settings.packing": "spread",
        "tls.clientAuth": "false",
        "replicas": "1",
        "grafanaDashboard.enabled": "true",
        "tolerations[0].key": "dedicated",
        "tolerations[0].effect": "NoSchedule",
    },
    "plain-http": {"tls.enabled": "false", "tls.clientAuth": "false"},
}


def _applicable(rendered: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The objects this API server can take, the Namespace first (the rest lives in it)."""
    known = [o for o in rendered if o["kind"] != "PrometheusRule"]
    return sorted(known, key=lambda o: o["kind"] != "Namespace")


def test_default_rendering_applies_server_side_strictly(plane: ControlPlane) -> None:
    rendered = _applicable(chart.render())
    first = {}
    for obj in rendered:
        applied = plane.kube.server_side_apply(obj, MANAGER)
        assert applied["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        first[(obj["kind"], obj["metadata"]["name"])] = applied["metadata"]["resourceVersion"]
    again = {
        (o["kind"], o["metadata"]["name"]): plane.kube.server_side_apply(o, MANAGER)["metadata"][
            "resourceVersion"
        ]
        for o in rendered
    }
    assert again == first, "a second apply of the same rendering changed objects"


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_each_rendering_is_accepted_strictly(plane: ControlPlane, variant: str) -> None:
    for obj in _applicable(chart.render(**VARIANTS[variant])):
        # force: the dry run may change fields the fixtures' objects own (advisory's ClusterRole)
        plane.kube.server_side_apply(obj, MANAGER, dry_run=True, force=True)


def test_a_wrong_field_is_refused(plane: ControlPlane) -> None:
    """The strict apply is not lenient: a misspelt field in a rendered object is an error."""
    service = next(o for o in chart.render() if o["kind"] == "Service")
    service["spec"]["selectr"] = service["spec"].pop("selector")
    # The API server's words for it: a 400 strict-decoding error for a new object, SSA's "field
    # not declared in schema" (HTTP 500) for an existing one.
    with pytest.raises(KubeError, match=r"spec\.selectr"):
        plane.kube.server_side_apply(service, MANAGER, dry_run=True)


def _identity(plane: ControlPlane, rendered: list[dict[str, Any]]) -> Path:
    accounts = [
        o for o in rendered if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == CHART_SCHEDULER
    ]
    if not accounts:  # mode both: the cluster's own scheduler runs it
        return plane.scheduler_kubeconfig
    return plane.account_kubeconfig(accounts[0]["metadata"], plane.work / "helm-scheduler.conf")


def _dynamic_resources_runs(profile: dict[str, Any]) -> bool:
    """The completed profile runs the in-tree DynamicResources filter: enabled (through
    multiPoint, where the defaults are) and not disabled there or at filter."""

    def named(point: str, which: str) -> set[str]:
        return {p["name"] for p in (profile["plugins"].get(point) or {}).get(which) or []}

    enabled = named("multiPoint", "enabled") | named("filter", "enabled")
    disabled = named("multiPoint", "disabled") | named("filter", "disabled")
    return "DynamicResources" in enabled - disabled


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_kube_scheduler_loads_the_rendered_configuration(plane: ControlPlane, variant: str) -> None:
    rendered = chart.render(**VARIANTS[variant])
    for obj in _applicable(rendered):  # the identity it runs as must exist
        if obj["kind"] in ("ServiceAccount", "ClusterRoleBinding", "RoleBinding", "Role") and (
            obj["metadata"]["name"].startswith(CHART_SCHEDULER)
        ):
            plane.kube.server_side_apply(obj, MANAGER, force=True)
    written = plane.completed_scheduler_config(
        chart.scheduler_config(rendered), _identity(plane, rendered), f"helm-{variant}"
    )
    profiles = {p["schedulerName"]: p for p in written["profiles"]}
    (extender,) = written["extenders"]
    mode = VARIANTS[variant].get("mode", "allocator")
    assert set(profiles) == ({"default-scheduler", CHART_SCHEDULER} if mode == "both" else {CHART_SCHEDULER})
    # The in-tree allocator runs where the extender does not allocate (advisory, default-scheduler).
    assert _dynamic_resources_runs(profiles[CHART_SCHEDULER]) == (mode == "advisory")
    if mode == "both":
        assert _dynamic_resources_runs(profiles["default-scheduler"])
    assert bool(extender.get("bindVerb")) == (mode != "advisory")
    assert extender.get("ignorable", False) == (mode == "advisory")  # false is left out
    assert extender.get("enableHTTPS", False) == (variant != "plain-http")


def test_the_charts_scheduler_binds_through_the_extender(
    plane: ControlPlane, pods: list[dict[str, Any]]
) -> None:
    """The default rendering's configuration, run by the real kube-scheduler as the chart's
    scheduler ServiceAccount (RBAC as the chart renders it), binds a pod through the extender."""
    rendered = chart.render()
    for obj in _applicable(rendered):
        if obj["kind"] in ("ServiceAccount", "ClusterRoleBinding", "RoleBinding", "Role"):
            plane.kube.server_side_apply(obj, MANAGER, force=True)
    plane.use("deploy")  # the extender as deploy/ runs it (allocator, leader election)
    plane.stop_component("kube-scheduler")  # releases its Lease (ReleaseOnCancel)
    plane.mode = "helm"  # the next use() starts its own pair again
    plane.run_scheduler_config(chart.scheduler_config(rendered), _identity(plane, rendered), "helm-scheduler")
    batch = [
        p
        for p in objects.seed_pods(ALLOCATOR_SCHEDULER, suffix="-helm")
        if p["metadata"]["name"].startswith("h100-pair")
    ]
    pods.extend(objects.create_pods(plane.kube, batch))

    def bound() -> dict[str, Any] | None:
        fresh = objects.get(
            plane.kube, "Pod", batch[0]["metadata"]["name"], batch[0]["metadata"]["namespace"]
        )
        return fresh if fresh["spec"].get("nodeName") else None

    pod = wait_until("the pod bound by the chart's scheduler", bound, timeout=120)
    claims = objects.pod_claims(plane.kube, pod)
    assert claims and all(objects.allocated_devices(c) for c in claims), claims
    lease = objects.get(plane.kube, "Lease", CHART_SCHEDULER, chart.NAMESPACE)
    assert lease["spec"].get("holderIdentity"), "the chart's scheduler holds no Lease in its namespace"
