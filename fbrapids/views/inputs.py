"""Input columns as the kernels read them: timestamps as epoch seconds, clear errors for
columns no kernel can read.

* ``hour``, ``weekday`` and ``day`` read epoch seconds.  A ``datetime64`` column in any
  unit (s, ms, us, ns) and any time zone is converted to UTC epoch seconds first (a naive
  one is taken as UTC; NaT is null); integer columns are epoch seconds already.  Any other
  dtype is an error naming the feature, the column and its dtype, and what is accepted.
* An ``object`` column of mixed Python types (``[1, "a"]``) is an error that suggests
  ``astype(str)``: guessing one type for it would hash ``1`` and ``"1"`` alike or not
  depending on which rows came first.

Example:
    >>> import pandas as pd
    >>> from fbrapids import ops
    >>> ts = pd.to_datetime(["2024-01-01 05:00"]).tz_localize("Europe/Paris")
    >>> prepare(pd.DataFrame({"ts": ts}), {"h": ops.hour("ts")})["ts"].tolist()  # 04:00 UTC
    [1704081600]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Mapping

import numpy as np
import pandas as pd

from fbrapids.errors import FeatureError
from fbrapids.frames import backend as _backend
from fbrapids.views.dtype_spec import DtypeSpec, as_numpy

if TYPE_CHECKING:  # (annotations only: no import at run time)
    from fbrapids.frames.backend import EagerSeries, FrameLike, SeriesLike
    from fbrapids.kernels import Call, Expr

ACCEPTED = ("datetime64 in any unit and time zone (naive = UTC), or integer epoch seconds")
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
_MIXED = ("mixed", "mixed-integer", "mixed-integer-float")


def _walk(expr: Expr) -> Iterator[Call]:
    from fbrapids.kernels import Call

    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, Call):
            yield e
            stack.extend(e.args)


def timestamp_columns(features: Mapping[str, Expr | str]) -> dict[str, str]:
    """Columns read directly by a timestamp operator (one that declares ``reads_time``):
    column -> the first feature doing so.

    Example:
        >>> from fbrapids import ops
        >>> timestamp_columns({"h": ops.hour("ts"), "u": ops.hash_bucket("u", 8)})
        {'ts': 'h'}
    """
    from fbrapids.kernels import Col, as_expr, find_operator

    out: dict[str, str] = {}
    for name, e in features.items():
        for call in _walk(as_expr(e)):
            op = find_operator(call.op)
            if op is not None and op.reads_time and len(call.args) == 1 and isinstance(call.args[0], Col):
                out.setdefault(call.args[0].name, name)
    return out


def is_datetime(dtype: DtypeSpec) -> bool:
    """Whether ``dtype`` is a datetime64 dtype, naive or time-zoned."""
    return isinstance(dtype, pd.DatetimeTZDtype) or (isinstance(dtype, np.dtype) and dtype.kind == "M") \
        or str(dtype).startswith("datetime64")


def datetime_unit(dtype: DtypeSpec) -> str:
    """The unit (``s``, ``ms``, ``us``, ``ns``) of a datetime64 dtype, naive or time-zoned,
    read from the dtype object (cudf keeps pandas' ``DatetimeTZDtype``, whose string
    ``datetime64[ns, UTC]`` numpy cannot parse).

    Example:
        >>> datetime_unit(pd.DatetimeTZDtype("ms", "Europe/Paris")), datetime_unit(np.dtype("datetime64[us]"))
        ('ms', 'us')
    """
    if isinstance(dtype, pd.DatetimeTZDtype):
        return dtype.unit
    unit = np.datetime_data(as_numpy(dtype))[0]
    if unit not in _PER_SECOND:
        raise FeatureError(f"datetime dtype {dtype} has unit {unit!r}; hour / weekday / day read "
                           f"{', '.join(_PER_SECOND)}")
    return unit


def epoch_seconds(s: SeriesLike) -> EagerSeries:
    """UTC epoch seconds (int64, floored; NaT -> null) of a datetime64 series.

    Example:
        >>> import pandas as pd
        >>> epoch_seconds(pd.Series(pd.to_datetime(["1969-12-31 23:59:59.5", None]))).tolist()
        [-1, <NA>]
    """
    dtype = s.dtype
    if _backend.is_gpu_object(s):  # cudf keeps UTC instants under a zone: its int64 view is UTC already
        return s.astype("int64") // _PER_SECOND[datetime_unit(dtype)]
    if isinstance(dtype, pd.DatetimeTZDtype):
        s = s.dt.tz_convert("UTC").dt.tz_localize(None)
    unit = datetime_unit(s.dtype)
    nat = s.isna().to_numpy()
    secs = s.to_numpy().view(np.int64) // _PER_SECOND[unit]
    if nat.any():
        return pd.Series(pd.arrays.IntegerArray(secs, nat), index=s.index, name=s.name)
    return pd.Series(secs, index=s.index, name=s.name)


def check_and_convert(frame: FrameLike, features: Mapping[str, Expr | str]) -> dict[str, EagerSeries]:
    """The columns of ``frame`` (pandas / cudf, or a dask meta) to replace before planning.

    Raises:
        FeatureError: a timestamp operator reads a column that is neither datetime nor
            integer, or a column the features read holds mixed Python types.
    """
    from fbrapids.kernels import as_expr, columns_of

    used: dict[str, str] = {}
    for name, e in features.items():
        for c in columns_of(as_expr(e)):
            used.setdefault(c, name)
    replace: dict[str, EagerSeries] = {}
    for column, feature in timestamp_columns(features).items():
        if column not in frame.columns:
            continue
        dtype = frame[column].dtype
        if is_datetime(dtype):
            replace[column] = epoch_seconds(frame[column])
            continue
        kind = getattr(getattr(dtype, "numpy_dtype", dtype), "kind", None)
        if kind not in ("i", "u"):
            raise FeatureError(f"feature {feature!r}: column {column!r} has dtype {dtype}, which hour / weekday / "
                               f"day cannot read; they accept {ACCEPTED}")
    if _backend.is_gpu_object(frame):  # device columns hold no Python objects
        return replace
    dtypes = dict(zip(frame.columns, frame.dtypes))  # one pass over the dtypes, not a column fetch per input
    for column, feature in used.items():
        if column in replace or column not in dtypes or dtypes[column] != object:  # noqa: E721  (a dtype compared with numpy's object dtype)
            continue
        s = frame[column]
        if len(s) and pd.api.types.infer_dtype(s, skipna=True) in _MIXED:
            kinds = sorted({type(v).__name__ for v in s.dropna().head(10_000)})
            raise FeatureError(f"feature {feature!r}: column {column!r} is an object column of mixed Python types "
                               f"({', '.join(kinds)}); convert it first, e.g. df[{column!r}] = df[{column!r}].astype(str)")
    return replace


def prepare(frame: FrameLike, features: Mapping[str, Expr | str]) -> FrameLike:
    """``frame`` with the columns the features read made readable (see the module doc)."""
    replace = check_and_convert(frame, features)
    return frame.assign(**replace) if replace else frame
