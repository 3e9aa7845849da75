"""Every model learns a known signal: held-out NE < 1 and AUC near the generator's oracle.

The data is drawn from a known logistic model (:func:`logistic_ctr`): the click
probability is ``sigmoid(bias + ad + category + user + hour + tokens + 0.8 * d0)``, with
long-tailed ads, users seen a handful of times, a bag of tokens, and fields that carry no
signal at all (an almost unique user x ad cross, hashed buckets).  Those are what a CTR
model meets in practice, and what made Wide&Deep and DeepFM diverge (NE 2-3) when their
first-order weights started uniform in [-1, 1) and row-wise Adagrad moved a rare id's row
by the full learning rate on its first impression.  The oracle's AUC and NE on
the held-out rows are computed from the true probabilities; every model, trained with its
defaults (one epoch at batch 128, the default dense and sparse optimizers), must reach
NE < 1 and an AUC within ``MARGIN`` of the oracle's, which is well above the AUC of the
dense feature alone.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from fbrapids.trainers import DIN, DLRM, DeepFM, StoreConfig, WideAndDeep, evaluate, fit, stream
from fbrapids.trainers.metrics import all_metrics, auc

from _trainer_helpers import LIST

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SPARSE = ["ad", "category", "user", "hour", "user_ad", "b0", "b1", "toks"]
DENSE = ["d0", "d1"]
TRAIN, TEST = 40_000, 10_000
#: how far below the oracle's held-out AUC (0.815) a model may end after one epoch of TRAIN
#: rows, at batch 128: the models reach oracle - 0.04 (Wide&Deep, DeepFM) to - 0.07 (DLRM);
#: ranking by the dense feature d0 alone gives oracle - 0.14 (0.671), an untrained model
#: 0.5; before that was fixed Wide&Deep reached 0.715 (NE 1.02), DeepFM 0.671 (NE 1.15)
MARGIN = 0.09


def logistic_ctr(rows: int, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    """A CTR frame and its true click probabilities (see the module docstring).

    Example:
        >>> df, p = logistic_ctr(1000)
        >>> len(df), bool(0.05 < p.mean() < 0.3), sorted(df.columns)[:3]
        (1000, True, ['ad', 'b0', 'b1'])
    """
    rng = np.random.default_rng(seed)
    n_ads, n_users, n_cats, n_toks = 2000, 1000, 30, 500
    ad_effect = rng.normal(0, 0.8, n_ads)
    ad_cat = rng.integers(0, n_cats, n_ads)
    cat_effect = rng.normal(0, 0.5, n_cats)
    user_effect = rng.normal(0, 0.5, n_users)
    tok_effect = rng.normal(0, 0.3, n_toks)
    ad = (rng.zipf(1.2, rows) - 1) % n_ads
    user = rng.integers(0, n_users, rows)
    hour = rng.integers(0, 24, rows)
    d0 = rng.normal(size=rows)
    lens = rng.integers(0, 9, rows)
    toks = [rng.integers(0, n_toks, k) for k in lens]
    logit = (-2.3 + ad_effect[ad] + cat_effect[ad_cat[ad]] + user_effect[user] + 0.4 * np.sin(hour / 24 * 2 * np.pi)
             + np.array([tok_effect[t].sum() for t in toks]) + 0.8 * d0)
    p = 1.0 / (1.0 + np.exp(-logit))
    click = (rng.random(rows) < p).astype(np.int8)
    df = pd.DataFrame({
        "click": click, "d0": d0.astype(np.float32), "d1": rng.normal(size=rows).astype(np.float32),
        "ad": ad.astype(np.int64), "category": ad_cat[ad].astype(np.int64), "user": user.astype(np.int64),
        "hour": hour.astype(np.int64), "user_ad": (user.astype(np.int64) << 20) | ad,  # no signal, ~unique
        "b0": rng.integers(0, 1000, rows), "b1": rng.integers(0, 1000, rows),  # no signal
        "toks": pd.Series([list(t.astype(np.int64)) for t in toks], dtype=LIST),
        "hist": pd.Series([list(((rng.zipf(1.2, 4) - 1) % n_ads).astype(np.int64)) for _ in range(rows)],
                          dtype=LIST),
    })
    return df, p


MODELS = {
    "dlrm": lambda s: DLRM(len(DENSE), SPARSE, embedding_dim=8, bottom_mlp=[32], top_mlp=[32], store=s),
    "wide_deep": lambda s: WideAndDeep(len(DENSE), SPARSE, embedding_dim=8, deep_mlp=[32, 16], store=s),
    "deepfm": lambda s: DeepFM(len(DENSE), SPARSE, embedding_dim=8, deep_mlp=[32, 16], store=s),
    "din": lambda s: DIN(len(DENSE), SPARSE, {"hist": "ad"}, embedding_dim=8, attention_mlp=[16], mlp=[32, 16],
                         store=s),
}


@pytest.fixture(scope="module")
def data() -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    df, p = logistic_ctr(TRAIN + TEST, seed=0)
    train, test = df.iloc[:TRAIN], df.iloc[TRAIN:]
    oracle = all_metrics(test["click"].to_numpy(), p[TRAIN:])
    oracle["dense_only_auc"] = auc(test["click"].to_numpy(), test["d0"].to_numpy())
    return train, test, oracle


def test_the_oracle_is_learnable(data) -> None:
    """The bound is meaningful: the oracle is far above chance and its NE well below 1."""
    _, test, oracle = data
    assert 0.75 < oracle["auc"] < 0.9 and oracle["ne"] < 0.85, oracle
    # the bound lies well above what the dense feature alone gives: meeting it takes the ids
    assert oracle["auc"] - MARGIN > oracle["dense_only_auc"] + 0.04, oracle
    assert 0.05 < test["click"].mean() < 0.3


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_approaches_the_oracle(name: str, data) -> None:
    train, test, oracle = data
    torch.manual_seed(0)
    model = MODELS[name](StoreConfig(cache_rows=1 << 15))  # the default lr, init and optimizer
    feats = SPARSE + (["hist"] if name == "din" else [])
    kw = dict(label="click", dense=DENSE, sparse=feats)
    fit(model, stream(train, batch_size=128, **kw), progress=False)
    m = evaluate(model, stream(test, batch_size=2048, **kw), progress=False)
    assert m["n"] == TEST
    assert m["ne"] < 1.0, (name, m, oracle)
    assert m["auc"] >= oracle["auc"] - MARGIN, (name, m, oracle)
    assert 0.6 < m["calibration"] < 1.5, (name, m)
