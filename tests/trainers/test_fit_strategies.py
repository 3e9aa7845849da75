"""``fit``'s one loop: the next batch's rows found in the background (admitted and placed in
one RAM tier) and the sparse update beside the dense step train the same bits as without
them and as the tiers with an SSD file; a trial's arms side by side are each model trained
alone; FitConfig and the one nan vocabulary."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fbrapids.errors import ArgumentError
from fbrapids.trainers import StoreConfig, fit
from fbrapids.trainers.calibration import HOLD_EVERY
from fbrapids.trainers.fit_config import FitConfig
from fbrapids.trainers.strategy import Arms

from _trainer_helpers import batches, ctr_frame, same_bits, small_model, snapshot, tiered

SERVED = ("served_cache", "served_host", "served_ssd", "served_new", "served_default", "rows", "admissions",
          "lookups", "unique_lookups")


def _use(store) -> bytes:
    """Each row's last step and use count (what LRU / LFU rank by, and checkpoints keep), by id."""
    d = store.directory
    n = len(store)
    order = np.argsort(d.all_ids())
    return d.last[:n][order].tobytes() + d.freq[:n][order].tobytes()


def _trained(store: StoreConfig, prefetch: bool, df) -> tuple[dict, dict]:
    model = small_model(store)
    fit(model, batches(df), FitConfig(prefetch_rows=prefetch, calibrate=False), progress=False)
    stats = {k: {f: s.stats()[f] for f in SERVED} | {"cache": s.stats()["cache"], "use": _use(s)}
             for k, s in model.stores().items()}
    return snapshot(model), {"stats": stats, "capacity": {k: s.tiers.cache.slots.capacity
                                                          for k, s in model.stores().items()}}


def test_background_rows_train_the_same_bits_as_the_foreground_and_the_tiers(tmp_path) -> None:
    """One RAM tier (a 16-row cache that grows) with the next batch's ids hashed, admitted and
    placed on the prefetch thread and the sparse update run there beside the dense step: the
    same weights, rows and optimizer state, bit for bit, as finding every batch's rows in the
    step, and as a bounded cache + host tier + SSD file; its counters are the step's too."""
    torch.set_num_threads(1)
    df = ctr_frame(rows=768)
    ram = StoreConfig(cache_rows=16, lr=0.05)
    ahead, ahead_info = _trained(ram, True, df)
    inline, inline_info = _trained(ram, False, df)
    tiers, _ = _trained(tiered(tmp_path / "ssd"), True, df)
    assert same_bits(ahead, inline) == [] and same_bits(ahead, tiers) == []
    assert ahead_info["stats"] == inline_info["stats"]  # rows placed ahead are counted new, as found in the step
    assert all(c > 16 for c in ahead_info["capacity"].values())  # grown: one RAM tier, nothing evicted
    assert all(s["cache"]["evictions"] == 0 and s["served_new"] > 0 for s in ahead_info["stats"].values())


def test_arms_side_by_side_are_each_model_trained_alone() -> None:
    """fit(Arms(models)) reads each batch once and steps every model on it: each model ends
    bit for bit as fit trains it alone on the same batches."""
    torch.set_num_threads(1)
    df = ctr_frame(rows=512)
    cfg = FitConfig(calibrate=False, prefetch_rows=False, progress=False)
    together = [small_model(StoreConfig(cache_rows=64, seed=s), seed=s) for s in (0, 1)]
    res = fit(Arms(together), batches(df), cfg)
    alone = [small_model(StoreConfig(cache_rows=64, seed=s), seed=s) for s in (0, 1)]
    for m in alone:
        assert fit(m, batches(df), cfg).steps == res.steps
    for a, b in zip(together, alone):
        assert same_bits(snapshot(a), snapshot(b)) == []
    assert len(res.losses) == 2 * res.steps  # a loss per arm per step


def test_fit_config_and_the_nan_words() -> None:
    cfg = FitConfig(epochs=2)
    assert cfg.with_(max_steps=3).max_steps == 3 and cfg.epochs == 2
    with pytest.raises(ArgumentError, match="fit has no option"):
        cfg.with_(epoch=1)
    with pytest.raises(ArgumentError, match="FitConfig.nan must be one of"):
        FitConfig(nan="ignore")
    with pytest.raises(ArgumentError, match=r"fit \(one process\): nan must be one of 'error', 'skip', 'warn' "
                                            r"\(got 'zero'; 'zero' replaces a dense input's NaN"):
        fit(small_model(StoreConfig(cache_rows=8)), [], nan="zero")
    with pytest.raises(ArgumentError, match="no checkpoints"):
        fit(Arms([small_model(StoreConfig(cache_rows=8))]), [], checkpoint_dir="/nonexistent")


