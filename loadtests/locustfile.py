"""Locust load test: plays kube-scheduler against a running `dra-extender serve`.

Each locust user runs scheduling cycles back to back: `/filter` with a pending pod and every
node of the cluster, `/prioritize` with the nodes that passed (when two or more did), and for
a share of the cycles (`--dra-bind-ratio`) `/bind` to the best-scored node. The model, the
fresh pod identities and how answers are judged are described in `loadtests/scenarios.py`.
Requests are named by verb, so the stats table has one row per verb; expected bind conflicts
(devices taken by an overlapping bind) are counted under their own name instead of as failures.

Scenario options (also as environment variables, e.g. LOCUST_DRA_DIR):
  --dra-dir DIR                 a `python -m loadtests.generate --out DIR` directory: the nodes
                                come from DIR/cluster.yaml, the pods from DIR/pods.jsonl
  --dra-state PATH              state file or directory (as for `serve --state`); default: the
                                one of --dra-dir, else the embedded sample cluster
  --dra-pods PATH               pending pods (.jsonl, or YAML/JSON); default: the one of
                                --dra-dir, else tests/data/pipeline_pods.yaml (the sample's)
  --dra-node-cache-capable on|off   on: NodeNames, Nodes null; off: full NodeList (default on)
  --dra-bind-ratio R            share of cycles that end in /bind (default 0.1)
  --dra-bind-limit N            bind at most N pods (default: half of them; see PodPool)
  --dra-shapes A,B              only pods of these claim shapes (`fast`, `exact` for groups)
  --dra-identity fresh|original send each cycle's pod with a new UID and name (default) or as is
  --dra-always-prioritize       also prioritize when only one node passed (kube-scheduler does
                                not: it takes a single feasible node without scoring)
  --dra-url-prefix /scheduler   path prefix of the verbs, as in the scheduler's urlPrefix
  --dra-http-timeout S          request timeout, the scheduler's httpTimeout (default 5)
  --dra-seed N                  seed the pod choices and bind decisions

Run headless (see the "Load tests" section of README.md):
  locust -f loadtests/locustfile.py --headless -u 50 -r 10 -t 60s --host http://127.0.0.1:8888 --only-summary
At the end it prints exact p50/p95/p99 per verb and the cycle outcomes; locust's own tables
(percentiles rounded to its buckets) follow. The exit code is 1 if any request failed.
"""

from __future__ import annotations

import logging
import random
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# locust imports this file by path with only loadtests/ on sys.path; the shared modules are
# imported as `loadtests.*`, so the repository root must be importable too.
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from locust import FastHttpUser, constant, events, task  # noqa: E402
from locust.env import Environment  # noqa: E402
from locust.exception import StopUser  # noqa: E402
from locust.runners import MasterRunner  # noqa: E402

from loadtests import scenarios  # noqa: E402
from loadtests.generate import Obj  # noqa: E402

log = logging.getLogger(__name__)

#: What kube-scheduler's Go client sends besides Content-Length (extender-protocol.md §1).
HEADERS = {"Content-Type": "application/json", "Accept-Encoding": "gzip"}
CONFLICT_NAME = "/bind (conflict: devices taken)"


@dataclass(slots=True)
class Run:
    """The scenario of this locust process, shared by its users."""

    bodies: scenarios.Bodies
    pool: scenarios.PodPool
    identity: str
    bind_ratio: float
    always_prioritize: bool
    prefix: str
    seed: int | None
    description: str
    tally: scenarios.Tally = field(default_factory=scenarios.Tally)
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    failures: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    users: int = 0


_run: Run | None = None


@events.init_command_line_parser.add_listener
def _add_options(parser: Any, **_: Any) -> None:
    group = parser.add_argument_group("dra-extender scenario", "what the simulated kube-scheduler sends")

    def option(name: str, **kwargs: Any) -> None:
        env = "LOCUST_" + name.lstrip("-").upper().replace("-", "_")
        group.add_argument(name, env_var=env, **kwargs)

    option("--dra-dir", default="", help="loadtests.generate output directory (cluster.yaml, pods.jsonl)")
    option("--dra-state", default="", help="state file or directory; default: --dra-dir's or the sample")
    option("--dra-pods", default="", help="pending pods file; default: --dra-dir's or the sample's")
    option("--dra-node-cache-capable", default="on", choices=["on", "off"], help="NodeNames (on) or Nodes")
    option("--dra-bind-ratio", type=float, default=0.1, help="share of cycles that bind (default 0.1)")
    option("--dra-bind-limit", type=int, default=-1, help="most pods to bind (default: half of them)")
    option("--dra-shapes", default="", help="comma-separated claim shapes to keep (fast, exact: groups)")
    option("--dra-identity", default="fresh", choices=list(scenarios.IDENTITIES), help="pod identity")
    option(
        "--dra-always-prioritize",
        action="store_true",
        default=False,
        help="prioritize even when one node passed (the scheduler skips that call)",
    )
    option("--dra-url-prefix", default="", help="path prefix of the verbs, e.g. /scheduler")
    option("--dra-http-timeout", type=float, default=5.0, help="request timeout in seconds (default 5)")
    option("--dra-seed", type=int, default=None, help="random seed")


