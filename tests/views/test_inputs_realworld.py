"""Real-world input columns: timestamps in any unit and time zone, epoch ints, unreadable
dtypes, mixed-type object columns, pandas Categorical, buckets out of range."""
from __future__ import annotations

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import fbrapids  # noqa: F401
from fbrapids import ops
from fbrapids.errors import FeatureError, OperatorError

# 2024-01-01 is a Monday; 05:30 UTC
EPOCH = 1704087000
FEATS = dict(h=ops.hour("ts"), w=ops.weekday("ts"), d=ops.day("ts"))


def _expected(epochs):
    df = pd.DataFrame({"ts": np.asarray(epochs, dtype=np.int64)})
    return df.fbx.extract(**FEATS)[["h", "w", "d"]].reset_index(drop=True)


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_naive_datetimes_are_utc_in_any_unit(unit):
    epochs = [EPOCH, EPOCH + 20 * 3600 + 59, -1]  # also a second before the epoch (floors to 23:59:59)
    ts = pd.Series(pd.to_datetime(epochs, unit="s")).astype(f"datetime64[{unit}]")
    got = pd.DataFrame({"ts": ts}).fbx.extract(**FEATS)
    # a datetime column can hold NaT, so its hour is nullable int32 whatever the rows (dask's meta agrees)
    assert all(str(got[c].dtype) == "int32[pyarrow]" for c in ("h", "w", "d"))
    pd.testing.assert_frame_equal(got[["h", "w", "d"]].astype("int32"), _expected(epochs), check_dtype=True)
    assert got["h"].tolist() == [5, 1, 23] and got["ts"].dtype == ts.dtype  # the input column is kept as is


def test_time_zones_are_converted_to_utc():
    local = pd.Series(pd.to_datetime(["2024-01-01 00:30"])).dt.tz_localize("Asia/Tokyo")  # = 2023-12-31 15:30 UTC
    got = pd.DataFrame({"ts": local}).fbx.extract(**FEATS)
    assert got["h"].tolist() == [15] and got["w"].tolist() == [6]  # a Sunday in UTC


def test_nat_is_null_and_dask_agrees():
    ts = pd.Series(pd.to_datetime([EPOCH, None, EPOCH + 3600], unit="s"))
    eager = pd.DataFrame({"ts": ts}).fbx.extract(h=ops.hour("ts"))
    assert eager["h"].isna().tolist() == [False, True, False]
    lazy = dd.from_pandas(pd.DataFrame({"ts": ts}), npartitions=2).fbx.extract(h=ops.hour("ts")).compute()
    assert lazy["h"].tolist()[0] == 5 and lazy["h"].isna().tolist() == [False, True, False]


def test_epoch_ints_work_and_unreadable_dtypes_say_what_is_accepted():
    assert pd.DataFrame({"ts": [EPOCH]}).fbx.extract(h=ops.hour("ts"))["h"].tolist() == [5]
    for bad in (pd.Series([1.5]), pd.Series(["2024-01-01"]), pd.Series([pd.Timedelta(1, "s")])):
        with pytest.raises(FeatureError) as exc:
            pd.DataFrame({"ts": bad}).fbx.extract(h=ops.hour("ts"))
        msg = str(exc.value)
        assert "'ts'" in msg and str(bad.dtype) in msg and "datetime64" in msg and "epoch seconds" in msg


def test_mixed_object_column_suggests_astype_str():
    df = pd.DataFrame({"c": pd.Series(["a", 2, None], dtype=object)})
    with pytest.raises(FeatureError, match=r"'c'.*mixed Python types \(int, str\).*astype\(str\)"):
        df.fbx.extract(h=ops.hash_bucket("c", 10))
    fixed = df.assign(c=df["c"].astype(str)).fbx.extract(h=ops.hash_bucket("c", 10))
    assert fixed["h"].notna().tolist() == [True, True, False]  # None stays null


def test_categorical_strings_fill_join_and_operators():
    cat = pd.DataFrame({"c": pd.Categorical(["a b", None, "B"]), "k": [1, 2, 3]})
    filled = cat.fbx.clean(fill={"c": "z"})
    assert filled["c"].tolist() == ["a b", "z", "B"]
    plain = filled.assign(c=filled["c"].astype(str))
    feats = dict(h=ops.hash_bucket("c", 1000), s=ops.split("c", " ", buckets=100), l=ops.lower("c"),
                 x=ops.cross("c", "k", buckets=1000), n=ops.length(ops.split("c", " ")))
    got, want = filled.fbx.extract(**feats), plain.fbx.extract(**feats)
    for name in feats:
        assert got[name].tolist() == want[name].tolist(), name
    right = pd.DataFrame({"c": ["a b", "z"], "v": [1, 2]})
    assert filled.fbx.join(right, on="c")["v"].tolist() == [1, 2, pd.NA]


@pytest.mark.parametrize("buckets", [2**63, 2**64 + 5])
def test_buckets_of_2_63_or_more_are_errors(buckets):
    """Bucket ids are int64: a count of 2^63 or more is refused when the expression is
    built, naming the operator and the parameter (never wrapped, never left to plan time)."""
    df = pd.DataFrame({"u": [1, 2], "s": ["a", "b"]})
    for op, build in (("hash_bucket", lambda: ops.hash_bucket("u", buckets)),
                      ("cross", lambda: ops.cross("u", "s", buckets=buckets)),
                      ("split", lambda: ops.split("s", " ", buckets=buckets))):
        with pytest.raises(OperatorError, match=f"{op}.*'buckets'.*{buckets}"):
            build()
    assert df.fbx.extract(h=ops.hash_bucket("u", 2**63 - 1))["h"].min() >= 0


def test_json_cleaning_counts_non_string_leaves_and_depth_apart_from_malformed():
    deep = '{"a": ' + "[" * 70 + "]" * 70 + "}"
    docs = ['{"d": {"os": "ios"}}', '{"d": {"os": 1}}', '{"d": {"os": true}}', '{"d": {"os": null}}',
            deep, "{bad", None]
    df = pd.DataFrame({"ctx": pd.Series(docs, dtype="str")})
    out = df.fbx.clean(json={"ctx": {"os": "d.os"}})
    c = out.fbx.clean_report.counts["json"]["ctx"]
    # the string leaf is read; the number, boolean and null leaves, too deep, malformed and null rows are nulls
    assert out["os"].iloc[0] == "ios" and out["os"].isna().tolist() == [False, True, True, True, True, True, True]
    assert c["not_string:os"] == 3 and c["too_deep"] == 1 and c["malformed"] == 1 and c["null_input"] == 1
    lazy = dd.from_pandas(df, npartitions=3).fbx.clean(json={"ctx": {"os": "d.os"}})
    assert lazy.fbx.clean_report.counts["json"]["ctx"] == c
