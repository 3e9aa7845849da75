"""Post-hoc calibration: a shift of the logits fitted by ``fit`` on the final model's
logits of batches held back from training, carried by the state dict, applied by ``predict`` / ``evaluate``, and kept
across a checkpoint and resume."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression

from fbrapids.trainers import StoreConfig, evaluate, fit, load_checkpoint, predict
from fbrapids.trainers.calibration import HOLD_EVERY, MIN_ROWS, HeldBack, fit_shift, intercept, platt
from fbrapids.trainers.sparse.store import read_only

from _trainer_helpers import batches, ctr_frame, same_bits, small_model, snapshot

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_platt_matches_sklearn_on_planted_data() -> None:
    rng = np.random.default_rng(3)
    z = rng.normal(0.0, 1.5, 20_000)
    y = (rng.random(len(z)) < 1 / (1 + np.exp(-(0.6 * z + 0.8)))).astype(float)
    a, b = platt(z, y)
    ref = LogisticRegression(C=1e9, tol=1e-10, max_iter=1000).fit(z[:, None], y)
    assert abs(a - ref.coef_[0, 0]) < 1e-4 and abs(b - ref.intercept_[0]) < 1e-4, (a, b, ref.coef_, ref.intercept_)
    assert abs(a - 0.6) < 0.05 and abs(b - 0.8) < 0.05  # and the planted values


def test_intercept_solves_the_score_equation_and_finds_the_planted_shift() -> None:
    """The shift with the slope held at 1: the root of sum(sigmoid(z + b)) = sum(y) (the
    intercept-only logistic regression's score equation), found here by scipy's brentq."""
    from scipy.optimize import brentq

    rng = np.random.default_rng(4)
    z = rng.normal(-2.0, 1.0, 40_000)
    y = (rng.random(len(z)) < 1 / (1 + np.exp(-(z - 0.4)))).astype(float)
    b = intercept(z, y)
    ref = brentq(lambda t: float(np.sum(1 / (1 + np.exp(-(z + t)))) - y.sum()), -5.0, 5.0, xtol=1e-12)
    assert abs(b - ref) < 1e-8 and abs(b + 0.4) < 0.05, (b, ref)


def test_held_back_keeps_the_newest_batches_and_round_trips() -> None:
    """Every HOLD_EVERY-th batch; the newest held ones up to the capacity in rows (older ones
    pushed out, to be trained on); its state reads back as the same batches."""
    frame = ctr_frame(rows=1024)
    bs = list(batches(frame, batch_size=64))
    held = HeldBack(capacity=128, every=HOLD_EVERY)
    pushed = []
    for i, b in enumerate(bs):
        if held.holds(i):
            pushed += held.add(b)
    held_at = [i for i in range(len(bs)) if i % HOLD_EVERY == HOLD_EVERY - 1]
    assert len(held_at) == 2 and held.rows == [64, 64] and pushed == []  # 128 rows: both kept
    held.add(bs[0])
    assert held.rows == [64, 64] and [id(b) for b in held.batches] == [id(bs[held_at[1]]), id(bs[0])]
    other = HeldBack(128)
    other.load(held.state())
    assert other.restored and other.rows == held.rows and other.spans == held.spans and other.open == held.open
    for x, y in zip(other.batches, held.batches):
        assert torch.equal(x.dense, y.dense) and torch.equal(x.label, y.label)
        assert all(torch.equal(x.sparse[k][0], v) and torch.equal(x.sparse[k][1], o) for k, (v, o) in y.sparse.items())
    assert fit_shift(np.zeros(8), np.zeros(8)) is None  # too few rows: nothing fitted


def _frozen_fit(frame, calibration_rows: int, epochs: int = 1):
    """A model whose weights do not move (zero learning rates), so its logits of the held
    rows at the end are its logits at any time, computed again here."""
    model = small_model(StoreConfig(cache_rows=1 << 14, lr=0.0))
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    stream = batches(frame)
    res = fit(model, stream, optimizer=opt, progress=False, calibration_rows=calibration_rows, epochs=epochs)
    assert stream.epoch == 0  # every pass in the first one's order: the same batches held back
    return model, res


@pytest.mark.parametrize("rows, kept, epochs", [(4096, 10, 1), (4096, 16, 2)])
def test_fit_calibrates_on_the_held_back_batches_and_never_trains_them(rows: int, kept: int, epochs: int) -> None:
    """The shift is the intercept of the final model's logits of the newest held batches
    (every HOLD_EVERY-th, read as served), to the click rate of the batches they stand for (each held batch
    and the HOLD_EVERY - 1 before it); the held ones are never trained on, those pushed out
    are; with two epochs the second pass reads the first's order and holds back the same ones."""
    frame = ctr_frame(rows=rows)
    bs = list(batches(frame))
    size = len(bs[0])
    model, res = _frozen_fit(frame, calibration_rows=kept * size, epochs=epochs)
    assert res.calibration is not None and model.calibration.tolist() == pytest.approx(list(res.calibration))
    held_at = [i for i in range(len(bs)) if i % HOLD_EVERY == HOLD_EVERY - 1][-kept:]
    # the kept ones: never trained on, in any pass
    assert len(res.losses) == epochs * (len(bs) - kept) and res.held_rows == kept * size
    model.set_calibration(1.0, 0.0)
    model.eval()
    with torch.no_grad(), read_only(model.stores().values()):  # as served: a held-only id reads the default row
        z = np.concatenate([model(bs[i]).numpy() for i in held_at])
    y = np.concatenate([bs[i].label.numpy() for i in held_at])
    spans = np.concatenate([bs[i].label.numpy() for i in range(held_at[0] - HOLD_EVERY + 1, held_at[-1] + 1)])
    assert res.calibration == pytest.approx((1.0, intercept(z, y, rate=spans.mean())), abs=1e-6)
    assert spans.mean() != y.mean()  # the spans' rate, not the held rows' own


def test_calibration_brings_the_mean_prediction_to_the_click_rate() -> None:
    """A model whose output bias is left off (it starts predicting ~0.9 and trains briefly):
    its held-out calibration (mean prediction / click rate) is far from 1; a frozen pass of
    ``fit`` over more rows of the same law calibrates it to about 1, at the same AUC.  (Over
    row orders the calibrated value spreads with an sd of ~0.05 here, 512 held rows and 4,096
    test rows: hence 0.15, and at least halving the error.)"""
    train, more, test = (ctr_frame(rows=n, seed=s) for n, s in ((1024, 1), (4096, 2), (4096, 3)))
    model = small_model(StoreConfig(cache_rows=1 << 14, lr=0.05))
    with torch.no_grad():
        model.top_l[-2].bias.fill_(2.0)
    fit(model, batches(train), optimizer=torch.optim.Adam(model.parameters(), lr=3e-4), progress=False,
        calibrate=False)
    for s in model.stores().values():  # frozen from here on
        s.optimizer.lr = 0.0
    fit(model, batches(more), optimizer=torch.optim.SGD(model.parameters(), lr=0.0), progress=False)
    after = evaluate(model, batches(test), progress=False)
    # the same model uncalibrated (evaluation reads the tables as served: the frozen pass admitted
    # ids of the test rows, so the model before it is not the one to compare)
    fitted = model.calibration.clone()
    model.set_calibration(1.0, 0.0)
    before = evaluate(model, batches(test), progress=False)
    model.calibration.copy_(fitted)
    assert abs(before["calibration"] - 1) > 0.3, before
    assert abs(after["calibration"] - 1) < min(0.15, abs(before["calibration"] - 1) / 2), (before, after)
    assert after["logloss"] < before["logloss"], (before, after)
    assert after["auc"] == pytest.approx(before["auc"], abs=1e-6)  # a monotone map: the ranking is kept


def test_calibration_is_saved_and_an_old_state_dict_loads_as_identity(tmp_path) -> None:
    frame = ctr_frame(rows=2048)
    model = small_model(StoreConfig(cache_rows=1 << 14))
    res = fit(model, batches(frame), progress=False, checkpoint_dir=tmp_path / "ck")
    assert res.calibration is not None and len(frame) >= MIN_ROWS
    other = small_model(StoreConfig(cache_rows=1 << 14), seed=5)
    load_checkpoint(other, None, tmp_path / "ck")
    assert torch.equal(other.calibration, model.calibration) and other.calibration.tolist() != [1.0, 0.0]
    p1, p2 = (predict(m, batches(frame), progress=False)["pred"] for m in (model, other))
    np.testing.assert_array_equal(p1, p2)
    state = {k: v for k, v in model.state_dict().items() if k != "calibration"}  # written before it existed
    other.load_state_dict(state)
    assert other.calibration.tolist() == [1.0, 0.0]


def test_a_shrinking_calibration_keeps_the_logits_order() -> None:
    """A calibration with a tiny slope (a model that learned little) must not round nearby
    predictions into ties: the AUC of ``evaluate`` is the AUC of the raw logits (float32
    probabilities tied hundreds of them and moved the AUC of ranks vs one process by 1e-5)."""
    from sklearn.metrics import roc_auc_score

    frame = ctr_frame(rows=512)
    model = small_model(StoreConfig(cache_rows=1 << 12))
    model.set_calibration(1e-4, -2.0)
    model.eval()
    with torch.no_grad():
        z = np.concatenate([model(b).numpy() for b in batches(frame)])
    got = predict(model, batches(frame), progress=False)
    assert len(np.unique(got["pred"])) == len(np.unique(z))
    assert evaluate(model, batches(frame), progress=False)["auc"] == pytest.approx(roc_auc_score(got["label"], z),
                                                                                   abs=1e-12)


def test_resumed_run_calibrates_as_an_unbroken_one(tmp_path) -> None:
    frame = ctr_frame(rows=4096)

    def run(ssd: str, steps: int, root=None, seed: int = 0):
        model = small_model(StoreConfig(cache_rows=1 << 14), seed=seed)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        res = fit(model, batches(frame), optimizer=opt, max_steps=steps, progress=False, checkpoint_dir=root,
                  calibration_rows=300)
        return model, res

    run("a", 60, tmp_path / "ck")  # held: batches 7, 15, ..., 55 (7 of them), kept in the checkpoint
    resumed, res = run("b", 120, tmp_path / "ck", seed=9)
    assert res.resumed_from is not None and len(res.losses) == 60 - 8 + 5  # 8 held, 5 older ones trained late
    straight, res2 = run("c", 120)
    assert res.calibration is not None and res.held_rows == 10 * 32
    assert res.calibration == res2.calibration and same_bits(snapshot(straight), snapshot(resumed)) == []


def test_too_few_held_rows_are_trained_on_at_the_end() -> None:
    """1,024 rows in batches of 32: 4 held batches, 128 rows, under MIN_ROWS: no shift is
    fitted, and the held batches are trained on after all (nothing withheld for nothing)."""
    frame = ctr_frame(rows=1024)
    model = small_model(StoreConfig(cache_rows=1 << 14))
    res = fit(model, batches(frame), progress=False)
    n = len(list(batches(frame)))
    assert 4 * 32 < MIN_ROWS and res.calibration is None and res.held_rows == 0
    assert len(res.losses) == n == res.steps and model.calibration.tolist() == [1.0, 0.0]


@pytest.mark.parametrize("kept", [None, MIN_ROWS // 32 + 2])
def test_the_batch_after_a_held_one_is_prepared_beside_the_step_before_and_trains_the_same(
        monkeypatch, kept: int | None) -> None:
    """Where the next batch is held back, the step prepares the one after it (the next one
    trained), so every lookup but the first finds its rows prepared ahead; the held batches
    stay unprepared (their ids unseen, as served), and the model trains to the same bits as
    one whose batches are never prepared.  (Preparing nothing there, as before, left every
    HOLD_EVERY-th lookup to wait for its batch's own prepare.)  ``kept``: held batches kept
    (None: all); older ones pushed out are trained at once, before the batch prepared for
    the step, which then looks its own up."""
    from fbrapids.trainers import strategy
    from fbrapids.trainers.fit_config import FitConfig

    frame = ctr_frame(rows=4096)
    told: list[tuple[bool, object]] = []  # each step: whether its batch was prepared ahead, and the batch told
    before = strategy.prepare_before_lookup

    def watched(tables, current, upcoming):
        told.append((tables.prepared_next(), upcoming))
        return before(tables, current, upcoming)

    monkeypatch.setattr(strategy, "prepare_before_lookup", watched)
    cfg = StoreConfig(cache_rows=1 << 10, lr=0.05)
    rows = 1 << 16 if kept is None else kept * 32  # (batches of 32 rows)
    model = small_model(cfg)
    res = fit(model, batches(frame), progress=False, calibration_rows=rows)
    bs = list(batches(frame))  # the same stream again: the same batches in the same order
    held = [bs[i] for i in range(len(bs)) if i % HOLD_EVERY == HOLD_EVERY - 1]
    n_kept = len(held) if kept is None else kept
    assert len(held) >= n_kept >= 8 and len(res.losses) == len(bs) - n_kept and res.held_rows == n_kept * 32
    prepared = [b for _, b in told if b is not None]
    assert not any(torch.equal(b.dense, h.dense) for b in prepared for h in held[-n_kept:])
    if kept is None:
        assert len(told) == len(res.losses)
        assert [ahead for ahead, _ in told] == [False] + [True] * (len(told) - 1)
        assert len(prepared) == len(told) - 1  # every trained batch but the first, none held
    monkeypatch.setattr(strategy, "prepare_before_lookup", before)
    plain = small_model(cfg)
    fit(plain, batches(frame), FitConfig(prefetch_rows=False, calibration_rows=rows, progress=False))
    assert same_bits(snapshot(model), snapshot(plain)) == []
