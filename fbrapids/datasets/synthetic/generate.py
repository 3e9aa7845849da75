"""The embedded default data: a seeded, deterministic multi-view ads log.

``generate(rows, out_dir)`` writes the four parquet files of the canonical workload
(``impressions``, ``users``, ``ads``, ``basic``; schema of section 1 of
``docs/workload.md``).  Clicks are drawn from a hidden logistic model over
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

import contextlib
import errno
import fcntl
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from fbrapids.errors import DataDirError, DataGenError, FbrapidsError
from fbrapids.files.atomic import fsync_dir, fsync_path, write_atomic
from fbrapids.runs.data_cache import DEMO_MARK, FILES  # noqa: F401  (the demo folder's marker, the data's files)

log = logging.getLogger(__name__)

#: The version of the data :func:`generate` writes: bump it whenever the same rows and seed
#: give different data (tests/notebooks/test_notebook_freshness.py fails until it is bumped).
#: It is stored in the impressions' metadata; :func:`ensure_dataset` regenerates its own
#: folders of another version, and notebooks and README figures record the version they
#: were made on (a test fails when theirs is older).
DATA_VERSION = 2
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


BLOCK_ROWS = 65_536  # impressions drawn per block, each from its own seed: output independent of row groups
AUC_BINS = 1 << 20  # the oracle AUC from histograms of the hidden probabilities (bounded memory)


@dataclass
class _Dictionaries:
    """What the impressions are drawn against: the users' and ads' ids and hidden numeric
    attributes (their text columns are drawn and written block by block, never all held)."""

    user_ids: np.ndarray
    user_age: np.ndarray
    gender_idx: np.ndarray
    user_city: np.ndarray
    user_bias: np.ndarray
    user_pref_cat: np.ndarray
    ad_ids: np.ndarray
    category: np.ndarray
    title_len: np.ndarray
    ad_first_word: np.ndarray
    price: np.ndarray
    price_null: np.ndarray
    advertiser_id: np.ndarray
    ad_quality: np.ndarray
    vocab: np.ndarray
    ghost_users: np.ndarray
    ghost_ads: np.ndarray


def _dictionaries(rng: np.random.Generator, rows: int) -> _Dictionaries:
    n_users = max(rows // 10, 20)
    n_ads = max(rows // 20, 10)
    vocab = _vocabulary(rng, VOCAB_SIZE)
    user_ids = _unique_ids(rng, n_users, 1, 2**62)
    age = rng.integers(14, 75, size=n_users).astype(np.int32)
    gender_idx = rng.choice(3, size=n_users, p=[0.48, 0.48, 0.04])
    user_city = _zipf_ranks(rng, N_CITIES, n_users, a=0.9)
    user_bias = rng.normal(0.0, 0.6, size=n_users)
    user_pref_cat = rng.integers(0, N_CATEGORIES, size=n_users)
    ad_ids = _unique_ids(rng, n_ads, 1, 2**40)
    category = _zipf_ranks(rng, N_CATEGORIES, n_ads, a=0.7).astype(np.int32)
    title_len = rng.integers(3, 13, size=n_ads)
    price = np.round(np.exp(rng.normal(3.0, 1.2, size=n_ads)), 2)
    price_null = rng.random(n_ads) < 0.04
    n_advertisers = max(n_ads // 8, 2)
    advertiser_id = _unique_ids(rng, n_advertisers, 10**6, 10**12)[rng.integers(0, n_advertisers, size=n_ads)]
    ad_quality = rng.normal(0.0, 0.5, size=n_ads)
    # ids absent from the dimension tables: ~0.5% of impressions' users, ~0.2% of their ads
    ghost_users = _unique_ids(rng, max(n_users // 200, 1), 2**62, 2**63 - 1)
    ghost_ads = _unique_ids(rng, max(n_ads // 500, 1), 2**40, 2**41)
    return _Dictionaries(user_ids, age, gender_idx, user_city, user_bias, user_pref_cat, ad_ids, category, title_len,
                         np.zeros(n_ads, dtype=np.int64), price, price_null, advertiser_id, ad_quality, vocab,
                         ghost_users, ghost_ads)


def _user_block(dic: _Dictionaries, seed: int, block: int, start: int, stop: int) -> pd.DataFrame:
    """Users ``[start, stop)`` with their text columns, from a generator seeded by ``(seed, block)``."""
    rng = np.random.default_rng([seed, 0x05E5, block])
    n = stop - start
    tags = np.array([f"t{i}" for i in range(N_TAGS)], dtype=object)
    n_interests = rng.integers(0, 11, size=n)
    interests = _join_words(tags, _zipf_ranks(rng, N_TAGS, int(n_interests.sum()), a=0.8), n_interests, "|")
    gender = np.array(["m", "f", "o"], dtype=object)[dic.gender_idx[start:stop]]  # (a copy: its nulls set below)
    age = pd.array(dic.user_age[start:stop], dtype="Int32")
    age[rng.random(n) < 0.05] = pd.NA  # 5% of ages missing, then 8% of genders (the generator's draws in this order)
    gender[rng.random(n) < 0.08] = None
    return pd.DataFrame(
        {
            "user_id": dic.user_ids[start:stop],
            "age": age,
            "gender": pd.array(gender, dtype="str"),
            "city": pd.array([f"c{c}" for c in dic.user_city[start:stop]], dtype="str"),
            "interests": pd.array(interests, dtype="str"),
        }
    )


def _ad_block(dic: _Dictionaries, seed: int, block: int, start: int, stop: int) -> pd.DataFrame:
    """Ads ``[start, stop)`` with their titles; records each ad's first title word (the
    click model's query-about-the-title signal) in ``dic.ad_first_word``."""
    rng = np.random.default_rng([seed, 0xAD5, block])
    lengths = dic.title_len[start:stop]
    words = _zipf_ranks(rng, VOCAB_SIZE, int(lengths.sum()), a=1.05)
    dic.ad_first_word[start:stop] = words[np.cumsum(lengths) - lengths]
    price = dic.price[start:stop]
    return pd.DataFrame(
        {
            "ad_id": dic.ad_ids[start:stop],
            "title": pd.array(_join_words(dic.vocab, words, lengths, " "), dtype="str"),
            "category": dic.category[start:stop],
            "price": np.where(dic.price_null[start:stop], np.nan, price),  # NaN is written as null
            "advertiser_id": dic.advertiser_id[start:stop],
        }
    )


