"""Figures a CTR engineer looks at: training curves, calibration, store hit rates, trial deltas.

Each function returns a ``matplotlib.figure.Figure`` built without pyplot (no global state,
no display needed), so it works in scripts, tests and notebooks alike (a notebook shows a
returned figure).  matplotlib is the optional ``plot`` extra: ``pip install 'fbrapids[plot]'``.

Example:
    >>> import numpy as np
    >>> fig = calibration(np.array([0, 1, 1, 0]), np.array([0.1, 0.8, 0.6, 0.3]), bins=2)
    >>> [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    ['perfectly calibrated', 'model']
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from fbrapids.errors import ArgumentError, PlotUnavailableError

if TYPE_CHECKING:  # (annotations only: matplotlib is imported when a figure is drawn)
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from fbrapids.ui.result_views import HasStores, TrialView

TIERS = ("cache", "host", "ssd")


def _figure(nrows: int = 1, ncols: int = 1, gridspec_kw: dict | None = None, *,
            figsize: tuple[float, float] | None = None, layout: Literal["constrained", "compressed", "tight"] | None = None) -> tuple[Figure, np.ndarray]:
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise PlotUnavailableError("fbrapids.ui.plot needs matplotlib: pip install 'fbrapids[plot]'") from exc
    fig = Figure(figsize=figsize, layout=layout)
    axes = fig.subplots(nrows, ncols, squeeze=False, gridspec_kw=gridspec_kw)
    return fig, axes


def _settled(fig: Figure) -> Figure:
    """``fig`` with its constrained layout run once before it is returned: tick labels that
    change with the axes' final size (``-0.015`` -> ``-0.0150``) are then known to the
    layout a save or a notebook display makes, so no label ends up past the canvas."""
    fig.draw_without_rendering()
    return fig


def training_curves(losses: Sequence[float], heldout_auc: Mapping[int, float] | None = None,
                    smooth: int = 50) -> Figure:
    """Training loss per step (raw and a moving average) and held-out AUC at the steps it
    was measured.

    Args:
        losses: the loss of every step (``FitResult.losses``, concatenated over calls).
        heldout_auc: step -> held-out AUC (e.g. measured after each epoch).
        smooth: moving-average window, in steps.

    Example:
        >>> fig = training_curves([0.7, 0.6, 0.5, 0.45], {2: 0.61, 4: 0.66}, smooth=2)
        >>> [ax.get_ylabel() for ax in fig.axes], len(fig.axes[1].lines[0].get_xdata())
        (['log loss', 'held-out AUC'], 2)
    """
    loss = np.asarray(losses, dtype=np.float64)
    fig, axes = _figure(1, 1, figsize=(7, 3.6), layout="constrained")
    ax = axes[0, 0]
    steps = np.arange(1, len(loss) + 1)
    ax.plot(steps, loss, color="#9bb7d4", linewidth=0.8, label="loss per step")
    if len(loss) >= smooth > 1:
        avg = np.convolve(loss, np.ones(smooth) / smooth, mode="valid")
        ax.plot(steps[smooth - 1:], avg, color="#1f4e79", linewidth=1.8, label=f"moving average ({smooth} steps)")
    ax.set_xlabel("step")
    ax.set_ylabel("log loss")
    ax.set_title("training")
    handles, labels = ax.get_legend_handles_labels()
    if heldout_auc:
        ax2 = ax.twinx()
        pts = sorted(heldout_auc.items())
        ax2.plot([s for s, _ in pts], [a for _, a in pts], "o-", color="#c0504d", label="held-out AUC")
        ax2.set_ylabel("held-out AUC")
        h2, l2 = ax2.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    ax.legend(handles, labels, loc="upper right", fontsize=8)
    return _settled(fig)


def calibration_bins(labels: npt.ArrayLike, preds: npt.ArrayLike, bins: int = 10) -> dict[str, np.ndarray]:
    """Equal-width buckets of predicted CTR: ``edges``, and per non-empty bucket ``pred``
    (mean prediction), ``observed`` (click rate) and ``count``.

    Example:
        >>> b = calibration_bins([0, 1, 1, 0], [0.1, 0.8, 0.6, 0.3], bins=2)
        >>> b["count"].tolist(), b["observed"].tolist()
        ([2, 2], [0.0, 1.0])
    """
    y = np.asarray(labels, dtype=np.float64)
    p = np.asarray(preds, dtype=np.float64)
    if y.shape != p.shape or y.ndim != 1:
        raise ArgumentError(f"labels and predictions must be 1-D of one length, got {y.shape} and {p.shape}")
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, bins - 1)
    count = np.bincount(which, minlength=bins)
    keep = count > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        pred = np.bincount(which, weights=p, minlength=bins) / count
        observed = np.bincount(which, weights=y, minlength=bins) / count
    return {"edges": edges, "pred": pred[keep], "observed": observed[keep], "count": count[keep],
            "bin": np.flatnonzero(keep)}


def calibration(labels: npt.ArrayLike, preds: npt.ArrayLike, bins: int = 10) -> Figure:
    """A reliability diagram: observed click rate against mean predicted CTR per bucket of
    predictions (the diagonal is perfect calibration), with each bucket's row count in a
    bar chart below, written above its bar (never over the diagram's markers).

    Example:
        >>> fig = calibration([0, 1, 1, 0, 1], [0.1, 0.8, 0.6, 0.3, 0.9], bins=4)
        >>> len(fig.axes[1].patches), fig.axes[0].get_xlabel()
        (4, 'mean predicted CTR')
    """
    b = calibration_bins(labels, preds, bins)
    fig, (ax, bars) = _calibration_axes()
    ax.plot([0, 1], [0, 1], linestyle="--", color="grey", label="perfectly calibrated")
    ax.plot(b["pred"], b["observed"], "o-", color="#1f4e79", label="model")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("mean predicted CTR")
    ax.set_ylabel("observed CTR")
    ax.set_title(f"calibration ({int(b['count'].sum()):,} rows, {bins} buckets)")
    ax.legend(loc="upper left", fontsize=8)
    width = 1.0 / bins
    lefts = b["edges"][b["bin"]]
    drawn = bars.bar(lefts, b["count"], width=width, align="edge", color="#9bb7d4", edgecolor="#1f4e79")
    bars.bar_label(drawn, labels=[_short_count(n) for n in b["count"]], fontsize=7, color="#555555", padding=1)
    bars.set_ylim(0, b["count"].max() * 1.3 if len(b["count"]) else 1)  # room for the counts above the bars
    bars.set_xlim(0, 1)
    bars.set_xlabel("predicted CTR bucket")
    bars.set_ylabel("rows")
    return _settled(fig)


def _short_count(n: int) -> str:
    """A bucket's row count in at most 4 characters, so that neighbouring labels never meet.

    Example:
        >>> [_short_count(n) for n in (7, 1234, 56_789, 3_400_000)]
        ['7', '1.2k', '57k', '3.4M']
    """
    n = int(n)
    for unit, size in (("M", 10**6), ("k", 10**3)):
        if n >= size:
            v = n / size
            return f"{v:.1f}{unit}" if v < 10 else f"{v:.0f}{unit}"
    return str(n)


def _calibration_axes() -> tuple[Figure, tuple[Axes, Axes]]:
    fig, axes = _figure(2, 1, figsize=(5.5, 6), layout="constrained", gridspec_kw={"height_ratios": [3, 1]})
    return fig, (axes[0, 0], axes[1, 0])


def store_hit_rates(model_or_stats: HasStores | Mapping[str, Mapping[str, object]]) -> Figure:
    """Per-feature hit rate of each embedding-store tier (cache, host RAM, SSD) as grouped bars.

    Args:
        model_or_stats: a trained model (its ``stores()``), or ``{feature: store.stats()}``.

    Example:
        >>> s = {"ad": {"cache": {"hits": 9, "misses": 1}, "host": {"hits": 1, "misses": 0}},
        ...      "user": {"cache": {"hits": 1, "misses": 3}, "host": {"hits": 2, "misses": 1}}}
        >>> fig = store_hit_rates(s)
        >>> len(fig.axes[0].patches), [t.get_text() for t in fig.axes[0].get_xticklabels()]
        (4, ['ad', 'user'])
    """
    rates = hit_rates(model_or_stats)
    names = list(rates)
    tiers = [t for t in TIERS if any(t in r for r in rates.values())]
    fig, axes = _figure(1, 1, figsize=(max(5.0, 0.6 * len(names) + 2), 3.6), layout="constrained")
    ax = axes[0, 0]
    width = 0.8 / max(1, len(tiers))
    colors = {"cache": "#1f4e79", "host": "#5b9bd5", "ssd": "#c0504d"}
    x = np.arange(len(names))
    for i, tier in enumerate(tiers):
        values = [rates[n].get(tier, np.nan) for n in names]
        ax.bar(x + (i - (len(tiers) - 1) / 2) * width, values, width=width, label=tier, color=colors[tier])
    ax.set_xticks(x, names, rotation=45 if len(names) > 6 else 0, ha="right" if len(names) > 6 else "center")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("hit rate")
    ax.set_title("embedding store hit rate per feature")
    ax.legend(fontsize=8)
    return _settled(fig)


def hit_rates(model_or_stats: HasStores | Mapping[str, Mapping[str, object]]) -> dict[str, dict[str, float]]:
    """``{feature: {tier: hits / (hits + misses)}}`` from a model or from per-feature stats;
    a tier nothing was looked up in is left out.

    Example:
        >>> hit_rates({"t": {"cache": {"hits": 3, "misses": 1}, "ssd": {"hits": 0, "misses": 0}}})
        {'t': {'cache': 0.75}}
    """
    if hasattr(model_or_stats, "stores"):
        stats = {name.split("/")[-1]: store.stats() for name, store in model_or_stats.stores().items()}
    else:
        stats = dict(model_or_stats)
    out: dict[str, dict[str, float]] = {}
    for name, per_tier in stats.items():
        out[name] = {}
        for tier in TIERS:
            t = per_tier.get(tier)
            if isinstance(t, Mapping) and t.get("hits", 0) + t.get("misses", 0) > 0:
                out[name][tier] = t["hits"] / (t["hits"] + t["misses"])
    return out


def trial_deltas(results: TrialView | Mapping[str, TrialView], metrics: Sequence[str] = ("auc", "gauc"), title: str | None = None) -> Figure:
    """AUC and GAUC deltas (candidate - baseline) per candidate, with their 95% intervals
    (training seeds and held-out users: :mod:`fbrapids.app.trials`) as error bars, the A/A
    check's deltas in lighter bars where every trial ran it, and the zero line marked, inside the frame (the axis spans the bars, the intervals and zero, with a
    margin) and the legend inside the figure.

    Args:
        results: a ``TrialResult``, or ``{label: TrialResult}`` for several candidates.
        metrics: the deltas drawn.
        title: a line over the chart (e.g. the data it was measured on), wrapped to the
            figure's width.

    Example:
        >>> from fbrapids.app.trials import TrialResult
        >>> r = TrialResult(["x"], {"auc": 0.70, "gauc": 0.60}, {"auc": 0.71, "gauc": 0.59},
        ...                 delta={"auc": 0.01, "gauc": -0.01}, interval={"auc": (0.002, 0.02), "gauc": (-0.02, 0.003)})
        >>> fig = trial_deltas(r)
        >>> len(fig.axes[0].patches), list(fig.axes[0].lines[0].get_ydata())
        (2, [0.0, 0.0])
        >>> r.aa_delta = {"auc": 0.001, "gauc": -0.002}
        >>> r.aa_interval = {"auc": (-0.002, 0.004), "gauc": (-0.006, 0.002)}
        >>> len(trial_deltas(r).axes[0].patches)  # and the A/A bars
        4
    """
    if not isinstance(results, Mapping):  # one TrialResult
        results = {" + ".join(results.candidates): results}
    labels = list(results)
    fig, axes = _figure(1, 1, figsize=(max(5.0, 1.8 * len(labels) + 2), 3.6), layout="constrained")
    ax = axes[0, 0]
    x = np.arange(len(labels))
    # the A/A check (candidates shuffled: fbrapids.app.trials), where every trial ran it: lighter bars
    bars = [(m, "delta", "interval", f"{m.upper()} delta (95% interval)") for m in metrics]
    if all(getattr(results[k], "aa_delta", None) for k in labels):
        bars += [(m, "aa_delta", "aa_interval", f"A/A {m.upper()} delta (candidate shuffled)") for m in metrics]
    width = 0.8 / len(bars)
    ax.axhline(0.0, color="black", linewidth=1.0, label="no change")
    colors = {"auc": "#1f4e79", "gauc": "#c0504d"}
    light = {"auc": "#9dc3e6", "gauc": "#f4b183"}
    span = [0.0]
    for i, (m, what, interval, label) in enumerate(bars):
        deltas = np.array([getattr(results[k], what)[m] for k in labels], dtype=np.float64)
        lo = np.array([getattr(results[k], interval).get(m, (np.nan, np.nan))[0] for k in labels], dtype=np.float64)
        hi = np.array([getattr(results[k], interval).get(m, (np.nan, np.nan))[1] for k in labels], dtype=np.float64)
        err = np.vstack([np.clip(deltas - lo, 0, None), np.clip(hi - deltas, 0, None)])
        ax.bar(x + (i - (len(bars) - 1) / 2) * width, deltas, width=width, yerr=err, capsize=4, label=label,
               color=(light if what == "aa_delta" else colors).get(m, None))
        span += [v for v in np.concatenate([deltas, lo, hi]).tolist() if np.isfinite(v)]
    bottom, top = min(span), max(span)
    pad = 0.12 * (top - bottom) or 1e-3
    ax.set_ylim(bottom - pad, top + pad)  # zero, every bar and interval inside the frame, never on it
    ax.set_xticks(x, labels)
    ax.set_ylabel("candidate - baseline")
    ax.set_title("feature trial")
    # below the axes, two entries a row: as wide as the narrowest figure (one candidate) holds
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, frameon=False)
    if title:  # wrapped before the layout is made (constrained layout cannot shrink a long line)
        import textwrap

        fig.suptitle(textwrap.fill(title, width=int(fig.get_figwidth() * 72 / (9 * 0.62))), fontsize=9)
    return _settled(fig)


def clipped_text(fig: Figure) -> list[str]:
    """The texts of ``fig`` (titles, labels, tick labels, legends, annotations) that reach
    past its canvas once drawn: each as ``'text' (what sticks out)``; empty when none does.

    Example:
        >>> fig = stage_seconds({"plan": 0.5})
        >>> clipped_text(fig)
        []
        >>> _ = fig.text(0.9, 0.5, "far too long a note for this corner")
        >>> clipped_text(fig)
        ["'far too long a note for this corner' (right by ...px)"]
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    width, height = canvas.get_width_height()
    undrawn = set()  # tick labels outside the axis' view (made by the locator, never drawn)
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            tol = 1e-9 * max(1.0, abs(hi - lo))
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if not lo - tol <= tick.get_loc() <= hi + tol:
                    undrawn.update({id(tick.label1), id(tick.label2)})
    out = []
    for t in fig.findobj(Text):
        if not t.get_visible() or not t.get_text().strip() or id(t) in undrawn:
            continue
        box = t.get_window_extent(renderer)
        over = {"left": -box.x0, "right": box.x1 - width, "bottom": -box.y0, "top": box.y1 - height}
        sides = [f"{side} by {v:.0f}px" for side, v in over.items() if v > 0.5]
        if sides:
            out.append(f"{t.get_text()!r} ({', '.join(sides)})")
    return out


def stage_seconds(seconds: Mapping[str, float]) -> Figure:
    """Seconds per pipeline stage as horizontal bars (``PipelineResult.seconds``).

    Example:
        >>> fig = stage_seconds({"plan": 0.5, "extract+train": 3.0})
        >>> len(fig.axes[0].patches), [t.get_text() for t in fig.axes[0].get_yticklabels()]
        (2, ['plan', 'extract+train'])
    """
    names = list(seconds)
    fig, axes = _figure(1, 1, figsize=(6, 0.45 * len(names) + 1.2), layout="constrained")
    ax = axes[0, 0]
    y = np.arange(len(names))
    ax.barh(y, [seconds[n] for n in names], color="#5b9bd5")
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    ax.set_title("seconds per stage")
    return _settled(fig)
