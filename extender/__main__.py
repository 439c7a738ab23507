"""The `dra-extender` command line: `serve`, `sample-cluster` and `explain`.

This is the edge of the process: the only module that reads `os.environ`, configures
logging and calls `web.run_app`. Every subcommand is one `_add_<name>(subparsers)` function
that registers its parser and sets `run=<function(args) -> exit code>`.
"""

from __future__ import annotations

import argparse
import logging
import os
import ssl
import sys
from collections.abc import Sequence
from typing import Any

from extender import __version__
from extender.errors import StateLoadError
from extender.settings import LOG_LEVELS, Settings, load_settings

logger = logging.getLogger("extender")

#: Exit code for bad settings, unreadable state and unusable client configuration (argparse uses it too).
EXIT_USAGE = 2


def _setup_logging(settings: Settings) -> None:
    from extender import telemetry

    telemetry.configure_logging(settings)  # stderr; JSON lines with --log-json


def _fail(message: str) -> int:
    print(f"dra-extender: {message}", file=sys.stderr)
    return EXIT_USAGE


def _run_serve(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args, os.environ)
    except ValueError as exc:
        return _fail(str(exc))
    _setup_logging(settings)
    logger.info("effective settings: %s", " ".join(f"{k}={v}" for k, v in sorted(settings.as_dict().items())))
    from extender import telemetry

    try:  # before any app is built: make_app picks up the global provider installed here
        telemetry.configure_tracing(settings, os.environ, set_global=True)
    except ValueError as exc:
        return _fail(str(exc))
    from extender import tls

    try:  # before the slow start-up work, so a bad certificate or key fails at once
        ssl_context = tls.server_ssl_context(settings)
    except ValueError as exc:
        return _fail(str(exc))
    if settings.kube:
        return _serve_kube(settings, ssl_context)
    source = "the kubernetes_version setting" if settings.kubernetes_version else "the file-mode default"
    _log_version(settings, source)

    from extender import wiring
    from extender.cluster.loading import load_state_paths
    from extender.cluster.state import KINDS, ClusterState
    from extender.server import make_app

    with wiring.collection_paused():  # until build_services has collected and frozen the heap
        if settings.state_paths:
            try:
                objects = load_state_paths(settings.state_paths)
            except StateLoadError as exc:
                return _fail(str(exc))
        else:
            from extender.cluster import sample

            logger.info("serving the embedded sample cluster")
            objects = sample.sample_objects()
        state = ClusterState.from_objects(objects)
        del objects  # the state holds what it keeps
        logger.info("cluster state: %s", ", ".join(f"{kind}={state.count(kind)}" for kind in KINDS))
        placement, binder = wiring.build_services(settings, state)
    app = make_app(settings, placement=placement, binder=binder)
    _add_dashboard(app, settings, placement)
    _run_app(app, settings, ssl_context)
    return 0


def _serve_kube(settings: Settings, ssl_context: ssl.SSLContext | None) -> int:
    """Serve kube mode: list+watch the API server, bind through it (allocator mode)."""
    from kubernetes.config import ConfigException

    from extender import wiring
    from extender.kube import version, watch
    from extender.server import make_app

    try:
        api_client = watch.load_api_client(settings)
    except ConfigException as exc:
        return _fail(f"--kube: cannot load the Kubernetes client configuration: {exc}")
    if settings.kubernetes_version:
        _log_version(settings, "the kubernetes_version setting")
    else:
        try:
            server_version, git_version = version.read_server_version(api_client)
            settings = settings.with_kubernetes_version(server_version)
        except (version.VersionError, ValueError) as exc:
            return _fail(f"--kube: {exc}")
        _log_version(settings, f"the API server's /version ({git_version})")
    placement, binder, source = wiring.build_kube_services(settings, api_client=api_client)
    leader = binder.elector.is_leader if binder.elector is not None else None
    app = make_app(settings, placement=placement, binder=binder, leader=leader)
    _add_dashboard(app, settings, placement)
    # list+watch, then the leader election, on the app's loop; /readyz waits for the sync
    app.cleanup_ctx.append(wiring.kube_app_context(placement, source, binder))
    _run_app(app, settings, ssl_context)
    return 0


