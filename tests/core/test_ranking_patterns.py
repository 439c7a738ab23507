"""`ranking._claim_patterns` groups the nodes' first-fit claim patterns exactly as numpy's row-wise
unique does (same distinct rows, same order, same row numbers), packed or not."""

from __future__ import annotations

import numpy as np

from extender.core.ranking import _claim_patterns


def test_claim_patterns_equal_numpys_unique_over_rows() -> None:
    rng = np.random.default_rng(1)
    for _ in range(300):
        rows, width, claims = int(rng.integers(1, 50)), int(rng.integers(1, 6)), int(rng.integers(1, 5))
        given = rng.integers(-1, claims, size=(rows, width))
        patterns, group = _claim_patterns(given)
        expected, inverse = np.unique(given, axis=0, return_inverse=True)
        assert np.array_equal(patterns, expected) and np.array_equal(group, inverse.ravel())


def test_claim_patterns_too_wide_to_pack_fall_back_to_numpy() -> None:
    given = np.tile(np.arange(-1, 63), (3, 1))[:, :64]  # base 64, width 64: does not fit 62 bits
    given[1, 0] = 5
    patterns, group = _claim_patterns(given)
    expected, inverse = np.unique(given, axis=0, return_inverse=True)
    assert np.array_equal(patterns, expected) and np.array_equal(group, inverse.ravel())
