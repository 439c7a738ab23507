"""KubeBinder against the fake API server with the real `kubernetes` client and the real watch.

Scope: what bind writes in allocator mode (finalizer, status.allocation, status.reservedFor,
then the Binding) and in the default profile (only the Binding); 409 retries; claims
allocated elsewhere or deleted mid-bind; undo after partial writes; concurrent binds on the
last free device; leadership; template-generated claims. The cluster state is fed by
`extender.kube.watch.KubeSource` watching the fake server, as in production.
"""

from __future__ import annotations

import asyncio

import pytest

from extender.claims import DELETE_PROTECTION_FINALIZER
from extender.kube.binder import LOST_ANSWER_READS
from extender.pods import parse_pod
from extender.verdicts import (
    ALLOCATED_ELSEWHERE,
    API_ERROR,
    CLAIM_GONE,
    CONFLICT,
    NO_FIT,
    NOT_LEADER,
    OK,
    POD_GONE,
)
from tests.fakeapi.server import FakeApiServer, RequestInfo
from tests.kube.cluster import (
    BINDING,
    NAMESPACE,
    Harness,
    allocated_devices,
    allocation,
    claim,
    pod,
    reserve_as_in_tree,
    reserved_uids,
    seed,
    until,
    writes,
)

CLAIM_UPDATE = ("update", "resourceclaims", "")
STATUS_UPDATE = ("update", "resourceclaims", "status")


def untouched(claim_obj: dict) -> bool:
    """Nothing a bind writes is on the claim."""
    return (
        DELETE_PROTECTION_FINALIZER not in (claim_obj["metadata"].get("finalizers") or [])
        and not (claim_obj.get("status") or {}).get("allocation")
        and not reserved_uids(claim_obj)
    )


async def test_allocator_mode_writes_finalizer_then_status_then_binding(fake_api: FakeApiServer):
    """A pending claim gets the finalizer, its allocation and the pod's reservation; then the Binding."""
    seed(fake_api, gpus={"n1": 2}, claims={"c1": 2}, pods={"p1": ["c1"]})
    async with Harness(fake_api) as h:
        fake_api.clear_request_log()
        assert await h.bind("p1", "n1") == ("", OK)
        assert writes(fake_api) == [CLAIM_UPDATE, STATUS_UPDATE, BINDING]
        c1, p1 = h.claim("c1"), h.pod("p1")
        assert c1["metadata"]["finalizers"] == [DELETE_PROTECTION_FINALIZER]
        assert sorted(allocated_devices(c1)) == ["n1/gpu-0", "n1/gpu-1"]
        assert c1["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0][
            "values"
        ] == ["n1"]
        assert c1["status"]["reservedFor"] == [
            {"resource": "pods", "name": "p1", "uid": p1["metadata"]["uid"]}
        ]
        assert p1["spec"]["nodeName"] == "n1"


async def test_the_pod_is_assumed_on_its_node_while_its_writes_are_in_flight(fake_api: FakeApiServer):
    """Gang members scored during a bind see the pod on its node from the moment its devices are
    chosen (kube-scheduler scores the next member while this bind writes); a failed bind forgets
    it."""
    seed(fake_api, gpus={"n1": 2}, claims={"c1": 1, "c2": 1}, pods={"p1": ["c1"], "p2": ["c2"]})
    async with Harness(fake_api) as h:
        p1_uid = h.pod("p1")["metadata"]["uid"]
        seen_during_write: list[dict[str, str]] = []

        def look(info: RequestInfo) -> None:
            if (info.verb, info.resource, info.subresource) == STATUS_UPDATE:
                seen_during_write.append(h.placement.assumed.pod_nodes())

        fake_api.on_request = look
        assert await h.bind("p1", "n1") == ("", OK)
        assert seen_during_write and seen_during_write[0].get(p1_uid) == "n1"
        fake_api.on_request = None
        p2_uid = h.pod("p2")["metadata"]["uid"]
        fake_api.fail_next(1, 500, verb="update", resource="ResourceClaim", subresource="status")
        outcome = await h.bind("p2", "n1")
        assert outcome[1] != OK
        assert p2_uid not in h.placement.assumed.pod_nodes()


