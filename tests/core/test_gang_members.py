"""The placed members of a gang (`Gangs.members`) follow the cluster state's pods: parsed again
only where the claims change log names a change, and all of them after a relist."""

from __future__ import annotations

from typing import Any

from extender.core.gang import Gang
from extender.objects import Obj
from tests.core import small_cluster as c

JOB = "volcano.sh/job-name"
GANG = Gang("default/volcano:vj", 4)


def _member(name: str, node: str | None, *, job: str = "vj") -> Obj:
    spec: dict[str, Any] = {"nodeName": node} if node else {}
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": {JOB: job}},
        "spec": spec,
    }


def test_members_follow_upserts_edits_deletes_and_relists() -> None:
    placement = c.placement([c.node("a"), c.node("b"), _member("m0", "a"), _member("x", "b", job="other")])
    gangs, state = placement.gangs, placement.state
    assert gangs.members(GANG, "uid-self") == {"uid-m0": "a"}
    state.upsert(_member("m1", "b"))
    assert gangs.members(GANG, "uid-self") == {"uid-m0": "a", "uid-m1": "b"}
    moved = state.get("Pod", "m1", "default")
    assert moved is not None
    moved["spec"]["nodeName"] = "a"  # edited in place, then written: the log names it
    state.upsert(moved)
    assert gangs.members(GANG, "uid-self") == {"uid-m0": "a", "uid-m1": "a"}
    state.delete("Pod", "m0", "default")
    assert gangs.members(GANG, "uid-self") == {"uid-m1": "a"}
    state.replace_kind("Pod", [_member("m2", "b")])  # a relist: the log cannot tell, all are parsed
    assert gangs.members(GANG, "uid-self") == {"uid-m2": "b"}
    assert gangs.members(GANG, "uid-m2") == {}  # the pod itself is not its own member
