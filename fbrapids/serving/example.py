"""A small, complete Wide&Deep serving example: spec, synthetic requests and items, a model.

Requests are users with a query and a browsing history (``user_id``, ``age``, ``gender``,
``query``, ``history``: 20 to 60 words, the heavy request-side input); items are
ads (``ad_id``, ``category``, ``price``, ``title``).  Features (all through
``df.fbx.extract``):

* request: ``user_h``, ``gender_h`` (hash buckets), ``query_tok_h``, ``history_tok_h``
  (hashed tokens); dense ``age``;
* item: ``ad_h``, ``cat_h`` (hash buckets), ``title_tok_h`` (hashed title tokens); dense
  ``log_price``;
* pair: ``user_cat_h`` = ``cross(user_id, category)``.

Clicks are drawn from a hidden logistic model of the user x category affinity, query /
title word overlap and price, so the model has something to learn.

Example:
    >>> users, ads = example_catalogue(n_users=50, n_ads=80, seed=0)
    >>> frame = training_frame(users, ads, rows=300, seed=0)
    >>> sorted(frame.columns)[:4], len(frame)
    (['ad_id', 'age', 'category', 'click'], 300)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

import numpy as np
import pandas as pd

from fbrapids.serving.spec import ServingSpec

if TYPE_CHECKING:  # (annotations only: the trainers are imported when a model is built)
    from fbrapids.trainers import WideAndDeep
    from fbrapids.trainers.sparse import StoreConfig

WORDS = [f"w{i}" for i in range(300)]
B_ID, B_TOK = 1 << 20, 1 << 18


def example_spec() -> ServingSpec:
    """The example's :class:`ServingSpec` (module docstring)."""
    from fbrapids import ops

    return ServingSpec(
        schema={"user_id": "int64", "age": "float64", "gender": "str", "query": "str", "history": "str",
                "ad_id": "int64", "category": "int64", "price": "float64", "title": "str"},
        request_columns=["user_id", "age", "gender", "query", "history"],
        item_columns=["ad_id", "category", "price", "title"],
        item_key="ad_id",
        request_features={"user_h": ops.hash_bucket("user_id", B_ID),
                          "gender_h": ops.hash_bucket(ops.fill_null("gender", ""), B_ID),
                          "query_tok_h": ops.split(ops.fill_null("query", ""), " ", buckets=B_TOK),
                          "history_tok_h": ops.split(ops.fill_null("history", ""), " ", buckets=B_TOK)},
        item_features={"ad_h": ops.hash_bucket("ad_id", B_ID), "cat_h": ops.hash_bucket("category", B_ID),
                       "title_tok_h": ops.split(ops.fill_null("title", ""), " ", buckets=B_TOK),
                       "log_price": ops.log1p(ops.fill_null("price", 0.0))},
        pair_features={"user_cat_h": ops.cross("user_id", "category", buckets=B_ID)},
        dense=["age", "log_price"],
        sparse=["user_h", "gender_h", "query_tok_h", "history_tok_h", "ad_h", "cat_h", "title_tok_h", "user_cat_h"],
    )


class ExampleModelKwargs(TypedDict):
    """The example model's constructor arguments (:func:`example_model_kwargs`)."""

    dense_dim: int
    sparse_features: list[str]
    embedding_dim: int
    deep_mlp: list[int]
    store: StoreConfig


def example_model_kwargs(embedding_dim: int = 8, deep_mlp: tuple[int, ...] = (32, 16)) -> ExampleModelKwargs:
    """Constructor arguments of the example's :class:`~fbrapids.trainers.models.WideAndDeep`."""
    from fbrapids.trainers.sparse import StoreConfig

    spec = example_spec()
    return {"dense_dim": len(spec.dense), "sparse_features": list(spec.sparse), "embedding_dim": embedding_dim,
            "deep_mlp": list(deep_mlp), "store": StoreConfig(cache_rows=1 << 16)}


def _text(rng: np.random.Generator, n: int, k: tuple[int, int]) -> list[str]:
    return [" ".join(rng.choice(WORDS, rng.integers(*k))) for _ in range(n)]


def example_catalogue(n_users: int = 500, n_ads: int = 5000, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(users, ads)`` frames: the request-side and item-side records."""
    rng = np.random.default_rng(seed)
    users = pd.DataFrame({"user_id": rng.choice(1 << 40, n_users, replace=False).astype(np.int64),
                          "age": rng.integers(16, 70, n_users).astype(np.float64),
                          "gender": pd.Series(rng.choice(["f", "m", "u"], n_users), dtype="str"),
                          "query": pd.Series(_text(rng, n_users, (0, 4)), dtype="str"),
                          "history": pd.Series(_text(rng, n_users, (20, 61)), dtype="str")})
    ads = pd.DataFrame({"ad_id": rng.choice(1 << 40, n_ads, replace=False).astype(np.int64),
                        "category": rng.integers(0, 50, n_ads).astype(np.int64),
                        "price": np.round(rng.lognormal(3, 1, n_ads), 2),
                        "title": pd.Series(_text(rng, n_ads, (2, 7)), dtype="str")})
    return users, ads


def training_frame(users: pd.DataFrame, ads: pd.DataFrame, rows: int, seed: int = 0) -> pd.DataFrame:
    """``rows`` logged (request, item) impressions with clicks from a hidden model."""
    rng = np.random.default_rng(seed + 1)
    u = users.iloc[rng.integers(0, len(users), rows)].reset_index(drop=True)
    a = ads.iloc[rng.integers(0, len(ads), rows)].reset_index(drop=True)
    affinity = ((u["user_id"].to_numpy() % 7) == (a["category"].to_numpy() % 7)) * 2.0
    overlap = np.array([len(set(q.split()) & set(t.split())) for q, t in zip(u["query"], a["title"])])
    logit = -1.5 + affinity + 1.5 * overlap - 0.2 * np.log1p(a["price"].to_numpy())
    click = (rng.random(rows) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    return pd.concat([u, a], axis=1).assign(click=click)


def request_records(users: pd.DataFrame, ads: pd.DataFrame, n_items: int, seed: int = 0) -> tuple[dict, list[dict]]:
    """One JSON-like request and ``n_items`` candidate item records drawn from the catalogue."""
    rng = np.random.default_rng(seed)
    req = users.iloc[int(rng.integers(0, len(users)))].to_dict()
    items = ads.iloc[rng.integers(0, len(ads), n_items)].to_dict("records")
    clean = lambda d: {k: (v.item() if hasattr(v, "item") else v) for k, v in d.items()}  # noqa: E731
    return clean(req), [clean(i) for i in items]


def train_example(rows: int = 4000, seed: int = 0, epochs: int = 1, batch_size: int = 256,
                  n_users: int = 500, n_ads: int = 5000) -> tuple[WideAndDeep, ServingSpec, ExampleModelKwargs, tuple]:
    """Train the example Wide&Deep; returns ``(model, spec, model_kwargs, (users, ads, frame))``."""
    import torch

    from fbrapids.trainers import WideAndDeep, fit

    spec = example_spec()
    users, ads = example_catalogue(n_users, n_ads, seed)
    frame = training_frame(users, ads, rows, seed).fbx.extract(**spec.features)
    kwargs = example_model_kwargs()
    torch.manual_seed(seed)
    model = WideAndDeep(**kwargs)
    batches = frame.fbx.stream(label="click", dense=spec.dense, sparse=spec.sparse, batch_size=batch_size)
    fit(model, batches, epochs=epochs, progress=False)
    return model.eval(), spec, kwargs, (users, ads, frame)
