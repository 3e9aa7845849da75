"""Each rank's share of the data.

Three ways to split, each training every row exactly once:

* :func:`shard_partitions` - rank ``r`` streams the dask partitions ``r::W`` (the scale-out
  way: each rank extracts only its own partitions); a rank with none gets an empty share.
* :func:`split_batches` - every rank reads the same stream of *global* batches and keeps
  its slice of each (rows ``[r*B/W, (r+1)*B/W)``; a short last batch is split as evenly
  as ``np.array_split`` does, so some ranks may get one row less, or none).  The union of
  the ranks' step-``k`` batches is then exactly the global batch ``k``: W ranks train the
  same global batches as one process.

* :class:`LeaderFeed` - the global stream is read *once*, on rank 0 (the leader); each
  global batch is cut as :func:`split_batches` cuts it and rank ``r``'s slice is sent to
  it (one ``scatter_object_list`` per step).  W ranks then train exactly the global
  batches of one process, whatever the partitions (one, empty ones, a short last batch),
  with the extraction done once.  The leader can skip the first rows of the stream (a
  resume continues at the same row, :attr:`LeaderFeed.skip_rows`), and a failure of its
  stream reaches every rank as a :class:`~fbrapids.errors.DistributedError` naming it.

A global batch that ``W`` does not divide is refused (:func:`per_rank_batch`).

Example:
    >>> import torch
    >>> from fbrapids.trainers.batch import Batch
    >>> b = Batch(torch.zeros(5, 1), torch.arange(5.0), {"a": (torch.arange(7), torch.tensor([0, 2, 3, 5, 6]))})
    >>> [slice_batch(b, 1, 3).sparse["a"][0].tolist(), slice_batch(b, 1, 3).sparse["a"][1].tolist()]
    [[2, 3, 4], [0, 1]]
    >>> [len(s) for s in split_batches([b], rank=1, world=2)], len(empty_like(b))
    ([2], 0)
    >>> concat_batches([slice_batch(b, 0, 2), slice_batch(b, 2, 5)]).sparse["a"][1].tolist()
    [0, 2, 3, 5, 6]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence, cast

import torch
import torch.distributed as dist

from fbrapids.errors import ArgumentError, CheckpointError, DistributedError
from fbrapids.trainers.batch import Batch, piece_bounds
from fbrapids.trainers.run_identity import stream_identity

if TYPE_CHECKING:  # (annotations only: no import at run time)
    import dask.dataframe as dd


def per_rank_batch(global_batch: int, world: int) -> int:
    """``global_batch / world``; an :class:`~fbrapids.errors.ArgumentError` when it does not divide.

    Example:
        >>> per_rank_batch(4096, 4)
        1024
    """
    if world < 1 or global_batch < 1 or global_batch % world:
        raise ArgumentError(f"the global batch {global_batch} is not divisible by the world size {world}: "
                            f"choose a global batch that is a multiple of {world} (e.g. "
                            f"{max(world, global_batch - global_batch % world)})")
    return global_batch // world


def slice_batch(batch: Batch, start: int, stop: int) -> Batch:
    """Rows ``[start, stop)`` of ``batch`` (bags re-based to start at 0)."""
    n = len(batch)
    start, stop = max(0, min(start, n)), max(0, min(stop, n))
    stop = max(start, stop)
    sparse = {}
    for k, (v, o) in batch.sparse.items():
        a = int(o[start]) if start < n else len(v)
        z = int(o[stop]) if stop < n else len(v)
        sparse[k] = (v[a:z], o[start:stop] - a)
    return Batch(batch.dense[start:stop], batch.label[start:stop], sparse,
                 None if batch.group is None else batch.group[start:stop])


def empty_like(batch: Batch) -> Batch:
    """A batch of no rows with ``batch``'s features, dtypes and device."""
    return slice_batch(batch, 0, 0)


def concat_batches(parts: Sequence[Batch]) -> Batch:
    """The rows of ``parts`` one after another (the union batch of one step over the ranks)."""
    sparse = {}
    for k in parts[0].sparse:
        vals, offs, base = [], [], 0
        for p in parts:
            v, o = p.sparse[k]
            vals.append(v)
            offs.append(o + base)
            base += len(v)
        sparse[k] = (torch.cat(vals), torch.cat(offs))
    group = None if parts[0].group is None else torch.cat([cast(torch.Tensor, p.group) for p in parts])
    return Batch(torch.cat([p.dense for p in parts]), torch.cat([p.label for p in parts]), sparse, group)


def rank_bounds(n: int, rank: int, world: int) -> tuple[int, int]:
    """Rank ``rank``'s rows of an ``n``-row global batch: ``np.array_split``'s pieces.

    Example:
        >>> [rank_bounds(5, r, 2) for r in range(2)]
        [(0, 3), (3, 5)]
    """
    return piece_bounds(n, rank, world)


def split_batches(batches: Iterable[Batch], rank: int, world: int) -> Iterator[Batch]:
    """Rank ``rank``'s slice of every global batch (see the module docstring)."""
    for b in batches:
        yield slice_batch(b, *rank_bounds(len(b), rank, world))


