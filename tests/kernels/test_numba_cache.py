"""numba's cache of the kernels: where it lives, and that a second process loads instead of compiling.

Scope: `kernels.cache_dir()` (explicit `NUMBA_CACHE_DIR`, else the XDG user cache, else ~/.cache),
`kernels.compiled_dir()` under it (keyed by a hash of every kernel source file, so a change in one
file recompiles the kernels of another that inline it), every njit kernel of every kernels module
writing its cache there, and two fresh processes sharing one empty cache directory: the first
compiles and writes, the second loads every kernel it calls (numba's per-dispatcher
`stats.cache_hits` / `cache_misses`). The subprocess runs the partition kernel only (the smallest,
so the cold compile stays short); all kernels share the one cache location checked above. The
container image's build-time warm-up is checked in tests/deploy/test_manifests.py.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import numba

import kernels

REPO = Path(__file__).resolve().parents[2]

#: Runs the partition kernel once and prints, per kernel dispatcher it used, numba's cache counts.
PROBE = """
import json
import numpy as np
import kernels
from kernels import topology
from kernels.topology import partition

inputs = topology.partition_inputs(
    node_start=np.array([0, 2], np.int64), row_group=np.array([0, 0], np.int64),
    row_cost=np.array([[0.5], [0.5]]), group_counters=np.array([1], np.int64),
    group_free=np.ones((1, 1)), group_used=np.zeros(1, np.int64), free=np.ones(2, np.uint8),
)
topology.partition_terms(inputs, nodes=np.zeros(1, np.int64), sets=np.array([[0]], np.int64))
stats = {
    name: [sum(d.stats.cache_hits.values()), sum(d.stats.cache_misses.values())]
    for name, d in (("parallel", partition._partition_parallel), ("node", partition._partition_node))
}
print(json.dumps({"cache_dir": str(kernels.cache_dir()), "compiled_dir": str(kernels.compiled_dir()),
                  "stats": stats}))
"""


def test_cache_dir_honours_numba_cache_dir_then_xdg_then_home() -> None:
    assert kernels.cache_dir({"NUMBA_CACHE_DIR": "/x/numba", "XDG_CACHE_HOME": "/y"}) == Path("/x/numba")
    assert kernels.cache_dir({"XDG_CACHE_HOME": "/y"}) == Path("/y/dra-extender/numba")
    home = Path(os.path.expanduser("~"))
    assert kernels.cache_dir({}) == home / ".cache" / "dra-extender" / "numba"
    assert kernels.cache_dir({"NUMBA_CACHE_DIR": "", "XDG_CACHE_HOME": ""}) == kernels.cache_dir({})


def test_the_compiled_dir_changes_with_any_kernel_source(tmp_path: Path) -> None:
    """`compiled_dir()` is keyed by every source file of the package, not by one kernel's file:
    numba's own key is the kernel's file alone, so a stale search would load after a score edit."""
    sources = tmp_path / "kernels"
    shutil.copytree(kernels.PACKAGE_DIR, sources, ignore=shutil.ignore_patterns("__pycache__"))
    assert kernels.source_fingerprint(sources) == kernels.source_fingerprint()
    score = sources / "topology" / "score.py"
    score.write_text(score.read_text() + "\n")
    edited = kernels.source_fingerprint(sources)
    assert edited != kernels.source_fingerprint()
    (sources / "topology" / "extra.py").write_text("")
    assert kernels.source_fingerprint(sources) not in (edited, kernels.source_fingerprint())
    env = {"NUMBA_CACHE_DIR": "/x/numba"}
    assert kernels.compiled_dir(env) == Path("/x/numba") / f"sources-{kernels.source_fingerprint()}"


def _kernel_modules() -> list[object]:
    return [importlib.import_module(m.name) for m in pkgutil.walk_packages(kernels.__path__, "kernels.")]


def test_every_kernel_caches_in_the_compiled_dir() -> None:
    """Every njit function of the kernel modules has a disk cache under `kernels.compiled_dir()`."""
    dispatchers = [
        value
        for module in _kernel_modules()
        for value in vars(module).values()
        if isinstance(value, numba.core.dispatcher.Dispatcher)
    ]
    assert len(dispatchers) > 10
    root = kernels.compiled_dir().resolve()
    assert root.is_relative_to(kernels.cache_dir().resolve())
    for dispatcher in dispatchers:
        path = dispatcher.stats.cache_path  # None: caching is off for this function
        assert path is not None and Path(path).resolve().is_relative_to(root), dispatcher


def _probe(cache: Path) -> dict[str, object]:
    env = os.environ | {"NUMBA_CACHE_DIR": str(cache)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_second_process_loads_the_kernels_instead_of_compiling(tmp_path: Path) -> None:
    cache = tmp_path / "numba"
    first = _probe(cache)
    assert first["cache_dir"] == str(cache)
    assert first["compiled_dir"] == str(cache / f"sources-{kernels.source_fingerprint()}")
    assert first["stats"] == {"parallel": [0, 1], "node": [0, 1]}  # compiled, and written
    written = {path: path.stat().st_mtime_ns for path in cache.rglob("*") if path.is_file()}
    assert any(path.suffix == ".nbc" for path in written)
    second = _probe(cache)
    # the driver loaded from the cache; its callee is linked into it, so neither compiled
    assert second["stats"] == {"parallel": [1, 0], "node": [0, 0]}
    assert {path: path.stat().st_mtime_ns for path in cache.rglob("*") if path.is_file()} == written
