"""Kubernetes 1.37's hint on "no such key" runtime errors (dynamic-resource-allocation v0.37.2 cel/errors.go).

A selector that reads an attribute a device lacks fails with cel-go's `no such key: <name>`;
1.37 appends advice on optional chaining. Other errors are left as they are.
"""

from __future__ import annotations

NO_SUCH_KEY_HINT = (
    ". consider using CEL optional chaining (.? followed by orValue()) "
    "or guarding the check with has() for optional fields"
)


def enhance_runtime_error(text: str) -> str:
    """`text` with the optional-chaining hint when it is a "no such key" error (idempotent)."""
    if "no such key:" in text and not text.endswith(NO_SUCH_KEY_HINT):
        return text + NO_SUCH_KEY_HINT
    return text
