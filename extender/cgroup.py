"""The memory limit of the process's cgroup: what the container may use before the kernel
kills it (Kubernetes writes `resources.limits.memory` there).

`/metrics` exports it next to the process's resident memory, so an alert can say "near its
limit" without knowing the Deployment's settings (and follows an in-place resize, which
changes the cgroup's limit while the process runs). Read at scrape time: a few small files.

Where it is read: cgroup v2 (`0::/path` in /proc/self/cgroup) from `memory.max`, cgroup v1 (a
`memory` controller line) from `memory.limit_in_bytes`, in the process's own cgroup directory
and each of its ancestors under the mount (a parent's limit applies as well; the smallest wins).
A container with its own cgroup namespace sees its cgroup as `/` and the mount as its own
directory, which the same walk covers. "max", v1's "unlimited" (a value near 2^63) or no
readable file at all mean: no limit (None).
"""

from __future__ import annotations

import logging
from pathlib import Path, PurePosixPath

log = logging.getLogger(__name__)

CGROUP_MOUNT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")
#: cgroup v1 reports "no limit" as the largest page-aligned value (9223372036854771712 on 4 KiB
#: pages); anything from 2^62 up is taken as that.
V1_UNLIMITED = 2**62


def memory_limit_bytes(mount: Path = CGROUP_MOUNT, proc_cgroup: Path = PROC_SELF_CGROUP) -> int | None:
    """The smallest memory limit of the process's cgroup and its ancestors, or None (no limit,
    or no cgroup information: not Linux, or /sys not mounted)."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    v1_path = v2_path = None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            v2_path = path
        elif "memory" in controllers.split(","):
            v1_path = path
    if v1_path is not None:  # hybrid hosts: the memory controller lives in the v1 hierarchy
        return _smallest(mount / "memory", v1_path, "memory.limit_in_bytes")
    if v2_path is not None:
        return _smallest(mount, v2_path, "memory.max")
    return None


def _smallest(root: Path, cgroup_path: str, file_name: str) -> int | None:
    limits = []
    relative = PurePosixPath(cgroup_path.strip() or "/").relative_to("/")
    for directory in (relative, *relative.parents):
        value = _read_limit(root / directory / file_name)
        if value is not None:
            limits.append(value)
    return min(limits) if limits else None


def _read_limit(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:  # not there (this directory is outside our namespace's view), or unreadable
        return None
    if text == "max":
        return None
    try:
        value = int(text)
    except ValueError:
        log.warning("cgroup: %s holds %r, not a number of bytes; ignored", path, text[:40])
        return None
    return None if value >= V1_UNLIMITED or value <= 0 else value
