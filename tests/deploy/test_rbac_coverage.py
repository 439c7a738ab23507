"""deploy/rbac.yaml grants exactly the API calls the extender makes: nothing missing, nothing extra.

The real code paths that talk to the API server run against the fake API server
(tests/fakeapi), which logs every request as `(verb, api group, resource, subresource,
namespace)`, the vocabulary RBAC authorizes:

- the watch source (`extender.kube.watch.KubeSource`, built by `wiring.build_kube_services`)
  lists and watches every kind until synced;
- the allocator-mode binder (`extender.kube.binder.KubeBinder`) binds a pod with a pending claim
  (claim update, status update, Binding), binds the same way through a 409 Conflict on the claim
  (which makes it re-read the claim), binds a pod without claims that the watch does not
  keep (which makes it read the pod), and binds a pod asking for an extended resource backed by
  DRA (claim create, pod status patch; a failed Binding first, whose undo deletes the claim);
- the leader elector (`extender.kube.lease.LeaderElector`) creates, renews and releases its Lease.

Settings (Lease name and namespace) come from deploy/deployment.yaml's own args and env, so the
Lease calls land in the namespace the Role covers. The test then checks both directions: every
logged call is allowed by a rule bound to the Deployment's ServiceAccount, and every
(api group, resource, verb) the rules grant was used by at least one call.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender import wiring
from extender.__main__ import build_parser
from extender.kube.binder import KubeBinder
from extender.kube.lease import LeaderElector
from extender.objects import Obj
from extender.settings import Settings, load_settings
from extender.verdicts import OK
from tests.fakeapi.server import FakeApiServer, RequestInfo, RequestLogEntry
from tests.kube.cluster import NAMESPACE, claim, device_class, gpu_slice, node, pod, until

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


# ------------------------------------------------------------------ RBAC model


@dataclass(frozen=True)
class Grant:
    """One (api group, resource[/subresource], verb) a rule allows, in a namespace or cluster-wide."""

    group: str
    resource: str
    verb: str
    namespace: str | None  # None: cluster-wide (ClusterRole via ClusterRoleBinding)

    def allows(self, entry: RequestLogEntry) -> bool:
        verb, group, resource, subresource, namespace = entry
        full = f"{resource}/{subresource}" if subresource else resource
        return (
            self.verb in (verb, "*")
            and self.group in (group, "*")
            and self.resource in (full, "*")
            and (self.namespace is None or self.namespace == namespace)
        )


def _load_rbac() -> list[Obj]:
    return [d for d in yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text(encoding="utf-8")) if d]


def _service_account() -> tuple[str, str]:
    deployment = yaml.safe_load((DEPLOY / "deployment.yaml").read_text(encoding="utf-8"))
    return deployment["metadata"]["namespace"], deployment["spec"]["template"]["spec"]["serviceAccountName"]


def grants_for(account: tuple[str, str], objects: list[Obj]) -> list[Grant]:
    """Every grant that rbac.yaml gives `account` (namespace, name) through its bindings."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects}
    grants: list[Grant] = []
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        subjects = {
            (s.get("namespace"), s["name"]) for s in binding["subjects"] if s["kind"] == "ServiceAccount"
        }
        if account not in subjects:
            continue
        ref = binding["roleRef"]
        scope = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        role = roles[(ref["kind"], scope if ref["kind"] == "Role" else None, ref["name"])]
        for rule in role["rules"]:
            # resourceNames would narrow a rule below what the request log can check.
            assert "resourceNames" not in rule, "rbac.yaml: resourceNames are not modelled by this test"
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        grants.append(Grant(group, resource, verb, scope))
    return grants


def test_grant_matching():
    """The matcher: subresources are separate resources, Roles only cover their own namespace."""
    status = Grant("resource.k8s.io", "resourceclaims/status", "update", None)
    assert status.allows(("update", "resource.k8s.io", "resourceclaims", "status", "ml"))
    assert not status.allows(("update", "resource.k8s.io", "resourceclaims", "", "ml"))
    lease = Grant("coordination.k8s.io", "leases", "get", "dra-system")
    assert lease.allows(("get", "coordination.k8s.io", "leases", "", "dra-system"))
    assert not lease.allows(("get", "coordination.k8s.io", "leases", "", "kube-system"))


# ------------------------------------------------------------------ driving the real code


def _deployment_settings() -> Settings:
    """The settings the Deployment's pods run with (args + env, downward API resolved)."""
    deployment = yaml.safe_load((DEPLOY / "deployment.yaml").read_text(encoding="utf-8"))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {
        v["name"]: v.get("value", deployment["metadata"]["namespace"])  # fieldRef: metadata.namespace
        for v in container.get("env", [])
    }
    settings = load_settings(build_parser().parse_args(container["args"]), env)
    # Keep numba's thread count of this test process as it is (a process-wide setting).
    return dataclasses.replace(settings, kernel_threads=0)


