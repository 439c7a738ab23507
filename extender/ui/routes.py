"""The dashboard's routes (see the package docstring for the list and the read-only rule).

Explain runs against the live placement on its worker thread, in steps of about
`EXPLAIN_STEP_SECONDS`, each taken when no verb call is in flight (`VerbsInFlight`, at least one
per `EXPLAIN_YIELD_SECONDS`), and one at a time: a second explain while one runs is answered 429
at once (with `Retry-After`), rather than queued, so no number of open dashboards can pile
explains onto the worker the scheduler's calls need.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.resources
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
from aiohttp import web

from extender import explaining
from extender.core import extended
from extender.core.placement import Placement
from extender.objects import Obj
from extender.pods import parse_pod
from extender.server import WORKER_KEY
from extender.ui import fleet
from extender.ui.decisions import DecisionLog, VerbsInFlight, recording_middleware
from extender.validation import pod_problem
from extender.worker import WorkTimeout

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(slots=True)
class _ExplainGate:
    """Whether an explain is running, and the verb calls its steps make way for (event loop only)."""

    in_flight: VerbsInFlight
    busy: bool = False


DECISIONS_KEY = web.AppKey("ui_decisions", DecisionLog)
UI_PLACEMENT_KEY = web.AppKey("ui_placement", Placement)
_EXPLAIN_GATE_KEY = web.AppKey("ui_explain_gate", _ExplainGate)
#: Worker time one explain step takes before it lets queued verb work run (a step finishes the
#: group of nodes it is on, so it can run a little longer).
EXPLAIN_STEP_SECONDS = 0.001
#: How long an explain step waits for a moment with no verb call in flight before it runs anyway
#: (under a steady stream of verbs an explain still advances, one step per this interval).
EXPLAIN_YIELD_SECONDS = 0.02
#: How long a dashboard read waits for the placement's worker thread (busy with verb work).
_READ_TIMEOUT = 30.0
#: Largest pod text the explain form accepts.
MAX_EXPLAIN_BYTES = 1024 * 1024
STATIC_FILES: dict[str, str] = {
    "dashboard.js": "text/javascript",
    "dashboard.css": "text/css",
}
#: What the page may load and talk to: this server only (no CDN, no inline script).
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def add_dashboard(app: web.Application, placement: Placement, *, decisions: int = 50) -> DecisionLog:
    """Serve the dashboard from `app` and record verb decisions; call before the app starts."""
    log_ = DecisionLog(decisions)
    app[DECISIONS_KEY] = log_
    app[UI_PLACEMENT_KEY] = placement
    in_flight = VerbsInFlight()
    app[_EXPLAIN_GATE_KEY] = _ExplainGate(in_flight)
    app.middlewares.append(recording_middleware(log_, in_flight))
    app.router.add_get("/ui", _page, name="ui")
    app.router.add_get("/ui/", _page)
    app.router.add_get("/ui/static/{file}", _static, name="ui-static")
    app.router.add_get("/ui/api/status", _status)
    app.router.add_get("/ui/api/fleet", _fleet)
    app.router.add_get("/ui/api/nodes/{name}", _node)
    app.router.add_get("/ui/api/decisions", _decisions)
    app.router.add_get("/ui/api/decisions/{seq}", _decision)
    app.router.add_get("/ui/api/pending", _pending)
    app.router.add_post("/ui/api/explain", _explain)
    return log_


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


def _asset(name: str) -> bytes:
    return importlib.resources.files("extender.ui").joinpath("static", name).read_bytes()


async def _page(request: web.Request) -> web.Response:
    response = web.Response(body=_asset("index.html"), content_type="text/html", charset="utf-8")
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    return response


async def _static(request: web.Request) -> web.Response:
    name = request.match_info["file"]
    content_type = STATIC_FILES.get(name)
    if content_type is None:
        return _json({"error": f"no dashboard file {name!r}"}, 404)
    return web.Response(body=_asset(name), content_type=content_type, charset="utf-8")


async def _status(request: web.Request) -> web.Response:
    placement = request.app[UI_PLACEMENT_KEY]
    return _json(
        {
            "ready": placement.ready(),
            "generation": list(placement.generation()),
            "last_decision": request.app[DECISIONS_KEY].last_seq,
        }
    )


def _not_ready() -> web.Response:
    return _json({"error": "cluster state not ready"}, 503)


async def _on_worker(request: web.Request, fn: Callable[..., T], *args: Any) -> T:
    """Run a read of the placement on its worker thread, the only thread that may touch it."""
    return await request.app[WORKER_KEY].run(fn, *args, timeout=_READ_TIMEOUT)


def _fleet_view(placement: Placement) -> Obj | None:
    if not placement.ready():
        return None
    index = placement.index()
    _, free = placement.allocated_state()
    body = fleet.summary(index, free)
    body["generation"] = list(placement.generation())
    return body


def _node_view(placement: Placement, name: str) -> Obj | None:
    index = placement.index()
    _, free = placement.allocated_state()
    held_by = fleet.holders(placement.state.list("ResourceClaim"), placement.assumed.active())
    return fleet.node_detail(index, free, name, held_by=held_by, topology=placement.topology)


async def _fleet(request: web.Request) -> web.Response:
    body = await _on_worker(request, _fleet_view, request.app[UI_PLACEMENT_KEY])
    return _not_ready() if body is None else _json(body)


async def _node(request: web.Request) -> web.Response:
    placement = request.app[UI_PLACEMENT_KEY]
    if not placement.ready():
        return _not_ready()
    name = request.match_info["name"]
    detail = await _on_worker(request, _node_view, placement, name)
    if detail is None:
        return _json({"error": f"no node {name!r} in the device index"}, 404)
    return _json(detail)


async def _decisions(request: web.Request) -> web.Response:
    recent = request.app[DECISIONS_KEY].recent()
    return _json({"decisions": [d.as_dict(detail=False) for d in recent]})


async def _decision(request: web.Request) -> web.Response:
    try:
        seq = int(request.match_info["seq"])
    except ValueError:
        return _json({"error": "a decision number is an integer"}, 400)
    decision = request.app[DECISIONS_KEY].get(seq)
    if decision is None:
        return _json({"error": f"decision {seq} is not among the last ones kept"}, 404)
    return _json(decision.as_dict(detail=True))


def _pending_pods(placement: Placement) -> list[Obj]:
    """Unbound pods of the state the extender places: with ResourceClaims, or (with the
    DRAExtendedResource gate on) asking for extended resources a DeviceClass maps."""
    classes = extended.class_map(placement.state) if placement.features.extended_resource else None
    pods = []
    for pod in placement.state.list("Pod"):
        spec = found if isinstance(found := pod.get("spec"), dict) else {}
        if spec.get("nodeName"):
            continue
        if spec.get("resourceClaims") or (
            classes is not None and extended.needs_of(parse_pod(pod), classes) is not None
        ):
            pods.append(pod)
    return pods


async def _pending(request: web.Request) -> web.Response:
    pods = await _on_worker(request, _pending_pods, request.app[UI_PLACEMENT_KEY])
    return _json({"pods": sorted(pod_ref(p) for p in pods)})


async def _explain(request: web.Request) -> web.Response:
    placement = request.app[UI_PLACEMENT_KEY]
    if request.content_length is not None and request.content_length > MAX_EXPLAIN_BYTES:
        return _json({"error": f"a pod to explain is at most {MAX_EXPLAIN_BYTES} bytes"}, 413)
    text = (await request.content.read(MAX_EXPLAIN_BYTES + 1)).decode("utf-8", errors="replace")
    if len(text) > MAX_EXPLAIN_BYTES:
        return _json({"error": f"a pod to explain is at most {MAX_EXPLAIN_BYTES} bytes"}, 413)
    if not placement.ready():
        return _json({"error": "cluster state not ready"}, 503)
    gate = request.app[_EXPLAIN_GATE_KEY]
    if gate.busy:
        response = _json(
            {"error": "another explain is running (one at a time); try again when it is done"}, 429
        )
        response.headers["Retry-After"] = "1"
        return response
    gate.busy = True
    try:
        return await _explained(request, placement, gate, text)
    finally:
        gate.busy = False


async def _explained(
    request: web.Request, placement: Placement, gate: _ExplainGate, text: str
) -> web.Response:
    try:
        # Parsing needs no placement: off the event loop and off the worker.
        document = await asyncio.to_thread(_pod_document, text)
        pod = await _on_worker(request, _resolve_pending, placement, document)
        start = functools.partial(explaining.Explanation, time_limit=placement.filter_timeout_seconds)
        explanation = await _on_worker(request, start, placement, pod)
        done = False
        while not done:
            await gate.in_flight.quiet(at_most=EXPLAIN_YIELD_SECONDS)
            done = await _on_worker(request, explanation.step, EXPLAIN_STEP_SECONDS)
    except ValueError as exc:
        return _json({"error": str(exc)}, 400)
    except WorkTimeout as exc:
        return _json({"error": f"explain: the worker {exc} (busy with the scheduler's calls)"}, 503)
    except explaining.StateChanging as exc:
        return _json({"error": str(exc)}, 503)
    except Exception as exc:  # a pod the core cannot read: say so, never 500 a read-only form
        log.info("dashboard explain failed: %s", exc, exc_info=True)
        return _json({"error": f"cannot explain this pod: {type(exc).__name__}: {exc}"}, 400)
    return _json({"pod": pod_ref(pod), "report": explanation.report})


@dataclass(frozen=True, slots=True)
class _Pending:
    """`{"pending": "namespace/name"}`: explain that pending pod of the state."""

    ref: str


def _pod_document(text: str) -> Obj | _Pending:
    """The pod pasted (checked as /filter checks one) or the pending pod asked for.

    Raises:
        ValueError: what is wrong, for the form (not YAML, nested too deeply, not one Pod, ...).
    """
    documents = explaining.parse_pod_documents(text, "pod")
    document = documents[0] if len(documents) == 1 else None
    if isinstance(document, dict) and set(document) == {"pending"}:
        return _Pending(str(document["pending"]))
    if not isinstance(document, dict) or document.get("kind", "Pod") != "Pod":
        raise ValueError("paste one Pod object (YAML or JSON)")
    if not isinstance(document.get("metadata"), dict) or not isinstance(document.get("spec"), dict):
        raise ValueError("a Pod needs metadata and spec objects")
    problem = pod_problem(document)
    if problem:
        raise ValueError(problem)
    return document


def _resolve_pending(placement: Placement, document: Obj | _Pending) -> Obj:
    if not isinstance(document, _Pending):
        return document
    for pod in _pending_pods(placement):
        if pod_ref(pod) == document.ref:
            return pod
    raise ValueError(f"no pending pod {document.ref} in the cluster state")


def pod_ref(pod: Obj) -> str:
    """namespace/name of a pod object (the dashboard lists and echoes them)."""
    return parse_pod(pod).ref
