"""The trainer's batched paths agree with the plain per-table / autograd formulations.

* ``group_by_row`` is a stable counting sort (checked against numpy's stable argsort);
* one stacked lookup (one leaf, one ``embedding_bag``, a bag-shaped backward) gives the
  per-feature pooled outputs and row gradients of per-table ``embedding_bag`` calls;
* pooled bags written field by field side by side (``bag_sum``'s ``fields``) are
  ``embedding_bag``'s, and their backward its gradient;
* one optimizer update over all tables' rows gives the same bytes as one per table;
* DLRM's lower-triangle interaction (one ``bmm`` each way) matches the reference's
  ``bmm`` + ``Z[:, li, lj]`` in value and gradient.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

from fbrapids.errors import FbrapidsError
from fbrapids.trainers.modules import DotInteraction, TieredEmbeddingBagCollection
from fbrapids.trainers.sparse import StoreConfig, TieredEmbeddingStore
from fbrapids.trainers.sparse.hashmap import bag_sum, bag_sum_backward, group_by_row
from fbrapids.trainers.sparse.store import sparse_update

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_group_by_row_is_a_stable_counting_sort() -> None:
    rng = np.random.default_rng(0)
    idx = rng.integers(0, 50, 1000)
    lengths = rng.integers(0, 7, 300)
    lengths[-1] += 1000 - lengths.sum() if lengths.sum() < 1000 else 0
    offsets = np.concatenate([[0], np.minimum(np.cumsum(lengths), 1000)])
    offsets[-1] = 1000
    starts, bags = group_by_row(idx, 60, offsets)  # rows 50..59 are read by no bag
    bag_of = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    order = np.argsort(idx, kind="stable")
    assert bags.tolist() == bag_of[order].tolist()
    assert starts.tolist() == np.concatenate([[0], np.cumsum(np.bincount(idx, minlength=60))]).tolist()
    with pytest.raises(ValueError, match="outside"):
        group_by_row(np.array([0, 5]), 5, np.array([0, 2]))
    with pytest.raises(ValueError, match="offsets"):
        group_by_row(np.array([0, 1]), 5, np.array([0, 1]))


def test_bag_sum_and_its_backward_refuse_misshapen_inputs_before_reading_them() -> None:
    """Shapes C would read past (a 3-D gradient, too few gradient rows, offsets past the
    index, offsets out of order) are refused with an error naming the function, not a crash
    or bags read from the wrong place; well-formed inputs match ``embedding_bag``."""
    rows = np.arange(12, dtype=np.float32).reshape(6, 2)
    idx, offsets = np.array([0, 5, 5, 1]), np.array([0, 2, 4])
    want = F.embedding_bag(torch.from_numpy(idx), torch.from_numpy(rows), torch.from_numpy(offsets[:-1]), mode="sum")
    assert np.array_equal(bag_sum(rows, idx, offsets), want.numpy())
    g = np.ones((2, 2), np.float32)
    assert bag_sum_backward(g, idx, offsets, 6)[:, 0].tolist() == [1.0, 1.0, 0.0, 0.0, 0.0, 2.0]
    bad = [
        lambda: bag_sum(rows.reshape(6, 1, 2), idx, offsets),  # rows not [rows, dim]
        lambda: bag_sum(rows, idx, np.array([0, 2, 9])),  # offsets past the index
        lambda: bag_sum(rows, idx.reshape(2, 2), offsets),
        lambda: bag_sum_backward(np.ones((1, 2, 2), np.float32), idx, offsets, 6),  # [bags, features, dim]
        lambda: bag_sum_backward(np.ones((1, 2), np.float32), idx, offsets, 6),  # one gradient row for two bags
        lambda: bag_sum_backward(g, idx, np.array([0, 9, 4]), 6),  # out of order, the middle one past the index
        lambda: bag_sum_backward(g, idx, np.array([-1, 2, 4]), 6),
    ]
    for call in bad:
        with pytest.raises(FbrapidsError, match="bag_sum"):
            call()


@settings(max_examples=40, deadline=None)
@given(fields=st.integers(1, 5), per=st.integers(1, 9), dim=st.sampled_from([1, 3, 4, 8, 16]),
       max_len=st.integers(0, 4), mean=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_bags_pooled_side_by_side_are_embedding_bags_of_each_field(fields: int, per: int, dim: int, max_len: int,
                                                                   mean: bool, seed: int) -> None:
    """``bag_sum(..., fields=F)`` over bags laid out field after field (bag ``f * per + i``)
    writes bag ``(f, i)`` to row ``i * F + f``: read as ``[per, F, dim]`` it is torch's
    ``embedding_bag`` of every field, stacked on dim 1, to the bit (mean: empty bags 0). Its
    backward, given that layout's gradient, is ``embedding_bag``'s weight gradient, and the
    same bits as the field-major backward of the gradient transposed."""
    rng = np.random.default_rng(seed)
    m = 7
    rows = rng.standard_normal((m, dim)).astype(np.float32)
    lengths = rng.integers(0, max_len + 1, fields * per)
    idx = rng.integers(0, m, int(lengths.sum()))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    mode = "mean" if mean else "sum"
    weight = torch.from_numpy(rows.copy()).requires_grad_(True)
    want = F.embedding_bag(torch.from_numpy(idx), weight, torch.from_numpy(offsets[:-1]), mode=mode)
    stacked = want.view(fields, per, dim).transpose(0, 1)  # [per, fields, dim]
    got = bag_sum(rows, idx, offsets, mean, fields)
    assert np.array_equal(got.reshape(per, fields, dim), stacked.detach().numpy())
    grad = rng.standard_normal((per, fields, dim)).astype(np.float32)
    (stacked * torch.from_numpy(grad)).sum().backward()
    back = bag_sum_backward(grad.reshape(per * fields, dim), idx, offsets, m, mean, fields)
    assert weight.grad is not None
    assert np.allclose(back, weight.grad.numpy(), atol=1e-5)
    field_major = np.ascontiguousarray(grad.transpose(1, 0, 2)).reshape(fields * per, dim)
    assert np.array_equal(back, bag_sum_backward(field_major, idx, offsets, m, mean))
    for bad in (0, fields * per + 1):  # bags that are no whole runs of the fields
        with pytest.raises(FbrapidsError, match="fields"):
            bag_sum(rows, idx, offsets, mean, bad)


def _sparse_batch(rng: np.random.Generator, b: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    out = {}
    for name, max_len, space in (("a", 1, 40), ("l", 6, 300), ("s", 3, 60), ("e", 0, 10)):
        lens = np.ones(b, dtype=np.int64) if max_len == 1 else rng.integers(0, max_len + 1, b)
        vals = rng.integers(0, space, int(lens.sum())).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        offs = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
        out[name] = (torch.from_numpy(vals.view(np.int64)), torch.from_numpy(offs))
    return out


def test_stacked_lookup_matches_per_table_bags(device: str) -> None:
    """Same pooled values bit for bit; row gradients equal up to summation order."""
    rng = np.random.default_rng(3)
    cfg = StoreConfig(dim=4, cache_rows=512, optimizer="sgd", lr=0.0)  # lr 0: the weights stay put
    feats = ["a", "l", "s", "e"]
    ebc = TieredEmbeddingBagCollection(feats, cfg, tables={"s": "l"}).to(device)  # "s" shares the table of "l"
    for _ in range(3):
        sp = {f: (v.to(device), o.to(device)) for f, (v, o) in _sparse_batch(rng, 37).items()}
        per = ebc.lookup(sp)  # the plain path: a leaf per table, embedding_bag per feature
        want = {f: F.embedding_bag(per[f][1], per[f][0], sp[f][1], mode="sum") for f in feats}
        assert {t.device.type for t in want.values()} == {device}
        w = {f: torch.randn(37, 4, device=device) for f in feats}
        sum((want[f] * w[f]).sum() for f in feats).backward()
        want_grad = {t: lk.rows.grad.clone() for (_, lk), t in zip(ebc._pending, ["a", "l", "e"])}
        ebc.apply_gradients()
        got = ebc.pooled_stack(sp)
        assert got.shape == (37, 4, 4)
        for k, f in enumerate(feats):
            assert torch.equal(got[:, k], want[f])
        (got * torch.stack([w[f] for f in feats], 1)).sum().backward()
        leaf, parts = ebc._stacked
        for (store, _, a, z), t in zip(parts, ["a", "l", "e"]):
            assert store is ebc.stores[t]
            assert torch.allclose(leaf.grad[a:z], want_grad[t], atol=1e-5)
        ebc.apply_gradients()
    assert all(s.step == 6 for s in ebc.stores.values())


@pytest.mark.parametrize("optimizer", ["adagrad", "sgd"])
def test_one_update_over_all_tables_equals_one_per_table(optimizer: str) -> None:
    rng = np.random.default_rng(5)
    cfg = StoreConfig(dim=8, cache_rows=1024, optimizer=optimizer, lr=0.3, admit_after=2)
    feats = ["a", "l", "s"]
    stacked = TieredEmbeddingBagCollection(feats, cfg)
    plain = TieredEmbeddingBagCollection(feats, cfg)
    for i in range(6):
        sp = _sparse_batch(rng, 64)
        out = stacked.pooled_stack(sp)
        wt = torch.sin(torch.arange(out.numel(), dtype=torch.float32) + i).reshape(out.shape)
        (out * wt).sum().backward()
        leaf, parts = stacked._stacked
        grads = [leaf.grad[a:z].clone() for _, _, a, z in parts]
        stacked.apply_gradients()  # one update over every table
        looked = plain.lookup(sp)
        for (store, lk), g in zip(plain._pending, grads):
            store.apply_gradients(lk, g)  # the same gradients, one table at a time
            store.end_step()
        plain._pending = []
        assert set(looked) == set(feats)
    for t in feats:
        ia, ra = stacked.stores[t].state()
        ib, rb = plain.stores[t].state()
        assert ia.tolist() == ib.tolist() and ra.tobytes() == rb.tobytes()
        assert stacked.stores[t].stats()["default_reads"] > 0  # the admission gate was exercised


def test_apply_gradients_regathers_rows_written_since_the_lookup() -> None:
    s = TieredEmbeddingStore(StoreConfig(dim=2, cache_rows=16, optimizer="sgd", lr=1.0))
    lk = s.lookup(np.array([7, 8]))
    s.assign(np.array([7]), np.array([[10.0, 20.0]]))  # a write between lookup and update
    lk.step = s.step  # (assign ended a step; keep the lookup current)
    s.apply_gradients(lk, torch.ones(2, 2))
    assert s.weights(np.array([7])).tolist() == [[9.0, 19.0]]
    rows = torch.tensor([[1.0, 2.0, 0.0]])
    sparse_update(rows, torch.tensor([[2.0, 2.0]]), StoreConfig(dim=2, lr=0.5))
    assert rows[0, 2].item() == 4.0


@pytest.mark.parametrize("self_interaction", [False, True])
def test_dot_interaction_matches_the_reference_in_value_and_gradient(self_interaction: bool) -> None:
    torch.manual_seed(0)
    n, b, d = 6, 9, 4
    m = DotInteraction(n, self_interaction)
    x = torch.randn(b, d, requires_grad=True)
    ly = torch.randn(b, n - 1, d, requires_grad=True)
    out = m(x, ly)
    wt = torch.randn_like(out)
    (out * wt).sum().backward()
    x2, ly2 = x.detach().clone().requires_grad_(), ly.detach().clone().requires_grad_()
    t = torch.cat([x2, *ly2.unbind(1)], dim=1).view(b, -1, d)
    z = torch.bmm(t, t.transpose(1, 2))
    off = 1 if self_interaction else 0
    li = torch.tensor([i for i in range(n) for j in range(i + off)])
    lj = torch.tensor([j for i in range(n) for j in range(i + off)])
    ref = torch.cat([x2, z[:, li, lj]], dim=1)
    (ref * wt).sum().backward()
    assert torch.allclose(out, ref, atol=1e-6)
    assert torch.allclose(x.grad, x2.grad, atol=1e-5) and torch.allclose(ly.grad, ly2.grad, atol=1e-5)
    assert torch.allclose(m(x, list(ly.unbind(1))), out)  # a list of [B, d] is the same input
    dbl = torch.randn(3, 4, 2, dtype=torch.double, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a: DotInteraction(4, self_interaction)(a[:, 0], a[:, 1:]), (dbl,))


def test_default_fused_adam_resumes_bit_for_bit(tmp_path) -> None:
    """fit's default dense optimizer (fused Adam) checkpoints and resumes exactly, in process."""
    from fbrapids.trainers import fit
    from fbrapids.trainers.fit import default_optimizer

    from _trainer_helpers import batches, ctr_frame, same_bits, small_model, snapshot, tiered

    assert default_optimizer([torch.nn.Parameter(torch.zeros(2))]).defaults.get("fused") is True
    df = ctr_frame(rows=640)
    straight = small_model(tiered(tmp_path / "a"))
    fit(straight, batches(df), max_steps=14, progress=False)
    first = small_model(tiered(tmp_path / "b"))
    fit(first, batches(df), max_steps=8, checkpoint_dir=tmp_path / "ckpt", progress=False)
    resumed = small_model(tiered(tmp_path / "c"), seed=99)
    res = fit(resumed, batches(df), max_steps=14, checkpoint_dir=tmp_path / "ckpt", progress=False)
    assert res.resumed_from is not None and len(res.losses) == 6
    assert same_bits(snapshot(straight), snapshot(resumed)) == []


