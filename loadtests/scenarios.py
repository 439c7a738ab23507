"""What the locust load test sends and how it judges the answers, kept free of locust.

Scope: everything `loadtests/locustfile.py` does except HTTP: loading the nodes and pending pods
of a scenario, building the exact request bodies kube-scheduler sends (extender-protocol.md §2,
§2.6, §8), checking the answers the way the scheduler would read them, and the bookkeeping of
which pods are still pending. Without locust here, `tests/loadtests/test_locustfile.py` can check the
bodies with `extender.wire` and the checks on canned answers, with no network and no gevent.

Model of one scheduling cycle (extender-protocol.md §5), as the locust user plays it:
1. take a pending pod from the pool and give it a fresh identity (see `PodEntry.instance`);
2. `/filter` with every node of the cluster (`percentageOfNodesToScore: 100`);
3. `/prioritize` with the nodes that passed, only if two or more did (one passing node is
   chosen without scoring, none ends the cycle: the pod stays pending);
4. with probability `bind_ratio`, `/bind` the pod to the best-scored node (ties broken at
   random, as the scheduler does). A bound pod leaves the pool for good, since its claim is
   now allocated; a failed bind puts it back.

Why fresh identities: the extender caches one evaluation per pod UID and state generation, so
replaying the same pods would mostly measure cache hits, and a real scheduler sees each pending
pod about once. Each cycle therefore sends a copy of a pending pod with a new UID and name.
Template-generated claims are owned by their pod's UID (the extender checks that), so the copy
names its claim directly (`resourceClaimName`): the claim, its devices and the evaluation work
are the same, only the ownership check is skipped. `identity="original"` sends the pods as they
are (cache hits after the first cycle of each pod; useful to measure that path).

Expected bind conflicts: kube-scheduler binds asynchronously, so the filter of one pod can run
before an earlier pod's bind took the devices it relied on; the bind then fails with devices
"in use" and the pod is retried. Such an answer counts as a conflict, not a failure, only if
another bind overlapped this cycle (started after this cycle's filter was sent, or was still in
flight then); with no overlapping bind the extender contradicted its own filter answer, which
is a real failure. The overlap bookkeeping is per process: with `locust --processes N`, binds
of other processes are invisible, so run binds from one process.
"""

from __future__ import annotations

import importlib.metadata
import math
import os
import platform
import random
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

from loadtests.fleet import MIXED_SHAPES
from loadtests.generate import SHAPE_LABEL, SHAPES, Obj

REPO = Path(__file__).resolve().parents[1]
#: The pending pods whose template-generated claims are in the embedded sample cluster.
SAMPLE_PODS = REPO / "tests" / "data" / "pipeline_pods.yaml"
#: File names `python -m loadtests.generate --out DIR` writes.
CLUSTER_FILE, PODS_FILE = "cluster.yaml", "pods.jsonl"
#: Shape keywords of `--dra-shapes` that stand for the generators' fast-path / exact-search shapes
#: (claims without / with constraints), of the H100 fleet and of the mixed fleet (`--fleet mixed`).
SHAPE_GROUPS: dict[str, frozenset[str]] = {
    "fast": frozenset({n for n, s in SHAPES.items() if not s.exact_search})
    | {n for n, m in MIXED_SHAPES.items() if not m.exact_search},
    "exact": frozenset({n for n, s in SHAPES.items() if s.exact_search})
    | {n for n, m in MIXED_SHAPES.items() if m.exact_search},
}
#: Bind `Error` text the extender uses when devices that passed filter were taken meanwhile.
_IN_USE = re.compile(r"\bin use\b")
_NODE_DOC = re.compile(r"^kind:\s*['\"]?(Node|NodeList|List)['\"]?\s*$", re.MULTILINE)
_DOC_SPLIT = re.compile(r"^---[^\S\n]*(?:#.*)?$", re.MULTILINE)
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
IDENTITIES = ("fresh", "original")


# ----------------------------------------------------------------- loading


def _state_files(path: Path) -> list[Path]:
    """The files `serve --state PATH` reads: the file, or the *.yaml/*.yml/*.json below a directory."""
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml", ".json") and p.is_file())
    return [path]


def _nodes_in(doc: Any) -> Iterable[Obj]:
    if not isinstance(doc, dict):
        return
    if doc.get("kind") == "Node":
        yield doc
    elif isinstance(doc.get("items"), list):  # kind: List or NodeList (kubectl get -o yaml)
        for item in doc["items"]:
            if isinstance(item, dict) and (item.get("kind") == "Node" or doc.get("kind") == "NodeList"):
                yield item


