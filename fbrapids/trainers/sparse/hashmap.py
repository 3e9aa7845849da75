"""The embedding store's C helpers: a uint64 -> int64 hash map (open addressing), the
per-batch bookkeeping passes, the SSD tier's guarded memory map, sum pooling and the in-place
sparse optimizers, each called
once per batch through ctypes.

The store keys rows by raw 64-bit feature ids, so it needs a real hash table rather than
a modulo into a fixed array.  The C sources live next to this module (``csrc/hashmap.c``,
``csrc/rows.c``); they are built by the kernels' compile-and-cache path
(:func:`fbrapids.kernels.load_source`: the same compiler, flags, cache folder
``$FBRAPIDS_KERNEL_CACHE`` and errors as the meta-kernels).

Example:
    >>> import numpy as np
    >>> m = UInt64HashMap()
    >>> m.put(np.array([2**64 - 1, 7], dtype=np.uint64), np.array([0, 1]))
    >>> m.get(np.array([7, 8, 2**64 - 1], dtype=np.uint64)).tolist()
    [1, -1, 0]
"""

from __future__ import annotations

import ctypes
import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from fbrapids.errors import ArgumentError, InputTypeError, RowIndexError, StoreMemoryError, TierFileError
from fbrapids.kernels import load_source

if TYPE_CHECKING:  # (annotations only: the directory module imports this one)
    from ctypes import _NamedFuncPointer

    from fbrapids.trainers.sparse.row_directory import RowDirectory

CSRC = Path(__file__).with_name("csrc")
SOURCES = ("hashmap.c", "rows.c", "arms_bags.c")


def source_text() -> str:
    """The C source of the store's helpers, as one translation unit."""
    return "\n".join((CSRC / name).read_text() for name in SOURCES)


def row_threads() -> int:
    """Threads the row loops (optimizers, gathers, pooling, bookkeeping) split a batch over:
    torch's intra-op count (``torch.set_num_threads``); batches under 8192 distinct rows (4096
    bags) stay on one, where waking the others costs about what they save; the results are
    the same bits for any count.

    Example:
        >>> row_threads() == torch.get_num_threads()
        True
    """
    return torch.get_num_threads()


def store_library() -> ctypes.CDLL:
    """The store's C helpers (``csrc/``, one library), loaded: a module with entry points of its
    own there declares their types (:mod:`~fbrapids.trainers.sparse.arms_bags`)."""
    return _lib()


@functools.lru_cache(maxsize=None)
def _lib() -> ctypes.CDLL:
    lib = load_source(source_text())
    p, i64, f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
    lib.fbx_hm_new.restype = p
    lib.fbx_hm_new.argtypes = [i64]
    lib.fbx_hm_free.argtypes = [p]
    lib.fbx_hm_size.restype = i64
    lib.fbx_hm_size.argtypes = [p]
    lib.fbx_hm_get.argtypes = [p, p, i64, p, i64]
    lib.fbx_hm_put.restype = ctypes.c_int
    lib.fbx_hm_put.argtypes = [p, p, p, i64]
    lib.fbx_hm_incr.restype = ctypes.c_int
    lib.fbx_hm_incr.argtypes = [p, p, i64, p]
    lib.fbx_hm_export.argtypes = [p, p, p]
    lib.fbx_unique_u64.restype = i64
    lib.fbx_unique_u64.argtypes = [p, i64, p, p, p]
    lib.fbx_unique_get.restype = i64
    lib.fbx_unique_get.argtypes = [p, p, i64, p, p, p, p]
    lib.fbx_store_touch.restype = ctypes.c_int
    lib.fbx_store_touch.argtypes = [p, p, i64, p, p, p, p, p, i64, i64, i64, p, ctypes.c_int]
    lib.fbx_lookup_pass.restype = i64
    lib.fbx_lookup_pass.argtypes = [p, p, i64, p, p, p, p, p, i64, i64, i64, p, i64, i64, p, i64, i64, p, p, p,
                                    ctypes.c_int]
    lib.fbx_window_keys.restype = ctypes.c_int
    lib.fbx_window_keys.argtypes = [p, i64, p, p, i64, i64, i64, i64, p]
    lib.fbx_window_announce.restype = i64
    lib.fbx_window_announce.argtypes = [p, i64, i64, i64, p, p, p, p, i64, i64, i64, p]
    lib.fbx_window_begin.restype = None
    lib.fbx_window_begin.argtypes = [p, i64, p, i64, i64, p]
    lib.fbx_cache_slots.restype = i64
    lib.fbx_cache_slots.argtypes = [p, i64, p, i64, i64, p]
    lib.fbx_pin_slots.restype = ctypes.c_int
    lib.fbx_pin_slots.argtypes = [p, i64, p, i64, i64]
    lib.fbx_init_rows.restype = None
    lib.fbx_init_rows.argtypes = [p, i64, i64, p, i64, f32, p, i64]
    lib.fbx_group_by_row.restype = ctypes.c_int
    lib.fbx_group_by_row.argtypes = [p, i64, i64, p, i64, p, p]
    lib.fbx_map.restype = p
    lib.fbx_map.argtypes = [ctypes.c_int, i64]
    lib.fbx_unmap.restype = ctypes.c_int
    lib.fbx_unmap.argtypes = [p, i64]
    lib.fbx_map_sync.restype = ctypes.c_int
    lib.fbx_map_sync.argtypes = [p, i64]
    lib.fbx_map_copy.restype = i64
    lib.fbx_map_copy.argtypes = [p, p, i64, i64, p, ctypes.c_int]
    lib.fbx_map_read_checked.restype = i64
    lib.fbx_map_read_checked.argtypes = [p, p, i64, i64, i64, p, p, p]
    lib.fbx_map_write_checked.restype = i64
    lib.fbx_map_write_checked.argtypes = [p, p, i64, i64, i64, i64, p, p]
    _declare_rows(lib)
    return lib


def _declare_rows(lib: ctypes.CDLL) -> None:
    """The argument types of ``csrc/rows.c``'s entry points and the multi-table ones."""
    p, i64, f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
    lib.fbx_row_hashes.restype = None
    lib.fbx_row_hashes.argtypes = [p, p, i64, i64, p]
    lib.fbx_rowwise_adagrad.restype = ctypes.c_int
    lib.fbx_rowwise_adagrad.argtypes = [p, i64, i64, i64, p, i64, p, f32, f32, ctypes.c_int, p]
    lib.fbx_gather_cols.restype = ctypes.c_int
    lib.fbx_gather_cols.argtypes = [p, i64, i64, p, i64, i64, p, ctypes.c_int]
    lib.fbx_bag_sum.restype = ctypes.c_int
    lib.fbx_bag_sum.argtypes = [p, i64, i64, p, p, i64, i64, p, ctypes.c_int, ctypes.c_int]
    lib.fbx_bag_sum_backward.restype = ctypes.c_int
    lib.fbx_bag_sum_backward.argtypes = [p, i64, p, p, i64, i64, i64, p, ctypes.c_int]
    lib.fbx_lookup_tables.restype = None
    lib.fbx_lookup_tables.argtypes = [p, i64, p, ctypes.c_int, p, p]
    lib.fbx_rowwise_adagrad_tables.restype = None
    lib.fbx_rowwise_adagrad_tables.argtypes = [p, p, i64, p, ctypes.c_int, p]
    lib.fbx_unbook_rows.restype = None
    lib.fbx_unbook_rows.argtypes = [p, p, i64, p, p, i64, p]
    lib.fbx_prepare_tables.restype = None
    lib.fbx_prepare_tables.argtypes = [p, i64, p]
    lib.fbx_place_new.restype = i64
    lib.fbx_place_new.argtypes = [p, i64, p, p, p, p, p, i64, i64, p, p, p, i64, i64, p, i64, i64, p, i64, f32, p]
    lib.fbx_sgd.restype = ctypes.c_int
    lib.fbx_sgd.argtypes = [p, i64, i64, i64, p, i64, p, f32, ctypes.c_int, p]