async def test_assumed_devices_are_excluded_until_the_watch_shows_the_write(fake_api: FakeApiServer):
    """While bind writes, the devices are assumed; once the watch delivers the claim, the written
    allocation holds them and the assumed entry is dropped by the next reader (no double count)."""
    seed(fake_api, gpus={"n1": 2}, claims={"c1": 1, "c2": 1}, pods={"p1": ["c1"], "p2": ["c2"]})
    async with Harness(fake_api) as h:
        assumed_during_binding: list[bool] = []

        def look(info: RequestInfo) -> None:
            if (info.verb, info.resource, info.subresource) == BINDING:
                uid = fake_api.get_object("ResourceClaim", "c1", NAMESPACE)["metadata"]["uid"]
                assumed_during_binding.append(uid in h.placement.assumed.active())

        fake_api.on_request = look
        assert await h.bind("p1", "n1") == ("", OK)
        fake_api.on_request = None
        assert assumed_during_binding == [True]
        c1_uid = h.claim("c1")["metadata"]["uid"]
        await h.caught_up()
        assert c1_uid not in h.placement.assumed.active()  # settled: the state shows the write
        assert await h.bind("p2", "n1") == ("", OK)
        assert allocated_devices(h.claim("c1")) != allocated_devices(h.claim("c2"))


async def test_a_deleted_claims_devices_are_free_for_the_next_filter(fake_api: FakeApiServer):
    """A bound claim released and deleted frees its devices for the very next filter. Its assumed
    entry used to stay until the next bind pruned it or the assume TTL (60 s) ended, and every
    filter in between found the devices "in use" (seen in the e2e list-attribute cases)."""
    seed(fake_api, gpus={"n1": 1}, claims={"c1": 1, "c2": 1}, pods={"p1": ["c1"], "p2": ["c2"]})
    async with Harness(fake_api) as h:
        assert await h.bind("p1", "n1") == ("", OK)
        await h.caught_up()
        released = h.claim("c1")
        released["metadata"]["finalizers"] = []
        released.pop("status")
        fake_api.put_object(released)
        fake_api.delete_object("ResourceClaim", "c1", NAMESPACE)
        fake_api.delete_object("Pod", "p1", NAMESPACE)
        await h.caught_up()
        verdict = await h.placement.worker.run(h.placement.filter, parse_pod(h.pod("p2")), ["n1"])
        assert verdict.passed == ["n1"], verdict
        assert len(h.placement.assumed) == 0


async def test_conflict_on_status_write_is_retried(fake_api: FakeApiServer):
    """Someone bumps the claim's resourceVersion between our read and our status write: 409,
    re-read, write again, success."""
    seed(fake_api, gpus={"n1": 1}, claims={"c1": 1}, pods={"p1": ["c1"]})
    bumped: list[str] = []

    def bump_once(info: RequestInfo) -> None:
        if (info.verb, info.resource, info.subresource) == STATUS_UPDATE and not bumped:
            current = fake_api.get_object("ResourceClaim", "c1", NAMESPACE)
            current["metadata"].setdefault("labels", {})["touched"] = "yes"
            bumped.append(fake_api.put_object(current)["metadata"]["resourceVersion"])

    async with Harness(fake_api) as h:
        fake_api.clear_request_log()
        fake_api.on_request = bump_once
        assert await h.bind("p1", "n1") == ("", OK)
        assert writes(fake_api) == [CLAIM_UPDATE, STATUS_UPDATE, STATUS_UPDATE, BINDING]
        assert ("get", "resource.k8s.io", "resourceclaims", "", NAMESPACE) in fake_api.request_log()
        c1 = h.claim("c1")
        assert c1["metadata"]["labels"] == {"touched": "yes"}  # the other writer's change survives
        assert allocated_devices(c1) == ["n1/gpu-0"]
        assert reserved_uids(c1) == [h.pod("p1")["metadata"]["uid"]]


