"""`Obj`: a Kubernetes object as decoded JSON or YAML, before it is parsed into typed records.

One alias for the whole code base, and the field readers the record parsers (`extender.pods`,
`extender.claims`) share: each returns the value when it has the expected type, else the empty
value, so a parser never raises on what validation let through.

Raw objects belong to the edges: the wire codec, the cluster state and its loaders, validation,
the kube package and the binders that write objects back. The allocator and the index work on
parsed records (`extender.allocator.model`, `.inputs`), the core on pods and claims parsed at the
edge (`extender.pods`, `extender.claims`).
"""

from __future__ import annotations

from typing import Any, TypeAlias

Obj: TypeAlias = dict[str, Any]


def mapping_field(value: Any) -> Obj:
    """The value if it is an object, else {}."""
    return value if isinstance(value, dict) else {}


def list_field(value: Any) -> list[Any]:
    """The value if it is a list, else []."""
    return value if isinstance(value, list) else []


def text_field(value: Any) -> str:
    """The value if it is a string, else ''."""
    return value if isinstance(value, str) else ""
