"""Semantic versions as Kubernetes' CEL `Semver` type sees them (github.com/blang/semver/v4).

DRA `version` attributes and CEL's `semver()` both parse with blang's strict `semver.Parse`;
this module mirrors that parser (including its error texts, which surface in CEL runtime errors)
and its precedence rules: build metadata is kept but ignored when comparing, numeric prerelease
identifiers sort before alphanumeric ones. `parse_semver(text, normalize=True)` is the Kubernetes
library's `normalizeAndParse` (drops a leading "v", fills missing minor/patch, strips leading zeros).

No PyPI semver package is a dependency of this project, and blang's rules are short enough to
state here exactly.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

_NUMBERS = frozenset("0123456789")
_ALPHANUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-0123456789")
_MAX_UINT64 = 2**64 - 1


class SemverError(ValueError):
    """A string is not a strict semantic version; the message is blang/semver's."""


@dataclass(frozen=True, slots=True, eq=False)
class Semver:
    """A parsed version; `==` and ordering follow semver precedence (build metadata ignored)."""

    major: int
    minor: int
    patch: int
    pre: tuple[int | str, ...] = ()
    build: tuple[str, ...] = field(default=())

    def compare(self, other: Semver) -> int:
        """-1, 0 or 1, like blang's `Version.Compare`."""
        mine, theirs = (self.major, self.minor, self.patch), (other.major, other.minor, other.patch)
        if mine != theirs:
            return 1 if mine > theirs else -1
        if not self.pre or not other.pre:
            return (not self.pre) - (not other.pre)
        for a, b in zip(self.pre, other.pre, strict=False):
            if a == b:
                continue
            if isinstance(a, int) and isinstance(b, int):
                return 1 if a > b else -1
            if isinstance(a, str) and isinstance(b, str):
                return 1 if a > b else -1
            return -1 if isinstance(a, int) else 1  # numeric identifiers sort before alphanumeric ones
        return (len(self.pre) > len(other.pre)) - (len(self.pre) < len(other.pre))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self.compare(other) == 0

    def __lt__(self, other: Semver) -> bool:
        return self.compare(other) < 0

    def __hash__(self) -> int:
        return hash((self.major, self.minor, self.patch, self.pre))

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.pre:
            text += "-" + ".".join(str(p) for p in self.pre)
        if self.build:
            text += "+" + ".".join(self.build)
        return text


def parse_semver(text: str, *, normalize: bool = False) -> Semver:
    """Parse strictly (blang `semver.Parse`), or after Kubernetes' normalization.

    Raises:
        SemverError: with blang/semver's message.
    """
    if normalize:
        text = _normalize(text)
    if not text:
        raise SemverError("Version string empty")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise SemverError("No Major.Minor.Patch elements found")
    major = _number(parts[0], "major", "Major")
    minor = _number(parts[1], "minor", "Minor")
    rest, build_text, pre_text = parts[2], None, None
    if "+" in rest:
        rest, build_text = rest.split("+", 1)
    if "-" in rest:
        rest, pre_text = rest.split("-", 1)
    patch = _number(rest, "patch", "Patch")
    pre = tuple(_prerelease(p) for p in pre_text.split(".")) if pre_text is not None else ()
    build: tuple[str, ...] = ()
    if build_text is not None:
        for item in build_text.split("."):
            if not item:
                raise SemverError("Build meta data is empty")
            if not set(item) <= _ALPHANUM:
                raise SemverError(f"Invalid character(s) found in build meta data {_go_quote(item)}")
        build = tuple(build_text.split("."))
    return Semver(major, minor, patch, pre, build)


def _number(text: str, lower: str, title: str) -> int:
    if not set(text) <= _NUMBERS:
        raise SemverError(f"Invalid character(s) found in {lower} number {_go_quote(text)}")
    if len(text) > 1 and text[0] == "0":
        raise SemverError(f"{title} number must not contain leading zeroes {_go_quote(text)}")
    return _uint64(text)


def _prerelease(text: str) -> int | str:
    if not text:
        raise SemverError("Prerelease is empty")
    if set(text) <= _NUMBERS:
        if len(text) > 1 and text[0] == "0":
            raise SemverError(f"Numeric PreRelease version must not contain leading zeroes {_go_quote(text)}")
        return _uint64(text)
    if set(text) <= _ALPHANUM:
        return text
    raise SemverError(f"Invalid character(s) found in prerelease {_go_quote(text)}")


def _uint64(text: str) -> int:
    """strconv.ParseUint(text, 10, 64) for a string of ASCII digits."""
    if not text:
        raise SemverError('strconv.ParseUint: parsing "": invalid syntax')
    value = int(text)
    if value > _MAX_UINT64:
        raise SemverError(f"strconv.ParseUint: parsing {_go_quote(text)}: value out of range")
    return value


def _normalize(text: str) -> str:
    """Kubernetes' `normalizeAndParse` preprocessing (before the strict parse)."""
    text = text.removeprefix("v")
    parts = text.split(".", 2)
    for i, part in enumerate(parts):
        if len(part) > 1:
            stripped = part.lstrip("0")
            if not stripped or stripped[0] not in _NUMBERS:
                stripped = "0" + stripped
            parts[i] = stripped
    if len(parts) < 3:
        if any(c in parts[-1] for c in "+-"):
            raise SemverError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


def _go_quote(text: str) -> str:
    """Go's %q for the ASCII-ish strings these messages carry."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@functools.lru_cache(maxsize=4096)
def parse_version_attribute(text: str) -> Semver:
    """`parse_semver` of a version attribute, cached per text: a fleet publishes few distinct
    driver and firmware versions on many devices. Semver values are immutable, so sharing is
    safe; a text that does not parse raises each time (exceptions are not cached)."""
    return parse_semver(text)


def is_version(text: str) -> bool:
    """Whether a version attribute's text parses (cached per text)."""
    try:
        parse_version_attribute(text)
    except SemverError:
        return False
    return True
