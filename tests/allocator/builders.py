"""Small builders for allocator tests: objects as the API would serve them, and one `run` call.

The builders return plain dicts (ResourceSlice, DeviceClass, ResourceClaim) so a test reads like
the cluster it describes; `run` parses them exactly as the service does and calls `allocate`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from extender.allocator.allocating import allocate
from extender.allocator.features import Features
from extender.allocator.inputs import AllocatedState, DeviceClassSpec, parse_device_class
from extender.allocator.model import parse_slice
from extender.allocator.pools import gather_pools
from extender.allocator.requests import parse_claim
from extender.allocator.results import ClaimAllocation
from extender.index.selecting import CachingEvaluator
from extender.objects import Obj

NODE: Obj = {"metadata": {"name": "node-1", "labels": {}}}


def device(name: str, **fields: Any) -> Obj:
    """A device entry; `attrs` is {name: value} with the value type inferred."""
    raw: Obj = {"name": name}
    attrs = fields.pop("attrs", None)
    if attrs:
        raw["attributes"] = {k: _attribute(v) for k, v in attrs.items()}
    capacity = fields.pop("capacity", None)
    if capacity:
        raw["capacity"] = {k: v if isinstance(v, dict) else {"value": str(v)} for k, v in capacity.items()}
    counters = fields.pop("counters", None)
    if counters:
        raw["consumesCounters"] = [
            {"counterSet": set_name, "counters": {k: {"value": str(v)} for k, v in values.items()}}
            for set_name, values in counters.items()
        ]
    raw.update(fields)
    return raw


def _attribute(value: Any) -> Obj:
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": str(value)}


def pool_slices(
    driver: str,
    pool: str,
    devices: Sequence[Obj],
    counter_sets: dict[str, dict[str, int | str]] | None = None,
    *,
    node: str = "node-1",
) -> list[Obj]:
    """The slices of one complete pool: devices, and (if given) a slice with the counter sets."""
    count = 2 if counter_sets else 1
    slices = [
        {
            "metadata": {"name": f"{driver}-{pool}-devices"},
            "spec": {
                "driver": driver,
                "pool": {"name": pool, "generation": 1, "resourceSliceCount": count},
                "nodeName": node,
                "devices": list(devices),
            },
        }
    ]
    if counter_sets:
        slices.append(
            {
                "metadata": {"name": f"{driver}-{pool}-counters"},
                "spec": {
                    "driver": driver,
                    "pool": {"name": pool, "generation": 1, "resourceSliceCount": count},
                    "nodeName": node,
                    "sharedCounters": [
                        {"name": set_name, "counters": {k: {"value": str(v)} for k, v in values.items()}}
                        for set_name, values in counter_sets.items()
                    ],
                },
            }
        )
    return slices


def device_class(name: str, driver: str) -> Obj:
    return {
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
    }


def request(name: str, class_name: str, count: int = 1, **fields: Any) -> Obj:
    return {"name": name, "exactly": {"deviceClassName": class_name, "count": count, **fields}}


def claim(name: str, requests: Sequence[Obj], constraints: Sequence[Obj] = ()) -> Obj:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": list(requests), "constraints": list(constraints)}},
    }


class Classes:
    def __init__(self, classes: Sequence[Obj]) -> None:
        self._classes = {c["metadata"]["name"]: parse_device_class(c) for c in classes}

    def get_class(self, name: str) -> DeviceClassSpec | None:
        return self._classes.get(name)


def run(
    slices: Sequence[Obj],
    classes: Sequence[Obj],
    claims: Sequence[Obj],
    *,
    features: Features | None = None,
    allocated: AllocatedState | None = None,
    node: Obj = NODE,
    **options: Any,
) -> list[ClaimAllocation] | None:
    """Allocate `claims` on `node` as the service would; raises what `allocate` raises.

    `options` go to `allocate` (stats, should_stop, prune_distinct, ...)."""
    features = features or Features()
    parsed = [parse_slice(s) for s in slices]
    by_pool: dict[Any, list[Any]] = {}
    for slice_ in parsed:
        by_pool.setdefault(slice_.pool_id, []).append(slice_)
    pools = gather_pools(parsed, node, features, all_slices_of_pool=by_pool)
    return allocate(
        [parse_claim(c) for c in claims],
        node=node,
        pools=pools,
        features=features,
        classes=Classes(classes),
        allocated=allocated or AllocatedState(),
        evaluator=CachingEvaluator(features),
        **options,
    )


def devices_of(allocations: list[ClaimAllocation] | None) -> list[list[str]]:
    """Device names per claim, in result order."""
    assert allocations is not None
    return [[r.device.name for r in a.devices] for a in allocations]


def placement_and_pod(
    slices: Sequence[Obj],
    classes: Sequence[Obj],
    claims: Sequence[Obj],
    *,
    features: Features | None = None,
    nodes: Sequence[Obj] = (NODE,),
    held: Sequence[Obj] = (),
) -> tuple[Any, Obj]:
    """A Placement over a cluster with these objects, and a pod that uses `claims` in order.

    `held` are extra (allocated) ResourceClaims owned by other pods.
    """
    from extender.cluster.state import ClusterState
    from extender.core.assumed import AssumeCache
    from extender.core.placement import Placement

    objects: list[Obj] = [{**n, "kind": "Node"} for n in nodes]
    objects += [{**s, "kind": "ResourceSlice"} for s in slices]
    objects += [{**c, "kind": "DeviceClass"} for c in classes]
    objects += [{**c, "kind": "ResourceClaim"} for c in (*claims, *held)]
    pod = {
        "metadata": {"name": "pod", "namespace": "default", "uid": "pod-uid"},
        "spec": {
            "resourceClaims": [
                {"name": f"c{i}", "resourceClaimName": c["metadata"]["name"]} for i, c in enumerate(claims)
            ]
        },
    }
    placement = Placement(
        ClusterState.from_objects(objects), features=features or Features(), assumed=AssumeCache()
    )
    return placement, pod
