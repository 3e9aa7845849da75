"""The cache tier's id -> slot map (trainers/sparse/slot_map.py, csrc/slot_map.h).

The map's C text is one text for NVRTC and gcc: here its gcc build is checked against a
Python dict (random uint64 ids above and below 2**63, ids sharing a bucket, tombstones,
rebuilds), its CUDA text is compiled with NVRTC, and a CPU store with a map attached (the
path a CUDA cache takes) is checked to consult the host directory only for the map's
misses and to train the same rows, bit for bit, as the plain CPU store.  The ``gpu`` tests
run the same checks on a CUDA cache."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fbrapids.kernels.nvrtc import compile_cuda, nvrtc_available
from fbrapids.trainers.sparse import StoreConfig, TieredEmbeddingStore
from fbrapids.trainers.sparse.slot_map import EMPTY, TOMB, SlotMap, slot_map_source

from test_store import mixed_batches, rows_by_id, train, zipf_batches

CPU = torch.device("cpu")
M64 = (1 << 64) - 1


def bucket_of(k: int, mask: int) -> int:
    """csrc/slot_map.h's fbx_slot_bucket, in Python."""
    k ^= k >> 30
    k = (k * 0xBF58476D1CE4E5B9) & M64
    k ^= k >> 27
    k = (k * 0x94D049BB133111EB) & M64
    k ^= k >> 31
    return k & mask


def as_bits(ids) -> torch.Tensor:
    return torch.from_numpy(np.asarray(ids, dtype=np.uint64).view(np.int64))


def check_against(m: SlotMap, ref: dict[int, int], absent: np.ndarray) -> None:
    keys = np.array(list(ref) + absent.tolist(), dtype=np.uint64)
    want = [ref[k] for k in ref] + [-1] * len(absent)
    assert m.probe(as_bits(keys)).tolist() == want
    assert len(m) == len(ref) == int((m.vals >= 0).sum())


def test_map_matches_a_dict_on_random_64_bit_ids() -> None:
    rng = np.random.default_rng(3)
    m = SlotMap(rows=200, device=CPU)
    ref: dict[int, int] = {}
    pool = np.concatenate([rng.integers(0, 2**64, 3000, dtype=np.uint64, endpoint=False),
                           np.array([0, 1, 2**63 - 1, 2**63, 2**64 - 1], dtype=np.uint64)])
    assert (pool >= 2**63).sum() > 1000          # ids above 2**63 (negative int64 bits) are many
    free = list(range(200))
    for _ in range(60):                          # churn: evict some, bring some up
        held = np.array(list(ref), dtype=np.uint64)
        out = held[rng.choice(len(held), size=min(len(held), int(rng.integers(0, 40))), replace=False)]
        m.erase(out)
        for k in out.tolist():
            free.append(ref.pop(k))
        cand = np.array([k for k in rng.choice(pool, 60, replace=False).tolist() if k not in ref][:len(free)],
                        dtype=np.uint64)
        cand = np.unique(cand)
        slots = np.array([free.pop() for _ in range(len(cand))], dtype=np.int64)
        m.insert(cand, slots)
        ref.update(zip(cand.tolist(), slots.tolist()))
        check_against(m, ref, np.setdiff1d(pool, np.array(list(ref), dtype=np.uint64))[:100])
    assert m.rebuilds > 0                        # tombstones were reclaimed along the way
    assert m.buckets == 512                      # never grew: live ids stay under half the buckets
    m.raise_if_failed()


