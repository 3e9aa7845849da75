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
    >>> sizer.observe_rows(np.array([16e6]), used=16_000_000)  # a run of one huge row ...
    >>> sizer.estimate(5000, nparts=1)  # ... presizes nothing on its own
    0
    >>> sizer.observe_rows(np.full(1000, 40.0), used=40_000)  # then ordinary rows
    >>> sizer.per_row(), sizer.estimate(5000, nparts=1) < 1 << 20
    (40.0, True)
"""

from __future__ import annotations

import os
from collections import deque
from types import ModuleType

import numpy as np

from fbrapids.kernels.abi import POOL_ALIGN as ALIGN
from fbrapids.kernels.device_types import XArray

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
#: sampled rows a layer must have seen before its quantile presizes a pool
MIN_SAMPLED_ROWS = 64
#: a presize never passes this many times the most pool one launch of the layer has used
PEAK_FACTOR = 4
#: the window's quantile is recomputed after this fraction (1/N) of its rows is new
RECOMPUTE_FRACTION = 8


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


def sample_step(n: int) -> int:
    """The stride of the rows a run of ``n`` rows samples (at most SAMPLE_ROWS of them)."""
    return max(1, -(-n // SAMPLE_ROWS))


def row_sample(n: int, xp: ModuleType = np) -> XArray:
    """The rows a run samples for :class:`PoolSizer` (numpy or, with ``xp=cupy``, made on the device)."""
    return xp.arange(0, n, sample_step(n), dtype=xp.int64)


def high_quantile(values: np.ndarray, q: float = PRESIZE_QUANTILE) -> float:
    """``np.quantile(values, q)`` (linear interpolation) by one partial sort: a run's figure
    costs microseconds, not the general quantile's per-call overhead.

    Example:
        >>> a = np.arange(101, dtype=np.float64)[::-1]
        >>> high_quantile(a, 0.99), high_quantile(a, 0.995), high_quantile(np.array([7.0]))
        (99.0, 99.5, 7.0)
    """
    n = len(values)
    pos = q * (n - 1)
    lo = int(pos)
    if lo >= n - 1:
        return float(values.max())
    part = np.partition(values, (lo, lo + 1))
    a, b = float(part[lo]), float(part[lo + 1])
    return a + (b - a) * (pos - lo)


class PoolSizer:
    """One layer's pool presize: a high quantile of the pool bytes per row over recent runs,
    times the rows, capped by :func:`presize_max`.

    Each run reports the PRESIZE_QUANTILE of its sampled rows' bytes and how many rows it
    sampled; the presize takes the weighted quantile over the runs of the last WINDOW_ROWS
    sampled rows.  A run that meets an outlier row changes its own figure only by that
    row's weight among thousands, and a run of a single huge row weighs one row: the next
    presize stays where the ordinary rows put it.  Bounds: no presize before
    MIN_SAMPLED_ROWS rows were seen, none above PEAK_FACTOR times the most one launch used,
    none above :func:`presize_max`.  A layer that needs more overflows, grows the pool to
    what it asked for and re-runs.

    The window's quantile is recomputed (``recomputes`` counts it) once the rows observed
    since the last recomputation reach 1/RECOMPUTE_FRACTION of the window's rows, so a
    layer that runs one row at a time (a served request) pays one sort of its runs per
    ~WINDOW_ROWS / RECOMPUTE_FRACTION runs instead of one per run; recording a run is
    constant time.
    """

    def __init__(self) -> None:
        self.runs: deque[tuple[float, int]] = deque()
        self._weight = 0
        self._since = 0  #: sampled rows observed since the quantile was last recomputed
        self._per_row = 0.0
        self.recomputes = 0  #: times the window's quantile was recomputed
        self.peak_used = 0  #: most pool bytes one launch of the layer used

    def observe(self, quantile_bytes: float, rows: int, used: int = 0) -> None:
        """Record one run: the quantile of its sampled rows' pool bytes, over ``rows``
        samples, and the pool bytes the launch used."""
        self.peak_used = max(self.peak_used, int(used))
        if rows <= 0:
            return
        self.runs.append((float(quantile_bytes), int(rows)))
        self._weight += int(rows)
        while self._weight - self.runs[0][1] >= WINDOW_ROWS:
            self._weight -= self.runs.popleft()[1]
        self._since += int(rows)
        if self._since >= max(1, self._weight // RECOMPUTE_FRACTION):
            self._recompute()

    def _recompute(self) -> None:
        q = np.fromiter((r[0] for r in self.runs), dtype=np.float64, count=len(self.runs))
        w = np.fromiter((r[1] for r in self.runs), dtype=np.int64, count=len(self.runs))
        order = np.argsort(q, kind="stable")
        at = int(np.searchsorted(np.cumsum(w[order]), PRESIZE_QUANTILE * self._weight, side="left"))
        self._per_row = float(q[order[min(at, len(order) - 1)]])
        self._since = 0
        self.recomputes += 1

    def observe_rows(self, row_bytes: np.ndarray, used: int = 0) -> None:
        """Record one run from its sampled rows' pool bytes (and the bytes it used)."""
        if len(row_bytes):
            self.observe(high_quantile(row_bytes), len(row_bytes), used)

    def per_row(self) -> float:
        """The bytes per row a presize uses (0 before any run)."""
        return self._per_row

    def estimate(self, n: int, nparts: int) -> int:
        """Pool bytes to reserve before running ``n`` rows (0: no estimate yet)."""
        if not n or not self._per_row or self._weight < MIN_SAMPLED_ROWS:
            return 0
        blocks = 1 + n // 128
        need = int(self._per_row * n * POOL_HEADROOM) + blocks * (ALIGN + 8 * nparts)
        return min(need, PEAK_FACTOR * max(self.peak_used, ALIGN), presize_max())
