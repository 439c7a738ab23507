"""One validated `Settings` object, built once from defaults, a settings file, env vars and flags.

Layers, lowest to highest priority (a higher layer overrides a lower one field by field):

1. the defaults on `Settings`;
2. an optional YAML settings file (`--config PATH`, or env `DRA_EXTENDER_CONFIG`). Keys are the
   field names in snake_case or camelCase (`max_body_bytes` or `maxBodyBytes`); feature gates
   are the key `feature_gates` / `featureGates`, a `{Name: bool}` mapping or a `Name=bool,...`
   string. Relative paths in the file are relative to the file's directory;
3. environment variables `DRA_EXTENDER_<FIELD>` (`DRA_EXTENDER_LISTEN_PORT=9000`,
   `DRA_EXTENDER_FEATURE_GATES=DRADeviceTaints=false`); list fields are split on commas,
   except `DRA_EXTENDER_STATE_PATHS`, which is split on `os.pathsep` like `PATH`;
4. command-line flags (`argparse.Namespace` attributes; `None` means "not given").

Feature gates merge gate by gate across the layers instead of replacing each other.
Only `extender.__main__` passes `os.environ` in; nothing else reads the environment.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from extender import bounds, yamlsafe
from extender.allocator.features import (
    DEFAULT_VERSION,
    SUPPORTED_VERSIONS,
    Features,
    check_version,
    parse_feature_gates,
)
from extender.core.gang import GangSettings
from extender.index.topology import PACKING_POLICIES, TopologySettings, parse_drivers

ENV_PREFIX = "DRA_EXTENDER_"
_LATEST = SUPPORTED_VERSIONS[-1]
LOG_LEVELS: tuple[str, ...] = ("debug", "info", "warning", "error", "critical")
OTLP_PROTOCOLS: tuple[str, ...] = ("http/protobuf", "grpc")
#: How `serve` warms the numba kernels up (`Settings.kernel_warmup`).
KERNEL_WARMUPS: tuple[str, ...] = ("background", "blocking")
_SIZE_SUFFIXES: dict[str, int] = {"": 1, "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3}


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the extender process can be configured with (see the module docstring)."""

    listen_host: str = "127.0.0.1"
    """Address the HTTP server binds to; `0.0.0.0` or `::` to serve every interface."""

    listen_port: int = 8888
    """TCP port of the HTTP server (0 picks a free port)."""

    state_paths: tuple[Path, ...] = ()
    """State files or directories to load the cluster from; empty means the embedded sample."""

    kube: bool = False
    """Watch a real cluster through the API server (list+watch) instead of reading state files."""

    kubeconfig: Path | None = None
    """Kubeconfig for `kube` mode; None means in-cluster config or the client's default lookup."""

    max_body_bytes: int = 64 * 1024**2
    """Largest accepted request body; larger requests get HTTP 413."""

    kubernetes_version: str | None = None
    """Kubernetes version whose allocator rules, error texts and gate defaults apply (`1.36`, `1.37`).
    Not set: 1.36 in file/sample mode; kube mode reads the API server's `/version` at start-up."""

    feature_gates: tuple[tuple[str, bool], ...] = ()
    """The feature gates as configured (merged over the layers), kept to rebuild `features` when
    kube mode learns the version from the API server."""

    features: Features = field(default_factory=Features)
    """Allocator feature switches: `feature_gates` over the defaults of the Kubernetes version."""

    assume_ttl_seconds: float = 60.0
    """How long devices chosen at filter/bind stay assumed (excluded) while their writes are in flight."""

    filter_timeout_seconds: float = 10.0
    """Deadline for one pod's allocation search (upstream's DRA filter timeout is also 10 s), and for
    one filter/prioritize call as a whole: past it the call answers with an error."""

    body_read_timeout_seconds: float = 30.0
    """A request body not complete within this many seconds gets 408 and its connection is closed."""

    shutdown_grace_seconds: float = 20.0
    """SIGTERM stops the server within this many seconds whatever is running: requests in flight
    get half of it, then work still running on a thread is abandoned (`extender/shutdown.py`).
    Below the pod's terminationGracePeriodSeconds (30 in deploy/), so the process ends itself."""

    log_level: str = "info"
    """Root log level, one of LOG_LEVELS."""

    log_json: bool = False
    """Write logs as one JSON object per line instead of plain text."""

    scheduler_names: tuple[str, ...] = ()
    """Scheduler profiles whose pods we place; empty means every profile. Pods of other profiles
    pass filter untouched, score 0, and are bound without allocating (extender/profiles.py)."""

    ui: bool = False
    """Serve the read-only placement dashboard at `/ui` (and record the last verb decisions)."""

    cel_result_cache_size: int = 128
    """Selector expressions whose per-device results are kept (an LRU); a device keeps at most twice this."""

    # ------------------------------------------------- memory kept per expression, shape, claim
    # Every table a new selector text, claim shape or pod adds to is bounded (docs/robustness.md).
    cel_compile_cache_size: int = 4096
    """Selector texts kept compiled (an LRU, about 3 KiB each); a text evicted is compiled again."""

    selector_mask_cache_size: int = 4096
    """Selector masks (the rows one class + selector list selects) one index keeps (an LRU)."""

    selector_mask_cache_bytes: int = 64 * 1024**2
    """... and the bytes of them at most (2 per device row each, plus the texts)."""

    claim_shape_cache_size: int = 32
    """Claim shapes whose per-index data (first-fit and kernel inputs, per-node answers) are kept."""

    evaluation_cache_size: int = 256
    """Pod evaluations kept for the pod's prioritize and bind (an LRU)."""

    evaluation_cache_bytes: int = 128 * 1024**2
    """... and their estimated bytes at most (about 1 KiB per node verdict)."""

    pods_seen_cache_size: int = 4096
    """Pods seen in filter/prioritize kept for their bind, which names only the pod (an LRU)."""

    pods_seen_cache_bytes: int = 64 * 1024**2
    """... and their bytes at most."""

    # ---------------------------------------------------------------- kube mode (watch)
    watch_stall_seconds: float = 300.0
    """A watch stream that delivers no event or bookmark for this long is restarted by a relist."""

    relist_ready_seconds: float = 30.0
    """`/readyz` fails while a relist of any kind has been running longer than this."""

    # ---------------------------------------------------------------- TLS
    tls_cert_file: Path | None = None
    """Serve HTTPS with this PEM certificate (chain); needs `tls_key_file`. Re-read when it changes."""

    tls_key_file: Path | None = None
    """PEM private key of `tls_cert_file`."""

    client_ca_file: Path | None = None
    """Require client certificates signed by this PEM CA bundle (mutual TLS); needs `tls_cert_file`."""

    # ---------------------------------------------------------------- leader election
    leader_elect: bool = False
    """Bind only while holding the coordination.k8s.io Lease; other replicas filter/prioritize only."""

    leader_lease_name: str = "dra-topology-extender"
    """Name of the Lease used for leader election."""

    leader_lease_namespace: str = "kube-system"
    """Namespace of the Lease used for leader election."""

    lease_duration_seconds: float = 15.0
    """How long a Lease is valid after its last renewal (others may take it over after that)."""

    renew_deadline_seconds: float = 10.0
    """The leader steps down if it could not renew its Lease for this long."""

    retry_period_seconds: float = 2.0
    """How often candidates try to acquire, and the leader renews, the Lease."""

    # ---------------------------------------------------------------- tracing
    tracing: bool = False
    """Export OpenTelemetry spans over OTLP; also on when OTEL_TRACES_EXPORTER=otlp is set."""

    otlp_endpoint: str = ""
    """OTLP endpoint; empty uses OTEL_EXPORTER_OTLP[_TRACES]_ENDPOINT or the exporter's default."""

    otlp_protocol: str = "http/protobuf"
    """OTLP transport, one of OTLP_PROTOCOLS (gRPC needs the optional grpc exporter installed)."""

    # ---------------------------------------------------------------- topology scoring
    packing: str = "binpack"
    """Across nodes: `binpack` fills nodes that are already busy, `spread` prefers empty ones."""

    locality_weight: float = 4.0
    """Weight of locality (pairwise distance of the chosen devices) in a node's score."""

    fragmentation_weight: float = 4.0
    """Weight of fragmentation (whole free NVLink/PCIe/NUMA groups the choice would break up)."""

    packing_weight: float = 1.0
    """Weight of packing (node utilisation after placement, per `packing`)."""

    preference_weight: float = 1.0
    """Weight of upstream's prioritized-list preference (rank of the chosen firstAvailable entry)."""

    cross_claim_weight: float = 1.0
    """Weight of device pairs from different claims of one pod (e.g. GPU to NIC) in locality."""

    partition_packing_weight: float = 4.0
    """Weight of partition packing (MIG slices from parent GPUs already partly used), binpack only."""

    partition_headroom_weight: float = 4.0
    """Weight of partition headroom (largest MIG profile each touched GPU can still create), binpack only."""

    level_distances: tuple[float, float, float, float, float] = (1.0, 2.0, 3.0, 4.0, 6.0)
    """Distance of two devices whose closest shared level is nvlink, pcie, numa, socket, node."""

    topology_drivers: dict[str, Any] = field(default_factory=dict)
    """Per driver, which attributes feed which level (`{driver: {level: [attribute, ...]}}`),
    replacing the built-in defaults for the drivers named (file only; see extender/index/topology.py)."""

    kernel_max_work: int = 4096
    """Bound on exact-search steps per node in the topology kernel; beyond it a greedy pass runs."""

    kernel_threads: int = 1
    """Threads of the topology kernels (numba); 0 uses one per core. One by default: parallel kernel
    threads compete with the event loop on small machines (loadtests/README.md)."""

    kernel_warmup: str = "background"
    """How start-up compiles the kernels (kernels/warming.py): `background` compiles them in a
    thread while their plain-Python twins answer (ready at once, same answers, slower until
    compiled); `blocking` compiles before serving (readiness waits: 30-60 s without numba's cache)."""

    # ---------------------------------------------------------------- gangs on multi-node NVLink cliques
    gang_clique_label: str = "nvidia.com/gpu.clique"
    """Node label naming a node's multi-node NVLink clique (e.g. one GB200 NVL72 rack)."""

    gang_clique_attribute: str = "gpu.nvidia.com/cliqueID"
    """Device attribute naming the clique, read when a node lacks the label."""

    gang_size_annotation: str = "gang.dra-extender.io/size"
    """Pod annotation giving the gang's size (LeaderWorkerSet's own size annotation is read too)."""

    gang_weight: float = 3.0
    """Weight of the clique term against the 0..10 topology priority for gang members (0: off)."""

    gang_filter_other_cliques: bool = False
    """Once a gang member is placed, fail the gang's other pods on nodes outside its clique."""

    def topology(self) -> TopologySettings:
        """The topology model and scoring settings these settings describe."""
        return TopologySettings(
            drivers=parse_drivers(self.topology_drivers, "topology_drivers"),
            level_distance=self.level_distances,
            locality_weight=self.locality_weight,
            fragmentation_weight=self.fragmentation_weight,
            packing_weight=self.packing_weight,
            preference_weight=self.preference_weight,
            cross_claim_weight=self.cross_claim_weight,
            partition_packing_weight=self.partition_packing_weight,
            partition_headroom_weight=self.partition_headroom_weight,
            packing=self.packing,
            max_work=self.kernel_max_work,
        )

    def gang(self) -> GangSettings:
        """How gangs and NVLink cliques are recognised and weighed (extender/core/gang.py)."""
        return GangSettings(
            clique_label=self.gang_clique_label,
            clique_attribute=self.gang_clique_attribute,
            size_annotation=self.gang_size_annotation,
            weight=self.gang_weight,
            filter_other_cliques=self.gang_filter_other_cliques,
        )

    def with_kubernetes_version(self, version: str) -> Settings:
        """These settings for Kubernetes `version`: features rebuilt over its gate defaults.

        Raises:
            ValueError: the version is unsupported, or a configured gate is unknown to it.
        """
        from dataclasses import replace

        features = Features.from_gates(dict(self.feature_gates), check_version(version))
        return replace(self, kubernetes_version=version, features=features)

    def as_dict(self) -> dict[str, str]:
        """Field name -> printable value, for the one start-up log line."""
        out: dict[str, str] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Features):
                out[f.name] = value.describe()
            elif f.name == "feature_gates":
                out[f.name] = ",".join(f"{name}={str(on).lower()}" for name, on in value)
            elif isinstance(value, tuple):
                out[f.name] = ",".join(str(v) for v in value)
            else:
                out[f.name] = str(value)
        return out


