"""The stream's shuffle buffer: rows shuffled as partitions arrive, so training starts after
the first partition and the next ones are extracted while it runs.

A log is in time order; a model trained in that order ends tuned to the last hours it saw.
A window shuffle that reads a whole window of rows before its first batch removes that,
but when the window holds the whole training set (2^18 rows against 164,829 at 200,000
impressions) nothing trains until every partition is extracted: no pipelining.  Input
pipelines shuffle with a buffer instead (``tf.data``'s ``shuffle``): rows go in as they
arrive, random rows come out.  This one:

* takes the rows in **units** of :data:`UNIT_ROWS` (fewer when the buffer is smaller), cut
  from the row stream whatever its partitions (a unit may span several, a partition hold
  several: the order depends on the rows and the seed, never on how they were partitioned);
* after each unit, emits rows drawn uniformly without replacement from every row it holds,
  in whole batches, until it holds ``min(capacity, half of the rows arrived so far)`` rows,
  and fewer when they would take more than ``max_bytes``;
* at the end of the pass emits every row it still holds, in random order.

So the first batch comes after the first unit (``unit / 2`` rows of it), the buffer holds at
most ``capacity`` rows (and about ``max_bytes``) plus one unit, and, once it is full, each row
leaves it after about ``capacity / unit`` units on average: at the demo's 2^18 rows, rows of
about a day and a half of the generated log are mixed in every batch, and the last
``capacity`` rows trained on are a uniform mix of everything still held.

Example:
    >>> import numpy as np
    >>> from fbrapids.trainers.batch import Columns
    >>> def rows(a, b):
    ...     return Columns(np.arange(a, b, dtype=np.float32)[:, None], np.zeros(b - a, np.float32), {})
    >>> buf = ShuffleBuffer(4, batch_size=2, rng=np.random.default_rng(0))  # units of 4 rows
    >>> first = buf.add(rows(0, 5))  # a unit in: half of it out
    >>> out = first + buf.add(rows(5, 12)) + buf.finish()
    >>> [len(c) for c in out], sorted(int(x) for c in out for x in c.dense[:, 0]) == list(range(12))
    ([2, 2, 4, 4], True)
    >>> max(int(x) for x in first[0].dense[:, 0]) < 4  # drawn from the rows arrived
    True
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fbrapids.errors import ArgumentError

#: rows per arrival unit: the buffer emits after each
UNIT_ROWS = 1 << 15
#: the most bytes of rows the buffer holds by default (beyond them it emits more)
MAX_BYTES = 256 << 20
#: the share of the rows arrived so far the buffer keeps (until it holds ``capacity``)
KEEP = 0.5


class ShuffleBuffer:
    """Rows in (:meth:`add`, any run of rows: host :class:`~fbrapids.trainers.batch.Columns`
    or device ``TensorColumns``), shuffled chunks out, as the module docstring says; a chunk
    is a whole number of ``batch_size`` rows but the last of the pass.

    The buffer holds the runs of rows as they came in and, for the rows it holds, their
    positions in the stream: a unit joining it and a draw leaving it move positions only,
    and an emitted chunk is gathered from the runs it reads (``type(run).gather``), so each
    row is copied once, when it leaves.  A run is let go once no held or pending row is in it.

    Args:
        capacity: the most rows held after each unit (0 is refused: no shuffle, no buffer).
        batch_size: chunks come in whole batches.
        rng: the draws (``numpy.random.default_rng([seed, epoch])``: the same order per epoch).
        max_bytes: the most bytes of rows held after each unit.
    """

    def __init__(self, capacity: int, batch_size: int, rng: np.random.Generator, max_bytes: int = MAX_BYTES) -> None:
        if capacity < 1 or batch_size < 1:
            raise ArgumentError(f"a shuffle buffer needs capacity >= 1 and batch_size >= 1, got {capacity}, "
                                f"{batch_size}")
        self.capacity, self.batch_size, self.rng, self.max_bytes = int(capacity), int(batch_size), rng, int(max_bytes)
        self.unit = max(1, min(self.capacity, UNIT_ROWS))
        self.runs: list[Any] = []  # the runs of rows that came in and still hold a held or pending row
        self.run_starts: list[int] = []  # each run's first row's position in the stream
        self.run_bytes: list[np.ndarray] = []  # each run's bytes a row (see _row_bytes)
        self.run_totals: list[int] = []  # and their sum
        self.extra_bytes = 0  # a run's bytes beyond its rows' (its ragged columns' final offsets)
        self.held = np.empty(0, dtype=np.int64)  # the positions of the rows held, in arrival order
        self.received = 0  # rows that came in (the next run's first position)
        self.pending_rows = 0  # rows that came in, not yet taken in as a unit
        self.arrived = 0  # rows taken into the buffer (whole units)
        self.peak_rows = 0  # the most rows held at once (after a unit came in, before it emitted)

    def add(self, cols: Any) -> list[Any]:
        """Take ``cols`` in; the chunks to emit now (whole units came in)."""
        out = []
        if len(cols):
            self.runs.append(cols)
            self.run_starts.append(self.received)
            bytes_a_row, self.extra_bytes = _row_bytes(cols)
            self.run_bytes.append(bytes_a_row)
            self.run_totals.append(int(bytes_a_row.sum()))
            self.received += len(cols)
            self.pending_rows += len(cols)
        while self.pending_rows >= self.unit:
            unit = np.arange(self.arrived, self.arrived + self.unit, dtype=np.int64)
            self.pending_rows -= self.unit
            out += self._take_in(unit)
        return out

    def finish(self) -> list[Any]:
        """The end of the pass: every row held and pending, in random order (one chunk)."""
        rest = np.concatenate([self.held, np.arange(self.arrived, self.received, dtype=np.int64)])
        self.arrived = self.received
        self.held, self.pending_rows = np.empty(0, dtype=np.int64), 0
        if not len(rest):
            self._let_go()
            return []
        self.peak_rows = max(self.peak_rows, len(rest))
        chunk = self._gather(rest[self.rng.permutation(len(rest))])
        self._let_go()
        return [chunk]

    def _take_in(self, unit: np.ndarray) -> list[Any]:
        held = np.concatenate([self.held, unit])
        self.arrived += len(unit)
        self.peak_rows = max(self.peak_rows, len(held))
        keep = min(self.capacity, int(self.arrived * KEEP))
        size = self._held_bytes(held)
        if size > self.max_bytes:
            keep = min(keep, int(len(held) * self.max_bytes / size))
        emit = (len(held) - keep) // self.batch_size * self.batch_size
        if emit <= 0:
            self.held = held
            return []
        order = self.rng.permutation(len(held))
        self.held = held[np.sort(order[emit:])]  # held in arrival order: the next draws see one layout
        chunk = self._gather(held[order[:emit]])
        self._let_go()
        return [chunk]

    def _locate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The run and the row in it of each stream position."""
        starts = np.asarray(self.run_starts, dtype=np.int64)
        which = np.searchsorted(starts, positions, side="right") - 1
        return which, positions - starts[which]

    def _gather(self, positions: np.ndarray) -> Any:
        which, rows = self._locate(positions)
        return type(self.runs[0]).gather(self.runs, which, rows)

    def _held_bytes(self, held: np.ndarray) -> int:
        """The bytes of the held rows' arrays, as one run of rows holding them would have; at
        most the runs' bytes (every row they hold), returned as that bound when it is not over
        ``max_bytes`` (the size only matters past it)."""
        bound = self.extra_bytes + sum(self.run_totals)
        if bound <= self.max_bytes:
            return bound
        per_position = np.concatenate(self.run_bytes)  # the runs are consecutive in the stream
        return self.extra_bytes + int(per_position[held - self.run_starts[0]].sum())

    def _let_go(self) -> None:
        """Drop the runs before the first row still held or pending; then, when the runs wholly
        taken in hold more rows that left than rows held (and at least a unit of them), join
        their held rows into one run (a copy of those rows, about once per ``held`` rows that
        arrive): a row held long would otherwise keep its whole run alive, and the runs kept
        could grow far past ``capacity`` rows.  The held rows keep their order, so no draw
        changes."""
        first = min(int(self.held[0]) if len(self.held) else self.arrived, self.arrived)
        while self.runs and self.run_starts[0] + len(self.runs[0]) <= first:
            del self.runs[0], self.run_starts[0], self.run_bytes[0], self.run_totals[0]
        old = 0  # the leading runs wholly taken in
        while old < len(self.runs) and self.run_starts[old] + len(self.runs[old]) <= self.arrived:
            old += 1
        if not old:
            return
        end = self.run_starts[old - 1] + len(self.runs[old - 1])
        held = int(np.searchsorted(self.held, end))  # the held rows in those runs: the first ones
        if (end - self.run_starts[0]) - held < max(held, self.unit):
            return
        positions = self.held[:held]
        joined = self._gather(positions)
        per_row = np.concatenate(self.run_bytes[:old])[positions - self.run_starts[0]]
        self.runs[:old], self.run_starts[:old] = [joined], [end - held]
        self.run_bytes[:old], self.run_totals[:old] = [per_row], [int(per_row.sum())]
        self.held = np.concatenate([np.arange(end - held, end, dtype=np.int64), self.held[held:]])


def _row_bytes(cols: Any) -> tuple[np.ndarray, int]:
    """Each row's bytes in ``cols``' arrays (numpy or torch), and the bytes a run of rows holds
    beyond its rows' (each ragged column's final offset): the bytes of a run of rows' arrays
    are the sum of its rows' plus that."""
    def item(a: Any) -> int:
        return 0 if a is None else int(a.itemsize if hasattr(a, "itemsize") else a.element_size())

    def row_width(a: Any) -> int:
        return 0 if a is None else item(a) * int(np.prod(tuple(a.shape[1:]), dtype=np.int64))

    n = len(cols)
    per_row = np.full(n, row_width(cols.dense) + row_width(cols.label) + row_width(cols.group), dtype=np.int64)
    extra = 0
    for v, o in cols.sparse.values():
        lengths = o[1:] - o[:-1]
        lengths = lengths.cpu().numpy() if hasattr(lengths, "cpu") else np.asarray(lengths)
        per_row += lengths.astype(np.int64) * item(v) + item(o)
        extra += item(o)
    return per_row, extra
