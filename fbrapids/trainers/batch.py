"""Training batches, and the columnar host arrays they are cut from.

A partition (a pandas frame) becomes a :class:`Columns`: dense float32 ``[n, d]``,
labels, an optional group key, and per sparse feature a ragged pair (values int64,
offsets ``[n + 1]``).  List columns (``pd.ArrowDtype(pa.list_(pa.int64()))``) are read
from their Arrow buffers with pyarrow compute, with no Python work per row; scalar
integer columns become lists of length one.  Ids are raw 64 bits: uint64 columns are
reinterpreted as int64 bit for bit (the store reads them back as uint64).

Example:
    >>> import pandas as pd, pyarrow as pa
    >>> df = pd.DataFrame({"y": [0, 1], "d": [0.5, 1.5], "u": pd.Series([2**64 - 1, 3], dtype="uint64"),
    ...                    "l": pd.Series([[1, 2], []], dtype=pd.ArrowDtype(pa.list_(pa.int64())))})
    >>> cols = Columns.from_frame(df, label="y", dense=["d"], sparse=["u", "l"])
    >>> b = cols.slice(0, 2).to_batch()
    >>> b.sparse["l"][0].tolist(), b.sparse["l"][1].tolist(), b.sparse["u"][0].tolist()
    ([1, 2], [0, 2], [-1, 3])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import torch

from fbrapids.errors import BatchError, ColumnTypeError
from fbrapids.frames.backend import is_list_dtype
from fbrapids.trainers.nan_policy import STREAM_NAN, check_nan


@dataclass
class Batch:
    """One training batch, laid out for ``nn.EmbeddingBag``.

    Attributes:
        dense: ``[B, n_dense]`` float32.
        label: ``[B]`` float32.
        sparse: feature name -> ``(values, offsets)``: values int64 (raw 64-bit ids;
            uint64 ids appear as their int64 bit pattern), offsets ``[B]`` int64, the start
            of each row's bag in ``values``.
        group: ``[B]`` int64 group key (e.g. user id) for GAUC, or None.
    """

    dense: torch.Tensor
    label: torch.Tensor
    sparse: dict[str, tuple[torch.Tensor, torch.Tensor]]
    group: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.label.shape[0])

    def _map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> "Batch":
        return Batch(fn(self.dense), fn(self.label), {k: (fn(v), fn(o)) for k, (v, o) in self.sparse.items()},
                     None if self.group is None else fn(self.group))

    def to(self, device: str | torch.device, non_blocking: bool = True) -> "Batch":
        """The batch on ``device``: itself when every tensor is on the CPU and so is
        ``device`` (a training step on the CPU calls no ``Tensor.to`` per tensor, each of which
        hands Python's lock to the store's background thread and waits to get it back).

        Example:
            >>> b = Batch(torch.zeros(2, 1), torch.zeros(2), {"ad": (torch.tensor([1, 2]), torch.tensor([0, 1]))})
            >>> b.to("cpu") is b
            True
        """
        if torch.device(device).type == "cpu" and self._on_cpu():
            return self
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))

    def _on_cpu(self) -> bool:
        if self.dense.device.type != "cpu" or self.label.device.type != "cpu" or \
                (self.group is not None and self.group.device.type != "cpu"):
            return False
        return all(v.device.type == "cpu" and o.device.type == "cpu" for v, o in self.sparse.values())

    def pin_memory(self) -> "Batch":
        """The batch in pinned (page-locked) host memory, for asynchronous copies to a GPU."""
        return self._map(lambda t: t.pin_memory())


def piece_bounds(n: int, k: int, parts: int) -> tuple[int, int]:
    """``(start, stop)`` of piece ``k`` of ``n`` items cut into ``parts`` consecutive pieces
    whose sizes differ by one at most, the larger first: ``np.array_split``'s pieces (a
    global batch's rows over the ranks, a trial's arms over their groups).

    Example:
        >>> [piece_bounds(5, k, 2) for k in range(2)], [piece_bounds(11, k, 2) for k in range(2)]
        ([(0, 3), (3, 5)], [(0, 6), (6, 11)])
    """
    q, extra = divmod(n, parts)
    start = k * q + min(k, extra)
    return start, start + q + (k < extra)


def _where(part: int | None) -> str:
    return f" in partition {part}" if part is not None else ""


def _first_bad(index: pd.Index, mask: np.ndarray) -> object:  # a row label, for the message
    return index[int(np.flatnonzero(mask)[0])]


def _ids_from_numpy(arr: np.ndarray, name: str) -> np.ndarray:
    if arr.dtype == np.uint64:
        return arr.view(np.int64)
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64, copy=False)
    raise ColumnTypeError(f"sparse feature {name!r}: ids must be integers, got dtype {arr.dtype}")


def sparse_column(s: pd.Series, name: str, part: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(values int64, offsets [n+1] int64)`` of a list or scalar integer id column.

    Null lists count as empty bags; null ids raise ``ValueError`` naming the column and row.

    Example:
        >>> import pandas as pd, pyarrow as pa
        >>> s = pd.Series([[5], None, [6, 7]], dtype=pd.ArrowDtype(pa.list_(pa.int64())))
        >>> [a.tolist() for a in sparse_column(s, "s")]
        [[5, 6, 7], [0, 1, 1, 3]]
    """
    dt = s.dtype
    n = len(s)
    if isinstance(dt, pd.ArrowDtype) and is_list_dtype(dt):
        arr = s.array.__arrow_array__()
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
        child_type = dt.pyarrow_dtype.value_type
        if not pa.types.is_integer(child_type):
            raise ColumnTypeError(f"sparse feature {name!r}: list elements must be integer ids, got {child_type}"
                            f"{_where(part)}; hash strings to ids first (e.g. with an extract operator)")
        lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False).astype(np.int64)
        flat = pc.list_flatten(arr)
        if flat.null_count:
            owner = np.repeat(np.arange(n), lengths)
            bad = owner[np.flatnonzero(~flat.is_valid().to_numpy(zero_copy_only=False))[0]]
            raise BatchError(f"sparse feature {name!r}: {flat.null_count} null ids inside lists{_where(part)}, "
                             f"first at row {s.index[bad]!r}")
        values = _ids_from_numpy(flat.to_numpy(zero_copy_only=False), name)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return values, offsets
    if isinstance(dt, pd.ArrowDtype) and pa.types.is_integer(dt.pyarrow_dtype) or pd.api.types.is_integer_dtype(dt):
        if s.hasnans:
            mask = s.isna().to_numpy()
            raise BatchError(f"sparse feature {name!r}: {int(mask.sum())} null ids{_where(part)}, "
                             f"first at row {_first_bad(s.index, mask)!r}; fill them first")
        np_dtype = np.uint64 if "uint64" in str(dt).lower() else np.int64
        values = _ids_from_numpy(s.to_numpy(dtype=np_dtype), name)
        return values, np.arange(n + 1, dtype=np.int64)
    raise ColumnTypeError(f"sparse feature {name!r}: expected an integer id column or a list<int64> column, "
                    f"got dtype {dt}{_where(part)}")


