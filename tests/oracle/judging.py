"""One scenario through our allocator and through the oracle, and whether the answers agree.

Both sides answer in the shape of a conformance case's `expected`: `status` (`allocated`,
`unschedulable`, `error`), `error` and `nodeScopedError` for errors, `allocations` (one
AllocationResult per claim) when allocated. Share IDs are random UUIDs on both sides, so only
their presence is compared.
"""

from __future__ import annotations

import json
from typing import Any

from tests.conformance.test_upstream_allocator_cases import run_case


def ours(case: dict[str, Any], version: str = "1.36") -> dict[str, Any]:
    """Our allocator's answer (extender/allocator, the exact search) with Kubernetes `version`'s semantics."""
    got = run_case(case, version)
    if got["status"] == "allocated":
        got["allocations"] = json.loads(json.dumps(got["allocations"]))
    return got


def upstream(answer: dict[str, Any], node: int = 0) -> dict[str, Any]:
    """The oracle's answer for one node, in the same shape."""
    if answer.get("error"):
        return {"status": "error", "error": answer["error"], "nodeScopedError": False}
    result = answer["nodes"][node]
    out: dict[str, Any] = {"status": result["status"]}
    if result["status"] == "error":
        out["error"] = result["error"]
        out["nodeScopedError"] = result["nodeScopedError"]
    elif result["status"] == "allocated":
        out["allocations"] = result.get("allocations") or []  # omitted when there are no claims
    return out


def normalised(allocations: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = json.loads(json.dumps(allocations or []))
    for allocation in out:
        for result in (allocation.get("devices") or {}).get("results") or ():
            if "shareID" in result:
                result["shareID"] = "<uuid>"
    return out


def difference(mine: dict[str, Any], theirs: dict[str, Any], *, compare_devices: bool = True) -> str:
    """'' when the answers agree, else what differs (status, error text, or devices)."""
    if mine["status"] != theirs["status"]:
        mine_text, theirs_text = mine.get("error", ""), theirs.get("error", "")
        return f"status: ours {mine['status']} {mine_text!r}, upstream {theirs['status']} {theirs_text!r}"
    if mine["status"] == "error":
        if mine["error"] != theirs["error"]:
            return f"error text: ours {mine['error']!r}, upstream {theirs['error']!r}"
        if mine.get("nodeScopedError") != theirs.get("nodeScopedError"):
            return (
                f"node-scoped: ours {mine.get('nodeScopedError')}, upstream {theirs.get('nodeScopedError')}"
            )
    if mine["status"] == "allocated" and compare_devices:
        a, b = normalised(mine["allocations"]), normalised(theirs["allocations"])
        if a != b:
            return f"allocations: ours {json.dumps(a)}, upstream {json.dumps(b)}"
    return ""
