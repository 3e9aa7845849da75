"""Rows gathered from several runs of host rows into one, each row copied once.

The shuffle buffer (:mod:`fbrapids.trainers.shuffle`) holds the partitions as they arrived
and emits rows drawn from all of them.  Joining the parts first and taking rows from the
join copies every held row again at each emission; here output row ``i`` is row
``rows[i]`` of part ``parts[i]``, read where it lies (``csrc/row_gather.c``): fixed-width
columns (a dense matrix, labels, group keys, ids of one a row) in one call, a row's columns
read together (:func:`gather_columns`), ragged columns (int64 values and ``[n + 1]`` int64
offsets) in one pass writing both, the rows ahead prefetched (a gather in random order waits
on the memory's latency, not its bandwidth).  The values go into a buffer sized
from the parts' mean bag length (with room to spare), counted exactly and gathered again in
the rare case the rows drawn hold more, and trimmed by a copy when less than half is used.

Example:
    >>> import numpy as np
    >>> a, b = np.array([[1.0], [2.0]], np.float32), np.array([[3.0]], np.float32)
    >>> [c.ravel().tolist() for c in gather_columns([[a], [b]], np.array([1, 0, 0]), np.array([0, 1, 0]))]
    [[3.0, 2.0, 1.0]]
    >>> va, oa = np.array([5, 6, 7]), np.array([0, 2, 3])  # rows [5, 6] and [7]
    >>> vb, ob = np.array([8]), np.array([0, 0, 1])         # rows [] and [8]
    >>> [(v.tolist(), o.tolist()) for v, o in gather_ragged([[(va, oa)], [(vb, ob)]], np.array([1, 0, 1]),
    ...                                                      np.array([1, 0, 0]))]
    [([8, 5, 6], [0, 1, 3, 3])]
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path
from typing import Sequence

import numpy as np

from fbrapids.errors import ArgumentError
from fbrapids.kernels import load_source

CSRC = Path(__file__).with_name("csrc") / "row_gather.c"
Ragged = tuple[np.ndarray, np.ndarray]


@functools.lru_cache(maxsize=None)
def _lib() -> ctypes.CDLL:
    lib = load_source(CSRC.read_text())
    p, i64 = ctypes.c_void_p, ctypes.c_int64
    lib.fbx_gather_fixed.restype = None
    lib.fbx_gather_fixed.argtypes = [i64, p, p, i64, i64, p, p]
    lib.fbx_gather_ragged.restype = i64
    lib.fbx_gather_ragged.argtypes = [i64, p, p, i64, p, p, p, p, p]
    return lib


def _pointers(arrays: Sequence[np.ndarray]) -> ctypes.Array[ctypes.c_void_p]:
    return (ctypes.c_void_p * max(1, len(arrays)))(*[a.ctypes.data for a in arrays])


def _index(parts: np.ndarray, rows: np.ndarray, lengths: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """``parts`` and ``rows`` as contiguous int64, every pair checked against the parts' lengths."""
    parts = np.ascontiguousarray(parts, dtype=np.int64)
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    if parts.shape != rows.shape or parts.ndim != 1:
        raise ArgumentError(f"row gather: parts {parts.shape} and rows {rows.shape} must be one-dimensional and equal")
    if len(parts):
        if parts.min() < 0 or parts.max() >= len(lengths):
            raise ArgumentError(f"row gather: a part index outside 0..{len(lengths) - 1}")
        if rows.min() < 0 or (rows >= np.asarray(lengths, dtype=np.int64)[parts]).any():
            raise ArgumentError("row gather: a row outside its part")
    return parts, rows


