"""What an operator sees of a real scheduling run: the extender's spans in Jaeger's query API (the
real Jaeger, fed over OTLP), one trace per verb call with the pod and, for bind, the node the real
kube-scheduler bound it to; and Prometheus text from `/metrics` that Prometheus' own parser reads."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e import objects
from tests.e2e.cluster import ControlPlane
from tests.e2e.conftest import ALLOCATOR_SCHEDULER, wait_until

pytestmark = pytest.mark.e2e

SERVICE = "dra-topology-extender"


def _tags(span: dict[str, Any]) -> dict[str, Any]:
    return {t["key"]: t["value"] for t in span.get("tags", [])}


def test_jaeger_has_the_traces_of_a_real_scheduling_run(
    plane: ControlPlane, pods: list[dict[str, Any]]
) -> None:
    plane.use("allocator")
    pod = objects.pod("traced-fpga", "ml-serving", ALLOCATOR_SCHEDULER, {"fpga": "fpga-serving-template"})
    pods.extend(objects.create_pods(plane.kube, [pod]))
    bound = wait_until(
        "the traced pod bound",
        lambda: objects.get(plane.kube, "Pod", "traced-fpga", "ml-serving")["spec"].get("nodeName"),
        timeout=90,
    )

    def spans_of(operation: str) -> list[dict[str, Any]]:
        spans = [
            s
            for t in plane.jaeger_traces(SERVICE, operation)
            for s in t["spans"]
            if s["operationName"] == operation and _tags(s).get("k8s.pod.name") == "traced-fpga"
        ]
        return spans

    for verb in ("filter", "bind"):
        wait_until(f"Jaeger returns the {verb} span of the pod", lambda v=verb: spans_of(v), timeout=30)
    bind = spans_of("bind")[-1]
    assert _tags(bind)["dra_extender.node"] == bound
    assert _tags(bind).get("span.kind") == "server"


def test_metrics_are_prometheus_text(plane: ControlPlane, pods: list[dict[str, Any]]) -> None:
    plane.use("allocator")
    pod = objects.pod("metered-fpga", "ml-serving", ALLOCATOR_SCHEDULER, {"fpga": "fpga-serving-template"})
    pods.extend(objects.create_pods(plane.kube, [pod]))
    wait_until(
        "the pod bound",
        lambda: objects.get(plane.kube, "Pod", "metered-fpga", "ml-serving")["spec"].get("nodeName"),
        timeout=90,
    )
    response = plane.extender_get("/metrics")
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    for name in (
        "dra_extender_requests",
        "dra_extender_request_duration_seconds",
        "dra_extender_watch_relists",
    ):
        assert name in families, f"{name} missing from /metrics"
    served = {s.labels.get("verb") for s in families["dra_extender_requests"].samples if s.value > 0}
    assert {"filter", "bind"} <= served, f"the scheduler's calls are not counted: {served}"
