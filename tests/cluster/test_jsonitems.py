"""A JSON List's items found without parsing it (extender.cluster.jsonitems), `loads_list`
that parses them one at a time, and the loader that compacts them as they are parsed
(extender.cluster.loading._json_document)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from extender.cluster import jsonitems
from extender.cluster.jsonitems import loads_list, split_items
from extender.cluster.loading import load_state_paths
from extender.errors import StateLoadError
from tests.cluster.test_compact import _slice

TRICKY_ITEMS: list[Any] = [
    {"kind": "Node", "metadata": {"name": 'a"b,]}[{', "labels": {"x\\": "\\\\", "y": '\\"],'}}},
    [1, [2, [3, {}]], "]", "\\"],
    "plain , string ] }",
    12.5,
    None,
    {"items": [1, 2], "nested": {"items": []}},
]


def _documents() -> list[bytes]:
    doc = {"apiVersion": "v1", "kind": "List", "metadata": {"a": [1]}, "items": TRICKY_ITEMS, "z": ["items"]}
    return [
        orjson.dumps(doc),
        json.dumps(doc, indent=4).encode(),  # kubectl's pretty print
        json.dumps(doc, separators=(" , ", " : ")).encode() + b"\n\n",
        json.dumps(doc, ensure_ascii=True).encode(),
    ]


@pytest.mark.parametrize("block", [3, 7, 64, jsonitems.BLOCK])
def test_items_are_what_the_whole_parse_gives(monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    monkeypatch.setattr(jsonitems, "BLOCK", block)  # small blocks carry string and depth across
    for text in _documents():
        split = split_items(text)
        assert split is not None, text
        head, items = split
        whole = orjson.loads(text)
        assert [orjson.loads(item) for item in items] == whole["items"]
        rest = orjson.loads(head)
        assert rest.pop("items") == []
        whole.pop("items")
        assert rest == whole


@pytest.mark.parametrize(
    "text",
    [
        b"[1, 2]",
        b'{"kind": "List"}',  # no items
        b'{"a": {"items": [1]}}',  # not at the top level
        b'{"items": [1, 2]',  # unbalanced
        b'{"items": [1]} {"items": [2]}',  # two documents
        b'{"items": [1], "items": [2]}',  # two arrays: the whole parse decides
        b'{"\\u0069tems": [1]}',  # an escaped key
        b'{"items": ["open]}',  # a string that never ends
        b"",
    ],
)
def test_shapes_it_does_not_recognise_are_left_to_the_whole_parse(text: bytes) -> None:
    assert split_items(text) is None


def test_empty_items() -> None:
    split = split_items(b'{"kind": "List", "items": [ \n ]}')
    assert split is not None
    assert split[1] == []


@pytest.mark.parametrize("text", _documents())
def test_loads_list_answers_what_orjson_answers_and_shows_each_item(text: bytes) -> None:
    seen: list[tuple[Any, str | None]] = []
    assert loads_list(text, lambda item, kind: seen.append((item, kind))) == orjson.loads(text)
    assert seen == [(item, "") for item in TRICKY_ITEMS]  # kind "List": items of no kind


def test_loads_list_gives_each_item_the_kind_of_its_list() -> None:
    seen: list[tuple[Any, str | None]] = []
    loads_list(b'{"kind": "ResourceSliceList", "items": [{"a": 1}]}', lambda i, k: seen.append((i, k)))
    loads_list(b'{"kind": 7, "items": [2]}', lambda i, k: seen.append((i, k)))
    assert seen == [({"a": 1}, "ResourceSlice"), (2, None)]


@pytest.mark.parametrize("text", [b'{"items": [1], "items": [2]}', b"[1, 2]", b'"text"', b'{"items": []}'])
def test_loads_list_leaves_what_it_does_not_split_to_the_whole_parse(text: bytes) -> None:
    seen: list[Any] = []
    assert loads_list(text, lambda item, kind: seen.append(item)) == orjson.loads(text)
    assert seen == []


@pytest.mark.parametrize(
    "text", [b'{"items": [1, }', b'{"kind": "List", "items": [{"a": 1}, {"b": nope}]}', b""]
)
def test_loads_list_raises_orjsons_error_for_the_whole_document(text: bytes) -> None:
    with pytest.raises(orjson.JSONDecodeError) as caught:
        loads_list(text)
    with pytest.raises(orjson.JSONDecodeError) as whole:
        orjson.loads(text)
    assert str(caught.value) == str(whole.value)


def _product(slice_: dict[str, Any]) -> object:
    return slice_["spec"]["devices"][0]["attributes"]["productName"]


def test_loaded_slices_share_values_and_equal_the_file(tmp_path: Path) -> None:
    items = [_slice("n1", "GPU-1"), _slice("n2", "GPU-2")]
    path = tmp_path / "state.json"
    path.write_bytes(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=2).encode())
    a, b = load_state_paths([path])
    assert [a, b] == items
    assert (
        a["spec"]["devices"][0]["attributes"]["productName"]
        is b["spec"]["devices"][0]["attributes"]["productName"]
    )


def test_a_slice_list_without_kinds_is_compacted(tmp_path: Path) -> None:
    items = [_slice("n1", "GPU-1"), _slice("n2", "GPU-2")]
    for item in items:
        del item["kind"]
    path = tmp_path / "state.json"
    doc = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSliceList", "items": items}
    path.write_bytes(orjson.dumps(doc))
    a, b = load_state_paths([path])
    assert a["kind"] == b["kind"] == "ResourceSlice"
    assert (
        a["spec"]["devices"][0]["attributes"]["productName"]
        is b["spec"]["devices"][0]["attributes"]["productName"]
    )


def test_a_bad_item_gives_the_whole_documents_error(tmp_path: Path) -> None:
    good = orjson.dumps(_slice("n1", "GPU-1")).decode()
    text = '{"apiVersion": "v1", "kind": "List", "items": [' + good + ', {"kind": nope}]}'
    with pytest.raises(orjson.JSONDecodeError) as whole:
        orjson.loads(text)
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(StateLoadError) as loaded:
        load_state_paths([path])
    assert str(loaded.value) == f"{path}: document 0: not valid JSON: {whole.value}"
