"""Which index columns already passed a kernel's O(rows) input checks.

The kernels check their inputs on every call (numba does not check bounds: a bad index reads
memory it should not). Some checks read every row (`min`/`max` of a column, `np.diff` of
`node_start`) while the columns are the device index's, the same arrays call after call and never
written once built. With the answers kept per node (`extender.core.freekeyed`) most calls solve a
handful of nodes, and those passes were half of such a call; so each kernel remembers the last
arrays that passed and runs those checks again only for other arrays.
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np


class CheckedOnce:
    """The last arrays (by identity, held so their ids are not reused) and the plain value (by
    equality, e.g. a size they were checked against) that passed one kernel's row checks."""

    def __init__(self) -> None:
        self._arrays: tuple[np.ndarray, ...] = ()
        self._plain: Hashable = None

    def needed(self, arrays: tuple[np.ndarray, ...], plain: Hashable = None) -> bool:
        """Whether the row checks must run for these arrays and value."""
        return (
            len(arrays) != len(self._arrays)
            or any(a is not b for a, b in zip(arrays, self._arrays, strict=True))
            or plain != self._plain
        )

    def passed(self, arrays: tuple[np.ndarray, ...], plain: Hashable = None) -> None:
        """Every check passed for these arrays and value."""
        self._arrays, self._plain = arrays, plain