def _documents(text: str, json_file: bool) -> list[Any]:
    if json_file:
        return [orjson.loads(text)]
    # Parse only documents that can hold Nodes: a 5,000-node state file is ~90 MB of YAML, almost
    # all ResourceSlices and claims, and the load generator needs nothing but the Nodes.
    chunks = [c for c in _DOC_SPLIT.split(text) if _NODE_DOC.search(c)]
    docs = [yaml.load(chunk, Loader=_YAML_LOADER) for chunk in chunks]
    if any(True for doc in docs for _ in _nodes_in(doc)):
        return docs
    return list(yaml.load_all(text, Loader=_YAML_LOADER))  # unusual layout: parse everything


def _informer_copy(obj: Obj) -> Obj:
    # Informer objects carry no kind/apiVersion (extender-protocol.md §2.1); send them the same way.
    return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}


def load_nodes(paths: Sequence[Path] | None) -> list[Obj]:
    """The Node objects of a state (files or directories as for `serve --state`), in file order.

    Args:
        paths: state files or directories; None or empty means the embedded sample cluster.

    Returns:
        The Nodes without `kind`/`apiVersion`, as the scheduler's informer holds them.

    Raises:
        ValueError: no Node found, or two Nodes with one name.
    """
    docs: list[Any] = []
    if not paths:
        from extender.cluster.sample import sample_text

        docs = _documents(sample_text(), json_file=False)
    else:
        for path in paths:
            for file in _state_files(Path(path)):
                docs.extend(_documents(file.read_text(encoding="utf-8"), file.suffix == ".json"))
    nodes = [_informer_copy(node) for doc in docs for node in _nodes_in(doc)]
    names = [(node.get("metadata") or {}).get("name") for node in nodes]
    if not nodes:
        where = ", ".join(str(path) for path in paths) if paths else "the embedded sample"
        raise ValueError(f"no Node objects in {where}")
    if len(set(names)) != len(names) or not all(isinstance(n, str) and n for n in names):
        raise ValueError("every Node needs a unique, non-empty metadata.name")
    return nodes


def load_pods(path: Path | None) -> list[Obj]:
    """Pending pods from a `pods.jsonl` (one JSON Pod a line) or a YAML/JSON file of Pods.

    Args:
        path: the file; None means the sample's pending pods (`tests/data/pipeline_pods.yaml`).

    Returns:
        The pods without `kind`/`apiVersion`; pods already bound (`spec.nodeName`) are left
        out, since the scheduler never sends those.

    Raises:
        ValueError: no pending pod in the file.
    """
    path = Path(path) if path is not None else SAMPLE_PODS
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        docs: list[Any] = [orjson.loads(line) for line in text.splitlines() if line.strip()]
    else:
        docs = list(yaml.load_all(text, Loader=_YAML_LOADER))
    pods: list[Obj] = []
    for doc in docs:
        items = doc.get("items") if isinstance(doc, dict) and "items" in doc else [doc]
        for item in items or ():
            pending = isinstance(item, dict) and not (item.get("spec") or {}).get("nodeName")
            if pending and item.get("kind", "Pod") == "Pod":
                pods.append(_informer_copy(item))
    if not pods:
        raise ValueError(f"no pending Pod in {path}")
    return pods


def pod_shape(pod: Obj) -> str:
    """The claim shape of a pod: the generator's shape label, else the pod's name (sample pods)."""
    meta = pod.get("metadata") or {}
    return str((meta.get("labels") or {}).get(SHAPE_LABEL) or meta.get("name", ""))


def select_shapes(pods: list[Obj], wanted: Iterable[str]) -> list[Obj]:
    """Keep the pods whose shape is wanted (`fast`/`exact` expand to the generator's groups).

    Raises:
        ValueError: a wanted shape matches no pod (names the shapes there are).
    """
    wanted = list(wanted)
    if not wanted:
        return pods
    present = {pod_shape(pod) for pod in pods}
    names: set[str] = set()
    unknown = []
    for item in wanted:
        group = SHAPE_GROUPS.get(item, frozenset({item}))
        names |= group
        if not group & present:
            unknown.append(item)
    if unknown:
        raise ValueError(
            f"no pod has shape {', '.join(unknown)}; the pods' shapes: {', '.join(sorted(present))}"
        )
    return [pod for pod in pods if pod_shape(pod) in names]


# ----------------------------------------------------------------- request bodies


