"""POST /bind through HTTP: arguments handed to the binder and ExtenderBindingResult replies."""

from __future__ import annotations

import orjson

from extender.verdicts import ERROR, NOT_LEADER, BindOutcome

ARGS = {"PodName": "trainer-0", "PodNamespace": "ml", "PodUID": "5f0c1c2e", "Node": "gpu-node-02"}


async def test_binding_args_reach_the_binder(app_client, binder):
    """PodName, PodNamespace, PodUID and Node are passed as keyword arguments."""
    client = await app_client()
    await client.post("/bind", data=orjson.dumps(ARGS))
    assert binder.calls == [
        {"namespace": "ml", "name": "trainer-0", "uid": "5f0c1c2e", "node": "gpu-node-02"}
    ]


async def test_success_is_an_empty_error(app_client):
    """A successful bind answers 200 with {"Error": ""}."""
    client = await app_client()
    resp = await client.post("/bind", data=orjson.dumps(ARGS))
    assert resp.status == 200
    assert await resp.json() == {"Error": ""}


async def test_binder_error_is_returned_with_status_200(app_client, binder):
    """A failed bind answers 200 with the binder's error string."""
    binder.outcome = BindOutcome("claim ml/trainer-0-gpu: device gpu-3 was allocated concurrently", ERROR)
    client = await app_client()
    resp = await client.post("/bind", data=orjson.dumps(ARGS))
    assert resp.status == 200
    assert await resp.json() == {"Error": binder.outcome.error}


async def test_binder_exception_becomes_error_and_server_keeps_serving(app_client, binder):
    """An exception in the binder is answered as Error; the next bind succeeds."""
    binder.raises = ConnectionResetError("api server went away")
    client = await app_client()
    resp = await client.post("/bind", data=orjson.dumps(ARGS))
    assert resp.status == 200
    assert "api server went away" in (await resp.json())["Error"]
    binder.raises = None
    assert await (await client.post("/bind", data=orjson.dumps(ARGS))).json() == {"Error": ""}


async def test_null_pod_uid_is_passed_as_empty_string(app_client, binder):
    """PodUID null is tolerated and becomes ''."""
    client = await app_client()
    await client.post("/bind", data=orjson.dumps({**ARGS, "PodUID": None}))
    assert binder.calls[0]["uid"] == ""


async def test_missing_node_is_a_bad_request(app_client, binder):
    """A bind without Node is rejected with 400 naming the field, and the binder is not called."""
    client = await app_client()
    resp = await client.post("/bind", data=orjson.dumps({**ARGS, "Node": None}))
    assert resp.status == 400
    assert "Node" in (await resp.json())["error"]
    assert binder.calls == []


async def test_bind_is_served_under_a_path_prefix(app_client, binder):
    """/scheduler/bind reaches the same handler."""
    client = await app_client()
    resp = await client.post("/scheduler/bind", data=orjson.dumps(ARGS))
    assert resp.status == 200
    assert len(binder.calls) == 1


async def test_a_follower_closes_the_connection_with_its_refusal(app_client, binder):
    """A replica that does not hold the Lease answers bind with `Connection: close`: the Service
    chooses a replica per connection, and kube-scheduler keeps its connections, so a retry on
    the same connection would reach the same follower every time."""
    binder.outcome = BindOutcome("not the leader: this replica (b) does not bind", NOT_LEADER)
    client = await app_client()
    resp = await client.post("/bind", data=orjson.dumps(ARGS))
    assert resp.status == 200
    assert (await resp.json())["Error"].startswith("not the leader")
    assert resp.headers.get("Connection", "").lower() == "close"


async def test_other_bind_answers_keep_the_connection(app_client, binder):
    """Success and any other failure leave the connection open for the next call."""
    client = await app_client()
    resp = await client.post("/bind", data=orjson.dumps(ARGS))
    assert resp.headers.get("Connection", "").lower() != "close"
    binder.outcome = BindOutcome("claim ml/trainer-0-gpu: device gpu-3 was allocated concurrently", ERROR)
    resp = await client.post("/bind", data=orjson.dumps(ARGS))
    assert resp.headers.get("Connection", "").lower() != "close"
