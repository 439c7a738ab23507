"""POST /filter through HTTP: request decoding, the call into placement, and the response shape."""

from __future__ import annotations

import orjson

from extender.errors import AllocationError, IndexNotReady
from extender.verdicts import FilterVerdict

POD = {
    "metadata": {"name": "trainer-0", "namespace": "ml", "uid": "5f0c1c2e"},
    "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "trainer-0-gpu"}]},
}
NODE_NAMES = ["gpu-node-01", "gpu-node-02", "gpu-node-03"]
NODE_LIST = {
    "metadata": {},
    "items": [
        {"metadata": {"name": "gpu-node-01", "uid": "n1"}, "status": {"allocatable": {"cpu": "64"}}},
        {"metadata": {"name": "gpu-node-02", "uid": "n2"}, "spec": {}},
        {"metadata": {"name": "gpu-node-03", "uid": "n3"}},
    ],
}
VERDICT = FilterVerdict(
    passed=["gpu-node-03", "gpu-node-01"],
    failed={"gpu-node-02": "no free device"},
    unresolvable={},
)


def _args(*, nodes=None, node_names=None, pod=POD) -> bytes:
    return orjson.dumps({"Pod": pod, "Nodes": nodes, "NodeNames": node_names})


async def test_node_names_are_passed_to_placement(app_client, placement):
    """The pod and NodeNames reach placement.filter unchanged."""
    client = await app_client()
    await client.post("/filter", data=_args(node_names=NODE_NAMES))
    assert placement.calls == [("filter", POD, NODE_NAMES)]


async def test_node_cache_capable_response_lists_passed_names(app_client, placement):
    """With NodeNames in, the response carries NodeNames = passed and Nodes = null."""
    placement.verdict = VERDICT
    client = await app_client()
    resp = await client.post("/filter", data=_args(node_names=NODE_NAMES))
    assert resp.status == 200
    body = await resp.json()
    assert body == {
        "Nodes": None,
        "NodeNames": ["gpu-node-03", "gpu-node-01"],
        "FailedNodes": {"gpu-node-02": "no free device"},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }


async def test_node_list_request_echoes_passed_nodes_in_input_order(app_client, placement):
    """With a NodeList in, the passed Node objects come back as received, in input order."""
    placement.verdict = VERDICT
    client = await app_client()
    body = await (await client.post("/filter", data=_args(nodes=NODE_LIST))).json()
    assert body["NodeNames"] is None
    assert body["Nodes"] == {"metadata": {}, "items": [NODE_LIST["items"][0], NODE_LIST["items"][2]]}
    assert placement.calls[0][2] == NODE_NAMES


async def test_unresolvable_nodes_are_reported(app_client, placement):
    """Nodes placement marks unresolvable land in FailedAndUnresolvableNodes."""
    placement.verdict = FilterVerdict(unresolvable={"gpu-node-01": "no matching device"})
    client = await app_client()
    body = await (await client.post("/filter", data=_args(node_names=["gpu-node-01"]))).json()
    assert body["FailedAndUnresolvableNodes"] == {"gpu-node-01": "no matching device"}
    assert body["NodeNames"] == []


async def test_unknown_node_names_are_forwarded_not_rejected(app_client, placement):
    """A node name the state does not know is placement's business, not a request error."""
    client = await app_client()
    resp = await client.post("/filter", data=_args(node_names=["no-such-node"]))
    assert resp.status == 200
    assert placement.calls[0][2] == ["no-such-node"]


async def test_null_nodes_and_node_names_mean_no_nodes(app_client, placement):
    """Nodes and NodeNames both null call placement with an empty node list."""
    client = await app_client()
    resp = await client.post("/filter", data=_args())
    assert resp.status == 200
    assert placement.calls == [("filter", POD, [])]


async def test_filter_is_served_under_a_path_prefix(app_client, placement):
    """A urlPrefix with a path (/scheduler/filter) reaches the same handler."""
    placement.verdict = FilterVerdict(passed=["gpu-node-01"])
    client = await app_client()
    resp = await client.post("/scheduler/v1/filter", data=_args(node_names=["gpu-node-01"]))
    assert resp.status == 200
    assert (await resp.json())["NodeNames"] == ["gpu-node-01"]


async def test_response_is_json_with_content_length(app_client):
    """Responses are application/json with a Content-Length (no chunked encoding)."""
    client = await app_client()
    resp = await client.post("/filter", data=_args(node_names=NODE_NAMES))
    assert resp.content_type == "application/json"
    assert int(resp.headers["Content-Length"]) == len(await resp.read())


async def test_not_ready_answers_200_with_error(app_client, placement):
    """Before the state is ready, filter answers 200 with Error so the scheduler retries."""
    placement.is_ready = False
    client = await app_client()
    resp = await client.post("/filter", data=_args(node_names=NODE_NAMES))
    assert resp.status == 200
    body = await resp.json()
    assert body["Error"].startswith("cluster state not ready: ")
    assert placement.calls == []


async def test_index_not_ready_from_placement_becomes_not_ready_error(app_client, placement):
    """IndexNotReady raised inside placement is reported like not-ready."""
    placement.raises = IndexNotReady("watch resynchronising")
    client = await app_client()
    body = await (await client.post("/filter", data=_args(node_names=NODE_NAMES))).json()
    assert body["Error"] == "cluster state not ready: watch resynchronising"


async def test_pod_level_allocation_error_is_reported_in_error(app_client, placement):
    """An AllocationError (invalid claim for every node) becomes the Error string."""
    placement.raises = AllocationError("claim ml/trainer-0-gpu: device class gpu.example.com not found")
    client = await app_client()
    body = await (await client.post("/filter", data=_args(node_names=NODE_NAMES))).json()
    assert body["Error"] == "claim ml/trainer-0-gpu: device class gpu.example.com not found"
    assert body["NodeNames"] is None


async def test_verdict_error_is_passed_through(app_client, placement):
    """A verdict with error set is answered with that Error and no surviving nodes."""
    placement.verdict = FilterVerdict(error="pod has invalid claims")
    client = await app_client()
    body = await (await client.post("/filter", data=_args(node_names=NODE_NAMES))).json()
    assert body == {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {},
        "Error": "pod has invalid claims",
    }


async def test_unexpected_exception_answers_200_with_error_and_keeps_serving(app_client, placement, caplog):
    """A bug in placement becomes Error (logged with traceback); the next request is served."""
    placement.raises = ZeroDivisionError("boom")
    client = await app_client()
    resp = await client.post("/filter", data=_args(node_names=NODE_NAMES))
    assert resp.status == 200
    assert "ZeroDivisionError: boom" in (await resp.json())["Error"]
    assert any(r.exc_info for r in caplog.records)
    placement.raises = None
    resp = await client.post("/filter", data=_args(node_names=NODE_NAMES))
    assert (await resp.json())["Error"] == ""


async def test_each_request_logs_one_debug_summary(app_client, placement, caplog):
    """A filter call logs one debug line with verb, pod, node counts and duration."""
    placement.verdict = FilterVerdict(passed=["gpu-node-01"])
    client = await app_client()
    with caplog.at_level("DEBUG", logger="extender.server"):
        await client.post("/filter", data=_args(node_names=NODE_NAMES))
    lines = [r.getMessage() for r in caplog.records if r.name == "extender.server"]
    assert len(lines) == 1
    assert lines[0].startswith("filter pod=ml/trainer-0 nodes_in=3 nodes_out=1 duration_ms=")
