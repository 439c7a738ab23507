"""Held devices by diff (issue 10): the ledger and placement's `free` mask equal a full recompute."""

from __future__ import annotations

import copy
import random
from typing import Any

import numpy as np
import pytest

from extender.allocator.features import Features
from extender.allocator.inputs import AllocatedState
from extender.claims import collect_allocated
from extender.cluster import state as state_module
from extender.cluster.sample import sample_objects
from extender.cluster.state import ClusterState
from extender.core.assumed import AssumeCache
from extender.core.held import HeldLedger
from extender.core.placement import Placement
from extender.objects import Obj

FEATURES = Features.from_gates()


def _claim(name: str, uid: str, results: list[Obj] | None) -> Obj:
    claim: Obj = {
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ns", "uid": uid},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}},
    }
    if results is not None:
        claim["status"] = {"allocation": {"devices": {"results": results}}}
    return claim


def _results(rng: random.Random, devices: list[tuple[str, str, str]]) -> list[Obj]:
    results = []
    for driver, pool, device in rng.sample(devices, rng.randint(1, 3)):
        result: Obj = {"request": "r", "driver": driver, "pool": pool, "device": device}
        roll = rng.random()
        if roll < 0.2:
            result["shareID"] = f"share-{rng.randrange(10**6)}"
            result["consumedCapacity"] = {"memory": rng.choice(("1Gi", "512Mi", "2G"))}
        elif roll < 0.25:
            result["shareID"] = f"share-{rng.randrange(10**6)}"  # a share without capacity
        elif roll < 0.3:
            result["adminAccess"] = True  # holds nothing
        results.append(result)
    return results


class _World:
    """Random claim events on a state and an assume cache, with the expected answer at hand."""

    def __init__(self, seed: int, devices: list[tuple[str, str, str]], state: ClusterState) -> None:
        self.rng = random.Random(seed)
        self.devices = devices
        self.state = state
        self.assumed = AssumeCache(clock=lambda: 0.0)
        self.count = 0

    def step(self) -> None:
        rng = self.rng
        claims = self.state.list("ResourceClaim")
        roll = rng.random()
        if not claims or roll < 0.25:  # a new claim, allocated or not
            self.count += 1
            results = _results(rng, self.devices) if rng.random() < 0.6 else None
            self.state.upsert(_claim(f"c{self.count}", f"uid-{self.count}", results))
        elif roll < 0.45:  # allocate or re-allocate an existing claim
            claim = copy.deepcopy(rng.choice(claims))
            claim["status"] = {"allocation": {"devices": {"results": _results(rng, self.devices)}}}
            self.state.upsert(claim)
        elif roll < 0.6:  # release
            claim = copy.deepcopy(rng.choice(claims))
            claim.pop("status", None)
            self.state.upsert(claim)
        elif roll < 0.7:
            claim = rng.choice(claims)
            self.state.delete("ResourceClaim", claim["metadata"]["name"], "ns")
        elif roll < 0.85:  # assume an allocation (its claim may or may not show one)
            claim = rng.choice(claims)
            allocation = {"devices": {"results": _results(rng, self.devices)}}
            self.assumed.assume(claim["metadata"]["uid"], allocation, pod_uid="p")
        elif roll < 0.95 and len(self.assumed):
            self.assumed.forget(rng.choice(list(self.assumed.active())))
        elif roll < 0.98:  # a pod event: claims generation moves, no claim changed
            self.state.upsert(
                {"kind": "Pod", "metadata": {"name": f"p{rng.randrange(5)}", "namespace": "ns"}}
            )
        else:  # relist: the change log cannot tell, the ledger rescans
            self.state.replace_kind("ResourceClaim", [copy.deepcopy(c) for c in claims])

    def expected(self) -> AllocatedState:
        collected = collect_allocated(self.state.list("ResourceClaim"), self.assumed.active())
        return AllocatedState(collected.devices, collected.shared_ids, collected.aggregated_capacity)


def _texts(aggregated: dict[Any, dict[str, Any]]) -> dict[Any, dict[str, str]]:
    return {device: {name: str(q) for name, q in sums.items()} for device, sums in aggregated.items()}


def _sample_devices() -> list[tuple[str, str, str]]:
    return [(d, "pool-a", f"dev-{i}") for d in ("gpu.example.com", "nic.example.com") for i in range(6)]


@pytest.mark.parametrize("seed", range(40))
def test_ledger_equals_collect_allocated_after_every_change(seed: int) -> None:
    world = _World(seed, _sample_devices(), ClusterState())
    ledger = HeldLedger()
    for _ in range(80):
        world.step()
        parsed = ledger.parsed
        ledger.update(world.state, world.assumed.active())
        got = ledger.allocated()
        want = world.expected()
        assert got.devices == want.devices
        assert got.shared_ids == want.shared_ids
        assert got.aggregated_capacity == want.aggregated_capacity
        # Same text too: parts are summed in the same order, so the sum keeps the same format.
        assert _texts(got.aggregated_capacity) == _texts(want.aggregated_capacity)
        held = {d for d in got.devices} | {d for d, _ in got.shared_ids}
        assert set(ledger.held) == held
        if ledger.generation is not None and ledger.parsed - parsed > 2:
            # Only a rescan parses more than the changed claim and one assumed entry.
            assert world.state._relisted.get("ResourceClaim", -1) == world.state.claims_generation


