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

from typing import Any, Sequence

import numpy as np

from fbrapids.errors import ArgumentError

#: rows per arrival unit: the buffer emits after each
UNIT_ROWS = 1 << 15
#: the most bytes of rows the buffer holds by default (beyond them it emits more)
MAX_BYTES = 256 << 20
#: the share of the rows arrived so far the buffer keeps (until it holds ``capacity``)
KEEP = 0.5


def _concat(parts: Sequence[Any]) -> Any:
    return parts[0] if len(parts) == 1 else type(parts[0]).concat(list(parts))


class ShuffleBuffer:
    """Rows in (:meth:`add`, any run of rows: host :class:`~fbrapids.trainers.batch.Columns`
    or device ``TensorColumns``), shuffled chunks out, as the module docstring says; a chunk
    is a whole number of ``batch_size`` rows but the last of the pass.

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
        self.held: Any = None
        self.pending: list[Any] = []
        self.pending_rows = 0
        self.arrived = 0  # rows taken into the buffer (whole units)
        self.peak_rows = 0  # the most rows held at once (after a unit came in, before it emitted)

    def add(self, cols: Any) -> list[Any]:
        """Take ``cols`` in; the chunks to emit now (whole units came in)."""
        out = []
        if len(cols):
            self.pending.append(cols)
            self.pending_rows += len(cols)
        while self.pending_rows >= self.unit:
            rest = _concat(self.pending)
            unit, rest = rest.slice(0, self.unit), rest.slice(self.unit, len(rest))
            self.pending, self.pending_rows = ([rest] if len(rest) else []), len(rest)
            out += self._take_in(unit)
        return out

    def finish(self) -> list[Any]:
        """The end of the pass: every row held and pending, in random order (one chunk)."""
        parts = ([self.held] if self.held is not None else []) + self.pending
        self.held, self.pending, self.pending_rows = None, [], 0
        parts = [p for p in parts if len(p)]
        if not parts:
            return []
        rest = _concat(parts)
        self.peak_rows = max(self.peak_rows, len(rest))
        return [rest.take(self.rng.permutation(len(rest)))]

    def _take_in(self, unit: Any) -> list[Any]:
        held = unit if self.held is None else _concat([self.held, unit])
        self.arrived += len(unit)
        self.peak_rows = max(self.peak_rows, len(held))
        keep = min(self.capacity, int(self.arrived * KEEP))
        size = _nbytes(held)
        if size > self.max_bytes:
            keep = min(keep, int(len(held) * self.max_bytes / size))
        emit = (len(held) - keep) // self.batch_size * self.batch_size
        if emit <= 0:
            self.held = held
            return []
        order = self.rng.permutation(len(held))
        self.held = held.take(np.sort(order[emit:]))  # held in arrival order: the next draws see one layout
        return [held.take(order[:emit])]


def _nbytes(cols: Any) -> int:
    """The bytes of a run of rows' arrays (numpy or torch)."""
    def size(a: Any) -> int:
        return 0 if a is None else int(a.nbytes if hasattr(a, "nbytes") else a.numel() * a.element_size())

    return (size(cols.dense) + size(cols.label) + size(cols.group)
            + sum(size(v) + size(o) for v, o in cols.sparse.values()))
