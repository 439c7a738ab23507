"""The last N scheduling decisions (filter, prioritize, bind), as the dashboard lists them.

Scope: a bounded, in-memory record, filled by an aiohttp middleware that looks at what a verb
was asked and what it answered. It is read-only with respect to scheduling and never holds a
verb back:
- the answer goes out first: the middleware only queues the recording (`loop.call_soon`) and
  returns the response untouched; any failure to record is logged at debug level and dropped;
- nothing runs on the placement's worker: the score terms of a prioritize come from the
  evaluations that produced the answer (one, or one per kind of node for a pod asking for
  extended resources), and the claims a bind wrote (a created claim under the name it got) from
  the binder, both handed over by `extender.core.observed` (asking the worker afterwards queued
  a second job behind unrelated work and delayed the answer);
- the middleware is only installed when the dashboard is on.

The same middleware counts the verb calls in flight (`VerbsInFlight`), so the dashboard's explain
can take its steps on the worker in the gaps between them.

Bounded by size, not only by count: a decision keeps at most `MAX_ROWS` nodes (prioritize: the
best-scored ones, with their terms; filter: some that passed and some that did not, with
reasons) plus the counts of everything, and every text it keeps is cut to a fixed length, so
one call naming 200,000 nodes (or nodes with 1 MB names) leaves a few tens of KB behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import operator
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web
from aiohttp.typedefs import Middleware

from extender.core import observed
from extender.core.evaluation import PodEvaluation
from extender.objects import Obj

log = logging.getLogger(__name__)

#: Decisions kept (newest first in `recent`).
DEFAULT_SIZE = 50
#: Nodes kept per decision (prioritize: the best-scored; filter: half for passed, the rest failed).
MAX_ROWS = 100
#: Longest node name, pod reference or uid kept (a node name is a DNS subdomain: 253).
MAX_NAME = 253
#: Longest reason or error kept.
MAX_TEXT = 512
VERBS: tuple[str, ...] = ("filter", "prioritize", "bind")
#: Answers recorded: the verb read its whole body and answered (4xx: nothing was decided).
RECORDED_STATUSES = frozenset({200, 500, 503})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(slots=True)
class NodeRow:
    """One node of a decision: how it came out and why."""

    name: str
    outcome: str  # "passed", "failed", "unresolvable" (filter), "scored" (prioritize), "bound"
    score: int | None = None  # prioritize: 0..10
    terms: Obj | None = None  # prioritize: the score terms of the node's best device set
    reason: str = ""  # filter: why it failed

    def as_dict(self) -> Obj:
        return {
            "name": self.name,
            "outcome": self.outcome,
            "score": self.score,
            "terms": self.terms,
            "reason": self.reason,
        }


@dataclass(slots=True)
class Decision:
    """One verb call: what was asked, what was answered (at most MAX_ROWS nodes of it)."""

    seq: int
    verb: str
    at: float  # wall-clock seconds, for display only
    pod: str  # namespace/name
    uid: str
    nodes_in: int
    passed: int = 0  # filter: nodes that passed; prioritize: nodes scored above 0
    failed: int = 0
    unresolvable: int = 0
    node: str = ""  # prioritize: the best-scored node; bind: the node bound to
    error: str = ""
    rows: list[NodeRow] = field(default_factory=list)
    left_out: int = 0  # nodes of the call not in `rows`
    #: bind: the claims it wrote, {"claim", "created", "devices"} (at most MAX_ROWS, cut)
    claims: list[Obj] = field(default_factory=list)

    def as_dict(self, *, detail: bool) -> Obj:
        out: Obj = {
            "seq": self.seq,
            "verb": self.verb,
            "at": self.at,
            "pod": self.pod,
            "uid": self.uid,
            "nodes_in": self.nodes_in,
            "passed": self.passed,
            "failed": self.failed,
            "unresolvable": self.unresolvable,
            "node": self.node,
            "error": self.error,
        }
        if detail:
            out["nodes"] = [row.as_dict() for row in self.rows]
            out["left_out"] = self.left_out
            out["claims"] = self.claims
        return out


class DecisionLog:
    """A ring of the last `size` decisions (event loop only: no lock)."""

    def __init__(self, size: int = DEFAULT_SIZE, *, clock: Callable[[], float] = time.time) -> None:
        if size < 1:
            raise ValueError("the decision log keeps at least one decision")
        self._entries: deque[Decision] = deque(maxlen=size)
        self._seq = itertools.count(1)
        self._clock = clock

    def add(self, verb: str, *, pod: str, uid: str, nodes_in: int) -> Decision:
        decision = Decision(
            next(self._seq), verb, self._clock(), _cut(pod, MAX_NAME), _cut(uid, MAX_NAME), nodes_in
        )
        self._entries.append(decision)
        return decision

    def recent(self) -> list[Decision]:
        return list(reversed(self._entries))

    def get(self, seq: int) -> Decision | None:
        return next((d for d in self._entries if d.seq == seq), None)

    @property
    def last_seq(self) -> int:
        return self._entries[-1].seq if self._entries else 0


class VerbsInFlight:
    """How many verb calls are being answered now, so the dashboard's own work on the worker
    (explain) can wait for a moment without them (event loop only: no lock).

    Why: the worker and the event loop are two threads under one GIL. While an explain step runs
    on the worker, a verb's request decoding and answer encoding on the event loop wait for the
    GIL up to the switch interval (5 ms) at every hand-over, on top of waiting for the step.
    """

    def __init__(self) -> None:
        self._running = 0
        self._started = 0  # verb calls ever started: tells a quiet moment from a short call
        self._quiet = asyncio.Event()
        self._quiet.set()

    def __enter__(self) -> None:
        self._running += 1
        self._started += 1
        self._quiet.clear()

    def __exit__(self, *exc: object) -> None:
        self._running -= 1
        if not self._running:
            self._quiet.set()

    async def quiet(self, *, at_most: float, settle: float = 0.001) -> None:
        """Return once no verb call has been in flight for `settle` seconds (kube-scheduler sends
        filter, prioritize and bind of a pod back to back: wait for the gap after them), or after
        `at_most` seconds whatever the verbs do."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + at_most
        while (remaining := deadline - loop.time()) > 0:
            if not self._quiet.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._quiet.wait(), remaining)
                continue
            started = self._started
            await asyncio.sleep(min(settle, remaining))
            if self._quiet.is_set() and self._started == started:
                return


