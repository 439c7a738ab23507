"""Time `build_index` on a generated mixed fleet: full builds and a one-node rebuild.

Usage: python -m bench.index_build [--nodes 250,500,1000,2000] [--no-partitions]

The fleet is minimal but has the shape that made the build quadratic (issue 10): 60% of the
nodes are 8xH100 + 4 NICs (two node-local single-slice pools), 40% are 8xA100 whose MIG
placements (15 per GPU) consume counters published in a separate counter slice of the same
node-local pool (resourceSliceCount 2), like the NVIDIA driver's partitionable devices. Each
A100 pool's counter slice is relevant to every node (spec dra.md §3.2), so it shows up in
every node's pool list as a marker.

Printed per size: nodes, slices, device rows, full build seconds, and the seconds to rebuild
after one A100 node's counter slice changed (with the previous snapshot passed in).
With --held: claims hold ~30% of the devices (2 per claim); printed are the seconds of the
first `Placement.allocated_state()` (everything) and of the one after one claim is released.
"""

from __future__ import annotations

import argparse
import copy
import random
import time

from extender.allocator.features import Features
from extender.cluster.state import ClusterState
from extender.index.snapshot import build_index
from extender.objects import Obj
from loadtests.generate import _Ids, _slice, node_object

MIG_PROFILES = 15  # partition devices per A100 GPU
GPUS = 8


def _gpu(index: int, product: str, node: str) -> Obj:
    return {
        "name": f"gpu-{index}",
        "attributes": {
            "type": {"string": "gpu"},
            "index": {"int": index},
            "productName": {"string": product},
            "uuid": {"string": f"GPU-{node}-{index}"},
            "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{index // 2:02x}"},
        },
        "capacity": {"memory": {"value": "80Gi"}},
    }


def _h100_node(ids: _Ids, number: int, name: str) -> list[Obj]:
    nics = [
        {
            "name": f"nic-{j}",
            "attributes": {
                "rdma": {"bool": True},
                "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{j:02x}"},
            },
        }
        for j in range(4)
    ]
    node = node_object(ids, number, name, {"gpu.product": "H100"})
    gpus = [_gpu(i, "H100", name) for i in range(GPUS)]
    return [node, _slice(ids, node, "gpu.nvidia.com", gpus), _slice(ids, node, "dra.net", nics)]


def _a100_node(ids: _Ids, number: int, name: str) -> list[Obj]:
    counter_sets = [
        {
            "name": f"gpu-{i}-counters",
            "counters": {
                **{f"memory-slice-{k}": {"value": "1"} for k in range(8)},
                "multiprocessors": {"value": "98"},
            },
        }
        for i in range(GPUS)
    ]
    devices: list[Obj] = []
    for i in range(GPUS):
        full = _gpu(i, "A100", name)
        full["consumesCounters"] = [
            {
                "counterSet": f"gpu-{i}-counters",
                "counters": {
                    **{f"memory-slice-{k}": {"value": "1"} for k in range(8)},
                    "multiprocessors": {"value": "98"},
                },
            }
        ]
        devices.append(full)
        for p in range(MIG_PROFILES):
            start, size = p % 8, 1 + p % 2
            devices.append(
                {
                    "name": f"gpu-{i}-mig-{p}",
                    "attributes": {"type": {"string": "mig"}, "parentUUID": {"string": f"GPU-{name}-{i}"}},
                    "consumesCounters": [
                        {
                            "counterSet": f"gpu-{i}-counters",
                            "counters": {
                                **{
                                    f"memory-slice-{k}": {"value": "1"}
                                    for k in range(start, min(8, start + size))
                                },
                                "multiprocessors": {"value": "14"},
                            },
                        }
                    ],
                }
            )
    node = node_object(ids, number, name, {"gpu.product": "A100"})
    return [
        node,
        _slice(ids, node, "gpu.nvidia.com", [], pool_slices=2, shared_counters=counter_sets),
        _slice(ids, node, "gpu.nvidia.com", devices, pool_slices=2),
    ]


def fleet(nodes: int, *, partitions: bool = True) -> list[Obj]:
    """`nodes` nodes, 40% A100 with counters (if `partitions`), the rest H100; deterministic."""
    ids = _Ids(random.Random("index-build"))  # uids and slice names only: the shape is fixed
    objects: list[Obj] = []
    for number in range(nodes):
        name = f"node-{number:05d}"
        a100 = partitions and number % 5 in (1, 3)
        objects.extend(_a100_node(ids, number + 1, name) if a100 else _h100_node(ids, number + 1, name))
    return objects


