"""AMS dedup: each unique image embedded once per batch gives the same embeddings and
gradients as embedding every reference (tolerance 1e-6), and the report counts it."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from fbrapids.ams import DICM, ImageEmbedder, ImageEmbeddingMLP, ImageVectorStore
from fbrapids.trainers.batch import Batch
from fbrapids.trainers.sparse import StoreConfig


def _refs(rng: np.random.Generator, n_images: int) -> dict[str, torch.Tensor]:
    zipf = lambda n: torch.from_numpy((rng.zipf(1.4, n) % n_images).astype(np.int64))  # noqa: E731
    return {"behaviour": zipf(700), "ad": zipf(64), "query_img": zipf(40)}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dedup_equal_embeddings_and_gradients(seed: int) -> None:
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    store = ImageVectorStore.from_ids(np.arange(300), dim=96, seed=seed)
    mlp = ImageEmbeddingMLP([96, 48, 24, 12])
    on = ImageEmbedder(store, mlp, dedup=True)
    off = ImageEmbedder(store, copy.deepcopy(mlp), dedup=False)
    refs = _refs(rng, 300)
    out_on, out_off = on(refs), off(refs)
    weights = {k: torch.from_numpy(rng.normal(size=tuple(v.shape)).astype(np.float32)) for k, v in out_on.items()}
    for k in refs:
        assert out_on[k].shape == (len(refs[k]), 12)
        torch.testing.assert_close(out_on[k], out_off[k], atol=1e-6, rtol=0)
    sum((out_on[k] * weights[k]).sum() for k in refs).backward()
    sum((out_off[k] * weights[k]).sum() for k in refs).backward()
    for (name, p_on), (_, p_off) in zip(on.model.named_parameters(), off.model.named_parameters()):
        assert p_on.grad is not None and p_on.grad.abs().sum() > 0, name
        scale = max(1.0, float(p_off.grad.abs().max()))
        torch.testing.assert_close(p_on.grad / scale, p_off.grad / scale, atol=1e-6, rtol=0, msg=name)

    r_on, r_off = on.last_report, off.last_report
    total = sum(len(v) for v in refs.values())
    unique = len(np.unique(np.concatenate([v.numpy() for v in refs.values()])))
    assert (r_on.references, r_on.unique_images) == (total, unique)
    assert (r_off.references, r_off.unique_images) == (total, unique)
    assert unique < total
    assert r_on.raw_bytes == unique * 96 * 4 and r_on.embedding_bytes == unique * 12 * 4
    assert r_off.raw_bytes == total * 96 * 4 == r_on.per_reference_raw_bytes
    assert r_on.communication_saving == pytest.approx(96 / 12)
    assert store.stats["unknown_references"] == 0


def test_paper_sizes_saving_is_341x() -> None:
    store = ImageVectorStore.from_ids(np.arange(20), dim=4096)
    emb = ImageEmbedder(store, ImageEmbeddingMLP())
    emb({"b": torch.tensor([1, 2, 3, 1, 1, 2])})
    rep = emb.last_report
    assert rep.unique_images == 3 and rep.references == 6
    assert rep.raw_bytes == 3 * 4096 * 4 and rep.embedding_bytes == 3 * 12 * 4
    assert round(rep.communication_saving, 1) == round(4096 / 12, 1)
    assert emb.totals.references == 6


def _dicm(store: ImageVectorStore, dedup: bool, aggregator: str) -> DICM:
    torch.manual_seed(7)
    emb = ImageEmbedder(store, ImageEmbeddingMLP([32, 16, 6]), dedup=dedup)
    return DICM(2, ["ad", "user"], emb, behaviour_images="hist_img", ad_image="ad_img", ad_id_features=["ad"],
                behaviour_ids="hist", tables={"hist": "ad"}, aggregator=aggregator, embedding_dim=4,
                mlp=[16, 8], store=StoreConfig(cache_rows=512, optimizer="sgd"))


def _batch(rng: np.random.Generator, rows: int = 48) -> Batch:
    lengths = rng.integers(0, 9, rows)
    hist = torch.from_numpy((rng.zipf(1.3, int(lengths.sum())) % 60).astype(np.int64))
    off = torch.from_numpy(np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64))
    ad = torch.from_numpy((rng.zipf(1.3, rows) % 60).astype(np.int64))
    user = torch.from_numpy(rng.integers(0, 20, rows))
    sp = {"ad": (ad, torch.arange(rows)), "user": (user, torch.arange(rows)), "hist": (hist, off),
          "hist_img": (hist, off), "ad_img": (ad, torch.arange(rows))}
    return Batch(torch.from_numpy(rng.normal(size=(rows, 2)).astype(np.float32)),
                 torch.from_numpy(rng.integers(0, 2, rows).astype(np.float32)), sp)


@pytest.mark.parametrize("aggregator", ["sum", "max", "attentive", "multi_query"])
def test_dicm_dedup_equal_logits_and_gradients(aggregator: str) -> None:
    store = ImageVectorStore.from_ids(np.arange(60), dim=32, seed=3)
    on, off = _dicm(store, True, aggregator), _dicm(store, False, aggregator)
    b = _batch(np.random.default_rng(11))
    lo_on, lo_off = on(b), off(b)
    torch.testing.assert_close(lo_on, lo_off, atol=1e-6, rtol=0)
    loss = torch.nn.BCEWithLogitsLoss()
    loss(lo_on, b.label).backward()
    loss(lo_off, b.label).backward()
    for (name, p_on), (_, p_off) in zip(on.named_parameters(), off.named_parameters()):
        assert p_on.grad is not None, name
        torch.testing.assert_close(p_on.grad, p_off.grad, atol=1e-6, rtol=0, msg=name)
    assert on.images.model.net[0].weight.grad.abs().sum() > 0  # gradients reach the sub-model
    assert on.image_report.unique_images < on.image_report.references
    assert on.image_report.raw_bytes < off.image_report.raw_bytes
