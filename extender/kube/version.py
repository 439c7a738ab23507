"""Which Kubernetes version the API server runs, read once at start-up (`GET /version`).

Kube mode without `kubernetes_version` set takes the allocator semantics of the cluster's
version. The answer must name a supported minor version: an unsupported one is a start-up
error naming the supported versions and the flag that overrides it, never a silent choice.
"""

from __future__ import annotations

import re
from typing import Any

from extender.allocator.features import SUPPORTED_VERSIONS

_GIT_VERSION = re.compile(r"^v?(\d+)\.(\d+)")


class VersionError(Exception):
    """The API server's version could not be read or is not supported."""


def _override_hint() -> str:
    return (
        f"supported: {', '.join(SUPPORTED_VERSIONS)}; set the version the scheduler runs with "
        "--kubernetes-version (env DRA_EXTENDER_KUBERNETES_VERSION, settings key kubernetes_version)"
    )


def version_of(info: dict[str, Any]) -> str:
    """`major.minor` of a `/version` answer (gitVersion, else major/minor); VersionError if unsupported."""
    git_version = str(info.get("gitVersion") or info.get("git_version") or "")
    match = _GIT_VERSION.match(git_version)
    if match:
        version = f"{int(match[1])}.{int(match[2])}"
    else:
        # Some distributions publish minor as "37+"; the number is what matters.
        major = re.match(r"\d+", str(info.get("major") or ""))
        minor = re.match(r"\d+", str(info.get("minor") or ""))
        if not major or not minor:
            raise VersionError(
                f"the API server's /version names no version (gitVersion {git_version!r}); {_override_hint()}"
            )
        version = f"{int(major[0])}.{int(minor[0])}"
    if version not in SUPPORTED_VERSIONS:
        raise VersionError(
            f"the API server runs Kubernetes {version} (gitVersion {git_version!r}), whose allocator "
            f"this extender does not reproduce; {_override_hint()}"
        )
    return version


def read_server_version(api_client: Any) -> tuple[str, str]:
    """(`major.minor`, gitVersion) of the API server behind `api_client`; VersionError on failure."""
    import kubernetes.client

    try:
        code = kubernetes.client.VersionApi(api_client).get_code()
    except Exception as exc:  # any transport or API error: start-up cannot go on without it
        raise VersionError(f"cannot read the API server's /version: {exc}; {_override_hint()}") from exc
    info = {"gitVersion": code.git_version, "major": code.major, "minor": code.minor}
    return version_of(info), str(code.git_version)
