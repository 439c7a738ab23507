"""Validate objects entering the cluster state, as the API server would (dra.md §1).

Owns: the type, shape and limit rules of the kinds the extender reads (Node, Namespace, Pod,
ResourceSlice, DeviceClass, ResourceClaim, ResourceClaimTemplate, DeviceTaintRule), so that the
index, the claim resolution and the allocator can read fields without guarding every lookup.
Every problem is reported as `<field path>: <problem>`; `InvalidObject` adds kind and
namespace/name. Both loaders call this module: files stop start-up (exit 2), the kube source
skips and counts the object.

Leaves out, on purpose, what the allocator reports per pod with upstream's own messages (so the
upstream conformance cases keep their errors): CEL that does not compile, unknown DeviceClasses,
unknown enum values a newer API server could serve (allocation modes, selector, request and
constraint types), more than 32 devices requested by one claim, and contradictions between the
slices of one pool (duplicate device names across slices, unknown counter sets).

Rules are the resource.k8s.io/v1 and core/v1 ones that matter to us; limits are the constants
of dra.md §1.2. Unknown fields are ignored (a newer API server may send them). The loaders use
the strict mode; claim resolution re-checks stored claims and request pods with `strict=False`
(types and `count >= 1` only), which any object a reader can handle passes.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Callable, Iterable
from typing import Any

from extender.errors import ExtenderError
from extender.objects import Obj
from extender.quantity import Quantity

# ---------------------------------------------------------------------- limits (dra.md §1.2)
MAX_DEVICES_PER_SLICE = 128
MAX_DEVICES_PER_SLICE_ADVANCED = 64  # any device with taints, consumesCounters or list attributes
MAX_COUNTER_SETS = 8
MAX_COUNTERS_PER_SET = 32
MAX_COUNTER_CONSUMPTIONS_PER_DEVICE = 2
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_ATTRIBUTE_VALUES = 48
MAX_ATTRIBUTE_VALUE_LENGTH = 64
MAX_TAINTS = 16
MAX_BINDING_CONDITIONS = 4
MAX_POD_GROUP_CLAIMS = 4  # upstream's MaxPodGroupResourceClaims
MAX_REQUESTS = 32
MAX_RESULTS = 32
MAX_CONSTRAINTS = 32
#: resourceapi.DeviceDerivedAttributesMaxSize (Kubernetes 1.37): derived attributes per request.
MAX_DERIVED_ATTRIBUTES = 32
MAX_CONFIGS = 32
MAX_ALLOCATION_CONFIGS = 64
MAX_SELECTORS = 32
MAX_SUBREQUESTS = 8
MAX_TOLERATIONS = 16
MAX_RESERVED_FOR = 256
MAX_CEL_LENGTH = 10 * 1024
MAX_DRIVER_NAME = 63
MAX_POOL_NAME = 253
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: At most this many problems are collected per object (the first one is what the message shows).
MAX_PROBLEMS = 20

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(-(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?"
    r"(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?"
)
_NODE_SELECTION = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")
_SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
_SCALAR_ATTRIBUTES = {"int": "int", "bool": "bool", "string": "string", "version": "version"}
_LIST_ATTRIBUTES = {"ints": "int", "bools": "bool", "strings": "string", "versions": "version"}
NAMESPACED_KINDS = frozenset({"Pod", "ResourceClaim", "ResourceClaimTemplate", "PodGroup"})


class InvalidObject(ExtenderError):
    """An object the API server would not have accepted; names kind, namespace/name and fields."""

    def __init__(self, kind: str, ref: str, problems: list[str]) -> None:
        self.kind, self.ref, self.problems = kind, ref, problems
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        super().__init__(f"{kind} {ref}: {problems[0]}{more}".replace(f"{kind} : ", f"{kind}: "))

    @property
    def detail(self) -> str:
        """The field-level problems without kind and name (the file loader adds its own label)."""
        more = f" (and {len(self.problems) - 1} more problem(s))" if len(self.problems) > 1 else ""
        return f"{self.problems[0]}{more}"


def object_ref(obj: Any) -> str:
    """`namespace/name` for namespaced kinds, `name` otherwise; '' when the name is unusable."""
    if not isinstance(obj, dict):
        return ""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return ""
    name = meta.get("name")
    name = name if isinstance(name, str) else ""
    if obj.get("kind") in NAMESPACED_KINDS:
        namespace = meta.get("namespace")
        namespace = namespace if isinstance(namespace, str) and namespace else "default"
        return f"{namespace}/{name}" if name else ""
    return name


def problems(obj: Any, *, strict: bool = True) -> list[str]:
    """Every problem found in one object of a known kind (empty: valid).

    `strict=False`: only the types and shapes the extender's readers rely on, plus `count >= 1`
    (claim resolution re-checks stored claims this way: defence in depth that still accepts
    the upstream allocator's test inputs, which never went through an API server).
    """
    check = _Checker(strict=strict)
    if not isinstance(obj, dict):
        check.fail("", f"must be an object, got {_type(obj)}")
        return check.found
    kind = obj.get("kind")
    validator = _VALIDATORS.get(kind) if isinstance(kind, str) else None
    if validator is None:
        check.fail("kind", f"{kind!r} is not a kind the extender reads")
        return check.found
    with contextlib.suppress(_Enough):
        validator(check, obj)
    return check.found


def validate(obj: Any) -> None:
    """Raise `InvalidObject` if `obj` has any problem (see `problems`)."""
    found = problems(obj)
    if found:
        kind = obj.get("kind") if isinstance(obj, dict) else None
        raise InvalidObject(kind if isinstance(kind, str) else "object", object_ref(obj), found)


def pod_problem(pod: Any) -> str:
    """What is wrong with a pod sent to /filter or `explain`, in one line ('' if nothing).

    Checks the types of the fields claim resolution reads (not the API's name rules); unlike a
    stored Pod, the name may be missing (the scheduler always sends it, hand-made requests may not).
    """
    check = _Checker(strict=False)
    if not isinstance(pod, dict):
        return f"Pod: must be an object, got {_type(pod)}"
    with contextlib.suppress(_Enough):
        meta = check.mapping(pod.get("metadata"), "metadata") or {}
        for field in ("name", "namespace", "uid"):
            check.string(meta.get(field), f"metadata.{field}")
        _pod_body(check, pod)
    if not check.found:
        return ""
    return str(InvalidObject("Pod", object_ref({**pod, "kind": "Pod"}), check.found))


# ---------------------------------------------------------------------- the checker


class _Enough(Exception):
    """Raised once MAX_PROBLEMS problems are collected: the rest would not help the reader."""


@functools.lru_cache(maxsize=8192)
def _quantity_problem(value: str | int | float) -> str:
    try:
        Quantity.parse(value)
    except ValueError as exc:
        return str(exc)
    return ""


def _type(value: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "bool", int: "integer", float: "number"}.get(
        type(value), "null" if value is None else type(value).__name__
    )


def _join(path: str, field: str) -> str:
    return f"{path}.{field}" if path else field


class _Checker:
    """Collects problems; the helpers return the value when it has the right type, else None.

    `strict=False` keeps only what reading the object safely needs: types (`fail`) and
    `count >= 1`; name syntax, limits, required and cross-field rules (`rule`) are skipped.
    """

    def __init__(self, *, strict: bool = True) -> None:
        self.found: list[str] = []
        self.strict = strict

    def fail(self, path: str, problem: str) -> None:
        self.found.append(f"{path}: {problem}" if path else problem)
        if len(self.found) >= MAX_PROBLEMS:
            raise _Enough()

    def rule(self, path: str, problem: str) -> None:
        """A problem with an API rule rather than with the type: reported in strict mode only."""
        if self.strict:
            self.fail(path, problem)

    # -- types
    def mapping(self, value: Any, path: str, *, required: bool = False) -> Obj | None:
        if value is None:
            if required:
                self.rule(path, "required")
            return None
        if not isinstance(value, dict):
            self.fail(path, f"must be an object, got {_type(value)}")
            return None
        return value

    def items(self, value: Any, path: str, *, limit: int | None = None, required: bool = False) -> list[Any]:
        if value is None:
            if required:
                self.rule(path, "required")
            return []
        if not isinstance(value, list):
            self.fail(path, f"must be a list, got {_type(value)}")
            return []
        if limit is not None and len(value) > limit:
            self.rule(path, f"must have at most {limit} entries, got {len(value)}")
        return value

    def objects(self, value: Any, path: str, *, limit: int | None = None) -> Iterable[tuple[str, Obj]]:
        """(path, object) of each list entry that is an object; other entries are reported."""
        for i, entry in enumerate(self.items(value, path, limit=limit)):
            where = f"{path}[{i}]"
            if isinstance(entry, dict):
                yield where, entry
            else:
                self.fail(where, f"must be an object, got {_type(entry)}")

    def string(
        self,
        value: Any,
        path: str,
        *,
        required: bool = False,
        max_length: int | None = None,
        syntax: Callable[[str], str] | None = None,
    ) -> str | None:
        if value is None or (required and value == ""):
            if required:
                self.rule(path, "required")
            return None
        if not isinstance(value, str):
            self.fail(path, f"must be a string, got {_type(value)}")
            return None
        if max_length is not None and len(value) > max_length:
            self.rule(path, f"must be at most {max_length} characters, got {len(value)}")
            return None
        if syntax is not None and value:
            problem = syntax(value)
            if problem:
                self.rule(path, problem)
                return None
        return value

    def strings(self, value: Any, path: str, *, limit: int | None = None) -> list[str]:
        found = []
        for i, entry in enumerate(self.items(value, path, limit=limit)):
            text = self.string(entry, f"{path}[{i}]", required=True)
            if text is not None:
                found.append(text)
        return found

    def boolean(self, value: Any, path: str) -> bool | None:
        if value is None:
            return None
        if not isinstance(value, bool):
            self.fail(path, f"must be a boolean, got {_type(value)}")
            return None
        return value

    def integer(
        self, value: Any, path: str, *, minimum: int | None = None, required: bool = False
    ) -> int | None:
        if value is None:
            if required:
                self.rule(path, "required")
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"must be an integer, got {_type(value)}")
            return None
        if not INT64_MIN <= value <= INT64_MAX:
            self.fail(path, "out of the int64 range")
            return None
        if minimum is not None and value < minimum:
            self.fail(path, f"must be at least {minimum}, got {value}")
            return None
        return value

    def quantity(self, value: Any, path: str, *, required: bool = True) -> None:
        if value is None:
            if required:
                self.rule(path, "required")
            return
        problem = _quantity_problem(value) if isinstance(value, str | int | float) else ""
        if problem or not isinstance(value, str | int | float) or isinstance(value, bool):
            self.fail(
                path, f"invalid quantity: {problem or f'expected a string or a number, not {_type(value)}'}"
            )

    def string_map(self, value: Any, path: str) -> None:
        for key, entry in (self.mapping(value, path) or {}).items():
            if not isinstance(entry, str):
                self.fail(f"{path}[{key}]", f"must be a string, got {_type(entry)}")

    def exactly_one(
        self, obj: Obj, fields: Iterable[str], path: str, *, allow_none: bool = False
    ) -> list[str]:
        chosen = [f for f in fields if obj.get(f) not in (None, False, "")]
        if len(chosen) > 1 or (not chosen and not allow_none):
            got = f"got {', '.join(chosen)}" if chosen else "got none"
            self.rule(path, f"exactly one of {', '.join(fields)} is required, {got}")
        return chosen


# ---------------------------------------------------------------------- name syntax
# Pure functions of one string, cached: the same names and values repeat on every device.


@functools.lru_cache(maxsize=8192)
def dns_label(value: str) -> str:
    if len(value) > 63 or not _DNS_LABEL.fullmatch(value):
        return f"{value!r} is not a DNS label (lowercase letters, digits and '-', at most 63)"
    return ""


@functools.lru_cache(maxsize=8192)
def dns_subdomain(value: str) -> str:
    if len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value):
        return f"{value!r} is not a DNS subdomain (lowercase letters, digits, '-' and '.', at most 253)"
    return ""


@functools.lru_cache(maxsize=8192)
def driver_name(value: str) -> str:
    if len(value) > MAX_DRIVER_NAME:
        return f"must be at most {MAX_DRIVER_NAME} characters, got {len(value)}"
    return dns_subdomain(value)


@functools.lru_cache(maxsize=8192)
def pool_name(value: str) -> str:
    if len(value) > MAX_POOL_NAME:
        return f"must be at most {MAX_POOL_NAME} characters, got {len(value)}"
    if any(dns_subdomain(part) for part in value.split("/")):
        return f"{value!r} is not a pool name (DNS subdomains separated by '/')"
    return ""


@functools.lru_cache(maxsize=8192)
def qualified_name(value: str, *, domain_required: bool = False) -> str:
    """DRA's QualifiedName: C identifier (<= 32) or `<DNS subdomain <= 63>/<C identifier <= 32>`."""
    domain, slash, ident = value.rpartition("/")
    if domain_required and not slash:
        return f"{value!r} must be fully qualified (<domain>/<name>)"
    if slash and (not domain or len(domain) > 63 or not _DNS_SUBDOMAIN.fullmatch(domain)):
        return f"{value!r}: the domain must be a DNS subdomain of at most 63 characters"
    if len(ident) > 32 or not _C_IDENTIFIER.fullmatch(ident):
        return f"{value!r}: the name must be a C identifier of at most 32 characters"
    return ""


@functools.lru_cache(maxsize=8192)
def c_identifier(value: str) -> str:
    if len(value) > 32 or not _C_IDENTIFIER.fullmatch(value):
        return f"{value!r} is not a C identifier of at most 32 characters"
    return ""


@functools.lru_cache(maxsize=8192)
def counter_name(value: str) -> str:
    # Upstream validates counter names as DNS labels (validateCounterName is
    # ValidateDNS1123Label): the real API server refuses `memorySlice0`, so file mode does too.
    if dns_label(value):
        return f"{value!r} is not a counter name (a DNS label)"
    return ""


@functools.lru_cache(maxsize=8192)
def label_key(value: str) -> str:
    prefix, slash, name = value.rpartition("/")
    if slash and (not prefix or dns_subdomain(prefix)):
        return f"{value!r}: the prefix must be a DNS subdomain"
    if len(name) > 63 or not _LABEL_NAME.fullmatch(name):
        return f"{value!r} is not a label key"
    return ""


@functools.lru_cache(maxsize=8192)
def label_value(value: str) -> str:
    if value and (len(value) > 63 or not _LABEL_NAME.fullmatch(value)):
        return f"{value!r} is not a label value (at most 63 characters)"
    return ""


@functools.lru_cache(maxsize=8192)
def semver(value: str) -> str:
    return "" if _SEMVER.fullmatch(value) else f"{value!r} is not a semantic version (semver 2.0.0)"


# ---------------------------------------------------------------------- shared pieces


def _metadata(check: _Checker, obj: Obj, *, namespaced: bool, name_syntax: Callable[[str], str]) -> Obj:
    meta = check.mapping(obj.get("metadata"), "metadata", required=True) or {}
    check.string(meta.get("name"), "metadata.name", required=True, syntax=name_syntax)
    if namespaced:
        check.string(meta.get("namespace"), "metadata.namespace", syntax=dns_label)
    for field in ("uid", "resourceVersion", "deletionTimestamp", "creationTimestamp", "generateName"):
        check.string(meta.get(field), f"metadata.{field}")
    for field in ("labels", "annotations"):
        check.string_map(meta.get(field), f"metadata.{field}")
    for where, ref in check.objects(meta.get("ownerReferences"), "metadata.ownerReferences"):
        for field in ("kind", "name", "uid", "apiVersion"):
            check.string(ref.get(field), f"{where}.{field}")
        check.boolean(ref.get("controller"), f"{where}.controller")
    return meta


def _node_selector(check: _Checker, value: Any, path: str, *, one_term: bool) -> None:
    selector = check.mapping(value, path)
    if selector is None:
        return
    terms = check.items(selector.get("nodeSelectorTerms"), f"{path}.nodeSelectorTerms", required=True)
    if one_term and isinstance(selector.get("nodeSelectorTerms"), list) and len(terms) != 1:
        check.rule(f"{path}.nodeSelectorTerms", f"must have exactly one term, got {len(terms)}")
    for where, term in check.objects(terms, f"{path}.nodeSelectorTerms"):
        for field in ("matchExpressions", "matchFields"):
            for at, requirement in check.objects(term.get(field), f"{where}.{field}"):
                check.string(requirement.get("key"), f"{at}.key", required=True)
                operator = check.string(requirement.get("operator"), f"{at}.operator", required=True)
                if operator is not None and operator not in _SELECTOR_OPERATORS:
                    check.rule(
                        f"{at}.operator",
                        f"{operator!r} is not one of {', '.join(sorted(_SELECTOR_OPERATORS))}",
                    )
                check.strings(requirement.get("values"), f"{at}.values")


def _taint(check: _Checker, taint: Obj, path: str) -> None:
    check.string(taint.get("key"), f"{path}.key", required=True, syntax=label_key)
    check.string(taint.get("value"), f"{path}.value", syntax=label_value)
    # Upstream treats an effect it does not know like None, so only the type is checked.
    check.string(taint.get("effect"), f"{path}.effect", required=True)
    check.string(taint.get("timeAdded"), f"{path}.timeAdded")


def _counters(check: _Checker, value: Any, path: str) -> None:
    counters = check.mapping(value, path) or {}
    if len(counters) > MAX_COUNTERS_PER_SET:
        check.rule(path, f"must have at most {MAX_COUNTERS_PER_SET} counters, got {len(counters)}")
    for name, counter in counters.items():
        where = f"{path}[{name}]"
        check.string(name, where, syntax=counter_name)
        counter = check.mapping(counter, where, required=True)
        if counter is not None:
            check.quantity(counter.get("value"), f"{where}.value")


# ---------------------------------------------------------------------- ResourceSlice


def _slice(check: _Checker, obj: Obj) -> None:
    _metadata(check, obj, namespaced=False, name_syntax=dns_subdomain)
    spec = check.mapping(obj.get("spec"), "spec", required=True)
    if spec is None:
        return
    check.string(spec.get("driver"), "spec.driver", required=True, syntax=driver_name)
    pool = check.mapping(spec.get("pool"), "spec.pool", required=True) or {}
    check.string(pool.get("name"), "spec.pool.name", required=True, syntax=pool_name)
    check.integer(pool.get("generation"), "spec.pool.generation", minimum=0)
    check.integer(pool.get("resourceSliceCount"), "spec.pool.resourceSliceCount", minimum=1, required=True)
    chosen = check.exactly_one(spec, _NODE_SELECTION, "spec")
    check.string(spec.get("nodeName"), "spec.nodeName", syntax=dns_subdomain)
    _node_selector(check, spec.get("nodeSelector"), "spec.nodeSelector", one_term=True)
    check.boolean(spec.get("allNodes"), "spec.allNodes")
    per_device = check.boolean(
        spec.get("perDeviceNodeSelection"), "spec.perDeviceNodeSelection"
    ) and chosen == ["perDeviceNodeSelection"]
    check.string(
        spec.get("partitionTypeAttribute"),
        "spec.partitionTypeAttribute",
        syntax=lambda v: qualified_name(v, domain_required=True),
    )
    check.strings(spec.get("skipNodeOperations"), "spec.skipNodeOperations")

    counter_sets = list(
        check.objects(spec.get("sharedCounters"), "spec.sharedCounters", limit=MAX_COUNTER_SETS)
    )
    set_names: set[str] = set()
    for where, counter_set in counter_sets:
        name = check.string(counter_set.get("name"), f"{where}.name", required=True, syntax=dns_label)
        if name is not None:
            if name in set_names:
                check.rule(f"{where}.name", f"duplicate counter set name {name}")
            set_names.add(name)
        _counters(check, counter_set.get("counters"), f"{where}.counters")

    raw_devices = spec.get("devices")
    devices = check.items(raw_devices, "spec.devices")
    if counter_sets and devices:
        check.rule("spec", "a slice has either devices or sharedCounters, not both")
    if len(devices) > MAX_DEVICES_PER_SLICE:
        # Stop here: checking thousands of devices one by one only repeats the verdict.
        check.rule("spec.devices", f"must have at most {MAX_DEVICES_PER_SLICE} devices, got {len(devices)}")
        return
    names: dict[str, int] = {}
    advanced = False
    for i, device in enumerate(devices):
        where = f"spec.devices[{i}]"
        if not isinstance(device, dict):
            check.fail(where, f"must be an object, got {_type(device)}")
            continue
        advanced |= _device(check, device, where, per_device=bool(per_device))
        name = device.get("name")
        if isinstance(name, str) and name:
            if name in names:
                check.rule(
                    f"{where}.name", f"duplicate device name {name} (also spec.devices[{names[name]}])"
                )
            names.setdefault(name, i)
    if advanced and len(devices) > MAX_DEVICES_PER_SLICE_ADVANCED:
        check.rule(
            "spec.devices",
            f"must have at most {MAX_DEVICES_PER_SLICE_ADVANCED} devices when a device uses taints, "
            f"consumesCounters or list attributes, got {len(devices)}",
        )


_PLAIN_DEVICE_FIELDS = frozenset({"name", "attributes", "capacity", "consumesCounters"})

#: Attribute values, capacity maps and counter consumptions found plain, by identity: the loader
#: compacts before it validates (`extender.cluster.compact`), so thousands of devices hold one
#: object for each (a model name, a capacity map). The table holds each object, so an id cannot
#: be re-used while it is in it; stored objects are never changed in place. Emptied when full.
_PLAIN_SEEN: dict[int, object] = {}
PLAIN_SEEN_LIMIT = 1 << 15


def _seen_plain(value: object) -> bool:
    return _PLAIN_SEEN.get(id(value)) is value


def _remember_plain(value: object) -> None:
    if len(_PLAIN_SEEN) >= PLAIN_SEEN_LIMIT:
        _PLAIN_SEEN.clear()
    _PLAIN_SEEN[id(value)] = value


def _plain_device(device: Obj) -> bool:
    """The usual valid device: a name, scalar attributes, plain capacities and counter
    consumptions (MIG partitions), nothing else.

    Checked without building a path per field (thousands of devices per second at start-up);
    anything else, or any doubt, goes through the full `_device` check.
    """
    if not device.keys() <= _PLAIN_DEVICE_FIELDS:
        return False
    name, attributes, capacity = device.get("name"), device.get("attributes"), device.get("capacity")
    attributes = {} if attributes is None else attributes  # not `or {}`: [] is a type error
    capacity = {} if capacity is None else capacity
    if type(name) is not str or not name or dns_label(name):
        return False
    if type(attributes) is not dict or type(capacity) is not dict:
        return False
    if len(attributes) + len(capacity) > MAX_ATTRIBUTES_AND_CAPACITIES:
        return False
    for key, attribute in attributes.items():
        if type(key) is not str or qualified_name(key):
            return False
        if not _seen_plain(attribute):
            if not _plain_scalar(attribute):
                return False
            _remember_plain(attribute)
    if capacity and not _seen_plain(capacity):
        for key, entry in capacity.items():
            if (
                type(key) is not str
                or qualified_name(key)
                or type(entry) is not dict
                or entry.keys() != {"value"}
            ):
                return False
            value = entry["value"]
            if type(value) is not str or _quantity_problem(value):
                return False
        _remember_plain(capacity)
    if len(attributes) > MAX_ATTRIBUTE_VALUES:
        return False
    consumptions = device.get("consumesCounters")
    if consumptions is None or _seen_plain(consumptions):
        return True
    if not _plain_consumptions(consumptions):
        return False
    _remember_plain(consumptions)
    return True


def _plain_consumptions(consumptions: Any) -> bool:
    """`consumesCounters` absent, or valid entries of a counter set name and plain counters."""
    if consumptions is None:
        return True
    if type(consumptions) is not list or len(consumptions) > MAX_COUNTER_CONSUMPTIONS_PER_DEVICE:
        return False
    sets: set[str] = set()
    for consumption in consumptions:
        if type(consumption) is not dict or not consumption.keys() <= {"counterSet", "counters"}:
            return False
        name, counters = consumption.get("counterSet"), consumption.get("counters")
        if type(name) is not str or not name or dns_label(name) or name in sets:
            return False
        sets.add(name)
        if counters is None:
            continue
        if type(counters) is not dict or len(counters) > MAX_COUNTERS_PER_SET:
            return False
        for key, counter in counters.items():
            if type(key) is not str or counter_name(key) or type(counter) is not dict:
                return False
            value = counter.get("value")
            if counter.keys() != {"value"} or type(value) is not str or _quantity_problem(value):
                return False
    return True


def _device(check: _Checker, device: Obj, path: str, *, per_device: bool) -> bool:
    """Check one device; returns whether it uses an 'advanced' feature (lower per-slice limit)."""
    if not per_device and _plain_device(device):
        return bool(device.get("consumesCounters"))  # counters make the slice 'advanced'
    check.string(device.get("name"), f"{path}.name", required=True, syntax=dns_label)
    attributes = check.mapping(device.get("attributes"), f"{path}.attributes") or {}
    capacity = check.mapping(device.get("capacity"), f"{path}.capacity") or {}
    if len(attributes) + len(capacity) > MAX_ATTRIBUTES_AND_CAPACITIES:
        check.rule(
            path,
            f"at most {MAX_ATTRIBUTES_AND_CAPACITIES} attributes and capacities together, "
            f"got {len(attributes) + len(capacity)}",
        )
    values = 0
    uses_lists = False
    for name, attribute in attributes.items():
        if type(name) is str and not qualified_name(name) and _plain_scalar(attribute):
            values += 1  # the usual case, without building the paths only a problem would need
            continue
        where = f"{path}.attributes[{name}]"
        check.string(name, where, syntax=qualified_name)
        count, is_list = _attribute(check, attribute, where)
        values += count
        uses_lists |= is_list
    if values > MAX_ATTRIBUTE_VALUES:
        check.rule(f"{path}.attributes", f"at most {MAX_ATTRIBUTE_VALUES} values in total, got {values}")
    multiple = check.boolean(device.get("allowMultipleAllocations"), f"{path}.allowMultipleAllocations")
    for name, entry in capacity.items():
        where = f"{path}.capacity[{name}]"
        check.string(name, where, syntax=qualified_name)
        entry = check.mapping(entry, where, required=True)
        if entry is None:
            continue
        check.quantity(entry.get("value"), f"{where}.value")
        policy = check.mapping(entry.get("requestPolicy"), f"{where}.requestPolicy")
        if policy is not None:
            if not multiple:
                check.rule(f"{where}.requestPolicy", "only allowed when allowMultipleAllocations is true")
            _request_policy(check, policy, f"{where}.requestPolicy")

    consumptions = list(
        check.objects(
            device.get("consumesCounters"),
            f"{path}.consumesCounters",
            limit=MAX_COUNTER_CONSUMPTIONS_PER_DEVICE,
        )
    )
    seen_sets: set[str] = set()
    for where, consumption in consumptions:
        set_name = check.string(
            consumption.get("counterSet"), f"{where}.counterSet", required=True, syntax=dns_label
        )
        if set_name is not None:
            if set_name in seen_sets:
                check.rule(f"{where}.counterSet", f"duplicate counter set {set_name}")
            seen_sets.add(set_name)
        _counters(check, consumption.get("counters"), f"{where}.counters")
        check.strings(consumption.get("compatibilityGroups"), f"{where}.compatibilityGroups", limit=2)

    taints = list(check.objects(device.get("taints"), f"{path}.taints", limit=MAX_TAINTS))
    for where, taint in taints:
        _taint(check, taint, where)
    for field in ("bindingConditions", "bindingFailureConditions"):
        check.strings(device.get(field), f"{path}.{field}", limit=MAX_BINDING_CONDITIONS)
    check.boolean(device.get("bindsToNode"), f"{path}.bindsToNode")

    check.string(device.get("nodeName"), f"{path}.nodeName", syntax=dns_subdomain)
    _node_selector(check, device.get("nodeSelector"), f"{path}.nodeSelector", one_term=True)
    check.boolean(device.get("allNodes"), f"{path}.allNodes")
    own = [f for f in ("nodeName", "nodeSelector", "allNodes") if device.get(f) not in (None, False, "")]
    if per_device and len(own) != 1:
        got = ", ".join(own) if own else "none"
        check.rule(
            path,
            f"with spec.perDeviceNodeSelection, exactly one of nodeName, nodeSelector, allNodes "
            f"is required, got {got}",
        )
    elif not per_device and own:
        check.rule(f"{path}.{own[0]}", "only allowed when spec.perDeviceNodeSelection is true")
    return bool(taints or consumptions or uses_lists)


def _plain_scalar(attribute: Any) -> bool:
    """The usual valid attribute: one scalar of its kind's type, within its limits."""
    if type(attribute) is not dict or len(attribute) != 1:
        return False
    ((field, value),) = attribute.items()
    kind = _SCALAR_ATTRIBUTES.get(field)
    if kind == "string":
        return type(value) is str and len(value) <= MAX_ATTRIBUTE_VALUE_LENGTH
    if kind == "int":
        return type(value) is int and INT64_MIN <= value <= INT64_MAX
    if kind == "bool":
        return type(value) is bool
    return kind == "version" and type(value) is str and len(value) <= 64 and not semver(value)


def _attribute(check: _Checker, attribute: Any, path: str) -> tuple[int, bool]:
    """Check one DeviceAttribute; returns (number of values, whether it is a list)."""
    if _plain_scalar(attribute):
        return 1, False
    attribute = check.mapping(attribute, path, required=True)
    if attribute is None:
        return 0, False
    fields = (*_SCALAR_ATTRIBUTES, *_LIST_ATTRIBUTES)
    chosen = [f for f in fields if f in attribute and attribute[f] is not None]
    if len(chosen) != 1:
        got = ", ".join(chosen) if chosen else "none"
        check.rule(path, f"exactly one of {', '.join(fields)} is required, got {got}")
        return 0, False
    field = chosen[0]
    where = f"{path}.{field}"
    if field in _SCALAR_ATTRIBUTES:
        _attribute_value(check, attribute[field], where, _SCALAR_ATTRIBUTES[field])
        return 1, False
    entries = check.items(attribute[field], where)
    if isinstance(attribute[field], list) and not entries:
        check.rule(where, "must not be empty")
    for i, entry in enumerate(entries):
        _attribute_value(check, entry, f"{where}[{i}]", _LIST_ATTRIBUTES[field])
    return len(entries), True


def _attribute_value(check: _Checker, value: Any, path: str, kind: str) -> None:
    if kind == "int":
        check.integer(value, path, required=True)
    elif kind == "bool":
        if not isinstance(value, bool):
            check.fail(path, f"must be a boolean, got {_type(value)}")
    else:
        check.string(
            value,
            path,
            required=kind == "version",
            max_length=MAX_ATTRIBUTE_VALUE_LENGTH,
            syntax=semver if kind == "version" else None,
        )
        if value is None and kind == "string":
            check.fail(path, "must be a string, got null")


def _request_policy(check: _Checker, policy: Obj, path: str) -> None:
    check.quantity(policy.get("default"), f"{path}.default", required=False)
    for i, value in enumerate(check.items(policy.get("validValues"), f"{path}.validValues", limit=10)):
        check.quantity(value, f"{path}.validValues[{i}]")
    valid_range = check.mapping(policy.get("validRange"), f"{path}.validRange")
    if valid_range is not None:
        check.quantity(valid_range.get("min"), f"{path}.validRange.min")
        check.quantity(valid_range.get("max"), f"{path}.validRange.max", required=False)
        check.quantity(valid_range.get("step"), f"{path}.validRange.step", required=False)
    if policy.get("validValues") and valid_range is not None:
        check.rule(path, "validValues and validRange are mutually exclusive")


# ---------------------------------------------------------------------- DeviceClass


def _selectors(check: _Checker, value: Any, path: str) -> None:
    for where, selector in check.objects(value, path, limit=MAX_SELECTORS):
        # A selector without `cel` is a type from a newer API: the allocator reports it per pod.
        cel = check.mapping(selector.get("cel"), f"{where}.cel")
        if cel is not None:
            check.string(
                cel.get("expression"), f"{where}.cel.expression", required=True, max_length=MAX_CEL_LENGTH
            )


def _device_class(check: _Checker, obj: Obj) -> None:
    _metadata(check, obj, namespaced=False, name_syntax=dns_subdomain)
    spec = check.mapping(obj.get("spec"), "spec") or {}
    _selectors(check, spec.get("selectors"), "spec.selectors")
    for where, config in check.objects(spec.get("config"), "spec.config", limit=MAX_CONFIGS):
        _opaque(check, config.get("opaque"), f"{where}.opaque")
    check.string(spec.get("extendedResourceName"), "spec.extendedResourceName")


def _opaque(check: _Checker, value: Any, path: str) -> None:
    opaque = check.mapping(value, path)
    if opaque is not None:
        check.string(opaque.get("driver"), f"{path}.driver", required=True, syntax=driver_name)


# ---------------------------------------------------------------------- ResourceClaim(Template)


def _claim_spec(check: _Checker, spec: Obj, path: str) -> None:
    devices = check.mapping(spec.get("devices"), f"{path}.devices") or {}
    path = f"{path}.devices"
    names: set[str] = set()
    for where, request in check.objects(devices.get("requests"), f"{path}.requests", limit=MAX_REQUESTS):
        name = check.string(request.get("name"), f"{where}.name", required=True, syntax=dns_label)
        if name is not None:
            if name in names:
                check.rule(f"{where}.name", f"duplicate request name {name}")
            names.add(name)
        if request.get("exactly") is not None and request.get("firstAvailable") is not None:
            check.rule(where, "exactly one of exactly, firstAvailable is allowed, got both")
        exactly = check.mapping(request.get("exactly"), f"{where}.exactly")
        if exactly is not None:
            _request_spec(check, exactly, f"{where}.exactly", subrequest=False)
        first = check.items(request.get("firstAvailable"), f"{where}.firstAvailable", limit=MAX_SUBREQUESTS)
        if isinstance(request.get("firstAvailable"), list) and not first:
            check.rule(f"{where}.firstAvailable", "must not be empty")
        sub_names: set[str] = set()
        for at, sub in check.objects(first, f"{where}.firstAvailable"):
            sub_name = check.string(sub.get("name"), f"{at}.name", required=True, syntax=dns_label)
            if sub_name is not None:
                if sub_name in sub_names:
                    check.rule(f"{at}.name", f"duplicate subrequest name {sub_name}")
                sub_names.add(sub_name)
            _request_spec(check, sub, at, subrequest=True)
    for where, constraint in check.objects(
        devices.get("constraints"), f"{path}.constraints", limit=MAX_CONSTRAINTS
    ):
        check.strings(constraint.get("requests"), f"{where}.requests")
        for field in ("matchAttribute", "distinctAttribute"):
            check.string(
                constraint.get(field),
                f"{where}.{field}",
                syntax=lambda v: qualified_name(v, domain_required=True),
            )
        if constraint.get("matchAttribute") is not None and constraint.get("distinctAttribute") is not None:
            check.rule(where, "exactly one of matchAttribute, distinctAttribute is allowed, got both")
    for where, config in check.objects(devices.get("config"), f"{path}.config", limit=MAX_CONFIGS):
        check.strings(config.get("requests"), f"{where}.requests")
        _opaque(check, config.get("opaque"), f"{where}.opaque")


def _request_spec(check: _Checker, spec: Obj, path: str, *, subrequest: bool) -> None:
    check.string(spec.get("deviceClassName"), f"{path}.deviceClassName", required=True, syntax=dns_subdomain)
    _selectors(check, spec.get("selectors"), f"{path}.selectors")
    # An unknown mode is a newer API's: the allocator answers `unsupported count mode` per pod.
    mode = check.string(spec.get("allocationMode"), f"{path}.allocationMode")
    count = check.integer(spec.get("count"), f"{path}.count", minimum=1)
    if mode == "All" and count is not None:
        check.rule(f"{path}.count", "must not be set when allocationMode is All")
    if subrequest:
        if spec.get("adminAccess") is not None:
            check.rule(f"{path}.adminAccess", "not allowed in a subrequest")
    else:
        check.boolean(spec.get("adminAccess"), f"{path}.adminAccess")
    for where, toleration in check.objects(
        spec.get("tolerations"), f"{path}.tolerations", limit=MAX_TOLERATIONS
    ):
        check.string(toleration.get("key"), f"{where}.key", syntax=label_key)
        operator = check.string(toleration.get("operator"), f"{where}.operator")
        if operator not in (None, "", "Equal", "Exists"):
            check.rule(f"{where}.operator", f"{operator!r} is not one of Equal, Exists")
        check.string(toleration.get("value"), f"{where}.value", syntax=label_value)
        check.string(toleration.get("effect"), f"{where}.effect")
        check.integer(toleration.get("tolerationSeconds"), f"{where}.tolerationSeconds")
    capacity = check.mapping(spec.get("capacity"), f"{path}.capacity")
    if capacity is not None:
        for name, amount in (
            check.mapping(capacity.get("requests"), f"{path}.capacity.requests") or {}
        ).items():
            where = f"{path}.capacity.requests[{name}]"
            check.string(name, where, syntax=qualified_name)
            check.quantity(amount, where)
    # Kubernetes 1.37 (DRADerivedAttributes): what the allocator reads of it, as 1.37's API
    # validates it; a 1.36 API server drops the field and the 1.36 allocator ignores it.
    derived_names: set[str] = set()
    for where, derived in check.objects(
        spec.get("derivedAttributes"), f"{path}.derivedAttributes", limit=MAX_DERIVED_ATTRIBUTES
    ):
        derived_name = check.string(
            derived.get("name"),
            f"{where}.name",
            required=True,
            syntax=lambda v: qualified_name(v, domain_required=True),
        )
        if derived_name is not None:
            if derived_name in derived_names:
                check.rule(f"{where}.name", f"duplicate derived attribute {derived_name}")
            derived_names.add(derived_name)
        check.string(derived.get("expression"), f"{where}.expression", required=True)


def _allocation(check: _Checker, allocation: Obj, path: str) -> None:
    devices = check.mapping(allocation.get("devices"), f"{path}.devices") or {}
    for where, result in check.objects(devices.get("results"), f"{path}.devices.results", limit=MAX_RESULTS):
        for field in ("request", "driver", "pool", "device"):
            check.string(result.get(field), f"{where}.{field}", required=True)
        check.boolean(result.get("adminAccess"), f"{where}.adminAccess")
        check.string(result.get("shareID"), f"{where}.shareID")
        for name, amount in (
            check.mapping(result.get("consumedCapacity"), f"{where}.consumedCapacity") or {}
        ).items():
            check.quantity(amount, f"{where}.consumedCapacity[{name}]")
        for field in ("bindingConditions", "bindingFailureConditions"):
            check.strings(result.get(field), f"{where}.{field}", limit=MAX_BINDING_CONDITIONS)
        check.items(result.get("tolerations"), f"{where}.tolerations", limit=MAX_TOLERATIONS)
    for where, config in check.objects(
        devices.get("config"), f"{path}.devices.config", limit=MAX_ALLOCATION_CONFIGS
    ):
        check.string(config.get("source"), f"{where}.source")
        check.strings(config.get("requests"), f"{where}.requests")
    _node_selector(check, allocation.get("nodeSelector"), f"{path}.nodeSelector", one_term=False)
    check.string(allocation.get("allocationTimestamp"), f"{path}.allocationTimestamp")


def _claim(check: _Checker, obj: Obj) -> None:
    _metadata(check, obj, namespaced=True, name_syntax=dns_subdomain)
    spec = check.mapping(obj.get("spec"), "spec", required=True)
    if spec is not None:
        _claim_spec(check, spec, "spec")
    status = check.mapping(obj.get("status"), "status") or {}
    allocation = check.mapping(status.get("allocation"), "status.allocation")
    if allocation is not None:
        _allocation(check, allocation, "status.allocation")
    for where, consumer in check.objects(
        status.get("reservedFor"), "status.reservedFor", limit=MAX_RESERVED_FOR
    ):
        for field in ("apiGroup", "resource", "name", "uid"):
            check.string(consumer.get(field), f"{where}.{field}")
    check.items(status.get("devices"), "status.devices")


def _claim_template(check: _Checker, obj: Obj) -> None:
    _metadata(check, obj, namespaced=True, name_syntax=dns_subdomain)
    spec = check.mapping(obj.get("spec"), "spec", required=True) or {}
    check.mapping(spec.get("metadata"), "spec.metadata")
    inner = check.mapping(spec.get("spec"), "spec.spec", required=True)
    if inner is not None:
        _claim_spec(check, inner, "spec.spec")


# ---------------------------------------------------------------------- DeviceTaintRule


def _taint_rule(check: _Checker, obj: Obj) -> None:
    _metadata(check, obj, namespaced=False, name_syntax=dns_subdomain)
    spec = check.mapping(obj.get("spec"), "spec", required=True) or {}
    selector = check.mapping(spec.get("deviceSelector"), "spec.deviceSelector")
    if selector is not None:
        for field in ("driver", "pool", "device"):
            check.string(selector.get(field), f"spec.deviceSelector.{field}")
    taint = check.mapping(spec.get("taint"), "spec.taint", required=True)
    if taint is not None:
        _taint(check, taint, "spec.taint")


# ---------------------------------------------------------------------- PodGroup


def _pod_group(check: _Checker, obj: Obj) -> None:
    """What the gang terms read of a PodGroup (`extender.podgroups`), as upstream validates it."""
    _metadata(check, obj, namespaced=True, name_syntax=dns_subdomain)
    spec = check.mapping(obj.get("spec"), "spec", required=True) or {}
    policy = check.mapping(spec.get("schedulingPolicy"), "spec.schedulingPolicy") or {}
    gang = check.mapping(policy.get("gang"), "spec.schedulingPolicy.gang")
    if gang is not None:
        check.integer(gang.get("minCount"), "spec.schedulingPolicy.gang.minCount", minimum=1, required=True)
    constraints = check.mapping(spec.get("schedulingConstraints"), "spec.schedulingConstraints") or {}
    topology = constraints.get("topology")
    for where, entry in check.objects(topology, "spec.schedulingConstraints.topology", limit=1):
        check.string(entry.get("key"), f"{where}.key", required=True, syntax=label_key)
    claims = spec.get("resourceClaims")
    for where, entry in check.objects(claims, "spec.resourceClaims", limit=MAX_POD_GROUP_CLAIMS):
        check.string(entry.get("name"), f"{where}.name", required=True, syntax=dns_label)
        check.exactly_one(entry, ("resourceClaimName", "resourceClaimTemplateName"), where)
        for field in ("resourceClaimName", "resourceClaimTemplateName"):
            check.string(entry.get(field), f"{where}.{field}", syntax=dns_subdomain)
    status = check.mapping(obj.get("status"), "status") or {}
    for where, entry in check.objects(status.get("resourceClaimStatuses"), "status.resourceClaimStatuses"):
        check.string(entry.get("name"), f"{where}.name", required=True)
        check.string(entry.get("resourceClaimName"), f"{where}.resourceClaimName")


# ---------------------------------------------------------------------- core/v1


def _node(check: _Checker, obj: Obj) -> None:
    _metadata(check, obj, namespaced=False, name_syntax=dns_subdomain)
    spec = check.mapping(obj.get("spec"), "spec") or {}
    check.boolean(spec.get("unschedulable"), "spec.unschedulable")
    check.items(spec.get("taints"), "spec.taints")
    check.mapping(obj.get("status"), "status")


def _namespace(check: _Checker, obj: Obj) -> None:
    _metadata(check, obj, namespaced=False, name_syntax=dns_label)


def _pod(check: _Checker, obj: Obj) -> None:
    _metadata(check, obj, namespaced=True, name_syntax=dns_subdomain)
    _pod_body(check, obj)


def _pod_body(check: _Checker, obj: Obj) -> None:
    spec = check.mapping(obj.get("spec"), "spec") or {}
    check.string(spec.get("nodeName"), "spec.nodeName")
    names: set[str] = set()
    for where, entry in check.objects(spec.get("resourceClaims"), "spec.resourceClaims"):
        name = check.string(entry.get("name"), f"{where}.name", required=True, syntax=dns_label)
        if name is not None:
            if name in names:
                check.rule(f"{where}.name", f"duplicate resource claim name {name}")
            names.add(name)
        check.string(entry.get("resourceClaimName"), f"{where}.resourceClaimName", syntax=dns_subdomain)
        check.string(
            entry.get("resourceClaimTemplateName"), f"{where}.resourceClaimTemplateName", syntax=dns_subdomain
        )
        if entry.get("resourceClaimName") and entry.get("resourceClaimTemplateName"):
            check.rule(where, "at most one of resourceClaimName, resourceClaimTemplateName is allowed")
    for field in ("containers", "initContainers"):
        for where, container in check.objects(spec.get(field), f"spec.{field}"):
            check.string(container.get("name"), f"{where}.name")
            resources = check.mapping(container.get("resources"), f"{where}.resources") or {}
            for at, claim in check.objects(resources.get("claims"), f"{where}.resources.claims"):
                check.string(claim.get("name"), f"{at}.name", required=True)
                check.string(claim.get("request"), f"{at}.request")
    status = check.mapping(obj.get("status"), "status") or {}
    for where, entry in check.objects(status.get("resourceClaimStatuses"), "status.resourceClaimStatuses"):
        check.string(entry.get("name"), f"{where}.name", required=True)
        check.string(entry.get("resourceClaimName"), f"{where}.resourceClaimName")


_VALIDATORS: dict[str, Callable[[_Checker, Obj], None]] = {
    "Node": _node,
    "Namespace": _namespace,
    "Pod": _pod,
    "ResourceSlice": _slice,
    "DeviceClass": _device_class,
    "ResourceClaim": _claim,
    "ResourceClaimTemplate": _claim_template,
    "DeviceTaintRule": _taint_rule,
    "PodGroup": _pod_group,
}
