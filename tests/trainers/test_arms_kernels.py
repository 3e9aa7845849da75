"""The C passes of a trial's batched arms against torch computed from the definitions:
the arms' bags pooled from shared stores (trainers/sparse/arms_bags.py) against
``torch.nn.functional.embedding_bag`` on each arm's slice, and DLRM's dot interactions of
the arms (trainers/modules/arms_dots.py) against ``T @ T^T`` and its lower triangle; both
backwards against torch's autograd of those references, on hypothesis shapes; the same bits
on 1 and 2 threads and in either form of the dots' loops (sixteen lanes, where the machine has
AVX-512, and eight); bad input named."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from fbrapids.errors import ArgumentError, FbrapidsError
from fbrapids.trainers.modules.arms_dots import arms_dots, loop_form, loop_forms
from fbrapids.trainers.sparse.arms_bags import BagEntry, arms_bags, arms_bags_backward

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _threads(n: int):
    class _Set:
        def __enter__(self):
            self.before = torch.get_num_threads()
            torch.set_num_threads(n)

        def __exit__(self, *exc):
            torch.set_num_threads(self.before)

    return _Set()


# -- bags -----------------------------------------------------------------------------------
@st.composite
def stores(draw, bags: tuple[int, int] = (1, 40), arms: tuple[int, int] = (1, 5), feats: tuple[int, int] = (1, 4)):
    """Arms, features, shared stores: each feature's stores a random partition of the arms
    into groups (each group one store of its members' slices, members in a random order), or
    the stores of the feature before (a table two features read); bags of 0-3 ids (empty bags
    among them); ``bags`` / ``arms`` / ``feats``: the ranges their counts are drawn from."""
    m = draw(st.integers(*arms))
    nfeat = draw(st.integers(*feats))
    nbags = draw(st.integers(*bags))
    dim = draw(st.sampled_from([1, 4, 8, 16, 24]))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    groups, before = [], []
    for f in range(nfeat):
        if before and rng.random() < 0.4:  # the feature before's table: its stores, ids of its own
            stores = [(store, members, rows) for store, members, rows in before]
        else:
            order = rng.permutation(m)
            cuts = sorted(rng.choice(np.arange(1, m), size=rng.integers(0, m), replace=False)) if m > 1 else []
            stores = [(len(groups) + k, [int(a) for a in members],
                       torch.from_numpy(rng.standard_normal((int(rng.integers(1, 30)), len(members) * dim))
                                        .astype(np.float32)))
                      for k, members in enumerate(np.split(order, cuts))]
        for store, members, rows in stores:
            lengths = rng.integers(0, 4, size=nbags)
            offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
            idx = rng.integers(0, len(rows), size=int(lengths.sum())).astype(np.int64)
            groups.append((store, f, members, rows, torch.from_numpy(idx), torch.from_numpy(offsets)))
        before = stores
    return m, nfeat, nbags, dim, groups, draw(st.booleans())


def _reference_bags(m, nfeat, nbags, dim, groups, mean):
    """Each arm's bags from embedding_bag over its slice of each store's rows, with autograd
    (one leaf per store)."""
    out = torch.zeros(m, nbags, nfeat, dim)
    leaves: dict[int, torch.Tensor] = {}
    for store, f, members, rows, idx, offsets in groups:
        leaf = leaves.setdefault(store, rows.clone().requires_grad_())
        for j, a in enumerate(members):
            out[a, :, f] = torch.nn.functional.embedding_bag(idx, leaf[:, j * dim:(j + 1) * dim], offsets,
                                                             mode="mean" if mean else "sum")
    return out, leaves


@SETTINGS
@given(stores())
def test_bags_equal_embedding_bag_on_each_arms_slice_and_so_do_their_gradients(case):
    _bags_and_gradients_against_embedding_bag(case)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stores(bags=(2100, 2600), arms=(2, 7), feats=(2, 4)))
def test_batches_large_enough_for_two_threads_give_the_one_thread_bits(case):
    """Batches past the C passes' threshold for a second thread (bags times entries at least
    4,096; the cases above stay under it): the forward's bags (split over the threads by bag)
    and the backward's rows' gradients (by store) equal the reference, and are the same bits
    on 1 and 2 threads.  Whole numbers in the rows and the gradients, summed: every sum is
    exact in any order (a row's gradient here sums hundreds of occurrences), so the
    reference's bits are the answer."""
    m, nfeat, nbags, dim, groups, _ = case
    assert nbags * len(groups) >= 4096  # (the threshold: fbx_arms_bags_backward's FBX_PAR_ROWS / 2)
    whole = [(store, f, members, (rows * 4).round(), idx, offsets) for store, f, members, rows, idx, offsets in groups]
    _bags_and_gradients_against_embedding_bag((m, nfeat, nbags, dim, whole, False), exact=True)


def _bags_and_gradients_against_embedding_bag(case, exact: bool = False):
    m, nfeat, nbags, dim, groups, mean = case
    ref, leaves = _reference_bags(m, nfeat, nbags, dim, groups, mean)
    entries = [BagEntry(rows, idx, offsets, f, members) for _, f, members, rows, idx, offsets in groups]
    outs = {}
    for threads in (1, 2):
        out = torch.full((m, nbags, nfeat, dim), float("nan"))
        with _threads(threads):
            arms_bags(entries, list(out), mean=mean)
        outs[threads] = out
    assert torch.equal(outs[1], ref.detach()) if exact else torch.allclose(outs[1], ref.detach(), atol=1e-6, rtol=1e-5)
    assert torch.equal(outs[1], outs[2])  # the same bits for any thread count

    grad = torch.randn(m, nbags, nfeat, dim, generator=torch.Generator().manual_seed(1))
    if exact:
        grad = (grad * 4).round()
    (ref * grad).sum().backward()
    for threads in (1, 2):
        into = {store: torch.full_like(rows, float("nan")) for store, _, _, rows, _, _ in groups}  # one per store, written (not added into)
        for e, (store, *_) in zip(entries, groups):
            e.grad = into[store]
        with _threads(threads):
            arms_bags_backward(entries, list(grad), mean=mean)
        for e, (store, *_) in zip(entries, groups):
            g = leaves[store].grad
            assert torch.equal(e.grad, g) if exact else torch.allclose(e.grad, g, atol=1e-5, rtol=1e-5)
        if threads == 1:
            first = [e.grad.clone() for e in entries]
        else:
            assert all(torch.equal(a, e.grad) for a, e in zip(first, entries))


@SETTINGS
@given(stores(), st.integers(0, 3), st.booleans())
def test_rows_read_where_they_lie_in_a_table_are_the_gathered_rows_bits(case, state, unseen):
    """Each store's rows scattered among other rows of a wider table (``state`` columns
    after the slices, as a cache table holds the optimizer's state), read through the
    ``rowmap``: the same bags and the same gradients, bit for bit, as from the rows gathered.
    With ``unseen``, some rows are ids never admitted: -1 in the ``rowmap`` (a prediction's
    lookup leaves its rows in place so), zeros among the gathered rows (the default row)."""
    m, nfeat, nbags, dim, groups, mean = case
    rng = np.random.default_rng(nbags * 7 + state)
    tables: dict[int, tuple[torch.Tensor, np.ndarray, torch.Tensor]] = {}
    for store, _, members, rows, _, _ in groups:
        if store not in tables:
            n, width = rows.shape
            table = torch.from_numpy(rng.standard_normal((n + int(rng.integers(0, 20)), width + state))
                                     .astype(np.float32))
            at = rng.permutation(len(table))[:n].astype(np.int64)
            if unseen:
                at[rng.random(n) < 0.4] = -1
            kept = torch.from_numpy(at >= 0)
            table[torch.from_numpy(at[at >= 0]), :width] = rows[kept]
            tables[store] = (table, at, torch.where(kept[:, None], rows, torch.zeros_like(rows)))
    gathered = [BagEntry(tables[store][2], idx, offsets, f, members) for store, f, members, _, idx, offsets in groups]
    in_place = [BagEntry(tables[store][0], idx, offsets, f, members, rowmap=tables[store][1],
                         table_width=rows.shape[1]) for store, f, members, rows, idx, offsets in groups]
    grad = torch.randn(m, nbags, nfeat, dim, generator=torch.Generator().manual_seed(2))
    for threads in (1, 2):
        outs = []
        for entries in (gathered, in_place):
            out = torch.full((m, nbags, nfeat, dim), float("nan"))
            with _threads(threads):
                arms_bags(entries, list(out), mean=mean)
            outs.append(out)
        assert torch.equal(outs[0], outs[1])
        grads = []
        for entries in (gathered, in_place):
            into = {store: torch.full_like(rows, float("nan")) for store, _, _, rows, _, _ in groups}
            for e, (store, *_) in zip(entries, groups):
                e.grad = into[store]
            with _threads(threads):
                arms_bags_backward(entries, list(grad), mean=mean)
            grads.append([e.grad for e in entries])
        assert all(torch.equal(a, b) for a, b in zip(*grads))



def test_a_row_outside_its_table_is_named_before_any_work():
    table = torch.zeros(4, 3)
    out = torch.full((1, 1, 1, 2), 7.0)
    bad = BagEntry(table, torch.tensor([0, 1]), torch.tensor([0]), 0, [0], rowmap=np.array([1, 4]), table_width=2)
    with pytest.raises(FbrapidsError, match="outside its table"):
        arms_bags([bad], list(out), mean=False)
    below = BagEntry(table, torch.tensor([0, 1]), torch.tensor([0]), 0, [0], rowmap=np.array([1, -2]), table_width=2)
    with pytest.raises(FbrapidsError, match="outside its table"):  # (-1 alone is a place: the default row)
        arms_bags([below], list(out), mean=False)
    assert (out == 7.0).all()
    with pytest.raises(ArgumentError, match="table_width"):
        BagEntry(table, torch.tensor([0]), torch.tensor([0]), 0, [0], rowmap=np.array([1]), table_width=4)


def test_bags_of_arms_not_wanted_or_without_gradient_are_left_alone():
    rows = torch.arange(8, dtype=torch.float32).view(2, 4)  # two arms of dim 2
    e = BagEntry(rows, torch.tensor([1]), torch.tensor([0]), feature=0, members=[1, 0])
    out = torch.zeros(1, 1, 2)
    arms_bags([e], [out, None], mean=False)  # arm 0 reads slice 1, arm 1 not wanted
    assert out.flatten().tolist() == [6.0, 7.0]
    e.grad = torch.full_like(rows, float("nan"))  # written: row 0, which no bag reads, and arm 0's slice are 0
    arms_bags_backward([e], [None, torch.ones(1, 1, 2)], mean=False)  # only arm 1 (slice 0) has a gradient
    assert e.grad.tolist() == [[0, 0, 0, 0], [1, 1, 0, 0]]
    arms_bags_backward([e], [None, None], mean=False)  # no gradient reached any arm: all 0
    assert e.grad.tolist() == [[0, 0, 0, 0], [0, 0, 0, 0]]
    two = torch.full((2, 1, 2, 2), 5.0)  # [arms, bags, features, dim]: no entry covers feature 1, so it is 0
    arms_bags([e], list(two), mean=False)
    assert two[:, :, 1].eq(0).all() and two[0, 0, 0].tolist() == [6.0, 7.0] and two[1, 0, 0].tolist() == [4.0, 5.0]


def test_bags_name_the_entry_with_an_index_outside_its_rows():
    good = BagEntry(torch.zeros(3, 2), torch.tensor([0, 2]), torch.tensor([0, 1]), feature=0, members=[0])
    bad = BagEntry(torch.zeros(3, 2), torch.tensor([0, 3]), torch.tensor([0, 1]), feature=1, members=[0])
    out = torch.zeros(1, 2, 2, 2)
    with pytest.raises(FbrapidsError, match=r"entry 1 \(feature 1, arms \[0\]\).*3 rows"):
        arms_bags([good, bad], list(out), mean=True)
    assert out.eq(0).all()  # checked before any work
    with pytest.raises(FbrapidsError, match="arms_bags"):
        arms_bags([BagEntry(torch.zeros(3, 2), torch.tensor([0]), torch.tensor([1, 0]), 0, [0])], list(out), mean=True)
    with pytest.raises(ArgumentError, match=r"entry 0 \(feature 0\) has 2 bags' offsets, the arms' blocks 3 bags"):
        arms_bags([good], list(torch.zeros(1, 3, 2, 2)), mean=True)  # (the C pass would read past its offsets)
    with pytest.raises(ArgumentError, match="contiguous float32"):
        BagEntry(torch.zeros(3, 2).double(), torch.tensor([0]), torch.tensor([0]), 0, [0])


# -- dots -----------------------------------------------------------------------------------
def _reference_dots(x, bags, bias, self_interaction):
    """``[x, lower triangle of T T^T]`` per sample, T = [x, bags, bias], from the definition."""
    m, b, d = x.shape
    fields = [x[:, :, None], bags] + ([bias[:, None, None].expand(m, b, 1, d)] if bias is not None else [])
    t = torch.cat(fields, dim=2)
    n = t.shape[2]
    z = t @ t.transpose(2, 3)
    li, lj = torch.tril_indices(n, n, offset=0 if self_interaction else -1)
    return torch.cat([x, z[:, :, li, lj]], dim=2)


@SETTINGS
@given(m=st.integers(1, 4), b=st.integers(1, 40), nf=st.integers(1, 9), d=st.sampled_from([1, 3, 8, 16, 24, 32]),
       with_bias=st.booleans(), self_interaction=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_dots_equal_the_lower_triangle_of_t_t_transposed_and_so_do_their_gradients(m, b, nf, d, with_bias,
                                                                                    self_interaction, seed):
    g = torch.Generator().manual_seed(seed)
    x, bags = torch.randn(m, b, d, generator=g), torch.randn(m, b, nf, d, generator=g)
    bias = torch.randn(m, d, generator=g) if with_bias else None
    leaves = [t.clone().requires_grad_() if t is not None else None for t in (x, bags, bias)]
    ref = _reference_dots(*leaves, self_interaction)
    grad = torch.randn(ref.shape, generator=g)
    (ref * grad).sum().backward()
    # the gradient as rows [M, B, width], or laid out by column [M, width, B] (as arms_linear gives it)
    by_column = grad.transpose(1, 2).contiguous().transpose(1, 2)
    assert torch.equal(by_column, grad) and (b == 1 or not by_column.is_contiguous())
    results = {}
    for threads, form, layout in [(n, f, g) for n in (1, 2) for f in loop_forms() for g in ("rows", "columns")]:
        mine = [t.clone().requires_grad_() if t is not None else None for t in (x, bags, bias)]
        with _threads(threads), loop_form(form):
            z = arms_dots(*mine, self_interaction)
            z.backward(grad if layout == "rows" else by_column)
        assert z.shape == ref.shape
        assert torch.allclose(z, ref, atol=1e-5, rtol=1e-5)
        for a, r in zip(mine, leaves):
            if a is not None:
                assert torch.allclose(a.grad, r.grad, atol=1e-4, rtol=1e-5)
        results[threads, form, layout] = [z.detach()] + [a.grad for a in mine if a is not None]
    # the same bits for any thread count, either form of the loops and either layout of the gradient
    first = results[1, loop_forms()[0], "rows"]
    assert all(torch.equal(p, q) for bits in results.values() for p, q in zip(first, bits))


def test_the_loops_refuse_a_form_this_machine_cannot_run():
    assert loop_forms()[-1] == "eight"
    with pytest.raises(ArgumentError, match="not one of this machine's forms"):
        with loop_form("thirty-two"):
            pass
    if loop_forms() == ("eight",):  # no AVX-512: the sixteen-lane form is compiled for it only
        with pytest.raises(ArgumentError, match="sixteen"):
            with loop_form("sixteen"):
                pass


def test_dots_refuse_what_they_do_not_fit():
    x, bags = torch.zeros(1, 2, 4), torch.zeros(1, 2, 3, 4)
    with pytest.raises(ArgumentError, match="do not fit together"):
        arms_dots(x, torch.zeros(1, 3, 3, 4), None)
    with pytest.raises(ArgumentError, match="float32 CPU"):
        arms_dots(x.double(), bags.double(), None)
    with pytest.raises(ArgumentError, match="float32 CPU"):
        arms_dots(torch.zeros(1, 2, 4), torch.zeros(1, 2, 200, 4), None)  # past the fields limit