class RowMap:
    """``bytes`` bytes of an open file mapped read-write, rows copied in and out in C with
    SIGBUS (a file truncated behind the map) reported as a return code, never a crash.

    Example:
        >>> import os, tempfile, numpy as np
        >>> fd, path = tempfile.mkstemp(); os.ftruncate(fd, 24)
        >>> m = RowMap(fd, 24); m.copy(np.array([1]), 12, np.ones((1, 3), np.float32), write=True)
        0
        >>> out = np.zeros((1, 3), np.float32); m.copy(np.array([1]), 12, out), out.tolist()
        (0, [[1.0, 1.0, 1.0]])
        >>> os.ftruncate(fd, 0); m.copy(np.array([1]), 12, out)   # truncated: row 0 of the call
        1
    """

    def __init__(self, fd: int, nbytes: int, path: str | None = None) -> None:
        self.nbytes = int(nbytes)
        self.addr = _lib().fbx_map(int(fd), self.nbytes) if self.nbytes else None
        if self.nbytes and not self.addr:
            err = ctypes.get_errno() or 12
            where = path or f"file descriptor {fd}"
            raise TierFileError(f"cannot map the SSD tier file {where} ({self.nbytes} bytes): {os.strerror(err)}",
                                where, err)

    def copy(self, g: np.ndarray, row_bytes: int, buf: np.ndarray, write: bool = False) -> int:
        """Read rows ``g`` into ``buf`` (or write ``buf`` into them); 0, or ``1 + j`` when row
        ``g[j]`` is beyond the file's end."""
        g = np.ascontiguousarray(g, dtype=np.int64)
        if not buf.flags.c_contiguous or buf.nbytes != len(g) * row_bytes:
            raise ArgumentError(f"RowMap.copy: buf must be C-contiguous with {len(g) * row_bytes} bytes")
        if len(g) and (int(g.min()) < 0 or (int(g.max()) + 1) * row_bytes > self.nbytes):
            raise RowIndexError(f"RowMap.copy: rows outside the {self.nbytes // row_bytes} mapped rows")
        if not len(g):
            return 0
        return int(_lib().fbx_map_copy(self.addr, g.ctypes.data, len(g), int(row_bytes), buf.ctypes.data,
                                       1 if write else 0))

    def read_checked(self, g: np.ndarray, page_rows: int, page_sums: np.ndarray,
                     out: np.ndarray) -> tuple[int, int, int, int]:
        """Read rows ``g`` (strictly ascending) into ``out`` ``[len(g), width]`` float32, and
        check each page of ``page_rows`` rows they touch against ``page_sums`` (the sum of
        its rows' :func:`row_hashes`), hashing the pages where they lie, in one C pass.
        Returns ``(rc, pages checked, pages that differ, the first of those or -1)``; ``rc``
        as :meth:`copy`'s.

        Example:
            >>> import os, tempfile, numpy as np
            >>> fd, path = tempfile.mkstemp(); os.ftruncate(fd, 32)
            >>> m = RowMap(fd, 32); m.copy(np.array([1]), 8, np.ones((1, 2), np.float32), write=True)
            0
            >>> sums = row_hashes(np.array([[0, 0], [1, 1]], np.float32), np.array([0, 1]))
            >>> out = np.zeros((1, 2), np.float32)
            >>> m.read_checked(np.array([1]), 2, np.array([sums.sum(), 0], np.uint64), out), out.tolist()
            ((0, 1, 0, -1), [[1.0, 1.0]])
        """
        g = np.ascontiguousarray(g, dtype=np.int64)
        width = out.shape[1] if out.ndim == 2 else 0
        if out.dtype != np.float32 or not out.flags.c_contiguous or out.shape != (len(g), width) or page_rows < 1:
            raise ArgumentError(f"RowMap.read_checked: out must be C-contiguous float32 [{len(g)}, width]")
        if len(g) == 0:
            return 0, 0, 0, -1
        if int(g[0]) < 0 or (len(g) > 1 and not bool((g[1:] > g[:-1]).all())):
            raise ArgumentError("RowMap.read_checked: rows must be ascending, distinct and >= 0")
        last_page = int(g[-1]) // page_rows
        if (last_page + 1) * page_rows * width * 4 > self.nbytes or last_page >= len(page_sums):
            raise RowIndexError(f"RowMap.read_checked: rows outside the {self.nbytes // (4 * max(width, 1))} mapped "
                                "rows or their pages")
        sums = np.ascontiguousarray(page_sums, dtype=np.uint64)
        report = np.zeros(3, dtype=np.int64)
        rc = int(_lib().fbx_map_read_checked(self.addr, g.ctypes.data, len(g), width, int(page_rows),
                                             sums.ctypes.data, out.ctypes.data, report.ctypes.data))
        return rc, int(report[0]), int(report[1]), int(report[2])

    def write_checked(self, g: np.ndarray, rows: np.ndarray, page_rows: int, page_sums: np.ndarray,
                      written_end: int) -> int:
        """Write ``rows`` ``[len(g), width]`` float32 at rows ``g`` (distinct) and move each
        one's page checksum in ``page_sums`` (uint64, in place) by its new hash minus its old
        one (rows from ``written_end`` on hold zeros: hash 0), in one C pass; ``rc`` as
        :meth:`copy`'s.

        Example:
            >>> import os, tempfile, numpy as np
            >>> fd, path = tempfile.mkstemp(); os.ftruncate(fd, 32)
            >>> m, sums = RowMap(fd, 32), np.zeros(2, np.uint64)
            >>> m.write_checked(np.array([1]), np.ones((1, 2), np.float32), 2, sums, 0)
            0
            >>> bool(sums[0] == row_hashes(np.ones((1, 2), np.float32), np.array([1]))[0]), int(sums[1])
            (True, 0)
        """
        g = np.ascontiguousarray(g, dtype=np.int64)
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        width = rows.shape[1] if rows.ndim == 2 else 0
        if rows.shape != (len(g), width) or page_rows < 1 or page_sums.dtype != np.uint64 \
                or not page_sums.flags.c_contiguous or not page_sums.flags.writeable:
            raise ArgumentError("RowMap.write_checked: rows [len(g), width] and a writable uint64 page_sums")
        if not len(g):
            return 0
        if int(g.min()) < 0 or (int(g.max()) + 1) * width * 4 > self.nbytes or \
                int(g.max()) // page_rows >= len(page_sums):
            raise RowIndexError(f"RowMap.write_checked: rows outside the {self.nbytes // (4 * max(width, 1))} mapped "
                                "rows or their pages")
        return int(_lib().fbx_map_write_checked(self.addr, g.ctypes.data, len(g), width, int(page_rows),
                                                int(written_end), rows.ctypes.data, page_sums.ctypes.data))

    def sync(self) -> int:
        return int(_lib().fbx_map_sync(self.addr, self.nbytes)) if self.addr else 0

    def close(self) -> None:
        addr, self.addr = self.addr, None
        if addr:
            _lib().fbx_unmap(addr, self.nbytes)

    def __del__(self) -> None:
        self.close()


def row_hashes(rows: np.ndarray, g: np.ndarray) -> np.ndarray:
    """The SSD tier's 64-bit hash of each float32 row ``[n, width]`` at global row ``g``
    (``csrc/rows.c``, ``fbx_row_hashes``): two sums of the row's 32-bit words weighted by
    fixed odd multipliers (mod 2**32) side by side, times ``2g + 1``, mod 2**64.  Any change
    of one word changes it, so does a row moved elsewhere; an all-zero row hashes to 0.

    Example:
        >>> import numpy as np
        >>> r = np.ones((2, 3), np.float32)
        >>> h = row_hashes(r, np.array([0, 1])); bool(h[0] != h[1]), row_hashes(0 * r, np.array([0, 1])).tolist()
        (True, [0, 0])
    """
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    g = np.ascontiguousarray(g, dtype=np.int64)
    if rows.ndim != 2 or len(g) != len(rows):
        raise ArgumentError(f"row_hashes: rows must be [n, width] with n = len(g), got {rows.shape} and {len(g)}")
    out = np.empty(len(g), dtype=np.uint64)
    if len(g):
        _lib().fbx_row_hashes(rows.ctypes.data, g.ctypes.data, len(g), rows.shape[1], out.ctypes.data)
    return out


