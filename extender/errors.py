"""The extender's own error hierarchy.

Three outcomes are kept apart, as in the upstream allocator:
- invalid input (bad CEL, unknown DeviceClass, malformed request) raises one of these errors
  and fails the request or the pod;
- "does not fit this node" is data (a reason string), never an exception;
- node-scoped problems (invalid resource pools) are `NodeScopedError`, reported per node.
"""

from __future__ import annotations


class ExtenderError(Exception):
    """Base class of every error the extender raises on purpose."""


class InvalidRequest(ExtenderError):
    """The HTTP request body is malformed (maps to 400)."""


class IndexNotReady(ExtenderError):
    """The cluster state is not loaded or synced yet (maps to 503 / filter Error)."""


class StateLoadError(ExtenderError):
    """A state file could not be read; the message names file, document and field."""


class AllocationError(ExtenderError):
    """A pod-level allocation error: upstream's `Allocate` would return an error for every node."""


class NodeScopedError(ExtenderError):
    """An allocation error that concerns only one node (upstream's ErrFailedAllocationOnNode).

    `str()` is upstream's text (the conformance cases compare it); `detail` says more, e.g.
    which pool is invalid and why, and `reason` is both, for the node's filter verdict.
    """

    def __init__(self, message: str, *, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail

    @property
    def reason(self) -> str:
        return f"{self}: {self.detail}" if self.detail else str(self)


class CelCompileError(AllocationError):
    """A CEL selector failed to compile (undeclared reference, syntax, unsupported construct)."""


class CelRuntimeError(AllocationError):
    """A CEL selector failed while evaluating against a device (missing key, wrong type, ...)."""


class AllocationAborted(AllocationError):
    """The search was cancelled or ran past its deadline (upstream: `filter operation aborted`)."""


class SelectorsInterrupted(AllocationAborted):
    """CEL selector evaluation stopped at the deadline. Results reached before it stay cached on
    the devices, so a retry continues where this attempt stopped (the evaluation is not kept)."""


class KubeAPIError(ExtenderError):
    """An API server call failed; `status` is the HTTP status (0 for transport errors) and
    `reason` its reason phrase ("" if none)."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
