"""Build the real programs the end-to-end and oracle tests run, from upstream's published Go modules.

    python -m tests.gobuild [TARGET ...]     build (default: every target CI needs), print the paths
    python -m tests.gobuild --list           name every target and where its binaries go
    python -m tests.gobuild --pin-kubernetes v1.37.2 DIR
                                             write DIR/go.mod for k8s.io/kubernetes at that version
                                             (then `go mod tidy` in DIR writes go.sum)

Each target is a small Go module of ours under `tests/` that pins upstream's versions (go.mod and
go.sum); nothing is fetched from anywhere but the Go module proxy. Binaries land in a cache
directory outside the checkout, one folder per target keyed by its version and a hash of the
module's own files and build flags, so a second build is a no-op and an edit to a pin, to our Go
source or to the flags rebuilds (the control plane is stamped with its version, as upstream's
release build does, so that `/version` answers `v1.36.3`):

    ${DRA_E2E_CACHE:-${XDG_CACHE_HOME:-~/.cache}/dra-topology-extender/go}/<target>-<key>/

Go's own build and module caches (GOCACHE, GOMODCACHE) make a rebuild after a small change quick.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

TESTS = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Target:
    """One Go module of ours and the programs built from it."""

    name: str
    directory: Path
    """The module's directory (where `go build` runs)."""
    version: str
    """Upstream's version the module pins (part of the cache key, for people reading the path)."""
    packages: tuple[str, ...]
    """Import paths of the main packages to build; each binary is named after its last element."""
    modfile: str = "go.mod"
    """The module file to build with (`-modfile`), so one source can be built at two versions."""
    in_ci: bool = True
    """Built by `.ci/run` (a target only a person builds says why in its module)."""
    ldflags: str = ""
    """`go build -ldflags` (part of the cache key)."""
    tags: str = ""
    """`go build -tags` (part of the cache key)."""
    cgo: bool = True
    """`CGO_ENABLED` (part of the cache key): off where upstream's release build turns it off."""

    def binaries(self) -> dict[str, Path]:
        out = output_dir(self)
        return {self.binary_name(p): out / self.binary_name(p) for p in self.packages}

    def binary_name(self, package: str) -> str:
        """The last element of the import path; our own module's package (".") is named after
        the target without its version (`etcd`, `oracle`). A major-version suffix is skipped, as
        `go install` does (`sigs.k8s.io/kustomize/kustomize/v5` is `kustomize`)."""
        if package in (".", "./"):
            return self.name.split("-")[0]
        elements = package.rstrip("/").split("/")
        if len(elements) > 1 and re.fullmatch(r"v[2-9]\d*|v1\d+", elements[-1]):
            elements.pop()
        return elements[-1]


def _kubernetes_version_ldflags(version: str) -> str:
    """The version stamps upstream's build (hack/lib/version.sh) writes into component-base, so
    that `/version` says `v1.36.3` as a released API server does; an unstamped build reports
    `v0.0.0-master+$Format:%H$`, which a client reading the server's version cannot use."""
    major, minor = version.removeprefix("v").split(".")[:2]
    stamps = {"gitVersion": version, "gitMajor": major, "gitMinor": minor, "gitTreeState": "clean"}
    return " ".join(f"-X k8s.io/component-base/version.{k}={v}" for k, v in stamps.items())


_K8S_COMMANDS = tuple(
    f"k8s.io/kubernetes/cmd/{c}" for c in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
)

TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target(
            "kubernetes-1.36",
            TESTS / "e2e/gomod/k8s-1.36",
            "v1.36.3",
            _K8S_COMMANDS,
            ldflags=_kubernetes_version_ldflags("v1.36.3"),
        ),
        Target(
            "kubernetes-1.37",
            TESTS / "e2e/gomod/k8s-1.37",
            "v1.37.2",
            _K8S_COMMANDS,
            ldflags=_kubernetes_version_ldflags("v1.37.2"),
        ),
        Target("etcd", TESTS / "e2e/gomod/etcd", "v3.6", (".",)),
        Target(
            "jaeger", TESTS / "e2e/gomod/jaeger", "v1.76.0", ("github.com/jaegertracing/jaeger/cmd/jaeger",)
        ),
        Target("helm", TESTS / "e2e/gomod/helm", "v3.22.0", ("helm.sh/helm/v3/cmd/helm",)),
        Target("kustomize", TESTS / "e2e/gomod/kustomize", "v5.8.2", ("sigs.k8s.io/kustomize/kustomize/v5",)),
        Target(
            "promtool",
            TESTS / "e2e/gomod/promtool",
            "v0.316.0",
            # promqlnames (ours): Prometheus' parser naming the metrics of each expression
            ("github.com/prometheus/prometheus/cmd/promtool", "./promqlnames"),
            # Upstream's build tag without the service-discovery plugins (cloud SDKs), which
            # checking and unit-testing rules never use: a cold build takes a fraction as long.
            tags="remove_all_sd",
        ),
        Target("kwok", TESTS / "e2e/gomod/kwok", "v0.8.0", ("sigs.k8s.io/kwok/cmd/kwok",)),
        Target(
            "argo",
            TESTS / "e2e/gomod/argo",
            "v4.0.5",
            # Test-only: v4.0.5 has published security advisories (tests/e2e/argo.py).
            ("github.com/argoproj/argo-workflows/v4/cmd/workflow-controller",),
            cgo=False,  # as upstream's release build: no C sqlite for the (unused) offline archive
        ),
        Target("oracle-1.36", TESTS / "oracle", "v0.36.3", (".",), modfile="go.mod"),
        Target("oracle-1.37", TESTS / "oracle", "v0.37.2", (".",), modfile="go137.mod"),
    )
}


def cache_root() -> Path:
    if env := os.environ.get("DRA_E2E_CACHE"):
        return Path(env)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "dra-topology-extender" / "go"


