"""The real Criteo sample through the pipeline with the DLRM paper's preprocessing."""

import math

import numpy as np
import pandas as pd
import torch

from fbrapids.datasets import criteo
from fbrapids.trainers.fit import evaluate, fit
from fbrapids.trainers.models import DLRM
from fbrapids.trainers.sparse import StoreConfig


def test_criteo_preprocessing_matches_the_dlrm_reference(shared_data):
    path = shared_data / "criteo_sample.txt"
    view = criteo.read_criteo(path)
    got = view.fbx.extract(**criteo.features())
    raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    for c in criteo.DENSE_IN:
        expect = [math.log1p(max(float(v), 0.0)) if v != "" else 0.0 for v in raw[c]]
        np.testing.assert_allclose(got[f"{c}_log"].to_numpy(np.float64), np.float32(expect), rtol=0, atol=0)
    for c in criteo.SPARSE_IN:
        expect = [int(v, 16) if v != "" else 0 for v in raw[c]]
        assert got[f"{c}_id"].dtype == np.uint64
        assert [int(x) for x in got[f"{c}_id"]] == expect, c


def test_criteo_sample_trains_dlrm_on_raw_64_bit_ids(shared_data, tmp_path):
    view = criteo.read_criteo(shared_data / "criteo_sample.txt", eager=False).repartition(npartitions=3)
    frame = view.fbx.extract(**criteo.features()).persist()
    batches = frame.fbx.stream(label=criteo.LABEL, dense=criteo.DENSE, sparse=criteo.SPARSE, batch_size=32, seed=0)
    torch.manual_seed(0)
    model = DLRM(len(criteo.DENSE), criteo.SPARSE, embedding_dim=8, bottom_mlp=[16], top_mlp=[16],
                 store=StoreConfig(cache_rows=1 << 10, host_rows=1 << 11, ssd_dir=str(tmp_path), lr=0.1))
    first = fit(model, batches, epochs=1, progress=False)
    later = fit(model, batches, epochs=10, progress=False)
    assert np.mean(later.losses[-7:]) < np.mean(first.losses) * 0.8
    metrics = evaluate(model, batches, progress=False)
    assert metrics["n"] == 200 and metrics["auc"] > 0.8  # it memorises the 200 rows it trained on
    stores = model.stores()
    assert sum(len(s) for s in stores.values()) > 26  # rows keyed by raw ids, created on first sight
