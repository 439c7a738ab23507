"""collect_allocated with a memo: a rescan after one claim changed sees exactly the new state."""

from __future__ import annotations

import copy

from extender.allocator.model import DeviceID
from extender.claims import AllocationMemo, collect_allocated


def _claim(uid: str, devices: list[str], *, share: str = "") -> dict:
    results = [{"request": "r", "driver": "d", "pool": "p", "device": name} for name in devices]
    if share:
        results.append(
            {"request": "r", "driver": "d", "pool": "p", "device": share, "shareID": uid,
             "consumedCapacity": {"memory": "1Gi"}}
        )  # fmt: skip
    return {"metadata": {"uid": uid}, "status": {"allocation": {"devices": {"results": results}}}}


def _ids(*names: str) -> frozenset[DeviceID]:
    return frozenset(DeviceID("d", "p", n) for n in names)


def test_memo_follows_replaced_and_deleted_claims() -> None:
    memo: AllocationMemo = {}
    claims = [_claim("a", ["gpu-0"]), _claim("b", ["gpu-1"], share="nic-0"), _claim("c", ["gpu-2"])]
    first = collect_allocated(claims, {}, memo)
    assert first.devices == _ids("gpu-0", "gpu-1", "gpu-2")
    assert len(memo) == 3
    changed = copy.deepcopy(claims[0])
    changed["status"]["allocation"]["devices"]["results"][0]["device"] = "gpu-5"
    second = collect_allocated([changed, claims[1]], {}, memo)  # a replaced, c deleted
    assert second.devices == _ids("gpu-1", "gpu-5")
    assert second == collect_allocated([changed, claims[1]], {})  # same answer as without a memo
    assert len(memo) == 2 and all(
        entry[0] is not claims[0]["status"]["allocation"] for entry in memo.values()
    )


def test_shared_capacity_adds_up_without_touching_the_memo() -> None:
    memo: AllocationMemo = {}
    claims = [_claim("a", [], share="nic-0"), _claim("b", [], share="nic-0")]
    for _ in range(2):  # the second scan re-uses the memo; the sum must not grow
        collected = collect_allocated(claims, {}, memo)
        assert str(collected.aggregated_capacity[DeviceID("d", "p", "nic-0")]["memory"]) == "2Gi"