async def test_conflicts_beyond_the_retry_budget_fail_cleanly(fake_api: FakeApiServer):
    """A claim that changes before every write gives up with `conflict` and keeps nothing of ours."""
    seed(fake_api, gpus={"n1": 1}, claims={"c1": 1}, pods={"p1": ["c1"]})

    def always_bump(info: RequestInfo) -> None:
        if (info.verb, info.resource, info.subresource) == STATUS_UPDATE:
            current = fake_api.get_object("ResourceClaim", "c1", NAMESPACE)
            fake_api.put_object(current)

    async with Harness(fake_api) as h:
        fake_api.on_request = always_bump
        error, reason = await h.bind("p1", "n1")
        fake_api.on_request = None
        assert reason == CONFLICT and "still conflicting" in error
        assert untouched(h.claim("c1"))
        assert len(h.placement.assumed) == 0
        assert "nodeName" not in h.pod("p1")["spec"]


async def test_claim_allocated_elsewhere_during_bind_undoes_everything(fake_api: FakeApiServer):
    """The pod's second claim is allocated by another scheduler while we write it: the bind
    fails, the first claim loses our allocation, reservation and finalizer, no Binding."""
    seed(fake_api, gpus={"n1": 4}, claims={"c1": 1, "c2": 1}, pods={"p1": ["c1", "c2"]})
    other = {"resource": "pods", "name": "other", "uid": "uid-of-other"}

    seen: list[tuple[str, str, str, str]] = []

    def steal_c2(info: RequestInfo) -> None:
        seen.append((info.verb, info.resource, info.subresource, info.name))
        if (info.verb, info.resource, info.subresource, info.name) == (*STATUS_UPDATE, "c2"):
            current = fake_api.get_object("ResourceClaim", "c2", NAMESPACE)
            if not (current.get("status") or {}).get("allocation"):
                current["status"] = {"allocation": allocation("n1", ["gpu-3"]), "reservedFor": [other]}
                fake_api.put_object(current)

    async with Harness(fake_api) as h:
        fake_api.clear_request_log()
        fake_api.on_request = steal_c2
        error, reason = await h.bind("p1", "n1")
        fake_api.on_request = None
        assert reason == ALLOCATED_ELSEWHERE, error
        assert "c2" in error and "allocated elsewhere" in error
        # c1 was fully written first, then rolled back: status first, finalizer last.
        c1_writes = [entry[:3] for entry in seen if entry[3] == "c1" and entry[0] == "update"]
        assert c1_writes == [CLAIM_UPDATE, STATUS_UPDATE, STATUS_UPDATE, CLAIM_UPDATE]
        assert untouched(h.claim("c1"))
        c2 = h.claim("c2")
        assert allocated_devices(c2) == ["n1/gpu-3"] and reserved_uids(c2) == ["uid-of-other"]
        # The finalizer now protects the other scheduler's allocation: it stays.
        assert c2["metadata"]["finalizers"] == [DELETE_PROTECTION_FINALIZER]
        assert BINDING not in writes(fake_api)
        assert "nodeName" not in h.pod("p1")["spec"]
        assert len(h.placement.assumed) == 0


async def test_claim_allocated_elsewhere_before_bind_reads_it(fake_api: FakeApiServer):
    """The watch has not shown the foreign allocation yet: our first write 409s, the re-read
    shows it, and we stop without writing anything."""
    seed(fake_api, gpus={"n1": 2}, claims={"c1": 1}, pods={"p1": ["c1"]})
    async with Harness(fake_api) as h:
        fake_api.stall_watches("resourceclaims")
        current = h.claim("c1")
        current["metadata"]["finalizers"] = [DELETE_PROTECTION_FINALIZER]
        current["status"] = {
            "allocation": allocation("n1", ["gpu-1"]),
            "reservedFor": [{"resource": "pods", "name": "x", "uid": "x"}],
        }
        fake_api.put_object(current)
        fake_api.clear_request_log()
        error, reason = await h.bind("p1", "n1")
        assert reason == ALLOCATED_ELSEWHERE, error
        assert writes(fake_api) == [CLAIM_UPDATE]  # sent with the stale resourceVersion: 409
        assert reserved_uids(h.claim("c1")) == ["x"]
        fake_api.unstall("resourceclaims")