def _table_args(table: np.ndarray, slots: np.ndarray, grad: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
    if table.dtype != np.float32 or not table.flags.c_contiguous or table.ndim != 2 or not table.flags.writeable:
        raise InputTypeError(f"the row table must be a writable C-contiguous float32 matrix, got {table.dtype}")
    slots = np.ascontiguousarray(slots, dtype=np.int64)
    grad = np.ascontiguousarray(grad, dtype=np.float32)
    if grad.shape != (len(slots), dim):
        raise ArgumentError(f"gradient of shape {grad.shape} for {len(slots)} rows of dim {dim}")
    return slots, grad


def _dirty_ptr(dirty: np.ndarray | None, table: np.ndarray) -> int | None:
    if dirty is None:
        return None
    if dirty.dtype != np.bool_ or not dirty.flags.c_contiguous or len(dirty) < table.shape[0]:
        raise InputTypeError(f"dirty must be a contiguous bool array over the table's {table.shape[0]} rows, "
                             f"got {dirty.dtype} of {len(dirty)}")
    return dirty.ctypes.data


def rowwise_adagrad_(table: np.ndarray, slots: np.ndarray, grad: np.ndarray, dim: int, lr: float,
                     eps: float, distinct: bool = False, dirty: np.ndarray | None = None) -> None:
    """Row-wise Adagrad in place on ``table`` rows ``slots`` (accumulator in column ``dim``):
    ``acc += mean(g * g)`` (summed in column order), ``w -= (g * lr) / (sqrt(acc) + eps)``
    with a correctly rounded sqrt.  ``distinct=True`` (no slot repeated) lets it split the
    rows over :func:`row_threads` threads; ``dirty`` (a bool array over the table's rows)
    gets ``dirty[slots] = True`` in the same pass.

    Example:
        >>> import numpy as np
        >>> t = np.array([[1.0, 0.0]], np.float32)
        >>> rowwise_adagrad_(t, np.array([0]), np.array([[2.0]], np.float32), 1, 0.5, 0.0)
        >>> t.tolist()
        [[0.5, 4.0]]
    """
    slots, grad = _table_args(table, slots, grad, dim)
    if _lib().fbx_rowwise_adagrad(table.ctypes.data, table.shape[0], table.shape[1], int(dim), slots.ctypes.data,
                                  len(slots), grad.ctypes.data, float(lr), float(eps),
                                  row_threads() if distinct else 1, _dirty_ptr(dirty, table)) != 0:
        raise RowIndexError(f"rowwise_adagrad_: a slot outside [0, {table.shape[0]})")


@functools.lru_cache(maxsize=None)
def _adagrad_sliced() -> _NamedFuncPointer:
    """``fbx_rowwise_adagrad_sliced`` with its argument types."""
    fn = _lib().fbx_rowwise_adagrad_sliced
    p, i64, f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
    fn.restype = ctypes.c_int
    fn.argtypes = [p, i64, i64, i64, i64, p, i64, p, f32, f32, ctypes.c_int, p]
    return fn


def rowwise_adagrad_sliced_(table: np.ndarray, slots: np.ndarray, grad: np.ndarray, dim: int, slices: int,
                            lr: float, eps: float, distinct: bool = False, dirty: np.ndarray | None = None) -> None:
    """:func:`rowwise_adagrad_` on rows of ``slices`` vectors of ``dim`` side by side (their
    accumulators after them, one each): each slice updated as a row of its own, the same bits.

    Example:
        >>> import numpy as np
        >>> t = np.array([[1.0, 1.0, 0.0, 0.0]], np.float32)
        >>> rowwise_adagrad_sliced_(t, np.array([0]), np.array([[2.0, 0.5]], np.float32), 1, 2, 0.5, 0.0)
        >>> t.tolist()
        [[0.5, 0.5, 4.0, 0.25]]
    """
    slots, grad = _table_args(table, slots, grad, dim * slices)
    if table.shape[1] < (dim + 1) * slices:
        raise ArgumentError(f"rowwise_adagrad_sliced_: rows of {table.shape[1]} floats hold no {slices} slices of "
                            f"{dim} and their accumulators")
    if _adagrad_sliced()(table.ctypes.data, table.shape[0], table.shape[1], int(dim), int(slices),
                         slots.ctypes.data, len(slots), grad.ctypes.data, float(lr), float(eps),
                         row_threads() if distinct else 1, _dirty_ptr(dirty, table)) != 0:
        raise RowIndexError(f"rowwise_adagrad_sliced_: a slot outside [0, {table.shape[0]})")


def gather_cols(table: np.ndarray, slots: np.ndarray, ncols: int) -> np.ndarray:
    """``table[slots, :ncols]`` as a new C-contiguous float32 array, in one C pass.

    Example:
        >>> import numpy as np
        >>> gather_cols(np.arange(6, dtype=np.float32).reshape(2, 3), np.array([1]), 2).tolist()
        [[3.0, 4.0]]
    """
    slots = np.ascontiguousarray(slots, dtype=np.int64)
    out = np.empty((len(slots), int(ncols)), dtype=np.float32)
    if _lib().fbx_gather_cols(table.ctypes.data, table.shape[0], table.shape[1], slots.ctypes.data, len(slots),
                              int(ncols), out.ctypes.data, row_threads()) != 0:
        raise RowIndexError(f"gather_cols: a slot outside [0, {table.shape[0]})")
    return out


def _check_bags(what: str, name: str, table: np.ndarray, idx: np.ndarray, offsets: np.ndarray,
                rows: int | None, fields: int = 1) -> None:
    """The shapes :func:`bag_sum` and :func:`bag_sum_backward` hand to C, checked before it
    reads anything: ``table`` 2-D (``rows`` rows when given), ``idx`` and ``offsets`` 1-D,
    the offsets' first and last inside ``idx`` (C checks each index, and their order), the
    bags ``fields`` equal runs."""
    if table.ndim != 2 or (rows is not None and table.shape[0] != rows):
        want = "[rows, dim]" if rows is None else f"[{rows}, dim] (one row per bag)"
        raise ArgumentError(f"{what}: {name} must be {want}, got shape {table.shape}")
    if idx.ndim != 1 or offsets.ndim != 1 or len(offsets) < 1:
        raise ArgumentError(f"{what}: the index and the offsets must be 1-D (offsets ending with the index's "
                            f"length), got shapes {idx.shape} and {offsets.shape}")
    if not 0 <= offsets[0] <= offsets[-1] <= len(idx):
        raise ArgumentError(f"{what}: the offsets must run from 0 up to the index's length {len(idx)}, got "
                            f"{int(offsets[0])} .. {int(offsets[-1])}")
    if fields < 1 or (len(offsets) - 1) % fields:
        raise ArgumentError(f"{what}: {len(offsets) - 1} bags are not {fields} fields of equal runs")


def bag_sum(rows: np.ndarray, idx: np.ndarray, offsets: np.ndarray, mean: bool = False,
            fields: int = 1) -> np.ndarray:
    """Sum-pooled bags ``[len(offsets) - 1, dim]`` of ``rows`` (``offsets`` ends with ``len(idx)``);
    ``mean``: each bag of more than one row divided by its size (the float division torch
    makes: the same bits as dividing the sums in torch).

    ``fields``: the bags are that many fields' runs of ``per`` bags each, field after field
    (bag ``f * per + i``); bag ``f * per + i`` is then written to row ``i * fields + f``, so
    the output read as ``[per, fields, dim]`` holds each row's fields side by side (what a
    model's dense layers read) with no transpose copied.  The sums are the same bits.

    Example:
        >>> import numpy as np
        >>> bag_sum(np.array([[1.0], [2.0]], np.float32), np.array([0, 1, 1]), np.array([0, 2, 3])).tolist()
        [[3.0], [2.0]]
        >>> r = np.array([[1.0], [10.0]], np.float32)
        >>> bag_sum(r, np.array([0, 0, 1, 1]), np.array([0, 1, 2, 3, 4]), fields=2).ravel().tolist()
        [1.0, 10.0, 1.0, 10.0]
    """
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    idx = np.ascontiguousarray(idx, dtype=np.int64)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    _check_bags("bag_sum", "rows", rows, idx, offsets, None, fields)
    nb = len(offsets) - 1
    out = np.empty((nb, rows.shape[1]), dtype=np.float32)
    if _lib().fbx_bag_sum(rows.ctypes.data, rows.shape[0], rows.shape[1], idx.ctypes.data, offsets.ctypes.data, nb,
                          int(fields), out.ctypes.data, 1 if mean else 0, row_threads()) != 0:
        raise RowIndexError(f"bag_sum: an index outside [0, {rows.shape[0]}) or offsets out of order")
    return out


def bag_sum_backward(grad_out: np.ndarray, idx: np.ndarray, offsets: np.ndarray, m: int,
                     mean: bool = False, fields: int = 1) -> np.ndarray:
    """The gradient ``[m, dim]`` of :func:`bag_sum`'s rows given the bags' gradient (``mean``,
    ``fields``: as :func:`bag_sum`'s; ``grad_out`` laid out as its output).

    Example:
        >>> import numpy as np
        >>> g = np.array([[1.0], [5.0]], np.float32)
        >>> bag_sum_backward(g, np.array([0, 1, 1]), np.array([0, 2, 3]), 2).tolist()
        [[1.0], [6.0]]
    """
    grad_out = np.ascontiguousarray(grad_out, dtype=np.float32)
    idx = np.ascontiguousarray(idx, dtype=np.int64)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    _check_bags("bag_sum_backward", "the bags' gradient", grad_out, idx, offsets, len(offsets) - 1, fields)
    out = np.empty((int(m), grad_out.shape[1]), dtype=np.float32)
    if _lib().fbx_bag_sum_backward(grad_out.ctypes.data, grad_out.shape[1], idx.ctypes.data, offsets.ctypes.data,
                                   len(offsets) - 1, int(fields), int(m), out.ctypes.data, 1 if mean else 0) != 0:
        raise RowIndexError(f"bag_sum_backward: an index outside [0, {m}) or offsets out of order")
    return out


def sgd_(table: np.ndarray, slots: np.ndarray, grad: np.ndarray, dim: int, lr: float,
         distinct: bool = False, dirty: np.ndarray | None = None) -> None:
    """SGD in place on ``table`` rows ``slots``: ``w -= grad * lr`` (``distinct``, ``dirty``:
    as in :func:`rowwise_adagrad_`).

    Example:
        >>> import numpy as np
        >>> t = np.array([[1.0, 2.0]], np.float32); sgd_(t, np.array([0]), np.array([[2.0, 2.0]], np.float32), 2, 0.5)
        >>> t.tolist()
        [[0.0, 1.0]]
    """
    slots, grad = _table_args(table, slots, grad, dim)
    if _lib().fbx_sgd(table.ctypes.data, table.shape[0], table.shape[1], int(dim), slots.ctypes.data, len(slots),
                      grad.ctypes.data, float(lr), row_threads() if distinct else 1, _dirty_ptr(dirty, table)) != 0:
        raise RowIndexError(f"sgd_: a slot outside [0, {table.shape[0]})")


def group_by_row(idx: np.ndarray, m: int, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Occurrences of pooled bags grouped by the row they read (a stable counting sort, O(n + m)).

    ``idx[k]`` in ``[0, m)`` is the row read by occurrence ``k``; bag ``b`` holds the occurrences
    ``offsets[b] .. offsets[b + 1]`` (``offsets`` has one more entry than there are bags).
    Returns ``(starts [m + 1], bags [n])``: row ``r`` is read by the bags
    ``bags[starts[r]:starts[r + 1]]``, in occurrence order; so the gradient of a sum-pooled
    bag's rows is itself a sum-pooled bag over the output gradient.

    Example:
        >>> import numpy as np
        >>> [a.tolist() for a in group_by_row(np.array([1, 0, 1]), 2, np.array([0, 2, 3]))]
        [[0, 1, 3], [0, 0, 1]]
    """
    idx = np.ascontiguousarray(idx, dtype=np.int64)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    n = len(idx)
    if len(offsets) < 1 or offsets[0] != 0 or offsets[-1] != n:
        raise ArgumentError(f"offsets must run from 0 to the {n} occurrences, got {offsets[:1]} .. {offsets[-1:]}")
    starts = np.empty(m + 1, dtype=np.int64)
    bags = np.empty(n, dtype=np.int64)
    rc = _lib().fbx_group_by_row(idx.ctypes.data, n, int(m), offsets.ctypes.data, len(offsets) - 1,
                                 starts.ctypes.data, bags.ctypes.data)
    if rc == -1:
        raise ArgumentError(f"a row index is outside [0, {m})")
    if rc != 0:
        raise StoreMemoryError(f"grouping {n} occurrences by row into {m} rows: out of memory")
    return starts, bags


def unique_u64(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct keys in order of first occurrence, the inverse index and the counts, in O(n).

    Example:
        >>> import numpy as np
        >>> [a.tolist() for a in unique_u64(np.array([9, 2**64 - 1, 9], dtype=np.uint64))]
        [[9, 18446744073709551615], [0, 1, 0], [2, 1]]
    """
    keys = _u64(keys)
    n = len(keys)
    uniq = np.empty(n, dtype=np.uint64)
    inverse = np.empty(n, dtype=np.int64)
    counts = np.empty(n, dtype=np.int64)
    m = _lib().fbx_unique_u64(keys.ctypes.data, n, uniq.ctypes.data, inverse.ctypes.data, counts.ctypes.data)
    if m < 0:
        raise StoreMemoryError(f"the distinct ids of a batch of {n} ids: out of memory for their scratch table")
    return uniq[:m], inverse, counts[:m]


def record_stride(where: str, *fields: np.ndarray) -> int:
    """The common stride, in int64 elements, of int64 row arrays that are either separate
    contiguous arrays (1) or the columns of one record per row (the record's width).

    Example:
        >>> import numpy as np
        >>> rec = np.zeros((5, 4), np.int64)
        >>> record_stride("x", rec[:, 0], rec[:, 3]), record_stride("x", np.zeros(3, np.int64))
        (4, 1)
    """
    st = fields[0].strides
    for a in fields:
        if a.dtype != np.int64 or a.ndim != 1 or a.strides != st or st[0] <= 0 or st[0] % 8:
            raise InputTypeError(f"{where}: expected int64 row arrays of one positive stride, got {a.dtype} with "
                                 f"strides {a.strides} (and {st})")
    return st[0] // 8


def store_touch(g: np.ndarray, counts: np.ndarray, cache_loc: np.ndarray, host_loc: np.ndarray,
                on_ssd: np.ndarray, last: np.ndarray, freq: np.ndarray, step: int) -> np.ndarray:
    """A lookup's bookkeeping over its distinct rows ``g`` (-1: not admitted) in one C pass.

    Sets ``last[g] = step`` and adds each admitted row's occurrences to ``freq[g]`` (in
    place), and returns int64 ``[6]``: occurrences served by the cache, host RAM, the SSD
    file, a new row, occurrences of rows not admitted, and the number of admitted rows
    already cached.

    Example:
        >>> import numpy as np
        >>> last, freq = np.zeros(2, np.int64), np.zeros(2, np.int64)
        >>> store_touch(np.array([1, -1]), np.array([3, 2]), np.array([-1, 0]), np.array([-1, -1]),
        ...             np.zeros(2, bool), last, freq, 7).tolist(), last.tolist()
        ([3, 0, 0, 0, 2, 1], [0, 7])
        >>> freq.tolist()
        [0, 3]
    """
    g = np.ascontiguousarray(g, dtype=np.int64)
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    rs = record_stride("store_touch", cache_loc, host_loc, last, freq)
    if on_ssd.dtype != np.bool_ or not on_ssd.flags.c_contiguous:
        raise InputTypeError(f"store_touch: on_ssd must be a contiguous bool array, got {on_ssd.dtype}")
    if len(counts) != len(g):
        raise ArgumentError(f"store_touch: {len(g)} rows but {len(counts)} counts")
    n_rows = min(len(cache_loc), len(host_loc), len(on_ssd), len(last), len(freq))
    out = np.zeros(6, dtype=np.int64)
    if _lib().fbx_store_touch(g.ctypes.data, counts.ctypes.data, len(g), cache_loc.ctypes.data, host_loc.ctypes.data,
                              on_ssd.ctypes.data, last.ctypes.data, freq.ctypes.data, rs, int(step), n_rows,
                              out.ctypes.data, row_threads()) != 0:
        raise RowIndexError(f"store_touch: a row beyond the {n_rows} rows of the row arrays")
    return out


def lookup_pass(g: np.ndarray, counts: np.ndarray, d: RowDirectory, pin: np.ndarray, pin_step: int,
                table: np.ndarray, dim: int, step: int, touched: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """The CPU cache's pass over a lookup's distinct rows ``g`` (-1: not admitted): the
    bookkeeping of :func:`store_touch` (added to ``touched`` [6]), their cache slots (-1: not
    cached or not admitted), the cached ones pinned for ``pin_step`` (``pin_step < 0``: not
    pinned) and their embeddings ``table[slot, :dim]`` gathered, in one C pass.

    ``d`` holds the per-row arrays (``cache_loc``, ``host_loc``, ``on_ssd``, ``last``,
    ``freq``: a :class:`~fbrapids.trainers.sparse.row_directory.RowDirectory`).  Returns ``(slots,
    rows [len(g), dim], admitted rows not cached)``: rows not admitted read zeros (the
    default row); those of rows not cached are left for the caller.

    Example:
        >>> import numpy as np
        >>> from types import SimpleNamespace
        >>> d = SimpleNamespace(cache_loc=np.array([1, -1]), host_loc=np.array([-1, 0]), on_ssd=np.zeros(2, bool),
        ...                     last=np.zeros(2, np.int64), freq=np.zeros(2, np.int64))
        >>> table, pin, touched = np.array([[0, 0, 9], [5, 6, 9]], np.float32), np.full(2, -1), np.zeros(6, np.int64)
        >>> slots, rows, n_miss = lookup_pass(np.array([0, -1, 1]), np.array([2, 1, 1]), d, pin, 3, table, 2, 3,
        ...                                   touched)
        >>> slots.tolist(), rows[:2].tolist(), n_miss, pin.tolist(), touched.tolist()
        ([1, -1, -1], [[5.0, 6.0], [0.0, 0.0]], 1, [-1, 3], [2, 1, 0, 0, 1, 1])
    """
    g = np.ascontiguousarray(g, dtype=np.int64)
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    rs = record_stride("lookup_pass", d.cache_loc, d.host_loc, d.last, d.freq)
    arrays = (d.cache_loc, d.host_loc, d.on_ssd, d.last, d.freq, pin, touched)
    for a, dt in ((d.on_ssd, np.bool_), (pin, np.int64), (touched, np.int64)):
        if a.dtype != dt or not a.flags.c_contiguous:
            raise InputTypeError(f"lookup_pass: expected a contiguous {np.dtype(dt)} array, got {a.dtype}")
    if table.dtype != np.float32 or not table.flags.c_contiguous or table.ndim != 2 or table.shape[1] < dim \
            or len(pin) < table.shape[0] or len(counts) != len(g) or len(touched) < 6:
        raise ArgumentError(f"lookup_pass: a float32 table [slots, >= {dim}] with a pin per slot, a count per row "
                            f"and 6 counters, got {table.dtype} {table.shape}, {len(pin)} pins, {len(counts)} counts")
    n_rows = min(len(d.cache_loc), len(d.host_loc), len(d.on_ssd), len(d.last), len(d.freq))
    m = len(g)
    slots = np.empty(m, dtype=np.int64)
    rows = np.empty((m, int(dim)), dtype=np.float32)
    ptr = [a.ctypes.data for a in arrays]
    miss = _lib().fbx_lookup_pass(g.ctypes.data, counts.ctypes.data, m, *ptr[:5], rs, int(step), n_rows, ptr[5],
                                  table.shape[0], int(pin_step), table.ctypes.data, table.shape[1], int(dim),
                                  slots.ctypes.data, rows.ctypes.data, ptr[6], row_threads())
    if miss == -1:
        raise RowIndexError(f"lookup_pass: a row beyond the {n_rows} rows of the row arrays")
    if miss < 0:
        raise RowIndexError(f"lookup_pass: a cache slot beyond the table's {table.shape[0]} rows")
    return slots, rows, int(miss)


def window_keys(g: np.ndarray, next_use: np.ndarray, freq: np.ndarray, current: int, in_window: int) -> np.ndarray:
    """Eviction keys of rows ``g`` in one C pass: ``in_window - next_use[g]`` where
    ``next_use[g] > current``, else ``freq[g]`` (int64 arrays; ``g`` in range of both).

    Example:
        >>> import numpy as np
        >>> window_keys(np.array([0, 1]), np.array([-1, 7]), np.array([3, 4]), current=5, in_window=100).tolist()
        [3, 93]
    """
    g = np.ascontiguousarray(g, dtype=np.int64)
    _int64_arrays("window_keys", next_use)
    fs = record_stride("window_keys", freq)
    out = np.empty(len(g), dtype=np.int64)
    n_rows = min(len(next_use), len(freq))
    if _lib().fbx_window_keys(g.ctypes.data, len(g), next_use.ctypes.data, freq.ctypes.data, fs, n_rows,
                              int(current), int(in_window), out.ctypes.data) != 0:
        raise RowIndexError(f"window_keys: rows outside [0, {n_rows})")
    return out


def _int64_arrays(where: str, *arrays: np.ndarray) -> None:
    for a in arrays:
        if a.dtype != np.int64 or not a.flags.c_contiguous:
            raise InputTypeError(f"{where}: expected contiguous int64 arrays, got {a.dtype}")


def window_announce(g: np.ndarray, step: int, current: int, next_use: np.ndarray, last_step: np.ndarray,
                    last_occ: np.ndarray, ring: np.ndarray, occ0: int) -> np.ndarray:
    """One pass of :meth:`fbrapids.trainers.sparse.lookahead.UseWindow.announce` over a
    batch's rows ``g`` (-1 and repeats skipped; ``len(ring)`` a power of two): links each
    row's pending occurrence to ``step`` (else sets its ``next_use``), numbers its new
    occurrence from ``occ0``; returns the distinct rows, in order.

    Example:
        >>> import numpy as np
        >>> nu, ls, lo, ring = np.full(4, -1), np.full(4, -1), np.zeros(4, np.int64), np.full(8, -1)
        >>> window_announce(np.array([2, -1, 2, 0]), 1, 0, nu, ls, lo, ring, 0).tolist(), nu.tolist()
        ([2, 0], [1, -1, 1, -1])
        >>> window_announce(np.array([2]), 2, 0, nu, ls, lo, ring, 2).tolist(), ring[:3].tolist()
        ([2], [2, -1, -1])
    """
    g = np.ascontiguousarray(g, dtype=np.int64)
    _int64_arrays("window_announce", next_use, last_step, last_occ, ring)
    n_rows = min(len(next_use), len(last_step), len(last_occ))
    out = np.empty(len(g), dtype=np.int64)
    n = _lib().fbx_window_announce(g.ctypes.data, len(g), int(step), int(current), next_use.ctypes.data,
                                   last_step.ctypes.data, last_occ.ctypes.data, ring.ctypes.data, len(ring) - 1,
                                   int(occ0), n_rows, out.ctypes.data)
    if n < 0:
        raise RowIndexError(f"window_announce: rows outside [0, {n_rows})")
    return out[:n]


def window_begin(g: np.ndarray, ring: np.ndarray, occ0: int, next_use: np.ndarray) -> None:
    """``next_use[g[j]] = ring[(occ0 + j) % len(ring)]`` in one C pass (``g`` distinct rows
    in range, as :func:`window_announce` returned them).

    Example:
        >>> import numpy as np
        >>> nu = np.full(3, -1); window_begin(np.array([2, 0]), np.array([7, 9, 5, 4]), 3, nu); nu.tolist()
        [7, -1, 4]
    """
    g = np.ascontiguousarray(g, dtype=np.int64)
    _int64_arrays("window_begin", next_use, ring)
    if len(g) and (int(g.min()) < 0 or int(g.max()) >= len(next_use)):
        raise RowIndexError(f"window_begin: rows outside [0, {len(next_use)})")
    _lib().fbx_window_begin(g.ctypes.data, len(g), ring.ctypes.data, len(ring) - 1, int(occ0), next_use.ctypes.data)


def cache_slots(g: np.ndarray, cache_loc: np.ndarray) -> tuple[np.ndarray, int]:
    """``(cache_loc[g], number of -1 among them)`` in one C pass (``g`` int64 rows in range).

    Example:
        >>> import numpy as np
        >>> s, miss = cache_slots(np.array([2, 0]), np.array([5, -1, -1]))
        >>> s.tolist(), miss
        ([-1, 5], 1)
    """
    g = np.ascontiguousarray(g, dtype=np.int64)
    rs = record_stride("cache_slots", cache_loc)
    slots = np.empty(len(g), dtype=np.int64)
    miss = _lib().fbx_cache_slots(g.ctypes.data, len(g), cache_loc.ctypes.data, rs, len(cache_loc),
                                  slots.ctypes.data)
    if miss < 0:
        raise RowIndexError(f"cache_slots: rows outside [0, {len(cache_loc)})")
    return slots, int(miss)


def pin_slots(slots: np.ndarray, pin: np.ndarray, step: int) -> None:
    """``pin[s] = max(pin[s], step)`` for the slots ``s >= 0`` (in place, one C pass).

    Example:
        >>> import numpy as np
        >>> pin = np.array([3, 0, 0]); pin_slots(np.array([0, -1, 2]), pin, 2); pin.tolist()
        [3, 0, 2]
    """
    slots = np.ascontiguousarray(slots, dtype=np.int64)
    if pin.dtype != np.int64 or not pin.flags.c_contiguous:
        raise InputTypeError(f"pin_slots: pin must be contiguous int64, got {pin.dtype}")
    if _lib().fbx_pin_slots(slots.ctypes.data, len(slots), pin.ctypes.data, len(pin), int(step)) != 0:
        raise RowIndexError(f"pin_slots: slots beyond [0, {len(pin)})")


def seed_mixes(seed_mix: int | Sequence[int] | np.ndarray, dim: int) -> tuple[np.ndarray, int]:
    """``seed_mix`` (one, or one per slice of a row) as a uint64 array, and each slice's width
    out of the embedding's ``dim``.

    Example:
        >>> m, per = seed_mixes([5, 6], 8); m.tolist(), per
        ([5, 6], 4)
    """
    mixes = np.ascontiguousarray(np.atleast_1d(np.asarray(seed_mix, dtype=np.uint64)))
    if len(mixes) < 1 or dim % len(mixes):
        raise ArgumentError(f"{len(mixes)} seeds do not split an embedding of {dim} into slices of one width")
    return mixes, dim // len(mixes)


def init_rows_into(ids: np.ndarray, out: np.ndarray, dim: int, seed_mix: int | Sequence[int] | np.ndarray,
                   scale: float) -> None:
    """Write :func:`fbrapids.trainers.sparse.init.init_rows` of ``ids`` into ``out[:, :dim]``
    (float32 rows, C-contiguous, ``out.shape[1] >= dim``) in one C pass, bit for bit.

    ``seed_mix`` is ``splitmix64(seed)`` (see :func:`fbrapids.trainers.sparse.init.seed_mix`), or
    one per slice: ``out[:, k * w:(k + 1) * w]`` is then the rows of width ``w = dim / slices``
    of seed ``k`` (a row holding several arms' vectors, :class:`~fbrapids.trainers.sparse.StoreConfig`).

    Example:
        >>> from fbrapids.trainers.sparse.init import init_rows, seed_mix
        >>> out = np.zeros((1, 4), np.float32)
        >>> init_rows_into(np.array([9], np.uint64), out, 4, [seed_mix(1), seed_mix(2)], 0.5)
        >>> bool((out[:, 2:] == init_rows(np.array([9], np.uint64), 2, 2, 0.5)).all())
        True
    """
    ids = _u64(ids)
    if out.dtype != np.float32 or not out.flags.c_contiguous or out.ndim != 2 or out.shape[1] < dim \
            or out.shape[0] != len(ids):
        raise ArgumentError(f"init_rows_into: out must be C-contiguous float32 [{len(ids)}, >= {dim}], "
                         f"got {out.dtype} {out.shape}")
    mixes, per = seed_mixes(seed_mix, dim)
    _lib().fbx_init_rows(ids.ctypes.data, len(ids), per, mixes.ctypes.data, len(mixes), float(scale),
                         out.ctypes.data, out.shape[1])


def unbook_rows(g: np.ndarray, counts: np.ndarray, d: RowDirectory, old_last: np.ndarray) -> None:
    """Undo the booking a prepare did ahead (:func:`prepare_tables`: ``last[g] = step``, ``freq[g]
    += counts``) for a batch that was not looked up after all: ``last[g] = old_last`` (the last
    steps it saved), ``freq[g] -= counts``.

    Example:
        >>> import numpy as np
        >>> from fbrapids.trainers.sparse.row_directory import RowDirectory
        >>> d = RowDirectory(); g = d.admit(np.array([7, 8], dtype=np.uint64))
        >>> d.last[g], d.freq[g] = [5, 5], [3, 1]   # booked at step 5: 3 and 1 occurrences
        >>> unbook_rows(g, np.array([3, 1]), d, np.array([2, 0])); d.last[g].tolist(), d.freq[g].tolist()
        ([2, 0], [0, 0])
    """
    g = np.ascontiguousarray(g, dtype=np.int64)
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    old_last = np.ascontiguousarray(old_last, dtype=np.int64)
    rs = record_stride("unbook_rows", d.last, d.freq)
    if len(counts) != len(g) or len(old_last) != len(g):
        raise ArgumentError("unbook_rows: a count and a last step per row")
    _lib().fbx_unbook_rows(g.ctypes.data, counts.ctypes.data, len(g), d.last.ctypes.data, d.freq.ctypes.data, rs,
                           old_last.ctypes.data)


def place_new(g: np.ndarray, slots: np.ndarray, d: RowDirectory, owner: np.ndarray, dirty: np.ndarray, pin: np.ndarray,
              pin_step: int, table: np.ndarray, dim: int, seed_mix: int | np.ndarray, scale: float,
              state: np.ndarray) -> bool:
    """Place new rows ``g`` (admitted, never materialised: in no tier and not on the SSD
    file) in the free cache slots ``slots`` in one C pass: their initial rows
    (:func:`init_rows_into` of their ids, then the optimizer ``state``) written into
    ``table``, ``d.cache_loc[g] = slots``, ``owner[slots] = g``, ``dirty[slots] = True``,
    ``pin[slots] = pin_step``.  False (nothing done) when a row is not new.

    Example:
        >>> import numpy as np
        >>> from fbrapids.trainers.sparse.row_directory import RowDirectory
        >>> d = RowDirectory(); g = d.admit(np.array([7], dtype=np.uint64))
        >>> table, owner, pin = np.zeros((2, 3), np.float32), np.full(2, -1), np.full(2, -1)
        >>> dirty = np.zeros(2, bool)
        >>> place_new(g, np.array([1]), d, owner, dirty, pin, 5, table, 2, 0, 0.5, np.array([0.1], np.float32))
        True
        >>> d.cache_loc[g].tolist(), owner.tolist(), pin.tolist(), bool(table[1, 2] == np.float32(0.1))
        ([1], [-1, 0], [-1, 5], True)
    """
    g = np.ascontiguousarray(g, dtype=np.int64)
    slots = np.ascontiguousarray(slots, dtype=np.int64)
    state = np.ascontiguousarray(state, dtype=np.float32)
    rs = record_stride("place_new", d.cache_loc, d.host_loc)
    for a, dt in ((owner, np.int64), (pin, np.int64), (dirty, np.bool_), (d.on_ssd, np.bool_)):
        if a.dtype != dt or not a.flags.c_contiguous:
            raise InputTypeError(f"place_new: expected a contiguous {np.dtype(dt)} array, got {a.dtype}")
    if table.dtype != np.float32 or not table.flags.c_contiguous or table.ndim != 2 or len(slots) != len(g) \
            or len(owner) < table.shape[0] or len(pin) < table.shape[0] or len(dirty) < table.shape[0] \
            or len(state) != table.shape[1] - dim:
        raise ArgumentError("place_new: a float32 table with an owner, pin and dirty entry per slot, a slot per row "
                            "and the optimizer state's columns")
    n_rows = min(len(d.cache_loc), len(d.host_loc), len(d.on_ssd), len(d.g2id))
    mixes, per = seed_mixes(seed_mix, dim)
    rc = _lib().fbx_place_new(g.ctypes.data, len(g), slots.ctypes.data, d.g2id.ctypes.data, d.cache_loc.ctypes.data,
                              d.host_loc.ctypes.data, d.on_ssd.ctypes.data, rs, n_rows, owner.ctypes.data,
                              dirty.ctypes.data, pin.ctypes.data, table.shape[0], int(pin_step), table.ctypes.data,
                              table.shape[1], per, mixes.ctypes.data, len(mixes), float(scale), state.ctypes.data)
    if rc == -2:
        raise RowIndexError(f"place_new: a slot outside [0, {table.shape[0]})")
    return rc == 0


#: words per table of :func:`lookup_tables`' descriptors (``csrc/hashmap.c``, ``FBX_LK_*``)
LOOKUP_WORDS = 21
#: words per table of :func:`rowwise_adagrad_tables`' descriptors (``csrc/rows.c``, ``FBX_AG_*``)
ADAGRAD_WORDS = 9


#: words per table of :func:`prepare_tables`' descriptors (``csrc/hashmap.c``, ``FBX_PR_*``)
PREPARE_WORDS = 32


def prepare_tables(desc: np.ndarray) -> np.ndarray:
    """Several tables' batches prepared for one RAM tier in one C call (the prefetch thread's
    work; what each table's part does: :meth:`UInt64HashMap.prepare_words`): row ``t`` of ``desc``
    ``[n, PREPARE_WORDS]`` (int64) is table ``t``'s :meth:`UInt64HashMap.prepare_words`;
    returns each table's result (0, -1 memory, -2 a free slot out of range, -3 a row out of range or
    not cached, -4 no room made for its new rows: nothing done).
    The caller vouches for every address (the words' arrays are alive, nothing else uses them
    meanwhile)."""
    desc = np.ascontiguousarray(desc, dtype=np.int64)
    if desc.ndim != 2 or desc.shape[1] != PREPARE_WORDS:
        raise ArgumentError(f"prepare_tables: descriptors must be [n, {PREPARE_WORDS}], got {desc.shape}")
    ret = np.zeros(len(desc), dtype=np.int64)
    _lib().fbx_prepare_tables(desc.ctypes.data, len(desc), ret.ctypes.data)
    return ret


def lookup_tables(desc: np.ndarray, progress: np.ndarray | None = None, need: np.ndarray | None = None) -> np.ndarray:
    """:func:`lookup_pass` of several tables in one C call: row ``t`` of ``desc`` ``[n,
    LOOKUP_WORDS]`` (int64) holds table ``t``'s arguments, arrays as the addresses of their
    data, in the order of ``FBX_LK_*`` in ``csrc/hashmap.c``; returns each table's result
    (admitted rows not cached, or < 0 for a row or slot out of range).  The caller vouches for
    every address and size: :func:`fbrapids.trainers.sparse.together.lookup_together` builds
    them from arrays :func:`lookup_pass` checks.

    ``progress`` (``[1]`` int64) and ``need`` (``[n]`` int64): an update of the tables' rows
    still running on another thread counts the tables it is done with in ``progress[0]``
    (:func:`rowwise_adagrad_tables`); table ``t``'s pass waits until it reaches ``need[t]``
    (0: nothing to wait for), not for the whole update.  The caller vouches that it will."""
    desc = np.ascontiguousarray(desc, dtype=np.int64)
    if desc.ndim != 2 or desc.shape[1] != LOOKUP_WORDS:
        raise ArgumentError(f"lookup_tables: descriptors must be [n, {LOOKUP_WORDS}], got {desc.shape}")
    at_progress = at_need = 0
    if progress is not None:
        if need is None or need.dtype != np.int64 or need.shape != (len(desc),) or not need.flags.c_contiguous \
                or progress.dtype != np.int64 or progress.shape != (1,):
            raise ArgumentError("lookup_tables: a [1] int64 progress counter and a need per table")
        at_progress, at_need = progress.ctypes.data, need.ctypes.data
    ret = np.zeros(len(desc), dtype=np.int64)
    _lib().fbx_lookup_tables(desc.ctypes.data, len(desc), ret.ctypes.data, row_threads(), at_progress, at_need)
    return ret


def rowwise_adagrad_tables(desc: np.ndarray, hyper: np.ndarray, progress: np.ndarray | None = None) -> np.ndarray:
    """:func:`rowwise_adagrad_` on several tables in one C call: row ``t`` of ``desc`` ``[n,
    ADAGRAD_WORDS]`` holds table ``t``'s rows, slot count, width, slots, their number, its
    gradient rows, its dirty flags, its dim (a slice's) and its slices (addresses as ints,
    ``FBX_AG_*`` in ``csrc/rows.c``; several slices: :func:`rowwise_adagrad_sliced_`'s update),
    ``hyper[t]`` its lr and eps; the slots of a table must be distinct.  Returns each
    table's result (0, or -1 for a slot out of range: that table untouched).  The caller
    vouches for every address and size, as for :func:`lookup_tables`.  ``progress`` (``[1]``
    int64): set to ``t + 1`` as soon as table ``t`` is done (what :func:`lookup_tables` on
    another thread waits on)."""
    desc = np.ascontiguousarray(desc, dtype=np.int64)
    hyper = np.ascontiguousarray(hyper, dtype=np.float32)
    if desc.ndim != 2 or desc.shape[1] != ADAGRAD_WORDS or hyper.shape != (len(desc), 2):
        raise ArgumentError(f"rowwise_adagrad_tables: descriptors [n, {ADAGRAD_WORDS}] and hyper-parameters [n, 2]")
    if progress is not None and (progress.dtype != np.int64 or progress.shape != (1,)):
        raise ArgumentError("rowwise_adagrad_tables: progress is a [1] int64 counter")
    ret = np.zeros(len(desc), dtype=np.intc)
    _lib().fbx_rowwise_adagrad_tables(desc.ctypes.data, hyper.ctypes.data, len(desc), ret.ctypes.data,
                                      row_threads(), 0 if progress is None else progress.ctypes.data)
    return ret


def _u64(keys: np.ndarray) -> np.ndarray:
    keys = np.asarray(keys)
    if keys.dtype == np.int64:
        keys = keys.view(np.uint64)
    if keys.dtype != np.uint64:
        raise InputTypeError(f"hash map keys must be uint64 or int64, got {keys.dtype}")
    return np.ascontiguousarray(keys)


class PreparedBuffers:
    """The arrays one table's part of :func:`prepare_tables` writes (and the keys it reads,
    kept alive with them), views of one block of int64: the distinct keys, inverse, counts and
    rows, the free slots left, the counts of keys, rows admitted and their occurrences, and
    the booking's slots, last steps before and lookup counters.  :attr:`at` holds each one's
    address (one allocation and one address a batch, not ten)."""

    def __init__(self, keys: np.ndarray, n: int, n_free: int) -> None:
        self.keys = keys
        block = np.empty(6 * n + 10, dtype=np.int64)
        self.uniq, self.inverse, self.counts = block[:n].view(np.uint64), block[n : 2 * n], block[2 * n : 3 * n]
        self.rows, self.slots, self.old_last = block[3 * n : 4 * n], block[4 * n : 5 * n], block[5 * n : 6 * n]
        self.left, self.out, self.touched = block[6 * n : 6 * n + 1], block[6 * n + 1 : 6 * n + 4], block[6 * n + 4 :]
        self.left[0] = n_free
        block[6 * n + 1 :] = 0
        base = block.ctypes.data
        #: addresses of uniq, inverse, counts, rows, slots, old_last, left, out, touched
        self.at = [base + 8 * k * n for k in range(6)] + [base + 8 * (6 * n + k) for k in (0, 1, 4)]

    def found(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(distinct keys, inverse, counts, rows), as :meth:`UInt64HashMap.unique_get` returns them."""
        m = int(self.out[0])
        return self.uniq[:m], self.inverse, self.counts[:m], self.rows[:m]

    def placed(self) -> tuple[int, int, int]:
        """(rows admitted, their occurrences, free slots left)."""
        return int(self.out[1]), int(self.out[2]), int(self.left[0])

    def booked(self, pin_step: int) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        """The booking as a stash holds it: (step, slots, last steps before, counters)."""
        m = int(self.out[0])
        return pin_step, self.slots[:m], self.old_last[:m], self.touched


class UInt64HashMap:
    """Map raw uint64 keys to int64 values; every operation takes a whole array.

    Example:
        >>> import numpy as np
        >>> m = UInt64HashMap()
        >>> m.incr(np.array([5, 5, 6], dtype=np.uint64)).tolist()
        [1, 2, 1]
        >>> len(m)
        2
    """

    def __init__(self, capacity: int = 1024) -> None:
        self._lib = _lib()
        #: prepare_words' checked words of the arrays it was last given, and those arrays (kept until others come)
        self._prepare_static: tuple[tuple, tuple, dict[str, int]] | None = None
        self._h = self._lib.fbx_hm_new(int(capacity))
        if not self._h:
            raise StoreMemoryError(f"could not allocate an id hash map of {capacity} entries")

    def __del__(self) -> None:
        h, self._h = getattr(self, "_h", None), None
        if h:
            self._lib.fbx_hm_free(h)

    def __len__(self) -> int:
        return int(self._lib.fbx_hm_size(self._h))

    def get(self, keys: np.ndarray, missing: int = -1) -> np.ndarray:
        """Values of ``keys`` (int64), ``missing`` where a key is absent."""
        keys = _u64(keys)
        out = np.empty(len(keys), dtype=np.int64)
        self._lib.fbx_hm_get(self._h, keys.ctypes.data, len(keys), out.ctypes.data, int(missing))
        return out

    def put(self, keys: np.ndarray, values: np.ndarray) -> None:
        """Insert or overwrite ``keys[i] -> values[i]``."""
        keys = _u64(keys)
        vals = np.ascontiguousarray(values, dtype=np.int64)
        if len(vals) != len(keys):
            raise ArgumentError(f"{len(keys)} keys but {len(vals)} values")
        rc = self._lib.fbx_hm_put(self._h, keys.ctypes.data, vals.ctypes.data, len(keys))
        if rc == -2:
            raise ArgumentError(f"hash map values must not be {np.iinfo(np.int64).min} (the mark of a free bucket)")
        if rc != 0:
            raise StoreMemoryError(f"the id hash map of {len(self)} entries could not grow by {len(keys)}: "
                                   "out of memory")

    def incr(self, keys: np.ndarray) -> np.ndarray:
        """Add one to each key's count (absent keys start at 0); the new counts."""
        keys = _u64(keys)
        out = np.empty(len(keys), dtype=np.int64)
        if self._lib.fbx_hm_incr(self._h, keys.ctypes.data, len(keys), out.ctypes.data) != 0:
            raise StoreMemoryError(f"the id hash map of {len(self)} entries could not grow by {len(keys)}: "
                                   "out of memory")
        return out

    def unique_get(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:func:`unique_u64` of ``keys`` plus the values of the distinct keys (-1 where absent),
        in one call: ``(uniq, inverse, counts, values)``.

        Example:
            >>> import numpy as np
            >>> m = UInt64HashMap(); m.put(np.array([9], dtype=np.uint64), np.array([4]))
            >>> [a.tolist() for a in m.unique_get(np.array([5, 9, 5], dtype=np.uint64))]
            [[5, 9], [0, 1, 0], [2, 1], [-1, 4]]
        """
        keys = _u64(keys)
        n = len(keys)
        uniq = np.empty(n, dtype=np.uint64)
        inverse = np.empty(n, dtype=np.int64)
        counts = np.empty(n, dtype=np.int64)
        vals = np.empty(n, dtype=np.int64)
        m = self._lib.fbx_unique_get(self._h, keys.ctypes.data, n, uniq.ctypes.data, inverse.ctypes.data,
                                     counts.ctypes.data, vals.ctypes.data)
        if m < 0:
            raise StoreMemoryError(f"the distinct ids of a batch of {n} ids: out of memory for their scratch table")
        return uniq[:m], inverse, counts[:m], vals[:m]

    def prepare_words(self, keys: np.ndarray, n_rows: int, g2id: np.ndarray, cache_loc: np.ndarray,
                      free: np.ndarray, n_free: int, owner: np.ndarray, dirty: np.ndarray, pin: np.ndarray | None,
                      pin_step: int, table: np.ndarray, dim: int, seed_mix: int | np.ndarray, scale: float,
                      state: np.ndarray, last: np.ndarray, freq: np.ndarray) -> tuple[list[int], PreparedBuffers]:
        """A batch's ``keys`` prepared for one RAM tier, as a row of :func:`prepare_tables`'
        descriptors, and the arrays the call writes its results into (kept alive by the caller
        until the call is done; :class:`PreparedBuffers` reads them).  The call finds the
        distinct keys, their inverse, counts and rows (:meth:`unique_get`); admits the keys not
        in the map (rows ``n_rows``, ``n_rows + 1``, ... in first-occurrence order: mapped here,
        ``g2id[row] = key``) and places them in cache slots popped from the top of
        ``free[:n_free]`` (:func:`place_new`'s writes: the initial row, ``cache_loc``,
        ``owner``, ``dirty``, ``pin``); then books every distinct row at ``pin_step``
        (``last[row] = pin_step``, ``freq[row] += count``, its slot, its pin; the lookup's
        counters), undone by :func:`unbook_rows` when the batch is not looked up next.  The
        caller has made room (``g2id`` and the records for ``n_rows + len(keys)`` rows,
        ``n_free >= len(keys)``).  ``pin`` None: no slot is pinned (a cache that never evicts,
        where a pin is a write nothing reads).

        Example:
            >>> import numpy as np
            >>> m = UInt64HashMap(); m.put(np.array([9], dtype=np.uint64), np.array([0]))
            >>> g2id, rec = np.array([9, 0, 0, 0], np.uint64), np.array([[0, -1, 0, 0]] + [[-1, -1, 0, 0]] * 3)
            >>> table, owner, pin, dirty = np.zeros((4, 2), np.float32), np.full(4, -1), np.full(4, -1), np.zeros(4, bool)
            >>> words, bufs = m.prepare_words(np.array([5, 9, 5], np.uint64), 1, g2id, rec[:, 0], np.array([3, 2, 1]),
            ...     3, owner, dirty, pin, 7, table, 1, 0, 0.5, np.array([0.0], np.float32), rec[:, 2], rec[:, 3])
            >>> prepare_tables(np.array([words])).tolist(), [a.tolist() for a in bufs.found()], bufs.placed()
            ([0], [[5, 9], [0, 1, 0], [2, 1], [1, 0]], (1, 2, 2))
            >>> bufs.slots[:2].tolist(), rec[:2, 2].tolist(), rec[:2, 3].tolist(), pin[:4].tolist()
            ([1, 0], [7, 7], [1, 2], [7, 7, -1, -1])
        """
        keys = _u64(keys)
        n = len(keys)
        w = self._static_words(g2id, cache_loc, free, owner, dirty, pin, table, dim, seed_mix, scale, state, last, freq)
        if not 0 <= n_free <= len(free):
            raise ArgumentError(f"prepare_words: {n_free} free slots of {len(free)}")
        b = PreparedBuffers(keys, n, int(n_free))
        uniq, inverse, counts, rows, slots, old_last, left, out, touched = b.at
        words = [int(self._h), keys.ctypes.data, n, uniq, inverse, counts, rows, int(n_rows), w["row_cap"],
                 w["g2id"], w["cache_loc"], w["rs"], w["free"], left, w["owner"], w["dirty"], w["pin"], w["n_slots"],
                 int(pin_step), w["table"], w["width"], w["per"], w["mixes"], w["n_mixes"], w["scale_bits"],
                 w["state"], out, w["last"], w["freq"], slots, old_last, touched]
        return words, b

    def _static_words(self, g2id: np.ndarray, cache_loc: np.ndarray, free: np.ndarray, owner: np.ndarray,
                      dirty: np.ndarray, pin: np.ndarray | None, table: np.ndarray, dim: int, seed_mix: int | np.ndarray,
                      scale: float, state: np.ndarray, last: np.ndarray, freq: np.ndarray) -> dict[str, int]:
        """:meth:`prepare_words`' words of the table's own arrays, checked once: kept (with
        the arrays) until it is given other arrays (one reallocated) or other parameters."""
        arrays = (g2id, cache_loc, free, owner, dirty, pin, table, seed_mix, state, last, freq)
        params = (dim, float(scale))
        cached = self._prepare_static
        if cached is not None and cached[1] == params and all(a is b for a, b in zip(arrays, cached[0])):
            return cached[2]
        pins = pin if pin is not None else owner  # (no pin array: the owners' length stands for it)
        for a, dt in ((g2id, np.uint64), (free, np.int64), (owner, np.int64), (pins, np.int64), (dirty, np.bool_)):
            if a.dtype != dt or not a.flags.c_contiguous:
                raise InputTypeError(f"prepare_words: expected a contiguous {np.dtype(dt)} array, got {a.dtype}")
        rs = record_stride("prepare_words", cache_loc, last, freq)
        st = np.ascontiguousarray(state, dtype=np.float32)
        if table.dtype != np.float32 or not table.flags.c_contiguous or table.ndim != 2 or \
                min(len(owner), len(pins), len(dirty)) < table.shape[0] or len(st) != table.shape[1] - dim:
            raise ArgumentError("prepare_words: a float32 table with an owner, pin and dirty entry per slot")
        mixes, per = seed_mixes(seed_mix, dim)
        words = {"row_cap": min(len(g2id), len(cache_loc), len(last), len(freq)), "g2id": g2id.ctypes.data,
                 "cache_loc": cache_loc.ctypes.data, "rs": rs, "free": free.ctypes.data, "owner": owner.ctypes.data,
                 "dirty": dirty.ctypes.data, "pin": 0 if pin is None else pin.ctypes.data, "n_slots": table.shape[0],
                 "table": table.ctypes.data, "width": table.shape[1], "per": per, "mixes": mixes.ctypes.data,
                 "n_mixes": len(mixes), "scale_bits": int(np.array([scale], dtype=np.float32).view(np.uint32)[0]),
                 "state": st.ctypes.data, "last": last.ctypes.data, "freq": freq.ctypes.data}
        # the arrays (with the mixes and the state as converted) stay alive as long as their words are kept
        self._prepare_static = (arrays + (mixes, st), params, words)
        return words

    def items(self) -> tuple[np.ndarray, np.ndarray]:
        """All (keys uint64, values int64), in table order."""
        n = len(self)
        keys = np.empty(n, dtype=np.uint64)
        vals = np.empty(n, dtype=np.int64)
        self._lib.fbx_hm_export(self._h, keys.ctypes.data, vals.ctypes.data)
        return keys, vals
