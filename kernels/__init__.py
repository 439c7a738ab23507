"""Numba topology kernels; depend only on numpy and numba.

Importing the package points numba's on-disk cache at one directory per user, before any kernel
module is imported (their `@njit(cache=True)` decorators pick the cache location when they run):

- `NUMBA_CACHE_DIR`, when set (the container image and the Deployment set it);
- else `$XDG_CACHE_HOME/dra-extender/numba`, else `~/.cache/dra-extender/numba`.

Why: numba's default cache sits next to the source, in `__pycache__`, which a site-packages install
or a read-only image cannot write; numba then compiles every kernel again in every process (30-60 s
on a 2-core machine). With a user cache directory the first process compiles and writes, every
later one loads (`python -m kernels` compiles ahead of time, as the image build does). The first
process does not make `serve` wait: it compiles in the background while the kernels' plain-Python
twins answer (`kernels/warming.py`).
numba keys an entry by the kernel's own source file (its path and a hash of its content), its
argument types and the CPU; it does not look at other files ("Cache invalidation fails to recognize
changes in functions defined in a different file", numba's caching notes). The topology kernels span
files (the search inlines the score's primitives from `topology/score.py`, and every kernel reads
constants of `topology/inputs.py`), so numba alone would load a stale search after a change to the
score. Hence numba's cache directory is one level deeper, `compiled_dir()`: `cache_dir()` /
`sources-<hash of every source file of this package>`. A change to any kernel source, or an upgrade,
compiles again into a fresh directory; an unchanged install (the image, `python -m kernels`, every
later start) finds the same directory and loads.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

#: numba's own variable for its cache directory; an explicit value always wins.
CACHE_DIR_ENV = "NUMBA_CACHE_DIR"


def cache_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """The directory the kernels' compiled code is cached in (see the module docstring)."""
    explicit = environ.get(CACHE_DIR_ENV)
    if explicit:
        return Path(explicit)
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dra-extender" / "numba"


#: This package's directory: its `.py` files are the sources `compiled_dir()` is keyed by.
PACKAGE_DIR = Path(__file__).resolve().parent


def source_fingerprint(root: Path = PACKAGE_DIR) -> str:
    """16 hex digits of a sha256 over every `.py` file under `root` (relative path and bytes)."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def compiled_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """The directory numba caches this package's kernels in: `cache_dir()` / `sources-<fingerprint>`."""
    return cache_dir(environ) / f"sources-{source_fingerprint()}"


def _use_cache_dir() -> None:
    """Point numba at `compiled_dir()` before any kernel module is imported.

    The environment gets `cache_dir()`, the root, so that child processes compute the same root (and,
    from the same sources, the same `compiled_dir()`). numba's configuration gets `compiled_dir()`:
    it is read when a `@njit(cache=True)` decorator runs. numba re-reads the environment before each
    compile, but applies it only when a `NUMBA_` variable changed since its last read; reading it now,
    after setting the root, keeps that re-read from replacing `compiled_dir()` with the root.
    """
    os.environ[CACHE_DIR_ENV] = str(cache_dir())
    from numba.core import config

    config.reload_config()  # type: ignore[no-untyped-call]  # numba ships no annotations
    config.CACHE_DIR = str(compiled_dir())  # type: ignore[attr-defined]  # filled in at run time


_use_cache_dir()