async def test_claim_deleted_during_bind_fails_and_releases_our_finalizer(fake_api: FakeApiServer):
    """The claim is deleted between our finalizer and status writes: claim_gone; removing our
    finalizer lets the deletion complete; the other claim is rolled back."""
    seed(fake_api, gpus={"n1": 4}, claims={"c1": 1, "c2": 1}, pods={"p1": ["c1", "c2"]})

    def delete_c2(info: RequestInfo) -> None:
        if (info.verb, info.resource, info.subresource, info.name) == (*STATUS_UPDATE, "c2"):
            fake_api.delete_object("ResourceClaim", "c2", NAMESPACE)

    async with Harness(fake_api) as h:
        fake_api.clear_request_log()
        fake_api.on_request = delete_c2
        error, reason = await h.bind("p1", "n1")
        fake_api.on_request = None
        assert reason == CLAIM_GONE, error
        assert "being deleted" in error
        assert fake_api.get_object("ResourceClaim", "c2", NAMESPACE) is None  # deletion completed
        assert untouched(h.claim("c1"))
        assert BINDING not in writes(fake_api)
        assert len(h.placement.assumed) == 0


async def test_claim_without_finalizer_deleted_during_bind(fake_api: FakeApiServer):
    """A claim that vanishes before our first write (404) fails the bind with claim_gone."""
    seed(fake_api, gpus={"n1": 1}, claims={"c1": 1}, pods={"p1": ["c1"]})

    def delete_c1(info: RequestInfo) -> None:
        if (info.verb, info.resource, info.subresource) == CLAIM_UPDATE:
            fake_api.delete_object("ResourceClaim", "c1", NAMESPACE)

    async with Harness(fake_api) as h:
        fake_api.on_request = delete_c1
        error, reason = await h.bind("p1", "n1")
        fake_api.on_request = None
        assert reason == CLAIM_GONE and "deleted" in error
        assert "nodeName" not in h.pod("p1")["spec"]
        assert len(h.placement.assumed) == 0


async def test_binding_failure_after_claim_writes_undoes_them(fake_api: FakeApiServer):
    """The Binding POST fails (500): the claims written for the pod are rolled back."""
    seed(fake_api, gpus={"n1": 2}, claims={"c1": 1, "c2": 1}, pods={"p1": ["c1", "c2"]})
    async with Harness(fake_api) as h:
        fake_api.fail_next(1, status=500, verb="create", resource="pods", subresource="binding")
        error, reason = await h.bind("p1", "n1")
        assert reason == API_ERROR and "500" in error
        assert untouched(h.claim("c1")) and untouched(h.claim("c2"))
        assert len(h.placement.assumed) == 0
        await h.caught_up()
        assert await h.bind("p1", "n1") == ("", OK)  # the scheduler's retry succeeds


async def test_a_binding_whose_answer_is_lost_is_kept(fake_api: FakeApiServer):
    """The Binding reaches the API server, but the connection drops before its answer (the fault
    tests cut every connection mid-burst): the pod is bound, so the bind succeeded and its claims
    stay allocated and reserved. Undoing them (as for a refused Binding) left a bound pod
    without its devices."""
    seed(fake_api, gpus={"n1": 2}, claims={"c1": 1}, pods={"p1": ["c1"]})
    async with Harness(fake_api) as h:
        fake_api.lose_answer_next(1, verb="create", resource="pods", subresource="binding")
        assert await h.bind("p1", "n1") == ("", OK)
        assert h.pod("p1")["spec"]["nodeName"] == "n1"
        claim = h.claim("c1")
        assert claim["status"]["allocation"]["devices"]["results"]
        assert [r["name"] for r in claim["status"]["reservedFor"]] == ["p1"]


