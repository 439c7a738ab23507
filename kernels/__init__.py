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
Entries are keyed by the kernel's source file (path, size, mtime), its argument types and the CPU, so
a changed source or another CPU model compiles again instead of loading stale code.
"""

from __future__ import annotations

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


def _use_cache_dir() -> None:
    """Point numba at `cache_dir()`: in the environment (which numba re-reads before each compile,
    and child processes inherit) and in numba's already loaded configuration."""
    path = str(cache_dir())
    os.environ[CACHE_DIR_ENV] = path
    from numba.core import config

    config.CACHE_DIR = path  # type: ignore[attr-defined]  # numba's config is filled in at run time


_use_cache_dir()
