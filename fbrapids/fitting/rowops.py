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

from typing import TYPE_CHECKING, Mapping

import numpy as np
import pandas as pd
import pyarrow as pa

from fbrapids.errors import FeatureError
from fbrapids.fitting.frame_op import FrameOperator
from fbrapids.kernels import Call

if TYPE_CHECKING:  # (annotations only: no import at run time)
    from fbrapids.frames.backend import EagerFrame

INT64_NA = pd.ArrowDtype(pa.int64())


def _list_array(s: pd.Series, expr: str = "a list operator") -> pa.ListArray:
    arr = pa.array(s.array) if isinstance(s.dtype, pd.ArrowDtype) else pa.array(s.tolist(), from_pandas=True) \
        if s.dtype == object else pa.array(s, from_pandas=True)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.null_count == len(arr) and not pa.types.is_list(arr.type) and not pa.types.is_large_list(arr.type):
        arr = pa.nulls(len(arr), pa.list_(pa.int64()))  # an all-null column (object, or str on dask): null lists
    if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
        raise FeatureError(f"{expr}: expected a list column, got {arr.type}")
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
    """``values[i]`` where ``a0 == keys[i]`` (float64), ``default`` for other values and nulls
    (the kinds of the keys and of the column are checked first: :func:`check_key_kinds`)."""
    x = part["a0"]
    kind = _number_kind(x)
    if kind is None:
        index, at = pd.Index(list(keys)), None
        # (pandas takes na_value=None; pandas-stubs 3.1 types na_value as a scalar without None)
        probe = x.to_numpy(dtype=object, na_value=None) if x.dtype == object or isinstance(  # type: ignore[call-overload]
            x.dtype, (pd.ArrowDtype, pd.StringDtype)) else x.to_numpy()
    else:  # numbers compare exactly, in the column's own type (never through float64)
        dtype = np.dtype(kind)
        probe = x.to_numpy(dtype=dtype, na_value=0 if dtype.kind != "f" else np.nan)
        at, held = _keys_of(keys, dtype)
        index = pd.Index(np.array(held, dtype=dtype))
    pos = np.asarray(index.get_indexer(probe), dtype=np.int64) if len(index) else np.full(len(x), -1)
    if at is not None and len(at):
        pos = np.where(pos >= 0, np.asarray(at, dtype=np.int64)[np.maximum(pos, 0)], -1)
    pos[x.isna().to_numpy()] = -1
    table = np.asarray(values, dtype=np.float64)
    out = np.where(pos >= 0, table[np.maximum(pos, 0)] if len(table) else default, default)
    return pd.Series(out, index=part.index)


def _number_kind(x: pd.Series) -> str | None:
    """The numpy dtype a numeric (non-bool) column's values are exact in (``int64``,
    ``uint64``, ``float64``, ...: numpy, masked or Arrow storage), or None."""
    dt = x.dtype
    np_dt = dt if isinstance(dt, np.dtype) else getattr(dt, "numpy_dtype", None)
    if isinstance(dt, pd.CategoricalDtype) or np_dt is None or np.dtype(np_dt).kind not in "iuf":
        return None
    k = np.dtype(np_dt)
    return "float64" if k.kind == "f" else ("int64" if k.kind == "i" else "uint64")


def _keys_of(keys: tuple, dtype: np.dtype) -> tuple[list[int], list[int | float]]:
    """The keys a column of ``dtype`` can equal (as Python compares them: ``2**64 - 1`` is
    not ``-1``, ``2**53 + 1`` is no float64, ``2.5`` no integer), with their positions."""
    at: list[int] = []
    held: list[int | float] = []
    for i, k in enumerate(keys):
        if isinstance(k, (bool, np.bool_)):
            k = int(k)
        if not isinstance(k, (int, float, np.integer, np.floating)) or k != k:
            continue
        if dtype.kind == "f":
            if isinstance(k, (int, np.integer)) and float(k) != k:
                continue
            at.append(i)
            held.append(float(k))
            continue
        if isinstance(k, (float, np.floating)) and not float(k).is_integer():
            continue
        info = np.iinfo(dtype)
        if int(info.min) <= int(k) <= int(info.max):
            at.append(i)
            held.append(int(k))
    return at, held


def _pad_fill(value: object, value_type: pa.DataType, expr: str) -> pa.Array:
    """``value`` as one element of ``value_type`` (None: a null), exactly, or a FeatureError
    naming the expression, the value and the type (never wrapped or rounded)."""
    if value is None:
        return pa.nulls(1, value_type)
    if isinstance(value, bool) or (pa.types.is_integer(value_type) and not isinstance(value, (int, np.integer))):
        raise FeatureError(f"{expr}: value {value!r} is not an element of the list's type {value_type}")
    try:
        return pa.array([value], type=value_type)
    except (pa.ArrowException, OverflowError, TypeError, ValueError) as exc:
        raise FeatureError(f"{expr}: value {value!r} does not fit the list's element type {value_type}") from exc