async def test_a_lost_binding_answer_while_the_api_server_is_away_keeps_the_claims(fake_api: FakeApiServer):
    """The Binding is made but its answer is lost, and the pod cannot be read back (the API server
    restarting: the fault test's pod bound without its claims). The bind fails, but its claims
    stay allocated and reserved for the pod, and the scheduler's retry succeeds."""
    seed(fake_api, gpus={"n1": 2}, claims={"c1": 1}, pods={"p1": ["c1"]})
    async with Harness(fake_api) as h:
        fake_api.lose_answer_next(1, verb="create", resource="pods", subresource="binding")
        fake_api.fail_next(LOST_ANSWER_READS, status=503, verb="get", resource="pods")
        error, reason = await h.bind("p1", "n1")
        assert reason == API_ERROR and "not known to be bound" in error
        assert h.pod("p1")["spec"]["nodeName"] == "n1"
        claim = h.claim("c1")
        assert allocated_devices(claim) and reserved_uids(claim) == [h.pod("p1")["metadata"]["uid"]]
        assert len(h.placement.assumed) == 1  # kept until the watch shows the write
        await h.caught_up()
        assert await h.bind("p1", "n1") == ("", OK)


async def test_a_binding_lost_on_the_way_keeps_the_claims_for_the_retry(fake_api: FakeApiServer):
    """The Binding never reaches the API server and its connection drops: the pod reads as
    unbound, but a request lost this way cannot be told from one the server is still carrying
    out, so the claims stay the pod's. The retry on the same node writes only the Binding, and
    the kept devices are not given to another pod meanwhile."""
    seed(fake_api, gpus={"n1": 1}, claims={"c1": 1, "c2": 1}, pods={"p1": ["c1"], "p2": ["c2"]})
    async with Harness(fake_api) as h:
        fake_api.drop_next(1, verb="create", resource="pods", subresource="binding")
        error, reason = await h.bind("p1", "n1")
        assert reason == API_ERROR and "not known to be bound" in error
        assert not h.pod("p1")["spec"].get("nodeName")
        assert reserved_uids(h.claim("c1")) == [h.pod("p1")["metadata"]["uid"]]
        assert (await h.bind("p2", "n1"))[1] == NO_FIT
        await h.caught_up()
        fake_api.clear_request_log()
        assert await h.bind("p1", "n1") == ("", OK)
        assert writes(fake_api) == [BINDING]
        assert h.pod("p1")["spec"]["nodeName"] == "n1"


@pytest.mark.parametrize("contenders", [2, 3])
async def test_concurrent_binds_on_the_last_free_device(fake_api: FakeApiServer, contenders: int):
    """Several pods race for one free GPU: exactly one bind wins, the others fail with no_fit,
    and no device ends up in two claims."""
    claims = {f"c{i}": 1 for i in range(contenders)}
    pods = {f"p{i}": [f"c{i}"] for i in range(contenders)}
    seed(fake_api, gpus={"n1": 1}, claims=claims, pods=pods)
    async with Harness(fake_api) as h:
        results = await asyncio.gather(*(h.bind(f"p{i}", "n1") for i in range(contenders)))
        reasons = [reason for _, reason in results]
        assert reasons.count(OK) == 1 and reasons.count(NO_FIT) == contenders - 1, results
        allocated = [d for c in fake_api.list_objects("ResourceClaim") for d in allocated_devices(c)]
        assert allocated == ["n1/gpu-0"]
        assert writes(fake_api).count(BINDING) == 1
        assert len(h.placement.assumed) == 1


async def test_default_profile_pod_gets_only_a_binding(fake_api: FakeApiServer):
    """Claims the in-tree plugin allocated and reserved in PreBind are left untouched."""
    seed(fake_api, gpus={"n1": 1}, claims={"c1": 1}, pods={"p1": ["c1"]})
    before = reserve_as_in_tree(fake_api, claim_name="c1", pod_name="p1", node_name="n1", devices=["gpu-0"])
    async with Harness(fake_api) as h:
        fake_api.clear_request_log()
        assert await h.bind("p1", "n1") == ("", OK)
        assert writes(fake_api) == [BINDING]
        assert h.claim("c1") == before
        assert h.pod("p1")["spec"]["nodeName"] == "n1"
        assert len(h.placement.assumed) == 0