def _to_bool(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"{where}: {value!r} is not a boolean; allowed: true, false, 1, 0, yes, no, on, off")


def _to_port(value: Any, where: str) -> int:
    try:
        port = int(value)
    except (TypeError, ValueError):
        port = -1
    if isinstance(value, bool) or not 0 <= port <= 65535:
        raise ValueError(f"{where}: {value!r} is not a port; allowed: an integer 0..65535")
    return port


def _to_size(value: Any, where: str) -> int:
    match = re.fullmatch(r"\s*(\d+)\s*(Ki|Mi|Gi)?\s*", str(value))
    size = 0 if match is None else int(match.group(1)) * _SIZE_SUFFIXES[match.group(2) or ""]
    if isinstance(value, bool) or not 1 <= size <= bounds.MAX_BODY_BYTES_LIMIT:
        raise ValueError(
            f"{where}: {value!r} is not a size; allowed: an integer of bytes from 1 to 1Gi, "
            "optionally with a suffix Ki, Mi or Gi (e.g. 67108864 or 64Mi)"
        )
    return size


def _to_log_level(value: Any, where: str) -> str:
    level = str(value).strip().lower()
    if level not in LOG_LEVELS:
        raise ValueError(f"{where}: {value!r} is not a log level; allowed: {', '.join(LOG_LEVELS)}")
    return level


