"""Fitted operators against pandas references (groupby / sort based), exact equality on
generated data; fit-once semantics; the same results with 1, 3 and 7 dask partitions."""

from __future__ import annotations

import dask
import dask.dataframe as dd
import farmhash
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import fbrapids  # noqa: F401
from fbrapids import ops
from fbrapids.errors import FeatureError, NotFittedError
from fbrapids.features import Fitted, fit
from fbrapids.fitting.encoders import fold_of


def make_frame(n: int = 3000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    city = rng.choice([f"c{i}" for i in range(40)], n, p=np.r_[np.full(10, 0.06), np.full(30, 0.4 / 30)])
    city = pd.Series(city, dtype="str").where(rng.random(n) > 0.05)
    user = rng.integers(0, 120, n)
    cat = rng.integers(0, 15, n)
    click = (rng.random(n) < 0.1 + 0.3 * (cat % 3 == 0)).astype(np.int64)
    price = pd.Series(np.round(rng.gamma(2.0, 3.0, n) * 4) / 4).where(rng.random(n) > 0.1)
    return pd.DataFrame({"rid": np.arange(n), "city": city, "user": user, "cat": cat, "click": click,
                         "price": price, "ts": 1_700_000_000 + np.sort(rng.integers(0, 7 * 86400, n))})


@pytest.fixture(scope="module")
def frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    df = make_frame()
    return df.iloc[:2000].reset_index(drop=True), df.iloc[2000:].reset_index(drop=True)


# -- references ---------------------------------------------------------------------------------
def ref_vocab(values: pd.Series, min_freq: int = 1, max_size: int | None = None) -> dict:
    counts = values.dropna().value_counts()
    kept = sorted(((v, c) for v, c in counts.items() if c >= min_freq), key=lambda vc: (-vc[1], vc[0]))
    return {v: i for i, (v, _) in enumerate(kept[:max_size] if max_size else kept)}


def ref_categorify(values: pd.Series, vocab: dict, oov_buckets: int = 0) -> list[int]:
    width = max(oov_buckets, 1)
    out = []
    for v in values:
        if v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA:
            out.append(1)
        elif v in vocab:
            out.append(2 + width + vocab[v])
        else:
            out.append(2 + (farmhash.fingerprint64(str(v)) % width if oov_buckets else 0))
    return out


def test_categorify_matches_reference_and_never_refits(frames) -> None:
    train, test = frames
    for kw in ({}, {"min_freq": 30}, {"max_size": 12}, {"oov_buckets": 4, "min_freq": 20}):
        fitted = train.fbx.fit(c=ops.categorify("city", **kw))
        vocab = ref_vocab(train["city"], kw.get("min_freq", 1), kw.get("max_size"))
        got = test.fbx.extract(fitted)["c"].tolist()
        assert got == ref_categorify(test["city"], vocab, kw.get("oov_buckets", 0)), kw
        # the same ids on the training frame: nothing was refitted on test
        assert train.fbx.extract(fitted)["c"].tolist() == ref_categorify(train["city"], vocab, kw.get("oov_buckets", 0))


def test_unfitted_categorify_on_an_eval_frame_is_an_error_not_a_refit(frames) -> None:
    _, test = frames
    with pytest.raises(NotFittedError, match=r"feature 'c': categorify\(city.*train\.fbx\.fit"):
        test.fbx.extract(c=ops.categorify("city"))
    with pytest.raises(NotFittedError, match="feature 'n'"):
        test.fbx.extract(n=ops.hash_bucket(ops.count_encode("user"), 10))
    # the explicit opt-in fits on the frame itself
    out = test.fbx.extract(c=ops.categorify("city"), allow_unfitted=True)
    assert out["c"].tolist() == ref_categorify(test["city"], ref_vocab(test["city"]))


def test_categorify_lists_and_a_shared_vocabulary(frames) -> None:
    train, test = frames
    lists = pa.array([[int(c), int(c) + 1] if i % 7 else None for i, c in enumerate(train["cat"])], pa.list_(pa.int64()))
    tr = train.assign(hist=pd.Series(pd.arrays.ArrowExtensionArray(lists)))
    te = test.assign(hist=pd.Series(pd.arrays.ArrowExtensionArray(pa.array(
        [[int(c), 99] for c in test["cat"]], pa.list_(pa.int64())))))
    feats = {"cand": ops.categorify("cat", vocab="cat"), "hist_ids": ops.categorify("hist", vocab="cat")}
    fitted = tr.fbx.fit(**feats)
    assert len(fitted.states) == 1  # one vocabulary for both columns
    all_values = pd.concat([tr["cat"], pd.Series([v for l in tr["hist"].dropna() for v in l])], ignore_index=True)
    vocab = ref_vocab(all_values)
    out = te.fbx.extract(fitted)
    assert out["cand"].tolist() == ref_categorify(te["cat"], vocab)
    assert out["hist_ids"].tolist() == [ref_categorify(pd.Series(l), vocab) for l in te["hist"]]
    assert out["hist_ids"].iloc[0][0] == out["cand"].iloc[0]  # history ids equal candidate ids
    null_row = tr.fbx.extract(fitted)["hist_ids"]
    assert null_row.isna().sum() == tr["hist"].isna().sum()


def test_count_encode_matches_groupby(frames) -> None:
    train, test = frames
    fitted = train.fbx.fit(n1=ops.count_encode("user"), n2=ops.count_encode("user", "cat"))
    out = test.fbx.extract(fitted)
    ref1 = test["user"].map(train.groupby("user").size()).fillna(0).astype(int)
    ref2 = test.merge(train.groupby(["user", "cat"]).size().rename("n").reset_index(), on=["user", "cat"],
                      how="left")["n"].fillna(0).astype(int)
    assert out["n1"].tolist() == ref1.tolist()
    assert out["n2"].tolist() == ref2.tolist()


def ref_target(train: pd.DataFrame, rows: pd.DataFrame, keys: list[str], s: float) -> np.ndarray:
    prior = train["click"].mean()
    g = train.groupby(keys)["click"].agg(["sum", "count"]).reset_index()
    m = rows[keys].merge(g, on=keys, how="left").fillna({"sum": 0, "count": 0})
    return ((m["sum"] + s * prior) / (m["count"] + s)).to_numpy()


def test_target_encode_frozen_and_out_of_fold_match_references(frames) -> None:
    train, test = frames
    te = ops.target_encode("user", "cat", label="click", smoothing=10, folds=4, seed=3, fold_by="rid")
    fitted = train.fbx.fit(te=te)
    np.testing.assert_array_equal(test.fbx.extract(fitted)["te"].to_numpy(),
                                  ref_target(train, test, ["user", "cat"], 10.0))
    # out of fold on the training frame: each row from the other folds only
    got = train.fbx.extract(fitted, training=True)["te"].to_numpy()
    fold = fold_of(pd.Series([farmhash.fingerprint64(str(r)) for r in train["rid"]], dtype="uint64"), len(train), 4, 3)
    want = np.empty(len(train))
    for f in range(4):
        rows = fold == f
        want[rows] = ref_target(train[~rows], train[rows], ["user", "cat"], 10.0)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)
    # extracting the fitted frame with frozen statistics would leak: refused
    with pytest.raises(FeatureError, match="training=True"):
        train.fbx.extract(fitted)


