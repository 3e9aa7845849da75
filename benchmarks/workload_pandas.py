"""An idiomatic pandas implementation of the canonical workload (docs/workload.md).

This is the reference the fused and op-by-op meta-kernel implementations in
``benchmarks/extract.py`` are compared against, and the "pandas" line of that benchmark.
It is written the way a data scientist would write it with pandas: merges, ``fillna``,
``str.split`` + ``explode`` and numpy for everything pandas can do, and Python only where
nothing vectorised exists (FarmHash through pyfarmhash, and ``json.loads``).

Steps (timed separately, section 7): ``read`` (:func:`load_tables`), then ``clean``,
``join``, ``extract`` and ``merge`` (:func:`run_pandas`).

Example:
    >>> import tempfile
    >>> from fbrapids.datasets.synthetic.generate import generate
    >>> d = tempfile.mkdtemp(); _ = generate(2000, d)
    >>> out, seconds = run_pandas(load_tables(d))
    >>> len(out.columns), sorted(seconds)
    (39, ['clean', 'extract', 'join', 'merge'])

Command line::

    python benchmarks/workload_pandas.py --data DIR [--out FILE] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from fbrapids.views.json_fields import nesting_depth  # the bracket scan only; parsing is json.loads

log = logging.getLogger(__name__)

TABLES = ("impressions", "users", "ads", "basic")
B_ID = 2**20
B_CAT = 2**16
B_TOK = 2**18
B_CROSS = 2**20
AGE_BOUNDS = np.array([0, 18, 25, 35, 45, 55, 65], dtype=np.float64)
PRICE_BOUNDS = np.array([0, 1, 2, 3, 4, 5, 6], dtype=np.float64)
QXT_CAP = 64
JSON_MAX_DEPTH = 64

LIST_INT64 = pd.ArrowDtype(pa.list_(pa.int64()))

# Section 6: output columns, in order, with their Arrow types.
OUTPUT_SCHEMA: list[tuple[str, pa.DataType]] = (
    [("instance_id", pa.int64()), ("click", pa.int8()), ("slot", pa.int8()),
     ("hour", pa.int8()), ("weekday", pa.int8()), ("user_id_h", pa.int64()),
     ("ad_id_h", pa.int64()), ("advertiser_h", pa.int64()), ("category", pa.int32()),
     ("gender_h", pa.int64()), ("city_h", pa.int64()), ("os_h", pa.int64()),
     ("geo_city_h", pa.int64()), ("age_b", pa.int8()), ("price_b", pa.int8()),
     ("query_len", pa.int32())]
    + [(c, pa.list_(pa.int64())) for c in
       ("query_tok_h", "query_bigram_h", "title_tok_h", "interest_h", "qxt_cross_h")]
    + [("user_ad_h", pa.int64()), ("cat_city_h", pa.int64()), ("hour_cat_h", pa.int64())]
    + [(f"d{i}", pa.float32()) for i in range(10)]
    + [(f"b{i}", pa.int64()) for i in range(5)]
)
OUTPUT_COLUMNS = [name for name, _ in OUTPUT_SCHEMA]


# ------------------------------------------------------------------------- read

def load_tables(data_dir: str | Path) -> dict[str, pd.DataFrame]:
    """The ``read`` step: the four parquet files of a workload folder as pandas frames.

    Example:
        >>> import tempfile
        >>> from fbrapids.datasets.synthetic.generate import generate
        >>> d = tempfile.mkdtemp(); _ = generate(500, d)
        >>> sorted(load_tables(d))
        ['ads', 'basic', 'impressions', 'users']
    """
    root = Path(data_dir)
    tables = {}
    for name in TABLES:
        path = root / f"{name}.parquet"
        if not path.exists():
            raise FileNotFoundError(f"workload table {name!r} not found: {path}")
        tables[name] = pd.read_parquet(path)
    return tables


# ------------------------------------------------------------------------ clean

def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-RFC 8259 literal {name}")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|.)", re.DOTALL)


def strict_text_ok(doc: str) -> bool:
    """What json.loads lets through but the workload's rules reject: lone surrogate
    escapes and nesting deeper than JSON_MAX_DEPTH.  Cheap pre-checks keep this off the
    common path."""
    if _SURROGATE_ESCAPE.search(doc):
        high_end = -1
        for m in _ESCAPE.finditer(doc):
            u = int(m.group(1), 16) if m.group(1) else None
            if high_end >= 0:
                if m.start() != high_end or u is None or not 0xDC00 <= u <= 0xDFFF:
                    return False
                high_end = -1
            elif u is not None and 0xD800 <= u <= 0xDBFF:
                high_end = m.end()
            elif u is not None and 0xDC00 <= u <= 0xDFFF:
                return False
        if high_end >= 0:
            return False
    if doc.count("{") + doc.count("[") > JSON_MAX_DEPTH and nesting_depth(doc) > JSON_MAX_DEPTH:
        return False
    return True


def json_fields(doc: str | None, paths: tuple[tuple[str, ...], ...]) -> tuple[str, ...]:
    """String values at ``paths`` in a strict-JSON document; ``""`` where the document is
    null or malformed, a path is missing, or the value is not a string (section 3.3).

    Example:
        >>> json_fields('{"device": {"os": "ios"}}', (("device", "os"), ("geo", "city")))
        ('ios', '')
    """
    empty = ("",) * len(paths)
    if doc is None or doc is pd.NA or (isinstance(doc, float) and np.isnan(doc)):
        return empty
    try:
        value = _DECODER.decode(doc)
    except (ValueError, RecursionError):
        return empty
    if not strict_text_ok(doc):
        return empty
    out = []
    for keys in paths:
        v = value
        for k in keys:
            v = v.get(k) if isinstance(v, dict) else None
        out.append(v if isinstance(v, str) else "")
    return tuple(out)


def clean(tables: dict[str, pd.DataFrame]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Section 3: filter and fill impressions (with os / geo_city out of ctx), users, ads."""
    imp = tables["impressions"]
    imp = imp[imp["slot"] >= 0].reset_index(drop=True)
    imp["query"] = imp["query"].fillna("")
    fields = imp["ctx"].map(lambda d: json_fields(d, (("device", "os"), ("geo", "city"))),
                            na_action="ignore")
    fields = fields.where(fields.notna(), ("", ""))
    imp["os"] = pd.Series([f[0] for f in fields], index=imp.index, dtype="str")
    imp["geo_city"] = pd.Series([f[1] for f in fields], index=imp.index, dtype="str")
    imp = imp.drop(columns="ctx")
    return (imp, *clean_users_ads(tables))