def build_run(options: Any) -> Run:
    """Load the scenario named by the parsed `--dra-*` options.

    Raises:
        ValueError: an option is out of range or the files hold no usable nodes or pods.
    """
    base = Path(options.dra_dir) if options.dra_dir else None
    state = (
        Path(options.dra_state) if options.dra_state else (base / scenarios.CLUSTER_FILE if base else None)
    )
    pods_path = Path(options.dra_pods) if options.dra_pods else (base / scenarios.PODS_FILE if base else None)
    if not 0.0 <= options.dra_bind_ratio <= 1.0:
        raise ValueError(f"--dra-bind-ratio must be within [0, 1], got {options.dra_bind_ratio}")
    if options.dra_http_timeout <= 0:
        raise ValueError("--dra-http-timeout must be > 0")
    nodes = scenarios.load_nodes([state] if state else None)
    shapes = [s.strip() for s in options.dra_shapes.split(",") if s.strip()]
    pods = scenarios.select_shapes(scenarios.load_pods(pods_path), shapes)
    cache = options.dra_node_cache_capable == "on"
    limit = len(pods) // 2 if options.dra_bind_limit < 0 else options.dra_bind_limit
    rng = random.Random(options.dra_seed)
    mix: dict[str, int] = defaultdict(int)
    for pod in pods:
        mix[scenarios.pod_shape(pod)] += 1
    description = (
        f"{len(nodes)} nodes from {state or 'the embedded sample'}; {len(pods)} pending pods from "
        f"{pods_path or scenarios.SAMPLE_PODS} ({', '.join(f'{k}={n}' for k, n in sorted(mix.items()))}); "
        f"nodeCacheCapable {'on' if cache else 'off'}; bind ratio {options.dra_bind_ratio} "
        f"(at most {limit} pods); identity {options.dra_identity}"
        + ("; prioritize always" if options.dra_always_prioritize else "")
    )
    return Run(
        bodies=scenarios.Bodies(nodes, node_cache_capable=cache),
        pool=scenarios.PodPool(pods, bind_limit=limit, rng=rng),
        identity=options.dra_identity,
        bind_ratio=options.dra_bind_ratio,
        always_prioritize=bool(options.dra_always_prioritize),
        prefix="/" + options.dra_url_prefix.strip("/") if options.dra_url_prefix.strip("/") else "",
        seed=options.dra_seed,
        description=description,
    )


@events.init.add_listener
def _setup(environment: Environment, **_: Any) -> None:
    global _run
    if isinstance(environment.runner, MasterRunner) or environment.parsed_options is None:
        return  # the master of a distributed run sends no requests
    try:
        _run = build_run(environment.parsed_options)
    except (OSError, ValueError) as exc:
        sys.exit(f"locustfile: {exc}")  # SystemExit passes through locust's event handler
    SchedulerUser.network_timeout = SchedulerUser.connection_timeout = (
        environment.parsed_options.dra_http_timeout
    )
    if getattr(environment.parsed_options, "processes", None) not in (None, 1) and _run.bind_ratio > 0:
        log.warning("binds are tracked per process: with --processes, bind conflicts may count as failures")
    log.info("scenario: %s", _run.description)


@events.request.add_listener
def _record(name: str, response_time: float, exception: Any, **_: Any) -> None:
    # locust rounds response times into buckets for its own percentiles; keep the exact ones.
    if _run is not None:
        _run.latencies[name].append(response_time)
        if exception is not None:
            _run.failures[name] += 1


@events.test_stop.add_listener
def _summary(environment: Environment, **_: Any) -> None:
    if _run is None or not _run.latencies:
        return
    lines = [
        f"dra-extender load test: {_run.description}",
        f"machine: {scenarios.machine()}",
        f"{'request':<34} {'count':>8} {'fails':>6} {'p50 ms':>9} {'p95 ms':>9} {'p99 ms':>9} {'max ms':>9}",
    ]
    for name in sorted(_run.latencies):
        ms = sorted(_run.latencies[name])
        p50, p95, p99 = (scenarios.percentile(ms, q) for q in (0.5, 0.95, 0.99))
        fails = _run.failures[name]
        lines.append(f"{name:<34} {len(ms):>8} {fails:>6} {p50:>9.2f} {p95:>9.2f} {p99:>9.2f} {ms[-1]:>9.2f}")
    t = _run.tally
    lines.append(
        f"cycles {t.cycles}: unschedulable {t.unschedulable}, one node passed {t.one_node}; "
        f"binds {t.bind_attempts}: bound {t.bound}, conflicts {t.conflicts}, failed {t.bind_failures}, "
        f"skipped {t.bind_skipped} (no pod left to bind); pods still pending {_run.pool.pending}"
    )
    lines.append(f"failures: {sum(_run.failures.values())}")
    print("\n".join(lines), flush=True)


