"""Behaviour-history operators over a key's earlier events, strictly before each row's time.

* ``history``: the key's last ``last_n`` items (oldest first) as a list column;
* ``window_count`` / ``window_mean``: events (and the mean of a value over them) in
  ``[t - window, t)``;
* ``time_since``: ``t`` minus the time of the key's previous event (null when none).

An *event* is a row with a non-null key and time (and, with ``events``, a true value in
that column: e.g. the clicks).  Events at the row's own time are never included, so a
row never sees itself or anything simultaneous or later.  Events at equal times are
ordered by item value, so results do not depend on the order of the rows.

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
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from fbrapids.errors import FeatureError

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


@dataclass
class _Events:
    """The partition's events sorted by (key, time, item), and each row's place among them."""

    order: np.ndarray  # event row positions, sorted
    start: np.ndarray  # per row: first event of its key
    before: np.ndarray  # per row: one past the last event of its key strictly before its time
    comb: np.ndarray  # per row: the (key, time) code (-1 for rows with a null key or time)
    ev_comb: np.ndarray
    valid: np.ndarray
    times: np.ndarray


def _events(part: pd.DataFrame, span_extra: int = 0, value_col: str | None = None) -> _Events:
    key, time = part["a0"], part["a1"]
    codes = np.asarray(pd.factorize(key, use_na_sentinel=True)[0], dtype=np.int64)
    tnull = time.isna().to_numpy()
    times = time.to_numpy(dtype=np.float64, na_value=np.nan)  # exact for |t| < 2**53
    if np.any(np.isfinite(times) & (times != np.floor(times))):
        raise FeatureError("history operators need integer times (e.g. epoch seconds); got fractional values")
    times_i = np.where(tnull, 0, np.nan_to_num(times)).astype(np.int64)
    valid = (codes >= 0) & ~tnull
    is_event = valid.copy()
    if "a3" in part.columns:
        flag = part["a3"]
        is_event &= flag.notna().to_numpy() & (flag.fillna(0).to_numpy().astype(bool))
    if value_col is not None:
        is_event &= part[value_col].notna().to_numpy()
    n_valid = int(valid.sum())
    if n_valid:
        tmin, tmax = int(times_i[valid].min()), int(times_i[valid].max())
    else:
        tmin = tmax = 0
    span = tmax - tmin + span_extra + 1
    n_keys = int(codes.max()) + 1 if len(codes) else 0
    if n_keys and span > (1 << 62) // max(n_keys, 1):
        raise FeatureError(f"history operators: {n_keys:,} keys x a time span of {span:,} units overflow int64; "
                           "use coarser time units")
    comb = np.where(valid, codes * span + (times_i - tmin), -1)
    ev_rows = np.flatnonzero(is_event)
    if "a2" in part.columns:
        tie = np.asarray(pd.factorize(part["a2"], sort=True, use_na_sentinel=True)[0], dtype=np.int64)[ev_rows]
        order = ev_rows[np.lexsort((tie, comb[ev_rows]))]
    else:
        order = ev_rows[np.argsort(comb[ev_rows], kind="stable")]
    ev_comb = comb[order]
    start = np.searchsorted(ev_comb, np.where(valid, codes * span, -1), side="left")
    before = np.searchsorted(ev_comb, comb, side="left")
    before = np.where(valid, before, start)
    return _Events(order, start, before, comb, ev_comb, valid, times_i)


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


def history(part: pd.DataFrame, last_n: int = 50) -> pd.Series:
    """``a2`` items of the ``a0`` key's events strictly before ``a1``: the last ``last_n``, oldest first."""
    ev = _events(part)
    lo = np.maximum(ev.start, ev.before - int(last_n))
    return _list_column(part, lo, ev.before, ev.order)


def window_count(part: pd.DataFrame, window: int | str) -> pd.Series:
    """Events of the row's key in ``[t - window, t)`` (int64; 0 for a null key or time)."""
    w = window_seconds(window)
    ev = _events(part, span_extra=w)
    lo = np.maximum(np.searchsorted(ev.ev_comb, ev.comb - w, side="left"), ev.start)
    return pd.Series(np.where(ev.valid, ev.before - lo, 0).astype(np.int64), index=part.index)


def window_mean(part: pd.DataFrame, window: int | str) -> pd.Series:
    """Mean of ``a2`` over the key's events (non-null ``a2``) in ``[t - window, t)``; NaN when none."""
    w = window_seconds(window)
    ev = _events(part, span_extra=w, value_col="a2")
    values = part["a2"].to_numpy(dtype=np.float64, na_value=np.nan)[ev.order]
    # per-key running sums, so a window's sum depends only on that key's events
    codes_sorted = np.asarray(pd.factorize(part["a0"], use_na_sentinel=True)[0], dtype=np.int64)[ev.order]
    csum = pd.Series(values).groupby(codes_sorted, sort=False).cumsum().to_numpy() if len(values) else values
    lo = np.maximum(np.searchsorted(ev.ev_comb, ev.comb - w, side="left"), ev.start)
    hi = ev.before
    n = np.where(ev.valid, hi - lo, 0)
    top = np.where(n > 0, csum[np.maximum(hi - 1, 0)] if len(csum) else 0.0, 0.0)
    below = np.where((n > 0) & (lo > ev.start), csum[np.maximum(lo - 1, 0)] if len(csum) else 0.0, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, (top - below) / np.maximum(n, 1), np.nan)
    return pd.Series(mean, index=part.index)


def time_since(part: pd.DataFrame) -> pd.Series:
    """``t`` minus the time of the key's latest event strictly before ``t`` (null when none)."""
    ev = _events(part)
    has = ev.valid & (ev.before > ev.start)
    prev = ev.order[np.maximum(ev.before - 1, 0)] if len(ev.order) else np.zeros(len(part), dtype=np.int64)
    delta = np.where(has, ev.times - ev.times[prev] if len(ev.order) else 0, 0)
    arr = pa.array(delta.astype(np.int64), mask=~has)
    return pd.Series(pd.arrays.ArrowExtensionArray(arr), index=part.index)


HISTORY_OPS = {"history": history, "window_count": window_count, "window_mean": window_mean,
               "time_since": time_since}
OUT_TYPES = {"history": "list", "window_count": "i64", "window_mean": "f64", "time_since": "i64?"}


def compute(op: str, part: pd.DataFrame, params: dict[str, Any]) -> pd.Series:
    """Run history operator ``op`` on one partition (inputs ``a0`` key, ``a1`` time, ``a2``
    item or value, ``a3`` event flag).

    Example:
        >>> compute("window_count", pd.DataFrame({"a0": ["u", "u"], "a1": [0, 5]}), {"window": "1h"}).tolist()
        [0, 1]
    """
    return HISTORY_OPS[op](part, **params)