class Bodies:
    """Encodes filter/prioritize/bind bodies the way kube-scheduler marshals them.

    Field order is the Go struct order (`Pod`, `Nodes`, `NodeNames`); unset fields are `null`,
    never omitted. The node part is encoded once, since it is the same in every filter call and
    with `nodeCacheCapable: false` can be megabytes.
    """

    def __init__(self, nodes: list[Obj], *, node_cache_capable: bool) -> None:
        self.node_cache_capable = node_cache_capable
        self.names: list[str] = [node["metadata"]["name"] for node in nodes]
        self.name_set: frozenset[str] = frozenset(self.names)
        self._node_json: dict[str, bytes] = {}
        if node_cache_capable:
            self._all_nodes = b'"Nodes":null,"NodeNames":' + orjson.dumps(self.names)
        else:
            self._node_json = {node["metadata"]["name"]: orjson.dumps(node) for node in nodes}
            self._all_nodes = self._node_list(self.names)

    def _node_list(self, names: Sequence[str]) -> bytes:
        items = b",".join(self._node_json[name] for name in names)
        return b'"Nodes":{"metadata":{},"items":[' + items + b']},"NodeNames":null'

    def filter(self, pod: Obj) -> bytes:
        """`ExtenderArgs` for filter: the pod and every node of the cluster."""
        return b'{"Pod":' + orjson.dumps(pod) + b"," + self._all_nodes + b"}"

    def prioritize(self, pod: Obj, names: Sequence[str]) -> bytes:
        """`ExtenderArgs` for prioritize: the pod and the nodes that passed filter."""
        if self.node_cache_capable:
            nodes = b'"Nodes":null,"NodeNames":' + orjson.dumps(list(names))
        else:
            nodes = self._node_list(names)
        return b'{"Pod":' + orjson.dumps(pod) + b"," + nodes + b"}"

    @staticmethod
    def bind(pod: Obj, node: str) -> bytes:
        """`ExtenderBindingArgs` for binding `pod` to `node`."""
        meta = pod.get("metadata") or {}
        return orjson.dumps(
            {
                "PodName": meta.get("name", ""),
                "PodNamespace": meta.get("namespace") or "default",
                "PodUID": meta.get("uid", ""),
                "Node": node,
            }
        )


# ----------------------------------------------------------------- pods and their pool


def _direct_claims(pod: Obj) -> tuple[Obj, Obj]:
    """`spec` and `status` of a copy that names its template-generated claims directly."""
    spec, status = dict(pod.get("spec") or {}), dict(pod.get("status") or {})
    generated = {
        s.get("name"): s.get("resourceClaimName")
        for s in status.get("resourceClaimStatuses") or ()
        if s.get("resourceClaimName")
    }
    entries = []
    for entry in spec.get("resourceClaims") or ():
        claim = generated.get(entry.get("name"))
        if entry.get("resourceClaimTemplateName") and claim:
            entry = {"name": entry["name"], "resourceClaimName": claim}
        entries.append(entry)
    if entries:
        spec["resourceClaims"] = entries
    rest = [s for s in status.get("resourceClaimStatuses") or () if s.get("name") not in generated]
    if rest:
        status["resourceClaimStatuses"] = rest
    else:
        status.pop("resourceClaimStatuses", None)
    return spec, status


@dataclass(slots=True)
class PodEntry:
    """One pending pod of the pool and its claim; `instance` makes what a cycle sends."""

    pod: Obj
    shape: str
    _spec: Obj = field(default_factory=dict)
    _status: Obj = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._spec, self._status = _direct_claims(self.pod)

    def instance(self, identity: str, rng: random.Random, seq: int) -> Obj:
        """The pod to send in one cycle: a fresh copy (new UID and name) or the pod as loaded."""
        if identity == "original":
            return self.pod
        meta = self.pod.get("metadata") or {}
        fresh = {
            **meta,
            "name": f"{meta.get('name', 'pod')}-lt{seq}",
            "uid": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        }
        return {**self.pod, "metadata": fresh, "spec": self._spec, "status": self._status}


@dataclass(frozen=True, slots=True)
class BindMark:
    """Bind activity when a cycle's filter was sent (see the module docstring)."""

    started: int
    in_flight: int


