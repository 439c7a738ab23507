"""POST /prioritize through HTTP: scores as a HostPriorityList, and how failures are surfaced."""

from __future__ import annotations

import orjson

from extender.verdicts import HostScore

POD = {"metadata": {"name": "trainer-0", "namespace": "ml"}, "spec": {}}
NODE_NAMES = ["gpu-node-01", "gpu-node-02"]


def _args(**fields) -> bytes:
    return orjson.dumps({"Pod": POD, "Nodes": None, "NodeNames": None, **fields})


def _prioritize_errors(registry) -> float:
    return registry.get_sample_value("dra_extender_prioritize_errors_total") or 0.0


async def test_scores_are_returned_as_host_priority_array(app_client, placement):
    """The response is a JSON array of {"Host", "Score"} in placement's order."""
    placement.scores = [HostScore("gpu-node-02", 8), HostScore("gpu-node-01", 0)]
    client = await app_client()
    resp = await client.post("/prioritize", data=_args(NodeNames=NODE_NAMES))
    assert resp.status == 200
    assert await resp.json() == [{"Host": "gpu-node-02", "Score": 8}, {"Host": "gpu-node-01", "Score": 0}]


async def test_node_names_are_passed_to_placement(app_client, placement):
    """The pod and NodeNames reach placement.prioritize."""
    client = await app_client()
    await client.post("/prioritize", data=_args(NodeNames=NODE_NAMES))
    assert placement.calls == [("prioritize", POD, NODE_NAMES)]


async def test_node_list_names_are_passed_to_placement(app_client, placement):
    """With a NodeList, placement receives the item names in order."""
    nodes = {"metadata": {}, "items": [{"metadata": {"name": n}} for n in NODE_NAMES]}
    client = await app_client()
    await client.post("/prioritize", data=_args(Nodes=nodes))
    assert placement.calls[0][2] == NODE_NAMES


async def test_empty_score_list_is_an_empty_array(app_client):
    """No scores is `[]`, not null."""
    client = await app_client()
    resp = await client.post("/prioritize", data=_args(NodeNames=[]))
    assert await resp.read() == b"[]"


async def test_prioritize_is_served_under_a_path_prefix(app_client, placement):
    """/scheduler/prioritize reaches the same handler."""
    placement.scores = [HostScore("gpu-node-01", 3)]
    client = await app_client()
    resp = await client.post("/scheduler/prioritize", data=_args(NodeNames=["gpu-node-01"]))
    assert await resp.json() == [{"Host": "gpu-node-01", "Score": 3}]


async def test_exception_answers_500_and_is_counted(app_client, placement, registry):
    """A placement exception gives HTTP 500 with a JSON error and bumps the error counter."""
    placement.raises = RuntimeError("kernel crashed")
    client = await app_client()
    resp = await client.post("/prioritize", data=_args(NodeNames=NODE_NAMES))
    assert resp.status == 500
    assert "kernel crashed" in (await resp.json())["error"]
    assert _prioritize_errors(registry) == 1


async def test_not_ready_answers_503_and_is_counted(app_client, placement, registry):
    """Before the state is ready, prioritize answers 503 and counts an error."""
    placement.is_ready = False
    client = await app_client()
    resp = await client.post("/prioritize", data=_args(NodeNames=NODE_NAMES))
    assert resp.status == 503
    assert (await resp.json())["error"].startswith("cluster state not ready")
    assert _prioritize_errors(registry) == 1


async def test_bad_request_is_counted_as_prioritize_error(app_client, registry):
    """A malformed prioritize request is a 400 and also counts as a prioritize error."""
    client = await app_client()
    resp = await client.post("/prioritize", data=b"{")
    assert resp.status == 400
    assert _prioritize_errors(registry) == 1
