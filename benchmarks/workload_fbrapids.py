"""The canonical workload (shared/bench/WORKLOAD.md) with fbrapids meta-kernels.

``clean``: slot filter with numpy; ``query`` / ``os`` / ``geo_city`` through one
meta-kernel plan (``fill_null`` and the strict ``json_get``); users / ads fills with
numpy.  ``join``: hash joins on the int64 keys (pandas' hash index ``get_indexer``) and
Arrow ``take``.  ``extract``: the 20 features as one plan of meta-kernels -- fused (one
kernel per layer) or op by op (one kernel per operator).  ``merge``: inner hash join
with ``basic`` on instance_id, the 39 output columns in order.

Example:
    >>> import tempfile
    >>> from fbrapids.datagen import generate
    >>> from benchmarks.workload_pandas import load_tables
    >>> d = tempfile.mkdtemp(); _ = generate(1000, d)
    >>> out, seconds, launches = run_fbrapids(load_tables(d))
    >>> len(out.columns), sorted(seconds), launches
    (39, ['clean', 'extract', 'join', 'merge'], 3)
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

import fbrapids  # noqa: F401  (registers .fbx)
from fbrapids import ops
from fbrapids.kernels.extract import compiled_plan, extract
from fbrapids.workload import features

OUTPUT_COLUMNS = (["instance_id", "click", "slot", "hour", "weekday", "user_id_h", "ad_id_h", "advertiser_h",
                   "category", "gender_h", "city_h", "os_h", "geo_city_h", "age_b", "price_b", "query_len",
                   "query_tok_h", "query_bigram_h", "title_tok_h", "interest_h", "qxt_cross_h", "user_ad_h",
                   "cat_city_h", "hour_cat_h"] + [f"d{i}" for i in range(10)] + [f"b{i}" for i in range(5)])

CLEAN_FEATURES = {
    "query": ops.fill_null("query", ""),
    "os": ops.fill_null(ops.json_get("ctx", "device.os"), ""),
    "geo_city": ops.fill_null(ops.json_get("ctx", "geo.city"), ""),
}


def workload_features() -> dict[str, Any]:
    """WORKLOAD.md section 5 as feature expressions (identical sub-expressions shared);
    the one definition in :func:`fbrapids.workload.features`."""
    return features()


def _take(col: pd.Series, idx: np.ndarray, fill: Any) -> pd.Series:
    """col[idx] with idx == -1 -> fill (an Arrow take for strings, numpy otherwise)."""
    miss = idx < 0
    if fill is None:
        miss = np.zeros(len(idx), dtype=bool)
    if isinstance(col.dtype, np.dtype):
        out = col.to_numpy()[np.where(miss, 0, idx)] if len(col) else np.full(len(idx), fill, dtype=col.dtype)
        if miss.any():
            out = out.copy()
            out[miss] = fill
        return pd.Series(out)
    arr = pa.array(col)
    taken = arr.take(pa.array(idx, mask=miss if miss.any() else None)) if len(arr) else pa.nulls(len(idx), arr.type)
    if miss.any():
        taken = taken.fill_null(fill)
    return pd.Series(pd.arrays.ArrowStringArray(taken.cast(pa.large_string()), dtype=pd.StringDtype("pyarrow", na_value=np.nan)))


def clean(tables: dict[str, pd.DataFrame]) -> tuple[pd.DataFrame, np.ndarray, pd.DataFrame, pd.DataFrame]:
    """Section 3.  The slot filter is returned as a row mask, applied by ``join``'s single
    row selection (one take per column instead of two)."""
    imp = tables["impressions"]
    keep = imp["slot"].to_numpy() >= 0
    imp = extract(imp, CLEAN_FEATURES)
    users = tables["users"]
    users = users.assign(age=users["age"].fillna(-1).astype("int32"), gender=users["gender"].fillna("unk"),
                         city=users["city"].fillna(""), interests=users["interests"].fillna(""))
    ads = tables["ads"]
    ads = ads.assign(price=ads["price"].fillna(0.0), title=ads["title"].fillna(""))
    return imp, keep, users, ads


IMP_COLUMNS = ("instance_id", "ts", "user_id", "ad_id", "slot", "query", "click", "os", "geo_city")


def join(imp: pd.DataFrame, keep: np.ndarray, users: pd.DataFrame, ads: pd.DataFrame,
         basic: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """Section 4 (left hash joins on user_id, ad_id), with the inner join of section 6
    pushed down: rows without a ``basic`` match are dropped here, before extraction (the
    output is the same; no feature is computed for a row the merge would drop).  Returns
    the joined frame and each row's ``basic`` row number."""
    bi = pd.Index(basic["instance_id"].to_numpy()).get_indexer(imp["instance_id"].to_numpy())
    rows = np.flatnonzero(keep & (bi >= 0))
    ui = pd.Index(users["user_id"].to_numpy()).get_indexer(imp["user_id"].to_numpy()[rows])
    ai = pd.Index(ads["ad_id"].to_numpy()).get_indexer(imp["ad_id"].to_numpy()[rows])
    cols = {c: _take(imp[c], rows, None) for c in IMP_COLUMNS}
    for c, fill in (("age", -1), ("gender", "unk"), ("city", ""), ("interests", "")):
        cols[c] = _take(users[c], ui, fill)
    for c, fill in (("title", ""), ("category", -1), ("price", 0.0), ("advertiser_id", -1)):
        cols[c] = _take(ads[c], ai, fill)
    out = pd.DataFrame({c: (s.to_numpy() if isinstance(s.dtype, np.dtype) else s.array) for c, s in cols.items()},
                       copy=False)
    out = out.astype({"age": "int32", "category": "int32", "advertiser_id": "int64", "price": "float64"})
    return out, bi[rows]


