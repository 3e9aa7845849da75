"""Fixtures shared by the serving tests: a small example Wide&Deep with rows in every table,
and the training side's scores of (request, items) rows (the reference served scores are
held to)."""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd
import pytest
import torch

import fbrapids  # noqa: F401  (registers the .fbx accessor)
from fbrapids.serving.example import example_model_kwargs
from fbrapids.trainers import WideAndDeep
from fbrapids.trainers.device import module_device
from fbrapids.trainers.sparse import StoreConfig


@pytest.fixture(scope="module")
def model_and_kwargs():
    """``(model, kwargs)``: the example's Wide&Deep, untrained, with 50 rows in every table."""
    torch.manual_seed(0)
    kwargs = example_model_kwargs(embedding_dim=4, deep_mlp=(8,))
    kwargs["store"] = StoreConfig(cache_rows=1 << 10)
    model = WideAndDeep(**kwargs)
    for store in model.stores().values():  # a few rows in every table, moved off their zero init
        store.lookup(np.arange(50), requires_grad=False)
    return model.eval(), kwargs


def training_side_scores(model, spec, request: dict, items: list[dict]) -> np.ndarray:
    """What the training code computes: full rows, one extract, stream, ``model.predict``."""
    rows = pd.DataFrame([{**request, **it, "click": 0} for it in items])
    for c, t in spec.schema.items():
        if t == "str":
            rows[c] = rows[c].astype("str")
    ext = rows.fbx.extract(**spec.features)
    batch = next(iter(ext.fbx.stream(label="click", dense=spec.dense, sparse=spec.sparse, batch_size=len(rows))))
    with torch.no_grad():
        return model.eval().predict(batch.to(module_device(model))).cpu().numpy()


@pytest.fixture
def training_side() -> Callable[..., np.ndarray]:
    """:func:`training_side_scores`: ``training_side(model, spec, request, items)``."""
    return training_side_scores