def _to_text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where}: {value!r} is not a string")
    return value.strip()


def _to_name(value: Any, where: str) -> str:
    text = _to_text(value, where)
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", text):
        raise ValueError(f"{where}: {value!r} is not a Kubernetes object name; allowed: a DNS-1123 subdomain")
    return text


def _to_otlp_protocol(value: Any, where: str) -> str:
    text = str(value).strip().lower()
    if text not in OTLP_PROTOCOLS:
        raise ValueError(f"{where}: {value!r} is not an OTLP protocol; allowed: {', '.join(OTLP_PROTOCOLS)}")
    return text


def _to_packing(value: Any, where: str) -> str:
    text = str(value).strip().lower()
    if text not in PACKING_POLICIES:
        raise ValueError(
            f"{where}: {value!r} is not a packing policy; allowed: {', '.join(PACKING_POLICIES)}"
        )
    return text


def _to_kubernetes_version(value: Any, where: str) -> str:
    # YAML reads `1.37` as a float; its text is the version. ("1.30" would read as 1.3, but no
    # supported version ends in 0.)
    text = str(value).strip().removeprefix("v")
    if text not in SUPPORTED_VERSIONS:
        raise ValueError(
            f"{where}: {value!r} is not a supported Kubernetes version; "
            f"allowed: {', '.join(SUPPORTED_VERSIONS)}"
        )
    return text


