"""`python -m kernels`: compile every kernel into numba's cache directory now, not at the first start.

The container image runs this at build time, as the user and with the `NUMBA_CACHE_DIR` it runs
with, so a container start loads compiled code (see `kernels/__init__.py` and deploy/Dockerfile).
Prints the cache directory (`kernels.compiled_dir()`) and the seconds taken; a second run only loads.
"""

from __future__ import annotations

import kernels
from kernels import warming


def main() -> int:
    """Warm up (compile or load) the topology and first-fit kernels; print where and how long."""
    seconds = warming.warm_up_now()
    print(f"numba kernels ready in {seconds:.2f} s; cache: {kernels.compiled_dir()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
