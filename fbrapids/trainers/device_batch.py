"""Training batches built on the GPU: cudf partitions to torch tensors through DLPack,
with no pass through pandas or host memory.

:func:`device_columns` reads only the named columns of a cudf frame: dense and label
columns are cast to float32 on the device (nulls become NaN, then the ``nan`` policy) and
handed to torch by ``cupy.asarray`` (the columns' ``__cuda_array_interface__``, no copy)
and ``torch.from_dlpack``; list<int> sparse columns give their offsets and values children
through ``Series.to_pylibcudf()`` (sliced columns respected: list offsets are INT32 and
absolute into the values child, see ``shared/gpu/CUDF-FACTS.md`` 1.1, 4); scalar id columns
are bags of one.  :class:`TensorColumns` then cuts batches with the same slice / take /
concat as the host :class:`~fbrapids.trainers.batch.Columns`, in torch on the device
(and, for tests, on the CPU).

Example:
    >>> import torch
    >>> c = TensorColumns(torch.zeros(3, 1), torch.tensor([0., 1., 0.]),
    ...                   {"t": (torch.tensor([5, 6, 7]), torch.tensor([0, 2, 2, 3]))})
    >>> b = c.take(torch.tensor([2, 0])).to_batch()
    >>> b.sparse["t"][0].tolist(), b.sparse["t"][1].tolist()
    ([7, 5, 6], [0, 1])
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Literal, Sequence

import numpy as np
import numpy.typing as npt
import torch

from fbrapids.errors import BatchError, ColumnTypeError
from fbrapids.frames.backend import int_dtype_of_type_id, is_list_dtype
from fbrapids.trainers.batch import Batch, concat_parts

if TYPE_CHECKING:  # (annotations only: no import at run time)
    import pylibcudf as plc

    from fbrapids.frames.backend import FrameLike, SeriesLike

# the device GAUC group key of non-integer (or null-holding) group columns: cudf's 64-bit
# ``hash_values`` method (the host hashes with pandas' 64-bit ``hash_pandas_object``; the
# keys differ, the groups they make are the same up to 64-bit collisions)
GROUP_HASH = "xxhash64"


def ragged_take_t(values: torch.Tensor, offsets: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows ``idx`` of a ragged column (values + n+1 offsets), in torch on their device.

    Example:
        >>> v, o = ragged_take_t(torch.tensor([1, 2, 3]), torch.tensor([0, 1, 3]), torch.tensor([1, 0]))
        >>> v.tolist(), o.tolist()
        ([2, 3, 1], [0, 2, 3])
    """
    lengths = offsets[1:] - offsets[:-1]
    new_len = lengths[idx]
    new_off = torch.zeros(len(idx) + 1, dtype=torch.int64, device=offsets.device)
    torch.cumsum(new_len, 0, out=new_off[1:])
    total = int(new_off[-1])
    pos = torch.repeat_interleave(offsets[:-1][idx] - new_off[:-1], new_len, output_size=total)
    pos += torch.arange(total, dtype=torch.int64, device=offsets.device)
    return values[pos], new_off


