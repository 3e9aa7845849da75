"""The tiered embedding store: raw 64-bit ids, tiers equal to an all-in-RAM table bit for
bit, admission gate, pinning, statistics, SSD files, save / load."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fbrapids.trainers.sparse import StoreConfig, TieredEmbeddingStore, as_uint64_ids
from fbrapids.trainers.sparse.hashmap import UInt64HashMap
from fbrapids.trainers.sparse.init import init_rows

ID_SPACE = 20000


pytestmark = pytest.mark.usefixtures("one_torch_thread")
SPREAD = np.uint64(0x9E3779B97F4A7C15)


def zipf_batches(n_batches: int, batch: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.zipf(1.1, batch) % ID_SPACE).astype(np.uint64) * SPREAD for _ in range(n_batches)]


def train(store: TieredEmbeddingStore, batches: list[np.ndarray], prefetch: bool = True) -> None:
    """A fixed per-batch loss so the gradients differ by position; the same order for every store."""
    for i, ids in enumerate(batches):
        lk = store.lookup(ids)
        if prefetch and i + 1 < len(batches):
            store.prefetch(batches[i + 1])
        dev = lk.rows.device  # tensors are built on the device of the lookup
        offsets = torch.arange(0, len(ids), 4, device=dev)
        pooled = F.embedding_bag(lk.inverse, lk.rows, offsets, mode="sum")
        w = torch.sin(torch.arange(pooled.numel(), dtype=torch.float32, device=dev) + i).reshape(pooled.shape)
        (pooled * w).sum().backward()
        store.apply_gradients(lk)
        store.end_step()


def rows_by_id(store: TieredEmbeddingStore) -> tuple[np.ndarray, np.ndarray]:
    ids, rows = store.state()
    order = np.argsort(ids)
    return ids[order], rows[order]


def test_hash_map_takes_every_64_bit_key() -> None:
    m = UInt64HashMap(4)
    keys = np.array([0, 1, 2**63, 2**64 - 1, 2**63 - 1], dtype=np.uint64)
    m.put(keys, np.arange(5))
    many = np.arange(10000, dtype=np.uint64) * SPREAD  # forces several regrowths
    m.put(many, np.arange(10000) + 10)
    assert m.get(keys).tolist() == [10, 1, 2, 3, 4]  # key 0 == many[0] was overwritten
    assert m.get(np.array([12345], dtype=np.uint64)).tolist() == [-1]
    assert len(m) == 10004
    k, v = m.items()
    assert dict(zip(k.tolist(), v.tolist()))[2**64 - 1] == 3
    # the distinct ids of a batch and their rows, as a dict would give them (the scratch table kept
    # between batches must forget the last batch's ids; 3n/4 distinct ids make it start again larger)
    for batch in (np.array([7, 7, 5, 2**64 - 1, 5], dtype=np.uint64), np.arange(100, dtype=np.uint64) * SPREAD,
                  np.arange(3000, dtype=np.uint64) * SPREAD + np.uint64(1)):
        uniq, inverse, counts, rows = m.unique_get(batch)
        first = list(dict.fromkeys(batch.tolist()))
        assert uniq.tolist() == first and (uniq[inverse] == batch).all()
        assert counts.tolist() == [batch.tolist().count(x) for x in first]
        assert rows.tolist() == m.get(uniq).tolist()


def test_hash_map_grown_with_buckets_made_ahead_is_a_dict() -> None:
    """A map past 65,536 buckets makes its next growth's buckets while it fills (from 3/8 of
    its buckets on); batches of puts and increments that take it through several such
    growths (300k keys: up to 1M buckets) leave it what a dict holds, and none of the keys
    never put."""
    rng = np.random.default_rng(3)
    m, want = UInt64HashMap(), {}
    keys = rng.permutation(np.arange(300_000, dtype=np.uint64)) * SPREAD + np.uint64(7)
    for k, batch in enumerate(np.array_split(keys, 61)):
        if k % 2:
            m.put(batch, np.arange(len(batch)) + k)
            want.update(zip(batch.tolist(), (np.arange(len(batch)) + k).tolist()))
        else:
            m.incr(batch)
            want.update((x, want.get(x, 0) + 1) for x in batch.tolist())
    assert len(m) == len(want) == 300_000
    assert m.get(keys).tolist() == [want[x] for x in keys.tolist()]
    assert (m.get(keys + np.uint64(1)) == -1).all()  # (each a key plus one: none was put)
    k, v = m.items()
    assert dict(zip(k.tolist(), v.tolist())) == want


def test_hash_map_and_row_map_failures_are_store_errors(tmp_path) -> None:
    """Out of memory and a file that cannot be mapped surface as the project's errors, naming what."""
    from fbrapids.errors import ArgumentError, StoreMemoryError, TierFileError
    from fbrapids.trainers.sparse.hashmap import RowMap

    with pytest.raises(StoreMemoryError, match="hash map of 1152921504606846976 entries"):
        UInt64HashMap(2**60)  # its size overflows 64 bits: refused, never a short allocation
    with pytest.raises(ArgumentError, match="free bucket"):
        UInt64HashMap().put(np.array([1], dtype=np.uint64), np.array([np.iinfo(np.int64).min]))
    path = tmp_path / "rows.f32"
    path.write_bytes(bytes(64))
    fd = os.open(path, os.O_RDONLY)  # a read-only descriptor cannot be mapped read-write
    try:
        with pytest.raises(TierFileError, match="rows.f32") as err:
            RowMap(fd, 64, str(path))
        assert err.value.path == str(path) and err.value.errno
    finally:
        os.close(fd)


