"""``stream()``: partitions of a frame become torch batches, with background prefetch.

A background thread computes partition i+1 (for a dask frame: one pass of
:func:`fbrapids.frames.partition_pass.iter_partitions` on the active scheduler, a distributed
``Client`` included: shared upstream tasks run once per pass) and converts it to host
arrays while the trainer consumes partition i.  A bounded queue sits between them: for a
dask frame the pass computes ``max(1, prefetch // 2)`` partitions together and the queue
holds ``max(1, prefetch - that)`` items; for other sources it holds ``prefetch`` items.
Unshuffled, an item is a partition's rows.  Shuffled, an item is one of the buffer's output
chunks (what it emits after each arrival unit, a whole number of batches, and at the end of
the pass every row it still holds), so the producer may wait on a full queue in the middle
of a partition.  Rows are optionally shuffled through a buffer of
``shuffle_buffer`` rows filled as partitions arrive (:mod:`fbrapids.trainers.shuffle`:
training starts after the first partition, the next ones are extracted meanwhile), in the
producer thread, in an order fixed by ``seed`` and the epoch (:meth:`BatchStream.set_epoch`;
iterating twice in one epoch repeats the order) and by the rows alone, not by how they were
partitioned.  The options are one :class:`StreamConfig`.
Batches of ``batch_size`` rows carry across partition boundaries; the last one may be
shorter (``drop_last=False``).  Empty partitions are skipped and counted.  cudf partitions
bound for a CUDA device (``device=``, else :func:`fbrapids.trainers.device.resolve_device`)
become batches on the device through DLPack, built on a side CUDA stream while the previous
partition trains (:mod:`fbrapids.trainers.device_batch`); host partitions become batches in
pinned host memory when a GPU is present (and are moved to ``device`` when one is given).

NaN / inf in dense features: ``nan="error"`` (the default) raises naming the column, the
count and the first row; ``nan="zero"`` replaces them with 0 and counts them in
``stats["nan_replaced"]``.

Example:
    >>> import pandas as pd, pyarrow as pa, fbrapids
    >>> df = pd.DataFrame({"click": [0, 1, 0], "d0": [0.1, 0.2, 0.3], "ad": [7, 8, 9],
    ...                    "toks": pd.Series([[1, 2], [3], []], dtype=pd.ArrowDtype(pa.list_(pa.int64())))})
    >>> batches = df.fbx.stream(label="click", dense=["d0"], sparse=["ad", "toks"], batch_size=2)
    >>> [len(b) for b in batches], batches.stats["partitions"]
    ([2, 1], 1)
    >>> b = next(iter(batches)); b.sparse["toks"][0].tolist(), b.sparse["toks"][1].tolist()
    ([1, 2, 3], [0, 2])
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Sequence, TypeAlias, TypeGuard, Union

import numpy as np
import pandas as pd
import torch

from fbrapids.errors import ArgumentError, FbrapidsError, NotFoundError
from fbrapids.frames import backend as _backend
from fbrapids.frames.backend import EagerFrame
from fbrapids.frames.partition_pass import iter_partitions
from fbrapids.trainers.batch import Batch, Columns, sparse_column
from fbrapids.trainers.device import resolve_device
from fbrapids.trainers.device_batch import TensorColumns, device_columns
from fbrapids.trainers.labels import check_label_range, check_labels
from fbrapids.trainers.nan_policy import STREAM_NAN, check_nan
from fbrapids.trainers.ranges import check_ranges, validate_ranges
from fbrapids.trainers.shuffle import MAX_BYTES, ShuffleBuffer

if TYPE_CHECKING:  # (annotations only: no import at run time)

    from fbrapids.frames.backend import FrameLike

log = logging.getLogger(__name__)

_DONE = object()


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


#: what a :class:`BatchStream` reads: a pandas / cudf / dask frame, or an iterable of eager frames
StreamSource: TypeAlias = Union["FrameLike", Iterable[EagerFrame]]


def _is_eager(obj: object) -> TypeGuard[EagerFrame]:
    return isinstance(obj, pd.DataFrame) or _backend.is_gpu_object(obj)




@dataclass(frozen=True)
class StreamConfig:
    """How :class:`BatchStream` turns frames into batches (see :func:`stream` for each option).

    Example:
        >>> StreamConfig("click", sparse=("ad",), batch_size=512).with_(shuffle_buffer=1 << 16).shuffle_buffer
        65536
    """

    label: str
    dense: tuple[str, ...] = ()
    sparse: tuple[str, ...] = ()
    batch_size: int = 4096
    shuffle_buffer: int = 0
    seed: int = 0
    prefetch: int = 2
    device: str | torch.device | None = None
    group: str | None = None
    nan: str = "error"
    drop_last: bool = False
    pin_memory: bool | None = None
    persist: bool = False
    label_range: tuple[float, float] | None = None
    ranges: Mapping[str, tuple[float, float]] | None = None
    strict: bool = False
    shuffle_bytes: int = MAX_BYTES

    def __post_init__(self) -> None:
        _check_names(self.label, self.dense, self.sparse, self.group)
        object.__setattr__(self, "dense", tuple(self.dense))
        object.__setattr__(self, "sparse", tuple(self.sparse))
        for name, lo in (("batch_size", 1), ("prefetch", 1), ("shuffle_buffer", 0), ("shuffle_bytes", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ArgumentError(f"{name} must be an int >= {lo}, got {value!r}")
            if value < lo:
                raise ArgumentError(f"{name} must be >= {lo}, got {value}")
        check_nan(self.nan, STREAM_NAN, "stream")

    def with_(self, **changes: Any) -> "StreamConfig":
        """A copy with some options changed."""
        return dataclasses.replace(self, **changes)


class BatchStream:
    """An iterable of :class:`~fbrapids.trainers.batch.Batch`; each iteration re-reads the source.

    ``stats`` counts partitions computed, empty partitions, rows, batches, and dense values
    replaced under ``nan="zero"``; ``shuffle_peak_rows`` is the most rows the shuffle buffer
    held in the last pass; ``producer_threads`` holds the names of the threads that computed
    partitions.  The config's options read as attributes (``batches.batch_size``).
    """

    def __init__(self, source: StreamSource, config: StreamConfig) -> None:
        self.source, self.config = source, config
        self._known_rows: int | None = None
        self._seen = (0, 0)  # (partitions, rows) the producer has read in the pass under way
        self.label_range = check_label_range(config.label_range)
        self.ranges = validate_ranges(config.ranges, list(config.dense))
        self.out_of_range: dict[str, int] = {}  # per dense column, values outside its declared range
        self.pin_memory = torch.cuda.is_available() if config.pin_memory is None else bool(config.pin_memory)
        self.epoch = 0
        self.stats: dict[str, int] = {}
        self.shuffle_peak_rows = 0
        self.producer_threads: set[str] = set()
        self._check_columns()
        self._check_eager_ids()

    def __getattr__(self, name: str) -> Any:  # the config's options: label, dense, batch_size, seed, ...
        config = self.__dict__.get("config")
        if config is None or name.startswith("_") or name not in StreamConfig.__dataclass_fields__:
            raise AttributeError(name)
        value = getattr(config, name)
        return list(value) if name in ("dense", "sparse") else value

    def set_epoch(self, epoch: int) -> None:
        """Shuffle epoch ``epoch`` in its own order (fixed by ``(seed, epoch)``); ``fit`` calls it."""
        self.epoch = int(epoch)

    @property
    def features(self) -> list[str]:
        return list(self.sparse)

    def expected_batches(self) -> int | None:
        """Batches one pass yields: exact for an eager frame or a list of them; for a dask
        frame known once a pass has completed (None before).  See :meth:`estimated_batches`
        for the bars."""
        rows, src = self._known_rows, self.source
        if rows is None and _is_eager(src):
            rows = len(src)
        elif rows is None and isinstance(src, (list, tuple)) and all(_is_eager(part) for part in src):
            rows = sum(len(part) for part in src)  # a list of eager frames: known up front
        return None if rows is None else self._batches(rows)

    def estimated_batches(self) -> int | None:
        """What progress bars show as the total: :meth:`expected_batches` when known; during
        a first pass over a source whose partition count is known (a dask frame's
        ``npartitions``, a list of frames, anything with ``npartitions``), the rows read so far
        per partition x the partitions, refined as each partition arrives and exact once the
        last one has; None before the first partition of a first pass.

        Example:
            >>> import pandas as pd, dask.dataframe as dd
            >>> frame = dd.from_pandas(pd.DataFrame({"click": [0, 1] * 6, "ad": range(12)}), npartitions=3)
            >>> s = stream(frame, label="click", sparse=["ad"], batch_size=2, prefetch=1)
            >>> s.estimated_batches(), next(iter(s)).label.tolist(), s.estimated_batches()
            (None, [0.0, 1.0], 6)
        """
        exact = self.expected_batches()
        if exact is not None:
            return exact
        parts, rows = self._seen
        total = self._partition_count()
        if not parts or total is None:
            return None
        return self._batches(rows if parts >= total else round(rows * total / parts))

    def _batches(self, rows: int) -> int:
        return rows // self.batch_size if self.drop_last else -(-rows // self.batch_size)

    def _partition_count(self) -> int | None:
        n = getattr(self.source, "npartitions", None)
        if n is None and isinstance(self.source, (list, tuple)):
            n = len(self.source)
        return None if n is None else int(n)

    def _check_columns(self) -> None:
        cols = getattr(self.source, "columns", None)
        if cols is None:
            return
        wanted = [self.label, *self.dense, *self.sparse] + ([self.group] if self.group else [])
        missing = [c for c in wanted if c not in cols]
        if missing:
            raise NotFoundError(f"stream: columns {missing} are not in the frame (it has {list(cols)})")

    def _check_eager_ids(self) -> None:
        """A pandas source's sparse columns checked now, before any work (a null id, a
        non-integer column: an error naming the column and row), not in the producer."""
        if isinstance(self.source, pd.DataFrame):
            for name in self.sparse:
                sparse_column(self.source[name], name)

    # -- producer ------------------------------------------------------------------------
    def _pass_window(self) -> int:
        """Partitions of a dask pass computed together: half of ``prefetch``; the queue holds
        the rest as items (partitions, or shuffled, the buffer's chunks: module docstring)."""
        return max(1, self.prefetch // 2)

    def _queue_size(self) -> int:
        return max(1, self.prefetch - self._pass_window()) if _backend.is_dask(self.source) else self.prefetch

    def _partitions(self) -> Iterator[FrameLike]:
        src = self.source
        if _backend.is_dask_frame(src):
            if self.persist:  # held whole; shared work already runs once per pass without it
                src = src.persist()
            # one pass: the graph optimised once, tasks shared by several partitions (a join's
            # build side, a shuffle) computed once; the pass window and the queue share ``prefetch``
            yield from iter_partitions(src, window=self._pass_window())
        elif _is_eager(src):
            yield src
        else:  # any iterable of eager frames
            yield from src

    def _produce(self, q: queue.Queue, stop: threading.Event) -> None:
        self.producer_threads.add(threading.current_thread().name)

        def put(item: object) -> bool:
            while not stop.is_set():
                try:
                    q.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        side = self._side_stream()
        shuffle = self._shuffler()  # host rows: shuffled here, beside the trainer
        try:
            for i, part in enumerate(self._partitions()):
                on_device = side is not None and _backend.is_gpu_object(part)
                host: pd.DataFrame | None = None if on_device else _backend.to_host(part)  # (pandas: a host copy)
                if host is not None:
                    part = host
                self.stats["partitions"] += 1
                if len(part) == 0:
                    self.stats["empty_partitions"] += 1
                    self._seen = (self.stats["partitions"], self.stats["rows"])
                    continue
                check_labels(part[self.label], self.label, i, self.label_range)
                cols: Columns | TensorColumns
                if host is None:  # DLPack from the cudf partition, on the side stream, while i - 1 trains
                    cols = self._device_columns(part, i, side)
                else:
                    cols = Columns.from_frame(host, self.label, self.dense, self.sparse, self.group, self.nan,
                                              part=i)
                self.stats["nan_replaced"] += cols.nan_replaced
                if self.ranges:
                    n = check_ranges(cols.dense, self.dense, self.ranges, self.strict, i, self.out_of_range)
                    if n:
                        log.warning("partition %d: %d dense value(s) outside their declared ranges (%s)", i, n,
                                    self.out_of_range)
                self.stats["rows"] += len(cols)
                self._seen = (self.stats["partitions"], self.stats["rows"])  # one assignment: read whole
                chunks = shuffle.add(cols) if shuffle is not None and not on_device else [cols]
                if not all(put(c) for c in chunks):
                    return
            for chunk in shuffle.finish() if shuffle is not None else []:
                if not put(chunk):
                    return
            if shuffle is not None:
                self.shuffle_peak_rows = shuffle.peak_rows
            put(_DONE)
        except BaseException as exc:  # handed to the consumer, raised there
            put(_Failure(exc))

    def _side_stream(self) -> torch.cuda.Stream | None:
        """A CUDA stream for building device batches, when the batches are to live on a CUDA
        device (``device=``, else the device rule) and cudf partitions arrive; else None."""
        if not torch.cuda.is_available():
            return None
        dev = resolve_device(self.device)
        return torch.cuda.Stream(device=dev) if dev.type == "cuda" else None

    def _device_columns(self, part: FrameLike, i: int, side: torch.cuda.Stream | None) -> TensorColumns:
        import cupy as cp

        cp.cuda.Stream.null.synchronize()  # the partition's own (cudf, default-stream) work is done
        with torch.cuda.stream(side):
            cols = device_columns(part, self.label, self.dense, self.sparse, self.group, self.nan, part=i)
            cols.ready = torch.cuda.Event()
            cols.ready.record(side)
        return cols

    def _shuffler(self) -> ShuffleBuffer | None:
        """This pass's shuffle buffer (None without shuffling), its draws fixed by (seed, epoch)."""
        if not self.config.shuffle_buffer:
            return None
        return ShuffleBuffer(self.config.shuffle_buffer, self.batch_size, np.random.default_rng([self.seed, self.epoch]),
                             self.config.shuffle_bytes)

    # -- consumer ------------------------------------------------------------------------
    def _finish(self, cols: Columns | TensorColumns) -> Batch:
        b = cols.to_batch()
        if self.pin_memory and not isinstance(cols, TensorColumns):
            b = b.pin_memory()
        if self.device is not None:
            b = b.to(self.device)
        self.stats["batches"] += 1
        return b

    def __iter__(self) -> Iterator[Batch]:
        self.stats = {"partitions": 0, "empty_partitions": 0, "rows": 0, "batches": 0, "nan_replaced": 0}
        self._seen = (0, 0)
        self.out_of_range = {}
        q: queue.Queue = queue.Queue(maxsize=self._queue_size())
        stop = threading.Event()
        worker = threading.Thread(target=self._produce, args=(q, stop), name="fbrapids-stream-producer", daemon=True)
        worker.start()
        shuffle = self._shuffler()  # device rows (cudf partitions) are shuffled here; host rows came shuffled
        batches = _Batcher(self.batch_size, self.drop_last)
        try:
            while True:
                item = q.get()
                if isinstance(item, _Failure):
                    if isinstance(item.exc, FbrapidsError):  # one clear line, not the producer thread's frames
                        raise item.exc.with_traceback(None)
                    raise item.exc
                if item is _DONE:
                    self._known_rows = self.stats["rows"]  # a whole pass: its batch count is known now
                    break
                chunks = shuffle.add(item) if shuffle is not None and isinstance(item, TensorColumns) else [item]
                for chunk in chunks:
                    for cols in batches.add(chunk):
                        yield self._finish(cols)
            if shuffle is not None and shuffle.arrived + shuffle.pending_rows:
                self.shuffle_peak_rows = max(self.shuffle_peak_rows, shuffle.peak_rows)
            for chunk in shuffle.finish() if shuffle is not None else []:
                for cols in batches.add(chunk):
                    yield self._finish(cols)
            for cols in batches.finish():
                yield self._finish(cols)
        finally:
            stop.set()
            worker.join(timeout=30)


class _Batcher:
    """Runs of rows cut into batches of ``batch_size`` rows, carried across runs; the last
    one short unless ``drop_last``.

    Example:
        >>> import numpy as np
        >>> c = Columns(np.zeros((5, 1), np.float32), np.zeros(5, np.float32), {})
        >>> b = _Batcher(2, drop_last=False)
        >>> [len(x) for x in b.add(c)], [len(x) for x in b.add(c)], [len(x) for x in b.finish()]
        ([2, 2], [2, 2, 2], [])
    """

    def __init__(self, batch_size: int, drop_last: bool) -> None:
        self.batch_size, self.drop_last = batch_size, drop_last
        self.rest: Any = None

    def add(self, cols: Any) -> list[Any]:
        buf = cols if self.rest is None or not len(self.rest) else type(cols).concat([self.rest, cols])
        bs, n = self.batch_size, len(buf)
        full = n // bs * bs
        self.rest = buf.slice(full, n) if full < n else None
        return [buf.slice(s, s + bs) for s in range(0, full, bs)]

    def finish(self) -> list[Any]:
        rest, self.rest = self.rest, None
        return [] if rest is None or not len(rest) or self.drop_last else [rest]


def _check_names(label: object, dense: object, sparse: object, group: object) -> None:
    """The stream's column arguments are names: ``label`` / ``group`` a str, ``dense`` /
    ``sparse`` lists of str (a bare str is refused: ``dense="slot"`` is not the columns
    ``s``, ``l``, ``o``, ``t``)."""
    from fbrapids.errors import InputTypeError

    if not isinstance(label, str):
        raise InputTypeError(f"stream: label must be a column name (str), got {label!r}")
    if group is not None and not isinstance(group, str):
        raise InputTypeError(f"stream: group must be a column name (str) or None, got {group!r}")
    for what, names in (("dense", dense), ("sparse", sparse)):
        if isinstance(names, str):
            raise InputTypeError(f"stream: {what} must be a list of column names, got the str {names!r} "
                                 f"(write {what}=[{names!r}])")
        if not isinstance(names, Iterable):  # (an object with __iter__)
            raise InputTypeError(f"stream: {what} must be a list of column names, got {names!r}")
        bad = [n for n in names if not isinstance(n, str)]
        if bad:
            raise InputTypeError(f"stream: {what} must hold column names (str), got {bad[0]!r}")


def stream(df: _backend.FrameLike, label: str, dense: Sequence[str] = (), sparse: Sequence[str] = (),
           batch_size: int = 4096, shuffle_buffer: int = 0, seed: int = 0, prefetch: int = 2,
           device: str | torch.device | None = None, group: str | None = None, nan: str = "error",
           drop_last: bool = False, pin_memory: bool | None = None, persist: bool = False,
           label_range: tuple[float, float] | None = None, ranges: Mapping[str, tuple[float, float]] | None = None,
           strict: bool = False, *, shuffle_window: int | None = None,
           shuffle_bytes: int = MAX_BYTES) -> BatchStream:
    """Batches for torch from a pandas / cudf frame, a dask frame, or an iterable of frames.

    Args:
        df: the frame.  Dask frames are computed one partition at a time in a background
            thread, ``prefetch`` partitions ahead.
        label: the label column: 0/1 by default (anything else is a ``LabelError``
            naming the column, the partition and a bad value; strings too).
        dense: numeric columns, stacked into ``batch.dense`` ``[B, len(dense)]`` float32.
        sparse: integer id columns (int64 / uint64 scalars) or ``list<int64>`` columns;
            each becomes ``batch.sparse[name] = (values, offsets)``.
        batch_size: rows per batch.
        shuffle_buffer: shuffle rows through a buffer of this many rows, filled as partitions
            arrive (0: keep order): :mod:`fbrapids.trainers.shuffle` (the first batch after
            the first 2^15 rows; the order depends on the rows and ``seed`` only).
        seed: fixes the shuffle order (with the epoch).
        prefetch: work computed ahead of the trainer: for a dask frame, the pass's window
            of partitions and the bounded queue share it (a queue item is a partition's
            rows, or with ``shuffle_buffer`` one of the buffer's output chunks).
        device: move batches there (``"cuda"``), from pinned memory.
        group: a column carried as ``batch.group`` (e.g. the user id, for GAUC).
        nan: ``"error"`` or ``"zero"`` for NaN / inf in dense features
            (:mod:`fbrapids.trainers.nan_policy`).
        drop_last: drop a final short batch.
        pin_memory: default: pin when CUDA is available.
        persist: ``persist()`` a dask frame first (it is then held whole in memory; not
            needed for shared work: every upstream task already runs once per pass).
        label_range: ``(lo, hi)``: soft labels, any value in that closed range (e.g.
            ``(0, 1)`` for click rates) instead of 0/1.
        ranges: declared ``(lo, hi)`` (closed) of dense columns: values outside are counted
            (per column in the stream's ``out_of_range``, logged per partition), or with
            ``strict=True`` a :class:`~fbrapids.errors.RangeError` naming the column, the
            partition, the count and the first row.
        strict: see ``ranges``.
        shuffle_window: the older name of ``shuffle_buffer`` (the same meaning now).
        shuffle_bytes: the most bytes of rows the shuffle buffer holds (it emits more rows
            rather than hold more; default 256 MiB).

    Example:
        >>> import pandas as pd, dask.dataframe as dd
        >>> pdf = pd.DataFrame({"click": [0, 1, 1, 0], "d": [1.0, 2.0, 3.0, 4.0], "ad": [1, 2, 3, 4]})
        >>> s = stream(dd.from_pandas(pdf, npartitions=2), label="click", dense=["d"], sparse=["ad"], batch_size=3)
        >>> [b.label.tolist() for b in s], s.config.batch_size
        ([[0.0, 1.0, 1.0], [0.0]], 3)
    """
    if shuffle_window is not None:
        if shuffle_buffer and shuffle_buffer != shuffle_window:
            raise ArgumentError(f"stream: shuffle_window ({shuffle_window}) is shuffle_buffer's older name, and "
                                f"shuffle_buffer={shuffle_buffer} was given too")
        shuffle_buffer = shuffle_window
    _check_names(label, dense, sparse, group)
    config = StreamConfig(label=label, dense=tuple(dense), sparse=tuple(sparse), batch_size=batch_size,
                          shuffle_buffer=shuffle_buffer, seed=seed, prefetch=prefetch, device=device, group=group,
                          nan=nan, drop_last=drop_last, pin_memory=pin_memory, persist=persist,
                          label_range=label_range, ranges=ranges, strict=strict, shuffle_bytes=shuffle_bytes)
    return BatchStream(df, config)
