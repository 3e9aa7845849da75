"""The canonical workload in polars 1.x, eager and lazy, each distinct value hashed once.

Written as a polars user who cares about speed would: ``read_parquet`` / ``scan_parquet``,
``join``, ``str.split`` and ``list.eval`` for tokens and bigrams, ``explode`` twice and a
windowed row count for the capped query x title cross, and FarmHash (pyfarmhash; polars'
own hash is not FarmHash) through ``map_batches``: each batch's ``unique`` values are
fingerprinted once and mapped back with ``replace_strict``.  JSON contexts are parsed once
per distinct document with the reference's strict rules (``json_fields``: polars'
``json_path_match`` accepts documents the workload rejects).  The same method chain runs
on ``DataFrame`` (eager, each step executed as written) and ``LazyFrame`` (one optimised
``collect``).  The output is the reference's exactly (``frames_equal``).

Example:
    >>> import tempfile
    >>> from benchmarks.workload_pandas import frames_equal, load_tables, run_pandas
    >>> from fbrapids.datasets.synthetic.generate import generate
    >>> d = tempfile.mkdtemp(); _ = generate(3000, d)
    >>> want = run_pandas(load_tables(d))[0]
    >>> [frames_equal(run_polars(d, lazy)[0], want)[0] for lazy in (False, True)]
    [True, True]
"""

from __future__ import annotations

import inspect
import time
from pathlib import Path
from typing import Any

import farmhash
import numpy as np
import pandas as pd
import polars as pl

from benchmarks.workload_pandas import (
    AGE_BOUNDS,
    B_CAT,
    B_CROSS,
    B_ID,
    B_TOK,
    OUTPUT_COLUMNS,
    PRICE_BOUNDS,
    QXT_CAP,
    TABLES,
    canonical,
    json_fields,
)

TOKEN_BITS = 18  # token bucket ids are < B_TOK = 2^18: a token pair packs into one int64
assert B_TOK <= 1 << TOKEN_BITS

#: ``explode``'s empty-list behaviour named (every explode here drops nulls after it, so either
#: value gives the same rows; naming it silences the DeprecationWarning newer polars 1.x gives about its
#: default changing in 2.0; older 1.x polars has no such argument)
EXPLODE: dict[str, Any] = ({"empty_as_null": True} if "empty_as_null" in inspect.signature(pl.Series.explode).parameters
                           else {})


def _fingerprint_buckets(texts: list[str], buckets: int) -> pl.Series:
    fp = np.fromiter(map(farmhash.fingerprint64, texts), dtype=np.uint64, count=len(texts))
    return pl.Series((fp % np.uint64(buckets)).astype(np.int64))


def hash_values(s: pl.Series, buckets: int) -> pl.Series:
    """fingerprint64(str(v)) % buckets of each value, each distinct value hashed once.

    Example:
        >>> hash_values(pl.Series(["a", "b", "a"]), 10).to_list()
        [9, 2, 9]
    """
    u = s.unique()
    texts = u.to_list() if s.dtype == pl.String else [str(v) for v in u.to_list()]
    return s.replace_strict(u, _fingerprint_buckets(texts, buckets), return_dtype=pl.Int64)


def hash_lists(s: pl.Series, buckets: int) -> pl.Series:
    """:func:`hash_values` of every element of a list column."""
    u = s.explode(**EXPLODE).drop_nulls().unique()
    h = _fingerprint_buckets(u.to_list(), buckets)
    return s.list.eval(pl.element().replace_strict(u, h, return_dtype=pl.Int64))


def hash_pairs(s: pl.Series) -> pl.Series:
    """hash_bucket(str(a) + "_" + str(b), B_CROSS) of packed token pairs (a << 18 | b)."""
    u = s.unique()
    keys = [f"{v >> TOKEN_BITS}_{v & ((1 << TOKEN_BITS) - 1)}" for v in u.to_list()]
    return s.replace_strict(u, _fingerprint_buckets(keys, B_CROSS), return_dtype=pl.Int64)


def _json_pair(s: pl.Series) -> pl.Series:
    """(os, geo_city) of each JSON context (null: empty), each distinct document parsed once."""
    u = s.unique()
    parsed = [json_fields(d, (("device", "os"), ("geo", "city"))) for d in u.to_list()]
    os_ = s.replace_strict(u, pl.Series([p[0] for p in parsed], dtype=pl.String), return_dtype=pl.String)
    geo = s.replace_strict(u, pl.Series([p[1] for p in parsed], dtype=pl.String), return_dtype=pl.String)
    return pl.struct(os=os_, geo_city=geo, eager=True)


def _hashed(col: str, buckets: int) -> pl.Expr:
    return pl.col(col).map_batches(lambda s: hash_values(s, buckets), return_dtype=pl.Int64)


def _tokens(col: str, sep: str) -> pl.Expr:
    return pl.col(col).str.split(sep).list.eval(pl.element().filter(pl.element() != ""))


def _bounds(x: pl.Expr, bounds: np.ndarray) -> pl.Expr:
    """The number of bounds b <= x (numpy ``searchsorted(side="right")``), int8."""
    return pl.sum_horizontal([(x >= float(b)).cast(pl.Int8) for b in bounds]).cast(pl.Int8)


def read(d: Path, lazy: bool) -> dict[str, Any]:
    fn = pl.scan_parquet if lazy else pl.read_parquet
    return {name: fn(Path(d) / f"{name}.parquet") for name in TABLES}


