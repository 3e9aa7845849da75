"""Behaviour-history operators over a key's earlier events, strictly before each row's time.

* ``history``: the key's last ``last_n`` items (oldest first) as a list column;
* ``window_count`` / ``window_mean``: events (and the mean of a value over them) in
  ``[t - window, t)``;
* ``time_since``: ``t`` minus the time of the key's previous event (null when none).

An *event* is a row with a non-null key and time (and, with ``events``, a true value in
that column: e.g. the clicks).  Events at the row's own time are never included, so a
row never sees itself or anything simultaneous or later.  Events at equal times are
ordered by item value, so results do not depend on the order of the rows.

Times are exact: a ``datetime64`` column (any unit, with or without a time zone: the
instant counts) is compared in its own unit, and a ``"1h"`` window is an hour whatever the
unit; an integer time column (epoch seconds, or any integer unit) stays int64, never
float64 (events 1 ns apart stay apart).  A window given as a number is in seconds for a
datetime column and in the column's own units for an integer one (a ``"1h"`` string takes
an integer time as epoch seconds).

Each partition is computed on its own; on dask the orchestration first shuffles the frame
by the key with dask's own shuffle, so every key's events sit in one partition and the
results are the same for any partitioning.

Example:
    >>> import pandas as pd
    >>> part = pd.DataFrame({"a0": [1, 1, 1, 2], "a1": [10, 20, 20, 15], "a2": [7, 8, 9, 5]})
    >>> history(part, last_n=2).tolist()
    [[], [7], [7], []]
    >>> window_count(part, window=10).tolist(), time_since(part).tolist()
    ([0, 1, 1, 0], [<NA>, 10, 10, <NA>])
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

import numpy as np
import pandas as pd
import pyarrow as pa

from fbrapids.errors import FeatureError
from fbrapids.fitting.frame_op import FrameOperator
from fbrapids.fitting.params import labels_of

if TYPE_CHECKING:  # (annotations only: no import at run time)
    from fbrapids.frames.backend import DtypeObj, EagerFrame

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
INT64_NA = pd.ArrowDtype(pa.int64())


def window_seconds(window: int | float | str) -> int:
    """A window as a whole number of time units: ``3600``, ``"1h"``, ``"1d"``, ``"7d"``.

    Example:
        >>> window_seconds("7d"), window_seconds("90m"), window_seconds(30)
        (604800, 5400, 30)
    """
    if isinstance(window, str):
        m = re.fullmatch(r"\s*(\d+)\s*([smhdw])\s*", window)
        if not m:
            raise FeatureError(f"window {window!r}: expected a number of seconds or e.g. '1h', '1d', '7d'")
        return int(m.group(1)) * _UNITS[m.group(2)]
    if int(window) != window or window <= 0:
        raise FeatureError(f"window {window!r}: must be a positive whole number of time units")
    return int(window)


_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


def time_values(time: pd.Series, label: str = "time") -> tuple[np.ndarray, np.ndarray, int]:
    """``(int64 times, null mask, units per second)`` of a time column, exactly: a datetime
    (numpy, time-zoned or Arrow timestamp) as UTC instants in its own unit; integers as they
    are (1 unit per "second"); whole floats as integers.

    Raises:
        FeatureError: fractional or out-of-int64 times, or a column of another type (names ``label``).

    Example:
        >>> t, null, per = time_values(pd.Series(pd.to_datetime(["1970-01-01 00:00:01", None]).as_unit("ms")))
        >>> t[0], null.tolist(), per
        (np.int64(1000), [False, True], 1000)
    """
    dtype = time.dtype
    null = time.isna().to_numpy()
    arrow = dtype.pyarrow_dtype if isinstance(dtype, pd.ArrowDtype) else None
    if arrow is not None and pa.types.is_timestamp(arrow):
        ints = pa.array(time.array).cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
        return np.asarray(ints, dtype=np.int64), null, _PER_SECOND[arrow.unit]
    if isinstance(dtype, pd.DatetimeTZDtype):
        time, dtype = time.dt.tz_convert("UTC").dt.tz_localize(None), time.dt.tz_convert("UTC").dt.tz_localize(None).dtype
    if isinstance(dtype, np.dtype) and dtype.kind == "M":
        unit = np.datetime_data(dtype.str)[0]
        return np.where(null, 0, time.to_numpy().view(np.int64)), null, _PER_SECOND[unit]
    numeric = pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype)
    numpy_dtype = _numpy_dtype(dtype) if numeric else None
    kind = numpy_dtype.kind if numpy_dtype is not None else "?"
    if numpy_dtype is not None and kind in "iu":
        raw = time.to_numpy(dtype=numpy_dtype, na_value=0) if not isinstance(dtype, np.dtype) else time.to_numpy()
        if kind == "u" and len(raw) and raw.max() > _I64_MAX:
            raise FeatureError(f"time column {label!r}: {int(raw.max())} is past int64's range; history operators "
                               "need times within int64")
        return raw.astype(np.int64), null, 1
    if kind == "f":
        floats = time.to_numpy(dtype=np.float64, na_value=np.nan)
        ok = null | ((floats == np.floor(floats)) & (floats >= -(2.0 ** 63)) & (floats < 2.0 ** 63))
        if not ok.all():
            raise FeatureError(f"time column {label!r}: {floats[~ok][0]!r} is not a whole number within int64; "
                               "history operators need a datetime or integer time (e.g. epoch seconds)")
        return np.where(null, 0, floats).astype(np.int64), null, 1
    raise FeatureError(f"time column {label!r} has dtype {dtype}; history operators need a datetime64 column (any "
                       "unit or time zone) or integer times (e.g. epoch seconds)")


def _numpy_dtype(dtype: DtypeObj) -> np.dtype | None:
    """``dtype`` when it is numpy's, else the numpy dtype an extension dtype holds its values
    in (a masked or Arrow number's); None for an extension dtype without one."""
    if isinstance(dtype, np.dtype):
        return dtype
    held = getattr(dtype, "numpy_dtype", None)
    return held if isinstance(held, np.dtype) else None


@dataclass
class _Events:
    """The partition's events sorted by (key, time, item), and each row's place among them."""

    order: np.ndarray  # event row positions, sorted
    start: np.ndarray  # per row: first event of its key
    before: np.ndarray  # per row: one past the last event of its key strictly before its time
    valid: np.ndarray  # per row: a non-null key and time
    times: np.ndarray  # per row: int64 time in its units
    per_second: int
    ev_comb: np.ndarray  # per event (sorted): key code * stride + time rank
    base: np.ndarray  # per row: key code * stride
    distinct: np.ndarray  # the distinct times of valid rows, ascending

    def lower(self, window: int) -> np.ndarray:
        """Per row: the first event of its key at or after ``t - window``."""
        t = self.times
        q = np.where(t < _I64_MIN + window, _I64_MIN, t - np.int64(window) if window <= _I64_MAX else _I64_MIN)
        lo = np.searchsorted(self.ev_comb, self.base + np.searchsorted(self.distinct, q, side="left"), side="left")
        return np.where(self.valid, lo, self.start)


def _events(part: pd.DataFrame, value_col: str | None = None, label: str = "time") -> _Events:
    key = part["a0"]
    codes = np.asarray(pd.factorize(key, use_na_sentinel=True)[0], dtype=np.int64)
    times, tnull, per_second = time_values(part["a1"], label)
    valid = (codes >= 0) & ~tnull
    is_event = valid.copy()
    if "a3" in part.columns:
        flag = part["a3"]
        # truthiness per value (fillna(0) raised on a nullable boolean column with nulls)
        is_event &= flag.notna().to_numpy() & flag.to_numpy(dtype=object, na_value=False).astype(bool)
    if value_col is not None:
        is_event &= part[value_col].notna().to_numpy()
    # (key, time) as one sortable int64 without overflow: key code * stride + the time's rank
    # among the distinct times (at most rows x rows, whatever the time span or unit)
    distinct = np.unique(times[valid])
    stride = np.int64(len(distinct) + 1)
    rank = np.searchsorted(distinct, times, side="left")
    base = np.where(valid, codes * stride, -1)
    comb = np.where(valid, base + rank, -1)
    ev_rows = np.flatnonzero(is_event)
    if "a2" in part.columns:
        tie = np.asarray(pd.factorize(part["a2"], sort=True, use_na_sentinel=True)[0], dtype=np.int64)[ev_rows]
        order = ev_rows[np.lexsort((tie, comb[ev_rows]))]
    else:
        order = ev_rows[np.argsort(comb[ev_rows], kind="stable")]
    ev_comb = comb[order]
    start = np.searchsorted(ev_comb, base, side="left")
    before = np.where(valid, np.searchsorted(ev_comb, comb, side="left"), start)
    return _Events(order, start, before, valid, times, per_second, ev_comb, base, distinct)


def _window_units(window: int | str, per_second: int) -> int:
    """The window in the time column's units (seconds x units per second), at most int64's max."""
    return min(window_seconds(window) * per_second, _I64_MAX)


def _list_column(part: pd.DataFrame, lo: np.ndarray, hi: np.ndarray, order: np.ndarray) -> pd.Series:
    lengths = np.maximum(hi - lo, 0)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    total = int(offsets[-1])
    # position j of the flat output -> the event index lo[row] + (j - offsets[row])
    row_of = np.repeat(np.arange(len(lengths)), lengths)
    flat = order[(lo[row_of] + (np.arange(total) - offsets[:-1][row_of]))] if total else np.zeros(0, dtype=np.int64)
    items = pa.array(part["a2"].array) if isinstance(part["a2"].dtype, pd.ArrowDtype) else pa.array(part["a2"])
    if isinstance(items, pa.ChunkedArray):  # Arrow-backed strings of a concatenated (dask) partition
        items = items.combine_chunks()
    values = items.take(pa.array(flat, type=pa.int64()))
    arr = pa.LargeListArray.from_arrays(pa.array(offsets), values) if total >= 1 << 31 else \
        pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values)
    return pd.Series(pd.arrays.ArrowExtensionArray(arr), index=part.index)