async def test_pod_without_claims_is_read_from_the_api_and_bound(fake_api: FakeApiServer):
    """Pods without claims are not watched: the binder reads the pod and only binds it."""
    seed(fake_api, gpus={"n1": 1}, claims={}, pods={})
    plain = pod("web", [])
    del plain["spec"]["resourceClaims"]
    fake_api.put_object(plain)
    async with Harness(fake_api) as h:
        fake_api.clear_request_log()
        assert await h.bind("web", "n1") == ("", OK)
        assert writes(fake_api) == [BINDING]
        assert h.pod("web")["spec"]["nodeName"] == "n1"


async def test_shared_allocated_claim_gets_the_new_pod_reserved(fake_api: FakeApiServer):
    """A claim already allocated for another pod is not re-allocated; the pod is added to reservedFor."""
    seed(fake_api, gpus={"n1": 1}, claims={"shared": 1}, pods={"p1": ["shared"], "p2": ["shared"]})
    async with Harness(fake_api) as h:
        assert await h.bind("p1", "n1") == ("", OK)
        await h.caught_up()
        fake_api.clear_request_log()
        assert await h.bind("p2", "n1") == ("", OK)
        assert writes(fake_api) == [STATUS_UPDATE, BINDING]
        shared = h.claim("shared")
        assert allocated_devices(shared) == ["n1/gpu-0"]
        assert reserved_uids(shared) == [h.pod("p1")["metadata"]["uid"], h.pod("p2")["metadata"]["uid"]]


async def test_bind_is_idempotent_when_the_pod_is_already_bound_there(fake_api: FakeApiServer):
    """A repeated bind (the first answer was lost) succeeds without writing again."""
    seed(fake_api, gpus={"n1": 1}, claims={"c1": 1}, pods={"p1": ["c1"]})
    async with Harness(fake_api) as h:
        assert await h.bind("p1", "n1") == ("", OK)
        await h.caught_up()
        fake_api.clear_request_log()
        assert await h.bind("p1", "n1") == ("", OK)
        assert writes(fake_api) == []
        error, reason = await h.bind("p1", "n2")
        assert reason == CONFLICT and "already bound to node n1" in error


async def test_pod_uid_mismatch_is_refused(fake_api: FakeApiServer):
    """A bind for a pod that was re-created (new UID) fails without writes."""
    seed(fake_api, gpus={"n1": 1}, claims={"c1": 1}, pods={"p1": ["c1"]})
    async with Harness(fake_api) as h:
        fake_api.clear_request_log()
        outcome = await h.binder.bind(namespace=NAMESPACE, name="p1", uid="stale-uid", node="n1")
        error, reason = outcome.error, outcome.reason
        assert reason == POD_GONE, error
        assert writes(fake_api) == []


