"""The extender wire codec (extender.wire) without HTTP: decoding ExtenderArgs and binding args,
encoding filter results in both nodeCacheCapable modes, priorities and binding results."""

from __future__ import annotations

import orjson
import pytest

from extender import wire
from extender.errors import InvalidRequest
from extender.verdicts import FilterVerdict, HostScore, HostScores

POD = {"metadata": {"name": "trainer-0", "namespace": "ml"}, "spec": {"schedulerName": "dra"}}
NODE_A = {"metadata": {"name": "node-a", "labels": {"zone": "a"}}, "status": {"allocatable": {"cpu": "8"}}}
NODE_B = {"metadata": {"name": "node-b"}, "spec": {}}
NODE_C = {"metadata": {"name": "node-c"}}
NODE_LIST = {"metadata": {}, "items": [NODE_A, NODE_B, NODE_C]}
VERDICT = FilterVerdict(passed=["node-c", "node-a"], failed={"node-b": "no free gpu"})


def _decode(**fields):
    return wire.decode_extender_args(orjson.dumps(fields))


def test_decode_node_names():
    """NodeNames mode returns the names and no node items."""
    assert _decode(Pod=POD, Nodes=None, NodeNames=["node-a", "node-b"]) == (POD, ["node-a", "node-b"], None)


def test_decode_node_list():
    """NodeList mode returns the item names in order and the items themselves."""
    _, names, items = _decode(Pod=POD, Nodes=NODE_LIST, NodeNames=None)
    assert names == ["node-a", "node-b", "node-c"]
    assert items == [NODE_A, NODE_B, NODE_C]


def test_decode_prefers_node_names_when_both_are_given():
    """With both NodeNames and Nodes, NodeNames wins and node items are None."""
    assert _decode(Pod=POD, Nodes=NODE_LIST, NodeNames=["node-b"]) == (POD, ["node-b"], None)


def test_decode_all_node_fields_null():
    """Nodes and NodeNames null mean no nodes."""
    assert _decode(Pod=POD, Nodes=None, NodeNames=None) == (POD, [], None)


def test_decode_node_fields_absent():
    """Missing Nodes and NodeNames are treated like null."""
    assert _decode(Pod=POD) == (POD, [], None)


def test_decode_node_list_with_null_items():
    """A NodeList whose items is null has no nodes."""
    assert _decode(Pod=POD, Nodes={"metadata": {}, "items": None}) == (POD, [], [])


def test_decode_ignores_unknown_top_level_keys():
    """Unknown keys are ignored, like Go's decoder does."""
    assert _decode(Pod=POD, NodeNames=["x"], Extra=1) == (POD, ["x"], None)


def test_decode_null_pod_is_invalid():
    """Pod null is an InvalidRequest naming Pod."""
    with pytest.raises(InvalidRequest, match=r"^Pod: required, got null"):
        _decode(Pod=None, NodeNames=[])


def test_decode_missing_pod_is_invalid():
    """A body without Pod is an InvalidRequest naming Pod."""
    with pytest.raises(InvalidRequest, match=r"^Pod: required"):
        _decode(NodeNames=[])


def test_decode_pod_must_be_an_object():
    """A Pod that is not an object is rejected."""
    with pytest.raises(InvalidRequest, match=r"^Pod: must be an object, got array"):
        _decode(Pod=[POD])


def test_decode_node_names_must_be_a_list():
    """NodeNames that is not an array is rejected."""
    with pytest.raises(InvalidRequest, match=r"^NodeNames: must be an array"):
        _decode(Pod=POD, NodeNames={"node-a": True})


def test_decode_node_names_must_be_strings():
    """A non-string NodeNames entry is rejected with its index."""
    with pytest.raises(InvalidRequest, match=r"^NodeNames\[1\]: must be a string, got null"):
        _decode(Pod=POD, NodeNames=["node-a", None])


def test_decode_node_items_must_be_objects():
    """A NodeList item that is not an object is rejected with its index."""
    with pytest.raises(InvalidRequest, match=r"^Nodes\.items\[0\]: must be a Node object"):
        _decode(Pod=POD, Nodes={"items": ["node-a"]})


def test_decode_node_items_need_a_name():
    """A NodeList item without metadata.name is rejected."""
    with pytest.raises(InvalidRequest, match=r"^Nodes\.items\[1\]\.metadata\.name: required"):
        _decode(Pod=POD, Nodes={"items": [NODE_A, {"metadata": {"uid": "x"}}]})


