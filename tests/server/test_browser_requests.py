"""What the server refuses from a browser: cross-origin writes (403), verb bodies that are not JSON (415).

Issue 22 item 7: a cross-site `text/plain` POST (no CORS preflight) from any page the operator
had open was served, so it could bind a pod or drive explain. The rules (`extender.origins`) are
tested alone, then through HTTP: the verbs with the service doubles (which must not be called),
and the dashboard's explain form, whose own same-origin `text/plain` POST must keep working.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from extender import origins, ui
from extender.cluster.sample import sample_objects
from extender.cluster.state import ClusterState
from extender.server import make_app
from extender.settings import Settings
from extender.wiring import build_services

HOST = "127.0.0.1:8888"
POD = {"metadata": {"name": "p", "namespace": "ml", "uid": "u"}, "spec": {}}
FILTER = orjson.dumps({"Pod": POD, "NodeNames": ["n1"]})
BIND = orjson.dumps({"PodName": "p", "PodNamespace": "ml", "PodUID": "u", "Node": "n1"})


@pytest.mark.parametrize(
    ("method", "headers", "refused"),
    [
        ("POST", {"Host": HOST}, False),  # kube-scheduler, curl: no browser headers
        ("POST", {"Host": HOST, "Sec-Fetch-Site": "same-origin"}, False),
        ("POST", {"Host": HOST, "Sec-Fetch-Site": "none"}, False),  # the user's own navigation
        ("POST", {"Host": HOST, "Sec-Fetch-Site": "cross-site"}, True),
        ("POST", {"Host": HOST, "Sec-Fetch-Site": "same-site"}, True),  # another port, same host
        ("POST", {"Host": HOST, "Sec-Fetch-Site": "Cross-Site", "Origin": f"http://{HOST}"}, True),
        ("POST", {"Host": HOST, "Origin": f"http://{HOST}"}, False),  # old browser, same origin
        ("POST", {"Host": HOST, "Origin": "http://127.0.0.1:9999"}, True),
        ("POST", {"Host": HOST, "Origin": "https://evil.example"}, True),
        ("POST", {"Host": HOST, "Origin": "null"}, True),  # sandboxed frame, file:// page
        ("POST", {"Origin": f"http://{HOST}"}, True),  # no Host to compare with
        ("PUT", {"Host": HOST, "Sec-Fetch-Site": "cross-site"}, True),
        ("DELETE", {"Host": HOST, "Origin": "http://evil.example"}, True),
        ("GET", {"Host": HOST, "Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"}, False),
        ("HEAD", {"Host": HOST, "Sec-Fetch-Site": "cross-site"}, False),
        ("OPTIONS", {"Host": HOST, "Origin": "http://evil.example"}, False),
    ],
)
def test_cross_origin_rule(method: str, headers: dict[str, str], refused: bool) -> None:
    """Go's CrossOriginProtection algorithm: Sec-Fetch-Site decides, else Origin against Host."""
    assert bool(origins.cross_origin_refusal(method, headers)) is refused


@pytest.mark.parametrize(
    ("content_type", "refused"),
    [
        ("application/json", False),
        ("application/json; charset=utf-8", False),
        ("Application/JSON", False),
        (None, True),
        ("", True),
        ("text/plain", True),
        ("text/plain;charset=UTF-8", True),
        ("application/x-www-form-urlencoded", True),
        ("multipart/form-data; boundary=x", True),
        ("application/octet-stream", True),
        ("application/jsonp", True),
    ],
)
def test_json_rule(content_type: str | None, refused: bool) -> None:
    """Only application/json (with any parameters) is a verb body."""
    assert bool(origins.json_refusal(content_type)) is refused


def test_refusals_name_what_was_sent_without_control_characters() -> None:
    """The message names the header value (repr'd, so a newline cannot forge a log line)."""
    message = origins.cross_origin_refusal("POST", {"Host": HOST, "Origin": "http://a\nb"})
    assert "Origin 'http://a\\nb'" in message and "\n" not in message
    assert "got 'text/plain'" in origins.json_refusal("text/plain")
    assert "got no Content-Type" in origins.json_refusal(None)


