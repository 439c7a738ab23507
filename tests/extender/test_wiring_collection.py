"""`wiring.collection_paused`: the cyclic GC is off while the start-up builds, and back after."""

from __future__ import annotations

import gc

import pytest

from extender import wiring


def test_collection_is_paused_inside_and_restored_after_even_on_error() -> None:
    assert gc.isenabled()
    with wiring.collection_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), wiring.collection_paused():
        raise RuntimeError("start-up failed")
    assert gc.isenabled()


def test_a_collector_already_off_stays_off() -> None:
    gc.disable()
    try:
        with wiring.collection_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