def dense_matrix(df: pd.DataFrame, cols: Sequence[str], nan: str, part: int | None = None) -> tuple[np.ndarray, int]:
    """``[n, len(cols)]`` float32 and the number of NaN / inf values replaced (``nan="zero"``).

    With ``nan="error"`` a NaN, inf or null raises ``ValueError`` naming the column, the count
    and the first row.
    """
    out = np.empty((len(df), len(cols)), dtype=np.float32)
    replaced = 0
    for j, c in enumerate(cols):
        s = df[c]
        if not (pd.api.types.is_numeric_dtype(s.dtype) or pd.api.types.is_bool_dtype(s.dtype)):
            raise ColumnTypeError(f"dense feature {c!r}: expected a numeric column, got dtype {s.dtype}{_where(part)}")
        col = s.to_numpy(dtype=np.float64, na_value=np.nan)
        bad = ~np.isfinite(col)
        if bad.any():
            k = int(bad.sum())
            if nan == "error":
                raise BatchError(f"dense feature {c!r}: {k} NaN/inf/null values{_where(part)}, first at row "
                                 f"{_first_bad(df.index, bad)!r}; clean them, or stream with nan='zero'")
            col = np.where(bad, 0.0, col)
            replaced += k
        out[:, j] = col
    return out, replaced


