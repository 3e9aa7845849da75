"""One device rule: explicit argument, then $FBRAPIDS_DEVICE, then cuda on the GPU backend,
then the CPU; stores follow their module; fit, predict and Scorer stay on the model's device."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import fbrapids  # noqa: F401
from fbrapids.errors import BackendUnavailableError
from fbrapids.serving import Scorer
from fbrapids.serving.example import (
    example_catalogue,
    example_model_kwargs,
    example_spec,
    request_records,
    training_frame,
)
from fbrapids.serving.scorer import SCORE_ATOL
from fbrapids.trainers import StoreConfig, WideAndDeep, fit
from fbrapids.trainers.device import module_device, place_model, resolve_device
from fbrapids.trainers.fit import predict
from fbrapids.trainers.modules.embedding import TieredEmbeddingBagCollection
from fbrapids.trainers.sparse import TieredEmbeddingStore

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_the_rule_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a machine with a GPU, as far as the rule sees
    monkeypatch.delenv("FBRAPIDS_DEVICE", raising=False)
    monkeypatch.setenv("FBRAPIDS_BACKEND", "gpu")
    assert resolve_device() == torch.device("cuda")  # the GPU backend trains on cuda
    monkeypatch.setenv("FBRAPIDS_BACKEND", "cpu")
    assert resolve_device() == torch.device("cpu")  # FBRAPIDS_BACKEND=cpu reaches the trainer
    monkeypatch.setenv("FBRAPIDS_DEVICE", "cuda:1")
    assert resolve_device() == torch.device("cuda:1")  # the environment beats the backend
    assert resolve_device("cpu") == torch.device("cpu")  # the argument beats everything
    cfg = StoreConfig(dim=2, cache_rows=4)
    monkeypatch.setenv("FBRAPIDS_DEVICE", "cpu")
    assert TieredEmbeddingStore(cfg).device == torch.device("cpu")


def test_asking_for_cuda_without_one_is_a_named_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("FBRAPIDS_DEVICE", "cuda")
    with pytest.raises(BackendUnavailableError, match=r"\$FBRAPIDS_DEVICE"):
        resolve_device()


def test_lookup_and_pooling_are_on_the_store_device(device: str) -> None:
    s = TieredEmbeddingStore(StoreConfig(dim=4, cache_rows=64, device=device))
    lk = s.lookup(np.array([1, 2, 2, 3], dtype=np.uint64))
    offsets = torch.tensor([0, 2], device=device)
    pooled = F.embedding_bag(lk.inverse, lk.rows, offsets, mode="sum")
    assert lk.rows.device.type == lk.inverse.device.type == pooled.device.type == device
    pooled.sum().backward()
    s.apply_gradients(lk)
    s.end_step()
    assert s.stats()["cache"]["misses"] == 3


def test_a_store_follows_the_module_that_owns_it(device: str) -> None:
    ebc = TieredEmbeddingBagCollection(["a", "b"], StoreConfig(dim=4, cache_rows=64))
    assert all(s.device.type == "cpu" for s in ebc.stores.values())  # built like the module's parameters
    ebc.to(device)
    assert {s.device.type for s in ebc.stores.values()} == {device} and ebc.device.type == device
    sparse = {"a": (torch.tensor([7, 8], device=device), torch.tensor([0, 1], device=device)),
              "b": (torch.tensor([1, 2, 3], device=device), torch.tensor([0, 2], device=device))}
    out = ebc(sparse)
    assert {o.device.type for o in out.values()} == {device}
    sum(o.sum() for o in out.values()).backward()
    ebc.apply_gradients()
    ebc.to("cpu")
    assert all(s.device.type == "cpu" for s in ebc.stores.values())
    assert len(ebc.stores["a"]) == 2  # the rows survived the moves


def test_place_model_keeps_a_model_already_on_an_accelerator() -> None:
    m = torch.nn.Linear(2, 1)
    assert place_model(m) == torch.device("cpu") == module_device(m)


def test_fit_predict_and_scorer_stay_on_one_device(device: str) -> None:
    spec = example_spec()
    users, ads = example_catalogue(60, 200, 0)
    frame = training_frame(users, ads, 400, 0).fbx.extract(**spec.features)
    torch.manual_seed(0)
    model = WideAndDeep(**example_model_kwargs())
    batches = frame.fbx.stream(label="click", dense=spec.dense, sparse=spec.sparse, batch_size=128)
    seen: set[str] = set()
    hook = lambda _m, args, out: seen.update({args[0].dense.device.type, out.device.type})  # noqa: E731
    handle = model.register_forward_hook(hook)
    fit(model, batches, progress=False, device=device)
    assert module_device(model).type == device
    assert {s.device.type for s in model.stores().values()} == {device}
    out = predict(model, batches, progress=False)  # stays where fit put it
    assert len(out["pred"]) == 400 and np.isfinite(out["pred"]).all()
    scorer = Scorer(model, spec)
    req, items = request_records(users, ads, 20, seed=1)
    scores = scorer.score(req, items)
    full = Scorer(model, spec, dedup=False).score(req, items)
    handle.remove()
    assert seen == {device}  # every forward of fit, predict and both scorers ran on that device
    np.testing.assert_allclose(scores, full, atol=SCORE_ATOL, rtol=0)
    assert module_device(model).type == device
