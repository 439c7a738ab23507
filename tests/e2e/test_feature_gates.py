"""The extender's default DRA gates are the ones the real kube-scheduler runs with (issue 30 finding 5).

kube_features.go alone does not say what a binary runs with: a gate may have several entries for
one version, chosen by the emulated and the minimum compatibility version (in v1.37.2,
DRAFractionalCapacityRange is on only "if --min-compatibility-version>=1.37", and a default
kube-scheduler's minimum compatibility version is 1.36). So this asks the real program: its
`kubernetes_feature_enabled{name,stage}` metric, for the version the control plane runs
(`DRA_E2E_KUBERNETES`), against `VERSION_GATE_DEFAULTS` and against the features the running
extender logged at start-up (the shipped settings set no gate).
"""

from __future__ import annotations

import contextlib
import json
import re

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from extender.allocator.features import VERSION_GATE_DEFAULTS, Features
from tests.e2e.cluster import ControlPlane

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning"),
]

#: The extender's start-up line (`extender.__main__._log_version`).
_FEATURES_LINE = re.compile(r"Kubernetes (\S+) allocator semantics, from [^;]*; features: (.*)")


def scheduler_feature_gates(plane: ControlPlane) -> dict[str, bool]:
    """Every gate the running kube-scheduler reports in `kubernetes_feature_enabled`."""
    argv = plane.processes["kube-scheduler"].popen.args
    assert isinstance(argv, list)
    port = next(str(a).split("=", 1)[1] for a in argv if str(a).startswith("--secure-port="))
    # The admin client certificate (system:masters): kube-scheduler authenticates it by the API
    # server's client CA and authorizes /metrics by a SubjectAccessReview. Its serving
    # certificate is self-signed, hence no verification.
    response = requests.get(
        f"https://127.0.0.1:{port}/metrics", cert=plane.kube.session.cert, verify=False, timeout=10
    )
    assert response.status_code == 200, response.text[:500]
    gates: dict[str, bool] = {}
    for family in text_string_to_metric_families(response.text):
        if family.name == "kubernetes_feature_enabled":
            for sample in family.samples:
                gates[sample.labels["name"]] = sample.value == 1
    assert gates, "kube-scheduler reports no kubernetes_feature_enabled samples"
    return gates


def test_default_dra_gates_are_the_real_schedulers(plane: ControlPlane) -> None:
    plane.use("allocator")
    real = scheduler_feature_gates(plane)
    ours = VERSION_GATE_DEFAULTS[plane.version]
    assert sorted(set(ours) - set(real)) == [], f"gates kube-scheduler {plane.version} does not have"
    differ = {
        name: {"extender": on, "kube-scheduler": real[name]} for name, on in ours.items() if real[name] != on
    }
    assert differ == {}, f"default gates differ from kube-scheduler {plane.version}'s"
    # A gate another version models is one this version must not have (or it would be modelled).
    modelled = set().union(*VERSION_GATE_DEFAULTS.values())
    assert sorted((modelled - set(ours)) & set(real)) == []


def test_the_running_extender_uses_those_defaults(plane: ControlPlane) -> None:
    plane.use("allocator")
    messages = []  # the shipped settings log JSON lines (other output, e.g. warnings, is not)
    for line in (plane.work / "extender.log").read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if isinstance(entry, dict):
                messages.append(str(entry.get("msg", "")))
    logged = [m.groups() for m in map(_FEATURES_LINE.fullmatch, messages) if m]
    assert logged, "the extender logged no features line"
    version, features = logged[-1]
    assert version == plane.version
    assert features.strip() == Features.from_gates(version=plane.version).describe()