def recording_middleware(decisions: DecisionLog, in_flight: VerbsInFlight) -> Middleware:
    """An aiohttp middleware that records each verb call into `decisions` after it answered, and
    counts the verb calls `in_flight`."""

    @web.middleware
    async def record(request: web.Request, handler: Handler) -> web.StreamResponse:
        verb = request.path.rsplit("/", 1)[-1]
        if request.method != "POST" or verb not in VERBS:
            return await handler(request)
        with in_flight, observed.collecting() as evaluations, observed.collecting_binds() as bound:
            response = await handler(request)
        if (
            isinstance(response, web.Response)
            and response.status in RECORDED_STATUSES
            and request.content.is_eof()  # the handler read the whole body: read() costs no I/O
        ):
            asked = await request.read()
            asyncio.get_running_loop().call_soon(
                _record_quietly, decisions, verb, asked, response.body, list(evaluations), list(bound)
            )
        return response

    return record


def _record_quietly(
    decisions: DecisionLog,
    verb: str,
    asked: bytes,
    answered: Any,
    evaluations: list[PodEvaluation],
    bound: list[observed.Bound],
) -> None:
    try:
        record_call(decisions, verb, asked, bytes(answered) if answered else b"", evaluations, bound)
    except Exception as exc:  # the dashboard never fails a verb
        log.debug("dashboard: not recording a %s call: %s", verb, exc)


