"""`Quantity.parse` parses each distinct text once: the same text gives the same object (the
index finds counter shares by identity), errors are raised every time, and long texts are not kept."""

from __future__ import annotations

import pytest

from extender import quantity
from extender.quantity import Quantity, QuantityError


def test_the_same_text_is_one_object_with_the_same_value_and_string() -> None:
    first = Quantity.parse("80Gi")
    assert Quantity.parse("80Gi") is first
    assert str(first) == "80Gi" and first.value() == 80 * 2**30
    assert Quantity.parse(3) is Quantity.parse(3)  # numbers go through their JSON text
    assert Quantity.parse("1.5") == Quantity.parse("1500m") and str(Quantity.parse("1500m")) == "1500m"


def test_bad_texts_raise_every_time() -> None:
    for _ in range(2):
        with pytest.raises(QuantityError):
            Quantity.parse("12x")
    with pytest.raises(QuantityError):
        Quantity.parse(True)


def test_texts_longer_than_a_quantity_are_parsed_but_not_kept() -> None:
    long = "1" + "0" * quantity.CACHED_TEXT_LENGTH
    before = quantity._parse_once.cache_info().currsize
    assert Quantity.parse(long) == Quantity.parse(long)
    assert Quantity.parse(long) is not Quantity.parse(long)
    assert quantity._parse_once.cache_info().currsize == before
