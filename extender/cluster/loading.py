"""Read Kubernetes objects from state files (kubectl dumps, hand-written YAML, JSON).

Owns: finding files, parsing YAML/JSON, unpacking Lists, keeping the kinds in
`state.KINDS`, and a structural check of each kept object, so that the rest of the extender
can index fields without guarding every lookup. Leaves out: semantic validation (CEL,
limits, cross-object references), which the allocator reports per pod or node.

A file that cannot be trusted fails loudly: `StateLoadError` names the file, the document
(0-based; `item N` for List members) and the field path. Unknown kinds are skipped with one
warning per kind per call.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import yaml

from extender.cluster.state import KINDS
from extender.errors import StateLoadError

logger = logging.getLogger(__name__)

Obj = dict[str, Any]

#: File name endings searched for in directories.
STATE_SUFFIXES: tuple[str, ...] = (".yaml", ".yml", ".json")

DRA_API_VERSION = "resource.k8s.io/v1"
#: apiVersions accepted per kind. DeviceTaintRule is v1 only from Kubernetes 1.37, so a 1.36
#: dump carries v1beta2; its schema is the same for what we read.
API_VERSIONS: dict[str, tuple[str, ...]] = {
    "Node": ("v1",),
    "Pod": ("v1",),
    "Namespace": ("v1",),
    "ResourceSlice": (DRA_API_VERSION,),
    "DeviceClass": (DRA_API_VERSION,),
    "ResourceClaim": (DRA_API_VERSION,),
    "ResourceClaimTemplate": (DRA_API_VERSION,),
    "DeviceTaintRule": (DRA_API_VERSION, "resource.k8s.io/v1beta2"),
}
_NODE_SELECTION = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """Safe YAML loader that keeps timestamps as strings, as they are in API JSON."""


_Loader.add_constructor("tag:yaml.org,2002:timestamp", yaml.SafeLoader.construct_yaml_str)


class _Malformed(Exception):
    """A field-level problem; the caller adds file and document to the message."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}" if path else problem)


def _mapping(obj: Any, path: str, *, required: bool = True) -> Obj:
    if obj is None and not required:
        return {}
    if not isinstance(obj, dict):
        raise _Malformed(path, "required" if obj is None else f"must be an object, got {type(obj).__name__}")
    return obj


def _list(obj: Any, path: str) -> list[Any]:
    if obj is None:
        return []
    if not isinstance(obj, list):
        raise _Malformed(path, f"must be a list, got {type(obj).__name__}")
    return obj


def _name(obj: Any, path: str) -> str:
    if not isinstance(obj, str) or not obj:
        raise _Malformed(path, "required" if obj in (None, "") else "must be a string")
    return obj


def _check_slice(spec: Obj) -> None:
    _name(spec.get("driver"), "spec.driver")
    _name(_mapping(spec.get("pool"), "spec.pool").get("name"), "spec.pool.name")
    chosen = [f for f in _NODE_SELECTION if spec.get(f) not in (None, False, "")]
    if len(chosen) != 1:
        allowed = ", ".join(_NODE_SELECTION)
        got = f"got {', '.join(chosen)}" if chosen else "got none"
        raise _Malformed("spec", f"exactly one of {allowed} is required, {got}")
    for i, device in enumerate(_list(spec.get("devices"), "spec.devices")):
        where = f"spec.devices[{i}]"
        device = _mapping(device, where)
        _name(device.get("name"), f"{where}.name")
        for field in ("attributes", "capacity"):
            for key, value in _mapping(device.get(field), f"{where}.{field}", required=False).items():
                _mapping(value, f"{where}.{field}[{key}]")
    _list(spec.get("sharedCounters"), "spec.sharedCounters")


def _check_requests(devices: Obj, path: str) -> None:
    for i, request in enumerate(_list(devices.get("requests"), f"{path}.requests")):
        _name(_mapping(request, f"{path}.requests[{i}]").get("name"), f"{path}.requests[{i}].name")
    _list(devices.get("constraints"), f"{path}.constraints")
    _list(devices.get("config"), f"{path}.config")


def _check_claim_spec(spec: Obj, path: str) -> None:
    _check_requests(_mapping(spec.get("devices"), f"{path}.devices", required=False), f"{path}.devices")


