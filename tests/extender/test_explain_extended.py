"""`dra-extender explain` of a pod asking for an extended resource backed by DRA (KEP-5004).

Scope: on the sample cluster (DeviceClass h100.nvidia.com maps `example.com/gpu`;
`l40s-node-01` advertises `example.com/gpu: 4` through a device plugin) explain shows the claim
the scheduler generates, its requests and container mappings, the devices bind would take, and
that device-plugin nodes are left to NodeResourcesFit; its verdicts, priorities and devices are
those /filter, /prioritize and bind's choice give on a placement of their own. A resource no
class maps, a bad quantity and the gate turned off are explained as filter decides them.
"""

from __future__ import annotations

import copy
import itertools
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.__main__ import main
from extender.allocator.features import Features
from extender.cluster.sample import sample_objects
from extender.cluster.state import ClusterState
from extender.core import binding
from extender.core.placement import Placement
from extender.explaining import Explanation, explain
from extender.pods import parse_pod
from extender.settings import Settings
from extender.wiring import build_services
from kernels import warming


@pytest.fixture(autouse=True)
def _no_warm_up_running() -> None:
    """Earlier tests of the session may leave a background kernel warm-up running (their services
    start one); these tests compare exact reports, so each starts once it has ended."""
    assert warming.wait(timeout=600), "a background kernel warm-up did not end"


GPU = "example.com/gpu"
CLAIM = "default/<extended-resources>"


def _gpu_pod(resources: dict[str, Any], name: str = "gpu-job") -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"{name}-uid"},
        "spec": {"containers": [{"name": "main", "image": "busybox", "resources": {"limits": resources}}]},
    }


def _placement() -> Placement:
    state = ClusterState.from_objects(copy.deepcopy(sample_objects()))
    return build_services(Settings(), state)[0]


def _nodes(report: str) -> dict[str, dict[str, Any]]:
    """node -> {"status", "reason", "priority", "devices": {claim: [device ids]}, "notes": [...]}."""
    out: dict[str, dict[str, Any]] = {}
    node: dict[str, Any] | None = None
    for line in report.splitlines():
        if line.startswith("  ") and not line.startswith("    ") and ": " in line:
            name, _, rest = line.strip().partition(": ")
            status, _, reason = rest.partition(": ")
            if status in ("PASSED", "FAILED", "UNRESOLVABLE"):
                node = out[name] = {
                    "status": status,
                    "reason": reason,
                    "priority": None,
                    "devices": {},
                    "notes": [],
                }
                continue
            node = None
        elif node is not None and line.startswith("      "):
            text = line.strip()
            priority = re.search(r"priority (\d+)/10", text)
            if priority:
                node["priority"] = int(priority.group(1))
            if text.startswith(CLAIM + ": "):
                node["devices"][CLAIM] = [part.split("=")[1] for part in text[len(CLAIM) + 2 :].split(", ")]
            else:
                node["notes"].append(text)
    return out


def test_the_generated_claim_and_device_plugin_nodes_are_shown() -> None:
    placement = _placement()
    report = explain(placement.state, _gpu_pod({GPU: "2"}), features=placement.features)
    lines = report.splitlines()
    assert f"  extended resources: {GPU}: 2 (DeviceClass h100.nvidia.com)" in lines
    assert (
        f"  on 17 node(s) DRA serves {GPU}: claim {CLAIM}, request container-0-request-0: 2 of class "
        f"h100.nvidia.com; bind creates it as gpu-job-extended-resources-<random> "
        f"(containers: main {GPU} -> container-0-request-0)"
    ) in lines
    assert (
        f"  on 1 node(s) a device plugin advertises {GPU}: no claim, "
        "left to kube-scheduler's NodeResourcesFit"
    ) in lines
    assert "uses no ResourceClaims" not in report
    nodes = _nodes(report)
    assert nodes["l40s-node-01"]["status"] == "PASSED"
    assert nodes["l40s-node-01"]["notes"] == [
        f"{GPU}: the node's device plugin (status.allocatable); left to kube-scheduler's "
        "NodeResourcesFit; priority 0/10"
    ]
    assert nodes["l40s-node-01"]["devices"] == {}
    assert nodes["cpu-node-01"] == {
        "status": "UNRESOLVABLE",
        "reason": f"cannot allocate all claims: claim {CLAIM}, request container-0-request-0: 2 device(s) "
        "of class h100.nvidia.com do not exist on the node",
        "priority": None,
        "devices": {},
        "notes": [],
    }
    for name in ("h100-node-01", "h100-node-02"):
        assert nodes[name]["status"] == "PASSED"
        devices = nodes[name]["devices"][CLAIM]
        assert len(devices) == 2 and all(d.startswith(f"gpu.nvidia.com/{name}/") for d in devices)


