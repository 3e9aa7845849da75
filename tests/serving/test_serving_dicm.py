"""Serving DICM: behaviour images on the request side, the ad image on the item side;
export with its image store, parity with the training side, unknown image ids -> default."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch

import fbrapids  # noqa: F401
from fbrapids import ops
from fbrapids.ams import DICM, ImageEmbedder, ImageEmbeddingMLP, ImageVectorStore
from fbrapids.errors import ExportError
from fbrapids.serving import Scorer, ServingSpec, export_model, load_scorer
from fbrapids.serving.scorer import SCORE_ATOL
from fbrapids.trainers import StoreConfig, fit

LIST = pd.ArrowDtype(pa.list_(pa.int64()))


def _spec() -> ServingSpec:
    return ServingSpec(
        schema={"user_id": "int64", "hist": "list<int64>", "ad_id": "int64", "cate": "int64"},
        request_columns=["user_id", "hist"], item_columns=["ad_id", "cate"], item_key="ad_id",
        request_features={"user_h": ops.hash_bucket("user_id", 1 << 20), "hist_h": ops.hash_bucket("hist", 1 << 20)},
        item_features={"ad_h": ops.hash_bucket("ad_id", 1 << 20), "cate_h": ops.hash_bucket("cate", 1 << 20)},
        dense=[], sparse=["user_h", "ad_h", "cate_h", "hist_h", "hist", "ad_id"])


def _frame(rows: int, rng: np.random.Generator) -> pd.DataFrame:
    ad = rng.integers(0, 80, rows)
    hist = [rng.integers(0, 80, rng.integers(0, 7)).tolist() for _ in range(rows)]
    return pd.DataFrame({"user_id": rng.integers(0, 40, rows), "hist": pd.Series(hist, dtype=LIST), "ad_id": ad,
                         "cate": ad % 9, "click": [int(a in h) for a, h in zip(ad, hist)]})


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    torch.set_num_threads(1)
    spec = _spec()
    rng = np.random.default_rng(0)
    frame = _frame(600, rng).fbx.extract(**spec.features)
    store = ImageVectorStore.from_ids(np.arange(80), dim=24, seed=1)  # ids 80+ are unknown images
    torch.manual_seed(0)
    kwargs = dict(dense_dim=0, sparse_features=["user_h", "ad_h", "cate_h"],
                  images=ImageEmbedder(store, ImageEmbeddingMLP([24, 12, 4])), behaviour_images="hist",
                  ad_image="ad_id", ad_id_features=["ad_h", "cate_h"], behaviour_ids="hist_h",
                  tables={"hist_h": "ad_h"}, aggregator="multi_query", embedding_dim=4, mlp=[16],
                  store=StoreConfig(cache_rows=1024))
    model = DICM(**kwargs)
    fit(model, frame.fbx.stream(label="click", dense=[], sparse=spec.sparse, batch_size=64), epochs=2,
        progress=False)
    exp = export_model(tmp_path_factory.mktemp("dicm") / "exp", model, spec, kwargs)
    # an image sub-model the export cannot record (it rebuilds an ImageEmbeddingMLP from its sizes) is
    # named, not an AttributeError (mypy's index check found ``v.model.net[-1]`` on any nn.Module)
    other = dict(kwargs, images=ImageEmbedder(store, torch.nn.Linear(24, 4)))
    with pytest.raises(ExportError, match="the image sub-model is a Linear"):
        export_model(tmp_path_factory.mktemp("dicm") / "other", model, spec, other)
    return model.eval(), spec, exp


def _training_side(model, spec, request, items) -> np.ndarray:
    rows = pd.DataFrame([{**request, **it, "click": 0} for it in items])
    rows["hist"] = rows["hist"].astype(LIST)
    ext = rows.fbx.extract(**spec.features)
    b = next(iter(ext.fbx.stream(label="click", dense=[], sparse=spec.sparse, batch_size=len(rows))))
    with torch.no_grad():
        return model.predict(b).numpy()


def test_dicm_export_and_parity(trained) -> None:
    model, spec, exp = trained
    assert (exp / "images" / "vectors.npy").exists()  # the RAM store was written into the export
    served = load_scorer(exp)
    torch.testing.assert_close(served.model.images.model.net[0].weight, model.images.model.net[0].weight)
    request = {"user_id": 3, "hist": [5, 7, 7, 12]}
    items = [{"ad_id": a, "cate": a % 9} for a in (7, 1, 5, 7, 60, 33)]
    ref = _training_side(model, spec, request, items)
    np.testing.assert_allclose(served.score(request, items), ref, atol=SCORE_ATOL, rtol=0)
    np.testing.assert_allclose(Scorer(model, spec, dedup=False).score(request, items), ref, atol=SCORE_ATOL, rtol=0)
    st = served.stats
    # 5 unique candidates (ad 7 twice) x 4 behaviour images + 5 ad images; 6 distinct images embedded once
    assert st["image_references"] == 5 * 4 + 5 and st["unique_images_embedded"] == 6
    assert st["unknown_image_references"] == 0


def test_unknown_image_ids_read_the_default(trained) -> None:
    model, spec, exp = trained
    served = load_scorer(exp)
    request = {"user_id": 4, "hist": [5, 900, 901]}
    items = [{"ad_id": 7, "cate": 7}, {"ad_id": 999, "cate": 0}]
    p = served.score(request, items)
    assert np.isfinite(p).all()
    assert served.stats["unknown_image_references"] == 2 * 2 + 1  # 900, 901 per row, ad 999 once
    np.testing.assert_allclose(p, _training_side(model, spec, request, items), atol=SCORE_ATOL, rtol=0)
    # the default is documented: zeros, so an unknown id embeds like the zero vector
    emb = served.model.images
    torch.testing.assert_close(emb.embed_ids(np.array([12345])), emb.model(torch.zeros(1, 24)))


def test_list_column_validation(trained) -> None:
    _, spec, exp = trained
    served = load_scorer(exp)
    with pytest.raises(ValueError, match=r"request 0: column 'hist' must be a list of integers, got \[1, 'x'\]"):
        served.score({"user_id": 1, "hist": [1, "x"]}, [{"ad_id": 1, "cate": 1}])
    assert served.score({"user_id": 1, "hist": None}, [{"ad_id": 1, "cate": 1}]).shape == (1,)