def clean_users_ads(tables: dict[str, pd.DataFrame]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Section 3's fills of users and ads."""
    users = tables["users"].copy()
    users["age"] = users["age"].fillna(-1).astype("int32")
    users = users.fillna({"gender": "unk", "city": "", "interests": ""})
    ads = tables["ads"].copy()
    ads = ads.fillna({"price": 0.0, "title": ""})
    return users, ads


# ------------------------------------------------------------------------- join

def join(imp: pd.DataFrame, users: pd.DataFrame, ads: pd.DataFrame) -> pd.DataFrame:
    """Section 4: left joins on user_id then ad_id; misses get the documented defaults.
    Integer columns go through pandas' nullable dtypes so 64-bit ids stay exact."""
    users = users.astype({"age": "Int32"})
    ads = ads.astype({"category": "Int32", "advertiser_id": "Int64"})
    df = imp.merge(users, on="user_id", how="left").merge(ads, on="ad_id", how="left")
    df = df.fillna({"age": -1, "gender": "unk", "city": "", "interests": "", "title": "",
                    "category": -1, "price": 0.0, "advertiser_id": -1})
    return df.astype({"age": "int32", "category": "int32", "advertiser_id": "int64",
                      "price": "float64"})


# ---------------------------------------------------------------------- extract

def hash_bucket(values: pd.Series, buckets: int) -> np.ndarray:
    """TF to_hash_bucket_fast of each value's text (integers as decimal text), as int64.
    FarmHash has no vectorised form, so the fingerprints come from one Python pass over
    the values (pyfarmhash hashes a str as its UTF-8 bytes); the modulo is numpy's.

    Example:
        >>> hash_bucket(pd.Series(["a", "b", "c", "d"]), 10).tolist()
        [9, 2, 2, 5]
    """
    import farmhash  # the oracle, needed only by the peers: imported when a peer runs

    items = values.to_numpy(dtype=object)
    if pd.api.types.is_integer_dtype(values.dtype):
        items = map(str, items)
    fp = np.fromiter(map(farmhash.fingerprint64, items), dtype=np.uint64, count=len(values))
    return (fp % np.uint64(buckets)).astype(np.int64)


ARROW_STR = pd.ArrowDtype(pa.large_string())


def tokens(s: pd.Series, sep: str) -> pd.Series:
    """Section 2 ``tokens``: split on ``sep``, empty pieces removed, as one long series
    whose index is the row number (0..len-1) and whose order is the token order.
    The split and explode run on pyarrow-backed strings (pandas' fast path for them).

    Example:
        >>> tokens(pd.Series(["a  b", "", "c"]), " ").tolist()
        ['a', 'b', 'c']
    """
    pieces = s.reset_index(drop=True).astype(ARROW_STR).str.split(sep).explode()
    return pieces[pieces.notna() & (pieces != "")]


def _list_column(row_ids: np.ndarray, values: np.ndarray, n_rows: int) -> pd.Series:
    """list<int64> column from per-element row ids (non-decreasing) and values."""
    counts = np.bincount(row_ids, minlength=n_rows) if len(row_ids) else np.zeros(n_rows, np.int64)
    offsets = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    arr = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values, type=pa.int64()))
    arr = arr.cast(pa.list_(pa.int64()))
    return pd.Series(arr, dtype=LIST_INT64)


