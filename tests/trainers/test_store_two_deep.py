"""Prepares two deep: the batch after next told to the stores before the next one is looked
up (its rows found, admitted, placed and booked on the background thread while the next
lookup and its step run).  The rows trained, the tables' bookkeeping (last use, use counts)
and their counters are those of stores never prepared; a lookup of another batch than the
one prepared undoes both bookings; uses of the table in between (weights, stats, a flush)
wait for the prepares and change nothing."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

from fbrapids.trainers.modules.embedding import TieredEmbeddingBagCollection
from fbrapids.trainers.sparse import StoreConfig, TieredEmbeddingStore
from fbrapids.trainers.sparse.store import prepare_together
from fbrapids.trainers.sparse.together import lookup_together, update_each

IDS = 400


def _stores(cache_rows: int = 8) -> list[TieredEmbeddingStore]:
    """Three tables in one RAM tier; ``cache_rows=8``: their caches grow under the prepares (in
    place, in the prepares' jobs on the background thread), 4096: room for every row from the
    start (a prepare two deep is queued behind the one before it, still running)."""
    return [TieredEmbeddingStore(StoreConfig(dim=4, cache_rows=cache_rows, seed=t), name=f"t{t}", device="cpu")
            for t in range(3)]


def _batches(seed: int, n: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)  # new ids in every batch, repeats within and across batches
    return [[rng.integers(0, 60 + 50 * i, 200 + 20 * t) for t in range(3)] for i in range(n)]


def _bookkeeping(stores: list[TieredEmbeddingStore]) -> list[tuple]:
    """Each table's rows, last use and use count of every id, and its lookup counters."""
    out = []
    for s in stores:
        st = s.stats()
        d = s.directory
        g = d.get(np.arange(IDS, dtype=np.uint64))
        seen = g >= 0
        out.append((s.weights(np.arange(IDS)).tobytes(), seen.tobytes(), d.last[g[seen]].tobytes(),
                    d.freq[g[seen]].tobytes(), st["served_cache"], st["served_new"], st["cache"]["hits"],
                    st["cache"]["misses"], st["lookups"], st["unique_lookups"], st["rows"]))
    return out


def _train(batches: list[list[np.ndarray]], mode: str, background: bool = False,
           between: str = "", cache_rows: int = 8, held: bool = False) -> tuple[list[np.ndarray], list[tuple], int]:
    """Every batch looked up and trained (gradient 0.5 + the row's first value), telling the stores
    ``mode``: "never", "one" (the next batch after each lookup, as fit does) or "two" (the next
    batch before each lookup); returns the leaves, the bookkeeping and the lookups that found
    their batch prepared two deep.  ``held``: the background thread held busy until both first
    prepares are queued (the second is made while the first is certainly still pending)."""
    stores = _stores(cache_rows)
    leaves, two_deep, told = [], 0, None
    for i, keys in enumerate(batches):
        nxt = [torch.from_numpy(k) for k in batches[i + 1]] if i + 1 < len(batches) else None
        cur = [torch.from_numpy(k) for k in keys]
        if mode == "two":
            gate = threading.Event()
            if held and i == 0:
                stores[0].background().submit(gate.wait, 60)  # (released below; at worst it times out)
            try:
                if told is None:
                    prepare_together(stores, cur)
                if nxt is not None:
                    prepare_together(stores, nxt)
                    two_deep += all(s._ahead is not None for s in stores)
                pending = all(s._prefetched is not None and s._prefetched.job is not None
                              and not s._prefetched.job.done() for s in stores)
            finally:  # the thread every store shares is never left held
                gate.set()
            if held and i == 0:
                assert pending
            told = nxt
            if between == "weights":  # a read in between waits for both prepares
                for s in stores:
                    s.weights(np.arange(5))
            elif between == "flush":  # so does undoing the bookings (a save): the lookups then book themselves
                for s in stores:
                    s.flush()
        lks, leaf = lookup_together(stores, cur, True)
        leaves.append(leaf.numpy().copy())
        if mode == "one" and nxt is not None:
            prepare_together(stores, nxt)
        update_each([(s, lk, 0.5 + lk.rows.detach()[:, :1].expand_as(lk.rows).clone())
                     for s, lk in zip(stores, lks)], background=background)
        for s in stores:
            s.end_step()
    return leaves, _bookkeeping(stores), two_deep


@pytest.mark.parametrize("cache_rows", [8, 4096])
@pytest.mark.parametrize("background", [False, True])
@pytest.mark.parametrize("between", ["", "weights", "flush"])
def test_batches_prepared_two_deep_train_and_count_as_never_prepared(background: bool, between: str,
                                                                     cache_rows: int) -> None:
    batches = _batches(0, 7)
    plain_leaves, plain_books, _ = _train(batches, "never", cache_rows=cache_rows)
    one_leaves, one_books, _ = _train(batches, "one", background, cache_rows=cache_rows)
    two_leaves, two_books, two_deep = _train(batches, "two", background, between, cache_rows)
    assert two_deep == len(batches) - 1  # every prepare after the first went two deep
    for leaves in (one_leaves, two_leaves):
        assert all(np.array_equal(a, b) for a, b in zip(plain_leaves, leaves))
    assert one_books == plain_books
    assert two_books == plain_books


@pytest.mark.parametrize("cache_rows", [8, 4096])
def test_a_prepare_two_deep_queued_behind_one_still_pending_trains_as_never_prepared(cache_rows: int) -> None:
    """Queued behind a prepare held on the background thread, the prepare two deep is made
    without waiting for it, also when the cache must grow for both batches (``cache_rows=8``:
    it grows in place, in the job, on that thread), and trains as never prepared."""
    batches = _batches(3, 5)
    plain_leaves, plain_books, _ = _train(batches, "never", cache_rows=cache_rows)
    two_leaves, two_books, two_deep = _train(batches, "two", cache_rows=cache_rows, held=True)
    assert two_deep == len(batches) - 1
    assert all(np.array_equal(a, b) for a, b in zip(plain_leaves, two_leaves))
    assert two_books == plain_books


def test_a_batch_other_than_the_one_prepared_undoes_both_bookings() -> None:
    a, b, c = _batches(1, 3)
    stores = _stores()
    for s in stores:  # at step 2: a row looked up here is last used at 2, one never looked up at 0
        s.end_step()
        s.end_step()
    prepare_together(stores, [torch.from_numpy(k) for k in a])
    prepare_together(stores, [torch.from_numpy(k) for k in b])
    assert all(s._ahead is not None for s in stores)
    lks, leaf = lookup_together(stores, [torch.from_numpy(k) for k in c], True)
    assert all(s._prefetched is None and s._ahead is None for s in stores)
    fresh = _stores()
    lks_f, leaf_f = lookup_together(fresh, [torch.from_numpy(k) for k in c], True)
    assert np.array_equal(leaf.numpy(), leaf_f.numpy())  # the rows of c, whatever a and b admitted
    for s, keys in zip(stores, c):
        d = s.directory
        g = d.get(np.arange(IDS, dtype=np.uint64))
        used = np.zeros(IDS, bool)
        used[keys] = True
        others = g[(g >= 0) & ~used]  # admitted by the prepares of a and b, never looked up
        assert len(others) > 0
        assert (d.freq[others] == 0).all() and (d.last[others] == 0).all()
        assert (d.freq[g[used]] == np.bincount(keys, minlength=IDS)[used]).all() and (d.last[g[used]] == 2).all()


def test_the_collection_pools_a_batch_prepared_two_deep_as_one_never_prepared() -> None:
    rng = np.random.default_rng(2)
    bags, n = 64, 5
    batches = [{f: (torch.from_numpy(rng.integers(0, 50 + 40 * i, bags * 3)), torch.arange(0, bags * 3, 3))
                for f in ("a", "b")} for i in range(n)]

    def run(two: bool) -> list[np.ndarray]:
        ebc = TieredEmbeddingBagCollection(["a", "b"], StoreConfig(dim=4, cache_rows=8))
        out = []
        for i, sparse in enumerate(batches):
            if two:
                if i == 0:
                    ebc.prepare(sparse)
                if i + 1 < n:
                    ebc.prepare(batches[i + 1])
            pooled = ebc.pooled_stack(sparse)
            out.append(pooled.detach().numpy().copy())
            (pooled * torch.linspace(-1, 1, pooled.numel()).view_as(pooled)).sum().backward()
            ebc.apply_gradients()
        return out

    assert all(np.array_equal(x, y) for x, y in zip(run(False), run(True)))


def test_a_lookup_starts_beside_the_last_update_and_reads_its_rows_after_it() -> None:
    """The update of the last step's rows, still running on the background thread, is not
    waited for by the tables' starts (the directory, the prepared stash, the counters): the
    lookup's pass waits for it and reads the rows it wrote; an update that failed raises its
    error from that lookup."""
    stores = _stores(4096)
    keys = [torch.from_numpy(k) for k in _batches(2, 1)[0]]
    lks, _ = lookup_together(stores, keys, True)
    update_each([(s, lk, torch.ones_like(lk.rows)) for s, lk in zip(stores, lks)], background=True)
    for s in stores:
        s.end_step()
    before = [s.weights(lk.ids) for s, lk in zip(stores, lks)]
    counted = [s.stats()["lookups"] for s in stores]
    gate, started = threading.Event(), threading.Event()

    def held_update() -> None:  # an update of every cached row, held until the lookup has started
        started.set()
        gate.wait(60)
        for s in stores:
            s.tiers.cache.host_table()[:, :4] += 1.0

    job = stores[0].background().submit(held_update)
    for s in stores:
        s.update_in_background(job)
    got: dict[str, object] = {}
    looker = threading.Thread(target=lambda: got.update(out=lookup_together(stores, keys, True)))
    try:
        assert started.wait(60)
        looker.start()
        for _ in range(1000):  # every table's start counted while the update is held (at most 10 s)
            if all(s._counts["lookups"] > c for s, c in zip(stores, counted)):
                break
            time.sleep(0.01)
        assert all(s._counts["lookups"] > c for s, c in zip(stores, counted))
        assert looker.is_alive() and "out" not in got  # its pass waits for the update
    finally:
        gate.set()
        looker.join(60)
    out = got["out"]
    assert isinstance(out, tuple)
    for lk, b in zip(out[0], before):
        assert np.array_equal(lk.rows.detach().numpy(), b + 1.0)  # the rows as the update left them
    for s in stores:
        s.end_step()

    def failed_update() -> None:
        raise RuntimeError("the update failed")

    job = stores[0].background().submit(failed_update)
    for s in stores:
        s.update_in_background(job)
    with pytest.raises(RuntimeError, match="the update failed"):
        lookup_together(stores, keys, True)
