"""numba's cache of the kernels: where it lives, and that a second process loads instead of compiling.

Scope: `kernels.cache_dir()` (explicit `NUMBA_CACHE_DIR`, else the XDG user cache, else ~/.cache),
every njit kernel writing its cache there, and two fresh processes sharing one empty cache
directory: the first compiles and writes, the second loads every kernel it calls (numba's
per-dispatcher `stats.cache_hits` / `cache_misses`). The subprocess runs the partition kernel only
(the smallest, so the cold compile stays short); all kernels share the one cache location checked
above. The container image's build-time warm-up is checked in tests/deploy/test_manifests.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numba

import kernels
from kernels import counters, topology

REPO = Path(__file__).resolve().parents[2]

#: Runs the partition kernel once and prints, per kernel dispatcher it used, numba's cache counts.
PROBE = """
import json
import numpy as np
import kernels
from kernels import topology

inputs = topology.partition_inputs(
    node_start=np.array([0, 2], np.int64), row_group=np.array([0, 0], np.int64),
    row_cost=np.array([[0.5], [0.5]]), group_counters=np.array([1], np.int64),
    group_free=np.ones((1, 1)), group_used=np.zeros(1, np.int64), free=np.ones(2, np.uint8),
)
topology.partition_terms(inputs, nodes=np.zeros(1, np.int64), sets=np.array([[0]], np.int64))
stats = {
    name: [sum(d.stats.cache_hits.values()), sum(d.stats.cache_misses.values())]
    for name, d in (("parallel", topology._partition_parallel), ("node", topology._partition_node))
}
print(json.dumps({"cache_dir": str(kernels.cache_dir()), "stats": stats}))
"""


def test_cache_dir_honours_numba_cache_dir_then_xdg_then_home() -> None:
    assert kernels.cache_dir({"NUMBA_CACHE_DIR": "/x/numba", "XDG_CACHE_HOME": "/y"}) == Path("/x/numba")
    assert kernels.cache_dir({"XDG_CACHE_HOME": "/y"}) == Path("/y/dra-extender/numba")
    home = Path(os.path.expanduser("~"))
    assert kernels.cache_dir({}) == home / ".cache" / "dra-extender" / "numba"
    assert kernels.cache_dir({"NUMBA_CACHE_DIR": "", "XDG_CACHE_HOME": ""}) == kernels.cache_dir({})


def test_every_kernel_caches_in_the_cache_dir() -> None:
    """Every njit function of the kernel modules has a disk cache under `kernels.cache_dir()`."""
    dispatchers = [
        value
        for module in (topology, counters)
        for value in vars(module).values()
        if isinstance(value, numba.core.dispatcher.Dispatcher)
    ]
    assert len(dispatchers) > 10
    root = kernels.cache_dir().resolve()
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
    assert first["stats"] == {"parallel": [0, 1], "node": [0, 1]}  # compiled, and written
    written = {path: path.stat().st_mtime_ns for path in cache.rglob("*") if path.is_file()}
    assert any(path.suffix == ".nbc" for path in written)
    second = _probe(cache)
    # the driver loaded from the cache; its callee is linked into it, so neither compiled
    assert second["stats"] == {"parallel": [1, 0], "node": [0, 0]}
    assert {path: path.stat().st_mtime_ns for path in cache.rglob("*") if path.is_file()} == written
