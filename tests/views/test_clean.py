import json

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import fbrapids  # noqa: F401
from fbrapids.views.clean import CleanError, clean, clean_report

DOCS = [
    '{"device": {"os": "ios"}, "geo": {"city": "c1"}}',
    '{"device": {"os": "android"}}',                       # no geo
    '{"geo": {"city": "c2"}}',                             # no device.os
    None,                                                  # null
    "{'device': {'os': 'ios'}}",                           # single quotes: malformed
    '{"device": {"os": "ios"}} trailing',                   # trailing garbage: malformed
    '{"device": {"os": "ios"}, "geo": {"city": "c\\u00e9"}}',  # escape
    '{"device": {"os": 7}}',                               # not a string
    '[1, 2]',                                              # not an object
    '{"device": {"os": NaN}}',                             # NaN literal: malformed
]


def _frame():
    return pd.DataFrame({"slot": np.arange(len(DOCS), dtype=np.int8) - 1, "ctx": pd.array(DOCS, dtype="str"),
                         "q": pd.array(["a", None] * (len(DOCS) // 2), dtype="str")})


def _oracle(doc, path):
    if doc is None:
        return None
    try:
        value = json.loads(doc, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    except ValueError:
        return None
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value if isinstance(value, str) else None


def test_json_fields_fill_and_counts_on_pandas():
    out = _frame().fbx.clean(json={"ctx": {"os": "device.os", "city": "geo.city"}}, fill={"os": "", "city": "", "q": ""})
    assert out["os"].tolist() == [_oracle(d, "device.os") or "" for d in DOCS]
    assert out["city"].tolist() == [_oracle(d, "geo.city") or "" for d in DOCS]
    assert out["city"].iloc[6] == "cé"
    counts = clean_report(out).counts
    j = counts["json"]["ctx"]
    assert (j["rows"], j["null_input"], j["malformed"]) == (10, 1, 3)
    assert j["missing:os"] == 2 and j["not_string:os"] == 1  # rows 2 and 8; row 7
    assert j["missing:city"] == 3 and j["not_string:city"] == 0  # rows 1, 7 and 8
    assert counts["fill"] == {"os": 7, "city": 7, "q": 5}
    assert counts["rows_in"] == counts["rows_out"] == 10


def test_where_filters_and_counts_rows():
    out = _frame().fbx.clean(where=["slot >= 0", lambda f: f["os"] != "android"], json={"ctx": {"os": "device.os"}})
    assert (out["slot"] >= 0).all() and "android" not in out["os"].tolist()
    counts = clean_report(out).counts
    assert counts["rows_in"] == 10 and counts["rows_out"] == len(out) == 8
    assert counts["json"]["ctx"]["rows"] == 9  # the slot filter ran before parsing


def test_dask_clean_equals_pandas_and_counts_after_compute():
    spec = dict(json={"ctx": {"os": "device.os"}}, fill={"os": "unknown", "q": ""}, where="slot >= 0", drop=["ctx"])
    eager = _frame().fbx.clean(**spec)
    lazy = dd.from_pandas(_frame(), npartitions=3).fbx.clean(**spec)
    frame, counts = dask.compute(lazy, lazy.fbx.clean_report.delayed)
    pd.testing.assert_frame_equal(frame, eager, check_dtype=False)
    assert counts == clean_report(eager).counts
    assert lazy.fbx.clean_report.counts == counts


def test_bad_clean_specs_name_the_column():
    frame = _frame()
    with pytest.raises(CleanError, match="json source column 'context' not found; available: slot, ctx, q"):
        frame.fbx.clean(json={"context": {"os": "device.os"}})
    with pytest.raises(CleanError, match="fill column 'nope'"):
        frame.fbx.clean(fill={"nope": 0})
    with pytest.raises(CleanError, match="not booleans"):
        frame.fbx.clean(where=lambda f: f["slot"] + 1)


def test_nullable_int_fill_returns_plain_ints():
    out = pd.DataFrame({"age": pd.array([1, None, 3], dtype="Int32")}).fbx.clean(fill={"age": -1})
    assert out["age"].dtype == np.int32 and out["age"].tolist() == [1, -1, 3]


def test_report_needs_a_cleaned_frame():
    with pytest.raises(CleanError, match="not produced by clean"):
        clean_report(_frame())


def _arrow_str_frame(chunks: list) -> pd.DataFrame:
    import pyarrow as pa

    return pd.DataFrame({"s": pd.Series(pd.arrays.ArrowStringArray(pa.chunked_array(chunks, pa.large_string())),
                                        dtype="str")})


def test_fill_empty_string_reuses_the_bytes_and_equals_fillna():
    """Filling "" where every null slot spans no bytes drops the validity bitmap only: the
    result's bytes are the input's buffer (no copy), its values those of pandas' fillna."""
    import pyarrow as pa

    frame = _arrow_str_frame([pa.array(["a", None, "bcd", None], pa.large_string())[1:],
                              pa.array([None, "日本"], pa.large_string())])
    out = frame.fbx.clean(fill={"s": ""})
    assert out["s"].tolist() == frame["s"].astype(object).fillna("").tolist() == ["", "bcd", "", "", "日本"]
    assert out["s"].dtype == frame["s"].dtype and clean_report(out).counts["fill"]["s"] == 3
    src, got = frame["s"].array.__arrow_array__(), out["s"].array.__arrow_array__()
    assert [c.null_count for c in got.chunks] == [0, 0]
    assert [c.buffers()[2].address for c in got.chunks] == [c.buffers()[2].address for c in src.chunks]


def test_fill_null_slots_holding_bytes_are_filled_not_exposed():
    """A null slot may hold bytes (Arrow allows it): those never show through a fill."""
    import pyarrow as pa

    offsets = pa.py_buffer(np.array([0, 1, 4, 6], dtype=np.int64).tobytes())
    valid = pa.py_buffer(np.packbits([1, 0, 1], bitorder="little").tobytes())
    arr = pa.Array.from_buffers(pa.large_string(), 3, [valid, offsets, pa.py_buffer(b"xhidyz")], null_count=1)
    for value in ("", "f"):
        out = _arrow_str_frame([arr]).fbx.clean(fill={"s": value})
        assert out["s"].tolist() == ["x", value, "yz"]


def test_a_list_fill_fills_an_arrow_list_column_or_is_refused_clearly():
    """``fill={list_col: []}``: an Arrow list column's nulls become the list (reference: the
    rows in plain Python), eager and on dask; a list no item type holds exactly, or a list
    for a column that holds no lists, is a CleanError naming the column (not pandas' message)."""
    import dask.dataframe as dd
    import pyarrow as pa

    rows = [[1, 2], None, [3], None, []]
    df = pd.DataFrame({"l": pd.array(rows, dtype=pd.ArrowDtype(pa.list_(pa.int64()))), "x": range(5)})
    for fill in ([], [7, 8]):
        want = [fill if r is None else r for r in rows]
        out = clean(df, fill={"l": fill})
        assert [list(v) for v in out["l"]] == want and out["l"].dtype == df["l"].dtype
        assert clean_report(out).counts["fill"] == {"l": 2}
        lazy = clean(dd.from_pandas(df, npartitions=2), fill={"l": fill}).compute()
        assert [list(v) for v in lazy["l"]] == want
    for bad in ([1.5], ["a"], 3, [2**64]):
        with pytest.raises(CleanError, match="column 'l'"):
            clean(df, fill={"l": bad})
    with pytest.raises(CleanError, match="column 'o' .*a list fills an Arrow list column"):
        clean(pd.DataFrame({"o": [[1], None]}), fill={"o": []})
