"""Strict semantic version parsing and precedence, as blang/semver (used by DRA and the
Kubernetes CEL semver library) defines them."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from extender.cel.semvers import Semver, SemverError, parse_semver


def test_parse_components() -> None:
    version = parse_semver("1.2.3-alpha.7+build.11")
    assert version == Semver(1, 2, 3, ("alpha", 7), ("build", "11"))
    assert str(version) == "1.2.3-alpha.7+build.11"


@pytest.mark.parametrize(
    "text",
    [
        "1.2",
        "1.2.3.4",
        "v1.2.3",
        "1.02.3",
        "1.2.3-",
        "1.2.3-a..b",
        "1.2.3-a_b",
        "1.2.3+",
        "1.2.x",
        "",
        " 1.2.3",
    ],
)
def test_strict_parser_rejects(text: str) -> None:
    with pytest.raises(SemverError):
        parse_semver(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("v1.2", "1.2.0"), ("1", "1.0.0"), ("01.002.3", "1.2.3"), ("v1.2.3-rc.1", "1.2.3-rc.1")],
)
def test_normalized_parse(text: str, expected: str) -> None:
    assert str(parse_semver(text, normalize=True)) == expected


def test_short_normalized_version_cannot_carry_prerelease() -> None:
    with pytest.raises(SemverError, match="short version cannot contain PreRelease/Build meta data"):
        parse_semver("1.2-rc", normalize=True)


def test_precedence_follows_semver_2() -> None:
    ordered = [
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
        "1.0.0-rc.1",
        "1.0.0",
        "2.0.0",
        "2.1.0",
        "2.1.1",
    ]
    versions = [parse_semver(t) for t in ordered]
    assert sorted(reversed(versions)) == versions
    assert all(a.compare(b) == -1 and b.compare(a) == 1 for a, b in itertools.pairwise(versions))


def test_build_metadata_is_ignored_for_equality() -> None:
    assert parse_semver("1.0.0+a") == parse_semver("1.0.0+b")
    assert hash(parse_semver("1.0.0+a")) == hash(parse_semver("1.0.0"))


@given(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6))
def test_round_trip(major: int, minor: int, patch: int) -> None:
    text = f"{major}.{minor}.{patch}"
    assert str(parse_semver(text)) == text
