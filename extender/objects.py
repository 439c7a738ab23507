"""`Obj`: a Kubernetes object as decoded JSON or YAML, before it is parsed into typed records.

One alias for the whole code base. Raw objects belong to the edges: the wire codec, the cluster
state and its loaders, validation, the kube package and the binders that write objects back. The
allocator and the index work on parsed records (`extender.allocator.model`, `.inputs`), the core
on pods parsed at the edge (`extender.pods`).
"""

from __future__ import annotations

from typing import Any, TypeAlias

Obj: TypeAlias = dict[str, Any]
