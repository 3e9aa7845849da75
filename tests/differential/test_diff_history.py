"""Differential tests of the history operators (``history``, ``window_count``,
``window_mean``, ``time_since``) against :mod:`diffref_fitted`, eager and on dask frames
of 1, 3 and 7 partitions (only the inputs are shuffled by key there: the output keeps the
input's partitions, row order and index, checked with a partition-number column).

Times are datetimes in s / ms / us / ns with and without a time zone (a ``"1h"`` window is
an hour whatever the unit) or integer epochs in seconds or nanoseconds (exact int64:
events 1 ns apart stay apart), with ties and nulls.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, strategies as st

from fbrapids import ops

import diffref_fitted as ref
from diff_harness import DIFF, FAMILIES, assert_column, assert_error_names, materialize, run_modes, to_mode
from diff_strategies import (
    BIG_IDS,
    TIME_UNITS,
    ZONES,
    epoch_ns_values,
    indexes,
    int_series,
    sizes,
    string_series,
    texts,
    time_series,
)


@st.composite
def keys(draw: st.DrawFn, n: int) -> tuple[list, pd.Series]:
    """A few keys (so histories repeat) as uint64 ids past 2^53, nullable ints or strings."""
    kind = draw(st.sampled_from(["ids", "ints", "str"]))
    if kind == "str":
        pool = draw(st.lists(texts(max_size=4, long=False), min_size=1, max_size=3)) + [None]
        vals = draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n))
        return vals, string_series(vals, draw(st.sampled_from(["object", "str", "category", "arrow_string"])))
    pool = [2**64 - 1, 2**53 + 1, 2**53] if kind == "ids" else [-1, 0, 2**63 - 1, None]
    vals = draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n))
    return vals, int_series(vals, "uint64" if kind == "ids" else "Int64")


@st.composite
def times(draw: st.DrawFn, n: int) -> tuple[list, pd.Series, int]:
    """``(reference times, series, units per second)``: a datetime of any unit and zone
    (reference: ns instants), or integer epochs in s or ns (reference: the integers)."""
    ns = draw(epoch_ns_values(n))
    kind = draw(st.sampled_from(["datetime", "datetime", "epoch_s", "epoch_ns"]))
    if kind == "datetime":
        s, held = time_series(ns, draw(st.sampled_from(TIME_UNITS)), draw(st.sampled_from(ZONES)))
        return held, s, 10**9
    if kind == "epoch_s":
        held = [None if v is None else v // 10**9 for v in ns]
        nullable = ["Int64", "int64[pyarrow]"] if None in held else ["int64", "Int64", "int64[pyarrow]", "uint32"]
        return held, int_series(held, draw(st.sampled_from(nullable))), 1
    return ns, int_series(ns, "Int64" if None in ns else "int64"), 1


@pytest.mark.parametrize("family", FAMILIES)
@DIFF
@given(data=st.data())
def test_history_operators(family: str, data: st.DataObject) -> None:
    n = data.draw(sizes(), label="rows")
    kv, ks = data.draw(keys(n), label="keys")
    tv, ts, per_second = data.draw(times(n), label="times")
    items = data.draw(st.lists(st.one_of(st.sampled_from(BIG_IDS[:3] + [BIG_IDS[-1]]), st.none()), min_size=n,
                               max_size=n), label="items")
    values = data.draw(st.lists(st.one_of(st.integers(-5, 5), st.sampled_from([1e18, 0.5]), st.none()), min_size=n,
                                max_size=n), label="values")
    flags = data.draw(st.lists(st.sampled_from([True, False, None]), min_size=n, max_size=n), label="events")
    last_n = data.draw(st.sampled_from([1, 2, 50]))
    window = data.draw(st.sampled_from(["1h", "1d", "7d", "90m", 1, 3600]), label="window")
    index = data.draw(indexes(n), label="index")
    df = pd.DataFrame({"rid": np.arange(n, dtype=np.int64), "k": ks.set_axis(index), "ts": ts.set_axis(index),
                       "item": int_series(items, "UInt64", index=index),
                       "v": pd.Series([np.nan if v is None else float(v) for v in values], index=index),
                       "e": pd.Series(flags, dtype="boolean", index=index)}, index=index)
    int_window = window if isinstance(window, str) or per_second == 1 else window * per_second
    feats = {"h": ops.history("k", "item", "ts", last_n=last_n), "he": ops.history("k", "item", "ts", 2, events="e"),
             "c": ops.window_count("k", "ts", window), "ce": ops.window_count("k", "ts", window, events="e"),
             "m": ops.window_mean("k", "v", "ts", window), "me": ops.window_mean("k", "v", "ts", window, events="e"),
             "s": ops.time_since("k", "ts"), "se": ops.time_since("k", "ts", events="e")}
    want = {"h": ref.history(kv, items, tv, last_n), "he": ref.history(kv, items, tv, 2, flags),
            "c": ref.window_count(kv, tv, int_window, per_second=per_second),
            "ce": ref.window_count(kv, tv, int_window, flags, per_second=per_second),
            "m": ref.window_mean(kv, values, tv, int_window, per_second=per_second),
            "me": ref.window_mean(kv, values, tv, int_window, flags, per_second=per_second),
            "s": ref.time_since(kv, tv, per_second=per_second),
            "se": ref.time_since(kv, tv, flags, per_second=per_second)}
    for mode, out in run_modes(df, lambda f: _partition_of_rows(f.fbx.extract(**feats)), family):
        for name, expected in want.items():
            assert_column(out, name, expected, mode=mode, rtol=1e-12, atol=1e-12, order_by="rid")
        # documented: on dask the frame keeps its partitions and row order (only the inputs shuffle)
        held = _partition_of_rows(to_mode(df, mode))
        held = materialize(held, mode) if hasattr(held, "compute") else held
        assert out.index.equals(df.index) and out["rid"].tolist() == list(range(n)), f"{mode}: rows reordered"
        assert out[_PART].tolist() == held[_PART].tolist(), f"{mode}: rows moved to other partitions"


_PART = "partition_number"


def _partition_of_rows(frame: Any) -> Any:
    """``frame`` with each row's partition number (0 for an eager frame)."""
    if not hasattr(frame, "map_partitions"):
        return frame.assign(**{_PART: 0})

    def tag(part: Any, partition_info: dict | None = None) -> Any:
        return part.assign(**{_PART: (partition_info or {}).get("number", 0)})

    return frame.map_partitions(tag, meta=frame._meta.assign(**{_PART: 0}))


def test_history_time_errors_name_the_column() -> None:
    """Fractional, out-of-int64 and non-time columns are errors naming the time column."""
    for bad in (pd.Series([0.5, 1.0]), pd.Series([2**63, 1], dtype="uint64"), pd.Series(["a", "b"])):
        df = pd.DataFrame({"u": [1, 1], "when": bad})
        for mode in ("eager", "dask3"):
            with pytest.raises(Exception) as info:
                materialize(to_mode(df, mode).fbx.extract(n=ops.window_count("u", "when", "1h")), mode)
            assert_error_names(info.value, "'when'")