def test_negative_int64_ids_are_twos_complement_uint64(device: str) -> None:
    assert as_uint64_ids(np.array([-1, -2**63])).tolist() == [2**64 - 1, 2**63]
    s = TieredEmbeddingStore(StoreConfig(dim=4, cache_rows=16, device=device))
    a = s.lookup(np.array([-1], dtype=np.int64), requires_grad=False)
    s.end_step()
    b = s.lookup(np.array([2**64 - 1], dtype=np.uint64), requires_grad=False)
    assert len(s) == 1 and torch.equal(a.rows, b.rows)
    assert a.ids.tolist() == [2**64 - 1]


def test_init_is_a_function_of_id_and_seed_only() -> None:
    ids = np.array([5, 2**64 - 1, 2**63 + 7], dtype=np.uint64)
    a = init_rows(ids, 8, seed=3, scale=0.1)
    b = init_rows(ids[::-1], 8, seed=3, scale=0.1)[::-1]
    assert np.array_equal(a, b)
    assert not np.array_equal(a, init_rows(ids, 8, seed=4, scale=0.1))
    assert np.abs(a).max() <= 0.1 and len(np.unique(a)) == a.size
    s1 = TieredEmbeddingStore(StoreConfig(dim=8, cache_rows=8, seed=3, init_scale=0.1))
    s1.lookup(ids[::-1], requires_grad=False)
    assert np.array_equal(s1.weights(ids), a)


