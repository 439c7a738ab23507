"""Smoke benchmark of the fast tiers on a mixed fleet: /filter and /prioritize per claim shape.

Scope: in-process `Placement.filter` over every node, then `Placement.prioritize` on the nodes that
passed, for five claim shapes that used to fall to upstream's per-node Python search (one MIG
partition; two partitions on one parent GPU; one GPU with >= 40Gi; firstAvailable over H100 /
MI300X / an A100 3g partition; allocationMode All). The fleet: a quarter of the nodes 8x A100
publishing the full GPUs and 14 MIG partitions per GPU on shared counters (the full GPU consumes
them too), a quarter 8x H100, a quarter 8x MI300X, a quarter CPU-only; about 30% of A100 devices
held by running pods. It is a smoke test for this tier, not the project's benchmark (bench/).

How: the evaluation cache is cleared before every filter call (each call does a new pod's work);
prioritize re-uses its filter's evaluation, as in a scheduling cycle. `--before` disables the
first-fit tier (those nodes go to upstream's search, as before it existed) for comparison.
`time.perf_counter` around each call (and `time.process_time` around filter: the CPU it used,
which a machine shared with other jobs does not inflate), after one uncounted warm-up call per shape.

CLI: `python -m bench.tiers_smoke --nodes 1000 --calls 20 [--before]`.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Sequence

import numpy as np

from extender import wiring
from extender.allocator.features import Features
from extender.cluster.state import ClusterState
from extender.core.assumed import AssumeCache
from extender.core.placement import Placement
from extender.core.tiers import FirstFitTier
from extender.objects import Obj
from extender.pods import parse_pod
from extender.settings import Settings
from loadtests.generate import NAMESPACE, _device_classes, _Ids, _namespace, _slice, node_object

NV, AMD = "gpu.nvidia.com", "gpu.amd.com"
#: MIG profiles per A100 80GB: (profile, memory Gi, compute slices, how many are published)
PROFILES = (
    ("1g.10gb", 10, 1, 7),
    ("2g.20gb", 20, 2, 3),
    ("3g.40gb", 40, 3, 2),
    ("4g.40gb", 40, 4, 1),
    ("7g.80gb", 80, 7, 1),
)


def _gpu(name: str, product: str, memory: str, driver: str, uuid: str) -> Obj:
    return {
        "name": name,
        "attributes": {
            "type": {"string": "gpu"},
            "productName": {"string": product},
            "uuid": {"string": uuid},
        },
        "capacity": {"memory": {"value": memory}},
    }


def _a100_node(ids: _Ids, node: Obj) -> list[Obj]:
    name = node["metadata"]["name"]
    devices: list[Obj] = []
    counter_sets = []
    for g in range(8):
        uuid = f"{name}-gpu-{g}"
        counter_sets.append(
            {"name": f"gpu-{g}", "counters": {"memory": {"value": "80Gi"}, "compute": {"value": "7"}}}
        )
        full = _gpu(f"gpu-{g}", "A100", "80Gi", NV, uuid)
        full["consumesCounters"] = [
            {"counterSet": f"gpu-{g}", "counters": {"memory": {"value": "80Gi"}, "compute": {"value": "7"}}}
        ]
        devices.append(full)
        for profile, memory, compute, count in PROFILES:
            for i in range(count):
                devices.append(
                    {
                        "name": f"gpu-{g}-mig-{profile}-{i}",
                        "attributes": {
                            "type": {"string": "mig"},
                            "profile": {"string": profile},
                            "parentUUID": {"string": uuid},
                            "productName": {"string": "A100"},
                        },
                        "capacity": {"memory": {"value": f"{memory}Gi"}},
                        "consumesCounters": [
                            {
                                "counterSet": f"gpu-{g}",
                                "counters": {
                                    "memory": {"value": f"{memory}Gi"},
                                    "compute": {"value": str(compute)},
                                },
                            }
                        ],
                    }
                )
    return [
        _slice(ids, node, NV, devices, pool_slices=2),
        _slice(ids, node, NV, [], pool_slices=2, shared_counters=counter_sets),
    ]


def _plain_node(ids: _Ids, node: Obj, product: str, memory: str, driver: str) -> list[Obj]:
    name = node["metadata"]["name"]
    devices = [_gpu(f"gpu-{g}", product, memory, driver, f"{name}-gpu-{g}") for g in range(8)]
    return [_slice(ids, node, driver, devices)]


def mixed_fleet(nodes: int, seed: int) -> list[Obj]:
    """Nodes, slices, classes and one claim holding ~30% of the A100 devices.

    Objects come from the load tests' builders (`loadtests.generate`); their uids and slice names
    are drawn from a stream of their own, so `seed` picks the held partitions as it always did.
    """
    rng = random.Random(seed)
    ids = _Ids(random.Random(f"tiers-smoke-objects-{seed}"))
    objects: list[Obj] = [
        _namespace(ids),
        *_device_classes(ids, {"gpu": (f'device.driver in ["{NV}", "{AMD}"]',)}),
    ]
    held: list[Obj] = []
    for n in range(nodes):
        node = node_object(ids, n + 1, f"node-{n:05d}", {})
        objects.append(node)
        name = node["metadata"]["name"]
        kind = n % 4
        if kind == 0:
            slices = _a100_node(ids, node)
            taken: set[str] = set()
            for g in rng.sample(range(8), rng.randint(0, 5)):
                # A held partition or two on this GPU (counters charged), never beyond its memory.
                profile, _, _, _ = rng.choice(PROFILES[:3])
                taken.add(f"gpu-{g}-mig-{profile}-0")
            held += [{"request": "r", "driver": NV, "pool": name, "device": d} for d in sorted(taken)]
        elif kind == 1:
            slices = _plain_node(ids, node, "H100", "80Gi", NV)
        elif kind == 2:
            slices = _plain_node(ids, node, "MI300X", "192Gi", AMD)
        else:
            slices = []
        objects += slices
    objects.append(
        {
            "kind": "ResourceClaim",
            "metadata": {"name": "running", "namespace": NAMESPACE, "uid": "running-uid"},
            "spec": {"devices": {"requests": []}},
            "status": {"allocation": {"devices": {"results": held}}, "reservedFor": [{"uid": "running-pod"}]},
        }
    )
    return objects


def _sel(expression: str) -> list[Obj]:
    return [{"cel": {"expression": expression}}]


def _is(driver: str, name: str, value: str) -> str:
    """`driver`'s attribute `name` equals `value`; false (not a CEL error) on other drivers' devices."""
    return f'(device.driver == "{driver}" && device.attributes["{driver}"].{name} == "{value}")'


MIG_1G = f"{_is(NV, 'type', 'mig')} && {_is(NV, 'profile', '1g.10gb')}"
SHAPES: dict[str, Obj] = {
    "mig-1g": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "selectors": _sel(MIG_1G)}}]},
    "mig-2-same-parent": {
        "requests": [
            {"name": "r", "exactly": {"deviceClassName": "gpu", "count": 2, "selectors": _sel(MIG_1G)}}
        ],
        "constraints": [{"requests": [], "matchAttribute": f"{NV}/parentUUID"}],
    },
    "gpu-40gi": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "selectors": _sel(
        'device.attributes[device.driver].type == "gpu" && '
        'device.capacity[device.driver].memory.compareTo(quantity("40Gi")) >= 0')}}]},
    "first-available": {"requests": [{"name": "r", "firstAvailable": [
        {"name": "h100", "deviceClassName": "gpu", "selectors": _sel(_is(NV, "productName", "H100"))},
        {"name": "mi300x", "deviceClassName": "gpu", "selectors": _sel(_is(AMD, "productName", "MI300X"))},
        {"name": "a100-3g", "deviceClassName": "gpu", "selectors": _sel(
            f'{_is(NV, "type", "mig")} && {_is(NV, "profile", "3g.40gb")}')},
    ]}]},
    "all-a100": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "allocationMode": "All",
        "selectors": _sel(f'{_is(NV, "type", "gpu")} && {_is(NV, "productName", "A100")}')}}]},
}  # fmt: skip


def _pod_and_claim(shape: str, number: int) -> tuple[Obj, Obj]:
    claim: Obj = {
        "kind": "ResourceClaim",
        "metadata": {"name": f"{shape}-{number}", "namespace": NAMESPACE, "uid": f"{shape}-claim-{number}"},
        "spec": {"devices": SHAPES[shape]},
    }
    pod = {
        "metadata": {"name": f"{shape}-pod-{number}", "namespace": NAMESPACE, "uid": f"{shape}-pod-{number}"},
        "spec": {"resourceClaims": [{"name": "c", "resourceClaimName": claim["metadata"]["name"]}]},
    }
    return pod, claim


def run(nodes: int, calls: int, *, before: bool, seed: int = 1) -> dict[str, dict[str, float]]:
    """Per shape: filter and prioritize p50/p99 in ms, and how many nodes passed."""
    objects = mixed_fleet(nodes, seed)
    pods = {shape: [_pod_and_claim(shape, i) for i in range(calls + 1)] for shape in SHAPES}
    objects += [claim for pairs in pods.values() for _, claim in pairs]
    wiring.prepare_kernels(Settings())  # the service's kernel threads (1 by default) and warm-up
    placement = Placement(
        ClusterState.from_objects(objects), features=Features.from_gates(), assumed=AssumeCache()
    )
    if before:
        placement.tiers = tuple(tier for tier in placement.tiers if not isinstance(tier, FirstFitTier))
    names = [o["metadata"]["name"] for o in objects if o["kind"] == "Node"]
    placement.index()
    out: dict[str, dict[str, float]] = {}
    for shape, pairs in pods.items():
        filter_ms: list[float] = []
        filter_cpu_ms: list[float] = []  # process CPU time: what a loaded machine does not inflate
        prioritize_ms: list[float] = []
        passed = 0
        for number, (pod, _) in enumerate(pairs):
            placement.evaluations.clear()
            cpu = time.process_time()
            started = time.perf_counter()
            verdict = placement.filter(parse_pod(pod), names)
            middle = time.perf_counter()
            filter_cpu = time.process_time() - cpu
            placement.prioritize(parse_pod(pod), verdict.passed)
            ended = time.perf_counter()
            if number == 0:
                continue  # warm-up: CEL masks and kernel compilation
            filter_ms.append((middle - started) * 1000)
            filter_cpu_ms.append(filter_cpu * 1000)
            prioritize_ms.append((ended - middle) * 1000)
            passed = len(verdict.passed)
        out[shape] = {
            "filter_p50": float(np.percentile(filter_ms, 50)),
            "filter_p99": float(np.percentile(filter_ms, 99)),
            "filter_cpu_p50": float(np.percentile(filter_cpu_ms, 50)),
            "filter_cpu_p99": float(np.percentile(filter_cpu_ms, 99)),
            "prioritize_p50": float(np.percentile(prioritize_ms, 50)),
            "prioritize_p99": float(np.percentile(prioritize_ms, 99)),
            "passed": passed,
        }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--before", action="store_true", help="disable the first-fit tier")
    args = parser.parse_args(argv)
    results = run(args.nodes, args.calls, before=args.before)
    label = "before (search)" if args.before else "after (first-fit tier)"
    print(f"{args.nodes} nodes, {args.calls} calls per shape, {label}")
    print(
        f"{'shape':20} {'filter p50':>11} {'p99':>8} {'cpu p50':>8} {'p99':>8} "
        f"{'prio p50':>9} {'p99':>8} {'passed':>7}"
    )
    for shape, r in results.items():
        print(
            f"{shape:20} {r['filter_p50']:11.1f} {r['filter_p99']:8.1f} "
            f"{r['filter_cpu_p50']:8.1f} {r['filter_cpu_p99']:8.1f} "
            f"{r['prioritize_p50']:9.1f} {r['prioritize_p99']:8.1f} {int(r['passed']):7d}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