#: levels of a planted column (:func:`generate`'s ``plant``): level ``k`` moves the hidden
#: logit by ``beta * PLANT_Z[k]``, the levels evenly spaced in [-1.5, 1.5]
PLANT_LEVELS = 16
PLANT_Z = np.linspace(-1.5, 1.5, PLANT_LEVELS)


def check_plant(plant: dict[str, float] | None) -> dict[str, float]:
    """``plant`` checked: column name -> finite effect ``beta``; names must not be taken.

    Example:
        >>> check_plant({"p_noise": 0, "p_real": 0.3})
        {'p_noise': 0.0, 'p_real': 0.3}
        >>> check_plant({"click": 1.0})
        Traceback (most recent call last):
        ...
        fbrapids.errors.DataGenError: plant: column 'click' already names a column of the generated data; rename it
    """
    out: dict[str, float] = {}
    taken = {f.name for schema in SCHEMAS.values() for f in schema}
    for name, beta in (plant or {}).items():
        if not isinstance(name, str) or not name.isidentifier():
            raise DataGenError(f"plant: column name {name!r} must be an identifier")
        if name in taken:
            raise DataGenError(f"plant: column {name!r} already names a column of the generated data; rename it")
        try:
            b = float(beta)
        except (TypeError, ValueError):
            raise DataGenError(f"plant: effect of {name!r} must be a number, got {beta!r}") from None
        if not np.isfinite(b):
            raise DataGenError(f"plant: effect of {name!r} must be finite, got {beta!r}")
        out[name] = b
    return out


def _planted_levels(seed: int, block: int, name: str, n: int) -> np.ndarray:
    """A planted column's levels in a block: from a generator of ``(seed, block, name)`` alone,
    independent of every other draw (the unplanted columns are the same with or without it)."""
    key = int.from_bytes(name.encode()[:32].ljust(32, b"\0"), "little")
    return np.random.default_rng([seed, 0x9A, block, key]).integers(0, PLANT_LEVELS, size=n).astype(np.int16)