def history(part: pd.DataFrame, last_n: int = 50, label: str = "time") -> pd.Series:
    """``a2`` items of the ``a0`` key's events strictly before ``a1``: the last ``last_n``, oldest first."""
    ev = _events(part, label=label)
    lo = np.maximum(ev.start, ev.before - int(last_n))
    return _list_column(part, lo, ev.before, ev.order)


def window_count(part: pd.DataFrame, window: int | str, label: str = "time") -> pd.Series:
    """Events of the row's key in ``[t - window, t)`` (int64; 0 for a null key or time)."""
    ev = _events(part, label=label)
    lo = ev.lower(_window_units(window, ev.per_second))
    return pd.Series(np.where(ev.valid, ev.before - lo, 0).astype(np.int64), index=part.index)


def _range_sums(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``values[lo:hi].sum()`` per row, from aligned power-of-two block sums (each summed
    pairwise): a window's sum only ever adds values inside it, so one huge value outside
    never cancels out of it (running sums subtracted did: 1e20 then 1, 2, 3 gave 0)."""
    acc = np.zeros(len(lo), dtype=np.float64)
    if not len(values):
        return acc
    levels = [values]
    while len(levels[-1]) > 1:
        prev = levels[-1]
        levels.append(prev[: len(prev) // 2 * 2].reshape(-1, 2).sum(axis=1))
    lo = lo.copy()
    for k in range(len(levels)):  # up: take the block at lo while lo is not aligned to 2^(k+1)
        size = 1 << k
        take = ((lo & size) != 0) & (lo + size <= hi)
        acc[take] += levels[k][lo[take] >> k]
        lo[take] += size
    for k in reversed(range(len(levels))):  # down: the largest blocks that still fit
        size = 1 << k
        take = lo + size <= hi
        acc[take] += levels[k][lo[take] >> k]
        lo[take] += size
    return acc


def window_mean(part: pd.DataFrame, window: int | str, label: str = "time") -> pd.Series:
    """Mean of ``a2`` over the key's events (non-null ``a2``) in ``[t - window, t)``; NaN when none."""
    ev = _events(part, value_col="a2", label=label)
    values = part["a2"].to_numpy(dtype=np.float64, na_value=np.nan)[ev.order]
    lo = ev.lower(_window_units(window, ev.per_second))
    n = np.where(ev.valid, ev.before - lo, 0)
    total = _range_sums(values, lo, np.where(n > 0, ev.before, lo))
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, total / np.maximum(n, 1), np.nan)
    return pd.Series(mean, index=part.index)