@pytest.mark.parametrize("seed,scale,dim", [(0, 0.25, 16), (2**64 - 1, 0.1, 5), (12345, 1.0 / 3.0, 1), (7, 0.5, 37)])
def test_initial_rows_in_c_are_the_numpy_bits(seed: int, scale: float, dim: int) -> None:
    from fbrapids.trainers.sparse.hashmap import init_rows_into
    from fbrapids.trainers.sparse.init import init_rows, seed_mix

    rng = np.random.default_rng(seed % 1000)
    ids = np.concatenate([rng.integers(0, 2**63, 3000).astype(np.uint64) * np.uint64(3),
                          np.array([0, 2**64 - 1, 2**63], dtype=np.uint64)])
    out = np.full((len(ids), dim + 2), 7.0, dtype=np.float32)
    init_rows_into(ids, out, dim, seed_mix(seed), scale)
    assert out[:, :dim].tobytes() == init_rows(ids, dim, seed, scale).tobytes()
    assert (out[:, dim:] == 7.0).all()  # the columns after the embedding are left alone


def test_c_bookkeeping_refuses_rows_outside_its_arrays() -> None:
    from fbrapids.trainers.sparse.hashmap import cache_slots, pin_slots, store_touch

    loc = np.array([3, -1], dtype=np.int64)
    with pytest.raises(IndexError):
        cache_slots(np.array([0, 2]), loc)
    with pytest.raises(IndexError):
        pin_slots(np.array([5]), np.zeros(4, dtype=np.int64), 1)
    last = np.zeros(2, dtype=np.int64)
    with pytest.raises(IndexError):
        store_touch(np.array([1, 2]), np.array([1, 1]), loc, loc, np.zeros(2, bool), last, last.copy(), 3)
    assert last.tolist() == [0, 0]  # nothing written before the refusal