def _log_version(settings: Settings, source: str) -> None:
    features = settings.features
    logger.info(
        "Kubernetes %s allocator semantics, from %s; features: %s",
        features.kubernetes_version,
        source,
        features.describe(),
    )


def _add_dashboard(app: Any, settings: Settings, placement: Any) -> None:
    if settings.ui:
        from extender import ui

        ui.add_dashboard(app, placement)
        logger.info("placement dashboard at /ui (read-only)")


def _run_app(app: Any, settings: Settings, ssl_context: ssl.SSLContext | None) -> None:
    """Serve `app` until interrupted; HTTPS with certificate reloading when `ssl_context` is set."""
    from aiohttp import web

    from extender import shutdown, tls

    # SIGTERM: requests in flight get half the grace; whatever still runs then is abandoned at
    # the grace (extender/shutdown.py).
    app.on_shutdown.append(shutdown.on_shutdown(settings.shutdown_grace_seconds))
    scheme = "http"
    if ssl_context is not None:
        # Rotated certificates (Secret updates) are loaded into this same context while serving.
        app.cleanup_ctx.append(tls.reloading(tls.CertReloader.from_settings(ssl_context, settings)))
        scheme = "https"
    mtls = " (client certificates required)" if settings.client_ca_file is not None else ""
    logger.info("listening on %s://%s:%d%s", scheme, settings.listen_host, settings.listen_port, mtls)
    web.run_app(
        app,
        host=settings.listen_host,
        port=settings.listen_port,
        ssl_context=ssl_context,
        print=None,
        access_log=None,
        shutdown_timeout=settings.shutdown_grace_seconds / 2,
    )


def _run_sample_cluster(args: argparse.Namespace) -> int:
    from extender.cluster import sample

    text = sample.sample_text()
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def _add_serve(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the extender HTTP server",
        description="Run the scheduler extender on state files or the embedded sample cluster. "
        "Flags override DRA_EXTENDER_* env vars, which override the --config file.",
    )
    parser.add_argument("--listen", metavar="HOST:PORT", help="address to serve on (default 127.0.0.1:8888)")
    parser.add_argument(
        "--state",
        metavar="PATH",
        action="append",
        help="state file or directory (YAML/JSON, kubectl dumps); repeatable; default: the embedded sample",
    )
    parser.add_argument(
        "--kube", action="store_true", default=None, help="list+watch a real cluster through the API server"
    )
    parser.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig for --kube")
    parser.add_argument("--config", metavar="PATH", help="YAML settings file")
    parser.add_argument(
        "--feature-gates",
        metavar="Name=bool,...",
        help="Kubernetes DRA feature gates, e.g. DRADeviceTaints=false (defaults: --kubernetes-version's)",
    )
    parser.add_argument(
        "--kubernetes-version",
        metavar="1.36|1.37",
        help="Kubernetes version whose allocator rules, error texts and gate defaults apply "
        "(default: 1.36; with --kube, the API server's version)",
    )
    parser.add_argument(
        "--max-body-bytes", metavar="N", help="largest request body, bytes or Ki/Mi/Gi (default 64Mi)"
    )
    parser.add_argument(
        "--shutdown-grace-seconds", metavar="S", help="SIGTERM stops the server within this (default 20)"
    )
    parser.add_argument("--log-level", choices=LOG_LEVELS, help="log level (default info)")
    parser.add_argument("--log-json", action="store_true", default=None, help="log one JSON object per line")
    parser.add_argument(
        "--ui", action="store_true", default=None, help="serve the read-only placement dashboard at /ui"
    )
    _add_kube_flags(parser)
    _add_tls_flags(parser)
    _add_leader_flags(parser)
    _add_tracing_flags(parser)
    parser.set_defaults(run=_run_serve)


