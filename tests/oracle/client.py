"""Talk to the allocator oracle (tests/oracle/main.go): one process, one scenario per line.

The oracle is upstream's own allocator built from `k8s.io/dynamic-resource-allocation` by
`python -m tests.gobuild oracle-1.36` (or `oracle-1.37`). Starting a Go process costs a few
milliseconds; keeping one open and writing scenarios as JSON lines costs microseconds, which is
what lets a CI run judge thousands of generated cases.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import TracebackType
from typing import Any

from tests import gobuild

VERSIONS = {"1.36": "oracle-1.36", "1.37": "oracle-1.37"}


def binary(version: str) -> Path:
    """The oracle for Kubernetes `version` ("1.36", "1.37"), built first when the cache lacks it."""
    return gobuild.binaries(VERSIONS[version])["oracle"]


class Oracle:
    """A running oracle; `judge(scenario)` answers as upstream's allocator does.

    An answer is `{"name", "version", "implementation", "error"?, "nodes": [...]}`; each node is
    `{"node", "status": "allocated"|"unschedulable"|"error", "error"?, "nodeScopedError",
    "allocations"?}`. `error` at the top means no allocator could be made for the scenario.
    """

    def __init__(self, path: Path) -> None:
        self._process = subprocess.Popen(
            [str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        self.version = subprocess.run(
            [str(path), "--version"], capture_output=True, text=True, check=True
        ).stdout.strip()

    def judge(self, scenario: dict[str, Any]) -> dict[str, Any]:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(json.dumps(scenario) + "\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(
                f"oracle exited with {self._process.wait()} on scenario {scenario.get('name')}"
            )
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(timeout=30)

    def __enter__(self) -> Oracle:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()
