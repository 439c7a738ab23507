"""The selector compile cache: one compiled object per distinct text, LRU eviction at the
configured size, failures cached too, and one winner when threads race on a new text."""

from __future__ import annotations

import threading

import pytest

from extender.cel import compile_selector, selectors
from extender.errors import CelCompileError


def test_same_text_returns_the_same_object() -> None:
    first = compile_selector("device.driver == 'a'")
    assert compile_selector("device.driver == 'a'") is first
    assert compile_selector("device.driver == 'b'") is not first


def test_least_recently_used_entry_is_evicted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(selectors, "COMPILE_CACHE_SIZE", 2)
    a = compile_selector("true")
    b = compile_selector("false")
    assert compile_selector("true") is a  # now "false" is the least recently used
    compile_selector("1 == 1")
    assert compile_selector("true") is a
    assert compile_selector("false") is not b
    assert len(selectors._CACHE) == 2


def test_compile_errors_are_cached_and_raised_each_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    original = selectors.parse
    monkeypatch.setattr(selectors, "parse", lambda text: calls.append(text) or original(text))
    for _ in range(3):
        with pytest.raises(CelCompileError, match="undeclared reference to 'nope'"):
            compile_selector("nope")
    assert calls == ["nope"]


def test_racing_threads_get_one_object() -> None:
    barrier = threading.Barrier(8)
    results: list[object] = []

    def worker() -> None:
        barrier.wait()
        results.append(compile_selector("device.driver == 'raced'"))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(r) for r in results}) == 1