@pytest.mark.parametrize(
    "resources",
    [{GPU: "2"}, {GPU: "1"}, {GPU: "4"}, {GPU: "2", "cpu": "1"}],
    ids=["two", "one", "four", "with-cpu"],
)
def test_explain_agrees_with_filter_prioritize_and_bind(resources: dict[str, Any]) -> None:
    """Verdicts and reasons are /filter's, priorities /prioritize's over the nodes that passed, and
    the devices bind's choice, each on a placement of its own."""
    pod_obj = _gpu_pod(resources)
    explained = _placement()
    nodes = _nodes(explain(explained.state, pod_obj, features=explained.features))
    verbs = _placement()
    pod = parse_pod(pod_obj)
    names = list(verbs.index().node_names)
    verdict = verbs.filter(pod, names)
    assert verdict.error == ""
    assert list(nodes) == names
    assert [n for n in names if nodes[n]["status"] == "PASSED"] == verdict.passed
    assert {n: nodes[n]["reason"] for n in names if nodes[n]["status"] == "FAILED"} == verdict.failed
    assert {
        n: nodes[n]["reason"] for n in names if nodes[n]["status"] == "UNRESOLVABLE"
    } == verdict.unresolvable
    priorities = {h.host: h.score for h in verbs.prioritize(pod, verdict.passed)}
    assert {n: nodes[n]["priority"] for n in verdict.passed} == priorities
    assert max(priorities.values()) == 10  # the H100 nodes are ranked among themselves
    for name in verdict.passed:
        choice = binding.choose_for_bind(verbs, pod, name, wording=binding.IN_MEMORY)
        chosen = [str(r.device.id) for a in choice.allocations for r in a.devices]
        assert nodes[name]["devices"].get(CLAIM, []) == chosen
        assert (choice.extended is None) == (name == "l40s-node-01")


def test_many_small_steps_give_the_report_of_one_go() -> None:
    placement = _placement()
    pod = _gpu_pod({GPU: "2"})
    explanation = Explanation(placement, pod)
    steps = next(n for n in itertools.count(1) if explanation.step(0.0))
    assert steps > 3
    assert explanation.report == explain(placement.state, pod, features=placement.features)


def test_a_resource_no_class_maps_fails_the_nodes_that_do_not_advertise_it() -> None:
    placement = _placement()
    report = explain(
        placement.state, _gpu_pod({GPU: "1", "example.com/fpga": "1"}), features=placement.features
    )
    assert (
        "  extended resources: example.com/fpga: 1 (no DeviceClass maps it), "
        f"{GPU}: 1 (DeviceClass h100.nvidia.com)"
    ) in report
    nodes = _nodes(report)
    assert {n["status"] for n in nodes.values()} == {"FAILED"}
    assert nodes["h100-node-01"]["reason"] == (
        "cannot fit resource example.com/fpga: the node does not advertise it in status.allocatable "
        "and no DeviceClass maps it"
    )
    assert "0 of 18 node(s) pass" in report


def test_a_bad_quantity_makes_every_node_unresolvable_with_the_field_named() -> None:
    placement = _placement()
    nodes = _nodes(explain(placement.state, _gpu_pod({GPU: "1.5"}), features=placement.features))
    assert {n["status"] for n in nodes.values()} == {"UNRESOLVABLE"}
    assert nodes["h100-node-01"]["reason"].startswith(
        f'pod default/gpu-job: containers[main].resources.requests["{GPU}"]: must be a whole number'
    )


def test_with_the_gate_off_the_pod_is_not_the_extenders() -> None:
    placement = _placement()
    features = Features.from_gates({"DRAExtendedResource": False})
    report = explain(placement.state, _gpu_pod({GPU: "2"}), features=features)
    assert "uses no ResourceClaims: every node passes" in report and "extended resources" not in report
    assert "18 of 18 node(s) pass" in report


def test_the_cli_prints_it(tmp_path, capsys) -> None:
    pod_file = tmp_path / "pod.yaml"
    pod_file.write_text(
        "kind: Pod\nmetadata: {name: gpu-job, namespace: default, uid: u1}\n"
        f"spec:\n  containers: [{{name: main, resources: {{limits: {{{GPU}: 2}}}}}}]\n"
    )
    assert main(["explain", "--pod", str(pod_file), "--node", "h100-node-02", "--node", "l40s-node-01"]) == 0
    out = capsys.readouterr().out
    assert f"on 1 node(s) DRA serves {GPU}: claim {CLAIM}" in out
    assert "on 1 node(s) a device plugin advertises" in out
    assert f"      {CLAIM}: container-0-request-0=gpu.nvidia.com/h100-node-02/" in out
    assert "2 of 2 node(s) pass" in out


def test_the_readme_example_is_what_explain_prints(tmp_path, capsys) -> None:
    """README "Extended resources": the explain example is the CLI's output, line for line."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    command = "$ dra-extender explain --pod gpu-job.yaml"
    block = readme[readme.index(command) :].split("```", 1)[0].strip().splitlines()
    nodes = block[0].split()[6::2]  # the --node values
    pod_file = tmp_path / "gpu-job.yaml"
    pod_file.write_text(yaml.safe_dump(_gpu_pod({GPU: "2"})))
    assert main(["explain", "--pod", str(pod_file), *(f"--node={n}" for n in nodes)]) == 0
    assert capsys.readouterr().out.strip().splitlines() == block[1:]
