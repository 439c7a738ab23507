"""Every YAML input refuses alias bombs and recursive aliases at once (issue 30 item 4).

A body of nested anchors (`a: &a [x, ...]`, `b: &b [*a, ...]`, eight levels of nine) parses in a
millisecond into a graph whose expansion has 43 million nodes; `POST /ui/api/explain` then walked
it for minutes. `extender.yamlsafe` counts a document's expansion without expanding it and
refuses one whose aliases add more than `max(MAX_ALIAS_NODES, nodes written)`. Checked here for
each entry point: state files, settings files, pods to explain (CLI and dashboard parser); the
real server is in tests/server/test_shutdown_and_yaml.py.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pytest
import yaml

from extender import explaining, yamlsafe
from extender.cluster.loading import load_state_paths
from extender.errors import StateLoadError
from extender.settings import load_settings


def alias_bomb(levels: int = 8, width: int = 9) -> str:
    """`levels` anchors, each a list of `width` aliases of the previous one: width**levels leaves."""
    lines = ["a0: &a0 [" + ", ".join(["x"] * width) + "]"]
    for level in range(1, levels):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def pod_bomb() -> str:
    """A Pod whose spec holds `alias_bomb()`: without the bound the dashboard's checks of the
    pasted pod walked its expansion (34 s before any explaining, in-process)."""
    nested = "".join(f"    {line}\n" for line in alias_bomb().splitlines())
    return (
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: default\n"
        + "spec:\n  containers: []\n  x:\n"
        + nested
    )


def _refused_quickly(call: object, match: str) -> None:
    started = time.perf_counter()
    with pytest.raises(Exception, match=match):
        call()  # type: ignore[operator]
    assert time.perf_counter() - started < 1.0


def test_the_loader_refuses_a_bomb_in_a_millisecond_whatever_its_size() -> None:
    for levels in (8, 30):  # 43 million leaves; 9**30
        _refused_quickly(lambda levels=levels: list(yamlsafe.load_all(alias_bomb(levels))), "alias bomb")
        _refused_quickly(
            lambda levels=levels: list(yamlsafe.load_all(alias_bomb(levels), max_nesting=100)), "alias bomb"
        )


def test_the_bound_is_the_larger_of_the_constant_and_what_the_document_writes() -> None:
    # An anchor of 101 nodes (a list of 100) aliased 99 times adds 9,999 nodes: accepted.
    base = "base: &b [" + ", ".join(str(i) for i in range(100)) + "]\n"
    fits = base + "uses: [" + ", ".join(["*b"] * 99) + "]\n"
    assert len(yamlsafe.load(fits)["uses"]) == 99
    # One more alias adds 101 more: refused, with the numbers in the message.
    over = base + "uses: [" + ", ".join(["*b"] * 100) + "]\n"
    with pytest.raises(yamlsafe.AliasExpansionError, match=r"at most 10,000 nodes may come from aliases"):
        yamlsafe.load(over)
    # A document that writes more than the constant may alias as much as it writes.
    big = "items: [" + ", ".join(str(i) for i in range(20_000)) + "]\n"
    doubled = "base: &b " + big.split(": ", 1)[1] + "copy: *b\n"
    assert len(yamlsafe.load(doubled)["copy"]) == 20_000


def test_recursive_aliases_are_refused() -> None:
    for text in ("a: &a [1, *a]\n", "a: &a {b: {c: *a}}\n", "- &a [*a]\n"):
        with pytest.raises(yamlsafe.AliasExpansionError, match="recursive YAML"):
            list(yamlsafe.load_all(text))


def test_ordinary_anchors_merge_keys_and_timestamps_read_as_before() -> None:
    text = (
        "base: &b {x: 1, y: [1, 2]}\n"
        "merged: {<<: *b, z: 3}\n"
        "same: *b\n"
        "created: 2025-11-20T09:14:03Z\n"
        "---\n"
        "second: true\n"
    )
    first, second = yamlsafe.load_all(text)
    assert first["merged"] == {"x": 1, "y": [1, 2], "z": 3} and first["same"] == first["base"]
    assert first["created"] == "2025-11-20T09:14:03Z"  # text, as in the API's JSON
    assert second == {"second": True}
    assert yamlsafe.load("") is None
    with pytest.raises(yaml.YAMLError):
        yamlsafe.load("a: 1\n---\nb: 2\n")


def test_a_state_file_with_a_bomb_is_refused_naming_file_and_document(tmp_path: Path) -> None:
    state = tmp_path / "state.yaml"
    state.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n" + alias_bomb())
    _refused_quickly(lambda: load_state_paths([state]), "alias bomb")
    with pytest.raises(StateLoadError, match=rf"{state}: document 1: aliases expand this document"):
        load_state_paths([state])


def test_a_settings_file_with_a_bomb_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "settings.yaml"
    config.write_text(alias_bomb())
    namespace = argparse.Namespace(config=str(config))
    _refused_quickly(lambda: load_settings(namespace, {}), "alias bomb")
    with pytest.raises(ValueError, match=rf"^settings file {config}: aliases expand"):
        load_settings(namespace, {})


def test_a_pod_to_explain_with_a_bomb_is_refused(tmp_path: Path) -> None:
    _refused_quickly(lambda: explaining.parse_pod_documents(alias_bomb(), "pod"), "^pod: aliases expand")
    _refused_quickly(lambda: explaining.parse_pod_documents(pod_bomb(), "pod"), "^pod: aliases expand")
    pod_file = tmp_path / "pod.yaml"
    pod_file.write_text(alias_bomb())
    _refused_quickly(lambda: explaining.load_pods(pod_file), "alias bomb")


def test_the_embedded_sample_reads_timestamps_as_text() -> None:
    from extender.cluster import sample

    stamps = [
        o["metadata"]["creationTimestamp"]
        for o in sample.sample_objects()
        if "creationTimestamp" in o["metadata"]
    ]
    assert stamps and all(isinstance(stamp, str) for stamp in stamps)
