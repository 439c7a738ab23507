"""File-mode bind (InMemoryBinder) of a pod asking for an extended resource backed by DRA: the
claim is created in the state as the API server would create it (name from generateName, a
UID), allocated and reserved for the pod, and the bound pod records it in
`status.extendedResourceClaimStatus`; later filters count its devices as taken."""

from __future__ import annotations

import asyncio

from extender.binder import InMemoryBinder
from extender.claims import DELETE_PROTECTION_FINALIZER
from extender.core.extended import CLAIM_ANNOTATION
from tests.core import small_cluster as c
from tests.extended.test_extended import GPU, cluster, gpu_pod, limits


def test_bind_creates_the_claim_and_records_it_on_the_pod() -> None:
    placement = c.placement(cluster())
    binder = InMemoryBinder(placement.state, placement)
    pod = gpu_pod(limits("main", {GPU: "3"}))
    assert placement.filter(pod, ["dra"]).passed == ["dra"]  # seen in filter, as the scheduler does
    outcome = asyncio.run(binder.bind(namespace="default", name="job", uid="job-uid", node="dra"))
    placement.worker.close()
    assert outcome.error == ""
    [made] = [
        x
        for x in placement.state.list("ResourceClaim")
        if (x["metadata"].get("annotations") or {}).get(CLAIM_ANNOTATION) == "true"
    ]
    meta = made["metadata"]
    assert (
        meta["name"].startswith("job-extended-resources-")
        and len(meta["name"]) == len("job-extended-resources-") + 5
    )
    assert meta["uid"] and meta["finalizers"] == [DELETE_PROTECTION_FINALIZER]
    assert meta["ownerReferences"][0]["uid"] == "job-uid"
    results = made["status"]["allocation"]["devices"]["results"]
    assert len(results) == 3 and {r["request"] for r in results} == {"container-0-request-0"}
    assert made["status"]["reservedFor"] == [{"resource": "pods", "name": "job", "uid": "job-uid"}]
    bound = placement.state.get("Pod", "job", "default")
    assert bound is not None and bound["spec"]["nodeName"] == "dra"
    assert bound["status"]["extendedResourceClaimStatus"] == {
        "requestMappings": [
            {"containerName": "main", "resourceName": GPU, "requestName": "container-0-request-0"}
        ],
        "resourceClaimName": meta["name"],
    }
    # One of the node's 4 GPUs is left.
    other = c.parse_pod(
        {
            "metadata": {"name": "other", "namespace": "default", "uid": "other-uid"},
            "spec": {"containers": [limits("main", {GPU: "2"})]},
        }
    )
    verdict = placement.filter(other, ["dra"])
    assert verdict.passed == [] and "dra" in verdict.failed


def test_a_pod_without_extended_resources_does_not_look_for_its_claim(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`for_node` answers "not an extended-resource pod" before indexing the annotated claims:
    that index is rebuilt per claims generation, which each bind moves (O(claims) per bind)."""
    from extender.core import extended

    placement = c.placement(cluster())
    looked: list[str] = []
    monkeypatch.setattr(extended, "stale_claim", lambda pod, state: looked.append(pod.name))
    plain = gpu_pod(limits("main", {"cpu": "1"}))
    assert extended.for_node(plain, "dra", placement.state) is None
    assert looked == []
    extended.for_node(gpu_pod(limits("main", {GPU: "1"})), "dra", placement.state)
    assert looked and set(looked) == {"job"}  # an extended-resource pod still looks for an earlier claim
    placement.worker.close()
