"""The last N scheduling decisions (filter, prioritize, bind), as the dashboard lists them.

Scope: a bounded, in-memory record, filled by an aiohttp middleware that looks at what a verb
was asked and what it answered. It is read-only with respect to scheduling: the middleware
runs after the verb handler has produced its answer, never changes that answer, and any
failure to record is logged at debug level and dropped, so the dashboard can never fail or
slow a verb beyond one re-parse of the request and the answer (orjson). The middleware is only
installed when the dashboard is on.

Per-node reasons (and passed nodes) of a filter are kept for at most `MAX_REASONS` nodes each per
decision, so one
decision over 10,000 nodes stays a few hundred KB at most.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web
from aiohttp.typedefs import Middleware

from extender.objects import Obj

log = logging.getLogger(__name__)

#: Decisions kept (newest first in `recent`).
DEFAULT_SIZE = 50
#: Per-node filter reasons kept per decision.
MAX_REASONS = 500
VERBS: tuple[str, ...] = ("filter", "prioritize", "bind")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ScoreTerms = Callable[[Obj, list[str]], Awaitable[dict[str, Obj]]]


@dataclass(slots=True)
class Decision:
    """One verb call: what was asked, what was answered."""

    seq: int
    verb: str
    at: float  # wall-clock seconds, for display only
    pod: str  # namespace/name
    uid: str
    nodes_in: int
    passed: int = 0
    failed: int = 0
    unresolvable: int = 0
    node: str = ""  # prioritize: the best-scored node; bind: the node bound to
    error: str = ""
    reasons: dict[str, str] = field(default_factory=dict)  # filter: node -> why it failed
    passed_nodes: list[str] = field(default_factory=list)  # filter: the nodes that passed
    scores: dict[str, int] = field(default_factory=dict)  # prioritize: node -> 0..10
    terms: dict[str, Obj] = field(default_factory=dict)  # prioritize: node -> score terms

    def as_dict(self, *, detail: bool) -> Obj:
        out = {
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
            out["reasons"] = self.reasons
            out["passed_nodes"] = self.passed_nodes
            out["scores"] = self.scores
            out["terms"] = self.terms
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
        decision = Decision(next(self._seq), verb, self._clock(), pod, uid, nodes_in)
        self._entries.append(decision)
        return decision

    def recent(self) -> list[Decision]:
        return list(reversed(self._entries))

    def get(self, seq: int) -> Decision | None:
        return next((d for d in self._entries if d.seq == seq), None)

    @property
    def last_seq(self) -> int:
        return self._entries[-1].seq if self._entries else 0


def recording_middleware(decisions: DecisionLog, *, score_terms: ScoreTerms | None = None) -> Middleware:
    """An aiohttp middleware that records each verb call into `decisions` after it answered."""

    @web.middleware
    async def record(request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await handler(request)
        verb = request.path.rsplit("/", 1)[-1]
        if request.method == "POST" and verb in VERBS and isinstance(response, web.Response):
            try:
                await _record(decisions, verb, await request.read(), response.body, score_terms)
            except Exception as exc:  # the dashboard never fails a verb
                log.debug("dashboard: not recording a %s call: %s", verb, exc)
        return response

    return record


async def _record(
    decisions: DecisionLog, verb: str, asked: bytes, answered: Any, score_terms: ScoreTerms | None
) -> None:
    args = orjson.loads(asked)
    answer = orjson.loads(bytes(answered)) if answered else {}
    if not isinstance(args, dict) or not isinstance(answer, dict | list):
        return
    if verb == "bind":
        pod = f"{args.get('PodNamespace') or 'default'}/{args.get('PodName', '')}"
        decision = decisions.add(verb, pod=pod, uid=str(args.get("PodUID", "")), nodes_in=1)
        decision.node = str(args.get("Node", ""))
        decision.error = str(answer.get("Error") or "") if isinstance(answer, dict) else ""
        return
    pod_obj = given if isinstance(given := args.get("Pod"), dict) else {}
    meta = found if isinstance(found := pod_obj.get("metadata"), dict) else {}
    names = args.get("NodeNames")
    if not isinstance(names, list):
        items = ((args.get("Nodes") or {}).get("items") or []) if isinstance(args.get("Nodes"), dict) else []
        names = [((n.get("metadata") or {}).get("name", "")) for n in items if isinstance(n, dict)]
    decision = decisions.add(
        verb,
        pod=f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}",
        uid=str(meta.get("uid", "")),
        nodes_in=len(names),
    )
    if verb == "filter" and isinstance(answer, dict):
        failed = answer.get("FailedNodes") or {}
        unresolvable = answer.get("FailedAndUnresolvableNodes") or {}
        passed = answer.get("NodeNames")
        if passed is None:
            passed = ((answer.get("Nodes") or {}).get("items") or []) if answer.get("Nodes") else []
        decision.passed, decision.failed, decision.unresolvable = len(passed), len(failed), len(unresolvable)
        decision.error = str(answer.get("Error") or "")
        decision.passed_nodes = [_node_name(n) for n in passed[:MAX_REASONS]]
        for node, reason in itertools.islice(
            itertools.chain(unresolvable.items(), failed.items()), MAX_REASONS
        ):
            decision.reasons[str(node)] = str(reason)
    elif verb == "prioritize" and isinstance(answer, list):
        decision.scores = {
            str(s.get("Host", "")): int(s.get("Score", 0)) for s in answer if isinstance(s, dict)
        }
        decision.passed = sum(1 for score in decision.scores.values() if score > 0)
        if decision.scores:
            decision.node = max(decision.scores, key=lambda host: decision.scores[host])
        if score_terms is not None and pod_obj:
            decision.terms = await score_terms(pod_obj, [n for n, s in decision.scores.items() if s > 0])


def _node_name(entry: Any) -> str:
    """A node of a filter answer: a name (NodeNames) or a Node object (Nodes.items)."""
    if isinstance(entry, dict):
        return str((entry.get("metadata") or {}).get("name", ""))
    return str(entry)