def record_call(
    decisions: DecisionLog,
    verb: str,
    asked: bytes,
    answered: bytes,
    evaluations: Sequence[PodEvaluation] = (),
    bound: Sequence[observed.Bound] = (),
) -> Decision | None:
    """Record one verb call from its request and answer bodies (None: not a call to record).

    `evaluations` are the ones behind a prioritize answer (its score terms are read, nothing is
    computed): one, or one per kind of node for an extended-resource pod; `bound` what a bind
    wrote (`observed.report_bound`).
    """
    args = orjson.loads(asked)
    answer = orjson.loads(answered) if answered else {}
    if not isinstance(args, dict) or not isinstance(answer, dict | list):
        return None
    if verb == "bind":
        pod = f"{args.get('PodNamespace') or 'default'}/{args.get('PodName', '')}"
        decision = decisions.add(verb, pod=pod, uid=str(args.get("PodUID", "")), nodes_in=1)
        decision.node = _cut(str(args.get("Node", "")), MAX_NAME)
        decision.error = _cut(str(answer.get("Error") or "") if isinstance(answer, dict) else "", MAX_TEXT)
        decision.claims = [
            {
                "claim": _cut(b.claim, MAX_NAME),
                "created": b.created,
                "devices": [_cut(d, MAX_NAME) for d in b.devices[:MAX_ROWS]],
            }
            for b in bound[:MAX_ROWS]
        ]
        return decision
    pod_obj = given if isinstance(given := args.get("Pod"), dict) else {}
    meta = found if isinstance(found := pod_obj.get("metadata"), dict) else {}
    names = args.get("NodeNames")
    if not isinstance(names, list):
        nodes = args.get("Nodes")
        names = (nodes.get("items") or []) if isinstance(nodes, dict) else []
    decision = decisions.add(
        verb,
        pod=f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}",
        uid=str(meta.get("uid", "")),
        nodes_in=len(names),
    )
    if verb == "filter" and isinstance(answer, dict):
        _filtered(decision, answer)
    elif verb == "prioritize" and isinstance(answer, list):
        _prioritized(decision, answer, evaluations)
    elif isinstance(answer, dict):
        decision.error = _cut(str(answer.get("error") or ""), MAX_TEXT)
    return decision


def _filtered(decision: Decision, answer: Obj) -> None:
    failed = answer.get("FailedNodes") or {}
    unresolvable = answer.get("FailedAndUnresolvableNodes") or {}
    passed = answer.get("NodeNames")
    if passed is None:
        passed = ((answer.get("Nodes") or {}).get("items") or []) if answer.get("Nodes") else []
    decision.passed, decision.failed, decision.unresolvable = len(passed), len(failed), len(unresolvable)
    decision.error = _cut(str(answer.get("Error") or ""), MAX_TEXT)
    rows = [NodeRow(_cut(_node_name(n), MAX_NAME), "passed") for n in passed[: MAX_ROWS // 2]]
    refused = itertools.chain(
        (("unresolvable", item) for item in unresolvable.items()),
        (("failed", item) for item in failed.items()),
    )
    for outcome, (node, reason) in itertools.islice(refused, MAX_ROWS - len(rows)):
        rows.append(NodeRow(_cut(str(node), MAX_NAME), outcome, reason=_cut(str(reason), MAX_TEXT)))
    decision.rows = rows
    decision.left_out = len(passed) + len(failed) + len(unresolvable) - len(rows)


def _prioritized(decision: Decision, answer: list[Any], evaluations: Sequence[PodEvaluation]) -> None:
    """The best MAX_ROWS scores (ties in answer order), with the terms the evaluations hold (an
    extended-resource pod has one per kind of node, each scoring its own nodes)."""
    # Our own answer: a list of {"Host", "Score"}; C-level passes over it (200,000 nodes: ms).
    score = operator.itemgetter("Score")
    best = heapq.nlargest(MAX_ROWS, answer, key=score)  # stable: the first of equal scores wins
    decision.passed = sum(map(bool, map(score, answer)))
    decision.rows = [NodeRow(_cut(str(s["Host"]), MAX_NAME), "scored", score=int(s["Score"])) for s in best]
    decision.left_out = len(answer) - len(best)
    if best:
        decision.node = decision.rows[0].name
    for row, host in zip(decision.rows, best, strict=True):
        name = str(host["Host"])
        found = next(filter(None, (e.scores.get(name) for e in evaluations)), None)  # None: not scored
        if found is not None:
            row.terms = {
                "score": round(found.score, 4),
                "locality": round(found.locality, 4),
                "fragmentation": round(found.fragmentation, 4),
                "packing": round(found.packing, 4),
            }


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _node_name(entry: Any) -> str:
    """A node of a filter answer: a name (NodeNames) or a Node object (Nodes.items)."""
    if isinstance(entry, dict):
        return str((entry.get("metadata") or {}).get("name", ""))
    return str(entry)
