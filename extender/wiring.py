"""Build the services behind the HTTP verbs from settings and a cluster state (one place)."""

from __future__ import annotations

from extender.assumed import AssumeCache
from extender.binder import InMemoryBinder
from extender.cluster.state import ClusterState
from extender.placement import Placement
from extender.settings import Settings


def build_services(settings: Settings, state: ClusterState) -> tuple[Placement, InMemoryBinder]:
    """Placement and binder for file/sample mode; builds the device index once up front."""
    assumed = AssumeCache(ttl_seconds=settings.assume_ttl_seconds)
    placement = Placement(
        state,
        features=settings.features,
        assumed=assumed,
        filter_timeout_seconds=settings.filter_timeout_seconds,
    )
    placement.index()  # build now, so the first filter call does not pay for it
    return placement, InMemoryBinder(state, placement)
