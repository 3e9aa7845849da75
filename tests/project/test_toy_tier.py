"""A host tier added in one file (``tests/_toy_tier.py``, zlib-compressed rows in a dict):
registered when imported, chosen by ``StoreConfig(host_tier=...)``, and used by real lookups
and updates whose rows are compared with a numpy table, and by a small ``fit`` that must
train the same bits as the built-in host tier (a tier must not change values)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fbrapids.errors import ArgumentError
from fbrapids.trainers import fit
from fbrapids.trainers.distributed import config_digest
from fbrapids.trainers.sparse import StoreConfig, TieredEmbeddingStore
from fbrapids.trainers.sparse.tier import Tier

import _toy_tier
from _trainer_helpers import batches, ctr_frame, same_bits, small_model, snapshot, tiered

pytestmark = pytest.mark.usefixtures("one_torch_thread")

N_IDS, DIM, LR, BAG = 90, 3, 0.25, 4


def _toy_config(tmp_path, **more) -> StoreConfig:
    """A cache and host tier far smaller than the ids: rows move through every tier."""
    return StoreConfig(dim=DIM, optimizer="sgd", lr=LR, cache_rows=12, host_rows=20, ssd_dir=str(tmp_path),
                       host_tier=_toy_tier.KIND, device="cpu", **more)


def _toy(store: TieredEmbeddingStore) -> _toy_tier.ZlibHostTier:
    host = store.tiers.host
    assert isinstance(host, _toy_tier.ZlibHostTier) and isinstance(host, Tier)
    return host


def test_the_config_names_a_registered_tier_only(tmp_path) -> None:
    assert _toy_config(tmp_path).host_tier == "zlib"
    with pytest.raises(ArgumentError, match="no host tier 'lz9' is registered"):
        StoreConfig(host_tier="lz9")


def test_lookups_and_updates_through_the_toy_tier_match_a_numpy_table(tmp_path) -> None:
    rng = np.random.default_rng(3)
    ids = np.arange(N_IDS, dtype=np.uint64) * np.uint64(7919)
    table = rng.normal(size=(N_IDS, DIM)).astype(np.float32)  # the reference: row i is ids[i]
    store = TieredEmbeddingStore(_toy_config(tmp_path), "t")
    store.assign(ids, table)
    for step in range(25):
        pick = rng.integers(0, N_IDS, 8)
        lk = store.lookup(ids[pick])
        np.testing.assert_allclose(lk.rows.detach().numpy()[lk.inverse.numpy()], table[pick], rtol=1e-5, atol=1e-6)
        weight = np.sin(np.arange(len(pick) // BAG * DIM, dtype=np.float32) + step).reshape(-1, DIM)
        pooled = F.embedding_bag(lk.inverse, lk.rows, torch.arange(0, len(pick), BAG), mode="sum")
        (pooled * torch.from_numpy(weight)).sum().backward()
        store.apply_gradients(lk)
        store.end_step()
        grad = np.zeros_like(table)
        np.add.at(grad, pick, weight[np.arange(len(pick)) // BAG])
        table -= np.float32(LR) * grad
    np.testing.assert_allclose(store.weights(ids), table, rtol=1e-5, atol=1e-6)
    host = _toy(store)
    assert host.rows_put > N_IDS and host.rows_taken > N_IDS  # the rows did go through the toy tier
    assert store.stats()["host"]["bytes_in"] == host.rows_put * store.config.width * 4
    assert len(host.packed) == host.slots.used > 0  # a slot freed is a row let go of


def test_a_fit_through_the_toy_tier_trains_the_same_bits_as_the_built_in_one(tmp_path) -> None:
    df = ctr_frame(rows=384, seed=2)
    trained = []
    for kind in ("ram", _toy_tier.KIND):
        model = small_model(tiered(tmp_path / kind).with_(host_tier=kind))
        fit(model, batches(df), optimizer=torch.optim.Adam(model.parameters(), lr=1e-3), progress=False)
        trained.append(snapshot(model))
        hosts = [s.tiers.host for s in model.stores().values()]
        assert all(type(h).kind == kind for h in hosts)
        assert sum(h.stats.bytes_in for h in hosts) > 0  # rows were evicted into the host tier
    assert same_bits(*trained) == []


def test_the_host_tier_is_layout_not_a_table_setting(tmp_path) -> None:
    """Ranks may differ in it, and a checkpoint's table digest does not depend on it."""
    ram = small_model(tiered(tmp_path / "a"))
    toy = small_model(tiered(tmp_path / "b").with_(host_tier=_toy_tier.KIND))
    assert config_digest(ram)["tables"] == config_digest(toy)["tables"]
    assert config_digest(ram)["tables"] != config_digest(small_model(tiered(tmp_path / "c").with_(lr=0.5)))["tables"]
