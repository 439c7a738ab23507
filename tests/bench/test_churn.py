"""bench.churn's parts that need no cluster: the trace, the pods of a job and the claim ledger
that tells a device allocated to two claims at the same moment."""

from __future__ import annotations

from typing import Any

from bench import churn
from tests.e2e import kwok

Obj = dict[str, Any]


def test_the_trace_is_seeded_poisson_over_the_window() -> None:
    trace = churn.make_trace(3, seconds=3600, jobs_per_minute=30)
    assert trace == churn.make_trace(3, seconds=3600, jobs_per_minute=30)
    assert trace != churn.make_trace(4, seconds=3600, jobs_per_minute=30)
    assert 0.85 * 1800 < len(trace) < 1.15 * 1800  # 30 a minute for an hour
    arrivals = [j.arrival for j in trace]
    assert arrivals == sorted(arrivals) and arrivals[0] > 0 and arrivals[-1] < 3600
    assert {j.shape for j in trace} == set(churn.SHAPES)
    assert min(j.duration for j in trace) >= 1.0
    # Heavy-tailed: some jobs run many times their shape's mean.
    assert max(j.duration / churn.SHAPES[j.shape].mean_seconds for j in trace) > 5


def test_a_gang_job_is_its_members_with_the_gang_labels() -> None:
    job = churn.Job("job-00007", "gang-2x4-nvlink", 10.0, 300.0)
    pods = churn.job_pods(job, "alloc", "dra-topology-scheduler", speed=10.0)
    assert [p["metadata"]["name"] for p in pods] == ["alloc-job-00007-0", "alloc-job-00007-1"]
    for pod in pods:
        assert pod["metadata"]["labels"][churn.JOBSET_NAME] == "alloc-job-00007"
        assert pod["metadata"]["annotations"][churn.GANG_SIZE_ANNOTATION] == "2"
        assert pod["metadata"]["annotations"][kwok.RUN_FOR] == "30000ms"  # 300 trace s at 10x
        assert pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == "churn-gang-2x4-nvlink"
    single = churn.job_pods(churn.Job("job-00008", "gpu-1", 1.0, 5.0), "base", "default-scheduler", speed=1.0)
    assert len(single) == 1 and churn.JOBSET_NAME not in single[0]["metadata"]["labels"]


def _claim(uid: str, devices: list[str], owner: str = "p") -> Obj:
    results = [{"driver": "gpu.nvidia.com", "pool": "n1", "device": d, "request": "gpus"} for d in devices]
    return {
        "metadata": {
            "uid": uid,
            "name": uid,
            "namespace": "bench",
            "ownerReferences": [{"kind": "Pod", "name": owner}],
        },
        "status": {"allocation": {"devices": {"results": results}}} if devices else {},
    }


def test_the_ledger_sees_a_device_in_two_claims_at_once() -> None:
    ledger = churn.ClaimLedger()
    ledger.on_event("ADDED", _claim("a", ["gpu-0", "gpu-1"]), 1.0)
    ledger.on_event("ADDED", _claim("b", ["gpu-2"]), 2.0)
    assert ledger.double == []
    ledger.on_event("MODIFIED", _claim("b", ["gpu-1", "gpu-2"]), 3.0)
    assert len(ledger.double) == 1 and "gpu-1" in ledger.double[0] and "claim a holds it" in ledger.double[0]


def test_a_released_device_may_be_allocated_again() -> None:
    ledger = churn.ClaimLedger()
    ledger.on_event("ADDED", _claim("a", ["gpu-0"], owner="p1"), 1.0)
    ledger.on_event("MODIFIED", _claim("a", []), 2.0)  # deallocated
    ledger.on_event("ADDED", _claim("b", ["gpu-0"], owner="p2"), 3.0)
    ledger.on_event("DELETED", _claim("b", ["gpu-0"], owner="p2"), 4.0)
    ledger.on_event("ADDED", _claim("c", ["gpu-0"]), 5.0)
    assert ledger.double == []
    assert ledger.first_allocation == {
        "a": [("gpu.nvidia.com", "n1", "gpu-0")],
        "b": [("gpu.nvidia.com", "n1", "gpu-0")],
        "c": [("gpu.nvidia.com", "n1", "gpu-0")],
    }
    assert ledger.owner_pod["b"] == "p2" and set(ledger.held) == {"c"}
    assert [len(held) for _, held in ledger.timeline] == [1, 0, 1, 0, 1]
