"""kwok in the end-to-end control plane: the fake nodes' kubelet, as far as the API can tell.

kwok v0.8.0 (`python -m tests.gobuild kwok`) watches the Nodes and the pods bound to them and
plays their life through the API: it keeps each Node Ready (status heartbeats and its Lease in
`kube-node-lease`, renewed every 10 s), moves a bound pod to Running with its containers
started, to Succeeded after the delay its `pod-complete.stage.kwok.x-k8s.io/delay` annotation
names (`run_for`), and removes a pod once it is being deleted (what a kubelet confirms). Once a
pod has finished, the real resourceclaim controller releases its claims exactly as in a cluster with kubelets.

The stages are upstream's own, read from kwok's module in the Go module cache (the build fetched
it; `go mod download` fetches it again if the cache was cleaned), with two changes:
- node-initialize selects Nodes whose `status.phase` is not Running (upstream: not Ready). The
  harness publishes Nodes Ready, as a kubelet would have left them, but without a phase; kwok
  then takes each over (phase Running, its own conditions, allocatable kept) and heartbeats it,
  which upstream's heartbeat stage does only for Nodes in phase Running.
- pod-complete selects running pods that carry the delay annotation, whoever owns them (upstream:
  Job pods only), and waits that delay (upstream's fast stage: none). A pod without the
  annotation runs until it is deleted, like the fleet's long-running holders.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from tests import gobuild

Obj = dict[str, Any]

#: kwok's own annotation: how long a running pod runs before kwok marks it Succeeded ("30s").
RUN_FOR = "pod-complete.stage.kwok.x-k8s.io/delay"
#: The stages taken from kwok's module, by file under `kustomize/stage/`.
_STAGES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)


def run_for(seconds: float) -> dict[str, str]:
    """The annotation that makes kwok complete a running pod `seconds` after it started."""
    return {RUN_FOR: f"{round(seconds * 1000)}ms"}


@cache
def module_dir() -> Path:
    """kwok's module source at the pinned version."""
    return gobuild.module_source("kwok", "sigs.k8s.io/kwok")


def stages() -> list[Obj]:
    """The Stage objects kwok runs here: upstream's, with the changes of the module docstring."""
    root = module_dir() / "kustomize" / "stage"
    out = []
    for relative in _STAGES:
        stage = yaml.safe_load((root / relative).read_text())
        name = stage["metadata"]["name"]
        if name == "node-initialize":
            stage["spec"]["selector"]["matchExpressions"] = [
                {"key": ".status.phase", "operator": "NotIn", "values": ["Running"]}
            ]
        elif name == "pod-complete":
            stage["spec"] = _complete_after_delay(stage["spec"])
        out.append(stage)
    return out


def _complete_after_delay(spec: Obj) -> Obj:
    spec = copy.deepcopy(spec)
    expressions = [e for e in spec["selector"]["matchExpressions"] if "ownerReferences" not in e["key"]]
    expressions.append({"key": f'.metadata.annotations["{RUN_FOR}"]', "operator": "Exists"})
    spec["selector"]["matchExpressions"] = expressions
    delay = {"jq": {"expression": f'.metadata.annotations["{RUN_FOR}"]'}}
    spec["delay"] = {"durationMilliseconds": 0, "durationFrom": delay}
    return spec


def write_config(path: Path) -> Path:
    """kwok's configuration file (`--config`): the stages only. A KwokConfiguration document
    would replace kwok's defaulted options, zeros included (kwok v0.8.0 then refuses to start:
    "playStageParallelism must be greater than 0"); its defaults suit here, and the node Lease
    duration is a flag (`ControlPlane.start_kwok`)."""
    path.write_text(yaml.safe_dump_all(stages(), sort_keys=False))
    return path