def test_a_rows_own_label_never_enters_its_own_target_encoding(frames) -> None:
    train, _ = frames
    te = ops.target_encode("user", label="click", smoothing=5, fold_by="rid")
    base = train.fbx.extract(train.fbx.fit(te=te), training=True)["te"].to_numpy()
    for row in (0, 17, 1234):
        flipped = train.copy()
        flipped.loc[row, "click"] = 1 - flipped.loc[row, "click"]
        again = flipped.fbx.extract(flipped.fbx.fit(te=te), training=True)["te"].to_numpy()
        assert again[row] == base[row]
        assert not np.array_equal(again, base)  # the flip did reach other rows' encodings


def test_held_out_labels_never_enter_fitted_state(frames) -> None:
    train, test = frames
    feats = {"te": ops.target_encode("user", label="click", fold_by="rid"), "n": ops.count_encode("cat")}
    whole = pd.concat([train, test], ignore_index=True)
    is_train = whole["rid"] < 2000
    a = fit(whole[is_train], feats)
    flipped = whole.assign(click=np.where(is_train, whole["click"], 1 - whole["click"]))
    b = fit(flipped[is_train], feats)
    for sid in a.states:
        for k, v in a.states[sid].tables.items():
            np.testing.assert_array_equal(v, b.states[sid].tables[k])
    assert a.extract(test)["te"].tolist() == b.extract(flipped[~is_train])["te"].tolist()