class PodPool:
    """Pending pods shared by the users of one locust process.

    Users run as gevent greenlets and none of these methods yields, so no lock is needed.
    Binding a pod allocates its claim for good (the state file has no delete), so at most
    `bind_limit` pods are bound: the rest stay pending and keep the filter workload alive.
    """

    def __init__(self, pods: list[Obj], *, bind_limit: int, rng: random.Random) -> None:
        self.entries = [PodEntry(pod, pod_shape(pod)) for pod in pods]
        self.bind_limit = bind_limit
        self._rng = rng
        self._open: list[int] = list(range(len(self.entries)))  # not bound (pending or binding)
        self._binding: set[int] = set()
        self.bound = 0
        self.binds_started = 0
        self.binds_in_flight = 0
        self.seq = 0

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def take(self, *, for_bind: bool) -> int | None:
        """An entry for one cycle; for a bind cycle one nobody else is binding (None: no such pod)."""
        if not self._open:
            return None
        if not for_bind:
            return self._rng.choice(self._open)
        if self.bound + len(self._binding) >= self.bind_limit:
            return None
        for _ in range(8):  # the binding set is small: random probes almost always hit
            key = self._rng.choice(self._open)
            if key not in self._binding:
                break
        else:
            free = [k for k in self._open if k not in self._binding]
            if not free:
                return None
            key = self._rng.choice(free)
        self._binding.add(key)
        return key

    def release(self, key: int) -> None:
        """The bind cycle ended without binding: the pod is pending again."""
        self._binding.discard(key)

    def mark_bound(self, key: int) -> None:
        """The pod is bound: its claim is allocated, it leaves the pool."""
        self._binding.discard(key)
        self._open.remove(key)
        self.bound += 1

    def mark(self) -> BindMark:
        return BindMark(self.binds_started, self.binds_in_flight)

    def overlapped(self, mark: BindMark) -> bool:
        """Did another bind overlap the cycle whose filter was sent at `mark`? (before ours starts)"""
        return self.binds_started > mark.started or mark.in_flight > 0

    @property
    def pending(self) -> int:
        return len(self._open)


# ----------------------------------------------------------------- judging answers


@dataclass(frozen=True, slots=True)
class FilterAnswer:
    """A filter answer as the scheduler reads it; `problem` non-empty makes it a failure."""

    passed: list[str] = field(default_factory=list)
    failed: int = 0
    unresolvable: int = 0
    problem: str = ""


def _snippet(body: bytes | None) -> str:
    text = (body or b"")[:300].decode("utf-8", "replace")
    return text + ("..." if body and len(body) > 300 else "")


def _load(status: int, body: bytes | None) -> tuple[Any, str]:
    if status != 200:  # the scheduler accepts exactly 200 (extender-protocol.md §1)
        return None, f"HTTP {status}: {_snippet(body)}"
    try:
        return orjson.loads(body or b""), ""
    except orjson.JSONDecodeError as exc:
        return None, f"invalid JSON ({exc}): {_snippet(body)}"


def check_filter(status: int, body: bytes | None, sent: Bodies) -> FilterAnswer:
    """Judge a filter answer to a request that carried every node of `sent` (`Bodies.filter`).

    Failures: what the scheduler treats as an extender error (non-200, bad JSON, `Error`, a
    passed name it never sent), and what breaks the extender's own contract (every sent node
    in exactly one of passed / `FailedNodes` / `FailedAndUnresolvableNodes`; with
    `nodeCacheCapable: false` the passed nodes in `Nodes`, which is where the scheduler reads).
    """
    cache_capable, names = sent.node_cache_capable, sent.name_set
    result, problem = _load(status, body)
    if problem:
        return FilterAnswer(problem=problem)
    if not isinstance(result, dict):
        return FilterAnswer(problem=f"answer is not a JSON object: {_snippet(body)}")
    error = result.get("Error")
    if error:
        return FilterAnswer(problem=f"Error: {error}")
    failed, unresolvable = result.get("FailedNodes") or {}, result.get("FailedAndUnresolvableNodes") or {}
    if not isinstance(failed, dict) or not isinstance(unresolvable, dict):
        return FilterAnswer(problem="FailedNodes/FailedAndUnresolvableNodes must be objects")
    node_names, nodes = result.get("NodeNames"), result.get("Nodes")
    if cache_capable and node_names is not None:
        passed = node_names
    elif nodes is not None:
        items = nodes.get("items") if isinstance(nodes, dict) else None
        if not isinstance(items, list):
            return FilterAnswer(problem="Nodes is not a NodeList with items")
        passed = [((item or {}).get("metadata") or {}).get("name") for item in items]
    elif node_names:
        return FilterAnswer(problem="answered NodeNames but no Nodes to nodeCacheCapable=false: none pass")
    else:
        passed = []
    if not isinstance(passed, list) or not all(isinstance(n, str) for n in passed):
        return FilterAnswer(problem="passed nodes are not a list of names")
    unknown = [n for n in (*passed, *failed, *unresolvable) if n not in names]
    if unknown:
        return FilterAnswer(problem=f"names nodes it was not sent: {unknown[:3]}")
    counted = len(passed) + len(failed) + len(unresolvable)
    if counted != len(names) or len({*passed, *failed, *unresolvable}) != counted:
        return FilterAnswer(
            problem=f"{len(names)} nodes sent, {len(passed)} passed + {len(failed)} failed + "
            f"{len(unresolvable)} unresolvable: each node must be in exactly one"
        )
    return FilterAnswer(passed, len(failed), len(unresolvable))


