"""fbrapids.ui.plot: each figure is checked for what it draws (bars, points, heights, labels)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from fbrapids.app.trials import TrialResult  # noqa: E402
from fbrapids.ui import plot  # noqa: E402


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
    assert not ax.texts  # the counts are over the bars below, never over the diagram's markers
    short = [str(n) if n < 1000 else f"{n / 1000:.1f}k" if n < 10_000 else f"{n / 1000:.0f}k" for n in b["count"]]
    assert [t.get_text() for t in bars.texts] == short
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
        "no change", "AUC delta (95% interval)", "GAUC delta (95% interval)"]
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
    assert "plot.trial_deltas(results, title=" in (root / "scripts" / "make_readme_figure.py").read_text()
    img = Image.open(root / "docs" / "images" / "feature_trial.png")
    two = plot.trial_deltas({"a": _trial(0.01, (0, 0.02), 0.0, (-0.01, 0.01)),
                             "b": _trial(0.01, (0, 0.02), 0.0, (-0.01, 0.01))})
    w, h = two.get_size_inches()
    assert img.size == (round(w * 110), round(h * 110))
    assert len(img.convert("L").getcolors(maxcolors=1 << 16) or []) > 50


README_TITLE = ("a planted and a noise column tried: 50,000 generated impressions, seed 0 (3 training seeds per arm, "
                "200 bootstrap rounds)")  # scripts/make_readme_figure.py's


@functools.lru_cache(maxsize=1)
def _figures() -> dict:
    rng = np.random.default_rng(2)
    p = rng.random(20_000) ** 3
    y = (rng.random(20_000) < p).astype(int)
    two = {"planted column": _trial(0.021, (0.017, 0.025), 0.02, (0.015, 0.026)),
           "noise column": _trial(-0.0003, (-0.0025, 0.0019), -0.0009, (-0.0042, 0.0024))}
    stats = {f"feature_{i:02d}": {"cache": {"hits": 9, "misses": 1}, "host": {"hits": 1, "misses": 1},
                                  "ssd": {"hits": 1, "misses": 0}} for i in range(12)}
    return {
        "training_curves": plot.training_curves(0.7 - 0.001 * np.arange(400), {200: 0.61, 400: 0.65}),
        "calibration": plot.calibration(y, p, bins=10),
        "store_hit_rates": plot.store_hit_rates(stats),
        "trial_deltas (README, titled)": plot.trial_deltas(two, title=README_TITLE),
        "trial_deltas (a TrialResult)": plot.trial_deltas(_trial(0.01, (0.0, 0.02), 0.0, (-0.01, 0.01), name="a")),
        "stage_seconds": plot.stage_seconds({"plan": 0.3, "extract+train": 4.0, "extract+evaluate": 1.0}),
    }


@pytest.mark.parametrize("dpi", [100, 110])
def test_no_figure_text_is_clipped(tmp_path, dpi):
    """Each figure saved as a PNG (the README's at 110 dpi, a notebook's at 100): everything
    drawn, measured by matplotlib's own extents after the save, lies inside the canvas."""
    from matplotlib.text import Text

    for name, fig in _figures().items():
        renderer = _saved(fig, tmp_path / "f.png", dpi)
        canvas = fig.bbox  # in the pixels of the save
        drawn = fig.get_tightbbox(renderer)  # inches: every artist drawn, text included
        w, h = fig.get_size_inches()
        assert (drawn.x0 >= -0.01 and drawn.y0 >= -0.01 and drawn.x1 <= w + 0.01 and drawn.y1 <= h + 0.01), \
            (name, drawn, (w, h))
        for t in fig.findobj(Text):
            if t.get_visible() and t.get_text().strip() and t.get_window_extent(renderer).width:
                box = t.get_window_extent(renderer)
                if t in _undrawn_ticks(fig):
                    continue
                assert canvas.x0 - 1 <= box.x0 and box.x1 <= canvas.x1 + 1, (name, t.get_text(), box, canvas)
                assert canvas.y0 - 1 <= box.y0 and box.y1 <= canvas.y1 + 1, (name, t.get_text(), box, canvas)
        assert plot.clipped_text(fig) == [], name


def _saved(fig, path, dpi: int = 100):
    """Save ``fig`` as a PNG at ``dpi`` through an Agg canvas; its renderer, at that dpi."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig.set_dpi(dpi)
    canvas = FigureCanvasAgg(fig)
    canvas.print_png(path)
    return canvas.get_renderer()


def _undrawn_ticks(fig) -> list:
    out = []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            out += [lab for tick in axis.get_major_ticks() + axis.get_minor_ticks()
                    if not lo - 1e-9 <= tick.get_loc() <= hi + 1e-9 for lab in (tick.label1, tick.label2)]
    return out


def test_trial_deltas_zero_line_inside_the_frame_and_calibration_counts_off_the_markers(tmp_path):
    fig = _figures()["trial_deltas (README, titled)"]
    lo, hi = fig.axes[0].get_ylim()
    assert lo < -0.0042 and hi > 0.026  # every interval and the zero line inside, not on the frame
    assert min(hi - 0.0, 0.0 - lo) > 0.05 * (hi - lo)
    fig = _figures()["calibration"]
    renderer = _saved(fig, tmp_path / "c.png")
    ax = fig.axes[0]
    marks = ax.transData.transform(np.column_stack(ax.lines[1].get_data()))
    from matplotlib.text import Text

    for t in fig.findobj(Text):
        if t.get_visible() and t.get_text().strip():
            box = t.get_window_extent(renderer)
            inside = [(x, y) for x, y in marks if box.x0 - 3 <= x <= box.x1 + 3 and box.y0 - 3 <= y <= box.y1 + 3]
            assert not inside, (t.get_text(), inside)
