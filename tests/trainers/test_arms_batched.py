"""A trial's arms side by side at the cost of about one (trainers/arms_batched.py): shared
tables whose rows hold every arm's vector, the dense parts batched, and each arm still the
model it would be trained alone, to float tolerance."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch
from hypothesis import given, settings, strategies as st

from fbrapids.trainers.arms import baseline_view, shuffled_view
from fbrapids.trainers.arms_batched import CHUNK_ROWS, BatchedArms, arm_chunks
from fbrapids.trainers.models import DLRM
from fbrapids.trainers.sparse import StoreConfig, TieredEmbeddingStore
from fbrapids.trainers.strategy import Arms

DENSE, SPARSE, NEW = ["d0", "d1", "dnew"], ["ad", "tags", "new"], ["new"]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class View:
    """A trial's arm view (placebo, shuffled or as is) that says what it reads, as
    app.trial_training.ArmView does."""

    def __init__(self, role: str, seed: int) -> None:
        self.role, self.seed = role, seed
        self.generator = torch.Generator().manual_seed(seed)

    def sources(self, features):
        key = {"baseline": "placebo", "aa": f"shuffled/{self.seed}", "candidate": "new"}[self.role]
        return {f: key if f in NEW else f for f in features}

    def __call__(self, batch):
        if self.role == "baseline":
            return baseline_view(batch, DENSE, ["dnew"], NEW)
        if self.role == "aa":
            return shuffled_view(batch, DENSE, ["dnew"], NEW, self.generator)
        return batch


def _model(kind: str, seed: int):
    from fbrapids.trainers.models import DeepFM, WideAndDeep

    cfg = StoreConfig(cache_rows=256, seed=seed)
    if kind == "dlrm":
        return DLRM(3, SPARSE, embedding_dim=4, bottom_mlp=[8], top_mlp=[8, 4], bias_vector=True, pooling="mean",
                    store=cfg)
    return (WideAndDeep if kind == "wide_deep" else DeepFM)(3, SPARSE, embedding_dim=4, deep_mlp=[8, 4],
                                                            pooling="mean", store=cfg)


def _arms(kind: str = "dlrm"):
    """Two seeds x (baseline, candidate, A/A): six models built as a trial builds them (each
    under its seed, the candidate's inputs zeroed), and their views."""
    from fbrapids.trainers.arms import zero_candidate_inputs

    models, views = [], []
    for seed in (3, 4):
        for role in ("baseline", "candidate", "aa"):
            torch.manual_seed(seed)
            m = _model(kind, seed)
            zero_candidate_inputs(m, DENSE, SPARSE, ["dnew"], NEW)
            models.append(m)
            views.append(View(role, seed))
    return models, views


@pytest.fixture(scope="module")
def batches():
    rng = np.random.default_rng(0)
    n = 96
    df = pd.DataFrame({"y": rng.integers(0, 2, n), "d0": rng.random(n), "d1": rng.normal(size=n),
                       "dnew": rng.random(n), "ad": rng.integers(0, 30, n), "new": rng.integers(0, 12, n),
                       "tags": pd.Series([list(rng.integers(0, 20, rng.integers(0, 4))) for _ in range(n)],
                                         dtype=pd.ArrowDtype(pa.list_(pa.int64())))})
    return list(df.fbx.stream(label="y", dense=DENSE, sparse=SPARSE, batch_size=32))


def _rows(store, ids, k=None):
    w = store.weights(np.asarray(ids, dtype=np.uint64))
    if k is None:
        return w
    d = store.config.slice_dim
    return w[:, k * d:(k + 1) * d]


@pytest.mark.parametrize("path", ["c", "torch"])
@pytest.mark.parametrize("kind", ["dlrm", "wide_deep", "deepfm"])
def test_each_arm_after_its_steps_equals_its_model_trained_alone(kind, path, batches, monkeypatch):
    """Six arms (2 seeds x baseline, candidate, A/A) of DLRM, Wide&Deep or DeepFM trained side
    by side, batched, for three steps equal the same six models trained one after another (fit's Arms strategy, each
    with its own stores and optimizer): every dense parameter, every arm's embedding rows of
    every table, and the held-out predictions, to float tolerance (the dense parameters held
    stacked while they train, a chunk's a slice of each stack); the tables the arms share
    are one store each (the baseline features: one of six slices), the candidate's own.
    The arms' dense parts run in chunks of two arms (one chunk per group of a real batch's
    arms: arms_batched.CHUNK_ROWS).  ``path``: the bags and DLRM's dots in C (host caches), or
    through ``embedding_bag`` and ``DotInteraction`` (the path of device caches), forced."""
    from fbrapids.trainers.arms_batched import SharedTables
    from fbrapids.trainers.fit import fit
    from fbrapids.trainers.fit_config import FitConfig

    if path == "torch":
        monkeypatch.setattr(SharedTables, "_pools_in_c", lambda self: False)
        monkeypatch.setattr("fbrapids.trainers.modules.arms_dots.fits", lambda x, bags, bias: False)

        def not_here(*args, **kwargs):
            raise AssertionError("a C pass ran on the forced torch path")

        for name in ("sparse.arms_bags.arms_bags", "sparse.arms_bags.arms_bags_backward", "modules.arms_dots.arms_dots"):
            monkeypatch.setattr(f"fbrapids.trainers.{name}", not_here)

    shared_models, shared_views = _arms(kind)
    alone_models, alone_views = _arms(kind)
    for a, b in zip(shared_models, alone_models):  # the two builds start equal
        assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    cfg = FitConfig(progress=False, calibrate=False, max_steps=3)
    monkeypatch.setattr("fbrapids.trainers.arms_batched.CHUNK_ROWS", 64)  # the dense parts in chunks of 2 arms
    batched = BatchedArms(shared_models, shared_views)
    assert len(batched.chunks(32)) == 3
    fit(batched, batches, cfg.with_(prefetch_rows=True))
    fit(Arms(alone_models, alone_views), batches, cfg.with_(prefetch_rows=False))
    ptrs = [p.data_ptr() for m in shared_models for p in m.parameters()]
    assert len(set(ptrs)) == len(ptrs) and batched.stacked is None  # trained stacked, then each its own storage again

    collections = [name for name, _ in shared_models[0].collections()]
    slices = {(g.collection, g.table, tuple(g.members)): g.store.config.slices for g in batched.tables.groups}
    assert len(slices) == 6 * len(collections)
    for c in collections:
        assert slices[(c, "ad", tuple(range(6)))] == 6 and slices[(c, "tags", tuple(range(6)))] == 6
        assert slices[(c, "new", (0, 3))] == 2 and slices[(c, "new", (1, 4))] == 2  # placebo; the candidate's ids
        assert slices[(c, "new", (2,))] == slices[(c, "new", (5,))] == 1  # each A/A arm's shuffled copy
    for k, (mine, alone) in enumerate(zip(shared_models, alone_models)):
        for (name, p), q in zip(mine.named_parameters(), alone.parameters()):
            assert not torch.equal(p, q.detach().clone().zero_()) and torch.allclose(p, q, atol=2e-6, rtol=1e-5), \
                (k, name, (p - q).abs().max())
    ids = {"ad": np.arange(30), "tags": np.arange(20), "new": np.arange(12)}
    for g in batched.tables.groups:
        for j, k in enumerate(g.members):
            alone = dict(alone_models[k].collections())[g.collection].stores[g.table]
            assert np.allclose(_rows(g.store, ids[g.table], j), _rows(alone, ids[g.table]), atol=2e-6), (g.table, k)
    first = next(g for g in batched.tables.groups if g.collection == collections[-1] and g.table == "ad")
    assert not np.allclose(_rows(first.store, ids["ad"]), TieredEmbeddingStore(
        first.store.config).weights(np.arange(30, dtype=np.uint64)))  # trained: the rows moved from their start
    held = batches[0]
    together = batched.predict(held)
    for k, (m, v) in enumerate(zip(alone_models, alone_views)):
        if v.role == "aa":  # (its view draws a permutation per call: compared through its parameters above)
            continue
        m.eval()
        with torch.no_grad():
            assert torch.allclose(together[k], m.predict(v(held)), atol=1e-5), k


@pytest.mark.parametrize("dim", [2, 6, 16])
def test_a_sliced_table_is_its_slices_tables_side_by_side(dim):
    """A store of 3 slices (seeds 5, 6, 7) starts each slice as a table of that seed would,
    and its row-wise Adagrad moves each slice as that table's (its own accumulator), bit for bit:
    slices of 2 and 6 columns (a width the C update runs as any) and of 16 (one it is built for,
    in vector lanes)."""
    ids = np.array([4, 9, 4, 2**64 - 3], dtype=np.uint64)
    shared = TieredEmbeddingStore(StoreConfig(dim=3 * dim, slices=3, slice_seeds=(5, 6, 7), cache_rows=16, lr=0.3))
    alone = [TieredEmbeddingStore(StoreConfig(dim=dim, seed=s, cache_rows=16, lr=0.3)) for s in (5, 6, 7)]
    assert shared.config.width == 3 * dim + 3 and shared.config.scale == alone[0].config.scale
    grad = torch.from_numpy(np.random.default_rng(1).normal(size=(3, 3 * dim)).astype(np.float32))
    lk = shared.lookup(ids)
    lk.rows.grad = grad
    shared.apply_gradients(lk)
    for k, s in enumerate(alone):
        lk1 = s.lookup(ids)
        start = lk1.rows.detach().numpy().copy()
        cols = slice(dim * k, dim * (k + 1))
        assert np.array_equal(start, lk.rows.detach().numpy()[:, cols])  # the same initial rows
        lk1.rows.grad = grad[:, cols].contiguous()
        s.apply_gradients(lk1)
        assert np.array_equal(shared.weights(ids)[:, cols], s.weights(ids))  # bit for bit
        assert not np.allclose(s.weights(ids)[:1], start[:1])


def test_held_out_predictions_side_by_side_admit_no_id_as_served(batches):
    """A trial's held-out pass reads its tables as served: ids training never saw (ads 100-129,
    candidate ids 50-61) read the default row and are counted, and no table gains a row, the
    shared stores of batched arms and each arm's own alike; each model's score through the
    Arms strategy is bit for bit the one ``fit.predict`` (read-only) gives it alone."""
    from fbrapids.trainers.fit import fit, predict
    from fbrapids.trainers.fit_config import FitConfig
    from fbrapids.trainers.side_by_side import predict_side_by_side

    rng = np.random.default_rng(1)
    n = 64
    held = list(pd.DataFrame({"y": rng.integers(0, 2, n), "d0": rng.random(n), "d1": rng.normal(size=n),
                              "dnew": rng.random(n), "ad": rng.integers(100, 130, n), "new": rng.integers(50, 62, n),
                              "tags": pd.Series([list(rng.integers(0, 20, 2)) for _ in range(n)],
                                                dtype=pd.ArrowDtype(pa.list_(pa.int64())))})
                .fbx.stream(label="y", dense=DENSE, sparse=SPARSE, batch_size=32))
    cfg = FitConfig(progress=False, calibrate=False, max_steps=3)
    shared_models, views = _arms("dlrm")
    batched = BatchedArms(shared_models, views)
    fit(batched, batches, cfg)
    stores = [g.store for g in batched.tables.groups]
    rows = [len(s) for s in stores]
    predict_side_by_side(shared_models, held, views=views, progress=False, strategy=batched)
    assert [len(s) for s in stores] == rows
    assert sum(s.unseen_reads for s in stores) > 0 and not any(s.read_only for s in stores)

    alone_models, views = _arms("dlrm")
    fit(Arms(alone_models, views), batches, cfg)
    own = [s for m in alone_models for s in m.stores().values()]
    rows = [len(s) for s in own]
    preds = predict_side_by_side(alone_models, held, views=views, progress=False)
    assert [len(s) for s in own] == rows and sum(s.unseen_reads for s in own) > 0
    for k, (m, v) in enumerate(zip(alone_models, views)):
        if v.role == "aa":  # (its view draws a permutation per call)
            continue
        assert np.array_equal(preds[k]["pred"], predict(m, [v(b) for b in held], progress=False)["pred"]), k


@settings(max_examples=200, deadline=None)
@given(arms=st.integers(0, 80), rows=st.integers(1, 3 * CHUNK_ROWS))
def test_arm_chunks_are_numpys_even_split_into_as_few_groups_as_hold_them(arms, rows):
    """The arms in order, in the fewest groups of at most CHUNK_ROWS rows (one arm a group where
    a batch alone is larger), sized as ``numpy.array_split`` sizes that many groups."""
    chunks = arm_chunks(arms, rows)
    per = max(1, CHUNK_ROWS // rows)
    assert len(chunks) == -(-arms // per)
    expected = [(int(a[0]), int(a[-1]) + 1) for a in np.array_split(np.arange(arms), len(chunks))] if arms else []
    assert [(c.start, c.stop) for c in chunks] == expected
    assert all(c.stop - c.start <= per for c in chunks)
