"""The background warm-up switch (`kernels.warming`): twins while compiling, kernels after.

Scope: the states (IDLE, WARMING, COMPILED, FAILED) and what each entry point runs in them, with
the compilation replaced by a function the test releases (no wall-clock bounds); that the real
warm-up compiles every signature the service's calls use, so the placement worker never compiles
(a subprocess, whose dispatchers start empty); `python -m kernels` through `warm_up_now`. Whole
filter/prioritize/bind answers with twins versus kernels: tests/server/test_kernel_warmup.py.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernels import counters, topology, warming
from kernels.topology import partition, score, search, warmup

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.free_switch


class _Gate:
    """Stands in for `warming._compile_all`: blocks until released, then returns or raises."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.error = error
        self.threads: list[int] = []

    def __call__(self, threads: int) -> float:
        self.threads.append(threads)
        self.entered.set()
        assert self.release.wait(30), "the test never released the warm-up"
        if self.error is not None:
            raise self.error
        return 0.5


@pytest.fixture
def switch(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., _Gate]]:
    """Factory: a fresh IDLE switch whose compilation is a `_Gate`; the state is restored after."""
    assert warming.wait(timeout=600)
    saved = warming._state
    gates: list[_Gate] = []

    def make(error: BaseException | None = None) -> _Gate:
        gate = _Gate(error)
        gates.append(gate)
        monkeypatch.setattr(warming, "_compile_all", gate)
        monkeypatch.setattr(warming, "_state", warming.IDLE)
        return gate

    yield make
    for gate in gates:
        gate.release.set()
    assert warming.wait(timeout=30)
    warming._state = saved


def _tiny() -> tuple[Any, ...]:
    return warmup._tiny_index()


def _calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the calls of every twin (the entry points look them up in their module)."""
    seen = {"best_sets": 0, "score_sets": 0, "partition_terms": 0, "first_fit": 0}
    for module, name in (
        (search, "best_sets"),
        (score, "score_sets"),
        (partition, "partition_terms"),
        (counters, "first_fit"),
    ):
        twin = getattr(module, f"{name}_reference")

        def counting(*args: Any, _twin: Any = twin, _name: str = name, **kwargs: Any) -> Any:
            seen[_name] += 1
            return _twin(*args, **kwargs)

        monkeypatch.setattr(module, f"{name}_reference", counting)
    return seen


def _call_every_entry_point() -> None:
    top, requests = _tiny()
    nodes = np.array([0, 1], np.int64)
    topology.best_sets(top, requests, nodes=nodes, max_work=100)
    topology.score_sets(
        top, nodes=nodes, sets=np.array([[0, 2], [-1, -1]], np.int64), set_claim=np.zeros(2, np.int64)
    )
    partitions = topology.partition_inputs(
        node_start=top.node_start,
        row_group=np.array([0, 0, -1, -1, 1, 1, 1, -1], np.int64),
        row_cost=np.array([[0.5, 0.5]] * 4 + [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0]]),
        group_counters=np.array([2, 0], np.int64),
        group_free=np.ones((2, 2)),
        group_used=np.array([1, 0], np.int64),
        free=top.free,
    )
    topology.partition_terms(partitions, nodes=nodes, sets=np.array([[0, 1], [4, -1]], np.int64))
    inputs = counters.tiny_inputs()
    counters.first_fit(inputs, nodes=np.array([0, 1], np.int64), max_work=100)


def test_idle_runs_the_kernels(switch: Callable[..., _Gate], monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a warm-up the entry points call the kernels (numba compiles on demand), as before."""
    switch()
    seen = _calls(monkeypatch)
    assert warming.state() == warming.IDLE and warming.use_kernels() and not warming.compiled()
    _call_every_entry_point()
    assert seen == {"best_sets": 0, "score_sets": 0, "partition_terms": 0, "first_fit": 0}