def ragged_take(values: np.ndarray, offsets: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``idx`` of a ragged column (values + n+1 offsets), as values and offsets.

    >>> v, o = ragged_take(np.array([1, 2, 3]), np.array([0, 1, 3]), np.array([1]))
    >>> v.tolist(), o.tolist()
    ([2, 3], [0, 2])
    """
    lengths = offsets[1:] - offsets[:-1]
    new_len = lengths[idx]
    new_off = np.zeros(len(idx) + 1, dtype=np.int64)
    np.cumsum(new_len, out=new_off[1:])
    total = int(new_off[-1])
    pos = np.repeat(offsets[:-1][idx] - new_off[:-1], new_len) + np.arange(total, dtype=np.int64)
    return values[pos], new_off


def concat_parts(parts: Sequence[Any], cat: Any) -> tuple[Any, Any, dict[str, tuple[Any, Any]], Any]:
    """``(dense, label, sparse, group)`` of runs of rows joined end to end; ``cat`` joins a
    list of arrays (``np.concatenate`` for host columns, ``torch.cat`` for device ones).

    >>> a = Columns(np.zeros((1, 0)), np.zeros(1), {"t": (np.array([4]), np.array([0, 1]))})
    >>> concat_parts([a, a], np.concatenate)[2]["t"][1].tolist()
    [0, 1, 2]
    """
    sp = {}
    for k in parts[0].sparse:
        vals = cat([p.sparse[k][0] for p in parts])
        offs, base = [parts[0].sparse[k][1][:1] * 0], 0
        for p in parts:
            o = p.sparse[k][1]
            offs.append(o[1:] + base)
            base += int(o[-1])
        sp[k] = (vals, cat(offs))
    g = None if parts[0].group is None else cat([p.group for p in parts])
    return cat([p.dense for p in parts]), cat([p.label for p in parts]), sp, g


@dataclass
class Columns:
    """Host arrays of a run of rows; cut into batches with :meth:`slice` and :meth:`take`."""

    dense: np.ndarray
    label: np.ndarray
    sparse: dict[str, tuple[np.ndarray, np.ndarray]]
    group: np.ndarray | None = None
    nan_replaced: int = field(default=0, compare=False)
    #: the sparse features known to hold one id a row (offsets ``0..n``): scalar id columns
    #: (:meth:`gather` copies their ids as a fixed-width column, without reading offsets)
    single: frozenset[str] = field(default=frozenset(), compare=False)

    def __len__(self) -> int:
        return len(self.label)

    @classmethod
    def from_frame(cls, df: pd.DataFrame, label: str, dense: Sequence[str], sparse: Sequence[str],
                   group: str | None = None, nan: str = "error", part: int | None = None) -> "Columns":
        """Read the named columns of a pandas frame (see the module docstring)."""
        check_nan(nan, STREAM_NAN, "Columns.from_frame")
        y = df[label].to_numpy(dtype=np.float64, na_value=np.nan)
        if not np.isfinite(y).all():
            bad = ~np.isfinite(y)
            raise BatchError(f"label {label!r}: {int(bad.sum())} NaN/null values{_where(part)}, first at row "
                             f"{_first_bad(df.index, bad)!r}")
        d, replaced = dense_matrix(df, dense, nan, part)
        sp = {name: sparse_column(df[name], name, part) for name in sparse}
        g = None
        if group is not None:
            gs = df[group]
            if pd.api.types.is_integer_dtype(gs.dtype) and not gs.hasnans:
                g = _ids_from_numpy(gs.to_numpy(dtype=np.uint64 if "uint64" in str(gs.dtype) else np.int64), group)
            else:  # strings etc.: a stable 64-bit hash, the same in every partition
                g = pd.util.hash_pandas_object(gs, index=False).to_numpy().view(np.int64)
        single = frozenset(name for name in sparse if not is_list_dtype(df[name].dtype))
        return cls(d, y.astype(np.float32), sp, g, replaced, single)

    def slice(self, start: int, stop: int) -> "Columns":
        sp = {}
        for k, (v, o) in self.sparse.items():
            oo = o[start : stop + 1]
            sp[k] = (v[oo[0] : oo[-1]], oo - oo[0])
        g = None if self.group is None else self.group[start:stop]
        return Columns(self.dense[start:stop], self.label[start:stop], sp, g, single=self.single)

    def take(self, idx: np.ndarray) -> "Columns":
        sp = {k: ragged_take(v, o, idx) for k, (v, o) in self.sparse.items()}
        g = None if self.group is None else self.group[idx]
        return Columns(self.dense[idx], self.label[idx], sp, g, single=self.single)

    @staticmethod
    def concat(parts: Sequence["Columns"]) -> "Columns":
        parts = [p for p in parts if len(p)] or list(parts[:1])
        if len(parts) == 1:
            return parts[0]
        return Columns(*concat_parts(parts, np.concatenate), single=frozenset.intersection(*(p.single for p in parts)))

    @staticmethod
    def gather(parts: Sequence["Columns"], which: np.ndarray, rows: np.ndarray) -> "Columns":
        """Row ``rows[i]`` of ``parts[which[i]]`` as row ``i``: ``Columns.concat(parts)``'s rows
        at those positions, each row copied once (:mod:`fbrapids.trainers.row_gather`; the
        shuffle buffer's output).

        >>> a = Columns(np.zeros((2, 1), np.float32), np.array([0, 1], np.float32),
        ...             {"t": (np.array([4, 5, 6]), np.array([0, 2, 3]))})
        >>> b = Columns(np.ones((1, 1), np.float32), np.array([2], np.float32), {"t": (np.array([7]), np.array([0, 1]))})
        >>> g = Columns.gather([a, b], np.array([1, 0]), np.array([0, 0]))
        >>> g.label.tolist(), g.sparse["t"][0].tolist(), g.sparse["t"][1].tolist()
        ([2.0, 0.0], [7, 4, 5], [0, 1, 3])
        """
        from fbrapids.trainers.row_gather import gather_columns, gather_ragged

        names = list(parts[0].sparse)
        if any((p.group is None) != (parts[0].group is None) or list(p.sparse) != names for p in parts):
            raise BatchError("Columns.gather: the parts differ in their sparse features or group key")
        single = frozenset.intersection(*(p.single for p in parts))
        lists = [k for k in names if k not in single]
        sparse = dict(zip(lists, gather_ragged([[p.sparse[k] for k in lists] for p in parts], which, rows)))
        ids = sorted(single)  # one id a row: the ids alone (gathered with the other fixed-width columns), offsets 0..n
        with_group = parts[0].group is not None  # all parts alike (checked above)

        def fixed_columns(p: Columns) -> list[np.ndarray]:
            out = [p.dense, p.label] + ([p.group] if p.group is not None else [])
            return out + [p.sparse[k][0][p.sparse[k][1][0]:p.sparse[k][1][-1]] for k in ids]

        fixed = gather_columns([fixed_columns(p) for p in parts], which, rows)
        dense, label, group = fixed[0], fixed[1], fixed[2] if with_group else None
        offsets = np.arange(len(label) + 1, dtype=np.int64)
        for k, v in zip(ids, fixed[2 + with_group:]):
            sparse[k] = (v, offsets.copy())
        return Columns(dense, label, {k: sparse[k] for k in names}, group, single=single)

    def to_batch(self) -> Batch:
        """Torch tensors sharing these arrays' memory (offsets without the final end)."""
        sp = {k: (_tensor(v), _tensor(o[:-1])) for k, (v, o) in self.sparse.items()}
        g = None if self.group is None else _tensor(self.group)
        return Batch(_tensor(self.dense), _tensor(self.label), sp, g)


def _tensor(a: np.ndarray) -> torch.Tensor:
    """A tensor over ``a`` (copied only when read-only, e.g. Arrow memory, or strided)."""
    if not a.flags.writeable or not a.flags.c_contiguous:
        a = np.array(a, copy=True, order="C")
    return torch.from_numpy(a)
