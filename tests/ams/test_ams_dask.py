"""AMS on a real dask LocalCluster (2 worker processes): vectors stay on their owners, only
ids, embeddings, weights and gradients travel; results equal the single-process embedder."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

distributed = pytest.importorskip("distributed")

from fbrapids.ams import DICM, ImageEmbedder, ImageEmbeddingMLP, ImageVectorStore  # noqa: E402
from fbrapids.ams.distributed import DaskImageEmbedder, ShardedImageVectors, owner_of  # noqa: E402
from fbrapids.trainers.sparse import StoreConfig  # noqa: E402

from test_ams_dedup import _batch  # noqa: E402


@pytest.fixture(scope="module")
def client():
    torch.set_num_threads(1)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cl, \
            distributed.Client(cl) as c:
        yield c


def test_sharded_embeddings_and_gradients_equal_local(client) -> None:
    torch.manual_seed(0)
    ids = np.arange(400)
    store = ImageVectorStore.from_ids(ids, dim=48, seed=2)
    sharded = ShardedImageVectors.synthetic(client, ids, dim=48, seed=2)  # built on the workers
    sizes = sharded.sizes()
    assert sum(sizes) == 400 and min(sizes) > 100  # partitioned, not replicated
    assert sizes == [int((owner_of(ids, 2) == w).sum()) for w in range(2)]

    mlp = ImageEmbeddingMLP([48, 24, 6])
    local, remote = ImageEmbedder(store, mlp), DaskImageEmbedder(sharded, copy.deepcopy(mlp))
    rng = np.random.default_rng(0)
    refs = {"behaviour": torch.from_numpy((rng.zipf(1.3, 500) % 450).astype(np.int64)),  # some unknown ids
            "ad": torch.from_numpy(rng.integers(0, 400, 40))}
    out_l, out_r = local(refs), remote(refs)
    w = {k: torch.randn(v.shape) for k, v in out_l.items()}
    for k in refs:
        torch.testing.assert_close(out_r[k], out_l[k], atol=1e-6, rtol=0)
    sum((out_l[k] * w[k]).sum() for k in refs).backward()
    sum((out_r[k] * w[k]).sum() for k in refs).backward()
    for (n, p_l), (_, p_r) in zip(local.model.named_parameters(), remote.model.named_parameters()):
        torch.testing.assert_close(p_r.grad, p_l.grad, atol=1e-5, rtol=1e-5, msg=n)

    rep, t = remote.last_report, remote.last_traffic
    assert rep.unique_images == local.last_report.unique_images
    assert rep.unknown_references == local.last_report.unknown_references > 0
    assert t["raw_vector_bytes"] == 0
    assert t["embedding_bytes"] == rep.unique_images * 6 * 4 == t["embedding_grad_bytes"]
    assert t["ids_bytes"] == rep.unique_images * 8
    n_params = sum(p.numel() for p in mlp.parameters())
    assert t["param_grad_bytes"] == 2 * n_params * 4 and t["weight_bytes"] == 4 * n_params * 4  # 2 workers x 2 calls


def test_dicm_trains_the_same_with_sharded_vectors(client) -> None:
    ids = np.arange(60)
    store = ImageVectorStore.from_ids(ids, dim=32, seed=3)
    sharded = ShardedImageVectors.from_store(client, store)
    losses = {}
    for name in ("local", "dask"):
        torch.manual_seed(7)
        mlp = ImageEmbeddingMLP([32, 16, 6])
        emb = ImageEmbedder(store, mlp) if name == "local" else DaskImageEmbedder(sharded, mlp)
        m = DICM(2, ["ad", "user"], emb, behaviour_images="hist_img", ad_image="ad_img", ad_id_features=["ad"],
                 behaviour_ids="hist", tables={"hist": "ad"}, aggregator="multi_query", embedding_dim=4,
                 mlp=[16, 8], store=StoreConfig(cache_rows=512, optimizer="sgd"))
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        rng = np.random.default_rng(11)
        out = []
        for _ in range(3):
            b = _batch(rng)
            opt.zero_grad()
            loss = torch.nn.functional.binary_cross_entropy_with_logits(m(b), b.label)
            loss.backward()
            opt.step()
            m.apply_sparse_gradients()
            out.append(loss.item())
        losses[name] = out
    np.testing.assert_allclose(losses["dask"], losses["local"], atol=1e-5, rtol=0)