def time_since(part: pd.DataFrame, label: str = "time") -> pd.Series:
    """``t`` minus the time of the key's latest event strictly before ``t`` (null when none):
    in the integer time's own units, or in whole seconds (floored) for a datetime."""
    ev = _events(part, label=label)
    has = ev.valid & (ev.before > ev.start)
    prev = ev.order[np.maximum(ev.before - 1, 0)] if len(ev.order) else np.zeros(len(part), dtype=np.int64)
    t, tp = ev.times, ev.times[prev] if len(ev.order) else ev.times
    with np.errstate(over="ignore"):
        delta = np.where(has, t - tp, 0)
    if np.any(has & (delta < 0)):  # t > tp always: a negative difference wrapped past int64
        row = int(np.flatnonzero(has & (delta < 0))[0])
        raise FeatureError(f"time_since: time column {label!r}: the gap from {int(tp[row])} to {int(t[row])} "
                           "overflows int64")
    arr = pa.array((delta // ev.per_second).astype(np.int64), mask=~has)
    return pd.Series(pd.arrays.ArrowExtensionArray(arr), index=part.index)


def _list_of_items(cols: Mapping[str, str], meta: EagerFrame) -> pd.ArrowDtype:
    """``history``'s output dtype: a list of its items' type (text as large strings)."""
    item = meta[cols["a2"]]
    item_type = pa.array(item.head(0)).type if not isinstance(item.dtype, pd.ArrowDtype) else item.dtype.pyarrow_dtype
    if pa.types.is_large_string(item_type) or pa.types.is_string(item_type) or item.dtype == object:
        item_type = pa.large_string() if not pa.types.is_integer(item_type) else item_type
    return pd.ArrowDtype(pa.list_(item_type))


_KEPT = ("last_n", "window")
#: the history operators (inputs ``a0`` key, ``a1`` time, ``a2`` item or value, ``a3`` event flag)
FRAME_OPERATORS = {op.name: op for op in (
    FrameOperator("history", run=history, kept_params=_KEPT, out_dtype=_list_of_items),
    FrameOperator("window_count", "i64", run=window_count, kept_params=_KEPT, roles=("a0", "a1", "a3")),
    FrameOperator("window_mean", "f64", run=window_mean, kept_params=_KEPT),
    FrameOperator("time_since", "i64?", run=time_since, kept_params=_KEPT, roles=("a0", "a1", "a3")),
)}


def compute(op: str, part: pd.DataFrame, params: Mapping[str, object]) -> pd.Series:
    """Run history operator ``op`` on one partition (inputs ``a0`` key, ``a1`` time, ``a2``
    item or value, ``a3`` event flag).

    Example:
        >>> compute("window_count", pd.DataFrame({"a0": ["u", "u"], "a1": [0, 5]}), {"window": "1h"}).tolist()
        [0, 1]
    """
    labels = labels_of(params)
    params = {k: v for k, v in params.items() if k != "_labels"}
    run = FRAME_OPERATORS[op].run
    assert run is not None  # (every history operator declares its algorithm)
    return run(part, **params, label=labels[1] if len(labels) > 1 else "time")
