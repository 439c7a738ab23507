"""Structural tests of the embedded sample cluster and the seed pipeline pods.

Scope: shape and referential integrity only — every object is a well-formed resource.k8s.io/v1 or v1
object, names are valid, slices/pools/devices/counter sets are consistent, allocations name existing
devices on the node they are pinned to, reservations and pod claims resolve, and the topology facts
that tests/data/README.md relies on hold. Whether the allocator places pods as the README says is
tested elsewhere (this file evaluates no CEL and runs no allocation).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.cluster.sample import SAMPLE_PATH, sample_objects, sample_text
from extender.objects import Obj

DATA = Path(__file__).resolve().parents[1] / "data"
PIPELINE_PATH = DATA / "pipeline_pods.yaml"
README_PATH = DATA / "README.md"
EXPECTED_NODES_ANNOTATION = "test.dra-extender.io/expected-nodes"
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
SCHEDULER_NAME = "dra-extender-scheduler"

API_VERSIONS = {
    "Node": "v1",
    "Pod": "v1",
    "Namespace": "v1",
    "DeviceClass": "resource.k8s.io/v1",
    "ResourceSlice": "resource.k8s.io/v1",
    "ResourceClaim": "resource.k8s.io/v1",
    "ResourceClaimTemplate": "resource.k8s.io/v1",
    "DeviceTaintRule": "resource.k8s.io/v1",
}
CLUSTER_SCOPED = {"Node", "Namespace", "DeviceClass", "ResourceSlice", "DeviceTaintRule"}
ATTRIBUTE_TYPES = {"int", "bool", "string", "version"}

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")
QUANTITY = re.compile(r"^([0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
MULTIPLIERS = {
    None: 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}

DeviceId = tuple[str, str, str]  # (driver, pool, device)


# --------------------------------------------------------------------------- helpers


def is_dns_subdomain(name: str) -> bool:
    return len(name) <= 253 and bool(DNS_SUBDOMAIN.match(name))


def is_qualified_name(name: str) -> bool:
    """resource.k8s.io QualifiedName: C identifier, optionally prefixed by `<DNS subdomain>/`."""
    domain, _, ident = name.rpartition("/")
    if domain and (len(domain) > 63 or not is_dns_subdomain(domain)):
        return False
    return bool(C_IDENTIFIER.match(ident))


def fully_qualified(driver: str, name: str) -> str:
    return name if "/" in name else f"{driver}/{name}"


def quantity(text: str) -> int:
    match = QUANTITY.match(str(text))
    assert match, f"unsupported quantity {text!r}"
    return int(match.group(1)) * MULTIPLIERS[match.group(2)]


def node_of(selector: Obj) -> str:
    """Node name of an allocation nodeSelector pinned with matchFields metadata.name In [node]."""
    (term,) = selector["nodeSelectorTerms"]
    (field,) = term["matchFields"]
    assert (field["key"], field["operator"]) == ("metadata.name", "In")
    (name,) = field["values"]
    return name


def requests_of(claim_spec: Obj) -> list[Obj]:
    return claim_spec["devices"]["requests"]


def class_names(claim_spec: Obj) -> list[str]:
    names = []
    for request in requests_of(claim_spec):
        if "exactly" in request:
            names.append(request["exactly"]["deviceClassName"])
        names.extend(sub["deviceClassName"] for sub in request.get("firstAvailable", []))
    return names


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def objects() -> list[Obj]:
    return sample_objects()


@pytest.fixture(scope="module")
def by_kind(objects: list[Obj]) -> dict[str, list[Obj]]:
    grouped: dict[str, list[Obj]] = defaultdict(list)
    for obj in objects:
        grouped[obj["kind"]].append(obj)
    return grouped


@pytest.fixture(scope="module")
def pipeline_pods() -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(PIPELINE_PATH.read_text(encoding="utf-8")) if doc]


@pytest.fixture(scope="module")
def nodes(by_kind: dict[str, list[Obj]]) -> dict[str, Obj]:
    return {node["metadata"]["name"]: node for node in by_kind["Node"]}


@pytest.fixture(scope="module")
def pools(by_kind: dict[str, list[Obj]]) -> dict[tuple[str, str], list[Obj]]:
    """Slices by (driver, pool name)."""
    grouped: dict[tuple[str, str], list[Obj]] = defaultdict(list)
    for sl in by_kind["ResourceSlice"]:
        grouped[sl["spec"]["driver"], sl["spec"]["pool"]["name"]].append(sl)
    return grouped


@pytest.fixture(scope="module")
def devices(pools: dict[tuple[str, str], list[Obj]]) -> dict[DeviceId, Obj]:
    found: dict[DeviceId, Obj] = {}
    for (driver, pool), slices in pools.items():
        for sl in slices:
            for device in sl["spec"].get("devices", []):
                found[driver, pool, device["name"]] = device
    return found


@pytest.fixture(scope="module")
def counter_sets(pools: dict[tuple[str, str], list[Obj]]) -> dict[tuple[str, str, str], Obj]:
    """Counter sets by (driver, pool, set name)."""
    found = {}
    for (driver, pool), slices in pools.items():
        for sl in slices:
            for counter_set in sl["spec"].get("sharedCounters", []):
                found[driver, pool, counter_set["name"]] = counter_set
    return found


@pytest.fixture(scope="module")
def claims(by_kind: dict[str, list[Obj]]) -> dict[tuple[str, str], Obj]:
    return {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in by_kind["ResourceClaim"]}


@pytest.fixture(scope="module")
def templates(by_kind: dict[str, list[Obj]]) -> dict[tuple[str, str], Obj]:
    return {(t["metadata"]["namespace"], t["metadata"]["name"]): t for t in by_kind["ResourceClaimTemplate"]}


@pytest.fixture(scope="module")
def sample_pods(by_kind: dict[str, list[Obj]]) -> dict[tuple[str, str], Obj]:
    return {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in by_kind["Pod"]}


# --------------------------------------------------------------------------- module / documents


def test_sample_module_reads_package_data() -> None:
    assert SAMPLE_PATH.name == "sample_cluster.yaml"
    assert SAMPLE_PATH.parent.name == "cluster" and SAMPLE_PATH.parent.parent.name == "extender"
    assert sample_text() == SAMPLE_PATH.read_text(encoding="utf-8")
    first, second = sample_objects(), sample_objects()
    assert first == second and first is not second and first[0] is not second[0]
    assert all(isinstance(obj, dict) for obj in first)


def test_documents_have_identity(objects: list[Obj], pipeline_pods: list[Obj]) -> None:
    for obj in [*objects, *pipeline_pods]:
        kind = obj.get("kind")
        assert kind in API_VERSIONS, f"unknown kind {kind!r}"
        assert obj.get("apiVersion") == API_VERSIONS[kind], obj.get("metadata")
        meta = obj.get("metadata") or {}
        assert meta.get("name"), f"{kind} without metadata.name"
        assert is_dns_subdomain(meta["name"]), f"{kind} {meta['name']!r} is not a DNS subdomain"
        if kind in {"Node", "Namespace", "Pod"}:
            assert DNS_LABEL.match(meta["name"]), f"{kind} {meta['name']!r} is not a DNS label"
        assert meta.get("uid"), f"{kind} {meta['name']} without uid"
        if kind in CLUSTER_SCOPED:
            assert "namespace" not in meta, f"cluster-scoped {kind} {meta['name']} has a namespace"
        else:
            assert meta.get("namespace"), f"namespaced {kind} {meta['name']} has no namespace"


def test_object_keys_and_uids_are_unique(objects: list[Obj], pipeline_pods: list[Obj]) -> None:
    everything = [*objects, *pipeline_pods]
    keys = Counter((o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in everything)
    assert [k for k, n in keys.items() if n > 1] == []
    uids = Counter(o["metadata"]["uid"] for o in everything)
    assert [u for u, n in uids.items() if n > 1] == []


def test_namespaces_exist(by_kind: dict[str, list[Obj]], pipeline_pods: list[Obj]) -> None:
    namespaces = {ns["metadata"]["name"] for ns in by_kind["Namespace"]}
    assert {"default", "ml-training", "ml-serving"} <= namespaces
    for obj in [
        *by_kind["ResourceClaim"],
        *by_kind["ResourceClaimTemplate"],
        *by_kind["Pod"],
        *pipeline_pods,
    ]:
        assert obj["metadata"]["namespace"] in namespaces, obj["metadata"]


def test_pipeline_pods_are_not_in_the_sample(sample_pods: dict, pipeline_pods: list[Obj]) -> None:
    for pod in pipeline_pods:
        assert (pod["metadata"]["namespace"], pod["metadata"]["name"]) not in sample_pods


# --------------------------------------------------------------------------- slices and devices


def test_slices_reference_existing_nodes(by_kind: dict[str, list[Obj]], nodes: dict[str, Obj]) -> None:
    assert by_kind["ResourceSlice"]
    for sl in by_kind["ResourceSlice"]:
        spec = sl["spec"]
        name = sl["metadata"]["name"]
        assert spec["nodeName"] in nodes, f"slice {name}: unknown node {spec['nodeName']}"
        assert spec["pool"]["name"] == spec["nodeName"], f"slice {name}: pool is not named after its node"
        assert not {"nodeSelector", "allNodes", "perDeviceNodeSelection"} & spec.keys()
        assert is_dns_subdomain(spec["driver"]) and len(spec["driver"]) <= 63
        assert ("devices" in spec) != ("sharedCounters" in spec), f"slice {name}: devices xor sharedCounters"
        for ref in sl["metadata"].get("ownerReferences", []):
            assert ref["kind"] == "Node" and ref["name"] == spec["nodeName"]
            assert ref["uid"] == nodes[ref["name"]]["metadata"]["uid"]


def test_pools_are_complete(pools: dict[tuple[str, str], list[Obj]]) -> None:
    for (driver, pool), slices in pools.items():
        generations = {sl["spec"]["pool"]["generation"] for sl in slices}
        counts = {sl["spec"]["pool"]["resourceSliceCount"] for sl in slices}
        assert generations == {1}, (driver, pool)
        assert counts == {len(slices)}, f"pool {driver}/{pool}: resourceSliceCount != slices present"
        assert len({sl["spec"]["nodeName"] for sl in slices}) == 1


def test_device_names_unique_per_pool(pools: dict[tuple[str, str], list[Obj]]) -> None:
    for (driver, pool), slices in pools.items():
        names = [d["name"] for sl in slices for d in sl["spec"].get("devices", [])]
        duplicates = [n for n, k in Counter(names).items() if k > 1]
        assert duplicates == [], f"pool {driver}/{pool}: duplicate devices {duplicates}"
        for name in names:
            assert DNS_LABEL.match(name), f"pool {driver}/{pool}: device name {name!r} is not a DNS label"


def test_device_attributes_and_capacity_are_well_formed(by_kind: dict[str, list[Obj]]) -> None:
    for sl in by_kind["ResourceSlice"]:
        advanced = any("consumesCounters" in d or "taints" in d for d in sl["spec"].get("devices", []))
        assert len(sl["spec"].get("devices", [])) <= (64 if advanced else 128)
        for device in sl["spec"].get("devices", []):
            where = f"{sl['spec']['driver']}/{sl['spec']['pool']['name']}/{device['name']}"
            attributes = device.get("attributes", {})
            capacity = device.get("capacity", {})
            assert len(attributes) + len(capacity) <= 32, where
            for name, value in attributes.items():
                assert is_qualified_name(name), f"{where}: attribute name {name!r}"
                assert len(value) == 1 and next(iter(value)) in ATTRIBUTE_TYPES, f"{where}: {name}={value}"
                ((kind, raw),) = value.items()
                expected_type = {"int": int, "bool": bool, "string": str, "version": str}[kind]
                assert type(raw) is expected_type, f"{where}: {name} is not a {kind}"
                if kind in {"string", "version"}:
                    assert len(raw) <= 64, f"{where}: {name} longer than 64"
                if kind == "version":
                    assert SEMVER.match(raw), f"{where}: {name}={raw!r} is not semver"
            for name, value in capacity.items():
                assert is_qualified_name(name), f"{where}: capacity name {name!r}"
                assert set(value) == {"value"} and quantity(value["value"]) > 0, f"{where}: {name}"


def test_counter_sets_and_consumption(
    pools: dict[tuple[str, str], list[Obj]], counter_sets: dict[tuple[str, str, str], Obj]
) -> None:
    for (driver, pool), slices in pools.items():
        set_names = [cs["name"] for sl in slices for cs in sl["spec"].get("sharedCounters", [])]
        assert len(set_names) == len(set(set_names)), f"pool {driver}/{pool}: duplicate counter sets"
        for sl in slices:
            assert len(sl["spec"].get("sharedCounters", [])) <= 8
            for device in sl["spec"].get("devices", []):
                consumptions = device.get("consumesCounters", [])
                assert len(consumptions) <= 2
                assert len({c["counterSet"] for c in consumptions}) == len(consumptions)
                for consumption in consumptions:
                    key = (driver, pool, consumption["counterSet"])
                    assert key in counter_sets, f"{device['name']}: unknown counter set {key}"
                    available = counter_sets[key]["counters"]
                    for counter, amount in consumption["counters"].items():
                        assert counter in available, f"{device['name']}: unknown counter {counter}"
                        assert quantity(amount["value"]) <= quantity(available[counter]["value"])
    for (_driver, _pool, name), counter_set in counter_sets.items():
        assert DNS_LABEL.match(name), f"counter set {name!r} is not a DNS label"
        assert 0 < len(counter_set["counters"]) <= 32


# --------------------------------------------------------------------------- classes, templates, claims


def test_device_classes_select_by_driver(by_kind: dict[str, list[Obj]], pools: dict) -> None:
    drivers = {driver for driver, _pool in pools}
    expected = {
        "gpu.nvidia.com",
        "h100.nvidia.com",
        "mig.nvidia.com",
        "gpu.amd.com",
        "tpu.google.com",
        "gaudi.intel.com",
        "neuron.amazonaws.com",
        "fpga.intel.com",
        "rdma.dra.net",
        "nic.dra.net",
    }
    assert expected <= {c["metadata"]["name"] for c in by_kind["DeviceClass"]}
    for device_class in by_kind["DeviceClass"]:
        selectors = device_class["spec"]["selectors"]
        assert all(set(s) == {"cel"} and s["cel"]["expression"] for s in selectors)
        match = re.fullmatch(r'device\.driver == "([^"]+)"', selectors[0]["cel"]["expression"])
        assert match, f"class {device_class['metadata']['name']}: first selector must check the driver"
        assert match.group(1) in drivers


def _check_claim_spec(spec: Obj, classes: set[str], where: str) -> None:
    requests = requests_of(spec)
    names = [r["name"] for r in requests]
    assert len(names) == len(set(names)) and all(DNS_LABEL.match(n) for n in names), where
    for request in requests:
        assert ("exactly" in request) != ("firstAvailable" in request), f"{where}: {request['name']}"
        subs = request.get("firstAvailable", [])
        assert len(subs) <= 8
        assert len({s["name"] for s in subs}) == len(subs)
    for class_name in class_names(spec):
        assert class_name in classes, f"{where}: unknown DeviceClass {class_name}"
    for constraint in spec["devices"].get("constraints", []):
        for name in constraint.get("requests", []):
            assert name.split("/")[0] in names, f"{where}: constraint names unknown request {name}"
        attribute = constraint.get("matchAttribute") or constraint.get("distinctAttribute")
        assert attribute and "/" in attribute and is_qualified_name(attribute), where


def test_templates_and_claims_reference_existing_classes(
    by_kind: dict[str, list[Obj]], templates: dict, claims: dict
) -> None:
    classes = {c["metadata"]["name"] for c in by_kind["DeviceClass"]}
    for (ns, name), template in templates.items():
        _check_claim_spec(template["spec"]["spec"], classes, f"template {ns}/{name}")
    for (ns, name), claim in claims.items():
        _check_claim_spec(claim["spec"], classes, f"claim {ns}/{name}")
    expected = {
        "gpu-training-template",
        "tpu-inference-template",
        "fpga-serving-template",
        "flexible-accelerator",
        "gaudi-training-template",
        "inferentia-template",
        "amd-mi300-template",
        "mig-1g-template",
    }
    assert expected <= {name for _ns, name in templates}


def test_constraint_attributes_are_published(templates: dict, devices: dict[DeviceId, Obj]) -> None:
    published = {
        fully_qualified(driver, attr)
        for (driver, _pool, _name), dev in devices.items()
        for attr in dev["attributes"]
    }
    for (ns, name), template in templates.items():
        for constraint in template["spec"]["spec"]["devices"].get("constraints", []):
            assert constraint["matchAttribute"] in published, f"template {ns}/{name}: {constraint}"


def test_allocations_name_existing_devices(
    claims: dict, devices: dict[DeviceId, Obj], pools: dict, counter_sets: dict
) -> None:
    allocated: list[DeviceId] = []
    for (ns, name), claim in claims.items():
        allocation = (claim.get("status") or {}).get("allocation")
        if not allocation:
            assert not (claim.get("status") or {}).get("reservedFor"), f"{ns}/{name}: reserved, not allocated"
            continue
        assert "resource.kubernetes.io/delete-protection" in claim["metadata"].get("finalizers", [])
        node = node_of(allocation["nodeSelector"])
        request_names = {r["name"] for r in requests_of(claim["spec"])}
        for result in allocation["devices"]["results"]:
            device_id = (result["driver"], result["pool"], result["device"])
            assert device_id in devices, f"{ns}/{name}: allocated device {device_id} does not exist"
            assert result["request"].split("/")[0] in request_names
            assert pools[result["driver"], result["pool"]][0]["spec"]["nodeName"] == node
            allocated.append(device_id)
    assert allocated, "the sample should contain allocated claims"
    assert [d for d, n in Counter(allocated).items() if n > 1] == [], "device allocated twice"
    consumed: Counter[tuple[str, str, str, str]] = Counter()
    for driver, pool, device in allocated:
        for consumption in devices[driver, pool, device].get("consumesCounters", []):
            for counter, amount in consumption["counters"].items():
                consumed[driver, pool, consumption["counterSet"], counter] += quantity(amount["value"])
    for (driver, pool, set_name, counter), amount in consumed.items():
        limit = counter_sets[driver, pool, set_name]["counters"][counter]["value"]
        assert amount <= quantity(limit), f"{driver}/{pool}/{set_name}/{counter} over-consumed"


def test_reserved_for_pods_exist(claims: dict, sample_pods: dict) -> None:
    reservations = 0
    for (ns, name), claim in claims.items():
        status = claim.get("status") or {}
        for consumer in status.get("reservedFor", []):
            reservations += 1
            assert consumer["resource"] == "pods" and "apiGroup" not in consumer
            pod = sample_pods.get((ns, consumer["name"]))
            assert pod is not None, f"{ns}/{name}: reserved for missing pod {consumer['name']}"
            assert pod["metadata"]["uid"] == consumer["uid"]
            assert pod["status"]["phase"] == "Running"
            assert pod["spec"]["nodeName"] == node_of(status["allocation"]["nodeSelector"])
            assert name in _claim_names_of(pod), f"pod {consumer['name']} does not use claim {name}"
    assert reservations >= 2


def _claim_names_of(pod: Obj) -> set[str]:
    """Claim names a pod uses: resourceClaimName entries plus generated names from its status."""
    statuses = {
        s["name"]: s.get("resourceClaimName") for s in pod.get("status", {}).get("resourceClaimStatuses", [])
    }
    names = set()
    for pod_claim in pod["spec"].get("resourceClaims", []):
        if "resourceClaimName" in pod_claim:
            names.add(pod_claim["resourceClaimName"])
        elif statuses.get(pod_claim["name"]):
            names.add(statuses[pod_claim["name"]])
    return names


def _check_pod_claims(pod: Obj, claims: dict, templates: dict) -> None:
    ns, pod_name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    pod_claims = pod["spec"].get("resourceClaims", [])
    assert pod_claims, f"pod {pod_name} has no resourceClaims"
    statuses = {s["name"]: s.get("resourceClaimName") for s in pod["status"].get("resourceClaimStatuses", [])}
    pod_claim_names = {pc["name"] for pc in pod_claims}
    for container in pod["spec"]["containers"]:
        for ref in container["resources"].get("claims", []):
            assert ref["name"] in pod_claim_names, f"pod {pod_name}: container claim {ref['name']} undefined"
    for pod_claim in pod_claims:
        has_template = "resourceClaimTemplateName" in pod_claim
        assert has_template != ("resourceClaimName" in pod_claim)
        if not has_template:
            assert (ns, pod_claim["resourceClaimName"]) in claims
            continue
        template = templates.get((ns, pod_claim["resourceClaimTemplateName"]))
        assert template is not None, (
            f"pod {pod_name}: unknown template {pod_claim['resourceClaimTemplateName']}"
        )
        claim_name = statuses.get(pod_claim["name"])
        assert claim_name, f"pod {pod_name}: no resourceClaimStatuses entry for {pod_claim['name']}"
        claim = claims.get((ns, claim_name))
        assert claim is not None, f"pod {pod_name}: generated claim {claim_name} missing"
        assert re.fullmatch(
            rf"{re.escape(pod_name)}-{re.escape(pod_claim['name'])}-[a-z0-9]{{5}}", claim_name
        )
        meta = claim["metadata"]
        assert meta["annotations"][POD_CLAIM_NAME_ANNOTATION] == pod_claim["name"]
        owners = [o for o in meta.get("ownerReferences", []) if o.get("controller")]
        assert len(owners) == 1
        owner = owners[0]
        assert (owner["apiVersion"], owner["kind"], owner["name"]) == ("v1", "Pod", pod_name)
        assert owner["uid"] == pod["metadata"]["uid"], f"claim {claim_name} is not owned by this pod"
        assert claim["spec"] == template["spec"]["spec"], f"claim {claim_name} differs from its template"


def test_pipeline_pods_are_pending(pipeline_pods: list[Obj]) -> None:
    expected = {
        "gpu-training",
        "tpu-inference",
        "fpga-serving",
        "gaudi-training",
        "inferentia-serving",
        "amd-mi300-training",
        "flexible-accelerator",
        "mig-notebook",
    }
    assert {p["metadata"]["name"] for p in pipeline_pods} == expected
    for pod in pipeline_pods:
        assert pod["kind"] == "Pod"
        assert "nodeName" not in pod["spec"]
        assert pod["spec"]["schedulerName"] == SCHEDULER_NAME
        assert pod["status"]["phase"] == "Pending"


def test_pipeline_pod_claims_are_generated_and_owned(
    pipeline_pods: list[Obj], claims: dict, templates: dict
) -> None:
    for pod in pipeline_pods:
        _check_pod_claims(pod, claims, templates)
        for claim_name in _claim_names_of(pod):
            claim = claims[pod["metadata"]["namespace"], claim_name]
            assert not (claim.get("status") or {}).get("allocation"), f"{claim_name} should be unallocated"


def test_sample_pods_claims_resolve(sample_pods: dict, claims: dict, templates: dict) -> None:
    for pod in sample_pods.values():
        _check_pod_claims(pod, claims, templates)


def test_expected_nodes_are_documented(pipeline_pods: list[Obj], nodes: dict[str, Obj]) -> None:
    readme = README_PATH.read_text(encoding="utf-8")
    assert 3 <= len(readme.strip().splitlines()) <= 6
    for pod in pipeline_pods:
        expected = pod["metadata"]["annotations"][EXPECTED_NODES_ANNOTATION].split(",")
        assert expected and set(expected) <= nodes.keys(), pod["metadata"]["name"]
        assert f"`{pod['metadata']['name']}`" in readme
        for node in expected:
            assert f"`{node}`" in readme


# --------------------------------------------------------------------------- topology facts


def _node_devices(devices: dict[DeviceId, Obj], driver: str, node: str) -> list[Obj]:
    return [dev for (drv, pool, _n), dev in devices.items() if drv == driver and pool == node]


def _attr(device: Obj, name: str) -> Any:
    (value,) = device["attributes"][name].values()
    return value


@pytest.mark.parametrize("node", ["h100-node-01", "h100-node-02"])
def test_h100_topology(node: str, devices: dict[DeviceId, Obj]) -> None:
    gpus = _node_devices(devices, "gpu.nvidia.com", node)
    assert [g["name"] for g in gpus] == [f"gpu-{i}" for i in range(8)]
    assert {_attr(g, "productName") for g in gpus} == {"NVIDIA H100 80GB HBM3"}
    assert len({_attr(g, "nvlinkDomain") for g in gpus}) == 1
    roots = [_attr(g, "resource.kubernetes.io/pcieRoot") for g in gpus]
    assert roots == ["pci0000:15"] * 2 + ["pci0000:37"] * 2 + ["pci0000:97"] * 2 + ["pci0000:b7"] * 2
    assert [_attr(g, "resource.kubernetes.io/numaNode") for g in gpus] == [0] * 4 + [1] * 4
    assert all(g["capacity"]["memory"]["value"] == "80Gi" for g in gpus)
    nics = _node_devices(devices, "dra.net", node)
    assert len(nics) == 4
    assert sorted(_attr(n, "resource.kubernetes.io/pcieRoot") for n in nics) == sorted(set(roots))
    gpu_numa = {
        _attr(g, "resource.kubernetes.io/pcieRoot"): _attr(g, "resource.kubernetes.io/numaNode") for g in gpus
    }
    for nic in nics:
        assert _attr(nic, "dra.net/rdma") is True
        assert _attr(nic, "dra.net/numaNode") == _attr(nic, "resource.kubernetes.io/numaNode")
        assert gpu_numa[_attr(nic, "resource.kubernetes.io/pcieRoot")] == _attr(nic, "dra.net/numaNode")


def test_nvlink_domains_differ_between_nodes_and_l40s_has_none(devices: dict[DeviceId, Obj]) -> None:
    domains = {
        node: {_attr(g, "nvlinkDomain") for g in _node_devices(devices, "gpu.nvidia.com", node)}
        for node in ("h100-node-01", "h100-node-02")
    }
    assert domains["h100-node-01"].isdisjoint(domains["h100-node-02"])
    l40s = _node_devices(devices, "gpu.nvidia.com", "l40s-node-01")
    assert len(l40s) == 4 and all("nvlinkDomain" not in g["attributes"] for g in l40s)
    assert [_attr(g, "resource.kubernetes.io/numaNode") for g in l40s] == [0, 0, 1, 1]
    assert len({_attr(g, "resource.kubernetes.io/pcieRoot") for g in l40s}) == 4
    assert all(_attr(n, "dra.net/rdma") is False for n in _node_devices(devices, "dra.net", "l40s-node-01"))


@pytest.mark.parametrize(
    ("driver", "node", "count", "domain_attribute"),
    [
        ("tpu.google.com", "tpu-v5e-node-01", 4, "iciDomain"),
        ("gaudi.intel.com", "gaudi2-node-01", 8, "roceDomain"),
        ("gpu.amd.com", "mi300x-node-01", 8, "xgmiHive"),
        ("neuron.amazonaws.com", "inf2-node-01", 6, "neuronLinkGroup"),
        ("fpga.intel.com", "fpga-node-01", 2, "bitstream"),
    ],
)
def test_accelerator_nodes_share_one_domain(
    driver: str, node: str, count: int, domain_attribute: str, devices: dict[DeviceId, Obj]
) -> None:
    found = _node_devices(devices, driver, node)
    assert len(found) == count
    assert len({_attr(d, domain_attribute) for d in found}) == 1


def test_mig_node_is_partitionable(devices: dict[DeviceId, Obj], pools: dict, claims: dict) -> None:
    mig_pool = pools["gpu.nvidia.com", "a100-mig-node-01"]
    assert len(mig_pool) == 2
    gpus = _node_devices(devices, "gpu.nvidia.com", "a100-mig-node-01")
    full = [d for d in gpus if _attr(d, "type") == "gpu"]
    migs = [d for d in gpus if _attr(d, "type") == "mig"]
    assert [d["name"] for d in full] == ["gpu-0", "gpu-1"]
    assert {_attr(d, "profile") for d in migs} == {"1g.10gb", "3g.40gb", "7g.80gb"}
    assert all(d["consumesCounters"] for d in gpus)
    held = claims["ml-training", "notebook-alice-mig"]["status"]["allocation"]["devices"]["results"]
    assert [r["device"] for r in held] == ["gpu-0-mig-1g10gb-0"]
    assert ("gpu.nvidia.com", "a100-mig-node-01", "gpu-0-mig-1g10gb-1") in devices


def test_cpu_node_has_no_devices(nodes: dict[str, Obj], pools: dict) -> None:
    assert "cpu-node-01" in nodes
    assert all(pool != "cpu-node-01" for _driver, pool in pools)
    assert len(nodes) == 18  # 10 single nodes and two NVL72-style racks of four trays
