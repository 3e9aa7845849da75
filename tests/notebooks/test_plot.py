"""fbrapids.plot: each figure is checked for what it draws (bars, points, heights, labels)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from fbrapids import plot  # noqa: E402
from fbrapids.trials import TrialResult  # noqa: E402


def test_training_curves_draw_every_step_the_average_and_the_auc_points():
    rng = np.random.default_rng(0)
    losses = 0.7 * np.exp(-np.arange(300) / 100) + 0.05 * rng.random(300)
    fig = plot.training_curves(losses, {100: 0.61, 200: 0.65, 300: 0.67}, smooth=50)
    loss_ax, auc_ax = fig.axes
    raw, avg = loss_ax.lines
    assert len(raw.get_xdata()) == 300 and raw.get_ydata()[0] == pytest.approx(losses[0])
    assert len(avg.get_xdata()) == 251 and avg.get_ydata()[0] == pytest.approx(losses[:50].mean())
    assert list(auc_ax.lines[0].get_xdata()) == [100, 200, 300]
    assert list(auc_ax.lines[0].get_ydata()) == [0.61, 0.65, 0.67]
    labels = [t.get_text() for t in loss_ax.get_legend().get_texts()]
    assert labels == ["loss per step", "moving average (50 steps)", "held-out AUC"]
    assert (loss_ax.get_xlabel(), loss_ax.get_ylabel(), auc_ax.get_ylabel()) == ("step", "log loss", "held-out AUC")
    assert len(plot.training_curves(losses[:10]).axes) == 1  # no AUC: no second axis, no average


def test_calibration_points_and_counts_match_the_buckets():
    rng = np.random.default_rng(1)
    p = rng.random(5000) ** 2
    y = (rng.random(5000) < p).astype(int)  # calibrated by construction
    fig = plot.calibration(y, p, bins=10)
    ax, bars = fig.axes
    diag, model = ax.lines
    assert list(diag.get_xdata()) == [0, 1]
    b = plot.calibration_bins(y, p, 10)
    assert len(model.get_xdata()) == len(b["count"]) == 10
    for i in range(10):
        sel = (p >= i / 10) & (p < (i + 1) / 10)
        assert b["count"][i] == sel.sum()
        assert model.get_ydata()[i] == pytest.approx(y[sel].mean())
        assert model.get_xdata()[i] == pytest.approx(p[sel].mean())
    assert np.abs(model.get_ydata() - model.get_xdata()).max() < 0.06  # calibrated data lies on the diagonal
    assert [r.get_height() for r in bars.patches] == b["count"].tolist()
    assert [t.get_text() for t in ax.texts] == [f"{int(n):,}" for n in b["count"]]
    assert ax.get_title() == "calibration (5,000 rows, 10 buckets)"
    with pytest.raises(ValueError, match="one length"):
        plot.calibration([0, 1], [0.5])


def test_store_hit_rates_one_bar_per_feature_and_tier():
    stats = {
        "user_id": {"cache": {"hits": 30, "misses": 70}, "host": {"hits": 50, "misses": 20}, "ssd": {"hits": 20, "misses": 0}},
        "ad_id": {"cache": {"hits": 90, "misses": 10}, "host": {"hits": 10, "misses": 0}, "ssd": {"hits": 0, "misses": 0}},
    }
    fig = plot.store_hit_rates(stats)
    ax = fig.axes[0]
    heights = [round(r.get_height(), 4) for r in ax.patches]
    # bars go tier by tier (cache for both features, then host, then ssd); ssd of ad_id saw no lookups
    assert heights[:4] == [0.3, 0.9, round(50 / 70, 4), 1.0]
    assert heights[4] == 1.0 and np.isnan(ax.patches[5].get_height())
    assert [t.get_text() for t in ax.get_xticklabels()] == ["user_id", "ad_id"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["cache", "host", "ssd"]


def test_store_hit_rates_from_a_trained_model():
    import pandas as pd
    import torch

    import fbrapids  # noqa: F401  (the .fbx accessor)
    from fbrapids.trainers.fit import fit
    from fbrapids.trainers.models import DLRM
    from fbrapids.trainers.sparse import StoreConfig

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"click": rng.integers(0, 2, 256), "d0": rng.random(256),
                       "a": rng.integers(0, 4, 256), "b": rng.integers(0, 4096, 256)})
    model = DLRM(1, ["a", "b"], embedding_dim=4, bottom_mlp=[4], top_mlp=[4], store=StoreConfig(cache_rows=96))
    fit(model, df.fbx.stream(label="click", dense=["d0"], sparse=["a", "b"], batch_size=32), progress=False)
    rates = plot.hit_rates(model)
    assert set(rates) == {"a", "b"}
    for name, store in model.stores().items():
        c = store.stats()["cache"]
        assert rates[name.split("/")[-1]]["cache"] == c["hits"] / (c["hits"] + c["misses"])
    assert rates["a"]["cache"] > rates["b"]["cache"]  # 4 ids repeat in every batch; 4096 ids seldom do
    fig = plot.store_hit_rates(model)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == list(rates)


def _trial(d_auc, auc_iv, d_gauc, gauc_iv, name="x"):
    return TrialResult([name], {"auc": 0.7, "gauc": 0.6}, {"auc": 0.7 + d_auc, "gauc": 0.6 + d_gauc},
                       delta={"auc": d_auc, "gauc": d_gauc}, interval={"auc": auc_iv, "gauc": gauc_iv})


def test_trial_deltas_bars_error_bars_and_zero_line():
    results = {"slot x os": _trial(0.01, (0.004, 0.02), -0.003, (-0.01, 0.002)),
               "query x cat": _trial(-0.002, (-0.006, 0.001), 0.005, (0.001, 0.012))}
    fig = plot.trial_deltas(results)
    ax = fig.axes[0]
    assert list(ax.lines[0].get_ydata()) == [0.0, 0.0]  # the zero line
    heights = [round(r.get_height(), 6) for r in ax.patches]
    assert heights == [0.01, -0.002, -0.003, 0.005]
    caps = [c for c in ax.containers if hasattr(c, "errorbar") and c.errorbar is not None]
    assert len(caps) == 2
    auc_segments = caps[0].errorbar.lines[2][0].get_segments()
    assert [(round(s[0][1], 6), round(s[1][1], 6)) for s in auc_segments] == [(0.004, 0.02), (-0.006, 0.001)]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["slot x os", "query x cat"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "no change", "AUC delta (95% over seeds + users)", "GAUC delta (95% over seeds + users)"]
    single = plot.trial_deltas(_trial(0.01, (0.0, 0.02), 0.0, (-0.01, 0.01), name="a"))
    assert [t.get_text() for t in single.axes[0].get_xticklabels()] == ["a"]


def test_stage_seconds_bars():
    fig = plot.stage_seconds({"plan": 0.25, "extract+train": 3.5, "extract+evaluate": 1.0})
    ax = fig.axes[0]
    assert [r.get_width() for r in ax.patches] == [0.25, 3.5, 1.0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["plan", "extract+train", "extract+evaluate"]


def test_readme_picture_is_the_scripts_trial_plot():
    """The README shows docs/images/feature_trial.png, written by scripts/make_readme_figure.py
    through plot.trial_deltas (two candidates, 110 dpi): its size is that figure's."""
    from pathlib import Path

    from PIL import Image

    root = Path(__file__).resolve().parents[2]
    assert "](docs/images/feature_trial.png)" in (root / "README.md").read_text()
    assert "plot.trial_deltas(results)" in (root / "scripts" / "make_readme_figure.py").read_text()
    img = Image.open(root / "docs" / "images" / "feature_trial.png")
    two = plot.trial_deltas({"a": _trial(0.01, (0, 0.02), 0.0, (-0.01, 0.01)),
                             "b": _trial(0.01, (0, 0.02), 0.0, (-0.01, 0.01))})
    w, h = two.get_size_inches()
    assert img.size == (round(w * 110), round(h * 110))
    assert len(img.convert("L").getcolors(maxcolors=1 << 16) or []) > 50
