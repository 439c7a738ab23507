"""Which scheduler profiles' pods this extender places: the setting `scheduler_names`.

kube-scheduler sends an extender the pods of every profile of its configuration (extenders are a
top-level list), and with a `bindVerb` the extender is the one binder of all of them. So a
scheduler that runs the allocator profile beside `default-scheduler`
(config/scheduler-allocator.yaml) needs the extender to keep out of the other profile's way:

- filter: a pod of another profile passes on every node it was sent, without a look at the
  state (its profile's own plugins decide feasibility; the in-tree DynamicResources plugin its
  devices). This is answered on the event loop, so such a pod never waits for the worker;
- prioritize: every node scores 0, so the extender does not bend another profile's ranking;
- bind: the pod is still bound, since the scheduler has no other binder for it; its claims must
  already be allocated (by its profile's DynamicResources plugin at PreBind, which runs before
  bind). A claim still pending is refused, naming the setting, instead of allocated: this
  extender never checked the node for that pod's devices, and allocating for a profile it was
  told not to serve would make the setting a half-truth. Allocated claims get what every bind
  gives them (the pod in `reservedFor`, which PreBind has usually written already).

An empty `scheduler_names` (the default) places the pods of every profile, which is what the
shipped configurations need: deploy/ runs a scheduler with the allocator profile only, and
config/scheduler-advisory.yaml has `default-scheduler` only.
"""

from __future__ import annotations

from collections.abc import Collection

from extender.claims import PodClaims
from extender.pods import Pod


def places(scheduler_names: Collection[str], pod: Pod) -> bool:
    """True if the extender places this pod: `scheduler_names` is empty or names its profile."""
    return not scheduler_names or pod.scheduler_name in scheduler_names


def bind_refusal(scheduler_names: Collection[str], pod: Pod, claims: PodClaims) -> str:
    """Why bind must refuse a pod of a profile the extender does not place ('' if it may go on).

    Args:
        scheduler_names: the setting; the pod's profile is not in it when this is asked.
        pod: the pod to bind.
        claims: its claims as resolved against the state now.
    """
    if places(scheduler_names, pod) or not claims.pending:
        return ""
    refs = ", ".join(claim.ref for claim in claims.pending)
    pending = f"claim {refs} is" if len(claims.pending) == 1 else f"claims {refs} are"
    return (
        f"pod {pod.ref} has schedulerName {pod.scheduler_name}, which is not in scheduler_names "
        f"({', '.join(scheduler_names)}): this extender does not allocate claims for that profile, "
        f"and {pending} not allocated (its profile's DynamicResources plugin allocates at "
        "PreBind; add the profile to scheduler_names if it leaves allocation to this extender)"
    )
