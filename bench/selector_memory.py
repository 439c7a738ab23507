"""Does the server's memory level off when every claim has its own selector text? (issue 30, 3)

Pinning a claim to one device by UUID gives every claim its own CEL text. Everything the
extender keeps per expression, per claim shape or per claim must stay within a bound
(docs/robustness.md), so after the bounded caches have filled, more such claims must not grow
the process.

What it does:

1. writes a JSON state file: the embedded sample cluster plus `--claims` ResourceClaims, each
   asking for one `gpu.nvidia.com` device with its own selector,
   `device.attributes["gpu.nvidia.com"].uuid in ["<a real GPU's UUID>", "GPU-<k>"]` (a real
   UUID, taken in turn, and one that only this claim names), and one pending pod per claim;
2. starts the real server on it (`python -m extender serve --state FILE`, as
   `bench/mixed_bench.py` does), waits for `/readyz` and for the numba kernels' background
   warm-up (their one-time 55-200 MiB would otherwise land in the first claims' figure);
3. sends one `/filter` per pod, with every node's name (`NodeNames`, as kube-scheduler sends
   them), over one keep-alive connection, in order, and reads the server's VmRSS from
   `/proc/PID/status` after every `--every` filters.

It prints the RSS at each checkpoint and the growth over the first `--first` claims and over the
rest. The claims are in the state file, so what they themselves take is in the ready figure, not
in the growth. Extra arguments after `--` go to `serve` (e.g. `-- --shutdown-grace-seconds 5`);
settings without a flag reach the server through the environment it inherits
(`DRA_EXTENDER_SELECTOR_MASK_CACHE_SIZE=512 python -m bench.selector_memory`).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import orjson

from bench.mixed_bench import Client, serving
from extender.cluster import sample
from extender.objects import Obj

NAMESPACE = "pinning"
GPU_CLASS = "gpu.nvidia.com"


def _gpu_uuids(objects: list[Obj]) -> list[str]:
    uuids = []
    for obj in objects:
        if obj["kind"] == "ResourceSlice" and obj["spec"]["driver"] == "gpu.nvidia.com":
            for device in obj["spec"].get("devices", []):
                uuid = device.get("attributes", {}).get("uuid", {}).get("string")
                if uuid and device["attributes"].get("type", {}).get("string") == "gpu":
                    uuids.append(uuid)
    return uuids


def pinned_claim(k: int, uuid: str) -> Obj:
    """Claim `k`, one GPU pinned by UUID: its selector text is its own."""
    expression = (
        f'device.attributes["gpu.nvidia.com"].uuid in ["{uuid}", "GPU-{k:08d}-0000-4000-8000-000000000000"]'
    )
    request = {
        "name": "gpu",
        "exactly": {
            "deviceClassName": GPU_CLASS,
            "allocationMode": "ExactCount",
            "count": 1,
            "selectors": [{"cel": {"expression": expression}}],
        },
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"pin-{k}", "namespace": NAMESPACE, "uid": f"claim-uid-{k}"},
        "spec": {"devices": {"requests": [request]}},
    }


def pending_pod(k: int) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"pinned-{k}", "namespace": NAMESPACE, "uid": f"pod-uid-{k}"},
        "spec": {
            "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": f"pin-{k}"}],
        },
    }


def write_state(path: Path, claims: int) -> tuple[list[str], list[Obj]]:
    """The state file; returns the node names and the pods to filter."""
    objects = sample.sample_objects()
    uuids = _gpu_uuids(objects)
    names = [obj["metadata"]["name"] for obj in objects if obj["kind"] == "Node"]
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    pods = [pending_pod(k) for k in range(claims)]
    items = [*objects, namespace, *(pinned_claim(k, uuids[k % len(uuids)]) for k in range(claims)), *pods]
    path.write_bytes(orjson.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return names, pods


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--claims", type=int, default=15_000)
    parser.add_argument("--first", type=int, default=5_000, help="claims in the first figure")
    parser.add_argument("--every", type=int, default=1_000, help="filters between RSS readings")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/selector-memory"))
    parser.add_argument("serve_args", nargs="*", help="extra flags for serve (after --)")
    args = parser.parse_args()

    args.dir.mkdir(parents=True, exist_ok=True)
    state = args.dir / f"state-{args.claims}.json"
    names, pods = write_state(state, args.claims)
    node_names = orjson.dumps(names)
    print(f"# {args.claims} claims, each with its own selector text, on the sample ({len(names)} nodes)")
    print(f"# server: python -m extender serve --state {state} {' '.join(args.serve_args)}")
    with serving(state, ready_timeout=600, extra=args.serve_args) as (server, ready):
        client = Client(server.port, timeout=120)
        readings = [(0, server.rss_mib())]
        print(f"ready in {ready:.1f} s; RSS {readings[0][1]:.1f} MiB")
        print("| filters | RSS MiB | s |")
        print("|---:|---:|---:|")
        started = time.perf_counter()
        for k, pod in enumerate(pods, start=1):
            answer, _ = client.post(
                "filter", b'{"Pod":' + orjson.dumps(pod) + b',"Nodes":null,"NodeNames":' + node_names + b"}"
            )
            if answer.get("Error"):
                raise RuntimeError(f"filter of pod {k}: {answer['Error']}")
            if k % args.every == 0 or k == len(pods):
                readings.append((k, server.rss_mib()))
                print(f"| {k} | {readings[-1][1]:.1f} | {time.perf_counter() - started:.0f} |", flush=True)
        client.close()
    rss = dict(readings)
    first = min(args.first, args.claims)
    print(f"growth over the first {first} claims: {rss[first] - rss[0]:+.1f} MiB")
    if args.claims > first:
        print(f"growth over the next {args.claims - first}: {rss[args.claims] - rss[first]:+.1f} MiB")


if __name__ == "__main__":
    main()