def module_key(target: Target) -> str:
    """A hash of the module's own files: the pins (go.mod/go.sum) and our Go source."""
    digest = hashlib.sha256()
    digest.update(target.modfile.encode())
    digest.update(target.ldflags.encode())
    digest.update(target.tags.encode())
    digest.update(b"" if target.cgo else b"CGO_ENABLED=0")
    for path in sorted(target.directory.rglob("*")):
        if path.is_file() and (path.suffix in (".go", ".mod", ".sum")):
            digest.update(str(path.relative_to(target.directory)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def output_dir(target: Target) -> Path:
    return cache_root() / f"{target.name}-{target.version}-{module_key(target)}"


def built(target: Target) -> bool:
    return all(path.is_file() for path in target.binaries().values())


def build(target: Target, *, log: bool = True) -> dict[str, Path]:
    """Build `target` unless its binaries are already in the cache; return them by name."""
    if built(target):
        return target.binaries()
    out = output_dir(target)
    out.parent.mkdir(parents=True, exist_ok=True)
    # One builder per target: two pytest-xdist workers may ask for the same program at once.
    with open(out.with_name(out.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if built(target):
            return target.binaries()
        return _build_locked(target, out, log=log)


def _build_locked(target: Target, out: Path, *, log: bool) -> dict[str, Path]:
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    # `-o DIR/` with one package writes DIR/<last element>; "." would be the module's name.
    for package in target.packages:
        name = target.binary_name(package)
        command = [
            "go",
            "build",
            "-trimpath",
            "-buildvcs=false",
            f"-modfile={target.modfile}",
            *([f"-ldflags={target.ldflags}"] if target.ldflags else []),
            *([f"-tags={target.tags}"] if target.tags else []),
            "-o",
            str(partial / name),
            package,
        ]
        if log:
            print(f"== {target.name}: {' '.join(command)}", file=sys.stderr, flush=True)
        started = time.monotonic()
        env = {**os.environ, "GOFLAGS": "-mod=readonly"} | ({} if target.cgo else {"CGO_ENABLED": "0"})
        subprocess.run(command, cwd=target.directory, check=True, env=env)
        if log:
            print(f"   built {name} in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    return target.binaries()


_STAGING_REPLACE = re.compile(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/", re.MULTILINE)


def kubernetes_module(version: str) -> str:
    """go.mod text that builds upstream's control-plane commands at `version` (vX.Y.Z).

    k8s.io/kubernetes points every `k8s.io/<staging>` module at its own ./staging tree, which a
    dependent cannot see; the published staging modules carry the same code as v0.Y.Z, so each
    is replaced by that version (what out-of-tree schedulers do). The `tool` lines keep the
    commands' dependencies in go.sum."""
    info = subprocess.run(
        ["go", "mod", "download", "-json", f"k8s.io/kubernetes@{version}"],
        check=True,
        capture_output=True,
        text=True,
    )
    upstream = Path(json.loads(info.stdout)["GoMod"]).read_text()
    staging = sorted(set(_STAGING_REPLACE.findall(upstream)))
    go_line = re.search(r"^go (\S+)$", upstream, re.MULTILINE)
    staging_version = "v0." + version.removeprefix("v1.")
    lines = [
        f"// Written by `python -m tests.gobuild --pin-kubernetes {version}`; go.sum by `go mod tidy`.",
        f"module dra-topology-extender/e2e/kubernetes-{version}",
        "",
        f"go {go_line.group(1) if go_line else '1.26'}",
        "",
        f"require k8s.io/kubernetes {version}",
        "",
        *(f"tool {package}" for package in _K8S_COMMANDS),
        "",
        "replace (",
        *(f"\t{module} => {module} {staging_version}" for module in staging),
        ")",
        "",
    ]
    return "\n".join(lines)


def module_source(name: str, module: str) -> Path:
    """The source of `module` at the version target `name` pins (`go mod download`: from the
    module cache, fetched again from the proxy if the cache was cleaned). Tests read upstream's
    own manifests there (kwok's stages, Argo's CRDs) instead of copies."""
    target = TARGETS[name]
    out = subprocess.run(
        ["go", "mod", "download", f"-modfile={target.modfile}", "-json", module],
        cwd=target.directory,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "GOFLAGS": "-mod=readonly"},
    )
    return Path(json.loads(out.stdout)["Dir"])


def binaries(name: str) -> dict[str, Path]:
    """The built binaries of target `name`, building them first when the cache lacks them."""
    return build(TARGETS[name])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.gobuild", description=__doc__.split("\n")[0])
    parser.add_argument("targets", nargs="*", help="targets to build (default: every target CI builds)")
    parser.add_argument("--list", action="store_true", help="list the targets and their cache folders")
    parser.add_argument(
        "--pin-kubernetes",
        nargs=2,
        metavar=("VERSION", "DIR"),
        help="write DIR/go.mod for k8s.io/kubernetes VERSION",
    )
    args = parser.parse_args(argv)
    if args.pin_kubernetes:
        version, directory = args.pin_kubernetes
        Path(directory).mkdir(parents=True, exist_ok=True)
        (Path(directory) / "go.mod").write_text(kubernetes_module(version))
        print(f"wrote {directory}/go.mod; now run `go mod tidy` there", file=sys.stderr)
        return 0
    if args.list:
        for target in TARGETS.values():
            state = "built" if built(target) else "not built"
            ci = "ci" if target.in_ci else "--"
            print(f"{target.name:16} {target.version:8} {ci} {state:9} {output_dir(target)}")
        return 0
    unknown = [n for n in args.targets if n not in TARGETS]
    if unknown:
        parser.error(f"unknown target(s) {', '.join(unknown)}; known: {', '.join(TARGETS)}")
    names = args.targets or [t.name for t in TARGETS.values() if t.in_ci]
    for name in names:
        for binary, path in build(TARGETS[name]).items():
            print(f"{name}\t{binary}\t{path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