def _to_kernel_warmup(value: Any, where: str) -> str:
    text = str(value).strip().lower()
    if text not in KERNEL_WARMUPS:
        raise ValueError(f"{where}: {value!r} is not a kernel warm-up; allowed: {', '.join(KERNEL_WARMUPS)}")
    return text


def _to_drivers(value: Any, where: str) -> dict[str, Any]:
    parse_drivers(value, where)  # validates; Settings keeps the raw mapping (frozen, printable)
    return dict(value)


def _to_host(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: {value!r} is not a host; allowed: an IP address or host name")
    return value.strip().strip("[]")


def _to_names(value: Any, where: str) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        raise ValueError(f"{where}: {value!r} is not a list of names; allowed: a list of strings")
    return tuple(i.strip() for i in items if i.strip())


def _path_converter(base: Path | None) -> Callable[[Any, str], Path]:
    def convert(value: Any, where: str) -> Path:
        if not isinstance(value, str | os.PathLike) or not str(value):
            raise ValueError(f"{where}: {value!r} is not a path; allowed: a file or directory path")
        path = Path(value).expanduser()
        return base / path if base is not None and not path.is_absolute() else path

    return convert


def _paths_converter(base: Path | None, sep: str) -> Callable[[Any, str], tuple[Path, ...]]:
    to_path = _path_converter(base)

    def convert(value: Any, where: str) -> tuple[Path, ...]:
        items = [p for p in value.split(sep) if p] if isinstance(value, str) else value
        if not isinstance(items, list | tuple):
            raise ValueError(f"{where}: {value!r} is not a list of paths; allowed: a list of paths")
        return tuple(to_path(item, f"{where}[{i}]") for i, item in enumerate(items))

    return convert


def _gates(value: Any, where: str) -> dict[str, bool]:
    if isinstance(value, str):
        try:
            return parse_feature_gates(value)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
    if isinstance(value, Mapping):
        return {str(k): _to_bool(v, f"{where}.{k}") for k, v in value.items()}
    raise ValueError(f"{where}: {value!r} is not a feature-gate list; allowed: Name=true,Name=false,...")


def _converters(base: Path | None, path_sep: str) -> dict[str, Callable[[Any, str], Any]]:
    """Field name -> converter(value, where) for one layer (paths resolve against `base`)."""
    return {
        "listen_host": _to_host,
        "listen_port": _to_port,
        "state_paths": _paths_converter(base, path_sep),
        "kube": _to_bool,
        "kubeconfig": _path_converter(base),
        "max_body_bytes": _to_size,
        "kubernetes_version": _to_kubernetes_version,
        "assume_ttl_seconds": bounds.bounded("assume_ttl_seconds"),
        "filter_timeout_seconds": bounds.bounded("filter_timeout_seconds"),
        "body_read_timeout_seconds": bounds.bounded("body_read_timeout_seconds"),
        "shutdown_grace_seconds": bounds.bounded("shutdown_grace_seconds"),
        "log_level": _to_log_level,
        "log_json": _to_bool,
        "ui": _to_bool,
        "scheduler_names": _to_names,
        "cel_result_cache_size": bounds.bounded("cel_result_cache_size"),
        "cel_compile_cache_size": bounds.bounded("cel_compile_cache_size"),
        "selector_mask_cache_size": bounds.bounded("selector_mask_cache_size"),
        "selector_mask_cache_bytes": _to_size,
        "claim_shape_cache_size": bounds.bounded("claim_shape_cache_size"),
        "evaluation_cache_size": bounds.bounded("evaluation_cache_size"),
        "evaluation_cache_bytes": _to_size,
        "pods_seen_cache_size": bounds.bounded("pods_seen_cache_size"),
        "pods_seen_cache_bytes": _to_size,
        "watch_stall_seconds": bounds.bounded("watch_stall_seconds"),
        "relist_ready_seconds": bounds.bounded("relist_ready_seconds"),
        "tls_cert_file": _path_converter(base),
        "tls_key_file": _path_converter(base),
        "client_ca_file": _path_converter(base),
        "leader_elect": _to_bool,
        "leader_lease_name": _to_name,
        "leader_lease_namespace": _to_name,
        "lease_duration_seconds": bounds.bounded("lease_duration_seconds"),
        "renew_deadline_seconds": bounds.bounded("renew_deadline_seconds"),
        "retry_period_seconds": bounds.bounded("retry_period_seconds"),
        "tracing": _to_bool,
        "otlp_endpoint": _to_text,
        "otlp_protocol": _to_otlp_protocol,
        "packing": _to_packing,
        "locality_weight": bounds.bounded("locality_weight"),
        "fragmentation_weight": bounds.bounded("fragmentation_weight"),
        "packing_weight": bounds.bounded("packing_weight"),
        "preference_weight": bounds.bounded("preference_weight"),
        "cross_claim_weight": bounds.bounded("cross_claim_weight"),
        "partition_packing_weight": bounds.bounded("partition_packing_weight"),
        "partition_headroom_weight": bounds.bounded("partition_headroom_weight"),
        "level_distances": bounds.to_distances,
        "topology_drivers": _to_drivers,
        "kernel_max_work": bounds.bounded("kernel_max_work"),
        "kernel_threads": bounds.to_threads,
        "kernel_warmup": _to_kernel_warmup,
        "gang_clique_label": _to_text,
        "gang_clique_attribute": _to_text,
        "gang_size_annotation": _to_text,
        "gang_weight": bounds.bounded("gang_weight"),
        "gang_filter_other_cliques": _to_bool,
    }


_FIELD_KEYS: tuple[str, ...] = (*_converters(None, ",").keys(), "feature_gates")


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def split_listen(text: str) -> tuple[str, int]:
    """Split `HOST:PORT` (IPv6 as `[::1]:8888`) into host and port; raises ValueError."""
    host, sep, port = str(text).rpartition(":")
    if not sep or not host:
        raise ValueError(f"--listen: {text!r} is not HOST:PORT; allowed: e.g. 127.0.0.1:8888 or [::]:8888")
    return _to_host(host, "--listen"), _to_port(port, "--listen")


def _read_file_layer(path: Path) -> tuple[dict[str, Any], dict[str, bool]]:
    try:
        raw = yamlsafe.load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"settings file {path}: cannot read: {exc.strerror or exc}") from None
    except yamlsafe.AliasExpansionError as exc:
        raise ValueError(f"settings file {path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"settings file {path}: not valid YAML: {exc}") from None
    if raw is None:
        return {}, {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"settings file {path}: must be a mapping of setting names to values")
    convert = _converters(path.parent, os.pathsep)
    values: dict[str, Any] = {}
    gates: dict[str, bool] = {}
    for key, value in raw.items():
        name = _snake(str(key))
        where = f"settings file {path}: {key}"
        if name == "feature_gates":
            gates = _gates(value, where)
        elif name in convert:
            values[name] = convert[name](value, where)
        else:
            allowed = ", ".join(_FIELD_KEYS)
            raise ValueError(f"{where}: unknown setting; allowed (snake_case or camelCase): {allowed}")
    return values, gates


def _env_layer(environ: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, bool]]:
    values: dict[str, Any] = {}
    gates: dict[str, bool] = {}
    for name, convert in _converters(None, os.pathsep).items():
        env = ENV_PREFIX + name.upper()
        if env in environ:
            values[name] = convert(environ[env], env)
    if ENV_PREFIX + "FEATURE_GATES" in environ:
        gates = _gates(environ[ENV_PREFIX + "FEATURE_GATES"], ENV_PREFIX + "FEATURE_GATES")
    return values, gates


