"""The host memory pool of the pooled allocator (paper, Algorithm 1).

One pre-allocated, 128-byte aligned byte buffer and a head counter.  Kernels reserve a
block's share with one atomic add on the head; :meth:`HostPool.reset` puts the head back
to 0 (constant time) after each layer, once its results are compacted out.  When a launch
overflows, the host calls :meth:`grow` (to at least what the launch asked for) and re-runs.

Example:
    >>> p = HostPool(256)
    >>> p.capacity, p.address % 128
    (256, 0)
    >>> p.grow(1000); p.capacity >= 1000, p.regrowths
    (True, 1)
    >>> p.reserve(4096); p.capacity >= 4096, p.regrowths, p.presizes
    (True, 1, 1)
"""

from __future__ import annotations

import os

import numpy as np

ALIGN = 128
ENV_INITIAL = "FBRAPIDS_POOL_BYTES"
DEFAULT_INITIAL = 64 << 20


def initial_pool_bytes() -> int:
    """Initial pool size: ``$FBRAPIDS_POOL_BYTES`` or 64 MiB."""
    return int(os.environ.get(ENV_INITIAL, DEFAULT_INITIAL))


class HostPool:
    """A growable, aligned byte pool with a head counter and an error word."""

    def __init__(self, capacity: int | None = None) -> None:
        self.head = np.zeros(1, dtype=np.uint64)
        self.err = np.zeros(1, dtype=np.int32)
        self.regrowths = 0
        self.presizes = 0
        self.peak = 0
        self._alloc(max(int(capacity if capacity is not None else initial_pool_bytes()), ALIGN))

    def _alloc(self, capacity: int) -> None:
        capacity = (capacity + ALIGN - 1) // ALIGN * ALIGN
        raw = np.empty(capacity + ALIGN, dtype=np.uint8)
        shift = (-raw.ctypes.data) % ALIGN
        self.buffer = raw[shift: shift + capacity]
        self.capacity = capacity

    @property
    def address(self) -> int:
        return self.buffer.ctypes.data

    def reset(self) -> None:
        """O(1): the head back to the start; the error word cleared."""
        self.peak = max(self.peak, int(self.head[0]))
        self.head[0] = 0
        self.err[0] = 0

    def used(self) -> int:
        return int(self.head[0])

    def grow(self, need: int) -> None:
        """Replace the buffer with one of at least ``need`` bytes (at least double)."""
        self._alloc(max(int(need), 2 * self.capacity))
        self.regrowths += 1

    def reserve(self, need: int) -> None:
        """Make room for ``need`` bytes before a launch (no re-run involved): the host's
        estimate from earlier launches of the same layer.  Counted in ``presizes``."""
        if need > self.capacity:
            self._alloc(int(need))
            self.presizes += 1
