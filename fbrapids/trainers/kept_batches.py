"""A stream's batches kept in memory for the next pass over the same rows.

A trial that trains in several passes (:mod:`fbrapids.app.trial_training`) streams the same
training and held-out rows in the same order every pass.  :class:`KeptBatches` wraps a
pass's stream and keeps each epoch's batches as they go by, while they stay within a byte
limit and on the host; :meth:`KeptBatches.replay` then gives the next pass those batches
(the same objects, in the same order, epoch by epoch) without extracting the rows again.
Past the limit, or for an epoch the pass did not read to its end, nothing is kept and the
next pass streams the rows as before.

Example:
    >>> import torch
    >>> from fbrapids.trainers.batch import Batch
    >>> batches = [Batch(torch.zeros(2, 1), torch.tensor([0.0, 1.0]), {}) for _ in range(3)]
    >>> kept = KeptBatches(batches, limit=1 << 20)
    >>> again = kept.replay()  # nothing read yet: nothing to replay
    >>> [len(b) for b in kept], again is None
    ([2, 2, 2], True)
    >>> replay = kept.replay()
    >>> [b is a for b, a in zip(replay, batches)], replay.expected_batches(), kept.bytes
    ([True, True, True], 3, 48)
    >>> small = KeptBatches(batches, limit=20)
    >>> _ = list(small); small.replay() is None, small.bytes
    (True, 0)
"""

from __future__ import annotations

from typing import Iterable, Iterator

from fbrapids.trainers.batch import Batch


def batch_bytes(batch: Batch) -> int:
    """The bytes of a batch's tensors.

    Example:
        >>> import torch
        >>> batch_bytes(Batch(torch.zeros(4, 2), torch.zeros(4), {"ad": (torch.zeros(4, dtype=torch.int64),
        ...                                                               torch.arange(4))}, torch.arange(4)))
        144
    """
    parts = [batch.dense, batch.label, *(t for pair in batch.sparse.values() for t in pair)]
    if batch.group is not None:
        parts.append(batch.group)
    return sum(t.numel() * t.element_size() for t in parts)


def _on_host(batch: Batch) -> bool:
    return batch.dense.device.type == "cpu" and batch.label.device.type == "cpu"


class BatchesThrough:
    """A stream of batches seen through: ``set_epoch`` and the batch counts go to the stream
    (or iterable of :class:`Batch`) it wraps, ``batches``; a subclass's ``__iter__`` passes
    them on."""

    def __init__(self, batches: Iterable[Batch]) -> None:
        self.batches = batches
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)
        if hasattr(self.batches, "set_epoch"):
            self.batches.set_epoch(epoch)

    def expected_batches(self) -> int | None:
        from fbrapids.trainers.fit import expected_batches

        return expected_batches(self.batches)

    def estimated_batches(self) -> int | None:
        from fbrapids.trainers.fit import estimated_batches

        return estimated_batches(self.batches)


class KeptBatches(BatchesThrough):
    """``batches`` passed through, each epoch's batches kept while all of the pass's fit in
    ``limit`` bytes on the host (``bytes``: those kept)."""

    def __init__(self, batches: Iterable[Batch], limit: int) -> None:
        super().__init__(batches)
        self.limit = int(limit)
        self.bytes = 0
        self.epochs: dict[int, list[Batch]] = {}  #: each epoch read to its end, its batches in order
        self._keeping = True  # False once past the limit (or a batch off the host): nothing is kept

    def __iter__(self) -> Iterator[Batch]:
        epoch = self.epoch
        kept: list[Batch] | None = [] if self._keeping else None
        if kept is not None and epoch in self.epochs:  # read again: the same batches (kept once)
            self.bytes -= sum(batch_bytes(b) for b in self.epochs.pop(epoch))
        for b in self.batches:
            if kept is not None:
                size = batch_bytes(b)
                if self.bytes + size > self.limit or not _on_host(b):
                    self._drop()
                    kept = None
                else:
                    kept.append(b)
                    self.bytes += size
            yield b
        if kept is not None and self._keeping:  # read to its end
            self.epochs[epoch] = kept

    def _drop(self) -> None:
        self._keeping, self.epochs, self.bytes = False, {}, 0

    def replay(self, epochs: int = 1) -> Replayed | None:
        """The kept batches of epochs ``0 .. epochs - 1`` as a stream of their own (None where
        one of them was not kept)."""
        if not self._keeping or any(e not in self.epochs for e in range(epochs)):
            return None
        return Replayed({e: self.epochs[e] for e in range(epochs)})


class Replayed:
    """Kept batches streamed again, epoch by epoch (:meth:`KeptBatches.replay`)."""

    def __init__(self, epochs: dict[int, list[Batch]]) -> None:
        self.epochs, self.epoch = epochs, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def expected_batches(self) -> int:
        return len(self.epochs[self.epoch])

    def estimated_batches(self) -> int:
        return self.expected_batches()

    def __iter__(self) -> Iterator[Batch]:
        return iter(self.epochs[self.epoch])