@pytest.mark.parametrize("arms", [False, True])
def test_sparse_lr_decay_runs_each_pass_at_its_rate_and_restores_it(monkeypatch, arms: bool) -> None:
    """``sparse_lr_decay``: pass ``e`` updates every table at ``lr * decay ** e`` (one process
    and a trial's arms); the configured rate is back after ``fit``."""
    from fbrapids.trainers.sparse.optim import SGD

    seen: list[float] = []
    orig = SGD.update_table_

    def recording(self, table, slots, grad, dirty=None):
        seen.append(self.lr)
        return orig(self, table, slots, grad, dirty)

    monkeypatch.setattr(SGD, "update_table_", recording)
    df = ctr_frame(rows=128)
    model = small_model(StoreConfig(cache_rows=4096, optimizer="sgd", lr=0.4))
    target = Arms([model]) if arms else model
    steps = fit(target, batches(df), FitConfig(epochs=3, calibrate=False, sparse_lr_decay=0.5), progress=False).steps
    per_pass = steps // 3
    tables = len(seen) // steps
    assert tables >= 1 and len(seen) == steps * tables
    assert sorted(set(seen), reverse=True) == [0.4, 0.2, 0.1]
    assert seen[: per_pass * tables] == [0.4] * (per_pass * tables)
    assert seen[-per_pass * tables:] == [0.1] * (per_pass * tables)
    assert {s.optimizer.lr for s in model.stores().values()} == {0.4}


def test_sparse_lr_decay_is_checked() -> None:
    with pytest.raises(ArgumentError, match="sparse_lr_decay"):
        FitConfig(sparse_lr_decay=0.0)
    with pytest.raises(ArgumentError, match="sparse_lr_decay"):
        FitConfig(sparse_lr_decay=1.5)


def test_a_batch_held_back_for_calibration_is_never_prepared_its_ids_stay_unseen() -> None:
    """The next batch's rows are found ahead only when it is trained next: a batch held back
    for the calibration is predicted as served (an id training never saw reads the default
    row), so finding rows ahead changes neither the tables, nor the weights, nor the fitted
    shift, bit for bit (a prepare of a held batch used to admit its ids: rows it never trained)."""
    torch.set_num_threads(1)
    df = ctr_frame(rows=4096)  # 128 batches of 32: every 8th held back (512 rows, enough to calibrate on)
    out = {}
    for prefetch in (True, False):
        model = small_model(StoreConfig(cache_rows=16, lr=0.05))
        result = fit(model, batches(df), FitConfig(prefetch_rows=prefetch, calibration_rows=10**6), progress=False)
        out[prefetch] = (snapshot(model), result.calibration, result.held_rows,
                         {k: len(s) for k, s in model.stores().items()})
    assert out[True][2] > 0  # batches were held back
    assert same_bits(out[True][0], out[False][0]) == []
    assert out[True][1:] == out[False][1:]


def test_the_calibration_reads_its_held_rows_as_served_admitting_no_id(monkeypatch) -> None:
    """The held rows' logits the shift is fitted on are read as served (tables read-only): an
    id only a held-back batch holds reads the default row and is not admitted, so the tables
    saved hold exactly the ids trained on."""
    from fbrapids.trainers import strategy

    torch.set_num_threads(1)
    held: list = []
    hold = strategy.Strategy.hold
    monkeypatch.setattr(strategy.Strategy, "hold", lambda self, b, h, index=-1: held.append(b) or hold(self, b, h,
                                                                                                           index))
    df = ctr_frame(rows=4096)
    model = small_model(StoreConfig(cache_rows=16, lr=0.05))
    result = fit(model, batches(df), FitConfig(calibration_rows=10**6), progress=False)
    assert result.calibration is not None and held
    again = list(batches(df))  # the same stream read again: the same batches in the same order
    held_at = [k for k in range(len(again)) if k % HOLD_EVERY == HOLD_EVERY - 1]
    assert [b.label.tolist() for b in held] == [again[k].label.tolist() for k in held_at]  # those were held
    for f in ("ad", "user"):
        store = next(s for k, s in model.stores().items() if k.endswith("/" + f))
        seen = np.unique(np.concatenate([b.sparse[f][0].numpy() for k, b in enumerate(again) if k not in held_at]))
        only_held = np.setdiff1d(np.concatenate([b.sparse[f][0].numpy() for b in held]), seen)
        assert len(only_held) > 0
        assert (store.directory.get(only_held.astype(np.uint64)) < 0).all()
        assert len(store) == len(seen)


def test_a_run_stopped_at_max_steps_prepares_no_batch_after_its_last() -> None:
    """The batch after the last step is never trained on, so it is not prepared: the tables
    of a run stopped at ``max_steps`` hold the same ids, rows and bits with rows found ahead
    as without."""
    torch.set_num_threads(1)
    df = ctr_frame(rows=1536)
    out = {}
    for prefetch in (True, False):
        model = small_model(StoreConfig(cache_rows=16, lr=0.05))
        result = fit(model, batches(df), FitConfig(prefetch_rows=prefetch, max_steps=5, calibrate=False),
                     progress=False)
        out[prefetch] = (snapshot(model), len(result.losses), {k: len(s) for k, s in model.stores().items()})
    assert out[True][1] == 5
    assert same_bits(out[True][0], out[False][0]) == []
    assert out[True][2] == out[False][2]