def test_twins_answer_while_warming_then_kernels(
    switch: Callable[..., _Gate], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """start(): every entry point answers with its twin until the warm-up returns, then the kernel."""
    gate = switch()
    seen = _calls(monkeypatch)
    caplog.set_level(logging.INFO, logger=warming.__name__)
    assert warming.start(threads=3)
    assert gate.entered.wait(30)
    assert warming.state() == warming.WARMING and not warming.use_kernels() and not warming.compiled()
    assert not warming.start(threads=3), "a second start while warming starts nothing"
    _call_every_entry_point()
    assert seen == {"best_sets": 1, "score_sets": 1, "partition_terms": 1, "first_fit": 1}
    assert not warming.wait(timeout=0)
    gate.release.set()
    assert warming.wait(timeout=30)
    assert warming.state() == warming.COMPILED and warming.use_kernels() and warming.compiled()
    _call_every_entry_point()
    assert seen == {"best_sets": 1, "score_sets": 1, "partition_terms": 1, "first_fit": 1}
    assert gate.threads == [3]
    assert not warming.start(), "compiled: nothing to start"
    assert any("kernels compiled in 0.50 s" in r.getMessage() for r in caplog.records)


def test_a_failed_warm_up_is_logged_and_the_twins_keep_answering(
    switch: Callable[..., _Gate], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    gate = switch(RuntimeError("no compiler"))
    seen = _calls(monkeypatch)
    assert warming.start()
    gate.release.set()
    assert warming.wait(timeout=30)
    assert warming.state() == warming.FAILED and not warming.use_kernels() and not warming.compiled()
    _call_every_entry_point()
    assert seen["best_sets"] == 1
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert errors and "twins keep answering" in errors[0].getMessage() and errors[0].exc_info


def test_warm_up_now_waits_for_a_running_warm_up(switch: Callable[..., _Gate]) -> None:
    """A blocking warm-up during a background one waits for it instead of compiling beside it."""
    gate = switch()
    assert warming.start()
    assert gate.entered.wait(30)
    done: list[float] = []
    waiter = threading.Thread(target=lambda: done.append(warming.warm_up_now()))
    waiter.start()
    assert not done
    gate.release.set()
    waiter.join(30)
    assert done and gate.threads == [0] and warming.compiled()


def test_warm_up_now_compiles_in_the_calling_thread(switch: Callable[..., _Gate]) -> None:
    gate = switch()
    gate.release.set()
    assert warming.warm_up_now(threads=2) == 0.5
    assert gate.threads == [2] and warming.state() == warming.COMPILED


def test_forced_wins_over_the_state(switch: Callable[..., _Gate]) -> None:
    switch()
    with warming.forced(use_kernels=False):
        assert not warming.use_kernels()
        with warming.forced(use_kernels=True):
            assert warming.use_kernels()
        assert not warming.use_kernels()
    assert warming.use_kernels()


def test_twin_and_kernel_entry_points_agree_on_the_tiny_index() -> None:
    """The dispatching entry point gives the same arrays either way (the property tests go further)."""
    top, requests = _tiny()
    nodes = np.array([0, 1], np.int64)
    with warming.forced(use_kernels=True):
        fast = topology.best_sets(top, requests, nodes=nodes, max_work=1000)
    with warming.forced(use_kernels=False):
        slow = topology.best_sets(top, requests, nodes=nodes, max_work=1000)
    for a, b in zip(fast, slow, strict=True):
        np.testing.assert_array_equal(a, b)


#: Warm up as the service does, then run the sample's pipeline pods through a Placement on the
#: kernels and print the dispatchers whose compiled signatures changed (each dispatcher starts
#: empty in a fresh process, so what the warm-up did not compile shows up here).
PROBE = """
import copy, json
from pathlib import Path
import importlib, pkgutil
import numba
import kernels
from kernels import warming
from extender.cluster.sample import sample_objects
from extender.cluster.state import ClusterState
from extender.explaining import load_pods
from extender.pods import parse_pod
from extender.settings import Settings
from extender.wiring import build_services

def signatures():
    return {
        f"{m.__name__}.{name}": sorted(map(str, d.signatures))
        for m in modules for name, d in vars(m).items()
        if isinstance(d, numba.core.dispatcher.Dispatcher)
    }

modules = [importlib.import_module(m.name) for m in pkgutil.walk_packages(kernels.__path__, "kernels.")]
warming.warm_up_now()
before = signatures()
placement, binder = build_services(Settings(), ClusterState.from_objects(copy.deepcopy(sample_objects())))
names = list(placement.index().node_names)
for pod in map(parse_pod, load_pods(Path("tests/data/pipeline_pods.yaml"))):
    verdict = placement.filter(pod, names)
    if verdict.passed:
        placement.prioritize(pod, verdict.passed)
after = signatures()
print(json.dumps({
    "state": warming.state(),
    "new": {k: v for k, v in after.items() if v != before[k]},
    "compiled": sum(len(v) for v in after.values()),
}))
"""


def test_the_warm_up_compiles_what_the_service_calls() -> None:
    """After the warm-up, filter and prioritize on the sample compile nothing in the worker."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["state"] == warming.COMPILED
    assert result["compiled"] >= 4  # the four parallel drivers at least
    assert result["new"] == {}


_EXIT_DURING_WARM_UP = """
import sys, time
from pathlib import Path
from kernels import warming

def slow_compile(threads):
    time.sleep(1.5)  # a compile still running when the program returns
    Path(sys.argv[1]).write_text("finished")
    return 1.5

warming._compile_all = slow_compile
assert warming.start()
sys.exit(3)
"""


def test_exit_waits_for_a_running_warm_up(tmp_path: Path) -> None:
    """A process that exits while the warm-up thread compiles lets it finish first (LLVM aborts the
    process when the interpreter finalizes under a running compile) and keeps its own exit code."""
    marker = tmp_path / "finished"
    script = tmp_path / "exit_during_warm_up.py"
    script.write_text(_EXIT_DURING_WARM_UP)
    done = subprocess.run(
        [sys.executable, str(script), str(marker)],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3, done.stderr
    assert marker.read_text() == "finished"
    assert "waiting for the numba kernel warm-up to finish before exiting" in done.stderr
