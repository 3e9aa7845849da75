"""The pool of the pooled allocator (paper, Algorithm 1) and how it is presized.

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

A :class:`PoolSizer` per layer presizes the pool from a high quantile of the bytes per row
seen in recent runs, with a hard cap, so one outlier row cannot inflate later presizes:

    >>> sizer = PoolSizer()
    >>> sizer.observe(np.full(1000, 40.0)); sizer.observe(np.array([16e6]))  # one huge row
    >>> sizer.per_row(), sizer.estimate(5000, nparts=1) < 1 << 20
    (40.0, True)
"""

from __future__ import annotations

import os

import numpy as np

from fbrapids.kernels.abi import POOL_ALIGN as ALIGN

ENV_INITIAL = "FBRAPIDS_POOL_BYTES"
DEFAULT_INITIAL = 64 << 20
ENV_PRESIZE_MAX = "FBRAPIDS_POOL_PRESIZE_MAX"
DEFAULT_PRESIZE_MAX = 1 << 30
#: presized pool = quantile of bytes per row x rows x this (plus per-block alignment)
POOL_HEADROOM = 1.125
#: the quantile of recent rows' pool bytes a presize is taken from
PRESIZE_QUANTILE = 0.99
#: rows sampled per run (strided) and rows remembered across runs
SAMPLE_ROWS = 1024
WINDOW_ROWS = 8192


def initial_pool_bytes() -> int:
    """Initial pool size: ``$FBRAPIDS_POOL_BYTES`` or 64 MiB."""
    return int(os.environ.get(ENV_INITIAL, DEFAULT_INITIAL))


class HostPool:
    """A growable, aligned byte pool with a head counter and an error word."""

    def __init__(self, capacity: int | None = None) -> None:
        self.head = np.zeros(1, dtype=np.uint64)
        self.err = np.zeros(1, dtype=np.int32)
        self.regrowths = 0
        self.reported_regrowths = 0  #: regrowths already counted in a run's stats
        self.presizes = 0
        self.peak = 0
        self.allocated_bytes = 0  #: bytes of every buffer this pool allocated, summed
        self._alloc(max(int(capacity if capacity is not None else initial_pool_bytes()), ALIGN))

    def _alloc(self, capacity: int) -> None:
        capacity = (capacity + ALIGN - 1) // ALIGN * ALIGN
        raw = np.empty(capacity + ALIGN, dtype=np.uint8)
        self.allocated_bytes += raw.nbytes
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


def presize_max() -> int:
    """The hard cap of a presize: ``$FBRAPIDS_POOL_PRESIZE_MAX`` or 1 GiB.  A layer that needs
    more still runs: it overflows, the pool grows to what it asked for, and it re-runs."""
    return int(os.environ.get(ENV_PRESIZE_MAX, DEFAULT_PRESIZE_MAX))


def row_sample(n: int) -> np.ndarray:
    """The rows a run samples for :class:`PoolSizer` (at most SAMPLE_ROWS, strided)."""
    return np.arange(0, n, max(1, -(-n // SAMPLE_ROWS)), dtype=np.int64)


class PoolSizer:
    """One layer's pool presize: a high quantile of the pool bytes per row over the last
    WINDOW_ROWS sampled rows (across runs), times the rows, capped by :func:`presize_max`.

    A run that meets an outlier row adds one sample among thousands, so the quantile, and
    the next presize, stay where the ordinary rows put them.
    """

    def __init__(self) -> None:
        self.samples: list[np.ndarray] = []
        self._kept = 0
        self._per_row = 0.0

    def observe(self, row_bytes: np.ndarray) -> None:
        """Record one run's sampled per-row pool bytes."""
        if not len(row_bytes):
            return
        self.samples.append(np.asarray(row_bytes, dtype=np.float64))
        self._kept += len(row_bytes)
        while self._kept - len(self.samples[0]) >= WINDOW_ROWS:
            self._kept -= len(self.samples.pop(0))
        self._per_row = float(np.quantile(np.concatenate(self.samples), PRESIZE_QUANTILE))

    def per_row(self) -> float:
        """The bytes per row a presize uses (0 before any run)."""
        return self._per_row

    def estimate(self, n: int, nparts: int) -> int:
        """Pool bytes to reserve before running ``n`` rows (0: no estimate yet)."""
        if not n or not self._per_row:
            return 0
        blocks = 1 + n // 128
        need = int(self._per_row * n * POOL_HEADROOM) + blocks * (ALIGN + 8 * nparts)
        return min(need, presize_max())