def check_key_kinds(x: pd.Series, keys: tuple, what: str) -> None:
    """A FeatureError naming ``what`` (the column) when ``lookup_value``'s keys could never
    match it: string keys against a numeric column, other keys against a string one, keys
    of both kinds.  Decided by the dtype (an object column: by its values, when it has some).

    Example:
        >>> check_key_kinds(pd.Series([1, 2]), ("1",), "user_id")
        Traceback (most recent call last):
        ...
        fbrapids.errors.FeatureError: lookup: column user_id of dtype int64 against string keys ('1', ...): nothing would match
    """
    is_text = isinstance(x.dtype, pd.StringDtype) or str(x.dtype) in ("str", "string") or (
        isinstance(x.dtype, pd.ArrowDtype) and (pa.types.is_string(x.dtype.pyarrow_dtype)
                                               or pa.types.is_large_string(x.dtype.pyarrow_dtype)))
    if isinstance(x.dtype, pd.CategoricalDtype):
        is_text = x.cat.categories.inferred_type in ("string", "empty") and len(x.cat.categories) > 0
    elif x.dtype == object:
        is_text = pd.api.types.infer_dtype(x, skipna=True) in ("string", "empty") and x.notna().any()
    str_keys = [k for k in keys if isinstance(k, str)]
    if str_keys and len(str_keys) < len(keys):
        raise FeatureError(f"lookup: the keys mix strings and other values ({keys[:4]!r} ...)")
    kind = x.dtype.kind if isinstance(x.dtype, np.dtype) else getattr(getattr(x.dtype, "numpy_dtype", None), "kind", None)
    numeric = kind in ("b", "i", "u", "f") and not is_text
    if str_keys and numeric or keys and not str_keys and is_text:
        raise FeatureError(f"lookup: column {what} of dtype {x.dtype} against "
                           f"{'string' if str_keys else 'non-string'} keys ({keys[0]!r}, ...): nothing would match")


def pad(part: pd.DataFrame, n: int, value: object = 0, side: str = "right", expr: str = "pad") -> pd.Series:
    """Each list made exactly ``n`` long: ``side="right"`` keeps the first ``n`` elements and
    pads after them; ``side="left"`` keeps the last ``n`` (the most recent behaviour) and pads
    before them.  A null list becomes ``n`` padding values.  The result has the input's list
    type: elements (uint64 ids, null elements) are kept exactly; ``value`` must be an element
    of that type (``None``: null padding), else a FeatureError naming ``expr`` and the value."""
    if side not in ("left", "right"):
        raise FeatureError(f"{expr}: side must be 'left' or 'right', got {side!r}")
    arr = _list_array(part["a0"], expr)
    fill = _pad_fill(value, arr.type.value_type, expr)
    off = _offsets(arr)
    lengths = np.diff(off)
    if arr.null_count:
        lengths = np.where(np.asarray(arr.is_valid().to_numpy(zero_copy_only=False)), lengths, 0)
    flat = flat_values(arr)
    rows = len(arr)
    if rows * n > 2**31 - 1 and not pa.types.is_large_list(arr.type):
        raise FeatureError(f"{expr}: {rows} rows of {n} elements pass a list column's 2^31 - 1 elements "
                           "(a large_list input has no such limit)")
    take = np.minimum(lengths, n)
    src_start = off[:-1] if side == "right" else off[:-1] + (lengths - take)
    dst_start = np.arange(rows, dtype=np.int64) * n + (0 if side == "right" else n - take)
    row_of = np.repeat(np.arange(rows), take)
    within = np.arange(int(take.sum())) - np.repeat(np.cumsum(take) - take, take)
    idx = np.full(rows * n, len(flat), dtype=np.int64)  # the padding value, after the elements
    idx[dst_start[row_of] + within] = src_start[row_of] + within
    values = pa.concat_arrays([flat, fill]).take(pa.array(idx))
    offsets = pa.array(np.arange(rows + 1, dtype=np.int64) * n,
                       type=pa.int64() if pa.types.is_large_list(arr.type) else pa.int32())
    lists = (pa.LargeListArray if pa.types.is_large_list(arr.type) else pa.ListArray).from_arrays(
        offsets, values, type=arr.type)
    return pd.Series(pd.arrays.ArrowExtensionArray(lists), index=part.index)


def _elements(arr: pa.ListArray) -> tuple[np.ndarray, pa.Array]:
    """The row of each non-null element of ``arr`` and the elements (Arrow)."""
    flat = flat_values(arr)
    rows = np.repeat(np.arange(len(arr), dtype=np.int64), np.diff(_offsets(arr)))
    if flat.null_count:
        keep = np.asarray(flat.is_valid().to_numpy(zero_copy_only=False))
        rows, flat = rows[keep], flat.filter(pa.array(keep))
    return rows, flat


