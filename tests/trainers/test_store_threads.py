"""The store's row loops split over torch's intra-op threads: trained rows, counters and
pooled outputs are the same bits at 1 and at 2 threads (batches large enough to split)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fbrapids.trainers.modules.embedding import TieredEmbeddingBagCollection
from fbrapids.trainers.sparse import StoreConfig


@pytest.mark.parametrize("optimizer", ["adagrad", "sgd"])
def test_one_and_two_threads_train_the_same_bits(optimizer: str) -> None:
    rng = np.random.default_rng(5)
    hot = np.minimum(rng.zipf(1.3, size=(12, 32768)), 60_000) - 1
    ranks = np.where(rng.random((12, 32768)) < 0.5, rng.integers(0, 60_000, size=(12, 32768)), hot)  # ~14k distinct
    keys = (rng.permutation(60_000).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)).view(np.int64)
    offsets = torch.arange(0, 32768, 8)
    w = torch.sin(torch.arange(4096 * 8, dtype=torch.float32)).reshape(4096, 8)
    cfg = StoreConfig(dim=8, cache_rows=1 << 16, optimizer=optimizer, device="cpu", seed=2)
    results = []
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            ebc = TieredEmbeddingBagCollection(["f"], cfg, prefix=f"t{threads}_")
            pooled_sum = []
            for batch in ranks:
                out = ebc.pooled_stack({"f": (torch.from_numpy(keys[batch]), offsets)})
                (out[:, 0] * w).sum().backward()
                ebc.apply_gradients()
                pooled_sum.append(out.detach().clone())
            store = ebc.stores["f"]
            ids, rows = store.state()
            stats = store.stats()
            results.append((ids, rows, torch.stack(pooled_sum),
                            {k: v for k, v in stats.items() if k.startswith("served") or k == "unique_lookups"}))
    finally:
        torch.set_num_threads(before)
    (ids1, rows1, out1, served1), (ids2, rows2, out2, served2) = results
    assert served1["unique_lookups"] >= 8192 * len(ranks)  # batches big enough for the split path (8192 rows)
    assert np.array_equal(ids1, ids2) and np.array_equal(rows1, rows2)
    assert torch.equal(out1, out2)
    assert served1 == served2