@pytest.mark.parametrize("path", ["/filter", "/prioritize", "/bind", "/scheduler/bind"])
async def test_cross_site_verb_is_a_403_and_never_reaches_the_services(app_client, placement, binder, path):
    """A cross-site text/plain POST, as a page on another site sends it, is refused before any work."""
    client = await app_client()
    body = BIND if path.endswith("bind") else FILTER
    headers = {"Content-Type": "text/plain", "Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}
    resp = await client.post(path, data=body, headers=headers)
    assert resp.status == 403
    assert "cross-origin request refused" in (await resp.json())["error"]
    assert placement.calls == [] and binder.calls == []


async def test_old_browser_cross_origin_post_is_a_403(app_client, binder):
    """Without Sec-Fetch-Site, an Origin that is not this server is refused, even with a JSON type."""
    client = await app_client()
    resp = await client.post("/bind", data=BIND, headers={"Origin": "http://localhost:3000"})
    assert resp.status == 403
    assert binder.calls == []


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
async def test_verb_body_that_is_not_json_is_a_415(aiohttp_client, placement, binder, content_type):
    """Same origin or not, a verb body must be application/json; no type at all is refused too."""
    app = make_app(Settings(), placement=placement, binder=binder, registry=CollectorRegistry())
    client = await aiohttp_client(app, headers={})  # not even the fixture's default type
    headers = {"Content-Type": content_type} if content_type else {}
    skip = () if content_type else ("Content-Type",)
    resp = await client.post(
        "/filter", data=FILTER, headers={**headers, "Sec-Fetch-Site": "same-origin"}, skip_auto_headers=skip
    )
    assert resp.status == 415
    assert "Content-Type: application/json" in (await resp.json())["error"]
    assert placement.calls == []


async def test_scheduler_request_is_served(app_client, placement, binder):
    """kube-scheduler's requests (JSON, no browser headers) are served as before."""
    client = await app_client()
    headers = {"Content-Type": "application/json; charset=utf-8"}
    assert (await client.post("/filter", data=FILTER, headers=headers)).status == 200
    assert (await client.post("/bind", data=BIND, headers=headers)).status == 200
    assert [verb for verb, _, _ in placement.calls] == ["filter"] and len(binder.calls) == 1


async def test_reads_stay_open_to_any_origin(app_client):
    """GETs change nothing and their answers cannot be read cross-origin: probes and links work."""
    client = await app_client()
    headers = {"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}
    for path in ("/healthz", "/readyz", "/metrics"):
        assert (await client.get(path, headers=headers)).status == 200


async def test_refused_verbs_are_counted_with_their_status(app_client, registry):
    """A refused verb call still shows in dra_extender_requests_total, under 403 or 415."""
    client = await app_client()
    await client.post("/bind", data=BIND, headers={"Sec-Fetch-Site": "cross-site"})
    await client.post("/filter", data=FILTER, headers={"Content-Type": "text/plain"})
    count = registry.get_sample_value
    assert count("dra_extender_requests_total", {"verb": "bind", "code": "403"}) == 1
    assert count("dra_extender_requests_total", {"verb": "filter", "code": "415"}) == 1


# ------------------------------------------------------------------ the dashboard's explain form
@pytest.fixture
async def dashboard(aiohttp_client: Any) -> Any:
    settings = Settings(ui=True)
    placement, binder = build_services(settings, ClusterState.from_objects(copy.deepcopy(sample_objects())))
    app = make_app(settings, placement=placement, binder=binder, registry=CollectorRegistry())
    ui.add_dashboard(app, placement)
    return await aiohttp_client(app)


POD_YAML = "metadata: {name: p, namespace: ml-training}\nspec: {}\n"


async def test_dashboard_explain_from_its_own_page_works(dashboard):
    """The page's fetch (same origin, text/plain, as dashboard.js sends it) is served."""
    own = str(dashboard.make_url("")).rstrip("/")
    headers = {"Content-Type": "text/plain", "Sec-Fetch-Site": "same-origin", "Origin": own}
    resp = await dashboard.post("/ui/api/explain", data=POD_YAML, headers=headers)
    assert resp.status == 200, await resp.text()


@pytest.mark.parametrize(
    "headers",
    [{"Sec-Fetch-Site": "cross-site"}, {"Origin": "https://evil.example"}],
)
async def test_dashboard_explain_from_another_site_is_a_403(dashboard, headers):
    """Another site's page cannot make the extender explain (work on the one worker thread)."""
    resp = await dashboard.post(
        "/ui/api/explain", data=POD_YAML, headers={"Content-Type": "text/plain", **headers}
    )
    assert resp.status == 403
