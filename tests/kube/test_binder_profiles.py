"""KubeBinder with `scheduler_names`: the pods of other profiles are bound, their claims never allocated.

Issue 22 item 6. With config/scheduler-allocator.yaml the extender is the one binder of both
profiles; with `scheduler_names: [<allocator profile>]` a default-scheduler pod, whose claims the
in-tree plugin allocated at PreBind, gets only its Binding, and one whose claim is still pending
is refused (reason `other_profile`) with nothing written.
"""

from __future__ import annotations

from extender.kube.binder import KubeBinder
from extender.verdicts import OK, OTHER_PROFILE
from tests.fakeapi.server import FakeApiServer
from tests.kube.cluster import BINDING, NAMESPACE, Harness, reserve_as_in_tree, seed, writes

OURS = "dra-topology-scheduler"


def _harness(api: FakeApiServer) -> Harness:
    harness = Harness(api)
    harness.binder.close()
    harness.binder = KubeBinder(api.api_client(), harness.state, harness.placement, scheduler_names=(OURS,))
    return harness


def _seed(api: FakeApiServer, scheduler: str) -> None:
    """One node with one GPU, claim c1 for one GPU, pod p1 (of `scheduler`) using it."""
    seed(api, gpus={"n1": 1}, claims={"c1": 1}, pods={"p1": ["c1"]}, scheduler=scheduler)


async def test_pending_claim_of_another_profile_is_refused_and_nothing_is_written(fake_api: FakeApiServer):
    """No finalizer, no allocation, no Binding: the other profile's allocator has not run yet."""
    _seed(fake_api, "default-scheduler")
    async with _harness(fake_api) as h:
        fake_api.clear_request_log()
        error, reason = await h.bind("p1", "n1")
        assert reason == OTHER_PROFILE
        assert (
            "schedulerName default-scheduler" in error and f"claim {NAMESPACE}/c1 is not allocated" in error
        )
        assert writes(fake_api) == []
        assert len(h.placement.assumed) == 0


async def test_allocated_claim_of_another_profile_gets_only_the_binding(fake_api: FakeApiServer):
    """What the in-tree plugin wrote at PreBind stays as it is; the pod is bound."""
    _seed(fake_api, "default-scheduler")
    before = reserve_as_in_tree(fake_api, claim_name="c1", pod_name="p1", node_name="n1", devices=["gpu-0"])
    async with _harness(fake_api) as h:
        await h.caught_up()
        fake_api.clear_request_log()
        assert await h.bind("p1", "n1") == ("", OK)
        assert writes(fake_api) == [BINDING]
        assert h.claim("c1") == before


async def test_pending_claim_of_a_listed_profile_is_allocated(fake_api: FakeApiServer):
    """The control: the same pod in the listed profile gets its claim allocated and is bound."""
    _seed(fake_api, OURS)
    async with _harness(fake_api) as h:
        assert await h.bind("p1", "n1") == ("", OK)
        assert (h.claim("c1").get("status") or {}).get("allocation")