def scalar_features(df: pd.DataFrame, hash_fn: Callable[[pd.Series, int], np.ndarray]
                    ) -> tuple[pd.DataFrame, pd.Series]:
    """The carried columns and the scalar features (time, hashed ids and categories,
    buckets), hashing with ``hash_fn(values, buckets)``; and the hour (crossed later)."""
    out = pd.DataFrame({"instance_id": df["instance_id"], "click": df["click"],
                        "slot": df["slot"]})
    hour = (df["ts"] % 86400) // 3600
    weekday = (df["ts"] // 86400 + 3) % 7
    out["hour"] = hour.astype("int8")
    out["weekday"] = weekday.astype("int8")
    out["user_id_h"] = hash_fn(df["user_id"], B_ID)
    out["ad_id_h"] = hash_fn(df["ad_id"], B_ID)
    out["advertiser_h"] = hash_fn(df["advertiser_id"], B_CAT)
    out["category"] = df["category"].astype("int32")
    for col in ("gender", "city", "os", "geo_city"):
        out[f"{col}_h"] = hash_fn(df[col], B_CAT)
    out["age_b"] = np.searchsorted(AGE_BOUNDS, df["age"].to_numpy(np.float64), side="right").astype(np.int8)
    out["price_b"] = np.searchsorted(PRICE_BOUNDS, np.log1p(df["price"].to_numpy(np.float64)),
                                     side="right").astype(np.int8)
    return out, hour


def extract(df: pd.DataFrame) -> pd.DataFrame:
    """Section 5: the per-row features, plus the columns the output carries through."""
    df = df.reset_index(drop=True)
    n = len(df)
    out, hour = scalar_features(df, hash_bucket)

    qt = tokens(df["query"], " ")
    tt = tokens(df["title"], " ")
    it = tokens(df["interests"], "|")
    q_rows = qt.index.to_numpy(np.int64)
    out["query_len"] = np.bincount(q_rows, minlength=n).astype(np.int32)
    q_hash = hash_bucket(qt, B_TOK)
    t_hash = hash_bucket(tt, B_TOK)
    out["query_tok_h"] = _list_column(q_rows, q_hash, n)
    out["title_tok_h"] = _list_column(tt.index.to_numpy(np.int64), t_hash, n)
    out["interest_h"] = _list_column(it.index.to_numpy(np.int64), hash_bucket(it, B_CAT), n)

    # bigrams: consecutive tokens of the same row
    same_row = q_rows[1:] == q_rows[:-1]
    words = qt.reset_index(drop=True)
    bigrams = (words.iloc[:-1][same_row].reset_index(drop=True) + " "
               + words.iloc[1:][same_row].reset_index(drop=True))
    out["query_bigram_h"] = _list_column(q_rows[1:][same_row], hash_bucket(bigrams, B_CROSS), n)

    # query x title: per-row cartesian product of the token bucket ids, i-major, first 64
    q = pd.DataFrame({"row": q_rows, "qpos": np.arange(len(q_rows)), "a": q_hash})
    t = pd.DataFrame({"row": tt.index.to_numpy(np.int64), "tpos": np.arange(len(t_hash)), "b": t_hash})
    pairs = q.merge(t, on="row").sort_values(["row", "qpos", "tpos"], kind="stable")
    pairs = pairs[pairs.groupby("row").cumcount() < QXT_CAP]
    crossed = pairs["a"].astype("str") + "_" + pairs["b"].astype("str")
    out["qxt_cross_h"] = _list_column(pairs["row"].to_numpy(np.int64),
                                      hash_bucket(crossed, B_CROSS), n)

    out["user_ad_h"] = hash_bucket(df["user_id"].astype("str") + "_" + df["ad_id"].astype("str"), B_CROSS)
    out["cat_city_h"] = hash_bucket(df["category"].astype("str") + "_" + df["city"], B_CROSS)
    out["hour_cat_h"] = hash_bucket(hour.astype("str") + "_" + df["category"].astype("str"), B_CROSS)
    return out


# ------------------------------------------------------------------------ merge

def merge(features: pd.DataFrame, basic: pd.DataFrame) -> pd.DataFrame:
    """Section 6: inner join with basic on instance_id; the 39 columns in order."""
    df = features.merge(basic, on="instance_id", how="inner")
    return df[OUTPUT_COLUMNS]


# ----------------------------------------------------------------------- driver

def run_pandas(tables: dict[str, pd.DataFrame], clean_step: Callable = clean, extract_step: Callable = extract
               ) -> tuple[pd.DataFrame, dict[str, float]]:
    """Run clean, join, extract and merge on the tables of :func:`load_tables`
    (``clean_step`` / ``extract_step``: another peer's steps).

    Returns the output in canonical form (sorted by instance_id) and the seconds of each
    step: ``{"clean", "join", "extract", "merge"}``.
    """
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    imp, users, ads = clean_step(tables)
    t1 = time.perf_counter()
    joined = join(imp, users, ads)
    t2 = time.perf_counter()
    features = extract_step(joined)
    t3 = time.perf_counter()
    out = merge(features, tables["basic"])
    t4 = time.perf_counter()
    seconds.update(clean=t1 - t0, join=t2 - t1, extract=t3 - t2, merge=t4 - t3)
    return canonical(out), seconds


def canonical(df: pd.DataFrame) -> pd.DataFrame:
    """The canonical form of an output: sorted by instance_id, index 0..n-1."""
    return df.sort_values("instance_id", kind="stable").reset_index(drop=True)


def _arrow_type(series: pd.Series) -> pa.DataType:
    return pa.Array.from_pandas(series).type if not isinstance(series.dtype, pd.ArrowDtype) \
        else series.dtype.pyarrow_dtype


def _normalise_list_type(t: pa.DataType) -> pa.DataType:
    # the list field name (item/element) is not part of the contract
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(t.value_type)
    return t


def schema_problems(df: pd.DataFrame) -> list[str]:
    """Differences between ``df`` and the section 6 schema (names, order, types, nulls).

    Example:
        >>> schema_problems(pd.DataFrame({"instance_id": [1]}))[0][:15]
        'columns differ:'
    """
    problems = []
    if list(df.columns) != OUTPUT_COLUMNS:
        problems.append(f"columns differ: got {list(df.columns)}, want {OUTPUT_COLUMNS}")
        return problems
    for name, want in OUTPUT_SCHEMA:
        arr = pa.chunked_array([pa.Array.from_pandas(df[name])]) if not isinstance(df[name].dtype, pd.ArrowDtype) \
            else pa.chunked_array(df[name].array._pa_array.chunks, type=df[name].dtype.pyarrow_dtype)
        got = _normalise_list_type(arr.type)
        if got != want:
            problems.append(f"column {name}: type {arr.type}, want {want}")
            continue
        if arr.null_count:
            problems.append(f"column {name}: {arr.null_count} nulls")
        if pa.types.is_list(want) and len(arr):
            flat = pa.chunked_array([c.flatten() for c in arr.chunks], type=pa.int64())
            if flat.null_count:
                problems.append(f"column {name}: {flat.null_count} null list elements")
    return problems


def _to_arrow_column(s: pd.Series) -> pa.ChunkedArray:
    if isinstance(s.dtype, pd.ArrowDtype):
        arr = s.array._pa_array
    else:
        arr = pa.chunked_array([pa.Array.from_pandas(s)])
    if pa.types.is_large_list(arr.type):
        arr = arr.cast(pa.list_(arr.type.value_type))
    return arr


def frames_equal(a: pd.DataFrame, b: pd.DataFrame) -> tuple[bool, str]:
    """Whether two workload outputs are exactly equal (after :func:`canonical`): same
    columns in the same order, same Arrow types, bit-identical floats, equal lists.
    The message explains the first difference.

    Example:
        >>> x = pd.DataFrame({"instance_id": [2, 1], "v": [0.5, 1.0]})
        >>> frames_equal(x, x.iloc[::-1])
        (True, 'equal')
    """
    if list(a.columns) != list(b.columns):
        return False, f"columns differ: {list(a.columns)} vs {list(b.columns)}"
    a, b = canonical(a), canonical(b)
    if len(a) != len(b):
        ids_a, ids_b = set(a["instance_id"].tolist()), set(b["instance_id"].tolist())
        only_a, only_b = sorted(ids_a - ids_b)[:5], sorted(ids_b - ids_a)[:5]
        return False, (f"row counts differ: {len(a)} vs {len(b)}; instance_ids only in the "
                       f"first: {only_a}, only in the second: {only_b}")
    ids = a["instance_id"].to_numpy()
    for col in a.columns:
        x, y = _to_arrow_column(a[col]), _to_arrow_column(b[col])
        if _normalise_list_type(x.type) != _normalise_list_type(y.type):
            return False, f"column {col}: types differ: {x.type} vs {y.type}"
        xn, yn = x.is_null().to_numpy(zero_copy_only=False), y.is_null().to_numpy(zero_copy_only=False)
        if (xn != yn).any():
            i = int(np.flatnonzero(xn != yn)[0])
            return False, f"column {col}: null mismatch at row {i} (instance_id {ids[i]})"
        if pa.types.is_list(x.type) or pa.types.is_large_list(x.type):
            xl, yl = x.to_pylist(), y.to_pylist()
            diff = [i for i, (p, q) in enumerate(zip(xl, yl)) if p != q]
            if diff:
                i = diff[0]
                return False, (f"column {col}: {len(diff)} rows differ; first at row {i} "
                               f"(instance_id {ids[i]}): {xl[i]} vs {yl[i]}")
            continue
        xv = x.to_numpy(zero_copy_only=False)
        yv = y.to_numpy(zero_copy_only=False)
        if xv.dtype.kind == "f":
            xv = xv.view(f"u{xv.dtype.itemsize}")
            yv = yv.view(f"u{yv.dtype.itemsize}")
        neq = xv != yv
        if neq.any():
            i = int(np.flatnonzero(neq)[0])
            return False, (f"column {col}: {int(neq.sum())} rows differ; first at row {i} "
                           f"(instance_id {ids[i]}): {a[col].iloc[i]!r} vs {b[col].iloc[i]!r}")
    return True, "equal"


def write_output(df: pd.DataFrame, path: str | Path) -> None:
    """Write an output as parquet with the section 6 Arrow types (no pandas metadata, so
    any parquet reader, and :func:`read_output`, takes it as is)."""
    table = pa.Table.from_pandas(df, preserve_index=False).replace_schema_metadata(None)
    pq.write_table(table, path)


def read_output(path: str | Path) -> pd.DataFrame:
    """Read an output parquet file back in the form :func:`run_pandas` returns: numpy
    columns for scalars, ``pd.ArrowDtype(list<int64>)`` for lists, canonical order."""
    table = pq.read_table(path)
    cols = {}
    for name in table.column_names:
        col = table.column(name)
        if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
            cols[name] = pd.Series(col.cast(pa.list_(pa.int64())), dtype=LIST_INT64)
        else:
            cols[name] = col.to_pandas()
    return canonical(pd.DataFrame(cols))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="folder with the four parquet files")
    parser.add_argument("--out", help="write the (canonical) output here as parquet")
    parser.add_argument("--repeat", type=int, default=1, help="runs; the median is reported")
    args = parser.parse_args(argv)

    totals, runs = [], []
    out = None
    for _ in range(max(1, args.repeat)):
        t0 = time.perf_counter()
        tables = load_tables(args.data)
        read_s = time.perf_counter() - t0
        out, seconds = run_pandas(tables)
        seconds = {"read": read_s, **seconds}
        runs.append(seconds)
        totals.append(sum(seconds.values()))
    rows_in = len(tables["impressions"])
    median = float(np.median(totals))
    problems = schema_problems(out)
    for step in ("read", "clean", "join", "extract", "merge"):
        print(f"{step:8s} {np.median([r[step] for r in runs]):9.3f} s")
    print(f"total    {median:9.3f} s  ({rows_in} impressions in, {len(out)} rows out, "
          f"{rows_in / median:,.0f} rows/s)")
    if problems:
        print("schema problems:", *problems, sep="\n  ")
    if args.out:
        write_output(out, args.out)
    no_read = float(np.median([t - r["read"] for t, r in zip(totals, runs)]))
    print(json.dumps({"rows_in": rows_in, "rows_out": len(out), "seconds_median": median,
                      "pandas_rows_per_s": rows_in / median,
                      "pandas_rows_per_s_excluding_read": rows_in / no_read,
                      "steps": {k: float(np.median([r[k] for r in runs])) for k in runs[0]}}))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