CLUSTER: list[Obj] = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
    node("gpu-node-1"),
    device_class(),
    gpu_slice("gpu-node-1", 4),
    claim("train-gpus", count=2),
    claim("eval-gpus", count=1),
    pod("train", ["train-gpus"]),
    pod("eval", ["eval-gpus"]),
    # Extended resources backed by DRA: a class that maps example.com/gpu, and a pod asking for
    # it in its limits (bind creates its claim, patches the pod's status, deletes the claim on undo).
    {
        **device_class(),
        "metadata": {"name": "gpu-by-resource"},
        "spec": {**device_class()["spec"], "extendedResourceName": "example.com/gpu"},
    },
    {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "render", "namespace": NAMESPACE},
        "spec": {
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"limits": {"example.com/gpu": "1"}}}
            ]
        },
        "status": {"phase": "Pending"},
    },
    # A plain pod of the default profile: extenders see every pod, and the watch keeps only pods
    # with claims, so the binder has to read this one from the API.
    {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": NAMESPACE},
        "spec": {"containers": [{"name": "main", "image": "nginx"}]},
    },
]


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer(bookmark_interval=0.05) as server:
        server.put_objects(CLUSTER)
        yield server


def _conflict_once(api: FakeApiServer, claim_name: str) -> Any:
    """on_request hook: the first claim update for `claim_name` finds the claim changed (409)."""
    fired = False

    def hook(info: RequestInfo) -> None:
        nonlocal fired
        if fired or (info.verb, info.resource, info.subresource, info.name) != (
            "update",
            "resourceclaims",
            "",
            claim_name,
        ):
            return
        fired = True
        changed = api.get_object("ResourceClaim", claim_name, NAMESPACE)
        assert changed is not None
        changed["metadata"].setdefault("labels", {})["touched-by"] = "someone-else"
        api.put_object(changed)  # new resourceVersion: the PUT in flight is now stale

    return hook


async def _exercise_everything(api: FakeApiServer) -> list[RequestLogEntry]:
    """Run watch, leader election and binder against `api`; return the request log."""
    settings = _deployment_settings()
    placement, _, source = wiring.build_kube_services(settings, api_client=api.api_client())
    elector = LeaderElector(
        api.api_client(),
        namespace=settings.leader_lease_namespace,
        name=settings.leader_lease_name,
        lease_duration=3.0,
        renew_deadline=2.0,
        retry_period=0.05,
    )
    binder = KubeBinder(api.api_client(), placement.state, placement, elector=elector)
    source.start()
    election = asyncio.create_task(elector.run())
    try:
        await until(source.synced, timeout=15, what="the watch to list every kind")
        await until(lambda: api.open_watches() >= 8, timeout=15, what="a watch on every kind")
        await until(elector.is_leader, timeout=10, what="leadership")
        renewals = len([e for e in api.request_log() if e[0] == "update" and e[2] == "leases"])
        await until(
            lambda: len([e for e in api.request_log() if e[0] == "update" and e[2] == "leases"]) > renewals,
            what="a Lease renewal",
        )

        async def bind(name: str) -> tuple[str, str]:
            uid = api.get_object("Pod", name, NAMESPACE)["metadata"]["uid"]  # type: ignore[index]
            outcome = await binder.bind(namespace=NAMESPACE, name=name, uid=uid, node="gpu-node-1")
            return outcome.error, outcome.reason

        assert await bind("train") == ("", OK)
        api.on_request = _conflict_once(api, "eval-gpus")
        assert await bind("eval") == ("", OK)
        api.on_request = None
        assert await bind("web") == ("", OK)
        api.fail_next(1, 500, verb="create", resource="pods", subresource="binding")
        assert (await bind("render"))[1] != OK  # the undo deletes the claim the bind created
        # Its devices count as held until the watch sees the deletion, as kube-scheduler's cache
        # does; the scheduler retries after a backoff, so wait for the watch, not a fixed time.
        await until(
            lambda: (
                not any(
                    c["metadata"]["name"].startswith("render-extended-resources-")
                    for c in placement.state.list("ResourceClaim")
                )
            ),
            what="the watch to see the undone claim deleted",
        )
        assert await bind("render") == ("", OK)
        for name in ("train", "eval", "web", "render"):
            assert api.get_object("Pod", name, NAMESPACE)["spec"]["nodeName"] == "gpu-node-1"  # type: ignore[index]
    finally:
        await elector.stop(release=True)
        await asyncio.wait_for(election, timeout=5)
        binder.close()
        await source.stop()
    lease = api.get_object("Lease", settings.leader_lease_name, settings.leader_lease_namespace)
    assert lease is not None and not lease["spec"].get("holderIdentity")  # released on stop
    return api.authorization_log()


async def test_rbac_allows_every_call_and_grants_nothing_unused(api):
    """Every API call of watch, binder and leader election is allowed; every granted verb is used."""
    log = await _exercise_everything(api)
    grants = grants_for(_service_account(), _load_rbac())
    assert grants, "no rules are bound to the Deployment's ServiceAccount"

    denied = sorted({entry for entry in log if not any(g.allows(entry) for g in grants)})
    assert not denied, f"calls deploy/rbac.yaml does not allow (verb, group, resource, sub, ns): {denied}"

    unused = sorted(
        {
            (g.group, g.resource, g.verb, g.namespace or "*")
            for g in grants
            if not any(g.allows(e) for e in log)
        }
    )
    assert not unused, f"rules in deploy/rbac.yaml no code path used (group, resource, verb, ns): {unused}"