def _hashed_type(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The one type both lists' elements are coded in by Arrow's hash (integers of one type,
    booleans, strings, bytes: where Arrow's equality is Python's), or None (the numpy path)."""
    def widened(t: pa.DataType) -> pa.DataType:
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return pa.large_string()
        if pa.types.is_binary(t) or pa.types.is_large_binary(t):
            return pa.large_binary()
        return t
    t = widened(a)
    if t != widened(b):
        return None
    return t if pa.types.is_integer(t) or pa.types.is_boolean(t) or t in (pa.large_string(), pa.large_binary()) \
        else None


def _codes(fa: pa.Array, fb: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """One int64 code per distinct element across ``fa`` and ``fb`` (equal elements, equal
    codes), -1 for an element that equals nothing (NaN)."""
    t = _hashed_type(fa.type, fb.type)
    if t is not None:  # Arrow's hash table over the values as they are: no Python objects
        codes = pa.concat_arrays([fa.cast(t), fb.cast(t)]).dictionary_encode().indices
        both = np.asarray(codes.to_numpy(zero_copy_only=False), dtype=np.int64)
    else:  # floats, mixed kinds: numpy values compared by value (int64 5 == uint64 5 == 5.0)
        na, nb = fa.to_numpy(zero_copy_only=False), fb.to_numpy(zero_copy_only=False)
        both, _ = pd.factorize(np.concatenate([na.astype(object), nb.astype(object)]) if na.dtype != nb.dtype
                               else np.concatenate([na, nb]))  # (NaN: -1)
        both = both.astype(np.int64)
    return both[: len(fa)], both[len(fa):]


def overlap_count(part: pd.DataFrame) -> pd.Series:
    """How many elements of list ``a0`` (each duplicate counted) appear in list ``a1`` (int64;
    null when either is null).  Elements compare by value (int64 5 matches uint64 5, never
    the string "5"); null elements, and NaN, never match.

    Example:
        >>> F = pd.ArrowDtype(pa.list_(pa.float64()))
        >>> overlap_count(pd.DataFrame({"a0": pd.Series([[1.0], [float("nan")]], dtype=F),
        ...                             "a1": pd.Series([[3.0, 5.0], [float("nan")]], dtype=F)})).tolist()
        [0, 0]
    """
    a, b = _list_array(part["a0"], "overlap_count"), _list_array(part["a1"], "overlap_count")
    rows_a, fa = _elements(a)
    rows_b, fb = _elements(b)
    ca, cb = _codes(fa, fb)
    width = int(max(ca.max(initial=0), cb.max(initial=0))) + 1
    # each (row, element) a number; a hash set of b's (pandas' isin: linear, where np.isin sorts)
    coded_b = cb >= 0  # (NaN, coded -1, matches nothing on either side)
    hit = pd.Index(rows_a * width + ca).isin(rows_b[coded_b] * width + cb[coded_b]) & (ca >= 0)
    counts = np.bincount(rows_a[hit], minlength=len(a)).astype(np.int64)
    valid = np.asarray(a.is_valid().to_numpy(zero_copy_only=False)) & np.asarray(b.is_valid().to_numpy(zero_copy_only=False))
    return pd.Series(pd.arrays.ArrowExtensionArray(pa.array(counts, mask=~valid)), index=part.index)


def _check_lookup_keys(meta: EagerFrame, cols: Mapping[str, str], call: Call) -> None:
    """``lookup_value``'s keys of another kind than the column's would match nothing, silently."""
    check_key_kinds(meta[cols["a0"]], call.param_dict()["keys"], str(call.args[0]))


def _same_list_type(cols: Mapping[str, str], meta: EagerFrame) -> pd.ArrowDtype:
    """``pad``'s output dtype: its input's list type."""
    a0 = meta[cols["a0"]]
    return a0.dtype if isinstance(a0.dtype, pd.ArrowDtype) else pd.ArrowDtype(pa.list_(pa.int64()))


#: the row operators
FRAME_OPERATORS = {op.name: op for op in (
    FrameOperator("lookup_value", "f64", run=lookup_value, check=_check_lookup_keys),
    FrameOperator("pad", run=pad, out_dtype=_same_list_type, names_expr=True),
    FrameOperator("overlap_count", "i64?", run=overlap_count),
)}


def compute(op: str, part: pd.DataFrame, params: Mapping[str, object]) -> pd.Series:
    """Run row operator ``op`` on one partition.

    Example:
        >>> compute("lookup_value", pd.DataFrame({"a0": ["a", "z"]}), {"keys": ("a",), "values": (0.5,),
        ...                                                            "default": 0.0}).tolist()
        [0.5, 0.0]
    """
    run = FRAME_OPERATORS[op].run
    assert run is not None  # (every row operator declares its algorithm)
    return run(part, **params)