def measure(nodes: int, *, partitions: bool = True, rebuild: bool = True) -> dict[str, float]:
    features = Features.from_gates()
    state = ClusterState.from_objects(fleet(nodes, partitions=partitions))
    started = time.perf_counter()
    index = build_index(state, features)
    full = time.perf_counter() - started
    if not rebuild:
        return {
            "nodes": nodes,
            "slices": state.count("ResourceSlice"),
            "rows": index.num_rows,
            "full_s": full,
            "one_node_s": float("nan"),
        }
    counters = next(
        (s for s in state.list("ResourceSlice") if s["spec"].get("sharedCounters")),
        state.list("ResourceSlice")[0],
    )
    changed = copy.deepcopy(counters)
    changed["spec"]["pool"]["generation"] = 1  # same pool, new object: the slice "changed"
    state.upsert(changed)
    started = time.perf_counter()
    rebuilt = build_index(state, features, previous=index)
    one_node = time.perf_counter() - started
    return {
        "nodes": nodes,
        "slices": state.count("ResourceSlice"),
        "rows": rebuilt.num_rows,
        "full_s": full,
        "one_node_s": one_node,
    }


def _claims(state: ClusterState, share: float = 0.3) -> list[Obj]:
    """Allocated claims holding about `share` of the devices, two devices per claim."""
    claims: list[Obj] = []
    pairs: list[list[Obj]] = []
    for raw in state.list("ResourceSlice"):
        spec = raw["spec"]
        devices = spec.get("devices") or []
        held = devices[: int(len(devices) * share) // 2 * 2]
        for i in range(0, len(held), 2):
            pairs.append(
                [{"request": "r", "driver": spec["driver"], "pool": spec["pool"]["name"], "device": d["name"]}
                 for d in held[i : i + 2]]
            )  # fmt: skip
    for number, results in enumerate(pairs):
        claims.append(
            {
                "kind": "ResourceClaim",
                "metadata": {"name": f"claim-{number}", "namespace": "bench", "uid": f"uid-{number}"},
                "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}},
                "status": {"allocation": {"devices": {"results": results}}},
            }
        )
    return claims


def measure_held(nodes: int) -> dict[str, float]:
    from extender.core.assumed import AssumeCache
    from extender.core.placement import Placement

    state = ClusterState.from_objects(fleet(nodes))
    claims = _claims(state)
    for claim in claims:
        state.upsert(claim)
    placement = Placement(state, features=Features.from_gates(), assumed=AssumeCache())
    placement.index()
    started = time.perf_counter()
    placement.allocated_state()
    first = time.perf_counter() - started
    released = copy.deepcopy(claims[len(claims) // 2])
    released.pop("status")
    state.upsert(released)
    started = time.perf_counter()
    placement.allocated_state()
    one = time.perf_counter() - started
    return {"nodes": nodes, "claims": len(claims), "first_s": first, "one_claim_s": one}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="250,500,1000,2000", help="comma-separated node counts")
    parser.add_argument("--no-partitions", action="store_true", help="H100 nodes only (no counters)")
    parser.add_argument("--full-only", action="store_true", help="skip the one-node rebuild")
    parser.add_argument("--held", action="store_true", help="time allocated_state instead of the build")
    args = parser.parse_args(argv)
    if args.held:
        print(f"{'nodes':>6} {'claims':>7} {'first allocated_state s':>24} {'after one release s':>20}")
        for size in (int(n) for n in args.nodes.split(",")):
            row = measure_held(size)
            print(
                f"{row['nodes']:>6} {row['claims']:>7} {row['first_s']:>24.3f} {row['one_claim_s']:>20.4f}",
                flush=True,
            )
        return 0
    print(f"{'nodes':>6} {'slices':>7} {'rows':>8} {'full build s':>13} {'one-node rebuild s':>19}")
    for size in (int(n) for n in args.nodes.split(",")):
        row = measure(size, partitions=not args.no_partitions, rebuild=not args.full_only)
        print(
            f"{row['nodes']:>6} {row['slices']:>7} {row['rows']:>8} {row['full_s']:>13.2f} "
            f"{row['one_node_s']:>19.3f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
