"""The extender's list+watch against a real kube-apiserver: a slice update and a claim's
allocation and deletion are seen within a bounded time, and so is a change made while the API
server restarts or while a compaction has removed the history the watch would resume from
(the watch gets 410 Gone and must relist).

What the extender sees is read from its own dashboard API (`/ui/api/nodes/<node>`: the device
count and how many are held) and its `/metrics` (relists per kind); both come from the index the
verbs decide on.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e import objects
from tests.e2e.cluster import ControlPlane, object_path
from tests.e2e.conftest import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.first_version_only]

NODE = "inf2-node-01"
DRIVER = "neuron.amazonaws.com"
#: A change must reach the index within this long (the watch streams it; nothing polls).
SEEN_WITHIN = 10.0
#: After an API-server restart or a 410 the watch reconnects with backoff and relists.
RECOVERED_WITHIN = 45.0


def _node(plane: ControlPlane) -> dict[str, Any]:
    response = plane.extender_get(f"/ui/api/nodes/{NODE}")
    return dict(response.json()) if response.status_code == 200 else {}


def _slice(plane: ControlPlane) -> dict[str, Any]:
    return next(
        s
        for s in objects.list_of(plane.kube, "ResourceSlice")
        if s["spec"].get("nodeName") == NODE and s["spec"]["driver"] == DRIVER
    )


def _put_slice(plane: ControlPlane, resource_slice: dict[str, Any]) -> None:
    plane.kube.request(
        "PUT", object_path("ResourceSlice", resource_slice["metadata"]["name"]), resource_slice
    )


def _with_extra_device(resource_slice: dict[str, Any], name: str) -> dict[str, Any]:
    changed = copy.deepcopy(resource_slice)
    device = copy.deepcopy(changed["spec"]["devices"][-1])
    device["name"] = name
    changed["spec"]["devices"].append(device)
    return changed


def _relists(plane: ControlPlane, kind: str) -> float:
    text = plane.extender_get("/metrics").text
    for family in text_string_to_metric_families(text):
        if family.name == "dra_extender_watch_relists":
            for sample in family.samples:
                if sample.labels.get("kind") == kind and sample.name.endswith("_total"):
                    return float(sample.value)
    raise AssertionError("dra_extender_watch_relists has no sample for " + kind)


@pytest.fixture
def watched(plane: ControlPlane) -> Iterator[ControlPlane]:
    """The extender running (in whatever mode the session is in), and the neuron slice as the
    sample published it, restored at the end."""
    plane.use(plane.mode if plane.mode in ("advisory", "allocator") else "advisory")
    original = _slice(plane)
    wait_until("the extender indexed the neuron node", lambda: _node(plane).get("devices"), timeout=30)
    yield plane
    current = _slice(plane)
    current["spec"]["devices"] = original["spec"]["devices"]
    _put_slice(plane, current)
    count = len(original["spec"]["devices"])
    wait_until(
        "the slice restored in the index",
        lambda: _node(plane).get("devices") == count,
        timeout=RECOVERED_WITHIN,
    )


def _seen(plane: ControlPlane, what: str, predicate: Any, within: float) -> float:
    started = time.monotonic()
    wait_until(what, lambda: predicate(_node(plane)), timeout=within, every=0.05)
    return time.monotonic() - started


def test_slice_update_is_seen_within_bounds(watched: ControlPlane) -> None:
    before = _node(watched)["devices"]
    _put_slice(watched, _with_extra_device(_slice(watched), "neuron-extra"))
    _seen(watched, "the added device", lambda n: n.get("devices") == before + 1, SEEN_WITHIN)


def test_claim_allocation_and_deletion_are_seen(watched: ControlPlane) -> None:
    plane = watched
    namespace = "ml-serving"
    device = _slice(plane)["spec"]["devices"][0]["name"]
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "watched-claim", "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "neuron", "exactly": {"deviceClassName": DRIVER}}]}},
    }
    created = plane.kube.create(claim)
    held = _node(plane)["held"]
    # Written as a driver's controller or another scheduler would: status only, by the API.
    created["status"] = {
        "allocation": {
            "devices": {"results": [{"request": "neuron", "driver": DRIVER, "pool": NODE, "device": device}]},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
                ]
            },
        }
    }
    plane.kube.request("PUT", object_path("ResourceClaim", "watched-claim", namespace) + "/status", created)
    _seen(plane, "the claim's allocation", lambda n: n.get("held") == held + 1, SEEN_WITHIN)
    objects.delete(plane.kube, "ResourceClaim", "watched-claim", namespace)
    _seen(plane, "the claim's deletion", lambda n: n.get("held") == held, SEEN_WITHIN)


def test_change_during_an_api_server_restart_is_seen(watched: ControlPlane) -> None:
    plane = watched
    before = _node(plane)["devices"]
    plane.restart_apiserver(down_seconds=2)
    _put_slice(plane, _with_extra_device(_slice(plane), "neuron-after-restart"))
    _seen(
        plane,
        "a change after the API server came back",
        lambda n: n.get("devices") == before + 1,
        RECOVERED_WITHIN,
    )
    assert plane.extender_get("/readyz").status_code == 200


def test_compacted_history_forces_410_and_a_relist(watched: ControlPlane) -> None:
    """The extender is stalled (SIGSTOP) across two API-server restarts: after the first its
    watches are gone (nothing can be buffered for it), then a slice changes, etcd compacts past
    the extender's last resourceVersion and the second restart starts a watch cache after it.
    When the extender runs again its watch resumes from a revision nobody has: 410 Gone, then a
    relist, the only way the change can reach it."""
    plane = watched
    before = _node(plane)["devices"]
    relists = _relists(plane, "ResourceSlice")
    name = next(n for n in ("extender", "extender-a") if n in plane.processes)
    plane.pause(name)
    try:
        plane.restart_apiserver()
        _put_slice(plane, _with_extra_device(_slice(plane), "neuron-after-compaction"))
        plane.etcd_compact()
        plane.restart_apiserver()
    finally:
        plane.resume(name)
    _seen(
        plane, "the change made during the stall", lambda n: n.get("devices") == before + 1, RECOVERED_WITHIN
    )
    # Seen through the relist and nothing else: the relist is counted by then.
    assert _relists(plane, "ResourceSlice") > relists, "the change arrived without the relist a 410 demands"