#: Fields whose flags are not simply `--field-name VALUE` (handled one by one in `_flag_layer`).
_SPECIAL_FLAGS = frozenset({"listen_host", "listen_port", "state_paths"})


def _flag_layer(ns: object) -> tuple[dict[str, Any], dict[str, bool]]:
    def flag(name: str) -> Any:
        return getattr(ns, name, None)

    values: dict[str, Any] = {}
    if flag("listen") is not None:
        values["listen_host"], values["listen_port"] = split_listen(flag("listen"))
    if flag("state"):
        values["state_paths"] = tuple(Path(p) for p in flag("state"))
    if flag("kube") is not None:
        values["kube"] = bool(flag("kube"))
    if flag("kubeconfig") is not None:
        values["kubeconfig"] = _path_converter(None)(flag("kubeconfig"), "--kubeconfig")
    if flag("max_body_bytes") is not None:
        values["max_body_bytes"] = _to_size(flag("max_body_bytes"), "--max-body-bytes")
    if flag("log_level") is not None:
        values["log_level"] = _to_log_level(flag("log_level"), "--log-level")
    if flag("log_json") is not None:
        values["log_json"] = bool(flag("log_json"))
    for name, convert in _converters(None, os.pathsep).items():
        if name not in values and name not in _SPECIAL_FLAGS and flag(name) is not None:
            values[name] = convert(flag(name), "--" + name.replace("_", "-"))
    gates = _gates(flag("feature_gates"), "--feature-gates") if flag("feature_gates") is not None else {}
    return values, gates