def check_prioritize(status: int, body: bytes | None, sent: Sequence[str]) -> tuple[dict[str, int], str]:
    """Judge a prioritize answer: `({host: score}, problem)`, problem '' if it is well-formed.

    kube-scheduler silently ignores a broken prioritize answer (extender-protocol.md §3.2), so
    this is the only place where one shows up: a JSON array of `{"Host", "Score"}`, hosts among
    the sent nodes, integer scores within 0..10.
    """
    result, problem = _load(status, body)
    if problem:
        return {}, problem
    if not isinstance(result, list):
        return {}, f"answer is not a JSON array: {_snippet(body)}"
    allowed = set(sent)
    scores: dict[str, int] = {}
    for entry in result:
        host = entry.get("Host") if isinstance(entry, dict) else None
        score = entry.get("Score") if isinstance(entry, dict) else None
        if host not in allowed or not isinstance(score, int) or isinstance(score, bool):
            return {}, f"bad entry {entry!r}: Host must be a sent node, Score an integer"
        if not 0 <= score <= 10:
            return {}, f"score {score} for {host} outside 0..10"
        scores[host] = score
    return scores, ""


BOUND, CONFLICT, FAILURE = "bound", "conflict", "failure"


def check_bind(status: int, body: bytes | None, *, overlapped: bool) -> tuple[str, str]:
    """Judge a bind answer: `(BOUND | CONFLICT | FAILURE, message)`.

    CONFLICT only for an `Error` saying the devices are in use while another bind overlapped
    this cycle (module docstring); any other `Error` is a FAILURE, as for the scheduler.
    """
    result, problem = _load(status, body)
    if problem:
        return FAILURE, problem
    if not isinstance(result, dict):
        return FAILURE, f"answer is not a JSON object: {_snippet(body)}"
    error = result.get("Error") or ""
    if not isinstance(error, str):
        return FAILURE, f"Error is not a string: {error!r}"
    if not error:
        return BOUND, ""
    if overlapped and _IN_USE.search(error):
        return CONFLICT, error
    return FAILURE, f"Error: {error}"


def best_node(passed: Sequence[str], scores: dict[str, int], rng: random.Random) -> str:
    """The node the scheduler would pick on our scores alone: the highest, ties at random."""
    top = max((scores.get(name, 0) for name in passed), default=0)
    return rng.choice([name for name in passed if scores.get(name, 0) == top])


# ----------------------------------------------------------------- reporting


@dataclass(slots=True)
class Tally:
    """Cycle outcomes of one locust process, for the summary printed at the end."""

    cycles: int = 0
    unschedulable: int = 0  # filter passed no node
    one_node: int = 0  # filter passed exactly one node: no prioritize
    bind_attempts: int = 0
    bound: int = 0
    conflicts: int = 0
    bind_failures: int = 0
    bind_skipped: int = 0  # bind wanted, but no pod left to bind (bind_limit or all in flight)


def percentile(sorted_ms: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) of sorted samples, nearest-rank; 0 for no samples."""
    if not sorted_ms:
        return 0.0
    rank = min(len(sorted_ms), max(1, math.ceil(q * len(sorted_ms))))
    return sorted_ms[rank - 1]


def machine_facts() -> dict[str, Any]:
    """CPU model, core counts, Python and numpy versions of this machine (the benches report these)."""
    model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 0
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "numpy": importlib.metadata.version("numpy"),
        "platform": platform.platform(),
    }


def machine() -> str:
    """CPU model and core count of this machine, for the report."""
    facts = machine_facts()
    model = facts["cpu"] if facts["cpu"] != "unknown" else "unknown CPU"
    return f"{model}, {facts['cores']} cores ({facts['usable_cores']} usable), Python {facts['python']}"
