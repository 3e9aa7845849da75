"""Behaviour-history operators against brute-force references; no event at or after a
row's time ever enters its history or windows; same results with 1, 3 and 7 partitions."""

from __future__ import annotations

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import fbrapids  # noqa: F401
from fbrapids import ops


def make_log(n: int = 1500, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    user = pd.Series(rng.integers(0, 40, n)).astype("float64").where(rng.random(n) > 0.02)
    ts = 1_700_000_000 + rng.integers(0, 3 * 86400, n) // 600 * 600  # coarse: many equal times
    return pd.DataFrame({"rid": np.arange(n), "user": user, "item": rng.integers(0, 50, n), "ts": ts,
                         "click": (rng.random(n) < 0.3).astype(np.int64)})


def events_before(df: pd.DataFrame, i: int, window: int | None = None, clicks_only: bool = False) -> pd.DataFrame:
    row = df.iloc[i]
    if pd.isna(row["user"]):
        return df.iloc[:0]
    ev = df[(df["user"] == row["user"]) & (df["ts"] < row["ts"])]
    if window is not None:
        ev = ev[ev["ts"] >= row["ts"] - window]
    if clicks_only:
        ev = ev[ev["click"] == 1]
    return ev.sort_values(["ts", "item"], kind="mergesort")


FEATURES = {"hist": ops.history("user", "item", "ts", last_n=5),
            "hist_click": ops.history("user", "item", "ts", last_n=50, events="click"),
            "n1h": ops.window_count("user", "ts", "1h"), "n1d": ops.window_count("user", "ts", "1d"),
            "n7d_click": ops.window_count("user", "ts", "7d", events="click"),
            "ctr1d": ops.window_mean("user", "click", "ts", "1d"), "since": ops.time_since("user", "ts")}


@pytest.fixture(scope="module")
def log_and_out() -> tuple[pd.DataFrame, pd.DataFrame]:
    df = make_log()
    return df, df.fbx.extract(**FEATURES)


def test_history_and_windows_match_brute_force(log_and_out) -> None:
    df, out = log_and_out
    for i in range(len(df)):
        ev = events_before(df, i)
        assert out["hist"].iloc[i] == ev["item"].tolist()[-5:], i
        assert out["hist_click"].iloc[i] == events_before(df, i, clicks_only=True)["item"].tolist()[-50:], i
        assert out["n1h"].iloc[i] == len(events_before(df, i, 3600))
        assert out["n1d"].iloc[i] == len(events_before(df, i, 86400))
        assert out["n7d_click"].iloc[i] == len(events_before(df, i, 7 * 86400, clicks_only=True))
        d1 = events_before(df, i, 86400)
        want = d1["click"].sum() / len(d1) if len(d1) else np.nan
        got = out["ctr1d"].iloc[i]
        assert (np.isnan(want) and np.isnan(got)) or got == want, i
        since = out["since"].iloc[i]
        assert (since is pd.NA and not len(ev)) or since == df["ts"].iloc[i] - ev["ts"].max(), i


def test_no_event_at_or_after_the_rows_time_enters_history_or_windows() -> None:
    df = make_log(800, seed=5)
    out = df.fbx.extract(**FEATURES)
    # change everything at or after a cut: rows before it must be unchanged
    cut = int(df["ts"].quantile(0.5))
    future = df["ts"] >= cut
    rng = np.random.default_rng(9)
    changed = df.assign(item=np.where(future, rng.integers(100, 200, len(df)), df["item"]),
                        click=np.where(future, 1 - df["click"], df["click"]))
    again = changed.fbx.extract(**FEATURES)
    early = ~future
    for name in FEATURES:
        pd.testing.assert_series_equal(again[name][early], out[name][early], check_exact=True)
    # and a row's own or simultaneous events: items tagged by their row never show up
    tagged = df.assign(item=df["rid"])
    hist = tagged.fbx.extract(h=ops.history("user", "item", "ts", last_n=1000))["h"]
    ts = df.set_index("rid")["ts"]
    for i, h in enumerate(hist):
        assert all(ts[j] < df["ts"].iloc[i] for j in h)


@pytest.mark.parametrize("nparts", [1, 3, 7])
def test_history_on_dask_across_partitions(log_and_out, nparts: int) -> None:
    df, want = log_and_out
    # partitions cut across users and time: every key's events are spread over partitions
    shuffled = df.sample(frac=1.0, random_state=nparts).reset_index(drop=True)
    with dask.config.set(scheduler="sync"):
        got = dd.from_pandas(shuffled, npartitions=nparts).fbx.extract(**FEATURES).compute()
    assert len(got) == len(df)
    assert got["rid"].tolist() == shuffled["rid"].tolist()  # rows stay in their partitions and order
    got = got.sort_values("rid").reset_index(drop=True)
    for name in FEATURES:
        pd.testing.assert_series_equal(got[name], want[name], check_exact=True, check_dtype=False)


def test_history_feeds_a_shared_vocabulary_categorify() -> None:
    df = make_log(600)
    feats = {"cand": ops.categorify("item", vocab="item"),
             "hist_ids": ops.categorify(ops.history("user", "item", "ts", last_n=10), vocab="item")}
    train = df[df["ts"] < df["ts"].quantile(0.7)]
    fitted = train.fbx.fit(**feats)
    out = df.fbx.extract(fitted)
    raw = df.fbx.extract(h=ops.history("user", "item", "ts", last_n=10))["h"]
    ids = dict(zip(out["cand"], df["item"]))
    back = [[ids.get(i) for i in l] for l in out["hist_ids"]]
    assert back == [[x if x in set(df["item"][out["cand"] > 2]) else None for x in l] for l in raw]


def test_history_on_dask_reads_each_partition_once_and_filters_after() -> None:
    df = make_log(900)
    calls = {"n": 0}

    def counted(part: pd.DataFrame) -> pd.DataFrame:
        calls["n"] += 1
        return part.reset_index(drop=True)  # partition-local index: duplicate labels across partitions

    ddf = dd.from_pandas(df, npartitions=4).map_partitions(counted, meta=df.head(0))
    out = ddf.fbx.extract(h=ops.history("user", "item", "ts", last_n=3), n=ops.window_count("user", "ts", "1h"))
    cut = int(df["ts"].median())
    with dask.config.set(scheduler="sync"):
        got = out[out["ts"] < cut].compute()  # a mask over the result: no re-alignment by index
    assert calls["n"] == 4  # the upstream partitions ran once for the shuffle and the re-attach
    want = df.fbx.extract(h=ops.history("user", "item", "ts", last_n=3), n=ops.window_count("user", "ts", "1h"))
    want = want[want["ts"] < cut]
    assert got["rid"].tolist() == want["rid"].tolist()
    assert got["h"].tolist() == want["h"].tolist() and got["n"].tolist() == want["n"].tolist()
