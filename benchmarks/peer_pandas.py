"""The canonical workload in pandas written for speed: each distinct value hashed once.

The peer a pandas user who cares about speed writes (``benchmarks/workload_pandas.py``
is the plainer one that fingerprints every row, kept as a reference line): FarmHash has
no vectorised form (pyfarmhash, one Python call per value), so every hashed column is
factorized first (``pd.factorize``), its distinct values fingerprinted once, and the
results taken back by the codes.  Texts are split once per distinct text (titles repeat
per ad, interests per user), tokens and bigrams hashed once per distinct token, crosses
once per distinct pair (pairs packed into one int64 and factorized); the query x title
cross is built with numpy from the token lists' offsets.  JSON contexts are parsed once
per distinct document.  Reading, joining (``pd.merge``) and the final merge are the
reference's.  The output is the reference's exactly (``frames_equal``).

Example:
    >>> import tempfile
    >>> from benchmarks.workload_pandas import frames_equal, load_tables, run_pandas
    >>> from fbrapids.datasets.synthetic.generate import generate
    >>> d = tempfile.mkdtemp(); _ = generate(3000, d)
    >>> fast, seconds = run_pandas_fast(load_tables(d))
    >>> frames_equal(fast, run_pandas(load_tables(d))[0]), sorted(seconds)
    ((True, 'equal'), ['clean', 'extract', 'join', 'merge'])
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd
import pyarrow as pa

from benchmarks.workload_pandas import (
    B_CAT,
    B_CROSS,
    B_TOK,
    LIST_INT64,
    QXT_CAP,
    clean_users_ads,
    json_fields,
    run_pandas,
    scalar_features,
)

TOKEN_BITS = 18  # token bucket ids are < B_TOK = 2^18: a (query, title) token pair packs into one int64
assert B_TOK <= 1 << TOKEN_BITS


def fingerprints(texts: Iterable[str], count: int) -> np.ndarray:
    """FarmHash Fingerprint64 of each text (one pyfarmhash call per text), as uint64."""
    import farmhash  # the oracle, needed only when a peer runs (not by `extract.py --skip-pandas`)

    return np.fromiter(map(farmhash.fingerprint64, texts), dtype=np.uint64, count=count)


def hash_distinct(values: pd.Series | np.ndarray, buckets: int) -> np.ndarray:
    """fingerprint64(str(value)) % buckets per row, each distinct value hashed once.

    Example:
        >>> hash_distinct(pd.Series(["a", "b", "a", "a"]), 10).tolist()
        [9, 2, 9, 9]
    """
    codes, uniques = pd.factorize(values)
    items = np.asarray(uniques, dtype=object)
    if len(items) and not isinstance(items[0], str):
        items = [str(v) for v in items]
    fp = fingerprints(items, len(items))
    return (fp % np.uint64(buckets)).astype(np.int64)[codes]


def _pair_codes(a: pd.Series | np.ndarray, b: pd.Series | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Codes of the distinct (a, b) pairs, and the first row of each pair."""
    ca, ua = pd.factorize(a)
    cb, ub = pd.factorize(b)
    codes, uniq = pd.factorize(ca.astype(np.int64) * len(ub) + cb)
    # factorize numbers codes in order of first appearance: a row is a code's first where
    # its code passes every earlier one
    new = np.ones(len(codes), dtype=bool)
    new[1:] = codes[1:] > np.maximum.accumulate(codes)[:-1]
    return codes, np.flatnonzero(new), np.asarray(uniq)


def cross_distinct(a: pd.Series, b: pd.Series, buckets: int) -> np.ndarray:
    """hash_bucket(str(a) + "_" + str(b)) per row, once per distinct pair.

    Example:
        >>> cross_distinct(pd.Series([1, 1, 2]), pd.Series(["x", "x", "y"]), 97).tolist()[0] == \\
        ...     cross_distinct(pd.Series([1]), pd.Series(["x"]), 97).tolist()[0]
        True
    """
    codes, first, _ = _pair_codes(a, b)
    av, bv = np.asarray(a, dtype=object)[first], np.asarray(b, dtype=object)[first]
    keys = [f"{x}_{y}" for x, y in zip(av.tolist(), bv.tolist())]
    fp = fingerprints(keys, len(keys))
    return (fp % np.uint64(buckets)).astype(np.int64)[codes]


class TokenLists:
    """Token lists of a text column, split once per distinct text: per distinct text its
    tokens' (flat) offsets, and per row the code of its text."""

    def __init__(self, texts: pd.Series, sep: str) -> None:
        self.codes, uniques = pd.factorize(texts)
        pieces = pd.Series(pd.array(np.asarray(uniques, dtype=object), dtype=pd.ArrowDtype(pa.large_string())))
        exploded = pieces.str.split(sep).explode()
        keep = exploded.notna().to_numpy() & (exploded != "").to_numpy()
        self.tokens = exploded[keep].reset_index(drop=True)  # flat, per distinct text in order
        owner = exploded.index.to_numpy()[keep]
        counts = np.bincount(owner, minlength=len(uniques)).astype(np.int64)
        self.offsets = np.zeros(len(uniques) + 1, dtype=np.int64)
        np.cumsum(counts, out=self.offsets[1:])
        self.owner = owner

    def row_lengths(self) -> np.ndarray:
        return np.diff(self.offsets)[self.codes]

    def to_rows(self, flat_values: np.ndarray, flat_offsets: np.ndarray | None = None) -> pd.Series:
        """A list<int64> column: each row gets its text's slice of ``flat_values``
        (indexed like the tokens, or by ``flat_offsets`` per distinct text)."""
        off = self.offsets if flat_offsets is None else flat_offsets
        return gather_lists(off, flat_values, self.codes)


