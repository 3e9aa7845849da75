"""benchmarks/workload_pandas.py (the idiomatic pandas implementation of the canonical
workload) against a deliberately plain per-row Python implementation of WORKLOAD.md,
written here from the spec with dicts and loops."""
from __future__ import annotations

import importlib.util
import json
import math
import struct
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

farmhash = pytest.importorskip("farmhash", reason="pyfarmhash (import farmhash) is needed")

REPO = Path(__file__).resolve().parents[2]


def _load_module():
    spec = importlib.util.spec_from_file_location("workload_pandas", REPO / "benchmarks" / "workload_pandas.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


wp = _load_module()

# ----------------------------------------------------------- plain reference (spec text)

B_ID, B_CAT, B_TOK, B_CROSS = 2**20, 2**16, 2**18, 2**20


def hb(x, buckets: int) -> int:
    return farmhash.fingerprint64(str(x).encode("utf-8")) % buckets


def cross(*xs, buckets: int) -> int:
    return hb("_".join(str(x) for x in xs), buckets)


def bucketize(x: float, bounds: list[float]) -> int:
    return sum(1 for b in bounds if b <= x)


def tokens(s: str, sep: str) -> list[str]:
    return [p for p in s.split(sep) if p != ""]


def _no_constants(name):
    raise ValueError(name)


def json_path(doc, keys: list[str]) -> str:
    if doc is None:
        return ""
    try:
        v = json.loads(doc, parse_constant=_no_constants)
    except ValueError:
        return ""
    for k in keys:
        if not isinstance(v, dict) or k not in v:
            return ""
        v = v[k]
    return v if isinstance(v, str) else ""


def reference(data_dir: Path) -> list[dict]:
    rows = {name: pq.read_table(data_dir / f"{name}.parquet").to_pylist()
            for name in ("impressions", "users", "ads", "basic")}
    users = {}
    for u in rows["users"]:
        users[u["user_id"]] = {
            "age": -1 if u["age"] is None else u["age"],
            "gender": "unk" if u["gender"] is None else u["gender"],
            "city": u["city"] or "", "interests": u["interests"] or ""}
    ads = {}
    for a in rows["ads"]:
        ads[a["ad_id"]] = {"title": a["title"] or "", "category": a["category"],
                           "price": 0.0 if a["price"] is None else a["price"],
                           "advertiser_id": a["advertiser_id"]}
    basic = {b["instance_id"]: b for b in rows["basic"]}
    no_user = {"age": -1, "gender": "unk", "city": "", "interests": ""}
    no_ad = {"title": "", "category": -1, "price": 0.0, "advertiser_id": -1}
    out = []
    for r in rows["impressions"]:
        if r["slot"] < 0:
            continue
        if r["instance_id"] not in basic:
            continue
        query = r["query"] if r["query"] is not None else ""
        os_ = json_path(r["ctx"], ["device", "os"])
        geo_city = json_path(r["ctx"], ["geo", "city"])
        u = users.get(r["user_id"], no_user)
        a = ads.get(r["ad_id"], no_ad)
        ts = r["ts"]
        hour = (ts % 86400) // 3600
        weekday = ((ts // 86400) + 3) % 7
        qt, tt, it = tokens(query, " "), tokens(a["title"], " "), tokens(u["interests"], "|")
        q_h = [hb(w, B_TOK) for w in qt]
        t_h = [hb(w, B_TOK) for w in tt]
        qxt = []
        for x in q_h:
            for y in t_h:
                qxt.append(cross(x, y, buckets=B_CROSS))
        row = {
            "instance_id": r["instance_id"], "click": r["click"], "slot": r["slot"],
            "hour": hour, "weekday": weekday,
            "user_id_h": hb(r["user_id"], B_ID), "ad_id_h": hb(r["ad_id"], B_ID),
            "advertiser_h": hb(a["advertiser_id"], B_CAT), "category": a["category"],
            "gender_h": hb(u["gender"], B_CAT), "city_h": hb(u["city"], B_CAT),
            "os_h": hb(os_, B_CAT), "geo_city_h": hb(geo_city, B_CAT),
            "age_b": bucketize(u["age"], [0, 18, 25, 35, 45, 55, 65]),
            "price_b": bucketize(math.log1p(a["price"]), [0, 1, 2, 3, 4, 5, 6]),
            "query_len": len(qt),
            "query_tok_h": q_h,
            "query_bigram_h": [hb(qt[i] + " " + qt[i + 1], B_CROSS) for i in range(len(qt) - 1)],
            "title_tok_h": t_h,
            "interest_h": [hb(w, B_CAT) for w in it],
            "qxt_cross_h": qxt[:64],
            "user_ad_h": cross(r["user_id"], r["ad_id"], buckets=B_CROSS),
            "cat_city_h": cross(a["category"], u["city"], buckets=B_CROSS),
            "hour_cat_h": cross(hour, a["category"], buckets=B_CROSS),
        }
        b = basic[r["instance_id"]]
        for i in range(10):
            row[f"d{i}"] = struct.pack("<f", b[f"d{i}"])  # compare float32 bits
        for i in range(5):
            row[f"b{i}"] = b[f"b{i}"]
        out.append(row)
    out.sort(key=lambda x: x["instance_id"])
    return out


def as_rows(df: pd.DataFrame) -> list[dict]:
    table = pa.Table.from_pandas(df, preserve_index=False)
    rows = table.to_pylist()
    for r in rows:
        for i in range(10):
            r[f"d{i}"] = struct.pack("<f", r[f"d{i}"])
    return rows


def assert_rows_equal(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if g != w:
            diff = {k: (g[k], w[k]) for k in w if g.get(k) != w[k]}
            raise AssertionError(f"instance_id {w['instance_id']}: (pandas, reference) {diff}")


# ------------------------------------------------------------------ hand-written data

def _edge_case_dir(tmp: Path) -> Path:
    """Tiny tables hitting every rule: slot < 0, null query/ctx, malformed / NaN / missing
    JSON, missing users and ads, null user and ad fields, empty and repeated tags, extra
    spaces and separators, > 64 query x title pairs, non-ASCII words, no basic row."""
    long_query = " ".join(f"q{i}" for i in range(9))
    long_title = " ".join(f"t{i}" for i in range(12))
    imp = pa.table({
        "instance_id": pa.array([10, 11, 12, 13, 14, 15, 16, 17, 18], pa.int64()),
        "ts": pa.array([1699833600, 1699833600 + 3 * 86400 + 7200, 1699833600 + 6 * 86400 + 86399,
                        1699833600 + 3600, 1699833600, 1699833600 + 5000, 1699833600, 1699833600,
                        1699833600 + 86400], pa.int64()),
        "user_id": pa.array([1, 2, 99, 1, 3, 2, 1, 1, 2**62 + 5], pa.int64()),
        "ad_id": pa.array([7, 8, 7, 77, 8, 7, 7, 7, 2**40 - 1], pa.int64()),
        "slot": pa.array([0, 1, 2, -1, 3, 0, 1, 0, 5], pa.int8()),
        "query": pa.array(["héllo wörld", None, "  a  b ", "x", "", long_query, "中文 字", "a", "z"], pa.string()),
        "ctx": pa.array([
            '{"device": {"os": "ios"}, "geo": {"city": "c1"}}',
            None,
            '{"device": {"os": "android"}',                      # truncated
            '{"device": {"os": "x"}}',
            "{'device': {'os': 'ios'}}",                          # single quotes
            '{"device": {"os": "ios", "v": NaN}, "geo": {"city": "c2"}}',  # non-RFC literal
            '{"device": {"model": "m1"}, "geo": {"city": "c\\u00e9"}}',     # no device.os
            '{"device": {"os": 5}, "geo": {"city": ["c"]}}',       # not strings
            '{"device": {"os": "ios"}} x',                        # trailing garbage
        ], pa.string()),
        "click": pa.array([1, 0, 0, 1, 0, 1, 0, 0, 1], pa.int8()),
    })
    users = pa.table({
        "user_id": pa.array([1, 2, 3, 2**62 + 5], pa.int64()),
        "age": pa.array([30, None, 17, 70], pa.int32()),
        "gender": pa.array(["m", None, "f", "o"], pa.string()),
        "city": pa.array(["c1", "c2", "", "c9"], pa.string()),
        "interests": pa.array(["a|b|a", "", "||x||y|", "t"], pa.string()),
    })
    ads = pa.table({
        "ad_id": pa.array([7, 8, 2**40 - 1], pa.int64()),
        "title": pa.array([long_title, None, "só one"], pa.string()),
        "category": pa.array([17, 0, 199], pa.int32()),
        "price": pa.array([0.0, None, 1e6], pa.float64()),
        "advertiser_id": pa.array([10**12 - 1, 10**6, 123456789], pa.int64()),
    })
    basic_ids = [10, 11, 12, 13, 15, 16, 17, 18]  # 14 has no basic row
    rng = np.random.default_rng(0)
    basic = {"instance_id": pa.array(basic_ids[::-1], pa.int64())}
    for i in range(10):
        vals = rng.standard_normal(len(basic_ids)).astype(np.float32)
        vals[0] = np.float32(-0.0) if i == 0 else vals[0]
        basic[f"d{i}"] = pa.array(vals, pa.float32())
    for i in range(5):
        basic[f"b{i}"] = pa.array(rng.integers(-5, 1000, len(basic_ids)), pa.int64())
    for name, t in (("impressions", imp), ("users", users), ("ads", ads), ("basic", pa.table(basic))):
        pq.write_table(t, tmp / f"{name}.parquet")
    return tmp


# ---------------------------------------------------------------------------- tests

def test_generated_dataset_matches_reference(gen_dir):
    tables = wp.load_tables(gen_dir)
    t0 = time.perf_counter()
    out, seconds = wp.run_pandas(tables)
    wall = time.perf_counter() - t0
    assert set(seconds) == {"clean", "join", "extract", "merge"}
    # the steps are timed back to back inside the call: they add up to at most its wall time
    # (the canonical sort comes after them); which step is longest is not asserted (no timing
    # assertions: a loaded machine reorders them)
    assert sum(seconds.values()) <= wall
    want = reference(gen_dir)
    assert len(want) > 4000
    assert_rows_equal(as_rows(out), want)
    # the generated data really exercises the rules
    assert (out["os_h"] == hb("", B_CAT)).sum() > 0            # null / malformed / missing ctx
    assert (out["advertiser_h"] == hb(-1, B_CAT)).sum() > 0     # missing ads
    assert (out["category"] == -1).sum() > 0
    assert (out["qxt_cross_h"].list.len() == 64).sum() > 0      # the cap
    assert (out["query_len"] == 0).sum() > 0


def test_edge_cases_match_reference(tmp_path):
    d = _edge_case_dir(tmp_path)
    out, _ = wp.run_pandas(wp.load_tables(d))
    want = reference(d)
    assert [r["instance_id"] for r in want] == [10, 11, 12, 15, 16, 17, 18]
    assert_rows_equal(as_rows(out), want)
    by_id = out.set_index("instance_id")
    assert by_id.loc[10, "os_h"] == hb("ios", B_CAT)
    assert by_id.loc[15, "os_h"] == hb("", B_CAT)                # NaN literal: malformed
    assert by_id.loc[16, "geo_city_h"] == hb("cé", B_CAT)        # \u escape decoded
    assert by_id.loc[12, "query_tok_h"] == [hb("a", B_TOK), hb("b", B_TOK)]
    assert len(by_id.loc[15, "qxt_cross_h"]) == 64
    assert by_id.loc[12, "age_b"] == 0 and by_id.loc[12, "category"] == 17


def test_output_schema_section_6(gen_dir):
    out, _ = wp.run_pandas(wp.load_tables(gen_dir))
    assert wp.schema_problems(out) == []
    table = pa.Table.from_pandas(out, preserve_index=False)
    assert table.column_names == wp.OUTPUT_COLUMNS and len(wp.OUTPUT_COLUMNS) == 39
    types = {f.name: f.type for f in table.schema}
    assert types["instance_id"] == pa.int64() and types["click"] == pa.int8()
    assert types["category"] == pa.int32() and types["query_len"] == pa.int32()
    assert types["d0"] == pa.float32() and types["b4"] == pa.int64()
    assert types["qxt_cross_h"] == pa.list_(pa.int64())
    assert all(table.column(c).null_count == 0 for c in table.column_names)
    assert out["instance_id"].is_monotonic_increasing and out["instance_id"].is_unique
    # schema_problems really checks
    assert wp.schema_problems(out.astype({"hour": "int64"}))
    assert wp.schema_problems(out[wp.OUTPUT_COLUMNS[::-1]])


def test_frames_equal_explains_differences(tmp_path):
    out, _ = wp.run_pandas(wp.load_tables(_edge_case_dir(tmp_path)))
    assert wp.frames_equal(out, out.iloc[::-1]) == (True, "equal")

    lists = out.copy()
    vals = lists["qxt_cross_h"].tolist()
    vals[2] = list(vals[2][:-1]) + [vals[2][-1] + 1]
    lists["qxt_cross_h"] = pd.Series(pa.array(vals, pa.list_(pa.int64())), dtype=wp.LIST_INT64)
    ok, msg = wp.frames_equal(out, lists)
    assert not ok and "qxt_cross_h" in msg and str(out["instance_id"][2]) in msg

    zero = out.copy()
    row = int(np.flatnonzero(out["instance_id"] == 18)[0])  # its d0 is -0.0
    assert out.loc[row, "d0"] == 0.0 and np.signbit(out.loc[row, "d0"])
    zero.loc[row, "d0"] = np.float32(0.0)  # equal as numbers, not as bits
    ok, msg = wp.frames_equal(out, zero)
    assert not ok and "d0" in msg

    ok, msg = wp.frames_equal(out, out.iloc[1:])
    assert not ok and "row counts differ" in msg

    ok, msg = wp.frames_equal(out, out.astype({"slot": "int16"}))
    assert not ok and "slot" in msg and "types differ" in msg


def test_output_file_round_trip_and_cli(gen_dir, tmp_path, capsys):
    dst = tmp_path / "out.parquet"
    assert wp.main(["--data", str(gen_dir), "--out", str(dst)]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(printed[-1])
    assert summary["rows_in"] == 5000 and summary["pandas_rows_per_s"] > 0
    assert set(summary["steps"]) == {"read", "clean", "join", "extract", "merge"}
    back = wp.read_output(dst)
    out, _ = wp.run_pandas(wp.load_tables(gen_dir))
    assert wp.frames_equal(out, back) == (True, "equal")
    assert summary["rows_out"] == len(out)
    schema = pq.read_schema(dst)
    assert schema.field("interest_h").type == pa.list_(pa.int64())


def test_missing_table_names_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="impressions"):
        wp.load_tables(tmp_path)


@pytest.mark.parametrize("doc,want", [
    ('{"device":{"os":"ios"}}', "ios"),
    ('{"device":{"os":"a"},"device":{"os":"b"}}', "b"),          # duplicate keys: last wins
    ('{"device":{"os":"a"},"device":{}}', ""),
    ('{"device":{"os":"\\ud83d\\ude00"}}', "😀"),
    ('{"device":{"os":"\\ud83d"}}', ""),                          # lone surrogate: malformed
    ('{"x":"\\udc00","device":{"os":"ios"}}', ""),
    ('{"device":{"os":"ios"},"x":' + "[" * 63 + "]" * 63 + "}", "ios"),  # depth 64
    ('{"device":{"os":"ios"},"x":' + "[" * 64 + "]" * 64 + "}", ""),     # depth 65
    ('{"device":{"os":"ios"},"x":Infinity}', ""),
    ('{"device":{"os":"ios"}}\n ', "ios"),
    (None, ""),
])
def test_json_fields_follows_the_strict_rules(doc, want):
    assert wp.json_fields(doc, (("device", "os"),)) == (want,)