def test_decode_node_list_items_must_be_a_list():
    """Nodes.items that is not an array is rejected."""
    with pytest.raises(InvalidRequest, match=r"^Nodes\.items: must be an array"):
        _decode(Pod=POD, Nodes={"items": {"node-a": NODE_A}})


@pytest.mark.parametrize("body", [b"", b"{", b"nul", b"\xff"])
def test_decode_rejects_invalid_json(body):
    """Bytes that are not JSON raise InvalidRequest."""
    with pytest.raises(InvalidRequest, match="not valid JSON"):
        wire.decode_extender_args(body)


@pytest.mark.parametrize("body", [b"null", b"[]", b"1", b'"Pod"'])
def test_decode_rejects_non_object_bodies(body):
    """A JSON body that is not an object raises InvalidRequest."""
    with pytest.raises(InvalidRequest, match="must be a JSON object"):
        wire.decode_extender_args(body)


def test_encode_filter_node_cache_capable():
    """Without node items: NodeNames = passed, Nodes null, capitalised keys, all maps present."""
    result = orjson.loads(wire.encode_filter_result(VERDICT, None))
    assert result == {
        "Nodes": None,
        "NodeNames": ["node-c", "node-a"],
        "FailedNodes": {"node-b": "no free gpu"},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }


def test_encode_filter_node_list_echo_keeps_input_order():
    """With node items: Nodes echoes the passed Node objects in input order, NodeNames null."""
    result = orjson.loads(wire.encode_filter_result(VERDICT, [NODE_A, NODE_B, NODE_C]))
    assert result["NodeNames"] is None
    assert result["Nodes"] == {"metadata": {}, "items": [NODE_A, NODE_C]}


def test_encode_filter_node_list_echo_drops_unknown_names():
    """A passed name that was not in the input NodeList is never echoed."""
    verdict = FilterVerdict(passed=["node-a", "ghost"])
    result = orjson.loads(wire.encode_filter_result(verdict, [NODE_A]))
    assert result["Nodes"]["items"] == [NODE_A]


def test_encode_filter_empty_verdict_has_empty_maps_not_null():
    """An empty verdict encodes empty objects for both failure maps and an empty Error."""
    result = orjson.loads(wire.encode_filter_result(FilterVerdict(), None))
    assert result == {
        "Nodes": None,
        "NodeNames": [],
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }


def test_encode_filter_error_nulls_both_node_fields():
    """With Error set, Nodes and NodeNames are both null in either mode."""
    verdict = FilterVerdict(error="cluster state not ready: syncing")
    for items in (None, [NODE_A]):
        result = orjson.loads(wire.encode_filter_result(verdict, items))
        assert (result["Nodes"], result["NodeNames"], result["Error"]) == (None, None, verdict.error)


def test_encode_filter_uses_exact_go_keys():
    """The response has exactly the five ExtenderFilterResult keys."""
    result = orjson.loads(wire.encode_filter_result(VERDICT, None))
    assert set(result) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}


def test_encode_host_priorities():
    """Scores encode as a JSON array of {"Host", "Score"}."""
    data = wire.encode_host_priorities([HostScore("node-a", 10), HostScore("node-b", 0)])
    assert orjson.loads(data) == [{"Host": "node-a", "Score": 10}, {"Host": "node-b", "Score": 0}]


def test_encode_no_host_priorities_is_empty_array():
    """No scores encode as []."""
    assert wire.encode_host_priorities([]) == b"[]"


def test_decode_binding_args():
    """Binding args decode with capitalised keys."""
    body = orjson.dumps({"PodName": "p", "PodNamespace": "ns", "PodUID": "u-1", "Node": "node-a"})
    assert wire.decode_binding_args(body) == {
        "PodName": "p",
        "PodNamespace": "ns",
        "PodUID": "u-1",
        "Node": "node-a",
    }


def test_decode_binding_args_null_uid():
    """PodUID null decodes as ''."""
    body = orjson.dumps({"PodName": "p", "PodNamespace": "ns", "PodUID": None, "Node": "node-a"})
    assert wire.decode_binding_args(body)["PodUID"] == ""


