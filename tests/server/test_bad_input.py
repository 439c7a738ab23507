"""Malformed requests through HTTP: 400/404/405/413 with JSON bodies, and the server keeps serving."""

from __future__ import annotations

import orjson
import pytest

from extender.settings import Settings

POD = {"metadata": {"name": "p", "namespace": "default"}, "spec": {}}

BAD_BODIES = {
    "malformed-json": (b'{"Pod": {', "not valid JSON"),
    "empty-body": (b"", "not valid JSON"),
    "body-is-array": (b"[]", "must be a JSON object"),
    "body-is-string": (b'"hello"', "must be a JSON object"),
    "pod-missing": (orjson.dumps({"NodeNames": ["a"]}), "Pod"),
    "pod-null": (orjson.dumps({"Pod": None, "NodeNames": ["a"]}), "Pod"),
    "pod-wrong-type": (orjson.dumps({"Pod": "trainer-0", "NodeNames": ["a"]}), "Pod"),
    "node-names-not-list": (orjson.dumps({"Pod": POD, "NodeNames": "a,b"}), "NodeNames"),
    "node-names-not-strings": (orjson.dumps({"Pod": POD, "NodeNames": ["a", 3]}), "NodeNames[1]"),
    "nodes-not-object": (orjson.dumps({"Pod": POD, "Nodes": ["a"]}), "Nodes"),
    "node-without-name": (
        orjson.dumps({"Pod": POD, "Nodes": {"items": [{"metadata": {}}]}}),
        "Nodes.items[0]",
    ),
    # issue 12 finding 5: wrong nested types in Pod were internal errors (filter Error, prioritize 500)
    "pod-spec-list": (orjson.dumps({"Pod": {**POD, "spec": []}, "NodeNames": ["a"]}), "Pod.spec"),
    "pod-metadata-list": (orjson.dumps({"Pod": {**POD, "metadata": []}, "NodeNames": ["a"]}), "Pod.metadata"),
    "pod-status-string": (orjson.dumps({"Pod": {**POD, "status": "x"}, "NodeNames": ["a"]}), "Pod.status"),
    "pod-uid-object": (
        orjson.dumps({"Pod": {**POD, "metadata": {"name": "p", "uid": {"a": 1}}}, "NodeNames": ["a"]}),
        "Pod.metadata.uid",
    ),
    "pod-name-number": (
        orjson.dumps({"Pod": {**POD, "metadata": {"name": 7}}, "NodeNames": ["a"]}),
        "Pod.metadata.name",
    ),
    "resource-claims-string": (
        orjson.dumps({"Pod": {**POD, "spec": {"resourceClaims": "gpu"}}, "NodeNames": ["a"]}),
        "Pod.spec.resourceClaims",
    ),
    "resource-claim-entry-string": (
        orjson.dumps({"Pod": {**POD, "spec": {"resourceClaims": ["gpu"]}}, "NodeNames": ["a"]}),
        "Pod.spec.resourceClaims[0]",
    ),
    "resource-claim-name-number": (
        orjson.dumps(
            {
                "Pod": {**POD, "spec": {"resourceClaims": [{"name": "g", "resourceClaimName": 3}]}},
                "NodeNames": [],
            }
        ),
        "Pod.spec.resourceClaims[0].resourceClaimName",
    ),
    "claim-statuses-object": (
        orjson.dumps({"Pod": {**POD, "status": {"resourceClaimStatuses": {}}}, "NodeNames": ["a"]}),
        "Pod.status.resourceClaimStatuses",
    ),
    "claim-status-name-list": (
        orjson.dumps({"Pod": {**POD, "status": {"resourceClaimStatuses": [{"name": []}]}}, "NodeNames": []}),
        "Pod.status.resourceClaimStatuses[0].name",
    ),
    "node-name-number": (
        orjson.dumps({"Pod": {**POD, "spec": {"nodeName": 1}}, "NodeNames": ["a"]}),
        "Pod.spec.nodeName",
    ),
}


async def _still_serving(client) -> None:
    resp = await client.get("/healthz")
    assert resp.status == 200


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
@pytest.mark.parametrize(("body", "needle"), list(BAD_BODIES.values()), ids=list(BAD_BODIES))
async def test_bad_extender_args_give_400_naming_the_problem(app_client, placement, verb, body, needle):
    """Each malformed ExtenderArgs gets 400 with a JSON error naming the problem."""
    client = await app_client()
    resp = await client.post(f"/{verb}", data=body)
    assert resp.status == 400
    assert resp.content_type == "application/json"
    assert needle in (await resp.json())["error"]
    assert placement.calls == []
    await _still_serving(client)


async def test_bad_binding_args_give_400(app_client):
    """A bind body that is not a JSON object gets 400."""
    client = await app_client()
    resp = await client.post("/bind", data=b"[1, 2]")
    assert resp.status == 400
    assert "JSON object" in (await resp.json())["error"]
    await _still_serving(client)


async def test_oversized_body_gives_413(app_client, placement):
    """A body above max_body_bytes is refused with 413 and a JSON error."""
    client = await app_client(Settings(max_body_bytes=1024))
    body = orjson.dumps({"Pod": POD, "NodeNames": [f"node-{i:05d}" for i in range(200)]})
    resp = await client.post("/filter", data=body)
    assert resp.status == 413
    assert "1024" in (await resp.json())["error"]
    assert placement.calls == []
    await _still_serving(client)


async def test_oversized_chunked_body_gives_413(app_client):
    """A body without Content-Length is cut off at max_body_bytes with 413 too."""
    client = await app_client(Settings(max_body_bytes=1024))

    async def chunks():
        for _ in range(8):
            yield b" " * 512

    resp = await client.post("/prioritize", data=chunks())
    assert resp.status == 413
    await _still_serving(client)


async def test_body_at_the_limit_is_accepted(app_client):
    """A body of exactly max_body_bytes is served."""
    body = orjson.dumps({"Pod": POD, "NodeNames": None})
    client = await app_client(Settings(max_body_bytes=len(body)))
    resp = await client.post("/filter", data=body)
    assert resp.status == 200


async def test_unknown_route_gives_404(app_client):
    """An unknown path is 404 with a JSON error."""
    client = await app_client()
    resp = await client.post("/preempt", data=b"{}")
    assert resp.status == 404
    assert "error" in await resp.json()
    await _still_serving(client)


async def test_wrong_method_gives_405(app_client):
    """GET on a verb is 405."""
    client = await app_client()
    resp = await client.get("/filter")
    assert resp.status == 405
    await _still_serving(client)


async def test_nested_null_fields_are_accepted(app_client, placement):
    """Null where the wire allows it (metadata, spec, status, their read fields) is not an error."""
    client = await app_client()
    pod = {
        "metadata": {"name": "p", "namespace": None, "uid": None},
        "spec": {"resourceClaims": None, "nodeName": None},
        "status": None,
    }
    resp = await client.post("/filter", data=orjson.dumps({"Pod": pod, "NodeNames": ["a"]}))
    assert resp.status == 200
    assert len(placement.calls) == 1
