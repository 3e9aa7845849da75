"""The real Taobao sample drives DIN and DICM through its click_sequence.

The image vectors are SYNTHETIC: one deterministic vector per item id
(``fbrapids.ams.vectors.synthetic_vectors``), because the public sample has no images.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fbrapids.ams import DICM, ImageEmbedder, ImageEmbeddingMLP, read_taobao, taobao_image_store
from fbrapids.ams.taobao import ID_COLUMNS
from fbrapids.trainers import DIN, StoreConfig, evaluate, fit

SPARSE = [f"{c}_h" for c in ID_COLUMNS if c != "userid"] + ["userid_h"]


@pytest.fixture(scope="module")
def taobao(shared_data):
    torch.set_num_threads(1)
    return read_taobao(shared_data / "taobao_tiny_train.csv"), read_taobao(shared_data / "taobao_tiny_test.csv")


def _stream(df, extra=()):
    return df.fbx.stream(label="clk", dense=["log_price"], sparse=[*SPARSE, "hist_h", *extra], group="userid",
                         batch_size=25)


def test_read_taobao_click_sequence(taobao) -> None:
    train, _ = taobao
    raw = train["click_sequence"].iloc[0]
    assert raw == "170301^573514"
    assert list(train["hist_img"].iloc[0]) == [170301, 573514]
    # an item clicked and the same item shown as an ad hash to the same id
    ad_hash = dict(zip(train["ad_img"], train["adgroup_id_h"]))
    pairs = [(h, ad_hash[i]) for hs, ims in zip(train["hist_h"], train["hist_img"]) for h, i in zip(hs, ims)
             if i in ad_hash]
    assert len(pairs) >= 10 and all(h == a for h, a in pairs)
    lengths = train["hist_img"].list.len().to_numpy()
    nulls = train["click_sequence"].isna().to_numpy()
    assert nulls.sum() == 75 and (lengths[nulls] == 0).all() and (lengths[~nulls] > 0).all()


def test_din_and_dicm_run_on_taobao(taobao) -> None:
    train, test = taobao
    torch.manual_seed(0)
    din = DIN(1, SPARSE, {"hist_h": "adgroup_id_h"}, embedding_dim=8, mlp=[32], store=StoreConfig(cache_rows=4096))
    r_din = fit(din, _stream(train), epochs=3, progress=False)
    m_din = evaluate(din, _stream(test), progress=False)

    store = taobao_image_store([train, test], dim=64, seed=0)  # synthetic vectors, see module docstring
    emb = ImageEmbedder(store, ImageEmbeddingMLP([64, 32, 16, 12]))
    torch.manual_seed(0)
    dicm = DICM(1, SPARSE, emb, behaviour_images="hist_img", ad_image="ad_img",
                ad_id_features=["adgroup_id_h", "cate_id_h", "brand_h"], behaviour_ids="hist_h",
                tables={"hist_h": "adgroup_id_h"}, aggregator="multi_query", embedding_dim=8, mlp=[32],
                store=StoreConfig(cache_rows=4096))
    r_dicm = fit(dicm, _stream(train, ["hist_img", "ad_img"]), epochs=3, progress=False)
    m_dicm = evaluate(dicm, _stream(test, ["hist_img", "ad_img"]), progress=False)

    for r in (r_din, r_dicm):
        assert r.steps == 12 and all(math.isfinite(x) for x in r.losses)
        assert np.mean(r.losses[-4:]) < np.mean(r.losses[:4])  # it learns the training set
    for m in (m_din, m_dicm):
        assert m["n"] == 100 and math.isfinite(m["logloss"])
    # dedup: every batch embeds fewer unique images than it references
    tot = emb.totals
    refs_per_epoch = len(train) + int(train["hist_img"].list.len().sum())
    assert tot.references == 3 * refs_per_epoch + len(test) + int(test["hist_img"].list.len().sum())
    assert tot.unique_images < tot.references
    assert tot.unknown_references == 0
    print(f"\nTaobao tiny (synthetic image vectors): DIN {m_din}; DICM {m_dicm}; images {tot.as_dict()}")
    for net, m, extra in ((din, m_din, ()), (dicm, m_dicm, ["hist_img", "ad_img"])):
        # GAUC (3 test users have both classes) recomputed from the predictions, user by user
        from sklearn.metrics import roc_auc_score

        from fbrapids.trainers.fit import predict

        out = predict(net, _stream(test, extra), progress=False)
        num = den = 0.0
        for g in np.unique(out["group"]):
            sel = out["group"] == g
            if 0 < out["label"][sel].sum() < sel.sum():
                num += sel.sum() * roc_auc_score(out["label"][sel], out["pred"][sel])
                den += sel.sum()
        assert den > 0 and m["gauc"] == pytest.approx(num / den, abs=1e-9)

