"""The known upcoming uses of a table's rows: batches announced before they are trained.

A FeatureBox stream extracts whole partitions before the trainer takes their batches
(the "pass" design of AIBox / HugeCTR), so when a batch trains, the ids of the batches
behind it are already known.  :class:`UseWindow` keeps, for every row of an announced
batch, the next step it is used at; the ``lfu_window`` eviction policy
(:class:`~fbrapids.trainers.sparse.policies.WindowLFU`) keeps the rows needed again in
the window (the sooner, the higher) above all others, and ranks the rest by their
history counts (LFU): a row not needed in the window and rarely seen is the first to
leave RAM after its batch.  Nothing is read ahead: a row still comes up from the SSD
file only when a batch looks it up (demand paging), so every lookup served from RAM
saves an SSD read, and the policy is bounded by Belady's offline optimum.

Announcements are hints: a lookup of other ids than announced trains exactly the same
rows; only which rows stay in RAM differs.  Ids not admitted when their batch is
announced are not tracked (they rank by their counts).

Bookkeeping per announced batch ``s``: its distinct rows and, for each, the next
announced step holding that row (filled in when that later batch is announced: each row
remembers the step and number of its last announced occurrence).  When step ``s``
begins, its rows' next use becomes those steps.  Per announced batch: one C pass over its
rows; per lookup: one over the rows of the batches announced for it.  Memory: 24 bytes
per row of the table, plus 8 per pending occurrence.

Example:
    >>> import numpy as np
    >>> w = UseWindow()
    >>> w.announce(np.array([0, 1]), step=0), w.announce(np.array([1, 2, 2, -1]), step=1)
    (2, 2)
    >>> w.begin(0); w.next_use[:3].tolist()   # row 1 is needed at step 1; row 0 not again (-1)
    [-1, 1, 1]
    >>> w.keys(np.array([0, 1, 2]), freq=np.array([5, 1, 1])).tolist()[0]   # row 0: its count
    5
"""

from __future__ import annotations

import numpy as np

from fbrapids.errors import ArgumentError
from fbrapids.trainers.sparse.hashmap import window_announce, window_begin, window_keys

#: keys of rows needed in the window start here (above any history count)
IN_WINDOW = np.int64(1) << np.int64(62)


class UseWindow:
    """Next known use of each row (``next_use[g]``, -1: none known) from announced batches.

    The pending batches' occurrences are numbered in announcement order; the next step of
    occurrence ``k`` is ``ring[k % len(ring)]`` (a power of two; it doubles when more are pending).
    """

    def __init__(self, ring_size: int = 1 << 14) -> None:
        if ring_size < 1 or ring_size & (ring_size - 1):
            raise ArgumentError(f"UseWindow: ring_size must be a power of two, got {ring_size}")
        self.next_use = np.full(0, -1, dtype=np.int64)
        self.last_step = np.full(0, -1, dtype=np.int64)  # step of each row's last announcement
        self.last_occ = np.zeros(0, dtype=np.int64)  # the number of that occurrence
        self.ring = np.full(ring_size, -1, dtype=np.int64)
        self.pending: dict[int, tuple[np.ndarray, int]] = {}  # step -> (its rows, number of its first occurrence)
        self.oldest = 0  # number of the oldest pending occurrence
        self.occurrences = 0  # occurrences announced so far
        self.current = -1  # the step begun last
        self.last_announced = -1
        self.announced_rows = 0

    def cover(self, n: int) -> None:
        """Per-row arrays for rows ``0 .. n - 1`` (doubling)."""
        cap = len(self.next_use)
        if n <= cap:
            return
        new = max(n, 2 * cap, 1024)
        for name, fill in (("next_use", -1), ("last_step", -1), ("last_occ", 0)):
            out = np.full(new, fill, dtype=np.int64)
            out[:cap] = getattr(self, name)
            setattr(self, name, out)

    def _ring_room(self, more: int) -> None:
        """A ring holding every pending occurrence and ``more``."""
        need = self.occurrences + more - self.oldest
        size = len(self.ring)
        if need <= size:
            return
        while size < need:
            size *= 2
        idx = np.arange(self.oldest, self.occurrences, dtype=np.int64)
        ring = np.full(size, -1, dtype=np.int64)
        ring[idx & (size - 1)] = self.ring[idx & (len(self.ring) - 1)]
        self.ring = ring

    def clear(self) -> None:
        """Forget every announcement."""
        self.next_use.fill(-1)
        self.last_step.fill(-1)
        self.pending.clear()
        self.oldest = self.occurrences
        self.last_announced = -1

    def announce(self, g: np.ndarray, step: int) -> int:
        """The batch looked up at ``step`` holds rows ``g`` (-1: an id not admitted, skipped;
        repeats count once); returns its distinct rows.  Batches are announced in step
        order; one announced out of order (at or before the last one) starts a new plan."""
        step = int(step)
        if step <= self.current:
            return 0  # begun already: nothing left to plan for it
        if step <= self.last_announced:
            self.clear()
        g = np.asarray(g, dtype=np.int64)
        self._ring_room(len(g))
        if len(g):
            self.cover(int(g.max()) + 1)
        base = self.occurrences
        rows = window_announce(g, step, self.current, self.next_use, self.last_step, self.last_occ, self.ring, base)
        self.pending[step] = (rows, base)
        self.occurrences += len(rows)
        self.last_announced = step
        self.announced_rows += len(rows)
        return len(rows)

    def begin(self, step: int) -> None:
        """Step ``step`` is being looked up: the rows of the batches announced up to it now
        wait for their next announced use."""
        for s in sorted(s for s in self.pending if s <= step):
            g, base = self.pending.pop(s)
            window_begin(g, self.ring, base, self.next_use)
            self.oldest = base + len(g)
        self.current = max(self.current, int(step))

    def keys(self, g: np.ndarray, freq: np.ndarray) -> np.ndarray:
        """Eviction keys of rows ``g`` (smaller: evicted sooner; ``freq`` covers every row):
        rows used again in the window above every other, the sooner the higher; the
        others by ``freq[g]``."""
        self.cover(len(freq))
        return window_keys(g, self.next_use, freq, self.current, int(IN_WINDOW))