@dataclass
class _ImpressionDraws:
    """The drawn columns of an impression block (:func:`_draw_impressions`), before clicks."""

    ts: np.ndarray
    u_rank: np.ndarray  #: each impression's user, as a rank into the users' dictionary
    a_rank: np.ndarray  #: its ad, likewise
    ghost_user: np.ndarray  #: the user is absent from the users' dictionary
    ghost_ad: np.ndarray
    user_id: np.ndarray
    ad_id: np.ndarray
    slot: np.ndarray
    on_topic: np.ndarray  #: the query starts with the ad's first title word
    queries: np.ndarray
    os_idx: np.ndarray
    ctx: list[str | None]


def _impression_block(dic: _Dictionaries, seed: int, block: int, start: int, stop: int,
                      rows: int, plant: dict[str, float] | None = None
                      ) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Impressions ``[start, stop)`` of ``rows``, their basic features, clicks, hidden
    probabilities, and per planted column the hidden probabilities without its term; drawn
    from a generator seeded by ``(seed, block)`` alone (planted columns from their own)."""
    rng = np.random.default_rng([seed, 0x1B, block])
    n = stop - start
    d = _draw_impressions(rng, dic, start, stop, rows)
    hour = (d.ts % 86400) // 3600
    logit = _hidden_logit(dic, d, hour)
    levels = {name: _planted_levels(seed, block, name, n) for name in plant or {}}
    terms = {name: (plant or {})[name] * PLANT_Z[lv] for name, lv in levels.items()}
    full = logit + sum(terms.values()) if terms else logit
    prob = 1.0 / (1.0 + np.exp(-full))
    without = {name: 1.0 / (1.0 + np.exp(-(full - t))) for name, t in terms.items()}
    click = (rng.random(n) < prob).astype(np.int8)

    instance_id = (start + np.arange(n, dtype=np.int64)) * 7 + 1_000_003
    impressions = pd.DataFrame(
        {
            "instance_id": instance_id,
            "ts": d.ts.astype(np.int64),
            "user_id": d.user_id.astype(np.int64),
            "ad_id": d.ad_id.astype(np.int64),
            "slot": d.slot,
            "query": pd.array(d.queries, dtype="str"),
            "ctx": pd.array(d.ctx, dtype="str"),
            "click": click,
            **levels,
        }
    )
    basic = _basic_block(rng, instance_id, logit, hour, d.slot)
    return impressions, basic, click, prob, without


def _draw_impressions(rng: np.random.Generator, dic: _Dictionaries, start: int, stop: int,
                      rows: int) -> _ImpressionDraws:
    """Impressions ``[start, stop)``'s times (sorted, spread over ``DAYS``), users and ads
    (Zipf; a few absent from the dictionaries), slots, queries (half the time about the
    ad's title) and contexts, drawn from ``rng`` in this order."""
    n = stop - start
    span = DAYS * 86400
    lo, hi = TS0 + span * start // rows, TS0 + span * stop // rows
    ts = np.sort(rng.integers(lo, max(hi, lo + 1), size=n))
    u_rank = _zipf_ranks(rng, len(dic.user_ids), n, a=0.8)
    a_rank = _zipf_ranks(rng, len(dic.ad_ids), n, a=0.9)
    gu = rng.random(n) < 0.005
    ga = rng.random(n) < 0.002
    imp_user = np.where(gu, dic.ghost_users[rng.integers(0, len(dic.ghost_users), n)], dic.user_ids[u_rank])
    imp_ad = np.where(ga, dic.ghost_ads[rng.integers(0, len(dic.ghost_ads), n)], dic.ad_ids[a_rank])

    slot = rng.integers(0, 8, size=n).astype(np.int8)
    slot[rng.random(n) < 0.03] = -1
    # query: 1-6 words, half the time about the ad's own title words
    q_len = rng.integers(1, 7, size=n)
    q_words = _zipf_ranks(rng, VOCAB_SIZE, int(q_len.sum()), a=1.05)
    on_topic = rng.random(n) < 0.35
    ad_first_word = dic.ad_first_word[a_rank]
    first_pos = np.cumsum(q_len) - q_len
    q_words[first_pos[on_topic]] = ad_first_word[on_topic]
    queries = np.array(_join_words(dic.vocab, q_words, q_len, " "), dtype=object)
    queries[rng.random(n) < 0.03] = None

    os_idx = rng.choice(len(OS_NAMES), size=n, p=[0.55, 0.35, 0.05, 0.03, 0.02])
    city_idx = np.where(rng.random(n) < 0.8, dic.user_city[u_rank], _zipf_ranks(rng, N_CITIES, n, 0.9))
    ctx = _contexts(rng, os_idx, city_idx)
    return _ImpressionDraws(ts, u_rank, a_rank, gu, ga, imp_user, imp_ad, slot, on_topic, queries, os_idx, ctx)


def _hidden_logit(dic: _Dictionaries, d: _ImpressionDraws, hour: np.ndarray) -> np.ndarray:
    """The hidden click model's logit of each impression (without planted terms): user bias,
    ad quality, user-category and gender-category affinity, hour, OS, slot, an on-topic
    query, price.  Draws nothing."""
    u_rank, a_rank = d.u_rank, d.a_rank
    in_users, in_ads = ~d.ghost_user, ~d.ghost_ad
    ad_cat = dic.category[a_rank]
    logit = np.full(len(d.ts), -2.6)
    logit += np.where(in_users, dic.user_bias[u_rank], 0.0)
    logit += np.where(in_ads, dic.ad_quality[a_rank], 0.0)
    logit += np.where(in_users & in_ads & (dic.user_pref_cat[u_rank] % 20 == ad_cat % 20), 1.0, 0.0)
    logit += np.where(in_ads & (dic.gender_idx[u_rank] == ad_cat % 3), 0.5, 0.0)
    logit += 0.5 * np.sin((hour - 8) / 24 * 2 * np.pi)
    logit += np.array([0.3, -0.2, 0.1, -0.4, 0.0])[d.os_idx]
    logit += np.where(d.slot >= 0, -0.12 * d.slot, 0.0)
    logit += np.where(d.on_topic & (d.queries != None), 0.9, 0.0)  # noqa: E711 (elementwise)
    logit += np.where(in_ads & ~dic.price_null[a_rank], -0.15 * (np.log1p(dic.price[a_rank]) - 3.0), 0.0)
    return logit


def _basic_block(rng: np.random.Generator, instance_id: np.ndarray, logit: np.ndarray, hour: np.ndarray,
                 slot: np.ndarray) -> pd.DataFrame:
    """The basic features of ~99% of the impressions, in ``instance_id`` order: ten dense
    columns (``d0`` a noisy view of the hidden logit, ``d1`` of the hour) and five
    categorical ones (``b0`` the slot), drawn from ``rng``."""
    idx = np.flatnonzero(rng.random(len(instance_id)) >= 0.01)
    n_b = len(idx)
    dense = rng.normal(0.0, 1.0, size=(n_b, 10)).astype(np.float32)
    # d0 carries a noisy view of the hidden logit, d1 of the hour: learnable dense signal
    # (the logit without planted terms: a planted column's effect is learnable only from it)
    dense[:, 0] = (0.5 * logit[idx] + rng.normal(0, 1.0, n_b)).astype(np.float32)
    dense[:, 1] = (hour[idx] / 23.0).astype(np.float32)
    cats = rng.integers(0, 1000, size=(n_b, 5)).astype(np.int64)
    cats[:, 0] = slot[idx]
    basic = pd.DataFrame({"instance_id": instance_id[idx]})
    for j in range(10):
        basic[f"d{j}"] = dense[:, j]
    for j in range(5):
        basic[f"b{j}"] = cats[:, j]
    return basic


class _RowGroupWriter:
    """Writes tables to one parquet file in row groups of exactly ``group_rows`` rows (the
    last may be shorter), whatever the sizes of the tables handed to it; atomic on close."""

    def __init__(self, path: Path, schema: pa.Schema, group_rows: int) -> None:
        # a name of this writer's own: two generators into one folder never share a temporary file
        self.path, self.tmp = path, path.with_name(f".{path.name}.{os.getpid()}-{id(self):x}.tmp")
        self.schema, self.group_rows = schema, group_rows
        self.writer = pq.ParquetWriter(self.tmp, schema, write_page_checksum=True)  # reads verify them
        self.pending: list[pa.Table] = []
        self.pending_rows = 0

    def add(self, frame: pd.DataFrame, ends: Iterable[int] = ()) -> None:
        """Queue ``frame``; a row group also ends after each row offset in ``ends``."""
        table = pa.Table.from_pandas(frame, schema=self.schema, preserve_index=False)
        start = 0
        for cut in ends:
            self._queue(table.slice(start, cut - start))
            start = cut
            self._flush(force=True)
        self._queue(table.slice(start))

    def _queue(self, piece: pa.Table) -> None:
        if len(piece):
            self.pending.append(piece)
            self.pending_rows += len(piece)
        while self.pending_rows >= self.group_rows:
            self._flush()

    def _flush(self, force: bool = False) -> None:
        if not self.pending_rows:
            self.pending = []
            return
        table = pa.concat_tables(self.pending)
        take = len(table) if force else self.group_rows
        self.writer.write_table(table.slice(0, take), row_group_size=max(take, 1))
        rest = table.slice(take)
        self.pending, self.pending_rows = ([rest] if len(rest) else []), len(rest)

    def close(self, metadata: dict[bytes, bytes] | None = None) -> Path:
        self._flush(force=True)
        if metadata:
            self.writer.add_key_value_metadata(metadata)
        self.writer.close()
        self.tmp.replace(self.path)
        return self.path


SCHEMAS = {
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


def _auc_from_histograms(pos: np.ndarray, neg: np.ndarray) -> float:
    """ROC AUC from per-bin counts of positives and negatives (ties within a bin count half)."""
    n_pos, n_neg = int(pos.sum()), int(neg.sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    neg_below = np.cumsum(neg) - neg
    return float((pos * neg_below).sum() + 0.5 * (pos * neg).sum()) / (n_pos * n_neg)


def generate(rows: int, out_dir: str | Path, seed: int = 0, row_group_rows: int = ROW_GROUP_ROWS,
             progress: bool | None = False, plant: dict[str, float] | None = None) -> dict[str, Path]:
    """Write ``impressions``, ``users``, ``ads`` and ``basic`` parquet files to ``out_dir``.

    Users, ads, impressions and basic features are drawn in blocks of ``BLOCK_ROWS`` rows, each
    from its own seed, and written row group by row group: memory holds a block and the
    users' and ads' ids and numeric attributes (about 60 bytes per user or ad, never their
    text), whatever ``rows``.  Both files are in ``instance_id``
    order, and each basic row group covers the same impressions as the impressions' row
    group of the same number.  The output is deterministic for ``(rows, seed)`` and does not
    depend on ``row_group_rows``.

    Args:
        rows: impressions to write (at least 100).
        out_dir: the folder (created if needed).
        seed: the seed.
        row_group_rows: rows per parquet row group (one dask partition each).
        progress: show a progress bar over the rows written, users' and ads' included (None:
            tqdm's automatic choice: on a terminal or in a notebook).
        plant: extra impression columns with a known effect, name -> ``beta``: each is an
            int16 level in ``[0, 16)`` drawn uniformly and independently of everything else,
            and moves the hidden logit by ``beta * z`` (``z`` = :data:`PLANT_Z`, evenly spaced
            in [-1.5, 1.5]); ``beta = 0`` is pure noise.  The other columns are those of the
            unplanted data except the clicks the planted terms move (the dense signal ``d0``
            sees the unplanted logit).  Each column's oracle AUC gain, the hidden model's
            AUC minus that AUC without the column's term, over every day, is stored in the
            metadata (``read_metadata(d)["plant"][name]["oracle_auc_gain"]``).

    Example:
        >>> import tempfile, pandas as pd
        >>> p = generate(1000, tempfile.mkdtemp(), seed=1)
        >>> pd.read_parquet(p["impressions"]).shape[0]
        1000
    """
    if rows < 100:
        raise DataGenError(f"rows must be at least 100, got {rows}")
    if row_group_rows < 1:
        raise DataGenError(f"row_group_rows must be at least 1, got {row_group_rows}")
    plant = check_plant(plant)
    from fbrapids.ui.autobar import tqdm

    rng = np.random.default_rng(seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dic = _dictionaries(rng, rows)
    paths: dict[str, Path] = {}
    dims = (("users", len(dic.user_ids), _user_block), ("ads", len(dic.ad_ids), _ad_block))
    # one bar over every row written: the users' and ads' rows first, then the impressions'
    bar = tqdm(total=sum(count for _, count, _ in dims) + rows, unit="rows", unit_scale=True, desc="gen",
               disable=None if progress is None else not progress)
    with bar:
        for name, count, make in dims:
            bar.set_postfix_str(name)
            writer = _RowGroupWriter(out / f"{name}.parquet", SCHEMAS[name], row_group_rows)
            for block, start in enumerate(range(0, count, BLOCK_ROWS)):
                stop = min(count, start + BLOCK_ROWS)
                writer.add(make(dic, seed, block, start, stop))
                bar.update(stop - start)
            paths[name] = writer.close()

        imp_schema = SCHEMAS["impressions"]
        for name in plant:
            imp_schema = imp_schema.append(pa.field(name, pa.int16()))
        imp_writer = _RowGroupWriter(out / "impressions.parquet", imp_schema, row_group_rows)
        basic_writer = _RowGroupWriter(out / "basic.parquet", SCHEMAS["basic"], 2**62)  # groups cut below
        pos = np.zeros(AUC_BINS, dtype=np.int64)
        neg = np.zeros(AUC_BINS, dtype=np.int64)
        without = {name: (np.zeros(AUC_BINS, dtype=np.int64), np.zeros(AUC_BINS, dtype=np.int64)) for name in plant}
        clicks = 0
        bar.set_postfix_str("impressions")
        for block, start in enumerate(range(0, rows, BLOCK_ROWS)):
            stop = min(rows, start + BLOCK_ROWS)
            impressions, basic, click, prob, probs_without = _impression_block(dic, seed, block, start, stop, rows,
                                                                               plant)
            imp_writer.add(impressions)
            # a basic row group ends where an impressions row group ends
            ends = np.arange((start // row_group_rows + 1) * row_group_rows, stop + 1, row_group_rows)
            basic_writer.add(basic, ends=np.searchsorted(basic["instance_id"].to_numpy(), ends * 7 + 1_000_003).tolist())
            bins = np.minimum((prob * AUC_BINS).astype(np.int64), AUC_BINS - 1)
            pos += np.bincount(bins[click == 1], minlength=AUC_BINS)
            neg += np.bincount(bins[click == 0], minlength=AUC_BINS)
            for name, p_without in probs_without.items():
                b = np.minimum((p_without * AUC_BINS).astype(np.int64), AUC_BINS - 1)
                without[name][0][:] += np.bincount(b[click == 1], minlength=AUC_BINS)
                without[name][1][:] += np.bincount(b[click == 0], minlength=AUC_BINS)
            clicks += int(click.sum())
            bar.update(stop - start)
    oracle_auc = _auc_from_histograms(pos, neg)
    meta: dict[str, object] = {"rows": rows, "seed": seed, "oracle_auc": round(oracle_auc, 4), "ctr": round(clicks / rows, 4),
            "data_version": DATA_VERSION}
    if plant:
        meta["plant"] = {name: {"beta": beta, "levels": PLANT_LEVELS,
                                "oracle_auc_gain": round(oracle_auc - _auc_from_histograms(*without[name]), 5)}
                         for name, beta in plant.items()}
    paths["impressions"] = imp_writer.close({METADATA_KEY: json.dumps(meta).encode()})
    paths["basic"] = basic_writer.close()
    paths = {name: paths[name] for name in ("impressions", "users", "ads", "basic")}
    log.info("generated %d impressions into %s (oracle AUC %.4f, CTR %.4f)", rows, out, oracle_auc, meta["ctr"])
    return paths


def hidden_probabilities(rows: int, seed: int = 0, plant: dict[str, float] | None = None) -> pd.DataFrame:
    """The hidden model's click probability of every impression :func:`generate` writes for
    ``(rows, seed, plant)``, drawn again (the same draws, nothing written): ``instance_id``,
    ``ts``, ``click`` and ``prob``.  What the oracle predicts, e.g. its calibration on a day.

    Example:
        >>> import tempfile, pandas as pd
        >>> d = tempfile.mkdtemp(); _ = generate(1000, d, seed=1)
        >>> h = hidden_probabilities(1000, seed=1)
        >>> bool((h["click"].to_numpy() == pd.read_parquet(f"{d}/impressions.parquet")["click"].to_numpy()).all())
        True
    """
    if rows < 100:
        raise DataGenError(f"rows must be at least 100, got {rows}")
    plant = check_plant(plant)
    dic = _dictionaries(np.random.default_rng(seed), rows)
    parts = []
    for block, start in enumerate(range(0, rows, BLOCK_ROWS)):
        imp, _, click, prob, _ = _impression_block(dic, seed, block, start, min(rows, start + BLOCK_ROWS), rows, plant)
        parts.append(pd.DataFrame({"instance_id": imp["instance_id"].to_numpy(), "ts": imp["ts"].to_numpy(),
                                   "click": click, "prob": prob}))
    return pd.concat(parts, ignore_index=True)


def read_metadata(data_dir: str | Path) -> dict:
    """The generator's metadata (rows, seed, oracle_auc, ctr, data_version) stored in impressions.parquet.

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp(); _ = generate(500, d)
        >>> read_metadata(d)["rows"]
        500
    """
    from fbrapids.views.parquet import parquet_file  # the footer checked before pyarrow reads it

    raw = (parquet_file(str(Path(data_dir) / "impressions.parquet")).metadata.metadata or {}).get(METADATA_KEY)
    return json.loads(raw) if raw else {}


#: the generator's version, recorded in a demo folder's marker: a folder of another version
#: is regenerated (it is :data:`DATA_VERSION`: bump that whenever ``generate``'s output changes)
GENERATOR_VERSION = DATA_VERSION


def _lock_path(out: Path) -> Path:
    """The lock of a data folder: a file beside it (the folder itself is replaced whole)."""
    return out.parent / f".{out.name}.lock"


@contextlib.contextmanager
def _folder_lock(out: Path, mode: int) -> Iterator[int | None]:
    """``fcntl.flock`` (``LOCK_EX`` / ``LOCK_SH``) on the folder's lock file, waiting (logged) for
    another process that holds it; the kernel drops it when the holder dies.  None (no
    lock) where the lock file cannot be made: a read-only place, where nothing can
    regenerate the data either (a generation then fails naming the path)."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(_lock_path(out), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        log.debug("no lock for %s (%s): read only", out, exc.strerror)
        yield None
        return
    try:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            log.warning("waiting for %s: another process is generating or using the data there", out)
            fcntl.flock(fd, mode)
        yield fd
    finally:
        os.close(fd)


def _marker(rows: int, seed: int, files: dict[str, dict]) -> dict:
    return {"rows": rows, "seed": seed, "generator": GENERATOR_VERSION, "files": files}


def _file_pins(folder: Path) -> dict[str, dict]:
    """Each data file's size and footer digest (its footer checked: ViewError when corrupt)."""
    from fbrapids.views.parquet_footer import check_footer

    out = {}
    for name in FILES:
        path = folder / f"{name}.parquet"
        out[name] = {"size": path.stat().st_size, "footer_sha256": check_footer(path).digest}
    return out


def _complete_for(out: Path, rows: int, seed: int) -> str | None:
    """None when ``out`` holds the complete demo data for ``rows`` / ``seed``, as its marker
    recorded it; else why not (the folder is then regenerated)."""
    try:
        mark = json.loads((out / DEMO_MARK).read_text())
    except (OSError, ValueError) as exc:
        return f"its marker cannot be read ({exc})"
    if not isinstance(mark, dict) or "files" not in mark:
        return "its marker predates completion markers (it may hold files of two generations)"
    want = _marker(rows, seed, mark["files"])
    for key in ("rows", "seed", "generator"):
        if mark.get(key) != want[key]:
            return f"it was generated for {key} {mark.get(key)}, not {want[key]}"
    try:
        pins = _file_pins(out)
    except (OSError, FbrapidsError) as exc:
        return f"a file cannot be read ({str(exc).splitlines()[0]})"
    if pins != mark["files"]:
        changed = sorted(n for n in FILES if pins.get(n) != mark["files"].get(n))
        return f"{', '.join(f + '.parquet' for f in changed)} differ from the files generated"
    return None


def _remove_debris(out: Path) -> None:
    """Temporary and replaced folders of earlier generations killed midway (under the lock)."""
    for p in out.parent.glob(f".{out.name}.tmp-*"):
        shutil.rmtree(p, ignore_errors=True)
    for p in out.parent.glob(f".{out.name}.old-*"):
        shutil.rmtree(p, ignore_errors=True)


def _generate_into_place(rows: int, out: Path, seed: int) -> None:
    """Generate into a private folder beside ``out``, marker last, then rename it into place
    (a folder being replaced is renamed aside first and removed after)."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    generate(rows, tmp, seed=seed)
    for name in FILES:  # the data durable before the marker that vouches for it
        fsync_path(tmp / f"{name}.parquet")
    write_atomic(tmp / DEMO_MARK, [json.dumps(_marker(rows, seed, _file_pins(tmp))).encode()])
    fsync_dir(tmp)
    old = None
    if out.exists():
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        os.replace(out, old)
    os.replace(tmp, out)
    fsync_dir(out.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _user_data(out: Path, rows: int, seed: int) -> None:
    """``out`` holds data the demo did not make: fine when it is the asked-for set and
    readable; else a :class:`~fbrapids.errors.DataDirError` saying what it holds."""
    have = all((out / f"{n}.parquet").exists() for n in FILES)
    meta: dict = {}
    if have:
        try:
            meta = read_metadata(out)
            if meta.get("rows") == rows and meta.get("seed") == seed:
                _file_pins(out)  # every footer readable, or the error naming the file
                return
        except FbrapidsError as exc:
            raise DataDirError(f"{out} holds data the demo did not make, and it cannot be read: {exc}") from None
        except (OSError, ValueError):
            meta = {}
    entries = sorted(p.name for p in out.iterdir())
    held = (f"generated data of {meta['rows']:,} rows, seed {meta['seed']}" if "rows" in meta and "seed" in meta
            else f"{len(entries)} entries ({', '.join(entries[:4])}{', ...' if len(entries) > 4 else ''})")
    hint = (f"pass --rows {meta['rows']} --seed {meta['seed']} to use it, " if "rows" in meta and "seed" in meta
            else "")
    raise DataDirError(f"{out} holds {held}, which the demo did not make; it only generates into an empty "
                       f"folder or one it made, and never overwrites other data: {hint}choose an empty "
                       f"--data-dir, or regenerate it yourself with `fbrapids gen --rows {rows} --seed {seed} "
                       f"--out {out}`")


def _usable(rows: int, out: Path, seed: int) -> bool:
    """Whether ``out`` can be used as it is: complete demo data for ``rows`` / ``seed``, or the
    asked-for data of a user (other user data is a DataDirError); False: (re)generate."""
    if (out / DEMO_MARK).is_file():
        why = _complete_for(out, rows, seed)
        if why is not None:
            log.warning("regenerating the demo data in %s: %s", out, why)
        return why is None
    if out.is_dir() and any(out.iterdir()):
        _user_data(out, rows, seed)
        return True
    return False


def _ensure_locked(rows: int, out: Path, seed: int) -> Path:
    _remove_debris(out)
    if _usable(rows, out, seed):
        return out
    if out.is_dir() and not (out / DEMO_MARK).exists():
        out.rmdir()  # an empty folder: replaced by the generated one
    _generate_into_place(rows, out, seed)
    return out


def ensure_dataset(rows: int, out_dir: str | Path, seed: int = 0) -> Path:
    """The default data for ``rows`` / ``seed`` in ``out_dir``: generated there only when the
    folder is empty (or absent) or holds data this function made (marked by a
    ``.fbrapids-demo-data`` file); a folder of other data is never written to.

    Generation is safe against concurrent runs and kills: under an exclusive ``flock`` on
    a lock file beside the folder, the data is generated into a private temporary folder,
    its marker written last (rows, seed, the generator's version and each file's size and
    footer digest), and the folder renamed into place.  A marked folder is used only when
    its marker matches the request and its files are the ones generated; else (a kill
    midway, a corrupt or replaced file, other rows or seed) it is regenerated.

    Other data that is already the asked-for set (``fbrapids gen --rows R --seed S`` made it)
    is used as it is, when readable.  Anything else is a
    :class:`~fbrapids.errors.DataDirError` saying what the folder holds and suggesting
    ``fbrapids gen``.

    Example:
        >>> import tempfile
        >>> d = ensure_dataset(300, tempfile.mkdtemp())
        >>> (d / "basic.parquet").exists(), json.loads((d / DEMO_MARK).read_text())["rows"]
        (True, 300)
    """
    out = Path(out_dir)
    with _folder_lock(out, fcntl.LOCK_EX):
        return _ensure_locked(rows, out, seed)


@contextlib.contextmanager
def using_dataset(rows: int, out_dir: str | Path, seed: int = 0) -> Iterator[Path]:
    """:func:`ensure_dataset`, then a shared lock on the folder while the block runs: another
    run may read it too, but none regenerates it under this one (it waits, logged).

    Example:
        >>> import tempfile
        >>> with using_dataset(300, tempfile.mkdtemp() + "/d") as d:
        ...     read_metadata(d)["rows"]
        300
    """
    out = Path(out_dir)
    with _folder_lock(out, fcntl.LOCK_SH) as fd:
        # readers share the lock; only a (re)generation takes it exclusively, and waits for them
        if not _usable(rows, out, seed):
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)
                fcntl.flock(fd, fcntl.LOCK_EX)
            _ensure_locked(rows, out, seed)
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_SH)
        yield out
