"""AMS building blocks: the vector store (RAM, disk, unknown ids), aggregators against
plain per-row references, partial warm-up, DICM training end to end."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch

import fbrapids  # noqa: F401
from fbrapids.ams import (
    DICM,
    ImageEmbedder,
    ImageEmbeddingMLP,
    ImageVectorStore,
    MultiQueryAttentivePooling,
    max_pool,
    partial_warm_up,
    sum_pool,
    synthetic_vectors,
)
from fbrapids.trainers import StoreConfig, fit
from fbrapids.trainers.modules.attention import AttentionPooling, segment_softmax

LIST = pd.ArrowDtype(pa.list_(pa.int64()))


# -- vector store ---------------------------------------------------------------------------
def test_store_ram_and_disk_agree_and_unknown_ids_read_default(tmp_path) -> None:
    ids = np.array([5, 2**63 + 7, 11, 3], dtype=np.uint64)
    ram = ImageVectorStore.from_ids(ids, dim=6, seed=4)
    disk = ImageVectorStore.from_ids(ids, dim=6, seed=4, path=tmp_path / "img", chunk_rows=3)
    assert isinstance(disk.vectors, np.memmap) and (tmp_path / "img" / "vectors.npy").stat().st_size > 6 * 4 * 4
    q = np.array([11, 999, 2**63 + 7, 5, 999], dtype=np.uint64)
    v_ram, unk = ram.get(q)
    v_disk, unk2 = disk.get(q.view(np.int64))  # int64 ids read bit for bit
    np.testing.assert_array_equal(v_ram, v_disk)
    assert unk.tolist() == [True if i == 999 else False for i in q] == unk2.tolist()
    assert not v_ram[1].any() and not v_ram[4].any()  # the documented default: zeros
    np.testing.assert_array_equal(v_ram[0], synthetic_vectors([11], 6, seed=4)[0])
    assert ram.stats["unknown_references"] == 2 and ram.stats["references"] == 5
    reopened = ImageVectorStore.open(tmp_path / "img", default=np.ones(6, dtype=np.float32))
    assert reopened.get([12345])[0].tolist() == [[1.0] * 6]
    assert reopened.stats["unknown_lookups"] == 1


def test_store_rejects_bad_input(tmp_path) -> None:
    with pytest.raises(ValueError, match="appears more than once"):
        ImageVectorStore(np.array([1, 1]), np.zeros((2, 3), dtype=np.float32))
    with pytest.raises(ValueError, match="2 ids but vectors of shape"):
        ImageVectorStore(np.array([1, 2]), np.zeros((3, 3), dtype=np.float32))
    with pytest.raises(TypeError, match="must be integers"):
        ImageVectorStore.from_ids([1], 3).get(np.array([1.5]))
    with pytest.raises(FileNotFoundError, match="not an image vector store"):
        ImageVectorStore.open(tmp_path)
    with pytest.raises(ValueError, match="takes 8-D vectors, the store holds 3-D"):
        ImageEmbedder(ImageVectorStore.from_ids([1], 3), ImageEmbeddingMLP([8, 2]))


def test_embedder_counts_unknown_references() -> None:
    emb = ImageEmbedder(ImageVectorStore.from_ids(range(5), dim=8), ImageEmbeddingMLP([8, 4]))
    out = emb({"b": torch.tensor([1, 77, 77, 2]), "ad": torch.tensor([77])})
    assert emb.last_report.unknown_references == 3 and emb.last_report.unique_images == 3
    # every unknown reference gets the sub-model's embedding of the default (zero) vector
    zero = emb.model(torch.zeros(1, 8))
    torch.testing.assert_close(out["b"][1:3], zero.expand(2, 4))


# -- aggregators ------------------------------------------------------------------------------
def _ragged(rng: np.random.Generator, rows: int, d: int) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    lengths = rng.integers(0, 5, rows).tolist()
    keys = torch.from_numpy(rng.normal(size=(sum(lengths), d)).astype(np.float64))
    seg = torch.repeat_interleave(torch.arange(rows), torch.tensor(lengths))
    return keys, seg, lengths


def test_sum_max_pool_match_per_row_reference() -> None:
    rng = np.random.default_rng(0)
    keys, seg, lengths = _ragged(rng, 30, 5)
    s, m = sum_pool(keys, seg, 30), max_pool(keys, seg, 30)
    start = 0
    for r, n in enumerate(lengths):
        block = keys[start : start + n]
        torch.testing.assert_close(s[r], block.sum(0) if n else torch.zeros(5, dtype=keys.dtype))
        torch.testing.assert_close(m[r], block.max(0).values if n else torch.zeros(5, dtype=keys.dtype))
        start += n


@pytest.mark.parametrize("normalize", ["none", "softmax"])
def test_attentive_pooling_matches_per_row_reference(normalize: str) -> None:
    torch.manual_seed(0)
    rng = np.random.default_rng(1)
    keys, seg, lengths = _ragged(rng, 20, 6)
    att = AttentionPooling(3, hidden=(8,), key_dim=6, normalize=normalize).double()
    q = torch.randn(20, 3, dtype=torch.float64)
    out = att(q, keys, seg)
    start = 0
    for r, n in enumerate(lengths):
        k = keys[start : start + n]
        qq = q[r].expand(n, 3)
        qp = att.proj(qq)
        w = att.unit(torch.cat([qq, k, qp - k, qp * k], dim=1)).squeeze(1)
        if normalize == "softmax":
            w = torch.softmax(w, 0)
        torch.testing.assert_close(out[r], (w.unsqueeze(1) * k).sum(0))
        start += n
    assert torch.allclose(segment_softmax(torch.zeros(4), torch.tensor([0, 0, 0, 1]), 2),
                          torch.tensor([1 / 3, 1 / 3, 1 / 3, 1.0]))


def test_multi_query_is_channels_concatenated() -> None:
    torch.manual_seed(0)
    keys, seg, _ = _ragged(np.random.default_rng(2), 10, 4)
    keys = keys.float()
    mq = MultiQueryAttentivePooling([4, 10], 4, hidden=(6,))
    q_img, q_id = torch.randn(10, 4), torch.randn(10, 10)
    out = mq([q_img, q_id], keys, seg)
    assert out.shape == (10, 8)
    torch.testing.assert_close(out[:, :4], mq.channels[0](q_img, keys, seg))
    torch.testing.assert_close(out[:, 4:], mq.channels[1](q_id, keys, seg))
    with pytest.raises(ValueError, match="2 channels, got 1"):
        mq([q_img], keys, seg)


# -- DICM training and partial warm-up ----------------------------------------------------------
def _frame(rows: int, seed: int) -> pd.DataFrame:
    """Clicks depend on whether the ad's image id appears among the behaviours' image ids."""
    rng = np.random.default_rng(seed)
    ad = rng.integers(0, 40, rows)
    hist = [rng.integers(0, 40, rng.integers(1, 6)).tolist() for _ in range(rows)]
    click = np.array([int(a in h) for a, h in zip(ad, hist)])
    return pd.DataFrame({"click": click, "d0": rng.normal(size=rows), "ad": ad, "user": rng.integers(0, 30, rows),
                         "hist": pd.Series(hist, dtype=LIST)})


def _model(store: ImageVectorStore, aggregator: str = "multi_query", seed: int = 0) -> DICM:
    torch.manual_seed(seed)
    emb = ImageEmbedder(store, ImageEmbeddingMLP([16, 8, 4]))
    return DICM(1, ["ad", "user"], emb, behaviour_images="hist", ad_image="ad", ad_id_features=["ad"],
                behaviour_ids="hist", tables={"hist": "ad"}, aggregator=aggregator, embedding_dim=4, mlp=[16],
                store=StoreConfig(cache_rows=256))


def test_dicm_trains_and_partial_warm_up_keeps_all_but_id_embeddings(tmp_path) -> None:
    torch.set_num_threads(1)
    store = ImageVectorStore.from_ids(range(40), dim=16)
    df = _frame(512, 0)
    batches = df.fbx.stream(label="click", dense=["d0"], sparse=["ad", "user", "hist"], batch_size=64)
    old = _model(store)
    res = fit(old, batches, epochs=4, progress=False, checkpoint_dir=tmp_path / "ckpt")
    assert np.mean(res.losses[-8:]) < np.mean(res.losses[:8])
    first_w = old.images.model.net[0].weight.detach().clone()
    ids = np.arange(40)
    trained_rows = old.emb.stores["ad"].weights(ids)

    new = _model(store, seed=123)
    untouched = _model(store, seed=123)
    rep = partial_warm_up(new, tmp_path / "ckpt")
    assert not rep.not_loaded and not rep.reinitialised
    assert sorted(rep.fresh_tables) == ["emb/ad", "emb/user"]
    assert set(rep.loaded) == set(new.state_dict())
    torch.testing.assert_close(new.images.model.net[0].weight, first_w)
    for k, v in old.state_dict().items():
        torch.testing.assert_close(new.state_dict()[k], v)
    b = next(iter(batches))
    new.eval(); untouched.eval()
    new(b); untouched(b)
    fresh = new.emb.stores["ad"].weights(ids)
    np.testing.assert_array_equal(fresh, untouched.emb.stores["ad"].weights(ids))  # re-initialised rows
    assert not np.allclose(fresh, trained_rows)
    with pytest.raises(ValueError, match="already holds"):
        partial_warm_up(new, old)
    # from a live model too, with an extra prefix left re-initialised
    other = _model(store, aggregator="multi_query", seed=5)
    rep2 = partial_warm_up(other, old, reinit=["mlp.0."])
    assert rep2.reinitialised == ["mlp.0.bias", "mlp.0.weight"]
    assert not torch.equal(other.mlp[0].weight, old.mlp[0].weight)
    torch.testing.assert_close(other.pool.channels[1].unit[0].weight, old.pool.channels[1].unit[0].weight)


def test_dicm_bad_configuration_and_batches() -> None:
    store = ImageVectorStore.from_ids(range(5), dim=16)
    emb = ImageEmbedder(store, ImageEmbeddingMLP([16, 4]))
    with pytest.raises(ValueError, match="needs ad_id_features"):
        DICM(0, ["ad"], emb, behaviour_images="h", ad_image="ad")
    with pytest.raises(ValueError, match="aggregator must be one of"):
        DICM(0, ["ad"], emb, behaviour_images="h", ad_image="ad", aggregator="mean")
    m = DICM(0, ["ad"], emb, behaviour_images="h", ad_image="h", aggregator="sum", embedding_dim=4, mlp=[4],
             store=StoreConfig(cache_rows=16))
    from fbrapids.trainers.batch import Batch

    sp = {"ad": (torch.tensor([1, 2]), torch.arange(2)), "h": (torch.tensor([1, 2, 3]), torch.tensor([0, 1]))}
    with pytest.raises(ValueError, match="one image id per row, got 3 ids for 2 rows"):
        m(Batch(torch.zeros(2, 0), torch.zeros(2), sp))
