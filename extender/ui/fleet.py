"""What the dashboard shows of the fleet: node kinds, per-node topology, held devices, counters.

Scope: turns one device-index generation, its free-row mask and the claims that hold devices
into plain JSON-ready dicts. It reads; it never changes the index, the state or a claim. The
dashboard asks for the fleet summary on every generation change and for one node's drawing
when an operator opens it, so the summary stays small (one line per node) even at thousands of
nodes and the per-device detail is built for one node at a time.

Grouping for the drawing, from the device attributes the topology model reads
(`extender.index.topology`, per-driver settings):
- NUMA node -> PCIe root -> devices; the NVLink-level value (NVLink domain, xGMI hive, ICI
  domain, ...) is a label on each device, so devices of one domain share a colour;
- MIG-style partitions: devices consuming one shared counter set are drawn inside the device
  that consumes the most of that set (the full GPU), with the set's counters used/free;
- a held device names the claim that holds it (allocated, or assumed: chosen by bind, write in
  flight).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction

import numpy as np

from extender.allocator.constraints import lookup_attribute
from extender.allocator.model import Device, DeviceID
from extender.allocator.pools import Pool
from extender.claims import same_devices
from extender.index.snapshot import DeviceIndex
from extender.index.topology import LEVELS, TopologySettings
from extender.objects import Obj
from extender.quantity import Quantity

#: Node labels that name a node's kind, tried in order; without one the kind is its drivers.
KIND_LABELS: tuple[str, ...] = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
UNKNOWN = "-"


def holders(claims: Iterable[Obj], assumed: Mapping[str, Obj]) -> dict[DeviceID, tuple[str, bool]]:
    """device -> (claim ref, assumed?) for every device an allocation holds.

    `assumed` maps claim uid -> an allocation chosen by bind whose write is not visible yet.
    """
    out: dict[DeviceID, tuple[str, bool]] = {}
    written: dict[str, Obj] = {}
    by_uid: dict[str, str] = {}
    for claim in claims:
        meta = claim.get("metadata") or {}
        ref = f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"
        by_uid[str(meta.get("uid", ""))] = ref
        allocation = (claim.get("status") or {}).get("allocation")
        if isinstance(allocation, dict):
            written[str(meta.get("uid", ""))] = allocation
            for device_id in _result_ids(allocation):
                out.setdefault(device_id, (ref, False))
    for uid, allocation in assumed.items():
        if uid in written and same_devices(written[uid], allocation):
            continue  # its write is visible (an entry for other devices still holds them: claims.py)
        for device_id in _result_ids(allocation):
            out.setdefault(device_id, (by_uid.get(uid, f"claim uid {uid}"), True))
    return out


def _result_ids(allocation: Obj) -> list[DeviceID]:
    devices = allocation.get("devices") if isinstance(allocation, dict) else None
    results = devices.get("results") if isinstance(devices, dict) else None
    out = []
    for result in results if isinstance(results, list) else ():
        if isinstance(result, dict):
            out.append(
                DeviceID(
                    str(result.get("driver", "")), str(result.get("pool", "")), str(result.get("device", ""))
                )
            )
    return out


def node_kind(node: Obj | None, devices: list[Device]) -> str:
    """A node's kind: its instance-type label, else its drivers and device count."""
    labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    for label in KIND_LABELS:
        if labels.get(label):
            return str(labels[label])
    if not devices:
        return "no devices"
    drivers = Counter(d.id.driver for d in devices)
    return " + ".join(f"{count}x {driver}" for driver, count in sorted(drivers.items()))


def summary(index: DeviceIndex, free: np.ndarray) -> Obj:
    """The fleet at a glance: per node kind and per node, devices, held and free."""
    held_per_node = np.bincount(index.row_node[~free[: index.num_rows]], minlength=len(index.node_names))
    nodes = []
    kinds: dict[str, Obj] = {}
    for position, name in enumerate(index.node_names):
        start, stop = int(index.node_start[position]), int(index.node_start[position + 1])
        devices = index.row_device[start:stop]
        kind = node_kind(index.nodes.get(name), devices)
        held = int(held_per_node[position])
        nodes.append({"name": name, "kind": kind, "devices": stop - start, "held": held})
        entry = kinds.setdefault(kind, {"kind": kind, "nodes": 0, "devices": 0, "held": 0})
        entry["nodes"] += 1
        entry["devices"] += stop - start
        entry["held"] += held
    for entry in kinds.values():
        entry["free"] = entry["devices"] - entry["held"]
    return {
        "nodes": nodes,
        "kinds": sorted(kinds.values(), key=lambda k: (-k["nodes"], k["kind"])),
        "totals": {
            "nodes": len(nodes),
            "devices": index.num_rows,
            "held": int(held_per_node.sum()),
        },
    }


