"""Several tables updated in one C call: the row-wise Adagrad of every table, one slice or
several (a trial's arms sharing a table), against numpy's row-wise Adagrad written from its
formula (``acc += mean(g * g)`` over a slice, summed in column order; ``w -= g * lr / (sqrt(acc)
+ eps)``), bit for bit, on the foreground and on the stores' background thread; and the
tables a prepare finds ahead in one C call looked up as without it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fbrapids.trainers.sparse import StoreConfig, TieredEmbeddingStore
from fbrapids.trainers.sparse.store import prepare_together
from fbrapids.trainers.sparse.together import lookup_together, update_each

LR, EPS = 0.05, 1e-8


def _numpy_adagrad(rows: np.ndarray, grad: np.ndarray, dim: int, slices: int) -> np.ndarray:
    """Row-wise Adagrad on full rows ``[n, slices * dim + slices]`` (each slice's accumulator after the vectors)."""
    out = rows.astype(np.float32).copy()
    lr, eps, fdim = np.float32(LR), np.float32(EPS), np.float32(dim)
    for k in range(slices):
        g = grad[:, k * dim:(k + 1) * dim].astype(np.float32)
        s = np.zeros(len(g), np.float32)
        for c in range(dim):  # column order, as the C loop sums
            s = s + g[:, c] * g[:, c]
        acc = out[:, slices * dim + k] + s / fdim
        out[:, slices * dim + k] = acc
        den = np.sqrt(acc) + eps
        out[:, k * dim:(k + 1) * dim] = out[:, k * dim:(k + 1) * dim] - (g * lr) / den[:, None]
    return out


@pytest.mark.parametrize("background", [False, True])
def test_tables_of_one_and_of_several_slices_updated_in_one_call_as_numpy_computes_them(background: bool) -> None:
    rng = np.random.default_rng(0)
    stores = [TieredEmbeddingStore(StoreConfig(dim=dim, slices=slices, lr=LR, eps=EPS, cache_rows=64, seed=s,
                                               slice_seeds=tuple(range(slices)) if slices > 1 else None),
                                   name=f"t{s}", device="cpu")
              for s, (dim, slices) in enumerate([(8, 1), (12, 3), (8, 2), (176, 11), (204, 17)])]
    keys = [rng.integers(0, 50, 40) for _ in stores]
    lookups = [s.lookup(k) for s, k in zip(stores, keys)]
    before = [s.tiers.cache.table[lk.slots].copy() for s, lk in zip(stores, lookups)]
    grads = [torch.from_numpy(rng.standard_normal((len(lk.ids), s.config.dim)).astype(np.float32))
             for s, lk in zip(stores, lookups)]
    update_each([(s, lk, g) for s, lk, g in zip(stores, lookups, grads)], background=background)
    for s, lk, g, rows in zip(stores, lookups, grads, before):
        s.end_step()
        want = _numpy_adagrad(rows, g.numpy(), s.config.slice_dim, s.config.slices)
        assert np.array_equal(s.weights(lk.ids.view(np.int64)), want[:, : s.config.dim]), s.name


def test_tables_prepared_together_look_up_as_tables_never_prepared() -> None:
    rng = np.random.default_rng(1)
    batches = [[rng.integers(0, 300, 256) for _ in range(3)] for _ in range(4)]

    def run(prepare: bool) -> list[np.ndarray]:
        stores = [TieredEmbeddingStore(StoreConfig(dim=4, cache_rows=8, seed=t), name=f"t{t}", device="cpu")
                  for t in range(3)]
        out = []
        for i, keys in enumerate(batches):
            lks, leaf = lookup_together(stores, [torch.from_numpy(k) for k in keys], True)
            out.append(leaf.numpy().copy())
            if prepare and i + 1 < len(batches):  # as fit does: the next batch's rows found while this one trains
                prepare_together(stores, [torch.from_numpy(k) for k in batches[i + 1]])
                for s in stores:  # found, placed and booked ahead (one RAM tier): what the next lookup takes
                    s._settle()
                    assert s._prefetched is not None and s._prefetched.booked is not None
            update_each([(s, lk, torch.full_like(lk.rows, 0.5)) for s, lk in zip(stores, lks)], background=prepare)
            for s in stores:
                s.end_step()
        out += [s.weights(np.arange(300)) for s in stores]
        return out

    plain, ahead = run(False), run(True)
    assert all(np.array_equal(a, b) for a, b in zip(plain, ahead))


def test_a_lookup_for_no_gradient_left_in_place_reads_the_rows_a_gathering_one_copies(tmp_path) -> None:
    """A prediction's lookup (read-only, no gradient) with ``gather=False``: a table whose
    admitted rows are all in its cache leaves them there, each row's place in ``places`` (-1
    for an id training never admitted: the default row); a table some of whose rows lie below
    its cache gathers them all as with ``gather=True``.  The rows read through the places are
    the gathered ones, bit for bit, and both ways count the same reads."""
    from fbrapids.trainers.sparse.store import read_only

    rng = np.random.default_rng(2)
    train = [[rng.integers(0, 200, 128) for _ in range(2)] for _ in range(6)]
    held = [rng.integers(0, 300, 100) for _ in range(2)]  # ids 200-299: never trained

    def trained(way: str) -> list[TieredEmbeddingStore]:
        stores = [TieredEmbeddingStore(StoreConfig(dim=4, cache_rows=1024, seed=0), name="t0", device="cpu"),
                  # most rows below the cache (host RAM, SSD)
                  TieredEmbeddingStore(StoreConfig(dim=4, cache_rows=160, host_rows=16, ssd_dir=str(tmp_path / way),
                                                   seed=1), name="t1", device="cpu")]
        for keys in train:
            lks, _ = lookup_together(stores, [torch.from_numpy(k) for k in keys], True)
            update_each([(s, lk, torch.full_like(lk.rows, 0.25)) for s, lk in zip(stores, lks)])
            for s in stores:
                s.end_step()
        return stores

    looked = {}
    for gather in (True, False):
        stores = trained(str(gather))
        with read_only(stores):
            lks, _ = lookup_together(stores, [torch.from_numpy(k) for k in held], False, gather=gather)
        looked[gather] = (stores, lks)
    (_, copied), (stores, in_place) = looked[True], looked[False]
    assert [lk.gathered for lk in in_place] == [False, True]
    for s, a, b in zip(stores, copied, in_place):
        if b.gathered:
            assert torch.equal(a.rows, b.rows)
        else:
            places = b.places
            assert len(places) == len(a.rows) and (places == -1).sum() == (~a.admitted).sum() > 0
            table = s.tiers.cache.table
            read = np.where(places[:, None] >= 0, table[np.maximum(places, 0), : s.config.dim], 0.0)
            assert np.array_equal(read.astype(np.float32), a.rows.numpy())
    assert [s.stats() for s in looked[True][0]] == [s.stats() for s in stores]