def extract_features(df: pd.DataFrame, fused: bool = True, partition_rows: int | None = None) -> tuple[pd.DataFrame, float]:
    """The extracted frame and the kernel launches per partition it took.

    ``partition_rows``: extract partition by partition (as a streamed log is), then
    concatenate; None: the whole frame as one partition.
    """
    feats = workload_features()
    plan = compiled_plan(df, feats, fused=fused)
    before = plan.stats.launches
    if not partition_rows or partition_rows >= len(df):
        out = extract(df, feats, fused=fused)
        return out, plan.stats.launches - before
    parts = [extract(df.iloc[i: i + partition_rows], feats, fused=fused) for i in range(0, len(df), partition_rows)]
    launches = (plan.stats.launches - before) / len(parts)
    return pd.concat(parts, ignore_index=True), launches


def merge(features: pd.DataFrame, basic_rows: np.ndarray, basic: pd.DataFrame) -> pd.DataFrame:
    """Section 6: the basic columns of each (kept) row; the 39 columns in order."""
    out = {}
    for c in OUTPUT_COLUMNS:
        if c in features.columns:
            s = features[c]
            out[c] = s.to_numpy() if isinstance(s.dtype, np.dtype) else s.array
        else:
            out[c] = basic[c].to_numpy()[basic_rows]
    return pd.DataFrame(out, copy=False)


def run_fbrapids(tables: dict[str, pd.DataFrame], fused: bool = True,
                 partition_rows: int | None = None) -> tuple[pd.DataFrame, dict[str, float], float]:
    """clean, join, extract, merge; returns (output, seconds per step, extract launches)."""
    t0 = time.perf_counter()
    imp, keep, users, ads = clean(tables)
    t1 = time.perf_counter()
    joined, basic_rows = join(imp, keep, users, ads, tables["basic"])
    t2 = time.perf_counter()
    feats, launches = extract_features(joined, fused=fused, partition_rows=partition_rows)
    t3 = time.perf_counter()
    out = merge(feats, basic_rows, tables["basic"])
    t4 = time.perf_counter()
    return out, {"clean": t1 - t0, "join": t2 - t1, "extract": t3 - t2, "merge": t4 - t3}, launches
