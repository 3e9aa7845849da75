"""Row operators computed at frame level (vectorised numpy / Arrow, one partition at a time):
``lookup_value`` (a dictionary with float values), ``pad`` and ``overlap_count``.

They need no state and no shuffle; on cudf partitions they run on the host copy of their
input columns (documented in :mod:`fbrapids.features.fitted`).  Inputs are ``a0``, ``a1``.

Example:
    >>> import pandas as pd, pyarrow as pa
    >>> L = pd.ArrowDtype(pa.list_(pa.int64()))
    >>> part = pd.DataFrame({"a0": pd.Series([[1, 2, 3], [4], None], dtype=L),
    ...                      "a1": pd.Series([[3, 1], [5], [1]], dtype=L)})
    >>> pad(part, n=2, value=0, side="left").tolist()
    [[2, 3], [0, 4], [0, 0]]
    >>> overlap_count(part).tolist()
    [2, 0, <NA>]
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from fbrapids.errors import FeatureError

INT64_NA = pd.ArrowDtype(pa.int64())


def _list_array(s: pd.Series) -> pa.ListArray:
    arr = pa.array(s.array) if isinstance(s.dtype, pd.ArrowDtype) else pa.array(s.tolist())
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
        raise FeatureError(f"expected a list column, got {arr.type}")
    return arr


def _offsets(arr: pa.ListArray) -> np.ndarray:
    off = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    return off - off[0]


def flat_values(arr: pa.ListArray) -> pa.Array:
    """The child values under ``arr``'s offsets (null lists' backing values included, so the
    offsets from :func:`_offsets` index them)."""
    off = arr.offsets
    start = off[0].as_py() if len(off) else 0
    return arr.values.slice(start, (off[-1].as_py() - start) if len(off) else 0)


def lookup_value(part: pd.DataFrame, keys: tuple, values: tuple, default: float = float("nan")) -> pd.Series:
    """``values[i]`` where ``a0 == keys[i]`` (float64), ``default`` for other values and nulls."""
    index = pd.Index(list(keys))
    x = part["a0"]
    probe = x.to_numpy(dtype=object, na_value=None) if x.dtype == object or isinstance(
        x.dtype, (pd.ArrowDtype, pd.StringDtype)) else x.to_numpy()
    pos = np.asarray(index.get_indexer(probe), dtype=np.int64) if len(index) else np.full(len(x), -1)
    pos[x.isna().to_numpy()] = -1
    table = np.asarray(values, dtype=np.float64)
    out = np.where(pos >= 0, table[np.maximum(pos, 0)] if len(table) else default, default)
    return pd.Series(out, index=part.index)


def pad(part: pd.DataFrame, n: int, value: Any = 0, side: str = "right") -> pd.Series:
    """Each list made exactly ``n`` long: ``side="right"`` keeps the first ``n`` elements and
    pads after them; ``side="left"`` keeps the last ``n`` (the most recent behaviour) and pads
    before them.  A null list becomes ``n`` padding values."""
    if side not in ("left", "right"):
        raise FeatureError(f"pad: side must be 'left' or 'right', got {side!r}")
    arr = _list_array(part["a0"])
    off = _offsets(arr)
    lengths = np.diff(off)
    if arr.null_count:
        lengths = np.where(np.asarray(arr.is_valid().to_numpy(zero_copy_only=False)), lengths, 0)
    flat = flat_values(arr)
    rows = len(arr)
    take = np.minimum(lengths, n)
    src_start = off[:-1] if side == "right" else off[:-1] + (lengths - take)
    dst_start = np.arange(rows, dtype=np.int64) * n + (0 if side == "right" else n - take)
    row_of = np.repeat(np.arange(rows), take)
    within = np.arange(int(take.sum())) - np.repeat(np.cumsum(take) - take, take)
    src = src_start[row_of] + within
    dst = dst_start[row_of] + within
    values = flat.to_numpy(zero_copy_only=False)
    out = np.full(rows * n, value, dtype=np.result_type(values.dtype, np.asarray(value).dtype)
                  if values.dtype.kind in "iuf" else object)
    out[dst] = values[src]
    lists = pa.ListArray.from_arrays(pa.array(np.arange(rows + 1, dtype=np.int32) * n), pa.array(out))
    return pd.Series(pd.arrays.ArrowExtensionArray(lists), index=part.index)


def overlap_count(part: pd.DataFrame) -> pd.Series:
    """How many elements of list ``a0`` appear in list ``a1`` (int64; null when either is null)."""
    a, b = _list_array(part["a0"]), _list_array(part["a1"])
    oa, ob = _offsets(a), _offsets(b)
    fa, fb = flat_values(a).to_numpy(zero_copy_only=False), flat_values(b).to_numpy(zero_copy_only=False)
    codes, _ = pd.factorize(np.concatenate([fa, fb]).astype(object) if fa.dtype != fb.dtype
                            else np.concatenate([fa, fb]))
    ca, cb = codes[: len(fa)].astype(np.int64), codes[len(fa):].astype(np.int64)
    width = int(codes.max()) + 1 if len(codes) else 1
    rows_a = np.repeat(np.arange(len(a), dtype=np.int64), np.diff(oa))
    rows_b = np.repeat(np.arange(len(b), dtype=np.int64), np.diff(ob))
    hit = np.isin(rows_a * width + ca, rows_b * width + cb)
    counts = np.bincount(rows_a[hit], minlength=len(a)).astype(np.int64)
    valid = np.asarray(a.is_valid().to_numpy(zero_copy_only=False)) & np.asarray(b.is_valid().to_numpy(zero_copy_only=False))
    return pd.Series(pd.arrays.ArrowExtensionArray(pa.array(counts, mask=~valid)), index=part.index)


ROW_OPS = {"lookup_value": lookup_value, "pad": pad, "overlap_count": overlap_count}


def compute(op: str, part: pd.DataFrame, params: dict[str, Any]) -> pd.Series:
    """Run row operator ``op`` on one partition.

    Example:
        >>> compute("lookup_value", pd.DataFrame({"a0": ["a", "z"]}), {"keys": ("a",), "values": (0.5,),
        ...                                                            "default": 0.0}).tolist()
        [0.5, 0.0]
    """
    return ROW_OPS[op](part, **params)
