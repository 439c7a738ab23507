"""Build the services behind the HTTP verbs from settings and a cluster state (one place)."""

from __future__ import annotations

import logging

from extender.assumed import AssumeCache
from extender.binder import InMemoryBinder
from extender.cluster.state import ClusterState
from extender.placement import Placement
from extender.settings import Settings

log = logging.getLogger(__name__)


def build_services(settings: Settings, state: ClusterState) -> tuple[Placement, InMemoryBinder]:
    """Placement and binder for file/sample mode; builds the device index once up front."""
    assumed = AssumeCache(ttl_seconds=settings.assume_ttl_seconds)
    placement = Placement(
        state,
        features=settings.features,
        assumed=assumed,
        filter_timeout_seconds=settings.filter_timeout_seconds,
        topology=settings.topology(),
    )
    prepare_kernels(settings)
    placement.index()  # build now, so the first filter call does not pay for it
    return placement, InMemoryBinder(state, placement)


def prepare_kernels(settings: Settings) -> None:
    """Set the kernels' thread count and compile them now, so the first request is not slow."""
    from kernels import topology as kernels

    kernels.set_threads(settings.kernel_threads)
    seconds = kernels.warm_up()
    log.info(
        "topology kernels ready in %.2f s (numba threads: %s)", seconds, settings.kernel_threads or "default"
    )