def gather_columns(columns: Sequence[Sequence[np.ndarray]], parts: np.ndarray, rows: np.ndarray) -> list[np.ndarray]:
    """Fixed-width columns: row ``rows[i]`` of part ``parts[i]``'s column ``k`` (``columns[p][k]``;
    a column's arrays of one dtype and row shape) as row ``i`` of output ``k``, as numpy's
    ``concatenate`` then fancy index would give it; each row's columns read together."""
    ncols = len(columns[0]) if columns else 0
    if any(len(c) != ncols for c in columns):
        raise ArgumentError("row gather: the parts have different numbers of columns")
    firsts = list(columns[0]) if columns else []
    for k, first in enumerate(firsts):
        if any(c[k].dtype != first.dtype or c[k].shape[1:] != first.shape[1:] or len(c[k]) != len(c[0])
               for c in columns):
            raise ArgumentError(f"row gather: column {k}'s arrays differ in dtype, row shape or rows")
    parts, rows = _index(parts, rows, [len(c[0]) if ncols else 0 for c in columns])
    outs = [np.empty((len(parts), *f.shape[1:]), dtype=f.dtype) for f in firsts]
    widths = [f.dtype.itemsize * int(np.prod(f.shape[1:], dtype=np.int64)) for f in firsts]
    if not len(parts):
        return outs
    src = [[np.ascontiguousarray(a) for a in c] for c in columns]
    for width in sorted(set(widths) - {0}):  # one call for the columns of each width
        ks = [k for k, w in enumerate(widths) if w == width]
        _lib().fbx_gather_fixed(len(parts), parts.ctypes.data, rows.ctypes.data, len(ks), width,
                                _pointers([c[k] for c in src for k in ks]), _pointers([outs[k] for k in ks]))
    return outs


def gather_ragged(columns: Sequence[Sequence[Ragged]], parts: np.ndarray,
                  rows: np.ndarray) -> list[Ragged]:
    """The ragged columns (``columns[p][k]``: part ``p``'s column ``k``, int64 values and
    ``[n_p + 1]`` int64 offsets into them) at row ``rows[i]`` of part ``parts[i]``, as row ``i``:
    per column, values and offsets ``[len(rows) + 1]`` from 0."""
    ncols = len(columns[0]) if columns else 0
    if any(len(c) != ncols for c in columns):
        raise ArgumentError("row gather: the parts have different numbers of ragged columns")
    flat_v = [np.ascontiguousarray(v, dtype=np.int64) for c in columns for v, _ in c]
    flat_o = [np.ascontiguousarray(o, dtype=np.int64) for c in columns for _, o in c]
    lengths = [len(columns[p][0][1]) - 1 for p in range(len(columns))] if ncols else [0] * len(columns)
    for p, c in enumerate(columns):
        for k, (v, o) in enumerate(c):
            if len(o) - 1 != lengths[p] or (len(o) and (o[0] < 0 or o[-1] > len(v))):
                raise ArgumentError(f"row gather: part {p}'s ragged column {k} has offsets that do not fit "
                                    f"{lengths[p]} rows of {len(v)} values")
    if ncols == 0:
        return []
    parts, rows = _index(parts, rows, lengths)
    n = len(parts)
    # a bound from the parts' mean bag length (a quarter more, and some): an exact count would read every
    # gathered row's offsets once more, at random; a bound short of the rows (rare) is retried with the count
    values_in = np.array([sum(int(c[k][1][-1] - c[k][1][0]) for c in columns) for k in range(ncols)], dtype=np.int64)
    mean = values_in / max(1, sum(lengths))
    capacity = np.minimum(values_in * n, (mean * n * 1.25).astype(np.int64) + 4096)
    offsets = [np.empty(n + 1, dtype=np.int64) for _ in range(ncols)]
    for _ in range(2):
        values = [np.empty(int(c), dtype=np.int64) for c in capacity]
        short = _lib().fbx_gather_ragged(n, parts.ctypes.data, rows.ctypes.data, ncols, _pointers(flat_o),
                                         _pointers(flat_v), capacity.ctypes.data, _pointers(offsets),
                                         _pointers(values))
        if short < 0:
            break
        capacity = np.array([sum(int((c[k][1][1:] - c[k][1][:-1])[rows[parts == p]].sum())
                                 for p, c in enumerate(columns)) for k in range(ncols)], dtype=np.int64)
    else:  # cannot happen: the second bound is the count itself; never a write past a buffer
        raise ArgumentError(f"row gather: ragged column {short}'s values exceed their count")
    out = []
    for v, o in zip(values, offsets):
        used = int(o[-1])
        out.append((v[:used].copy() if used < len(v) // 2 else v[:used], o))
    return out
