"""Build the services behind the HTTP verbs from settings and a cluster state (one place)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

from extender.binder import InMemoryBinder
from extender.cluster.state import ClusterState
from extender.core.assumed import AssumeCache
from extender.core.placement import Placement
from extender.index import selecting
from extender.settings import Settings
from extender.worker import PlacementWorker

if TYPE_CHECKING:
    import kubernetes.client

    from extender.kube.binder import KubeBinder
    from extender.kube.watch import KubeSource

log = logging.getLogger(__name__)

#: At most this long the cyclic GC stays off while kube mode waits for its first sync.
SYNC_GC_PAUSE_SECONDS = 300.0


def build_services(settings: Settings, state: ClusterState) -> tuple[Placement, InMemoryBinder]:
    """Placement and binder for file/sample mode; builds the device index once up front."""
    assumed = AssumeCache(ttl_seconds=settings.assume_ttl_seconds)
    placement = Placement(
        state,
        features=settings.features,
        assumed=assumed,
        filter_timeout_seconds=settings.filter_timeout_seconds,
        topology=settings.topology(),
        gang_settings=settings.gang(),
        freeze_caches=True,
        worker=placement_worker(settings),
    )
    apply_memory_bounds(settings, placement)
    warm_kernels(settings)
    placement.warm()  # build the index and the tiers' columns now, not in the first filter call
    freeze_heap()
    return placement, InMemoryBinder(state, placement, scheduler_names=settings.scheduler_names)


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while the start-up builds its long-lived objects.

    Loading a state file and indexing it allocates millions of objects that all stay alive, and
    every allocation-triggered full collection walks all of them again: with collection on, a
    1,000-node mixed fleet took twice as long to load and index (docs/benchmarks.md). Nothing is
    lost: `freeze_heap` at the end of `build_services` collects once before freezing.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def freeze_heap(*, collect: bool = True) -> None:
    """Move everything alive now (the loaded cluster, the index) out of the GC's generations.

    Those objects live for the whole process; without this every full collection walks all of
    them and pauses a filter call for tens of milliseconds at 5,000 nodes (docs/benchmarks.md).
    Frozen objects are still freed by reference counting when the state drops them.

    `collect=False` freezes without collecting first: for a process already answering probes,
    where one full collection of a synced 5,000-node heap held the GIL for 1.9 s (a /healthz
    probe waited that long, bench/healthz_bench.py). Cyclic garbage left from the start-up is
    then kept, once.
    """
    if collect:
        gc.collect()
    gc.freeze()


def build_kube_services(
    settings: Settings,
    *,
    api_client: kubernetes.client.ApiClient | None = None,
) -> tuple[Placement, KubeBinder, KubeSource]:
    """Placement, binder and watch source for kube mode, over an initially empty ClusterState.

    The watch applies its events on the placement's worker thread, the thread that runs every
    evaluation and bind step, so an evaluation never sees the state change under it (and the
    state needs no lock); events wait while an evaluation runs.

    Args:
        settings: the effective settings (kubeconfig, watch stall and readiness limits).
        api_client: a ready client (tests); None loads kubeconfig or in-cluster config.

    Returns:
        The services; run them with `app.cleanup_ctx.append(kube_app_context(source, binder))`,
        which starts the watch, then the leader election (when `settings.leader_elect`), and
        on shutdown releases the Lease, closes the binder's thread pool and stops the watch.
        `placement.ready()` is False until every watched kind has been listed.

    Raises:
        kubernetes.config.ConfigException: no usable client configuration.
    """
    from extender.kube import watch
    from extender.kube.binder import KubeBinder
    from extender.kube.lease import LeaderElector

    state = ClusterState()
    api_client = api_client or watch.load_api_client(settings)
    placement = Placement(
        state,
        features=settings.features,
        assumed=AssumeCache(ttl_seconds=settings.assume_ttl_seconds),
        filter_timeout_seconds=settings.filter_timeout_seconds,
        topology=settings.topology(),
        gang_settings=settings.gang(),
        is_synced=lambda: source.synced(),
        freeze_caches=True,
        worker=placement_worker(settings),
    )
    # The source schedules its state writes with `loop.call_soon_threadsafe` (and checks
    # `is_closed`); the worker offers both, so the writes run on the worker thread.
    worker: Any = placement.worker
    source = watch.KubeSource(state, settings, api_client=api_client, loop=worker)
    placement.set_source_stats(source.stats)  # reported by /metrics with the placement's stats
    apply_memory_bounds(settings, placement)
    warm_kernels(settings)
    elector = None
    if settings.leader_elect:
        elector = LeaderElector(
            api_client,
            namespace=settings.leader_lease_namespace,
            name=settings.leader_lease_name,
            lease_duration=settings.lease_duration_seconds,
            renew_deadline=settings.renew_deadline_seconds,
            retry_period=settings.retry_period_seconds,
        )
    binder = KubeBinder(
        api_client, state, placement, elector=elector, scheduler_names=settings.scheduler_names
    )
    return placement, binder, source


def kube_app_context(
    placement: Placement, source: KubeSource, binder: KubeBinder
) -> Callable[[Any], AsyncIterator[None]]:
    """One aiohttp cleanup_ctx entry for kube mode: start the watch, then campaign; on shutdown
    release the Lease first (a follower takes over at once), close the binder, stop the watch.

    Once the cache has synced for the first time, the device index is built and the heap frozen
    (as file mode does at start-up), so the first filter does not pay for either.
    """
    from extender.kube.lease import LeaderElector

    async def warm_after_sync() -> None:
        # As `serve` from a file: no cyclic collection while the first lists fill the state and
        # the index is built (each full collection would walk everything built so far); the
        # collector is back on once the heap is frozen, or after SYNC_GC_PAUSE_SECONDS at most
        # (a cache that cannot sync must not leave it off).
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            paused_until = asyncio.get_running_loop().time() + SYNC_GC_PAUSE_SECONDS
            while not source.synced():
                if asyncio.get_running_loop().time() > paused_until and was_enabled:
                    gc.enable()
                await asyncio.sleep(0.1)
            await placement.worker.run(placement.warm)
            freeze_heap(collect=False)  # the server answers probes meanwhile
        finally:
            if was_enabled:
                gc.enable()

    async def app_context(app: Any) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            stack.callback(placement.worker.close)  # last: after the watch stopped writing
            await stack.enter_async_context(contextlib.asynccontextmanager(source.app_context)(app))
            stack.callback(binder.close)
            if isinstance(binder.elector, LeaderElector):
                context = contextlib.asynccontextmanager(binder.elector.app_context)
                await stack.enter_async_context(context(app))
            warming = asyncio.get_running_loop().create_task(warm_after_sync())
            stack.callback(warming.cancel)
            yield

    return app_context


def apply_memory_bounds(settings: Settings, placement: Placement) -> None:
    """Bound every table a new selector text, claim shape or pod adds to by its setting
    (docs/robustness.md); before the first index is built, which reads them."""
    from extender import claims
    from extender.cel import selectors
    from extender.core import shapes
    from extender.core.evaluation import Evaluations
    from extender.index import snapshot

    selectors.set_compile_cache_size(settings.cel_compile_cache_size)
    selecting.set_result_cache_size(settings.cel_result_cache_size)
    snapshot.set_mask_cache(
        entries=settings.selector_mask_cache_size, max_bytes=settings.selector_mask_cache_bytes
    )
    shapes.set_shape_cache_size(settings.claim_shape_cache_size)
    claims.set_checked_claims_size(settings.pods_seen_cache_size)
    placement.evaluations = Evaluations(
        size=settings.evaluation_cache_size,
        max_bytes=settings.evaluation_cache_bytes,
        pods_seen=settings.pods_seen_cache_size,
        pods_seen_bytes=settings.pods_seen_cache_bytes,
    )


def placement_worker(settings: Settings) -> PlacementWorker:
    """The placement's worker thread, with the kernels' thread count set on it (numba's setting is
    per thread, so `prepare_kernels` on the main thread does not reach the worker)."""
    from kernels import topology as kernels

    return PlacementWorker(initializer=functools.partial(kernels.set_threads, settings.kernel_threads))


def warm_kernels(settings: Settings) -> None:
    """Warm the kernels up as `settings.kernel_warmup` says: `background` starts the compiling
    thread of `kernels.warming` (the twins answer until it is done; readiness does not wait),
    `blocking` compiles them now (`prepare_kernels`). Nothing to do when they are compiled already."""
    from kernels import topology as kernels
    from kernels import warming

    if settings.kernel_warmup == "blocking":
        prepare_kernels(settings)
        return
    kernels.set_threads(settings.kernel_threads)  # numba's count is per thread: this one's, as blocking does
    if warming.start(threads=settings.kernel_threads):
        log.info(
            "compiling the topology kernels in the background (the first start on this machine compiles "
            "them, 30 s and more; later ones load them from numba's cache in %s); until they are ready "
            "their plain-Python twins answer, with the same answers, more slowly",
            _cache_dir(),
        )


def _cache_dir() -> str:
    import kernels as kernel_package

    return str(kernel_package.cache_dir())


def prepare_kernels(settings: Settings) -> None:
    """Set the kernels' thread count and compile them now, so the first request is not slow
    (`kernel_warmup: blocking`; benches call it before timing anything)."""
    from kernels import warming

    log.info(
        "preparing topology kernels (the first start on this machine compiles them, 30 s and more; "
        "later ones load them from numba's cache in %s)",
        _cache_dir(),
    )
    seconds = warming.warm_up_now(threads=settings.kernel_threads)
    log.info(
        "topology kernels ready in %.2f s (numba threads: %s)", seconds, settings.kernel_threads or "default"
    )
