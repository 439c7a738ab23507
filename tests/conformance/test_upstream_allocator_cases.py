"""Conformance: the 210 cases of the upstream allocator's own test table (tests/data/conformance).

Each case gives the objects, the node, the allocated state and the feature switches, and the
result upstream's allocator produced. Our allocator must give the same status, the same error
text and, for `allocated`, the same devices, configs and node selectors. Share IDs are random
UUIDs upstream and here, so only their presence is compared.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from extender.allocator.allocating import allocate
from extender.allocator.features import Features
from extender.allocator.inputs import AllocatedState, DeviceClassSpec, parse_device_class
from extender.allocator.model import DeviceID, parse_slice
from extender.allocator.pools import gather_pools
from extender.allocator.requests import parse_claim
from extender.errors import AllocationError, NodeScopedError
from extender.index.selecting import CachingEvaluator
from extender.quantity import Quantity

# Vendored copy; provenance in tests/data/conformance/PROVENANCE.md.
CASES_FILE = Path(__file__).resolve().parents[1] / "data" / "conformance" / "upstream-allocator-cases.jsonl"
# The fake lister of the upstream test words "not found" differently from a real lister.
PREFIX_ONLY = {"TestDump/no-classes", "TestDump/unknown-class"}
# How the upstream test interrupted these cases (a JSON case cannot carry a cancelled context).
INTERRUPT_CAUSES = {
    "TestDump/interrupt/cancel": "context canceled",
    "TestDump/interrupt/deadline": "context deadline exceeded",
    "TestDump/interrupt/timeout": "context deadline exceeded",
}


def _load_cases() -> list[dict[str, Any]]:
    return [json.loads(line) for line in CASES_FILE.read_text().splitlines() if line.strip()]


CASES = _load_cases()


class _Classes:
    def __init__(self, classes: list[dict[str, Any]]) -> None:
        self._classes = {c["metadata"]["name"]: parse_device_class(c) for c in classes}

    def get_class(self, name: str) -> DeviceClassSpec | None:
        return self._classes.get(name)


def _allocated_state(case: dict[str, Any]) -> AllocatedState:
    devices = frozenset(DeviceID(*item.split("/", 2)) for item in case.get("allocatedDevices") or ())
    shared = frozenset(
        (DeviceID(s["driver"], s["pool"], s["device"]), s["shareID"])
        for s in case.get("allocatedSharedDeviceIDs") or ()
    )
    aggregated = {
        DeviceID(a["driver"], a["pool"], a["device"]): {
            k: Quantity.parse(v) for k, v in a["consumedCapacity"].items()
        }
        for a in case.get("aggregatedCapacity") or ()
    }
    return AllocatedState(devices=devices, shared_ids=shared, aggregated_capacity=aggregated)


def run_case(case: dict[str, Any], version: str = "1.36") -> dict[str, Any]:
    """Run one case through our allocator as Kubernetes `version`; returns a dict shaped like `expected`."""
    features = Features.from_conformance(case["features"], version)
    slices = [parse_slice(s) for s in case.get("resourceSlices") or ()]
    by_pool: dict[Any, list[Any]] = {}
    for slice_ in slices:
        by_pool.setdefault(slice_.pool_id, []).append(slice_)
    pools = gather_pools(slices, case["node"], features, all_slices_of_pool=by_pool)
    claims = [parse_claim(c, apply_defaults=case["applyDefaults"]) for c in case.get("claims") or ()]
    cause = INTERRUPT_CAUSES.get(case["name"])
    try:
        allocations = allocate(
            claims,
            node=case["node"],
            pools=pools,
            features=features,
            classes=_Classes(case.get("deviceClasses") or []),
            allocated=_allocated_state(case),
            evaluator=CachingEvaluator(features),
            should_stop=lambda: cause,
        )
    except NodeScopedError as exc:
        return {"status": "error", "error": str(exc), "nodeScopedError": True}
    except AllocationError as exc:
        return {"status": "error", "error": str(exc), "nodeScopedError": False}
    if allocations is None:
        return {"status": "unschedulable"}
    return {"status": "allocated", "allocations": [a.allocation for a in allocations]}


def _normalise(allocations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = json.loads(json.dumps(allocations or []))
    for allocation in out:
        for result in (allocation.get("devices") or {}).get("results") or ():
            if "shareID" in result:
                result["shareID"] = "<uuid>"
    return out


@pytest.mark.parametrize("case", CASES, ids=[c["name"].removeprefix("TestDump/") for c in CASES])
def test_upstream_case(case: dict[str, Any]) -> None:
    """Our allocator reproduces upstream's outcome for this case."""
    expected = case["expected"]
    got = run_case(case)
    assert got["status"] == expected["status"], got
    if expected["status"] == "error":
        if case["name"] in PREFIX_ONLY:
            assert "could not retrieve device class" in got["error"]
            assert got["error"].split(":")[0] == expected["error"].split(":")[0]
        else:
            assert got["error"] == expected["error"]
        assert got["nodeScopedError"] == expected["nodeScopedError"]
    elif expected["status"] == "allocated":
        assert _normalise(got["allocations"]) == _normalise(expected["allocations"])


def test_cases_present() -> None:
    """The vendored conformance file is there and complete: the suite never silently shrinks."""
    assert len(CASES) == 210