class CudaStreams:
    """The CUDA stream calls :meth:`TensorColumns.wait` makes, in one place: the ordering
    logic is tested on the CPU by recording them (``device_batch.STREAMS``)."""

    @staticmethod
    def current(device: torch.device) -> torch.cuda.Stream:
        return torch.cuda.current_stream(device)

    @staticmethod
    def wait_event(stream: torch.cuda.Stream, event: torch.cuda.Event) -> None:
        stream.wait_event(event)

    @staticmethod
    def copy(stream: torch.cuda.Stream, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` copied into memory allocated on ``stream``, by a kernel on ``stream``."""
        with torch.cuda.stream(stream):
            return tensor.clone()

    @staticmethod
    def record_event(stream: torch.cuda.Stream) -> torch.cuda.Event:
        event = torch.cuda.Event()
        event.record(stream)
        return event

    @staticmethod
    def done(event: torch.cuda.Event) -> bool:
        return bool(event.query())


STREAMS = CudaStreams()


class KeepAlive:
    """Buffers held until a CUDA event has passed: what a side stream built (and the cudf
    memory it read) stays referenced until the consuming stream has copied it, so no
    allocator hands the memory out again while queued work still reads it.

    torch's ``record_stream`` does that for torch's own caching allocator only.  With torch
    allocating through RMM (``rmm.allocators.torch.rmm_torch_allocator``, the GPU backend's
    default) the allocator has an allocate and a deallocate hook and nothing else, so
    ``record_stream`` does nothing and a freed block goes back at once to the pool of the
    stream that allocated it; cudf's buffers are freed on cudf's stream.  :meth:`release`
    runs at every :meth:`TensorColumns.wait`; a held entry costs one event query.

    Example:
        >>> keep = KeepAlive(done=lambda event: event == "passed")
        >>> keep.hold("pending", [object()]); keep.hold("passed", [object()]); len(keep)
        1
    """

    def __init__(self, done: Callable[[torch.cuda.Event], bool] | None = None) -> None:
        self._done = done
        self._held: list[tuple[torch.cuda.Event, list[object]]] = []
        self._lock = threading.Lock()

    def hold(self, event: torch.cuda.Event, objects: Sequence[object]) -> None:
        """Keep ``objects`` referenced until ``event`` has passed (:meth:`release` drops them then)."""
        with self._lock:
            self._held.append((event, list(objects)))
        self.release()

    def release(self) -> int:
        """Drop what the events that have passed held; returns the entries still held."""
        done = self._done or STREAMS.done
        with self._lock:
            self._held = [(e, objs) for e, objs in self._held if not done(e)]
            return len(self._held)

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)


#: this process's side-stream buffers held until their consumer has copied them
KEEP = KeepAlive()


@dataclass
class TensorColumns:
    """Torch tensors of a run of rows (one device): dense ``[n, d]`` float32, labels,
    sparse name -> ``(values int64, offsets [n + 1])``, group; ``ready`` is the CUDA event
    after which they may be read (recorded on the side stream that built them); ``sources``
    what the build read that no tensor here references (held with them, see :meth:`wait`).

    Every reader waits for it first: :meth:`slice`, :meth:`take`, :meth:`concat` and
    :meth:`to_batch` read the tensors on the current stream, so each calls :meth:`wait`:
    the current stream waits for the event and copies every tensor into memory allocated on
    the current stream (freed in that stream's order by whichever allocator torch uses,
    RMM's included), and the built buffers are held (:data:`KEEP`) until an event after the
    copies has passed: no reliance on ``record_stream``.  What the readers return was made
    on the current stream and needs no event."""

    dense: torch.Tensor
    label: torch.Tensor
    sparse: dict[str, tuple[torch.Tensor, torch.Tensor]]
    group: torch.Tensor | None = None
    nan_replaced: int = field(default=0, compare=False)
    ready: torch.cuda.Event | None = field(default=None, compare=False)
    sources: list[torch.Tensor] = field(default_factory=list, compare=False, repr=False)

    def __len__(self) -> int:
        return int(self.label.shape[0])

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor the columns hold."""
        out = [self.dense, self.label] + [t for pair in self.sparse.values() for t in pair]
        return out + ([self.group] if self.group is not None else [])

    def wait(self) -> "TensorColumns":
        """Make the columns the current CUDA stream's (see the class doc); once only."""
        if self.ready is None:
            if len(KEEP):
                KEEP.release()
            return self
        stream = STREAMS.current(self.label.device)
        STREAMS.wait_event(stream, self.ready)
        built = self.tensors() + self.sources

        def mine(t: torch.Tensor) -> torch.Tensor:
            return STREAMS.copy(stream, t)

        self.dense, self.label = mine(self.dense), mine(self.label)
        self.sparse = {k: (mine(v), mine(o)) for k, (v, o) in self.sparse.items()}
        self.group = None if self.group is None else mine(self.group)
        KEEP.hold(STREAMS.record_event(stream), built)
        self.ready, self.sources = None, []
        return self

    def slice(self, start: int, stop: int) -> "TensorColumns":
        self.wait()
        sp = {}
        for k, (v, o) in self.sparse.items():
            oo = o[start : stop + 1]
            lo, hi = (int(x) for x in oo[[0, -1]].tolist())
            sp[k] = (v[lo:hi], oo - lo)
        g = None if self.group is None else self.group[start:stop]
        return TensorColumns(self.dense[start:stop], self.label[start:stop], sp, g)

    def take(self, idx: torch.Tensor | npt.ArrayLike) -> "TensorColumns":
        self.wait()
        idx = torch.as_tensor(np.asarray(idx) if not isinstance(idx, torch.Tensor) else idx,
                              dtype=torch.int64).to(self.label.device)
        sp = {k: ragged_take_t(v, o, idx) for k, (v, o) in self.sparse.items()}
        g = None if self.group is None else self.group[idx]
        return TensorColumns(self.dense[idx], self.label[idx], sp, g)

    @staticmethod
    def concat(parts: Sequence["TensorColumns"]) -> "TensorColumns":
        parts = [p.wait() for p in parts if len(p)] or [p.wait() for p in parts[:1]]
        if len(parts) == 1:
            return parts[0]
        return TensorColumns(*concat_parts(parts, torch.cat))

    @staticmethod
    def gather(parts: Sequence["TensorColumns"], which: npt.ArrayLike, rows: npt.ArrayLike) -> "TensorColumns":
        """Row ``rows[i]`` of ``parts[which[i]]`` as row ``i`` (the shuffle buffer's output): the
        parts named joined (:meth:`concat`), then the rows taken."""
        which, rows = np.asarray(which, dtype=np.int64), np.asarray(rows, dtype=np.int64)
        used = np.unique(which)
        sizes = np.array([len(parts[int(p)]) for p in used], dtype=np.int64)
        starts = np.zeros(len(parts), dtype=np.int64)
        starts[used] = np.cumsum(sizes) - sizes  # each used part's first row in the join
        return TensorColumns.concat([parts[int(p)] for p in used]).take(starts[which] + rows)

    def to_batch(self) -> Batch:
        """The batch (offsets without the final end), on the columns' device."""
        self.wait()
        sp = {k: (v, o[:-1]) for k, (v, o) in self.sparse.items()}
        return Batch(self.dense, self.label, sp, self.group)


def _where(part: int | None) -> str:
    return f" in partition {part}" if part is not None else ""


def _tensor(series: SeriesLike, dtype: Literal["float32", "int64", "uint64"]) -> torch.Tensor:
    """A cudf column without nulls as a torch tensor on its device (CAI -> cupy -> DLPack)."""
    import cupy as cp

    return torch.from_dlpack(cp.asarray(series.astype(dtype)))


def _plc_ints(col: plc.Column, start: int, stop: int) -> torch.Tensor:
    """Elements ``start .. stop`` of a fixed-width pylibcudf column (no nulls) as an int64 tensor."""
    import cupy as cp

    # signed or not as the column's type says (a UINT32 id above 2**31 stays positive); uint64
    # keeps its bits as int64, as the host path does (the store reads them back as uint64)
    dtype = int_dtype_of_type_id(col.type().id().name)
    span = col.data()
    mem = cp.cuda.UnownedMemory(span.ptr, span.size, span)
    arr = cp.ndarray((col.offset() + stop,), dtype=dtype, memptr=cp.cuda.MemoryPointer(mem, 0))
    part = arr[col.offset() + start : col.offset() + stop]
    return torch.from_dlpack(part.view(cp.int64) if dtype == np.uint64 else part.astype(cp.int64))


def sparse_kind(dtype: object, name: str = "?", part: int | None = None) -> str:
    """How a sparse feature's column of ``dtype`` becomes a bag: ``"list"`` (a LIST column:
    ``cudf.ListDtype``, or the pandas Arrow list dtype cudf keeps on columns made from pandas
    -- host round trips, ``categorify`` of lists, JSON lines read on the host) or ``"ids"``
    (an integer column, bags of one).

    Example:
        >>> import pyarrow as pa, pandas as pd
        >>> sparse_kind(pd.ArrowDtype(pa.list_(pa.int64()))), sparse_kind(np.dtype("uint32"))
        ('list', 'ids')
    """
    if is_list_dtype(dtype):
        return "list"
    if getattr(dtype, "kind", None) not in ("i", "u"):
        raise ColumnTypeError(f"sparse feature {name!r}: expected an integer id column or a list<int> column, got dtype "
                              f"{dtype}{_where(part)}")
    return "ids"


def _sparse(s: SeriesLike, name: str, part: int | None, held: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """A sparse column's (values, offsets) tensors; what they were computed from goes to ``held``."""
    n = len(s)
    if sparse_kind(s.dtype, name, part) == "list":
        col, _ = s.to_pylibcudf()
        offs_col, vals_col = col.child(0), col.child(1)
        if vals_col.null_count():
            raise BatchError(f"sparse feature {name!r}: {vals_col.null_count()} null ids inside lists{_where(part)}")
        offs = _plc_ints(offs_col, col.offset(), col.offset() + n + 1)  # INT32, absolute into the child
        lo, hi = (int(x) for x in offs[[0, -1]].tolist())
        held.append(offs)  # read by the subtraction queued on this stream
        return _plc_ints(vals_col, lo, hi), offs - lo  # null rows are empty bags in libcudf
    if s.null_count:
        raise BatchError(f"sparse feature {name!r}: {s.null_count} null ids{_where(part)}; fill them first")
    vals = _tensor(s, "uint64" if s.dtype == np.uint64 else "int64")
    if vals.dtype != torch.int64:  # uint64: the same bits as int64 (the store reads them back as uint64)
        vals = vals.view(torch.int64)
    return vals, torch.arange(n + 1, dtype=torch.int64, device=vals.device)


def _dense(df: FrameLike, cols: Sequence[str], nan: str, part: int | None, device: torch.device,
           held: list[torch.Tensor]) -> tuple[torch.Tensor, int]:
    """The dense columns stacked as float32 and the values replaced; the per-column tensors
    (cudf's memory, read by kernels queued on this stream) go to ``held``."""
    import numpy as _np

    if not cols:
        return torch.zeros((len(df), 0), dtype=torch.float32, device=device), 0
    parts, replaced = [], 0
    for c in cols:
        s = df[c]
        if s.dtype.kind not in "iufb":
            raise ColumnTypeError(f"dense feature {c!r}: expected a numeric column, got dtype {s.dtype}{_where(part)}")
        x = s.astype("float32")
        if x.null_count:
            x = x.fillna(_np.nan)
        t = _tensor(x, "float32")
        held.append(t)
        bad = ~torch.isfinite(t)
        k = int(bad.sum())
        if k:
            if nan == "error":
                first = int(torch.nonzero(bad)[0])
                raise BatchError(f"dense feature {c!r}: {k} NaN/inf/null values{_where(part)}, first at row "
                                 f"{df.index[first]!r}; clean them, or stream with nan='zero'")
            t = torch.where(bad, torch.zeros((), device=t.device), t)
            replaced += k
        parts.append(t)
    return torch.stack(parts, dim=1), replaced


def device_columns(df: FrameLike, label: str, dense: Sequence[str], sparse: Sequence[str], group: str | None = None,
                   nan: str = "error", part: int | None = None) -> TensorColumns:
    """The named columns of a cudf frame as :class:`TensorColumns` on its device (see the
    module docstring); the labels are checked for nulls like the host path."""
    y = df[label]
    if y.null_count:
        raise BatchError(f"label {label!r}: {y.null_count} NaN/null values{_where(part)}")
    lab = _tensor(y, "float32")
    held: list[torch.Tensor] = []  # what the build's queued kernels read that no result references
    d, replaced = _dense(df, dense, nan, part, lab.device, held)
    sp = {name: _sparse(df[name], name, part, held) for name in sparse}
    g = None
    if group is not None:
        gs = df[group]
        if gs.dtype.kind in "iu" and not gs.null_count:
            g = _tensor(gs, "int64")
        else:  # strings etc.: a 64-bit hash on the device (cudf's default murmur3 has 32 bits: users collide)
            g = _tensor(gs.hash_values(method=GROUP_HASH), "uint64").view(torch.int64)
    return TensorColumns(d, lab, sp, g, replaced, sources=held)