def test_stacked_training_batch_larger_than_the_cache_is_an_error_not_a_read_through(tmp_path) -> None:
    cfg = StoreConfig(dim=2, cache_rows=8, host_rows=8, ssd_dir=str(tmp_path))  # bounded tiers: a fixed cache
    ebc = TieredEmbeddingBagCollection(["a"], cfg)
    sp = {"a": (torch.arange(20), torch.arange(20))}
    with pytest.raises(RuntimeError, match="too small"):
        ebc.pooled_stack(sp)  # training: its gradients could not be applied
    ebc._drop_stale()
    with torch.no_grad():
        assert ebc.pooled_stack(sp).shape == (20, 1, 2)  # evaluation reads through
    # every row in RAM (host_rows=None) on the CPU: one RAM tier, which grows to hold the batch and trains it
    one = TieredEmbeddingBagCollection(["a"], StoreConfig(dim=2, cache_rows=8, optimizer="sgd", lr=1.0))
    one.pooled_stack(sp).sum().backward()
    one.apply_gradients()
    store = one.stores["a"]
    assert store.tiers.cache.slots.capacity >= 20 and store.stats()["cache"]["evictions"] == 0
    from fbrapids.trainers.sparse.init import init_rows
    want = init_rows(np.arange(20, dtype=np.uint64), 2, 0, 2 ** -0.5) - 1.0  # each row's gradient: ones
    assert np.array_equal(store.weights(np.arange(20)), want)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device for the device tier")
def test_stacked_path_on_cuda_matches_the_cpu() -> None:
    rng = np.random.default_rng(11)
    batches = [_sparse_batch(rng, 48) for _ in range(4)]
    out = {}
    for dev in ("cpu", "cuda"):
        ebc = TieredEmbeddingBagCollection(["a", "l", "s"], StoreConfig(dim=4, cache_rows=512, device=dev))
        for i, sp in enumerate(batches):
            sp = {k: (v.to(dev), o.to(dev)) for k, (v, o) in sp.items() if k != "e"}
            got = ebc.pooled_stack(sp)
            assert got.device.type == dev
            wt = torch.sin(torch.arange(got.numel(), dtype=torch.float32) + i).reshape(got.shape).to(dev)
            (got * wt).sum().backward()
            ebc.apply_gradients()
        out[dev] = {t: s.weights(s.state()[0]) for t, s in ebc.stores.items()}
    for t in out["cpu"]:
        assert np.allclose(out["cpu"][t], out["cuda"][t], atol=1e-5)