def test_ids_sharing_a_bucket_probe_past_tombstones() -> None:
    m = SlotMap(rows=8, device=CPU)              # 64 buckets
    mask = m.buckets - 1
    rng = np.random.default_rng(0)
    same = [k for k in rng.integers(0, 2**64, 20000, dtype=np.uint64).tolist() if bucket_of(k, mask) == 61][:5]
    assert len(same) == 5 and any(k >= 2**63 for k in same)
    m.insert(np.array(same, dtype=np.uint64), np.arange(5))
    # linear probing from their common bucket, wrapping past the end
    where = {int(k): b for b, (k, v) in enumerate(zip(m.keys.numpy().view(np.uint64).tolist(), m.vals.tolist()))
             if v >= 0}
    assert [where[k] for k in same] == [61, 62, 63, 0, 1]
    m.erase(np.array(same[:2], dtype=np.uint64))
    assert (m.vals == TOMB).sum() == 2 and (m.vals == EMPTY).sum() == m.buckets - 5
    assert m.probe(as_bits(same)).tolist() == [-1, -1, 2, 3, 4]
    m.insert(np.array(same[1:2], dtype=np.uint64), np.array([7]))   # reuses the first tombstone
    assert m.probe(as_bits(same)).tolist() == [-1, 7, 2, 3, 4]
    assert (m.vals == TOMB).sum() == 1


def test_a_bad_erase_raises() -> None:
    from fbrapids.errors import StoreError

    m = SlotMap(rows=4, device=CPU)
    with pytest.raises(StoreError, match="lost track"):
        m.erase(np.array([5], dtype=np.uint64))


@pytest.mark.skipif(not nvrtc_available(), reason="libnvrtc not found")
def test_slot_map_text_compiles_with_nvrtc() -> None:
    ptx = compile_cuda(slot_map_source(), name="slot_map.cu")
    for name in ("fbx_slot_map_probe", "fbx_slot_map_insert", "fbx_slot_map_erase"):
        assert f".entry {name}" in ptx
    assert "atom.global.cas" in ptx              # inserts claim buckets atomically


def mapped_store(cfg: StoreConfig) -> TieredEmbeddingStore:
    """A store whose lookups take the map's path, as on a CUDA cache."""
    s = TieredEmbeddingStore(cfg, "t")
    if s.tiers.slot_map is None:
        s.tiers.attach_slot_map()
    return s


def cached_truth(store: TieredEmbeddingStore) -> dict[int, int]:
    cm = store.tiers.cache.slots
    occ = cm.occupied()
    return dict(zip(store.directory.g2id[cm.owner[occ]].tolist(), occ.tolist()))


def map_items(store: TieredEmbeddingStore) -> dict[int, int]:
    ids, slots = store.tiers.slot_map.items()
    return dict(zip(ids.cpu().numpy().view(np.uint64).tolist(), slots.cpu().tolist()))


def check_misses_only(store: TieredEmbeddingStore, batches: list[np.ndarray]) -> int:
    """Per lookup, the host directory is consulted for exactly the distinct ids the cache
    did not hold; the map equals the cache's contents after every step.  Returns the hits."""
    hits = 0
    for ids in batches:
        u = np.unique(ids)
        cached = cached_truth(store)
        want_miss = sum(1 for k in u.tolist() if k not in cached)
        before = dict(store.stats())
        lk = store.lookup(torch.from_numpy(ids.view(np.int64)).to(store.device))
        after = store.stats()
        assert after["host_directory_lookups"] - before["host_directory_lookups"] == want_miss
        assert after["device_map_hits"] - before["device_map_hits"] == len(u) - want_miss
        hits += len(u) - want_miss
        lk.rows.sum().backward()
        store.apply_gradients(lk)
        store.end_step()
        assert map_items(store) == cached_truth(store)
    store.tiers.slot_map.raise_if_failed()
    return hits


def test_mapped_store_consults_the_directory_only_for_misses(tmp_path) -> None:
    cfg = StoreConfig(dim=4, cache_rows=64, host_rows=128, ssd_dir=str(tmp_path), device="cpu", admit_after=2)
    hits = check_misses_only(mapped_store(cfg), zipf_batches(40, 64, seed=2))
    assert hits > 300                            # the hot ids are found on the map (383 of them)


def test_plain_cpu_store_counts_every_distinct_id_as_a_directory_lookup() -> None:
    s = TieredEmbeddingStore(StoreConfig(dim=4, cache_rows=64, device="cpu"))
    assert s.tiers.slot_map is None
    for ids in zipf_batches(5, 64, seed=2):
        s.lookup(ids, requires_grad=False)
        s.end_step()
    st = s.stats()
    assert st["device_map_hits"] == 0 and st["host_directory_lookups"] == st["unique_lookups"]


