"""Models and streams kept in step: a model built from a workload reads what the stream
from the same workload carries; a mismatch, or a wrong argument type, is one error naming
the feature before any training."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest
import torch

from fbrapids.errors import InputTypeError, ModelStreamError
from fbrapids.trainers.fit import fit
from fbrapids.trainers.models import DIN, DLRM, DeepFM, LogisticRegression, WideAndDeep
from fbrapids.trainers.sparse import StoreConfig
from fbrapids.trainers.stream import stream
from fbrapids.workloads import SequenceFeature, Split, View, Workload

FRAME = pd.DataFrame({"click": [0, 1] * 8, "a": [1.0] * 16, "b": [2.0] * 16, "slot": [1, 2] * 8, "ad": [3, 4] * 8,
                      "hist": pd.Series([[3, 4]] * 16, dtype=pd.ArrowDtype(pa.list_(pa.int64())))})
STORE = StoreConfig(cache_rows=16)


def _fit(model, **lists):
    return fit(model, stream(FRAME, "click", batch_size=4, **lists), progress=False, calibrate=False)


@pytest.mark.parametrize("model, lists, match", [
    (lambda: DLRM(1, ["slot"], embedding_dim=2, store=STORE), dict(dense=["a", "b"], sparse=["slot"]),
     r"reads 1 dense value\(s\) per row, the stream carries 2 \(\['a', 'b'\]\)"),
    (lambda: WideAndDeep(2, ["slot"], embedding_dim=2, store=STORE), dict(dense=["a", "b"], sparse=["slot", "ad"]),
     "the stream carries sparse feature 'ad', which the model .WideAndDeep. has no table for"),
    (lambda: DeepFM(2, ["slot", "ad"], embedding_dim=2, store=STORE), dict(dense=["a", "b"], sparse=["slot"]),
     "reads sparse feature 'ad', which the stream does not carry"),
])
def test_a_model_stream_mismatch_is_one_error_naming_the_feature_before_training(model, lists, match):
    m = model()
    before = [p.detach().clone() for p in m.parameters()]
    with pytest.raises(ModelStreamError, match=match):
        _fit(m, **lists)
    assert all(torch.equal(a, b) for a, b in zip(before, m.parameters()))  # nothing trained


@pytest.mark.parametrize("call, match", [
    (lambda: stream(FRAME, "click", dense="slot"), r"dense must be a list of column names, got the str 'slot' "
                                                   r"\(write dense=\['slot'\]\)"),
    (lambda: stream(FRAME, "click", sparse=["slot", 3]), "sparse must hold column names .str., got 3"),
    (lambda: DLRM(2, "slot"), r"sparse_features must be a list of feature names, got 'slot' \(write \['slot'\]\)"),
    (lambda: LogisticRegression(["a", "b"], ["slot"]), "dense_dim must be the number of dense features"),
])
def test_wrong_argument_types_are_named(call, match):
    with pytest.raises(InputTypeError, match=match):
        call()


def test_models_built_from_a_workload_train_on_its_stream():
    w = Workload([View("log", "l.csv")], "click", Split("fraction", fraction=0.5), sparse=["slot", "ad"],
                 dense=["a", "b"], sequences={"hist": SequenceFeature("ad")})
    for cls, kw in ((DLRM, dict(bottom_mlp=[4], top_mlp=[4])), (WideAndDeep, dict(deep_mlp=[4])),
                    (DIN, dict(attention_mlp=(4,), mlp=(4,)))):
        m = cls.from_workload(w, embedding_dim=2, store=STORE, **kw)
        args = w.stream_args("din" if cls is DIN else "dlrm")
        r = fit(m, stream(FRAME, batch_size=4, **args), progress=False, calibrate=False)
        assert r.steps == 4 and m.dense_dim == 2
    assert DIN.from_workload(w, embedding_dim=2, store=STORE).sequences == {"hist": "ad"}
    with pytest.raises(InputTypeError, match="dense_dim comes from the workload"):
        DLRM.from_workload(w, dense_dim=3)
