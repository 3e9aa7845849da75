"""The trainer on the real samples in ../shared/data: Avazu ids above 2^63, Criteo's empty
cells and hex categoricals, Taobao's behaviour sequences into DIN."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from fbrapids.trainers import DIN, DLRM, StoreConfig, WideAndDeep, evaluate, fit, stream

LIST = pd.ArrowDtype(pa.list_(pa.int64()))


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _hex_ids(col: pd.Series) -> pd.Series:
    """Hex strings -> uint64 ids (empty cells -> 0, an id of their own)."""
    return pd.Series([int(x, 16) if isinstance(x, str) and x else 0 for x in col], dtype="uint64", index=col.index)


def test_avazu_ids_above_2_63_train_end_to_end(shared_data, tmp_path) -> None:
    df = pd.read_csv(shared_data / "avazu_sample.txt", dtype={"id": "uint64"})
    assert (df["id"] > np.uint64(2**63)).any()
    for c in ("site_id", "app_id", "device_ip", "device_model"):
        df[c] = _hex_ids(df[c])
    sparse = ["id", "site_id", "app_id", "device_ip", "device_model", "C14", "C17", "banner_pos"]
    model = WideAndDeep(1, sparse, embedding_dim=4, deep_mlp=[8],
                        store=StoreConfig(cache_rows=64, host_rows=32, ssd_dir=str(tmp_path)))
    batches = stream(df, label="click", dense=["C15"], sparse=sparse, batch_size=16)
    res = fit(model, batches, epochs=2, progress=False)
    assert res.steps == 2 * 7 and np.isfinite(res.losses).all()
    ids, rows = model.deep_emb.stores["id"].state()
    assert sorted(ids.tolist()) == sorted(df["id"].unique().tolist())  # raw uint64 keys, no modulo
    assert np.isfinite(rows).all()


def test_criteo_empty_cells_and_hex_categoricals(shared_data, tmp_path) -> None:
    df = pd.read_csv(shared_data / "criteo_sample.txt")
    dense = [f"I{i}" for i in range(1, 14)]
    sparse = [f"C{i}" for i in range(1, 27)]
    for c in sparse:
        df[c] = _hex_ids(df[c])
    n_empty = int(df[dense].isna().sum().sum())
    first = next(c for c in dense if df[c].isna().any())
    with pytest.raises(ValueError, match=rf"dense feature '{first}': {int(df[first].isna().sum())} NaN"):
        list(stream(df, label="label", dense=dense, sparse=sparse, batch_size=50))
    df[dense] = np.sign(df[dense]) * np.log1p(np.abs(df[dense]))  # negatives and floats like 260.0 stay valid
    s = stream(df, label="label", dense=dense, sparse=sparse, batch_size=50, nan="zero")
    model = DLRM(13, sparse, embedding_dim=4, bottom_mlp=[8], top_mlp=[8],
                 store=StoreConfig(cache_rows=256, host_rows=64, ssd_dir=str(tmp_path)))
    res = fit(model, s, epochs=2, progress=False)
    assert s.stats["nan_replaced"] == n_empty and n_empty > 500
    assert res.steps == 8 and np.isfinite(res.losses).all()
    m = evaluate(model, s, progress=False)
    assert m["n"] == 200 and np.isfinite(m["logloss"])
    _assert_metrics_match_oracle(model, s, m)


def _taobao(path) -> pd.DataFrame:
    df = pd.read_csv(path)
    seq = pa.array(df["click_sequence"].fillna(""), type=pa.string())
    parts = pc.split_pattern(seq, "^")
    parts = pa.ListArray.from_arrays(parts.offsets, pc.if_else(pc.equal(parts.flatten(), ""), None,
                                                                parts.flatten()))
    lists = pc.list_flatten(parts)
    keep = pc.is_valid(lists)
    lens = pc.list_value_length(parts).to_numpy(zero_copy_only=False)
    owner = np.repeat(np.arange(len(df)), lens)[keep.to_numpy(zero_copy_only=False)]
    vals = pc.filter(lists, keep).cast(pa.int64()).to_numpy()
    offsets = np.searchsorted(owner, np.arange(len(df) + 1)).astype(np.int32)
    df["click_sequence"] = pd.Series(pa.ListArray.from_arrays(pa.array(offsets), pa.array(vals)), dtype=LIST)
    df["price"] = np.log1p(df["price"])
    df["brand"] = df["brand"].fillna(-1).astype(np.int64)  # the real nulls: an id of their own
    return df


def test_taobao_behaviour_sequences_train_din(shared_data, tmp_path) -> None:
    train, test = _taobao(shared_data / "taobao_tiny_train.csv"), _taobao(shared_data / "taobao_tiny_test.csv")
    assert train["click_sequence"].list.len().gt(1).any() and train["click_sequence"].list.len().eq(0).any()
    sparse = ["adgroup_id", "userid", "cate_id", "brand", "customer"]
    model = DIN(1, sparse, {"click_sequence": "adgroup_id"}, embedding_dim=4, attention_mlp=[8], mlp=[16],
                store=StoreConfig(cache_rows=512, host_rows=128, ssd_dir=str(tmp_path)))
    kw = dict(label="clk", dense=["price"], sparse=sparse + ["click_sequence"], group="userid", batch_size=20)
    res = fit(model, stream(train, shuffle_buffer=100, seed=1, **kw), epochs=3, progress=False)
    assert res.steps == 15 and np.isfinite(res.losses).all()
    m = evaluate(model, stream(test, **kw), progress=False)
    assert m["n"] == 100 and np.isfinite(m["logloss"]) and m["calibration"] > 0
    _assert_metrics_match_oracle(model, stream(test, **kw), m)
    seq_ids = set(np.concatenate([np.asarray(x, dtype=np.int64) for x in train["click_sequence"]]).tolist())
    table_ids = set(model.emb.stores["adgroup_id"].state()[0].view(np.int64).tolist())
    assert seq_ids <= table_ids  # the sequence shares the candidate's table


def _assert_metrics_match_oracle(model, batches, m) -> None:
    """The evaluated AUC / logloss / calibration are scikit-learn's on the same predictions."""
    from sklearn.metrics import log_loss, roc_auc_score

    from fbrapids.trainers.fit import predict

    out = predict(model, batches, progress=False)
    y, p = out["label"], out["pred"]
    assert m["auc"] == pytest.approx(roc_auc_score(y, p), abs=1e-12)
    assert m["logloss"] == pytest.approx(log_loss(y, np.clip(p, 1e-15, 1 - 1e-15)), rel=1e-6)
    assert m["calibration"] == pytest.approx(p.astype(np.float64).mean() / y.astype(np.float64).mean(), rel=1e-9)