def gather_lists(offsets: np.ndarray, values: np.ndarray, codes: np.ndarray) -> pd.Series:
    """list<int64> column whose row i is ``values[offsets[codes[i]]:offsets[codes[i] + 1]]``."""
    lengths = (offsets[1:] - offsets[:-1])[codes]
    row_off = np.zeros(len(codes) + 1, dtype=np.int64)
    np.cumsum(lengths, out=row_off[1:])
    total = int(row_off[-1])
    idx = np.arange(total, dtype=np.int64) + np.repeat(offsets[:-1][codes] - row_off[:-1], lengths)
    arr = pa.LargeListArray.from_arrays(pa.array(row_off), pa.array(values[idx], type=pa.int64()))
    return pd.Series(arr.cast(pa.list_(pa.int64())), dtype=LIST_INT64)


def clean_fast(tables: dict[str, pd.DataFrame]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Section 3, each distinct JSON context parsed once."""
    imp = tables["impressions"]
    imp = imp[imp["slot"] >= 0].reset_index(drop=True)
    imp["query"] = imp["query"].fillna("")
    codes, uniques = pd.factorize(imp["ctx"])  # nulls get code -1
    parsed = [json_fields(d, (("device", "os"), ("geo", "city"))) for d in uniques]
    os_u = np.array([p[0] for p in parsed] + [""], dtype=object)
    geo_u = np.array([p[1] for p in parsed] + [""], dtype=object)
    imp["os"] = pd.Series(os_u[codes], index=imp.index, dtype="str")
    imp["geo_city"] = pd.Series(geo_u[codes], index=imp.index, dtype="str")
    imp = imp.drop(columns="ctx")
    return (imp, *clean_users_ads(tables))


def _token_hashes(tok: TokenLists, buckets: int) -> np.ndarray:
    return hash_distinct(tok.tokens, buckets) if len(tok.tokens) else np.zeros(0, dtype=np.int64)


def extract_fast(df: pd.DataFrame) -> pd.DataFrame:
    """Section 5 with distinct values hashed once (see the module doc)."""
    df = df.reset_index(drop=True)
    n = len(df)
    out, hour = scalar_features(df, hash_distinct)  # the reference's, with each distinct value hashed once

    q = TokenLists(df["query"], " ")
    t = TokenLists(df["title"], " ")
    it = TokenLists(df["interests"], "|")
    q_hash, t_hash = _token_hashes(q, B_TOK), _token_hashes(t, B_TOK)
    out["query_len"] = q.row_lengths().astype(np.int32)
    out["query_tok_h"] = q.to_rows(q_hash)
    out["title_tok_h"] = t.to_rows(t_hash)
    out["interest_h"] = it.to_rows(_token_hashes(it, B_CAT))

    # bigrams of each distinct query: consecutive tokens of the same query
    same = q.owner[1:] == q.owner[:-1]
    words = q.tokens.to_numpy(dtype=object)
    bigrams = pd.Series(words[:-1][same] + " " + words[1:][same], dtype=object) if len(words) else pd.Series([], dtype=object)
    big_counts = np.bincount(q.owner[1:][same], minlength=len(q.offsets) - 1) if len(words) else \
        np.zeros(len(q.offsets) - 1, dtype=np.int64)
    big_off = np.zeros(len(q.offsets), dtype=np.int64)
    np.cumsum(big_counts, out=big_off[1:])
    big_hash = hash_distinct(bigrams, B_CROSS) if len(bigrams) else np.zeros(0, dtype=np.int64)
    out["query_bigram_h"] = q.to_rows(big_hash, big_off)

    # query x title: per row the first QXT_CAP pairs of the product, query token outermost
    qn, tn = q.row_lengths(), t.row_lengths()
    m = np.minimum(qn * tn, QXT_CAP)
    row_off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(m, out=row_off[1:])
    rows = np.repeat(np.arange(n, dtype=np.int64), m)
    k = np.arange(int(row_off[-1]), dtype=np.int64) - row_off[:-1][rows]
    tn_r = tn[rows]
    a = q_hash[q.offsets[q.codes][rows] + k // tn_r]
    b = t_hash[t.offsets[t.codes][rows] + k % tn_r]
    codes, uniq = pd.factorize((a << TOKEN_BITS) | b)
    uniq = np.asarray(uniq)
    keys = [f"{x}_{y}" for x, y in zip((uniq >> TOKEN_BITS).tolist(), (uniq & ((1 << TOKEN_BITS) - 1)).tolist())]
    pair_hash = (fingerprints(keys, len(keys)) % np.uint64(B_CROSS)).astype(np.int64)[codes]
    arr = pa.LargeListArray.from_arrays(pa.array(row_off), pa.array(pair_hash, type=pa.int64()))
    out["qxt_cross_h"] = pd.Series(arr.cast(pa.list_(pa.int64())), dtype=LIST_INT64)

    out["user_ad_h"] = cross_distinct(df["user_id"], df["ad_id"], B_CROSS)
    out["cat_city_h"] = cross_distinct(df["category"], df["city"], B_CROSS)
    out["hour_cat_h"] = cross_distinct(hour, df["category"], B_CROSS)
    return out


def run_pandas_fast(tables: dict[str, pd.DataFrame]) -> tuple[pd.DataFrame, dict[str, float]]:
    """Clean, join, extract and merge of :func:`benchmarks.workload_pandas.load_tables`'
    tables: the output in canonical form and the seconds of each step."""
    return run_pandas(tables, clean_fast, extract_fast)
