"""`dra-extender explain` on pod files it must refuse: exit 2 with a message, never a traceback.

Scope (issue 22, item 9): deeply nested YAML or JSON, which made PyYAML raise RecursionError
(a traceback and exit 1) or spend seconds in its scanner, is refused by its nesting depth.
"""

from __future__ import annotations

import time

import pytest

from extender.__main__ import main
from extender.explaining import MAX_NESTING, parse_pod_documents

DEEP = {
    "flow-lists": "[" * 50_000 + "]" * 50_000,
    "json-objects": '{"a": ' * 50_000 + "1" + "}" * 50_000,
    "block-sequences": "- " * 50_000 + "x",
    "brackets-in-strings": "".join('["' + "]" * 5 + '", ' for _ in range(5_000)) + "1" + "]" * 5_000,
    "deep-field-in-a-pod": (
        "kind: Pod\nmetadata: {name: p, namespace: default}\nspec:\n"
        + "".join("  " * (i + 1) + "x:\n" for i in range(120))
        + "  " * 121
        + "y: 1\n"
    ),
}


@pytest.mark.parametrize("text", list(DEEP.values()), ids=list(DEEP))
def test_a_deeply_nested_pod_file_exits_2_with_a_message(tmp_path, capsys, text: str) -> None:
    pod_file = tmp_path / "pod.yaml"
    pod_file.write_text(text)
    assert main(["explain", "--pod", str(pod_file)]) == 2
    err = capsys.readouterr().err
    assert f"{pod_file}: nested deeper than {MAX_NESTING} levels" in err
    assert "Traceback" not in err and "RecursionError" not in err


@pytest.mark.parametrize("text", list(DEEP.values()), ids=list(DEEP))
def test_nesting_is_refused_while_scanning_not_after(text: str) -> None:
    """PyYAML alone spends 2.5 s on 2,000 levels of `[` before RecursionError; the scanner's own
    depth check stops at the limit (brackets inside strings do not count)."""
    started = time.perf_counter()
    with pytest.raises(ValueError, match=f"^pod.yaml: nested deeper than {MAX_NESTING} levels"):
        parse_pod_documents(text, "pod.yaml")
    assert time.perf_counter() - started < 0.5


def test_a_pod_nested_within_the_limit_is_explained(tmp_path, capsys) -> None:
    """The limit leaves real pods alone: a 40-deep field is read (and passed over)."""
    pod = (
        "kind: Pod\nmetadata: {name: p, namespace: default, uid: u}\nspec:\n  containers: [{name: c}]\n"
        + "  extra: "
        + "[" * 40
        + "]" * 40
        + "\n"
    )
    pod_file = tmp_path / "pod.yaml"
    pod_file.write_text(pod)
    assert main(["explain", "--pod", str(pod_file), "--node", "cpu-node-01"]) == 0
    out = capsys.readouterr().out
    assert "pod default/p" in out and "cpu-node-01: PASSED" in out
