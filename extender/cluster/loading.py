"""Read Kubernetes objects from state files (kubectl dumps, hand-written YAML, JSON).

Owns: finding files, parsing YAML/JSON, unpacking Lists, keeping the kinds in
`state.KINDS`, the served apiVersions, and one object per kind/namespace/name. Each kept object
goes through `extender.validation` (types, shapes, API limits), so that the rest of the extender
can index fields without guarding every lookup. Leaves out: what the allocator reports per pod
or node (CEL, unknown classes, contradictions between the slices of one pool: those are only
warned about here).

A file that cannot be trusted fails loudly: `StateLoadError` names the file, the document
(0-based; `item N` for List members) and the field path. Unknown kinds are skipped with one
warning per kind per call; an identical repeat of an object is skipped with a warning, a
different object under the same name is an error naming both documents.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import yaml

from extender import yamlsafe
from extender.cluster.compact import SHARED
from extender.cluster.jsonitems import loads_list
from extender.cluster.state import KINDS, object_key
from extender.errors import StateLoadError
from extender.objects import Obj
from extender.podgroups import API_VERSIONS as POD_GROUP_API_VERSIONS
from extender.validation import InvalidObject, object_ref, validate

logger = logging.getLogger(__name__)

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
    # the Workload API's gang (1.37 beta, 1.36 alpha): extender.podgroups
    "PodGroup": POD_GROUP_API_VERSIONS,
}


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


def _check_object(obj: Obj, kind: str) -> None:
    """Raise `_Malformed` if a known-kind object is not one the API server would serve."""
    if obj.get("apiVersion") not in API_VERSIONS[kind]:
        got = obj.get("apiVersion")
        raise _Malformed(
            "apiVersion", f"{got!r} is not served for {kind}; allowed: {', '.join(API_VERSIONS[kind])}"
        )
    try:
        validate(obj)
    except InvalidObject as exc:
        raise _Malformed("", exc.detail) from None


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
    named_json = path.suffix.lower() == ".json"
    if named_json or text.lstrip()[:1] in (b"{", b"["):
        # JSON content is read at JSON speed whatever the name (`kubectl get -o json > x.yaml`
        # through the YAML parser took about 4x as long); JSON is YAML, so the result is the same.
        try:
            doc = _json_document(text) if text.strip() else None
        except orjson.JSONDecodeError as exc:
            # Too deep for orjson (newer releases stop at 1024 levels) is too deep for the YAML
            # parser too, whose C loader crashes at some depths: no second try.
            if named_json or "depth" in str(exc):
                raise StateLoadError(f"{path}: document 0: not valid JSON: {exc}") from None
        else:
            yield 0, doc
            return
        # a .yaml file in flow style that is no JSON (`{kind: Node}`): the YAML parser decides
    stream = io.BytesIO(text)
    stream.name = str(path)  # yaml puts it in error marks
    read = 0  # documents handed out so far; load_all is lazy, so a YAML error is in the next one
    try:
        for doc in yamlsafe.load_all(stream):  # timestamps stay text, aliases bounded
            yield read, doc
            read += 1
    except yamlsafe.AliasExpansionError as exc:
        raise StateLoadError(f"{path}: document {read}: {exc}") from None
    except yaml.YAMLError as exc:
        problem = " ".join(str(exc).split())
        raise StateLoadError(f"{path}: document {read}: not valid YAML: {problem}") from None


def _json_document(text: bytes) -> Any:
    """`orjson.loads(text)`, but a `List` is parsed one item at a time and each item compacted
    as soon as it is parsed (`extender.cluster.compact`), so the whole list of raw objects never
    exists at once (about seven times the file's size). Same answer, or the same error, as a
    whole parse (`loads_list`)."""
    return loads_list(text, _compact_item)


def _compact_item(item: Any, item_kind: str | None) -> None:
    if type(item) is dict:
        SHARED.compact_loaded(item, item.get("kind", item_kind))


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
    ref = object_ref(obj)
    return f"{obj.get('kind')} {ref}" if ref else str(obj.get("kind"))


def load_state_paths(paths: Sequence[Path], *, _warn: Callable[[str], None] | None = None) -> list[Obj]:
    """Load every object of a known kind from files and directories.

    Args:
        paths: YAML or JSON files (multi-document YAML, `List`/`*List` kinds allowed) and
            directories (searched recursively for `*.yaml`, `*.yml`, `*.json`, sorted).
        _warn: test hook replacing the warning logger call (skipped kinds, identical
            duplicates, duplicate device names across the slices of one pool).

    Returns:
        The objects in file and document order, each with `kind` set.

    Raises:
        StateLoadError: a path is missing, a document is not valid YAML/JSON, an object of a
            known kind fails `extender.validation` (the message names file, document and
            field), or two different objects share kind, namespace and name (both named).
    """
    warn = _warn or (lambda msg: logger.warning("%s", msg))
    warned: set[str] = set()
    objects: list[Obj] = []
    seen: dict[tuple[str, str, str], tuple[str, Obj]] = {}  # kind, namespace, name -> where, object
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
                        if _is_new(seen, obj, f"{file}: {label}", warn):
                            objects.append(obj)
                except _Malformed as exc:
                    raise StateLoadError(f"{file}: {label}: {exc}") from None
    _warn_duplicate_devices(objects, warn)
    return objects


def _is_new(
    seen: dict[tuple[str, str, str], tuple[str, Obj]], obj: Obj, where: str, warn: Callable[[str], None]
) -> bool:
    """Record `obj`; False for an identical repeat (warned), StateLoadError for a different one.

    A state file stands for one cluster, where kind/namespace/name is unique: a second,
    different object under the same name would silently replace the first (a node could
    lose all its GPUs), so it is an error naming both documents.
    """
    kind = obj["kind"]
    key = (kind, *object_key(obj))
    first = seen.get(key)
    if first is None:
        seen[key] = (where, obj)
        return True
    if first[1] == obj:
        warn(f"{where}: identical to {first[0]}; the repeat is ignored")
        return False
    raise StateLoadError(
        f"{where}: another {kind} with the same name is in {first[0]}; a state holds one object per "
        "kind, namespace and name"
    )


def _warn_duplicate_devices(objects: list[Obj], warn: Callable[[str], None]) -> None:
    """Warn about device names repeated across the slices of one pool generation.

    Upstream lets such slices in (each slice alone is valid) and the allocator marks the pool
    invalid; the warning says so at start-up instead of at the first pod.
    """
    owners: dict[tuple[str, str, int, str], str] = {}  # driver, pool, generation, device -> slice
    for obj in objects:
        if obj["kind"] != "ResourceSlice":
            continue
        spec = obj["spec"]
        pool = spec["pool"]
        for device in spec.get("devices") or ():
            key = (spec["driver"], pool["name"], pool.get("generation") or 0, device["name"])
            first = owners.setdefault(key, obj["metadata"]["name"])
            if first != obj["metadata"]["name"]:
                warn(
                    f"ResourceSlice {first} and {obj['metadata']['name']}: pool {key[0]}/{key[1]}: "
                    f"duplicate device name {key[3]}; the pool is invalid, none of its devices will be "
                    "allocated"
                )