def ref_quantile_bounds(x: pd.Series, n: int) -> np.ndarray:
    v = np.sort(x.dropna().to_numpy())
    bounds: list[float] = []
    for i in range(1, n):
        b = v[i * len(v) // n]
        if b > v[0] and (not bounds or b > bounds[-1]):
            bounds.append(b)
    return np.asarray(bounds)


def test_numeric_fitted_operators_match_pandas(frames) -> None:
    train, test = frames
    fitted = train.fbx.fit(q=ops.quantile_bucketize("price", 10), z=ops.normalize("price"), m=ops.minmax("price"),
                           fm=ops.fill_null_fitted("price", "mean"), fmed=ops.fill_null_fitted("price", "median"))
    out = test.fbx.extract(fitted)
    bounds = ref_quantile_bounds(train["price"], 10)
    x = test["price"].to_numpy()
    want_q = np.where(np.isnan(x), 0, 1 + np.searchsorted(bounds, x, side="right"))
    assert out["q"].tolist() == want_q.tolist()
    assert out["q"].dtype == np.int32
    p = train["price"]
    np.testing.assert_allclose(out["z"], (x - p.mean()) / p.std(ddof=0), rtol=1e-13)
    np.testing.assert_array_equal(out["m"], (x - p.min()) / (p.max() - p.min()))
    np.testing.assert_allclose(out["fm"], np.where(np.isnan(x), p.mean(), x), rtol=1e-15)
    np.testing.assert_array_equal(out["fmed"], np.where(np.isnan(x), p.median(), x))
    # a null bucket of its own
    assert (out["q"][test["price"].isna()] == 0).all() and (out["q"][test["price"].notna()] >= 1).all()


def test_fit_is_one_pass_over_a_dask_frame(frames) -> None:
    train, _ = frames
    calls = {"n": 0}

    def counted(part: pd.DataFrame) -> pd.DataFrame:
        calls["n"] += 1
        return part

    ddf = dd.from_pandas(train, npartitions=4).map_partitions(counted, meta=train.head(0))
    feats = {"c": ops.categorify("city"), "n": ops.count_encode("user"), "q": ops.quantile_bucketize("price", 5),
             "te": ops.target_encode("user", label="click", fold_by="rid"), "z": ops.normalize("price")}
    with dask.config.set(scheduler="sync"):
        fitted = fit(ddf, feats)
    assert calls["n"] == 4  # each partition read once for all five fitted operators
    assert fitted.info["rows"] == len(train)


@pytest.mark.parametrize("nparts", [1, 3, 7])
def test_same_results_with_1_3_7_partitions(frames, nparts: int) -> None:
    train, test = frames
    feats = {"c": ops.categorify("city", min_freq=5, oov_buckets=3), "n": ops.count_encode("user", "cat"),
             "te": ops.target_encode("user", label="click", fold_by="rid"), "q": ops.quantile_bucketize("price", 8),
             "z": ops.normalize("price"), "fmed": ops.fill_null_fitted("price", "median")}
    eager = fit(train, feats)
    want_test = eager.extract(test)
    want_train = eager.extract(train, training=True)
    with dask.config.set(scheduler="sync"):
        lazy = fit(dd.from_pandas(train, npartitions=nparts), feats)
        for sid, s in eager.states.items():
            for k, v in s.tables.items():
                np.testing.assert_array_equal(v, lazy.states[sid].tables[k])
            assert {k: v for k, v in s.meta.items()} == lazy.states[sid].meta
        got_test = lazy.extract(dd.from_pandas(test, npartitions=nparts)).compute()
        got_train = lazy.extract(dd.from_pandas(train, npartitions=nparts), training=True).compute()
    for name in feats:
        for got, want in ((got_test, want_test), (got_train, want_train)):
            pd.testing.assert_series_equal(got[name].reset_index(drop=True), want[name].reset_index(drop=True),
                                           check_exact=True, check_dtype=False)


def test_fitted_state_saves_as_data_and_loads_without_pickle(frames, tmp_path) -> None:
    train, test = frames
    feats = {"c": ops.categorify("city", oov_buckets=2), "te": ops.target_encode("user", "cat", label="click"),
             "q": ops.quantile_bucketize("price", 4), "h": ops.hash_bucket(ops.count_encode("cat"), 100)}
    fitted = fit(train, feats)
    fitted.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fitted.json", "fitted.npz"]
    with np.load(tmp_path / "fitted.npz", allow_pickle=False) as npz:
        assert all(npz[k].dtype != object for k in npz.files)
    again = Fitted.load(tmp_path)
    assert again.features == fitted.features
    pd.testing.assert_frame_equal(again.extract(test), fitted.extract(test))
    text = again.explain()
    assert "fitted on 2,000 rows" in text and "time [" in text and "categorify" in text


def test_explain_shows_sizes_rows_and_time_range(frames) -> None:
    train, _ = frames
    text = train.fbx.fit(c=ops.categorify("city"), n=ops.count_encode("user")).explain()
    lo, hi = int(train["ts"].min()), int(train["ts"].max())
    assert f"ts in [{lo}, {hi}]" in text
    assert "values x40" in text or "values x" in text
    assert "count_encode" in text and "bytes" in text


def test_frozen_features_travel_in_a_serving_spec_as_data(frames) -> None:
    import json

    from fbrapids.serving.spec import ServingSpec
    from fbrapids.serving.spec_json import spec_from_json, spec_to_json

    train, test = frames
    fitted = train.fbx.fit(c=ops.categorify("city", oov_buckets=2), n=ops.count_encode("user"),
                           te=ops.target_encode("user", "cat", label="click"), q=ops.quantile_bucketize("price", 4))
    feats = fitted.frozen()
    spec = ServingSpec(schema={"user": "int64", "cat": "int64", "city": "str", "price": "float64", "click": "int64"},
                       request_columns=["user", "city", "price", "click"], item_columns=["cat"], item_key="cat",
                       request_features={k: feats[k] for k in ("c", "n", "q")}, pair_features={"te": feats["te"]},
                       sparse=["c", "n", "q"], dense=["te"])
    text = json.dumps(spec_to_json(spec))  # plain JSON: no pickle anywhere
    back = spec_from_json(json.loads(text))
    got = test.fbx.extract(**back.features)
    want = test.fbx.extract(fitted)
    for k in ("c", "n", "q", "te"):
        pd.testing.assert_series_equal(got[k], want[k], check_exact=True)
