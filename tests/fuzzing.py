"""The hypothesis settings every fuzz test uses: seeded, bounded for CI, longer on request.

`fuzz_settings("DRA_FUZZ_EXAMPLES", 250)` reads the number of examples from that environment
variable (the default keeps CI within seconds), derandomizes (the same examples on every run, so a
failure reproduces), sets no per-example deadline (a shared, loaded machine must not fail a test
by timing alone) and always suppresses hypothesis's `too_slow` health check (building a cluster or
a large body is slow by design); a test names any further check to suppress.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings


def fuzz_settings(env: str, default: int, *suppress: HealthCheck) -> settings:
    """Derandomized settings with `int($env or default)` examples, no deadline, `too_slow` and
    `suppress` not checked."""
    return settings(
        max_examples=int(os.environ.get(env, str(default))),
        derandomize=True,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, *suppress],
    )