def test_one_claim_change_parses_one_allocation() -> None:
    state = ClusterState()
    devices = _sample_devices()
    rng = random.Random(3)
    for i in range(200):
        state.upsert(_claim(f"c{i}", f"uid-{i}", _results(rng, devices)))
    ledger = HeldLedger()
    assert ledger.update(state, {}) is None  # the first look is a full scan
    assert ledger.parsed == 200
    released = copy.deepcopy(state.get("ResourceClaim", "c7", "ns"))
    before = {
        (r["driver"], r["pool"], r["device"]) for r in released["status"]["allocation"]["devices"]["results"]
    }
    released.pop("status")
    state.upsert(released)
    touched = ledger.update(state, {})
    assert ledger.parsed == 200  # a release parses nothing
    assert touched is not None and {tuple(d) for d in touched} == before
    state.upsert(_claim("c7", "uid-7", _results(rng, devices)))
    ledger.update(state, {})
    assert ledger.parsed == 201
    want = collect_allocated(state.list("ResourceClaim"), {})
    assert ledger.allocated() == want


def test_change_log_reports_changed_keys_and_gives_up_when_it_cannot_tell(monkeypatch: Any) -> None:
    state = ClusterState()
    state.upsert(_claim("a", "1", None))
    start = state.claims_generation
    state.upsert(_claim("b", "2", None))
    state.upsert({"kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}})
    state.delete("ResourceClaim", "a", "ns")
    assert state.changed_since("ResourceClaim", start) == {("ns", "b"), ("ns", "a")}
    assert state.changed_since("Pod", start) == {("ns", "p")}
    assert state.changed_since("ResourceClaim", state.claims_generation) == set()
    assert state.changed_since("ResourceClaim", state.claims_generation + 1) is None
    with pytest.raises(ValueError, match="only claim-side kinds"):
        state.changed_since("ResourceSlice", 0)
    relisted_at = state.claims_generation
    state.replace_kind("Pod", [])
    assert state.changed_since("Pod", relisted_at) is None  # relisted after that generation
    assert state.changed_since("ResourceClaim", relisted_at) == set()  # other kinds keep their log
    monkeypatch.setattr(state_module, "CHANGE_LOG_LIMIT", 8)
    early = state.claims_generation
    for i in range(20):
        state.upsert(_claim(f"x{i}", str(i), None))
    assert state.changed_since("ResourceClaim", early) is None  # the log no longer reaches back
    recent = state.claims_generation - 2
    assert state.changed_since("ResourceClaim", recent) == {("ns", "x18"), ("ns", "x19")}


# ----------------------------------------------------------------- placement's free mask
def _placement() -> tuple[Placement, AssumeCache]:
    state = ClusterState.from_objects(copy.deepcopy(sample_objects()))
    assumed = AssumeCache(clock=lambda: 0.0)
    return Placement(state, features=FEATURES, assumed=assumed), assumed


def _full_free(placement: Placement, assumed: AssumeCache) -> tuple[AllocatedState, np.ndarray]:
    index = placement.index()
    collected = collect_allocated(placement.state.list("ResourceClaim"), assumed.active())
    free = np.ones(index.num_rows, dtype=bool)
    for device_id in {*collected.devices, *(d for d, _ in collected.shared_ids)}:
        rows = index.rows_of.get(device_id)
        if rows is not None:
            free[rows] = False
    return AllocatedState(collected.devices, collected.shared_ids, collected.aggregated_capacity), free


@pytest.mark.parametrize("seed", range(8))
def test_free_rows_after_allocate_and_release_equal_a_full_recompute(seed: int) -> None:
    placement, assumed = _placement()
    index = placement.index()
    devices = sorted({tuple(d.id) for d in index.row_device})
    world = _World(seed, devices, placement.state)  # type: ignore[arg-type]
    world.assumed = assumed
    _, free = placement.allocated_state()
    for step in range(40):
        world.step()
        if step % 13 == 12:  # a device change: new index generation, rows may move
            node = copy.deepcopy(placement.state.list("Node")[0])
            node["metadata"].setdefault("labels", {})["touched"] = str(step)
            placement.state.upsert(node)
        previous = free
        allocated, free = placement.allocated_state()
        want_allocated, want_free = _full_free(placement, assumed)
        assert allocated == want_allocated
        assert np.array_equal(free, want_free)
        assert free is previous or not np.shares_memory(free, previous)  # readers keep theirs


def test_a_release_changes_only_that_claims_rows() -> None:
    placement, assumed = _placement()
    index = placement.index()
    rng = random.Random(1)
    devices = sorted({tuple(d.id) for d in index.row_device})
    for i in range(10):
        placement.state.upsert(_claim(f"c{i}", f"u{i}", _results(rng, devices)))  # type: ignore[arg-type]
    _, before = placement.allocated_state()
    claim = copy.deepcopy(placement.state.get("ResourceClaim", "c4", "ns"))
    released = {
        (r["driver"], r["pool"], r["device"])
        for r in claim["status"]["allocation"]["devices"]["results"]
        if not r.get("adminAccess")
    }
    claim.pop("status")
    placement.state.upsert(claim)
    _, after = placement.allocated_state()
    changed = {tuple(index.row_device[row].id) for row in np.flatnonzero(before != after)}
    assert changed <= released
    assert np.array_equal(after, _full_free(placement, assumed)[1])
