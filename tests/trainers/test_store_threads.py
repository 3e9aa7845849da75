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


@pytest.mark.parametrize("mean", [False, True])
def test_bags_of_several_fields_split_over_two_threads_are_embedding_bags(mean: bool) -> None:
    """Pooling split over 2 threads (more than FBX_PAR_ROWS / 2 bags) cuts the bags, laid out
    field after field, mid-field (3 fields of 3,001 bags: the second thread starts inside the
    second field); every bag is still torch's ``embedding_bag`` of its field, to the bit, and
    written to its row of the ``[per, fields, dim]`` layout, as at 1 thread."""
    from torch.nn import functional as F

    from fbrapids.trainers.sparse.hashmap import bag_sum

    rng = np.random.default_rng(11)
    fields, per, dim, m = 3, 3001, 16, 5000
    lengths = rng.integers(0, 4, fields * per)
    idx = rng.integers(0, m, int(lengths.sum()))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    rows = rng.standard_normal((m, dim)).astype(np.float32)
    want = F.embedding_bag(torch.from_numpy(idx), torch.from_numpy(rows), torch.from_numpy(offsets[:-1]),
                           mode="mean" if mean else "sum").view(fields, per, dim).transpose(0, 1)
    before = torch.get_num_threads()
    try:
        got = {}
        for threads in (1, 2):
            torch.set_num_threads(threads)
            got[threads] = bag_sum(rows, idx, offsets, mean, fields).reshape(per, fields, dim)
    finally:
        torch.set_num_threads(before)
    assert np.array_equal(got[2], want.numpy())
    assert np.array_equal(got[1], got[2])