@pytest.mark.parametrize("eviction", ["lru", "lfu"])
def test_mapped_store_trains_the_plain_stores_rows_bit_for_bit(tmp_path, eviction: str) -> None:
    batches = mixed_batches(150, 32, seed=6)
    base = StoreConfig(dim=8, lr=0.3, seed=2, cache_rows=80, host_rows=160, eviction=eviction, device="cpu",
                       ssd_dir=str(tmp_path / "a"))
    mapped = mapped_store(base)
    plain = TieredEmbeddingStore(base.with_(ssd_dir=str(tmp_path / "b")), "t")
    train(mapped, batches)                       # with prefetch: prefetched rows pinned, found on the map
    train(plain, batches)
    im, rm = rows_by_id(mapped)
    ip, rp = rows_by_id(plain)
    assert np.array_equal(im, ip) and rm.tobytes() == rp.tobytes()
    sm, sp = mapped.stats(), plain.stats()
    for key in ("cache", "host", "ssd", "served_cache", "served_host", "served_ssd", "unique_lookups"):
        assert sm[key] == sp[key], key
    assert sm["device_map_hits"] > 0
    assert sm["host_directory_lookups"] < sp["host_directory_lookups"]
    assert map_items(mapped) == cached_truth(mapped)


def test_store_moved_to_and_from_the_map_device_keeps_the_map_exact() -> None:
    s = TieredEmbeddingStore(StoreConfig(dim=4, cache_rows=32, device="cpu"))
    for ids in zipf_batches(3, 32, seed=1):
        s.lookup(ids, requires_grad=False)
        s.end_step()
    s.to("cpu")
    assert s.tiers.slot_map is None              # a CPU cache never keeps a map
    assert map_items(mapped_store_of(s)) == cached_truth(s)


def mapped_store_of(s: TieredEmbeddingStore) -> TieredEmbeddingStore:
    s.tiers.attach_slot_map()
    return s


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.gpu
@needs_cuda
def test_cuda_store_consults_the_directory_only_for_misses(tmp_path) -> None:
    cfg = StoreConfig(dim=4, cache_rows=64, host_rows=128, ssd_dir=str(tmp_path), device="cuda", admit_after=2)
    s = TieredEmbeddingStore(cfg, "t")
    assert s.tiers.slot_map is not None and s.tiers.slot_map.keys.is_cuda
    assert check_misses_only(s, zipf_batches(40, 64, seed=2)) > 300


@pytest.mark.gpu
@needs_cuda
def test_cuda_store_matches_the_cpu_store_bit_for_bit(tmp_path) -> None:
    """Same batches, same rows: gradients pooled on the CPU so only the store differs."""
    batches = mixed_batches(150, 32, seed=6)
    base = StoreConfig(dim=8, lr=0.3, seed=2, cache_rows=80, host_rows=160, optimizer="sgd",
                       ssd_dir=str(tmp_path / "c"))
    gpu = TieredEmbeddingStore(base.with_(device="cuda", ssd_dir=str(tmp_path / "g")), "t")
    cpu = TieredEmbeddingStore(base.with_(device="cpu"), "t")
    for i, ids in enumerate(batches):
        for s in (gpu, cpu):
            lk = s.lookup(ids)
            assert lk.rows.device.type == s.device.type
            if i + 1 < len(batches):
                s.prefetch(batches[i + 1])
            grad = torch.sin(torch.arange(lk.rows.numel(), dtype=torch.float32) + i).reshape(lk.rows.shape)
            s.apply_gradients(lk, grad.to(s.device))
            s.end_step()
        assert np.array_equal(gpu.tiers.cache.slots.owner, cpu.tiers.cache.slots.owner)
    ig, rg = rows_by_id(gpu)
    ic, rc = rows_by_id(cpu)
    assert np.array_equal(ig, ic) and rg.tobytes() == rc.tobytes()
    assert gpu.stats()["host_directory_lookups"] < cpu.stats()["host_directory_lookups"]
    assert map_items(gpu) == cached_truth(gpu)