def _add_kube_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("kube mode (watch)")
    group.add_argument(
        "--watch-stall-seconds", metavar="S", help="relist a watch silent for this long (default 300)"
    )
    group.add_argument(
        "--relist-ready-seconds", metavar="S", help="/readyz fails while a relist runs longer (default 30)"
    )


def _add_tls_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("TLS")
    group.add_argument("--tls-cert-file", metavar="PATH", help="serve HTTPS with this PEM certificate")
    group.add_argument("--tls-key-file", metavar="PATH", help="PEM private key of --tls-cert-file")
    group.add_argument(
        "--client-ca-file", metavar="PATH", help="require client certificates signed by this PEM CA"
    )


def _add_leader_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("leader election (kube mode)")
    group.add_argument(
        "--leader-elect", action="store_true", default=None, help="bind only while holding the Lease"
    )
    group.add_argument(
        "--leader-lease-name", metavar="NAME", help="Lease name (default dra-topology-extender)"
    )
    group.add_argument("--leader-lease-namespace", metavar="NS", help="Lease namespace (default kube-system)")
    group.add_argument("--lease-duration-seconds", metavar="S", help="Lease validity (default 15)")
    group.add_argument("--renew-deadline-seconds", metavar="S", help="leader gives up after (default 10)")
    group.add_argument("--retry-period-seconds", metavar="S", help="acquire/renew period (default 2)")


def _add_tracing_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("tracing (OpenTelemetry)")
    group.add_argument(
        "--tracing", action="store_true", default=None, help="export spans over OTLP (default off)"
    )
    group.add_argument("--otlp-endpoint", metavar="URL", help="OTLP endpoint (default: OTEL_* env vars)")
    group.add_argument(
        "--otlp-protocol", choices=("http/protobuf", "grpc"), help="OTLP transport (default http/protobuf)"
    )


def _add_sample_cluster(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "sample-cluster",
        help="print the embedded sample cluster as multi-document YAML",
        description="Print the embedded sample cluster (what `serve` uses without --state) to stdout.",
    )
    parser.set_defaults(run=_run_sample_cluster)


def _run_explain(args: argparse.Namespace) -> int:
    from extender import explaining
    from extender.allocator.features import Features, parse_feature_gates
    from extender.cluster.loading import load_state_paths
    from extender.cluster.state import ClusterState

    try:
        version = getattr(args, "kubernetes_version", None) or "1.36"
        features = Features.from_gates(parse_feature_gates(args.feature_gates), version)
        if args.state:
            objects = load_state_paths(args.state)
        else:
            from extender.cluster import sample

            objects = sample.sample_objects()
        pods = explaining.load_pods(args.pod)
    except (ValueError, StateLoadError) as exc:
        return _fail(str(exc))
    logging.basicConfig(level=logging.WARNING)
    state = ClusterState.from_objects(objects)
    unknown = [n for n in args.node if state.get("Node", n) is None]
    if unknown:
        return _fail(f"unknown node(s): {', '.join(unknown)}")
    # Compile (or load from numba's cache) the kernels before any search deadline starts: the first
    # explain on a machine would otherwise spend the scoring deadline compiling and print no scores.
    from kernels import warming

    warming.warm_up_now()
    for pod in pods:
        print(explaining.explain(state, pod, features=features, nodes=args.node or None))
    return 0


def _add_explain(subparsers: Any) -> None:
    from extender import explaining

    explaining.add_parser(subparsers).set_defaults(run=_run_explain)


#: One registration function per subcommand. To add one (e.g. `explain`), write
#: `_add_explain(subparsers)` that adds its parser and `set_defaults(run=_run_explain)`,
#: and append it here; `main` needs no change.
_SUBCOMMANDS = [_add_serve, _add_sample_cluster, _add_explain]


def build_parser() -> argparse.ArgumentParser:
    """The `dra-extender` argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="dra-extender", description="kube-scheduler extender for DRA ResourceClaims."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in _SUBCOMMANDS:
        add(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point; returns the process exit code.

    Args:
        argv: arguments without the program name; None reads `sys.argv[1:]`.

    Returns:
        0 on success, 2 for usage, settings or state errors.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "run", None) is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