@pytest.mark.parametrize("field", ["PodName", "PodNamespace", "Node"])
def test_decode_binding_args_requires_names(field):
    """PodName, PodNamespace and Node must be non-empty strings."""
    args = {"PodName": "p", "PodNamespace": "ns", "PodUID": "u", "Node": "n", field: None}
    with pytest.raises(InvalidRequest, match=f"^{field}: required"):
        wire.decode_binding_args(orjson.dumps(args))


def test_decode_binding_args_rejects_non_object():
    """A binding body that is not an object raises InvalidRequest."""
    with pytest.raises(InvalidRequest, match="must be a JSON object"):
        wire.decode_binding_args(b"[]")


def test_encode_binding_result():
    """Binding results encode as {"Error": ...}."""
    assert orjson.loads(wire.encode_binding_result("")) == {"Error": ""}
    assert orjson.loads(wire.encode_binding_result("conflict")) == {"Error": "conflict"}


def test_decode_node_names_names_the_first_non_string():
    """The fast check of thousands of names still names the first culprit and its type."""
    names = [f"node-{i}" for i in range(1000)]
    with pytest.raises(InvalidRequest, match=r"^NodeNames\[500\]: must be a string, got number"):
        _decode(Pod=POD, NodeNames=[*names[:500], 7, None, *names[500:]])
    with pytest.raises(InvalidRequest, match=r"^NodeNames\[0\]: must be a string, got array"):
        _decode(Pod=POD, NodeNames=[["node-a"]])


#: Names that JSON must escape (quotes, backslashes, control characters) or carries as UTF-8.
ODD_NAMES = ['say "hi"', "back\\slash", "tab\tnew\nline", "ünïcode-✓", "emoji-🚀", "", "node-a"]


@pytest.mark.parametrize("count", [0, 1, 2, 7])
def test_host_scores_encode_as_orjson_encodes_the_dicts(count):
    """`HostScores` (arrays) encode byte for byte as the list of dicts: the same names, order
    and clamped scores, repeats kept."""
    hosts = (ODD_NAMES * 2)[:count] + ODD_NAMES[:1] * (count > 1)
    raw = [(-5 + 4 * i) * (1 if i % 2 else -1) for i in range(len(hosts))]
    clamped = [min(10, max(0, s)) for s in raw]
    expected = orjson.dumps([{"Host": h, "Score": s} for h, s in zip(hosts, clamped, strict=True)])
    assert wire.encode_host_priorities(HostScores(hosts, raw)) == expected
    assert wire.encode_host_priorities([HostScore(h, s) for h, s in zip(hosts, raw, strict=True)]) == expected


def test_host_prefix_cache_is_bounded(monkeypatch):
    """Every call's names are encoded right however many names came before; the cache of name
    prefixes starts again when it would pass its bound."""
    monkeypatch.setattr(wire, "HOST_PREFIXES_MAX", 5)
    monkeypatch.setattr(wire, "_HOST_PREFIXES", {})
    for round_ in range(4):
        hosts = [f"n-{round_}-{i}" for i in range(3)] + ODD_NAMES[round_ : round_ + 1]
        scores = HostScores(hosts, list(range(len(hosts))))
        expected = orjson.dumps([{"Host": h, "Score": i} for i, h in enumerate(hosts)])
        assert wire.encode_host_priorities(scores) == expected
        assert len(wire._HOST_PREFIXES) <= 5
    big = HostScores([f"big-{i}" for i in range(9)], [3] * 9)  # more than the bound in one call
    expected = [{"Host": f"big-{i}", "Score": 3} for i in range(9)]
    assert orjson.loads(wire.encode_host_priorities(big)) == expected


def test_host_scores_read_as_a_sequence_of_host_scores():
    scores = HostScores(["a", "b", "c"], [3, 0, 10])
    assert scores == [HostScore("a", 3), HostScore("b", 0), HostScore("c", 10)]
    assert scores != [HostScore("a", 3)] and scores != "abc"
    assert scores[1] == HostScore("b", 0) and scores[-1].score == 10
    assert scores[1:] == [HostScore("b", 0), HostScore("c", 10)]
    assert len(scores) == 3 and scores.positive() == 2
    assert {s.host: s.score for s in scores} == {"a": 3, "b": 0, "c": 10}
    with pytest.raises(ValueError, match="3 hosts but scores of shape"):
        HostScores(["a", "b", "c"], [1, 2])