def mixed_batches(n_batches: int, batch: int, seed: int) -> list[np.ndarray]:
    """Half Zipf (hot ids), half uniform over the id space (a long tail of rows)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_batches):
        ids = np.where(rng.random(batch) < 0.5, rng.zipf(1.1, batch) % ID_SPACE, rng.integers(0, ID_SPACE, batch))
        out.append(ids.astype(np.uint64) * SPREAD)
    return out


@pytest.mark.parametrize("optimizer,eviction", [("adagrad", "lru"), ("sgd", "lfu"), ("adagrad", "lfu")])
def test_small_tiers_match_all_in_ram_bit_for_bit(tmp_path, optimizer: str, eviction: str, device: str) -> None:
    batches = mixed_batches(400, 32, seed=1)
    n_rows = len(np.unique(np.concatenate(batches)))
    cache, host = n_rows // 100, n_rows // 10  # device tier 1%, host tier 10% of the rows
    assert cache >= 2 * 32  # room for the current and the prefetched batch
    base = StoreConfig(dim=8, optimizer=optimizer, lr=0.3, eviction=eviction, seed=11, device=device)
    ram = TieredEmbeddingStore(base.with_(cache_rows=1 << 16), "t")
    tiers = TieredEmbeddingStore(base.with_(cache_rows=cache, host_rows=host, ssd_dir=str(tmp_path)), "t")
    train(ram, batches)
    train(tiers, batches)
    st = tiers.stats()
    assert len(tiers) == n_rows and st["rows"] == n_rows
    assert st["cache"]["evictions"] > 0 and st["host"]["evictions"] > 0 and st["ssd"]["hits"] > 0
    assert ram.stats()["cache"]["evictions"] == 0
    ia, ra = rows_by_id(ram)
    ib, rb = rows_by_id(tiers)
    assert np.array_equal(ia, ib)
    assert ra.tobytes() == rb.tobytes()
    assert (tmp_path / "t" / "rows.f32").stat().st_size >= len(ib) * base.width * 4


def test_adagrad_row_state_and_update_rule() -> None:
    cfg = StoreConfig(dim=2, cache_rows=4, lr=0.5, eps=1e-8, initial_accumulator=0.1, init_scale=0.01)
    s = TieredEmbeddingStore(cfg)
    lk = s.lookup(np.array([42, 42]))
    w0 = lk.rows.detach().clone()
    g = torch.tensor([[1.0, 3.0]])
    s.apply_gradients(lk, g)
    s.end_step()
    acc = 0.1 + (1.0 + 9.0) / 2
    expect = w0 - 0.5 * g / (np.sqrt(np.float32(acc)) + 1e-8)
    _, rows = s.state()
    assert rows[0, 2] == pytest.approx(acc)
    assert torch.allclose(torch.from_numpy(rows[:, :2]), expect, atol=1e-7)


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_weight_decay_adds_l2_of_the_looked_up_rows_only(optimizer: str) -> None:
    """``StoreConfig.weight_decay``: ``wd * w`` added to a looked-up row's gradient before the
    update (SGD's as torch.optim.SGD(weight_decay=wd)'s; row-wise Adagrad's by its formula),
    in the C path on a CPU table and in the torch path on full rows alike; a row no batch
    looks up is not decayed."""
    cfg = StoreConfig(dim=3, cache_rows=8, lr=0.5, optimizer=optimizer, weight_decay=0.1, init_scale=0.5)
    s = TieredEmbeddingStore(cfg)
    lk = s.lookup(np.array([1, 2]))
    w0 = lk.rows.detach().clone()
    g = torch.tensor([[1.0, 2.0, -3.0], [0.0, 0.0, 0.0]])
    s.apply_gradients(lk, g)
    s.end_step()
    if optimizer == "sgd":
        p = torch.nn.Parameter(w0.clone())
        p.grad = g.clone()
        torch.optim.SGD([p], lr=0.5, weight_decay=0.1).step()
        want = p.detach().numpy()
    else:
        gd = (g + 0.1 * w0).numpy().astype(np.float64)
        acc = (gd * gd).mean(axis=1, keepdims=True)
        want = w0.numpy() - 0.5 * gd / (np.sqrt(acc) + 1e-8)
    np.testing.assert_allclose(s.weights(np.array([1, 2])), want, rtol=1e-6, atol=1e-7)
    full = torch.cat([w0, torch.zeros(2, cfg.width - 3)], dim=1)  # the torch path, on full rows
    np.testing.assert_allclose(cfg.sparse_optimizer().update(full, g)[:, :3].numpy(), want, rtol=1e-6, atol=1e-7)
    before = s.weights(np.array([2]))
    lk = s.lookup(np.array([1]))
    s.apply_gradients(lk, torch.zeros(1, 3))
    s.end_step()
    assert np.array_equal(s.weights(np.array([2])), before)  # not looked up: not decayed


def test_admission_gate_reads_default_row_until_k_sightings(device: str) -> None:
    s = TieredEmbeddingStore(StoreConfig(dim=4, cache_rows=16, admit_after=3, optimizer="sgd", lr=1.0,
                                         device=device))
    for step in range(3):
        lk = s.lookup(np.array([7, 7, 9]))  # 7 is seen once per batch, not once per occurrence
        admitted = dict(zip(lk.ids.tolist(), lk.admitted.tolist()))
        assert admitted == {7: step >= 2, 9: step >= 2}
        if step < 2:
            assert torch.count_nonzero(lk.rows) == 0 and len(s) == 0
        lk.rows.sum().backward()
        s.apply_gradients(lk)  # gradients of default-row reads are dropped
        s.end_step()
    assert len(s) == 2 and s.stats()["default_reads"] == 4
    assert np.array_equal(s.weights(np.array([7])), init_rows(np.array([7], np.uint64), 4, 0, 0.5) - 1.0)


def test_current_and_prefetched_rows_are_pinned(tmp_path, device: str) -> None:
    s = TieredEmbeddingStore(StoreConfig(dim=4, cache_rows=8, host_rows=8, ssd_dir=str(tmp_path), evict_fraction=0,
                                         device=device))
    cur = s.lookup(np.arange(4))
    assert s.prefetch(np.arange(100, 104)) == 0  # not admitted yet: prefetch does not admit
    s.lookup(np.arange(100, 104))  # same step: 8 pinned rows fill the cache
    with pytest.raises(RuntimeError, match="cache_rows=8 is too small"):
        s.lookup(np.arange(200, 201))
    s.end_step()
    s2 = TieredEmbeddingStore(StoreConfig(dim=4, cache_rows=8, host_rows=8, ssd_dir=str(tmp_path / "b"),
                                          evict_fraction=0, device=device))
    s2.lookup(np.arange(8)); s2.end_step()
    s2.lookup(np.arange(8, 12)); s2.end_step()  # rows 0..3 evicted (LRU), 4..7 remain
    s2.lookup(np.arange(4, 8))  # current batch
    moved = s2.prefetch(np.arange(0, 4))  # next batch: brought back, evicting 8..11 only
    assert moved == 4
    loc = s2.directory.cache_loc[s2.directory.get(np.arange(12, dtype=np.uint64))]
    assert (loc[:8] >= 0).all() and (loc[8:] < 0).all()
    s2.end_step()
    s2.lookup(np.arange(0, 4))
    assert s2.stats()["cache"]["hits"] >= 8  # 4..7 and the prefetched 0..3 were hits
    del cur


def test_stats_count_bytes_moved(tmp_path, device: str) -> None:
    cfg = StoreConfig(dim=4, cache_rows=4, host_rows=4, ssd_dir=str(tmp_path), evict_fraction=0, device=device)
    s = TieredEmbeddingStore(cfg)
    w4 = cfg.width * 4
    for start in (0, 4, 8, 0):
        s.lookup(np.arange(start, start + 4), requires_grad=False)
        s.end_step()
    st = s.stats()
    # 12 new rows; rows 0..3 went cache -> host -> SSD and came back from SSD
    assert st["ssd"]["misses"] == 12 and st["ssd"]["hits"] == 4
    assert st["cache"]["evictions"] == 12 - 4 + 4 and st["cache"]["bytes_out"] == st["cache"]["evictions"] * w4
    # host held 0..3, then 4..7 (0..3 to SSD), then 8..11 (4..7 to SSD)
    assert st["host"]["evictions"] == 8 and st["ssd"]["bytes_in"] == 8 * w4
    assert st["cache"]["bytes_in"] == 16 * w4


def test_flush_persists_index_and_save_load_roundtrip(tmp_path, device: str) -> None:
    batches = zipf_batches(30, 32, seed=2)
    cfg = StoreConfig(dim=4, cache_rows=64, host_rows=64, ssd_dir=str(tmp_path / "ssd"), admit_after=2,
                      device=device)
    s = TieredEmbeddingStore(cfg, "t")
    train(s, batches)
    s.flush()
    with np.load(tmp_path / "ssd" / "t" / "index.npz") as z:
        assert np.array_equal(z["ids"], s.state()[0])
    s.save(tmp_path / "ck")
    r = TieredEmbeddingStore(cfg.with_(ssd_dir=str(tmp_path / "ssd2")), "t")
    r.load(tmp_path / "ck")
    assert [a.tobytes() for a in rows_by_id(r)] == [a.tobytes() for a in rows_by_id(s)]
    more = zipf_batches(10, 32, seed=3)
    train(s, more)
    train(r, more)  # pending admission counts came back too
    assert [a.tobytes() for a in rows_by_id(r)] == [a.tobytes() for a in rows_by_id(s)]


def test_assign_imports_dense_rows(device: str) -> None:
    s = TieredEmbeddingStore(StoreConfig(dim=3, cache_rows=4, device=device))
    w = np.arange(30, dtype=np.float32).reshape(10, 3)
    s.assign(np.arange(10), w)
    assert np.array_equal(s.weights(np.arange(10)), w)


def test_bad_ids_and_config_errors() -> None:
    s = TieredEmbeddingStore(StoreConfig(dim=2, cache_rows=4))
    with pytest.raises(TypeError, match="must be integers"):
        s.lookup(np.array([1.5]))
    with pytest.raises(ValueError, match="needs an SSD tier"):
        StoreConfig(host_rows=10)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device for the device tier")
def test_device_tier_on_cuda_matches_the_cpu_store(tmp_path) -> None:
    batches = zipf_batches(40, 64, seed=4)
    base = StoreConfig(dim=8, lr=0.3, seed=2, cache_rows=200, host_rows=400, ssd_dir=str(tmp_path / "gpu"))
    gpu = TieredEmbeddingStore(base.with_(device="cuda"), "t")
    cpu = TieredEmbeddingStore(base.with_(device="cpu", ssd_dir=str(tmp_path / "cpu")), "t")
    train(gpu, batches)
    train(cpu, batches)
    assert gpu.tiers.cache.data.is_cuda
    ig, rg = rows_by_id(gpu)
    ic, rc = rows_by_id(cpu)
    assert np.array_equal(ig, ic) and np.allclose(rg, rc, rtol=1e-5, atol=1e-6)


def test_read_only_lookup_larger_than_the_cache_reads_through(tmp_path, device: str) -> None:
    cfg = StoreConfig(dim=4, cache_rows=16, host_rows=16, ssd_dir=str(tmp_path), device=device)
    s = TieredEmbeddingStore(cfg)
    for start in range(0, 64, 8):  # 64 rows, most of them only on the SSD
        s.lookup(np.arange(start, start + 8), requires_grad=False)
        s.end_step()
    s.lookup(np.arange(8), requires_grad=True).rows.sum().backward()  # make some rows dirty
    before = s.weights(np.arange(64))
    with pytest.raises(RuntimeError, match="too small"):
        s.lookup(np.arange(100), requires_grad=True)
    assert np.array_equal(s.weights(np.arange(64)), before)  # the failed lookup lost nothing
    s.end_step()
    lk = s.lookup(np.arange(100), requires_grad=False)  # 36 new ids too
    assert lk.rows.shape == (100, 4) and len(lk.slots) == 0
    assert lk.rows.device.type == device
    assert np.array_equal(lk.rows.cpu().numpy(), s.weights(np.arange(100)))
    assert np.array_equal(s.weights(np.arange(64, 100)), init_rows(np.arange(64, 100, dtype=np.uint64), 4, 0, 0.5))


class DictTable:
    """An independent reference: a dict id -> row, the same update formulas, no tiers."""

    def __init__(self, cfg: StoreConfig) -> None:
        self.cfg, self.rows, self.seen = cfg, {}, {}

    def step(self, ids: np.ndarray, offsets: torch.Tensor, i: int) -> None:
        c = self.cfg
        uniq = pd_unique(ids)
        order = np.argsort(uniq)
        inverse = torch.from_numpy(order[np.searchsorted(uniq[order], ids)])
        admitted = []
        for u in uniq.tolist():
            if u not in self.rows:
                self.seen[u] = self.seen.get(u, 0) + 1
                if self.seen[u] >= c.admit_after:
                    r = np.empty(c.width, np.float32)
                    r[: c.dim] = init_rows(np.array([u], np.uint64), c.dim, c.seed, c.scale)[0]
                    r[c.dim:] = c.initial_accumulator
                    self.rows[u] = r
            admitted.append(u in self.rows)
        w = torch.zeros(len(uniq), c.dim)
        adm = np.flatnonzero(admitted)
        if len(adm):
            w[torch.from_numpy(adm)] = torch.from_numpy(np.stack([self.rows[uniq[j]][: c.dim] for j in adm]))
        w.requires_grad_(True)
        pooled = F.embedding_bag(inverse, w, offsets, mode="sum")
        wt = torch.sin(torch.arange(pooled.numel(), dtype=torch.float32) + i).reshape(pooled.shape)
        (pooled * wt).sum().backward()
        if not len(adm):
            return
        g = w.grad[torch.from_numpy(adm)]
        rows = torch.from_numpy(np.stack([self.rows[uniq[j]] for j in adm]))
        if c.optimizer == "sgd":
            rows[:, : c.dim].sub_(g * c.lr)
        else:  # row-wise Adagrad as specified: squares summed in column order, a correctly rounded sqrt
            gn, r = g.numpy(), rows.numpy()
            sq = np.zeros(len(gn), np.float32)
            for col in range(c.dim):
                sq = (sq + gn[:, col] * gn[:, col]).astype(np.float32)
            acc = (r[:, c.dim] + sq / np.float32(c.dim)).astype(np.float32)
            r[:, c.dim] = acc
            den = (np.sqrt(acc) + np.float32(c.eps)).astype(np.float32)
            r[:, : c.dim] = r[:, : c.dim] - (gn * np.float32(c.lr)) / den[:, None]
        for k, j in enumerate(adm):
            self.rows[uniq[j]] = rows[k].numpy().copy()


def pd_unique(ids: np.ndarray) -> np.ndarray:
    import pandas as pd

    return pd.unique(ids)  # first-occurrence order, as the store's C unique


@pytest.mark.parametrize("optimizer,admit_after", [("adagrad", 1), ("adagrad", 2), ("sgd", 3)])
def test_store_matches_an_independent_dict_table(tmp_path, optimizer: str, admit_after: int) -> None:
    batches = mixed_batches(60, 32, seed=9)
    cfg = StoreConfig(dim=4, optimizer=optimizer, lr=0.2, seed=5, admit_after=admit_after, cache_rows=80,
                      host_rows=100, ssd_dir=str(tmp_path), eviction="lfu")
    store, ref = TieredEmbeddingStore(cfg, "t"), DictTable(cfg)
    offsets = torch.arange(0, 32, 4)
    train(store, batches)
    for i, ids in enumerate(batches):
        ref.step(ids, offsets, i)
    ids, rows = rows_by_id(store)
    assert sorted(ref.rows) == ids.tolist()
    want = np.stack([ref.rows[u] for u in ids.tolist()])
    assert want.tobytes() == rows.tobytes()


def test_a_full_host_tier_admits_by_the_policy(tmp_path) -> None:
    """Rows leaving the cache that rank below every host row go to the SSD file; they do not
    displace hotter rows (LFU: occurrences looked up)."""
    s = TieredEmbeddingStore(StoreConfig(dim=2, cache_rows=4, host_rows=4, ssd_dir=str(tmp_path), eviction="lfu",
                                         evict_fraction=0, device="cpu"))
    batches = [range(0, 4)] * 2 + [range(4, 8)] * 3 + [range(8, 12), range(12, 16)]
    for ids in batches:
        s.lookup(np.array(list(ids)), requires_grad=False)
        s.end_step()
    d = s.directory
    where = lambda ids: d.host_loc[d.get(np.array(ids, dtype=np.uint64))]  # noqa: E731
    assert (where(range(4, 8)) >= 0).all()  # seen 3 times: kept in host RAM
    assert (where(range(8, 12)) < 0).all() and d.on_ssd[d.get(np.arange(8, 12, dtype=np.uint64))].all()
    assert (where(range(0, 4)) < 0).all()  # seen twice: pushed out by the rows seen 3 times
    assert s.stats()["host"]["evictions"] == 4  # only 0..3 were evicted; 8..11 never entered
