"""The kernel tests hold the numba kernels to their twins, so every test here runs the kernels.

An earlier test of the session may have started a background warm-up (`wiring.build_services`
with the default `kernel_warmup: background`); while it runs the entry points answer with the
twins, and a kernel-versus-twin test would compare the twin with itself. So each test waits for
a running warm-up to end, then forces the kernels (tests/kernels/test_warming.py, which drives the
switch itself, opts out with the `free_switch` marker).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kernels import warming


@pytest.fixture(autouse=True)
def _kernels_answer(request: pytest.FixtureRequest) -> Iterator[None]:
    if request.node.get_closest_marker("free_switch"):
        yield
        return
    assert warming.wait(timeout=600), "a background kernel warm-up did not end"
    with warming.forced(use_kernels=True):
        yield


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "free_switch: do not force the kernels (the test drives warming)")