class SchedulerUser(FastHttpUser):
    """One scheduling loop of kube-scheduler: filter, prioritize, sometimes bind."""

    wait_time = constant(0)  # the scheduler starts the next pod as soon as the cycle ends
    network_timeout = 5.0
    connection_timeout = 5.0

    def on_start(self) -> None:
        if _run is None:
            raise StopUser()
        _run.users += 1
        seed = None if _run.seed is None else f"{_run.seed}-{_run.users}"
        self.rng = random.Random(seed)

    def _post(self, verb: str, body: bytes) -> Any:
        assert _run is not None
        return self.client.request(
            # locust's annotation says str or dict, but the client sends bytes as they are (what we
            # want: the exact JSON the scheduler would send); `unused-ignore` for runs without locust.
            "POST",
            f"{_run.prefix}/{verb}",
            data=body,  # type: ignore[arg-type, unused-ignore]
            headers=HEADERS,
            name=f"/{verb}",
            catch_response=True,
        )

    @staticmethod
    def _read(response: Any) -> tuple[int, bytes | None, str]:
        """(status, body, transport error); status 0 when the request never got an answer."""
        if not response.status_code:  # locust's ErrorResponse: refused, reset, timed out
            return 0, None, f"no answer: {response.error!r}"
        try:
            return response.status_code, response.content, ""
        except Exception as exc:  # the body could not be read (connection reset mid-answer)
            return response.status_code, None, f"reading the answer failed: {exc!r}"

    @task
    def schedule_one(self) -> None:
        """One scheduling cycle for one pending pod (see the module docstring)."""
        run = _run
        assert run is not None
        pool, tally = run.pool, run.tally
        want_bind = run.bind_ratio > 0 and self.rng.random() < run.bind_ratio
        key = pool.take(for_bind=want_bind)
        if key is None and want_bind:
            tally.bind_skipped += 1
            want_bind = False
            key = pool.take(for_bind=False)
        if key is None:
            log.warning("every pod is bound; lower --dra-bind-limit or generate more pods")
            raise StopUser()
        bound = False
        try:
            pod = pool.entries[key].instance(run.identity, self.rng, pool.next_seq())
            tally.cycles += 1
            mark = pool.mark()
            passed = self._filter(pod)
            if passed is None:  # failed: the scheduler would back the pod off
                return
            if not passed:  # unschedulable: the pod waits for a cluster event
                tally.unschedulable += 1
                return
            tally.one_node += len(passed) == 1
            scores: dict[str, int] = {}
            if len(passed) > 1 or run.always_prioritize:  # one feasible node: taken unscored (§3.2)
                scores = self._prioritize(pod, passed)
            if want_bind:
                bound = self._bind(pod, scenarios.best_node(passed, scores, self.rng), key, mark)
        finally:
            if want_bind and not bound:
                pool.release(key)

    def _filter(self, pod: Obj) -> list[str] | None:
        """Passed node names, or None if the call failed."""
        assert _run is not None
        with self._post("filter", _run.bodies.filter(pod)) as response:
            status, body, error = self._read(response)
            answer = scenarios.check_filter(status, body, _run.bodies) if not error else None
            problem = error or (answer.problem if answer else "")
            if problem:
                response.failure(problem)
                return None
            response.success()
            assert answer is not None
            return answer.passed

    def _prioritize(self, pod: Obj, passed: list[str]) -> dict[str, int]:
        assert _run is not None
        with self._post("prioritize", _run.bodies.prioritize(pod, passed)) as response:
            status, body, error = self._read(response)
            scores, problem = scenarios.check_prioritize(status, body, passed) if not error else ({}, error)
            if problem:
                response.failure(problem)
            else:
                response.success()
            # the scheduler ignores a failed prioritize and still picks a node: so do we
            return scores

    def _bind(self, pod: Obj, node: str, key: int, mark: scenarios.BindMark) -> bool:
        assert _run is not None
        pool, tally = _run.pool, _run.tally
        overlapped = pool.overlapped(mark)
        pool.binds_started += 1
        pool.binds_in_flight += 1
        tally.bind_attempts += 1
        try:
            with self._post("bind", scenarios.Bodies.bind(pod, node)) as response:
                status, body, error = self._read(response)
                outcome, message = (
                    (scenarios.FAILURE, error)
                    if error
                    else scenarios.check_bind(status, body, overlapped=overlapped)
                )
                if outcome == scenarios.BOUND:
                    response.success()
                    pool.mark_bound(key)
                    tally.bound += 1
                    return True
                if outcome == scenarios.CONFLICT:
                    # An expected outcome of concurrent scheduling, not an error: count it in its
                    # own stats row. request_meta is what the context manager reports on exit.
                    response.request_meta["name"] = CONFLICT_NAME
                    response.success()
                    tally.conflicts += 1
                    return False
                response.failure(message)
                tally.bind_failures += 1
                return False
        finally:
            pool.binds_in_flight -= 1
