"""Render deploy/helm/dra-topology-extender with the real `helm` (v3.22.0, built by tests.gobuild),
for the chart's tests here and the end-to-end one (tests/e2e/test_helm.py)."""

from __future__ import annotations

import functools
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from extender.objects import Obj
from tests import gobuild

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "dra-topology-extender"
RELEASE = "dra-topology-extender"
NAMESPACE = "dra-system"
#: The labels Helm's conventions add to every object's metadata (not to selectors or pod templates).
HELM_LABELS = frozenset(
    {
        "helm.sh/chart",
        "app.kubernetes.io/managed-by",
        "app.kubernetes.io/instance",
        "app.kubernetes.io/version",
    }
)


def helm() -> Path:
    return gobuild.binaries("helm")["helm"]


def kustomize() -> Path:
    return gobuild.binaries("kustomize")["kustomize"]


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str


def run_helm(*args: str, chart: Path = CHART) -> Run:
    """`helm ARGS... CHART`; stderr without Helm's note on each linked file (files/ holds links)."""
    out = subprocess.run(
        [str(helm()), *args, str(chart)], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    stderr = "\n".join(
        line for line in out.stderr.splitlines() if "found symbolic link in path" not in line
    ).strip()
    return Run(out.returncode, out.stdout, stderr)


def _set_args(values: dict[str, str]) -> list[str]:
    # --set-string would make `replicas=1` a string; --set parses numbers and booleans, as a
    # person typing the command gets them.
    return [arg for key, value in values.items() for arg in ("--set", f"{key}={value}")]


@functools.lru_cache(maxsize=64)
def _render(settings: tuple[tuple[str, str], ...], namespace: str) -> tuple[Obj, ...]:
    out = run_helm("template", RELEASE, "--namespace", namespace, *_set_args(dict(settings)))
    if out.returncode != 0:
        raise AssertionError(f"helm template {dict(settings)} failed:\n{out.stderr}")
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


def render(namespace: str = NAMESPACE, **values: str) -> list[Obj]:
    """The chart's objects for `--set key=value` (keys with dots: pass a dict with **)."""
    # A deep copy per call: tests may change what they get.
    return yaml.safe_load(yaml.safe_dump(list(_render(tuple(sorted(values.items())), namespace))))


def render_error(**values: str) -> str:
    """helm template's error for values that must be refused (fails if it renders)."""
    out = run_helm("template", RELEASE, "--namespace", NAMESPACE, *_set_args(values))
    assert out.returncode != 0, f"helm template {values} rendered instead of refusing:\n{out.stdout[:2000]}"
    return out.stderr


def one(objects: list[Obj], kind: str, name: str) -> Obj:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def scheduler_config(objects: list[Obj]) -> Obj:
    """The KubeSchedulerConfiguration in the scheduler's ConfigMap."""
    configmap = one(objects, "ConfigMap", "dra-topology-scheduler-config")
    config: Obj = yaml.safe_load(configmap["data"]["config.yaml"])
    return config