def _check_object(obj: Obj, kind: str) -> None:
    """Raise `_Malformed` if a known-kind object lacks what the extender indexes."""
    if obj.get("apiVersion") not in API_VERSIONS[kind]:
        got = obj.get("apiVersion")
        raise _Malformed(
            "apiVersion", f"{got!r} is not served for {kind}; allowed: {', '.join(API_VERSIONS[kind])}"
        )
    meta = _mapping(obj.get("metadata"), "metadata")
    _name(meta.get("name"), "metadata.name")
    if kind == "ResourceSlice":
        _check_slice(_mapping(obj.get("spec"), "spec"))
    elif kind == "DeviceClass":
        spec = _mapping(obj.get("spec"), "spec", required=False)
        for i, selector in enumerate(_list(spec.get("selectors"), "spec.selectors")):
            _mapping(selector, f"spec.selectors[{i}]")
    elif kind == "ResourceClaim":
        _check_claim_spec(_mapping(obj.get("spec"), "spec"), "spec")
        _mapping(obj.get("status"), "status", required=False)
    elif kind == "ResourceClaimTemplate":
        inner = _mapping(_mapping(obj.get("spec"), "spec").get("spec"), "spec.spec")
        _check_claim_spec(inner, "spec.spec")
    elif kind == "DeviceTaintRule":
        _mapping(_mapping(obj.get("spec"), "spec").get("taint"), "spec.taint")
    elif kind in ("Pod", "Node"):
        _mapping(obj.get("spec"), "spec", required=False)
        _mapping(obj.get("status"), "status", required=False)


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        found = (p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in STATE_SUFFIXES)
        return sorted(found, key=lambda p: p.relative_to(path).as_posix())
    if path.is_file():
        return [path]
    raise StateLoadError(f"{path}: no such file or directory")


def _documents(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise StateLoadError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if path.suffix.lower() == ".json":
        try:
            yield 0, orjson.loads(text) if text.strip() else None
        except orjson.JSONDecodeError as exc:
            raise StateLoadError(f"{path}: document 0: not valid JSON: {exc}") from None
        return
    stream = io.BytesIO(text)
    stream.name = str(path)  # type: ignore[attr-defined]  # yaml puts it in error marks
    read = 0  # documents handed out so far; load_all is lazy, so a YAML error is in the next one
    try:
        for doc in yaml.load_all(stream, Loader=_Loader):
            yield read, doc
            read += 1
    except yaml.YAMLError as exc:
        problem = " ".join(str(exc).split())
        raise StateLoadError(f"{path}: document {read}: not valid YAML: {problem}") from None


def _unpack(doc: Obj, label: str) -> Iterator[tuple[str, Obj]]:
    """Yield (label, object) for one document, expanding `List` and `*List` kinds."""
    kind = doc.get("kind")
    if not isinstance(kind, str) or not kind:
        raise _Malformed("kind", "required")
    if not kind.endswith("List"):
        yield label, doc
        return
    item_kind = kind[: -len("List")]
    for i, item in enumerate(_list(doc.get("items"), "items")):
        item = _mapping(item, f"items[{i}]")
        if "kind" not in item and item_kind:
            item["kind"] = item_kind
        if "apiVersion" not in item and item_kind and "apiVersion" in doc:
            item["apiVersion"] = doc["apiVersion"]
        yield f"{label} item {i}", item


def _describe(obj: Obj) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return f"{obj.get('kind')} {name}" if isinstance(name, str) and name else str(obj.get("kind"))


def load_state_paths(paths: Sequence[Path], *, _warn: Callable[[str], None] | None = None) -> list[Obj]:
    """Load every object of a known kind from files and directories.

    Args:
        paths: YAML or JSON files (multi-document YAML, `List`/`*List` kinds allowed) and
            directories (searched recursively for `*.yaml`, `*.yml`, `*.json`, sorted).
        _warn: test hook replacing the warning logger call for skipped kinds.

    Returns:
        The objects in file and document order, each with `kind` set.

    Raises:
        StateLoadError: a path is missing, a document is not valid YAML/JSON, or an object
            of a known kind is malformed; the message names file, document and field.
    """
    warn = _warn or (lambda msg: logger.warning("%s", msg))
    warned: set[str] = set()
    objects: list[Obj] = []
    for root in paths:
        for file in _files(Path(root)):
            for index, doc in _documents(file):
                if doc is None:
                    continue
                label = f"document {index}"
                try:
                    for item_label, obj in _unpack(_mapping(doc, ""), label):
                        label = item_label
                        kind = obj.get("kind")
                        if kind not in KINDS:
                            if isinstance(kind, str) and kind not in warned:
                                warned.add(kind)
                                warn(f"{file}: skipping objects of unknown kind {kind!r} (first in {label})")
                            elif not isinstance(kind, str) or not kind:
                                raise _Malformed("kind", "required")
                            continue
                        label = f"{item_label} ({_describe(obj)})"
                        _check_object(obj, kind)
                        objects.append(obj)
                except _Malformed as exc:
                    raise StateLoadError(f"{file}: {label}: {exc}") from None
    return objects