def node_detail(
    index: DeviceIndex,
    free: np.ndarray,
    name: str,
    *,
    held_by: Mapping[DeviceID, tuple[str, bool]],
    topology: TopologySettings,
) -> Obj | None:
    """One node's drawing: NUMA -> PCIe root -> devices, partitions in their GPU, counters."""
    position = index.node_pos.get(name)
    if position is None:
        return None
    start, stop = int(index.node_start[position]), int(index.node_start[position + 1])
    devices = index.row_device[start:stop]
    rows = [_device_entry(d, not bool(free[start + i]), held_by, topology) for i, d in enumerate(devices)]
    parents, counters = _partitions(devices, index.pools.get(name) or [], free[start:stop])
    # Keyed by (driver, pool, device): two drivers may both publish a `gpu-0` on one node.
    by_id = {device.id: entry for entry, device in zip(rows, devices, strict=True)}
    top: list[Obj] = []
    for entry, device in zip(rows, devices, strict=True):
        parent = parents.get(device.id)
        if parent is not None and parent in by_id and parent != device.id:
            entry["parent"] = parent.device
            by_id[parent].setdefault("partitions", []).append(entry)
        else:
            top.append(entry)
    numa: dict[str, dict[str, list[Obj]]] = {}
    for entry in top:
        numa.setdefault(entry["numa"], {}).setdefault(entry["pcie"], []).append(entry)
    return {
        "name": name,
        "kind": node_kind(index.nodes.get(name), devices),
        "devices": len(rows),
        "held": sum(1 for entry in rows if entry["held"]),
        "numa": [
            {
                "id": numa_id,
                "pcie": [{"id": root, "devices": members} for root, members in sorted(roots.items())],
            }
            for numa_id, roots in sorted(numa.items())
        ],
        "counters": counters,
    }


def _device_entry(
    device: Device, held: bool, held_by: Mapping[DeviceID, tuple[str, bool]], topology: TopologySettings
) -> Obj:
    levels = topology.drivers.get(device.id.driver, topology.drivers.get("*", {}))
    where = {level: _first_value(device, levels.get(level, ())) for level in LEVELS}
    holder = held_by.get(device.id)
    return {
        "name": device.name,
        "driver": device.id.driver,
        "pool": device.id.pool,
        "nvlink": where["nvlink"],
        "pcie": where["pcie"],
        "numa": where["numa"],
        "held": held,
        "claim": holder[0] if holder else None,
        "assumed": bool(holder and holder[1]),
        "tainted": bool(device.taints),
    }


def _first_value(device: Device, names: Iterable[str]) -> str:
    for name in names:
        value = lookup_attribute(device, name)
        if not value:
            continue
        for kind in ("string", "int", "bool", "version"):
            if value.get(kind) is not None:
                return str(value[kind])
        for kind in ("strings", "ints", "bools", "versions"):
            if value.get(kind):
                return str(value[kind][0])
    return UNKNOWN


def _partitions(
    devices: list[Device], pools: Sequence[Pool], free: np.ndarray
) -> tuple[dict[DeviceID, DeviceID], list[Obj]]:
    """(device -> the device drawn around it, counter sets with used/free) for one node.

    The counter sets come from the node's pools; "used" adds up what held devices consume.
    """
    capacity: dict[tuple[str, str], dict[str, Quantity]] = {}
    for pool in pools:
        for set_name, counters in pool.counter_sets.items():
            capacity[(str(pool.id), set_name)] = counters
    consumers: dict[tuple[str, str], list[tuple[Device, Fraction]]] = {}
    used: dict[tuple[str, str], dict[str, Quantity]] = {}
    for i, device in enumerate(devices):
        pool_key = f"{device.id.driver}/{device.id.pool}"
        for set_name, counters in device.consumes_counters:
            key = (pool_key, set_name)
            consumers.setdefault(key, []).append(
                (device, sum((q.exact for q in counters.values()), Fraction(0)))
            )
            if not free[i]:
                bucket = used.setdefault(key, {})
                for counter, amount in counters.items():
                    bucket[counter] = bucket[counter] + amount if counter in bucket else amount
    parents: dict[DeviceID, DeviceID] = {}
    for members in consumers.values():
        biggest = max(members, key=lambda m: m[1])[0]
        for device, _ in members:
            parents.setdefault(device.id, biggest.id)
    out = []
    for (pool_key, set_name), counters in sorted(capacity.items()):
        if (pool_key, set_name) not in consumers:
            continue
        taken = used.get((pool_key, set_name), {})
        out.append(
            {
                "pool": pool_key,
                "set": set_name,
                "parent": max(consumers[(pool_key, set_name)], key=lambda m: m[1])[0].name,
                "counters": [
                    {
                        "name": counter,
                        "capacity": str(value),
                        "used": str(taken.get(counter, Quantity.parse("0"))),
                    }
                    for counter, value in sorted(counters.items())
                ],
            }
        )
    return parents, out
