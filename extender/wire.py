"""kube-scheduler extender v1 wire types and their orjson codecs.

The scheduler marshals `k8s.io/kube-scheduler/extender/v1` structs that have no json tags, so
top-level keys are the Go field names, capitalised (`Pod`, `NodeNames`, `FailedNodes`, ...), and
any of them may be `null`. Nested Pod and Node objects are ordinary camelCase Kubernetes JSON;
their `kind`/`apiVersion` are usually absent and never relied on.

This module only converts bytes <-> plain values and checks types at the edge; it knows nothing
about HTTP or placement. Malformed input raises `InvalidRequest` naming the offending field.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict

import numpy as np
import orjson

from extender.errors import InvalidRequest
from extender.objects import Obj
from extender.verdicts import FilterVerdict, HostScore, HostScores

#: Score range of one prioritize entry (`MinExtenderPriority`, `MaxExtenderPriority`).
MIN_EXTENDER_PRIORITY = 0
MAX_EXTENDER_PRIORITY = 10


class NodeList(TypedDict):
    """`v1.NodeList` as the scheduler builds it: `metadata` is `{}`, no kind/apiVersion."""

    metadata: Obj
    items: list[Obj]


class ExtenderArgs(TypedDict):
    """Request body of filter and prioritize."""

    Pod: Obj | None
    Nodes: NodeList | None
    NodeNames: list[str] | None


class ExtenderFilterResult(TypedDict):
    """Response body of filter."""

    Nodes: NodeList | None
    NodeNames: list[str] | None
    FailedNodes: dict[str, str]
    FailedAndUnresolvableNodes: dict[str, str]
    Error: str


class HostPriority(TypedDict):
    """One entry of the prioritize response (a JSON array of these)."""

    Host: str
    Score: int


class ExtenderBindingArgs(TypedDict):
    """Request body of bind."""

    PodName: str
    PodNamespace: str
    PodUID: str
    Node: str


class ExtenderBindingResult(TypedDict):
    """Response body of bind; an empty `Error` means success."""

    Error: str


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "object", list: "array", str: "string", bool: "boolean"}.get(
        type(value), "number" if isinstance(value, int | float) else type(value).__name__
    )


def _decode_object(body: bytes) -> Obj:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidRequest(f"request body must be a JSON object, got {_type_name(data)}")
    return data


def _node_items(nodes: Any) -> list[Obj]:
    if not isinstance(nodes, dict):
        raise InvalidRequest(f"Nodes: must be a NodeList object or null, got {_type_name(nodes)}")
    items = nodes.get("items")
    if items is None:
        return []
    if not isinstance(items, list):
        raise InvalidRequest(f"Nodes.items: must be an array or null, got {_type_name(items)}")
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise InvalidRequest(f"Nodes.items[{i}]: must be a Node object, got {_type_name(item)}")
        meta = item.get("metadata")
        if not isinstance(meta, dict):
            raise InvalidRequest(f"Nodes.items[{i}].metadata: must be an object, got {_type_name(meta)}")
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest(f"Nodes.items[{i}].metadata.name: required, must be a non-empty string")
    return items


def _check_optional(value: Any, path: str, kind: type, what: str) -> None:
    if value is not None and not isinstance(value, kind):
        raise InvalidRequest(f"{path}: must be {what} or null, got {_type_name(value)}")


def _check_claim_entries(entries: Any, path: str, fields: tuple[str, ...]) -> None:
    """A list of objects (or null) whose `fields` are strings or null."""
    _check_optional(entries, path, list, "an array")
    for i, entry in enumerate(entries or ()):
        if not isinstance(entry, dict):
            raise InvalidRequest(f"{path}[{i}]: must be an object, got {_type_name(entry)}")
        for name in fields:
            _check_optional(entry.get(name), f"{path}[{i}].{name}", str, "a string")


def check_pod(pod: Obj) -> None:
    """Type-check the parts of a Pod the extender reads, so a malformed one is a 400, not a crash.

    Read are `metadata.{name,namespace,uid}`, `spec.{nodeName,schedulerName,resourceClaims}` and
    `status.resourceClaimStatuses`; every other field is passed over untouched. Each may be null.

    Raises:
        InvalidRequest: naming the first field with a wrong type, e.g. `Pod.spec.resourceClaims`.
    """
    meta, spec, status = pod.get("metadata"), pod.get("spec"), pod.get("status")
    _check_optional(meta, "Pod.metadata", dict, "an object")
    _check_optional(spec, "Pod.spec", dict, "an object")
    _check_optional(status, "Pod.status", dict, "an object")
    for name in ("name", "namespace", "uid"):
        _check_optional((meta or {}).get(name), f"Pod.metadata.{name}", str, "a string")
    for name in ("nodeName", "schedulerName"):
        _check_optional((spec or {}).get(name), f"Pod.spec.{name}", str, "a string")
    _check_claim_entries(
        (spec or {}).get("resourceClaims"),
        "Pod.spec.resourceClaims",
        ("name", "resourceClaimName", "resourceClaimTemplateName"),
    )
    _check_claim_entries(
        (status or {}).get("resourceClaimStatuses"),
        "Pod.status.resourceClaimStatuses",
        ("name", "resourceClaimName"),
    )


def decode_extender_args(body: bytes) -> tuple[Obj, list[str], list[Obj] | None]:
    """Decode a filter/prioritize request body.

    Args:
        body: the raw `ExtenderArgs` JSON.

    Returns:
        `(pod, node_names, node_items)`. `node_items` is the received Node objects when the
        scheduler sent a NodeList (`nodeCacheCapable: false`), else None. If both `NodeNames`
        and `Nodes` are given, `NodeNames` wins and `node_items` is None; if neither, no nodes.

    Raises:
        InvalidRequest: the body is not a JSON object, `Pod` is missing/null/not an object or
            a field of it the extender reads has a wrong type (`check_pod`), `NodeNames` is not
            a list of strings, or `Nodes` is not a NodeList of named nodes.
    """
    args = _decode_object(body)
    pod = args.get("Pod")
    if pod is None:
        raise InvalidRequest("Pod: required, got " + ("null" if "Pod" in args else "nothing"))
    if not isinstance(pod, dict):
        raise InvalidRequest(f"Pod: must be an object, got {_type_name(pod)}")
    check_pod(pod)
    node_names = args.get("NodeNames")
    if node_names is not None:
        if not isinstance(node_names, list):
            raise InvalidRequest(
                f"NodeNames: must be an array of strings or null, got {_type_name(node_names)}"
            )
        _check_names(node_names)
        return pod, node_names, None
    nodes = args.get("Nodes")
    if nodes is None:
        return pod, [], None
    items = _node_items(nodes)
    return pod, [item["metadata"]["name"] for item in items], items


def _check_names(node_names: list[Any]) -> None:
    """Every entry a string: one `str.join`, which refuses anything else (C speed for the
    thousands of names of a filter call); only a refused list is walked for the first culprit."""
    try:
        "".join(node_names)
    except TypeError:
        for i, name in enumerate(node_names):
            if not isinstance(name, str):
                raise InvalidRequest(f"NodeNames[{i}]: must be a string, got {_type_name(name)}") from None
        raise


def decode_binding_args(body: bytes) -> ExtenderBindingArgs:
    """Decode a bind request body.

    Args:
        body: the raw `ExtenderBindingArgs` JSON.

    Returns:
        The arguments with every field a string (`PodUID` null becomes "").

    Raises:
        InvalidRequest: the body is not a JSON object, or `PodName`, `PodNamespace` or `Node`
            is missing, null, empty or not a string, or `PodUID` is not a string.
    """
    args = _decode_object(body)
    out: dict[str, str] = {}
    for key in ("PodName", "PodNamespace", "Node"):
        value = args.get(key)
        if not isinstance(value, str) or not value:
            raise InvalidRequest(f"{key}: required, must be a non-empty string, got {_type_name(value)}")
        out[key] = value
    uid = args.get("PodUID")
    if uid is not None and not isinstance(uid, str):
        raise InvalidRequest(f"PodUID: must be a string or null, got {_type_name(uid)}")
    return ExtenderBindingArgs(
        PodName=out["PodName"], PodNamespace=out["PodNamespace"], PodUID=uid or "", Node=out["Node"]
    )


def encode_filter_result(verdict: FilterVerdict, node_items: list[Obj] | None) -> bytes:
    """Encode a filter verdict as `ExtenderFilterResult`.

    Args:
        verdict: the placement outcome.
        node_items: the Node objects received in the request (`nodeCacheCapable: false`), or
            None when the request carried `NodeNames`.

    Returns:
        JSON bytes. With `node_items` None, `NodeNames` lists the passed nodes and `Nodes` is
        null; otherwise `Nodes` echoes the received Node objects that passed, in input order,
        and `NodeNames` is null. When `verdict.error` is set both are null. `FailedNodes` and
        `FailedAndUnresolvableNodes` are always objects and `Error` always a string.
    """
    result: ExtenderFilterResult = {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": verdict.failed,
        "FailedAndUnresolvableNodes": verdict.unresolvable,
        "Error": verdict.error,
    }
    if not verdict.error:
        if node_items is None:
            result["NodeNames"] = verdict.passed
        else:
            passed = set(verdict.passed)
            result["Nodes"] = {
                "metadata": {},
                "items": [item for item in node_items if item["metadata"]["name"] in passed],
            }
    return orjson.dumps(result)


def encode_host_priorities(scores: Sequence[HostScore]) -> bytes:
    """Encode prioritize scores as a `HostPriorityList` JSON array of `{"Host", "Score"}`.

    Each score is clamped to MIN_EXTENDER_PRIORITY..MAX_EXTENDER_PRIORITY, the protocol's range,
    whatever the placement produced (the scheduler multiplies it by the extender's weight).
    `HostScores` (placement's answer) is encoded from its arrays, byte for byte what orjson makes
    of the list of dicts: each host's `{"Host":"<name>","Score":` prefix is cached by name (a
    fleet's names come back in every call) and joined with the score's digits in one pass.
    """
    if isinstance(scores, HostScores):
        return _encode_host_scores(scores)
    clamped = _clamped_all([s.score for s in scores])
    priorities: list[HostPriority] = [
        {"Host": s.host, "Score": score} for s, score in zip(scores, clamped, strict=True)
    ]
    return orjson.dumps(priorities)


#: Host name -> `{"Host":<name as JSON>,"Score":`; cleared when it would pass `HOST_PREFIXES_MAX`
#: (a request may name anything). Used on the event loop thread only.
_HOST_PREFIXES: dict[str, bytes] = {}
HOST_PREFIXES_MAX = 65536
#: What follows the prefix for each score 0..10: the digits and `},`, or `}]` for the last entry.
_SCORE_ENDS = np.array([b"%d}," % score for score in range(MAX_EXTENDER_PRIORITY + 1)], dtype=object)
_LAST_ENDS = [b"%d}]" % score for score in range(MAX_EXTENDER_PRIORITY + 1)]


def _host_prefix(host: str) -> bytes:
    return b'{"Host":' + orjson.dumps(host) + b',"Score":'


def _host_prefixes(hosts: Sequence[str]) -> list[bytes]:
    cache = _HOST_PREFIXES
    try:
        return list(map(cache.__getitem__, hosts))
    except KeyError:
        pass
    new = set(hosts).difference(cache)
    if len(cache) + len(new) > HOST_PREFIXES_MAX:  # (one call's hosts are kept even beyond it)
        cache.clear()
        new = set(hosts)
    cache.update({host: _host_prefix(host) for host in new})
    return list(map(cache.__getitem__, hosts))


def _encode_host_scores(scores: HostScores) -> bytes:
    count = len(scores)
    if not count:
        return b"[]"
    clamped = np.clip(scores.scores, MIN_EXTENDER_PRIORITY, MAX_EXTENDER_PRIORITY)
    parts = np.empty(2 * count, dtype=object)
    parts[0::2] = _host_prefixes(scores.hosts)
    parts[1::2] = _SCORE_ENDS[clamped]
    parts[-1] = _LAST_ENDS[int(clamped[-1])]
    return b"[" + b"".join(parts.tolist())


def _clamped(score: int) -> int:
    return min(MAX_EXTENDER_PRIORITY, max(MIN_EXTENDER_PRIORITY, int(score)))


def _clamped_all(scores: list[int]) -> list[int]:
    """`_clamped` of each score: one numpy clip when all are integers in int64 (placement's are),
    else one by one (floats, numbers beyond int64)."""
    values = np.asarray(scores) if scores else np.zeros(0, dtype=np.int64)
    if values.dtype.kind not in "iu" or values.ndim != 1:
        return [_clamped(score) for score in scores]
    return np.clip(values, MIN_EXTENDER_PRIORITY, MAX_EXTENDER_PRIORITY).astype(np.int64).tolist()  # type: ignore[no-any-return]


def encode_binding_result(error: str) -> bytes:
    """Encode a bind outcome as `ExtenderBindingResult` ('' = success)."""
    result: ExtenderBindingResult = {"Error": error}
    return orjson.dumps(result)
