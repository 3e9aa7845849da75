"""The embedded default data: a seeded, deterministic multi-view ads log.

``generate(rows, out_dir)`` writes the four parquet files of the canonical workload
(``impressions``, ``users``, ``ads``, ``basic``; schema of section 1 of
``shared/bench/WORKLOAD.md``).  Clicks are drawn from a hidden logistic model over
things the features can see (user and ad identity, category x gender affinity, hour,
device os, slot, query/title word overlap, price, a noisy dense signal), so they can be
learned.  The AUC of the hidden model's own probabilities on the sampled clicks (the
best any model can do) is stored in the impressions file's parquet key-value metadata
under ``fbrapids.oracle_auc``, alongside the seed and row count; README documents the
figures.

Example:
    >>> import tempfile
    >>> paths = generate(2000, tempfile.mkdtemp())
    >>> sorted(paths)
    ['ads', 'basic', 'impressions', 'users']
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from fbrapids.errors import DataGenError

log = logging.getLogger(__name__)

TS0 = 1699833600  # 2023-11-13 00:00:00 UTC, a Monday
DAYS = 7
VOCAB_SIZE = 50_000
N_TAGS = 400
N_CITIES = 300
N_CATEGORIES = 200
OS_NAMES = ("android", "ios", "harmony", "windows", "linux")
METADATA_KEY = b"fbrapids.gen"
ROW_GROUP_ROWS = 32_768  # one dask partition per row group: a 200k-row log streams as 7 partitions

_CONSONANTS = list("bcdfghjklmnprstvwz")
_VOWELS = list("aeiou")
_NON_ASCII = ["é", "ü", "ñ", "ø", "ç", "ß", "中", "文", "дом", "ж"]


def _vocabulary(rng: np.random.Generator, size: int) -> np.ndarray:
    """``size`` distinct pseudo-words of 1-4 syllables; ~2% carry a non-ASCII UTF-8 piece."""
    syllables = np.array([c + v for c in _CONSONANTS for v in _VOWELS], dtype=object)
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < size:
        batch = 2 * (size - len(words)) + 64
        n_syl = rng.integers(1, 5, size=batch)
        syl = rng.integers(0, len(syllables), size=(batch, 4))
        accent = rng.random(batch) < 0.02
        extra = rng.integers(0, len(_NON_ASCII), size=batch)
        for i in range(batch):
            w = "".join(syllables[syl[i, : n_syl[i]]])
            if accent[i]:
                w += _NON_ASCII[extra[i]]
            if w not in seen:
                seen.add(w)
                words.append(w)
                if len(words) == size:
                    break
    return np.array(words, dtype=object)


def _zipf_ranks(rng: np.random.Generator, n: int, size: int, a: float = 1.1) -> np.ndarray:
    """``size`` draws of ranks in [0, n) with P(k) ~ 1/(k+1)^a (bounded Zipf)."""
    weights = 1.0 / np.power(np.arange(1, n + 1, dtype=np.float64), a)
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    return np.minimum(np.searchsorted(cdf, rng.random(size), side="right"), n - 1)


def _join_words(vocab: np.ndarray, word_ids: np.ndarray, lengths: np.ndarray, sep: str) -> list[str]:
    """Rows of ``lengths[i]`` words from the flat ``word_ids``, joined by ``sep``."""
    words = vocab[word_ids]
    ends = np.cumsum(lengths)
    starts = ends - lengths
    return [sep.join(words[s:e]) for s, e in zip(starts.tolist(), ends.tolist())]


def _unique_ids(rng: np.random.Generator, n: int, low: int, high: int) -> np.ndarray:
    ids = np.unique(rng.integers(low, high, size=int(n * 1.05) + 16, dtype=np.int64))
    rng.shuffle(ids)
    if len(ids) < n:  # vanishingly unlikely with the ranges used here
        raise DataGenError("id range too small for the requested number of ids")
    return ids[:n]


def _contexts(rng: np.random.Generator, os_idx: np.ndarray, city_idx: np.ndarray) -> list[str | None]:
    """JSON request contexts: ~2% null, ~0.5% malformed, ~1% without geo, ~0.5% without device.os."""
    n = len(os_idx)
    kind = rng.random(n)
    net = rng.choice(["wifi", "4g", "5g"], size=n)
    app_ver = rng.integers(100, 400, size=n)
    out: list[str | None] = []
    for i in range(n):
        k = kind[i]
        os_name = OS_NAMES[os_idx[i]]
        city = f"c{city_idx[i]}"
        if k < 0.02:
            out.append(None)
        elif k < 0.025:  # malformed: truncated, single-quoted, or trailing garbage
            doc = f'{{"device": {{"os": "{os_name}"}}, "geo": {{"city": "{city}"}}}}'
            variant = i % 3
            if variant == 0:
                out.append(doc[: len(doc) // 2])
            elif variant == 1:
                out.append(doc.replace('"', "'"))
            else:
                out.append(doc + " }")
        elif k < 0.035:  # valid, no geo
            out.append(f'{{"device": {{"os": "{os_name}", "v": {app_ver[i]}}}, "net": "{net[i]}"}}')
        elif k < 0.04:  # valid, no device.os
            out.append(f'{{"device": {{"model": "m{app_ver[i]}"}}, "geo": {{"city": "{city}"}}}}')
        else:
            out.append(
                f'{{"device": {{"os": "{os_name}", "v": {app_ver[i]}}}, '
                f'"geo": {{"city": "{city}", "lat": {float(city_idx[i]) / 7:.3f}}}, "net": "{net[i]}"}}'
            )
    return out


def _roc_auc(y: np.ndarray, p: np.ndarray) -> float:
    order = np.argsort(p, kind="mergesort")
    ranks = np.empty(len(p), dtype=np.float64)
    ranks[order] = np.arange(1, len(p) + 1)
    # average ranks over ties
    sp = p[order]
    _, start, counts = np.unique(sp, return_index=True, return_counts=True)
    for s, c in zip(start[counts > 1], counts[counts > 1]):
        ranks[order[s : s + c]] = ranks[order[s : s + c]].mean()
    pos = y == 1
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def generate(rows: int, out_dir: str | Path, seed: int = 0) -> dict[str, Path]:
    """Write ``impressions``, ``users``, ``ads`` and ``basic`` parquet files to ``out_dir``.

    Deterministic for a given ``(rows, seed)``.  Returns the path of each file.

    Example:
        >>> import tempfile, pandas as pd
        >>> p = generate(1000, tempfile.mkdtemp(), seed=1)
        >>> pd.read_parquet(p["impressions"]).shape[0]
        1000
    """
    if rows < 100:
        raise ValueError(f"rows must be at least 100, got {rows}")
    rng = np.random.default_rng(seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    n_users = max(rows // 10, 20)
    n_ads = max(rows // 20, 10)

    vocab = _vocabulary(rng, VOCAB_SIZE)
    tags = np.array([f"t{i}" for i in range(N_TAGS)], dtype=object)

    # ---- users ----------------------------------------------------------------
    user_ids = _unique_ids(rng, n_users, 1, 2**62)
    age = rng.integers(14, 75, size=n_users).astype(np.int32)
    gender_idx = rng.choice(3, size=n_users, p=[0.48, 0.48, 0.04])
    gender = np.array(["m", "f", "o"], dtype=object)[gender_idx]
    user_city = _zipf_ranks(rng, N_CITIES, n_users, a=0.9)
    n_interests = rng.integers(0, 11, size=n_users)
    interest_tags = _zipf_ranks(rng, N_TAGS, int(n_interests.sum()), a=0.8)
    interests = _join_words(tags, interest_tags, n_interests, "|")
    user_bias = rng.normal(0.0, 0.6, size=n_users)
    user_pref_cat = rng.integers(0, N_CATEGORIES, size=n_users)
    users = pd.DataFrame(
        {
            "user_id": user_ids,
            "age": pd.array(np.where(rng.random(n_users) < 0.05, -999, age), dtype="Int32"),
            "gender": pd.array(np.where(rng.random(n_users) < 0.08, None, gender), dtype="str"),
            "city": pd.array([f"c{c}" for c in user_city], dtype="str"),
            "interests": pd.array(interests, dtype="str"),
        }
    )
    users.loc[users["age"] == -999, "age"] = pd.NA

    # ---- ads ------------------------------------------------------------------
    ad_ids = _unique_ids(rng, n_ads, 1, 2**40)
    category = _zipf_ranks(rng, N_CATEGORIES, n_ads, a=0.7).astype(np.int32)
    title_len = rng.integers(3, 13, size=n_ads)
    title_words = _zipf_ranks(rng, VOCAB_SIZE, int(title_len.sum()), a=1.05)
    titles = _join_words(vocab, title_words, title_len, " ")
    price = np.round(np.exp(rng.normal(3.0, 1.2, size=n_ads)), 2)
    price_null = rng.random(n_ads) < 0.04
    n_advertisers = max(n_ads // 8, 2)
    advertiser_id = _unique_ids(rng, n_advertisers, 10**6, 10**12)[rng.integers(0, n_advertisers, size=n_ads)]
    ad_quality = rng.normal(0.0, 0.5, size=n_ads)
    ads = pd.DataFrame(
        {
            "ad_id": ad_ids,
            "title": pd.array(titles, dtype="str"),
            "category": category,
            "price": pd.array(np.where(price_null, np.nan, price), dtype="Float64"),
            "advertiser_id": advertiser_id,
        }
    )
    ads["price"] = ads["price"].astype("float64")  # nullable double: NaN written as null below

    # ---- impressions ----------------------------------------------------------
    ts = np.sort(rng.integers(TS0, TS0 + DAYS * 86400, size=rows))
    u_rank = _zipf_ranks(rng, n_users, rows, a=0.8)
    a_rank = _zipf_ranks(rng, n_ads, rows, a=0.9)
    imp_user = user_ids[u_rank]
    imp_ad = ad_ids[a_rank]
    # ids absent from the dimension tables: ~0.5% users, ~0.2% ads
    ghost_users = _unique_ids(rng, max(n_users // 200, 1), 2**62, 2**63 - 1)
    ghost_ads = _unique_ids(rng, max(n_ads // 500, 1), 2**40, 2**41)
    gu = rng.random(rows) < 0.005
    ga = rng.random(rows) < 0.002
    imp_user = np.where(gu, ghost_users[rng.integers(0, len(ghost_users), rows)], imp_user)
    imp_ad = np.where(ga, ghost_ads[rng.integers(0, len(ghost_ads), rows)], imp_ad)

    slot = rng.integers(0, 8, size=rows).astype(np.int8)
    slot[rng.random(rows) < 0.03] = -1
    # query: 1-6 words, half the time about the ad's own title words
    q_len = rng.integers(1, 7, size=rows)
    q_words = _zipf_ranks(rng, VOCAB_SIZE, int(q_len.sum()), a=1.05)
    on_topic = rng.random(rows) < 0.35
    ad_first_word = title_words[np.cumsum(title_len) - title_len][a_rank]
    first_pos = np.cumsum(q_len) - q_len
    q_words[first_pos[on_topic]] = ad_first_word[on_topic]
    queries = np.array(_join_words(vocab, q_words, q_len, " "), dtype=object)
    queries[rng.random(rows) < 0.03] = None

    os_idx = rng.choice(len(OS_NAMES), size=rows, p=[0.55, 0.35, 0.05, 0.03, 0.02])
    city_idx = np.where(rng.random(rows) < 0.8, user_city[u_rank], _zipf_ranks(rng, N_CITIES, rows, 0.9))
    ctx = _contexts(rng, os_idx, city_idx)

    # ---- the hidden click model ------------------------------------------------
    hour = (ts % 86400) // 3600
    in_users = ~gu
    in_ads = ~ga
    ad_cat = category[a_rank]
    logit = np.full(rows, -2.6)
    logit += np.where(in_users, user_bias[u_rank], 0.0)
    logit += np.where(in_ads, ad_quality[a_rank], 0.0)
    logit += np.where(in_users & in_ads & (user_pref_cat[u_rank] % 20 == ad_cat % 20), 1.0, 0.0)
    logit += np.where(in_ads & (gender_idx[u_rank] == ad_cat % 3), 0.5, 0.0)
    logit += 0.5 * np.sin((hour - 8) / 24 * 2 * np.pi)
    logit += np.array([0.3, -0.2, 0.1, -0.4, 0.0])[os_idx]
    logit += np.where(slot >= 0, -0.12 * slot, 0.0)
    logit += np.where(on_topic & (queries != None), 0.9, 0.0)  # noqa: E711 (elementwise)
    logit += np.where(in_ads & ~price_null[a_rank], -0.15 * (np.log1p(price[a_rank]) - 3.0), 0.0)
    prob = 1.0 / (1.0 + np.exp(-logit))
    click = (rng.random(rows) < prob).astype(np.int8)
    oracle_auc = _roc_auc(click, prob)

    impressions = pd.DataFrame(
        {
            "instance_id": np.arange(rows, dtype=np.int64) * 7 + 1_000_003,
            "ts": ts.astype(np.int64),
            "user_id": imp_user.astype(np.int64),
            "ad_id": imp_ad.astype(np.int64),
            "slot": slot,
            "query": pd.array(queries, dtype="str"),
            "ctx": pd.array(ctx, dtype="str"),
            "click": click,
        }
    )

    # ---- basic features ---------------------------------------------------------
    has_basic = rng.random(rows) >= 0.01
    idx = np.flatnonzero(has_basic)
    rng.shuffle(idx)
    n_b = len(idx)
    dense = rng.normal(0.0, 1.0, size=(n_b, 10)).astype(np.float32)
    # d0 carries a noisy view of the hidden logit, d1 of the hour: learnable dense signal
    dense[:, 0] = (0.5 * logit[idx] + rng.normal(0, 1.0, n_b)).astype(np.float32)
    dense[:, 1] = (hour[idx] / 23.0).astype(np.float32)
    cats = rng.integers(0, 1000, size=(n_b, 5)).astype(np.int64)
    cats[:, 0] = slot[idx]
    basic = pd.DataFrame({"instance_id": impressions["instance_id"].to_numpy()[idx]})
    for j in range(10):
        basic[f"d{j}"] = dense[:, j]
    for j in range(5):
        basic[f"b{j}"] = cats[:, j]

    meta = {"rows": rows, "seed": seed, "oracle_auc": round(oracle_auc, 4), "ctr": round(float(click.mean()), 4)}
    schemas = {
        "impressions": pa.schema(
            [("instance_id", pa.int64()), ("ts", pa.int64()), ("user_id", pa.int64()), ("ad_id", pa.int64()),
             ("slot", pa.int8()), ("query", pa.string()), ("ctx", pa.string()), ("click", pa.int8())]
        ),
        "users": pa.schema(
            [("user_id", pa.int64()), ("age", pa.int32()), ("gender", pa.string()), ("city", pa.string()),
             ("interests", pa.string())]
        ),
        "ads": pa.schema(
            [("ad_id", pa.int64()), ("title", pa.string()), ("category", pa.int32()), ("price", pa.float64()),
             ("advertiser_id", pa.int64())]
        ),
        "basic": pa.schema(
            [("instance_id", pa.int64())] + [(f"d{j}", pa.float32()) for j in range(10)]
            + [(f"b{j}", pa.int64()) for j in range(5)]
        ),
    }
    frames = {"impressions": impressions, "users": users, "ads": ads, "basic": basic}
    paths: dict[str, Path] = {}
    for name, frame in frames.items():
        schema = schemas[name]
        if name == "impressions":
            schema = schema.with_metadata({METADATA_KEY: json.dumps(meta).encode()})
        table = pa.Table.from_pandas(frame, schema=schema, preserve_index=False)
        path = out / f"{name}.parquet"
        tmp = path.with_suffix(".parquet.tmp")
        pq.write_table(table, tmp, row_group_size=ROW_GROUP_ROWS)
        tmp.replace(path)
        paths[name] = path
    log.info("generated %d impressions into %s (oracle AUC %.4f, CTR %.4f)", rows, out, oracle_auc, meta["ctr"])
    return paths


def read_metadata(data_dir: str | Path) -> dict:
    """The generator's metadata (rows, seed, oracle_auc, ctr) stored in impressions.parquet.

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp(); _ = generate(500, d)
        >>> read_metadata(d)["rows"]
        500
    """
    schema = pq.read_schema(Path(data_dir) / "impressions.parquet")
    raw = (schema.metadata or {}).get(METADATA_KEY)
    return json.loads(raw) if raw else {}


def ensure_dataset(rows: int, out_dir: str | Path, seed: int = 0) -> Path:
    """Generate the default data into ``out_dir`` unless a matching set is already there.

    Example:
        >>> import tempfile
        >>> d = ensure_dataset(300, tempfile.mkdtemp())
        >>> (d / "basic.parquet").exists()
        True
    """
    out = Path(out_dir)
    names = ("impressions", "users", "ads", "basic")
    if all((out / f"{n}.parquet").exists() for n in names):
        meta = read_metadata(out)
        if meta.get("rows") == rows and meta.get("seed") == seed:
            return out
    generate(rows, out, seed=seed)
    return out
