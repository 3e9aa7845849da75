"""Frame schemas as the kernels see them: a series' dtype -> a kernel type name.

Example:
    >>> import pandas as pd
    >>> column_type(pd.Series([1, 2])), column_type(pd.Series(["a"], dtype="str"))
    ('i64', 'str')
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa

from fbrapids.errors import FeatureError
from fbrapids.frames import backend as backends
from fbrapids.kernels import as_expr, columns_of, from_arrow_type, object_array

if TYPE_CHECKING:  # (annotations only: no import at run time)
    from fbrapids.features.feature_map import FeatureMap
    from fbrapids.frames.backend import FrameLike, SeriesLike


def column_type(s: SeriesLike) -> str | None:
    """The kernel type name of a pandas / cudf series' dtype (None when unreadable)."""
    dtype = s.dtype
    if isinstance(dtype, pd.ArrowDtype):
        return from_arrow_type(dtype.pyarrow_dtype)
    if isinstance(dtype, pd.StringDtype) or str(dtype) in ("str", "string"):
        return "str"
    if backends.is_categorical(dtype):  # cudf's categorical dtype is no pd.CategoricalDtype
        host = backends.host_dtype(dtype)
        categories = host.categories if isinstance(host, pd.CategoricalDtype) else pd.Index([])
        # no categories (all null): strings, as an all-null object column
        return column_type(pd.Series(categories)) if len(categories) else "str"
    np_dtype = getattr(dtype, "numpy_dtype", dtype)
    if isinstance(np_dtype, np.dtype) and np_dtype.kind in "biuf":
        return from_arrow_type(pa.from_numpy_dtype(np_dtype))
    if backends.is_gpu_object(s):  # cudf list / string columns
        try:
            return from_arrow_type(s.dtype.to_arrow()) if hasattr(s.dtype, "to_arrow") else (
                "str" if str(dtype) == "object" else None)
        except Exception:  # noqa: BLE001 - an unreadable dtype is reported by the planner
            return None
    if np_dtype == np.dtype(object):
        sample = s.dropna().head(64)
        try:
            return from_arrow_type(object_array(sample.tolist()).type) if len(sample) else "str"
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            return None
    return None


def column_nullable(s: SeriesLike) -> bool:
    """Whether a series' dtype can hold nulls (numpy ints and bools cannot; floats hold NaN,
    datetimes NaT, the rest a mask or Arrow validity).

    Example:
        >>> column_nullable(pd.Series([1])), column_nullable(pd.Series([1], dtype="Int64"))
        (False, True)
    """
    dtype = s.dtype
    return not (isinstance(dtype, np.dtype) and dtype.kind in "biu")


def nullable_columns(frame: FrameLike, columns: set[str]) -> set[str]:
    """Those of ``columns`` whose dtype in ``frame`` (or its dask meta) can hold nulls."""
    meta = getattr(frame, "_meta", frame)
    return {c for c in meta.columns if c in columns and column_nullable(meta[c])}


def schema_of(frame: FrameLike, columns: set[str]) -> dict[str, str | None]:
    """Kernel type names of ``columns`` of a (pandas, cudf or dask) frame, from its meta."""
    meta = getattr(frame, "_meta", frame)
    return {c: column_type(meta[c]) for c in meta.columns if c in columns}


def check_columns(frame: FrameLike, features: FeatureMap) -> None:
    """Raise :class:`~fbrapids.errors.FeatureError` naming the feature, the column and the
    frame's columns when a feature reads a column ``frame`` does not have.

    Example:
        >>> from fbrapids import ops
        >>> check_columns(pd.DataFrame({"ts": [0], "u": [1]}), {"h": ops.hour("tss")})
        Traceback (most recent call last):
        ...
        fbrapids.errors.FeatureError: feature 'h': column 'tss' is not in the frame (columns: ts, u)
    """
    known = set(frame.columns)
    for name, e in features.items():
        missing = sorted(str(c) for c in columns_of(as_expr(e)) - known)
        if missing:
            have = [str(c) for c in frame.columns]
            shown = ", ".join(have[:30]) + (f", ... ({len(have)} columns)" if len(have) > 30 else "")
            raise FeatureError(f"feature {name!r}: column {missing[0]!r} is not in the frame (columns: "
                               f"{shown or 'none'})")


def columns_used(features: FeatureMap) -> set[str]:
    """The frame columns ``features`` read."""
    out: set[str] = set()
    for name, e in features.items():
        try:
            out |= columns_of(as_expr(e))
        except TypeError as exc:
            raise FeatureError(f"feature {name!r}: {exc}") from exc
    return out