def clean(t: dict[str, Any]) -> tuple[Any, Any, Any]:
    imp = (t["impressions"].filter(pl.col("slot") >= 0)
           .with_columns(pl.col("query").fill_null(""),
                         pl.col("ctx").fill_null("").map_batches(_json_pair, return_dtype=pl.Struct(
                             {"os": pl.String, "geo_city": pl.String})).alias("fields"))
           .unnest("fields").drop("ctx"))
    users = t["users"].with_columns(pl.col("age").fill_null(-1).cast(pl.Int32), pl.col("gender").fill_null("unk"),
                                    pl.col("city").fill_null(""), pl.col("interests").fill_null(""))
    ads = t["ads"].with_columns(pl.col("price").fill_null(0.0), pl.col("title").fill_null(""))
    return imp, users, ads


def join(imp: Any, users: Any, ads: Any) -> Any:
    return (imp.join(users, on="user_id", how="left").join(ads, on="ad_id", how="left")
            .with_columns(pl.col("age").fill_null(-1), pl.col("gender").fill_null("unk"), pl.col("city").fill_null(""),
                          pl.col("interests").fill_null(""), pl.col("title").fill_null(""),
                          pl.col("category").fill_null(-1), pl.col("price").fill_null(0.0),
                          pl.col("advertiser_id").fill_null(-1)))


def extract(df: Any) -> Any:
    hour = ((pl.col("ts") % 86400) // 3600)
    feats = df.with_row_index("row").with_columns(
        hour.cast(pl.Int8).alias("hour"),
        ((pl.col("ts") // 86400 + 3) % 7).cast(pl.Int8).alias("weekday"),
        _hashed("user_id", B_ID).alias("user_id_h"), _hashed("ad_id", B_ID).alias("ad_id_h"),
        _hashed("advertiser_id", B_CAT).alias("advertiser_h"),
        *[_hashed(c, B_CAT).alias(f"{c}_h") for c in ("gender", "city", "os", "geo_city")],
        _bounds(pl.col("age"), AGE_BOUNDS).alias("age_b"), _bounds(pl.col("price").log1p(), PRICE_BOUNDS).alias("price_b"),
        _tokens("query", " ").alias("q"), _tokens("title", " ").alias("t"), _tokens("interests", "|").alias("i"),
        pl.concat_str([pl.col("user_id").cast(pl.String), pl.col("ad_id").cast(pl.String)], separator="_")
        .map_batches(lambda s: hash_values(s, B_CROSS), return_dtype=pl.Int64).alias("user_ad_h"),
        pl.concat_str([pl.col("category").cast(pl.String), pl.col("city")], separator="_")
        .map_batches(lambda s: hash_values(s, B_CROSS), return_dtype=pl.Int64).alias("cat_city_h"),
        pl.concat_str([hour.cast(pl.String), pl.col("category").cast(pl.String)], separator="_")
        .map_batches(lambda s: hash_values(s, B_CROSS), return_dtype=pl.Int64).alias("hour_cat_h"),
    ).with_columns(
        pl.col("q").list.len().cast(pl.Int32).alias("query_len"),
        pl.col("q").map_batches(lambda s: hash_lists(s, B_TOK), return_dtype=pl.List(pl.Int64)).alias("query_tok_h"),
        pl.col("q").list.eval(pl.concat_str([pl.element(), pl.element().shift(-1)], separator=" ").drop_nulls())
        .map_batches(lambda s: hash_lists(s, B_CROSS), return_dtype=pl.List(pl.Int64)).alias("query_bigram_h"),
        pl.col("t").map_batches(lambda s: hash_lists(s, B_TOK), return_dtype=pl.List(pl.Int64)).alias("title_tok_h"),
        pl.col("i").map_batches(lambda s: hash_lists(s, B_CAT), return_dtype=pl.List(pl.Int64)).alias("interest_h"),
    )
    # query x title: the product per row, query token outermost, its first QXT_CAP pairs
    pairs = (feats.select("row", pl.col("query_tok_h").alias("a"), pl.col("title_tok_h").alias("b"))
             .explode("a", **EXPLODE).explode("b", **EXPLODE).drop_nulls()
             .filter(pl.int_range(pl.len()).over("row") < QXT_CAP)
             .select("row", (pl.col("a") * (1 << TOKEN_BITS) + pl.col("b")).map_batches(hash_pairs, return_dtype=pl.Int64)
                     .alias("h"))
             .group_by("row", maintain_order=True).agg(pl.col("h").alias("qxt_cross_h")))
    return (feats.join(pairs, on="row", how="left")
            .with_columns(pl.col("qxt_cross_h").fill_null(pl.lit([], dtype=pl.List(pl.Int64))))
            .drop("row", "q", "t", "i"))


def merge(extracted: Any, basic: Any) -> Any:
    return extracted.join(basic, on="instance_id", how="inner").select(OUTPUT_COLUMNS)


def to_output(df: pl.DataFrame) -> pd.DataFrame:
    """The output as pandas, in canonical order (Arrow-backed columns)."""
    return canonical(df.to_pandas(use_pyarrow_extension_array=True))


def run_polars(d: str | Path, lazy: bool = False) -> tuple[pd.DataFrame, dict[str, float]]:
    """The workload on folder ``d``: (canonical output, seconds per step).  Eager: read,
    clean, join, extract, merge; lazy: build (the query plan) and collect."""
    seconds: dict[str, float] = {}
    t = [time.perf_counter()]

    def mark(step: str) -> None:
        now = time.perf_counter()
        seconds[step] = now - t[0]
        t[0] = now

    tables = read(Path(d), lazy)
    if not lazy:
        mark("read")
    imp, users, ads = clean(tables)
    if not lazy:
        mark("clean")
    joined = join(imp, users, ads)
    if not lazy:
        mark("join")
    extracted = extract(joined)
    if not lazy:
        mark("extract")
    out = merge(extracted, tables["basic"])
    if lazy:
        mark("build")
        out = out.collect()
        mark("collect")
    else:
        mark("merge")
    return to_output(out), seconds