async def test_template_claim_not_created_yet_is_an_error(fake_api: FakeApiServer):
    """A template pod whose generated claim does not exist yet is refused so the scheduler retries."""
    seed(fake_api, gpus={"n1": 1}, claims={}, pods={})
    templated = pod("t1", [])
    templated["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    fake_api.put_object(templated)
    async with Harness(fake_api) as h:
        fake_api.clear_request_log()
        error, reason = await h.bind("t1", "n1")
        assert reason == CLAIM_GONE and "not created yet" in error
        assert writes(fake_api) == []


async def test_template_generated_claim_is_allocated(fake_api: FakeApiServer):
    """The claim the resourceclaim controller generated (owned by the pod) is found and allocated."""
    seed(fake_api, gpus={"n1": 1}, claims={}, pods={})
    templated = pod("t1", [])
    templated["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    stored = fake_api.put_object(templated)
    generated = claim("t1-gpu-x7k2p")
    generated["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "gpu"}
    generated["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "t1",
            "uid": stored["metadata"]["uid"],
            "controller": True,
        }
    ]
    fake_api.put_object(generated)
    stored["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "t1-gpu-x7k2p"}]}
    fake_api.put_object(stored)
    async with Harness(fake_api) as h:
        await h.caught_up()
        assert await h.bind("t1", "n1") == ("", OK)
        assert allocated_devices(h.claim("t1-gpu-x7k2p")) == ["n1/gpu-0"]


class _Follower:
    identity = "replica-b"
    lease_ref = "kube-system/dra-topology-extender"

    def is_leader(self) -> bool:
        return False

    def holder(self) -> str:
        return "replica-a"


async def test_non_leader_refuses_without_touching_anything(fake_api: FakeApiServer):
    """A follower answers with an error naming the Lease and its holder, and sends no request."""
    seed(fake_api, gpus={"n1": 1}, claims={"c1": 1}, pods={"p1": ["c1"]})
    async with Harness(fake_api, elector=_Follower()) as h:
        uid = h.pod("p1")["metadata"]["uid"]
        fake_api.clear_request_log()
        outcome = await h.binder.bind(namespace=NAMESPACE, name="p1", uid=uid, node="n1")
        error, reason = outcome.error, outcome.reason
        assert reason == NOT_LEADER
        assert (
            "not the leader" in error
            and "kube-system/dra-topology-extender" in error
            and "replica-a" in error
        )
        assert [entry for entry in fake_api.request_log() if entry[0] not in ("watch", "list")] == []
        assert len(h.placement.assumed) == 0


class _Flippable:
    """A leader that loses the Lease when the test says so."""

    identity = "replica-a"
    lease_ref = "kube-system/dra-topology-extender"

    def __init__(self) -> None:
        self.leading = True

    def is_leader(self) -> bool:
        return self.leading

    def holder(self) -> str:
        return "replica-a" if self.leading else "replica-b"


async def test_losing_leadership_mid_bind_stops_before_the_next_write(fake_api: FakeApiServer):
    """Leadership is re-checked before each write: the bind stops and undoes what it wrote."""
    seed(fake_api, gpus={"n1": 2}, claims={"c1": 1, "c2": 1}, pods={"p1": ["c1", "c2"]})
    leader = _Flippable()

    def lose_after_first_status_write(info: RequestInfo) -> None:
        if (info.verb, info.resource, info.subresource, info.name) == (*STATUS_UPDATE, "c1"):
            leader.leading = False

    async with Harness(fake_api, elector=leader) as h:
        fake_api.on_request = lose_after_first_status_write
        error, reason = await h.bind("p1", "n1")
        fake_api.on_request = None
        assert reason == NOT_LEADER and "replica-b" in error
        assert untouched(h.claim("c1")) and untouched(h.claim("c2"))
        assert "nodeName" not in h.pod("p1")["spec"]
        assert len(h.placement.assumed) == 0


async def test_a_cancelled_request_does_not_interrupt_the_bind(fake_api: FakeApiServer):
    """The scheduler hanging up mid-bind must not leave a claim half-written: the bind finishes."""
    seed(fake_api, gpus={"n1": 1}, claims={"c1": 1}, pods={"p1": ["c1"]})

    async def slow_status(info: RequestInfo) -> None:
        if (info.verb, info.resource, info.subresource) == STATUS_UPDATE:
            await asyncio.sleep(0.3)

    async with Harness(fake_api) as h:
        fake_api.on_request = slow_status
        request = asyncio.create_task(h.bind("p1", "n1"))
        await asyncio.sleep(0.15)
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
        await until(lambda: h.pod("p1")["spec"].get("nodeName") == "n1", what="the shielded bind to finish")
        c1 = h.claim("c1")
        assert allocated_devices(c1) == ["n1/gpu-0"] and reserved_uids(c1) == [h.pod("p1")["metadata"]["uid"]]