def load_settings(argv_namespace: object, environ: Mapping[str, str]) -> Settings:
    """Build the effective settings from defaults, settings file, environment and flags.

    Args:
        argv_namespace: parsed flags (an `argparse.Namespace` or any object with the
            attributes `config`, `listen`, `state`, `kube`, `kubeconfig`, `feature_gates`,
            `max_body_bytes`, `log_level`, `log_json`); missing or None attributes are "not given".
        environ: the environment to read `DRA_EXTENDER_*` variables from.

    Returns:
        The validated, frozen settings.

    Raises:
        ValueError: a value is invalid; the message names where it came from and what is allowed.
    """
    config = getattr(argv_namespace, "config", None) or environ.get(ENV_PREFIX + "CONFIG")
    layers = [_read_file_layer(Path(config).expanduser())] if config else []
    layers += [_env_layer(environ), _flag_layer(argv_namespace)]
    values: dict[str, Any] = {}
    gates: dict[str, bool] = {}
    for layer_values, layer_gates in layers:
        values.update(layer_values)
        gates.update(layer_gates)
    values["feature_gates"] = tuple(sorted(gates.items()))
    version = values.get("kubernetes_version")
    if version is None:
        # File mode: 1.36. Kube mode rebuilds the features once the API server has said which
        # version it runs (`Settings.with_kubernetes_version`); until then the gates are checked
        # against the newest version, so a gate no supported version knows fails at once.
        version = _LATEST if values.get("kube") else DEFAULT_VERSION
    try:
        values["features"] = Features.from_gates(gates, version)
    except ValueError as exc:
        raise ValueError(f"feature gates: {exc}") from None
    if values.get("kube") and values.get("state_paths"):
        raise ValueError("kube mode and state paths (--state) are mutually exclusive; choose one source")
    _check_combinations(values)
    return Settings(**values)


def _check_combinations(values: Mapping[str, Any]) -> None:
    """Settings that are valid alone but not together."""
    cert, key = values.get("tls_cert_file"), values.get("tls_key_file")
    if (cert is None) != (key is None):
        raise ValueError(
            "tls_cert_file and tls_key_file must be given together (--tls-cert-file, --tls-key-file)"
        )
    if values.get("client_ca_file") is not None and cert is None:
        raise ValueError("client_ca_file (--client-ca-file) needs HTTPS: give tls_cert_file and tls_key_file")
    if values.get("leader_elect") and not values.get("kube"):
        raise ValueError(
            "leader_elect (--leader-elect) needs kube mode (--kube): the Lease lives in the cluster"
        )
    duration = values.get("lease_duration_seconds", 15.0)
    renew = values.get("renew_deadline_seconds", 10.0)
    retry = values.get("retry_period_seconds", 2.0)
    if not retry < renew < duration:
        raise ValueError(
            "leader election needs retry_period_seconds < renew_deadline_seconds < lease_duration_seconds "
            f"(got {retry} < {renew} < {duration})"
        )