class RankSlices:
    """An iterable over rank ``rank``'s slices of ``batches`` (re-iterable, with ``set_epoch``
    passed through), e.g. ``RankSlices(df.fbx.stream(..., batch_size=global_batch), r, W)``;
    every rank reads the whole stream.  Its identity (label, dense, sparse, global batch
    size, seed: :func:`~fbrapids.trainers.run_identity.stream_identity`) is the stream's."""

    #: every rank's step ``k`` is a slice of the same global batch ``k``, whatever the world size
    global_stream = True

    def __init__(self, batches: Iterable[Batch], rank: int, world: int) -> None:
        self.batches, self.rank, self.world = batches, rank, world
        for k, v in stream_identity(batches).items():
            setattr(self, k, v)

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.batches, "set_epoch"):
            self.batches.set_epoch(epoch)

    def __iter__(self) -> Iterator[Batch]:
        return split_batches(self.batches, self.rank, self.world)


def shard_partitions(frame: dd.DataFrame, rank: int, world: int) -> dd.DataFrame:
    """Rank ``rank``'s dask partitions ``rank::world`` of ``frame`` (an empty frame, with
    ``frame``'s columns, when there are fewer partitions than ranks).

    Example:
        >>> import pandas as pd, dask.dataframe as dd
        >>> f = dd.from_pandas(pd.DataFrame({"x": range(10)}), npartitions=3)
        >>> [len(shard_partitions(f, r, 4)) for r in range(4)]
        [4, 3, 3, 0]
    """
    n = frame.npartitions
    if rank < n:
        return frame.partitions[list(range(rank, n, world))]
    return frame.partitions[[0]].head(0, npartitions=1, compute=False)


#: what the leader sends when its stream ended, and when it failed
_END, _FAILED = "end", "failed"


class LeaderFeed:
    """Rank ``rank``'s slices of the global batches that only rank 0 reads (module docstring).

    ``batches``: the global stream on rank 0 (ignored elsewhere: pass None).  Built on every
    rank at once (one ``broadcast_object_list`` shares the stream's identity, so every rank
    records the same global batch size, features and seed).  ``skip_rows``: rows of the
    global stream the leader skips before the first batch it sends (a resume sets it); it
    must end on a batch boundary.  Counters: ``rows`` (rows this rank received) and
    ``global_rows`` (rows of the global batches it received slices of).

    Example (a group of one process):
        >>> import tempfile, pandas as pd, torch.distributed as dist
        >>> dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
        >>> df = pd.DataFrame({"y": [0, 1, 0, 1, 1], "d": [0.1, 0.2, 0.3, 0.4, 0.5], "a": [1, 2, 3, 4, 5]})
        >>> feed = LeaderFeed(df.fbx.stream(label="y", dense=["d"], sparse=["a"], batch_size=2), 0, 1)
        >>> feed.batch_size, [len(b) for b in feed]
        (2, [2, 2, 1])
        >>> feed.skip_rows = 2
        >>> [b.sparse["a"][0].tolist() for b in feed]
        [[3, 4], [5]]
        >>> dist.destroy_process_group()
    """

    global_stream = True

    def __init__(self, batches: Iterable[Batch] | None, rank: int, world: int,
                 group: dist.ProcessGroup | None = None) -> None:
        self.batches = batches if rank == 0 else None
        self.rank, self.world, self.group = rank, world, group
        self.src = 0 if group is None else dist.get_global_rank(group, 0)
        info: list[Any] = [stream_identity(batches) if rank == 0 else None]
        dist.broadcast_object_list(info, src=self.src, group=group)
        for k, v in info[0].items():
            setattr(self, k, v)
        self.skip_rows = 0
        self.rows = 0
        self.global_rows = 0

    def set_epoch(self, epoch: int) -> None:
        if self.batches is not None and hasattr(self.batches, "set_epoch"):
            self.batches.set_epoch(epoch)

    def _exchange(self, parts: list[Any] | None) -> Any:
        out: list[Any] = [None]
        dist.scatter_object_list(out, parts, src=self.src, group=self.group)
        return out[0]

    def __iter__(self) -> Iterator[Batch]:
        return self._lead() if self.rank == 0 else self._follow()

    def _lead(self) -> Iterator[Batch]:
        try:
            for b in self.batches or ():
                n = len(b)
                if self.skip_rows:
                    if n > self.skip_rows:
                        raise CheckpointError(f"the stream's rows do not fall on a batch boundary at row "
                                              f"{self.global_rows + self.skip_rows:,} (a batch of {n} rows "
                                              f"there): the data or the batch size differs from the checkpoint's")
                    self.skip_rows -= n
                    self.global_rows += n
                    continue
                parts = [(n, slice_batch(b, *rank_bounds(n, r, self.world))) for r in range(self.world)]
                self._exchange(parts)
                self.global_rows += n
                self.rows += len(parts[0][1])
                yield parts[0][1]
        except BaseException as exc:  # the others are waiting for a batch: tell them why none comes
            if not isinstance(exc, GeneratorExit):
                self._exchange([(_FAILED, f"{type(exc).__name__}: {exc}")] * self.world)
            raise
        self._exchange([(_END, None)] * self.world)

    def _follow(self) -> Iterator[Batch]:
        while True:
            n, b = self._exchange(None)
            if n == _END:
                return
            if n == _FAILED:
                raise DistributedError(f"rank 0 reads the data for every rank and its stream failed: {b}")
            self.global_rows += n
            self.rows += len(b)
            yield b
