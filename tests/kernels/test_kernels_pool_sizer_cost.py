"""PoolSizer's cost per run (under serving load): a run's quantile is one partial sort,
and the window's weighted quantile is recomputed once per 1/RECOMPUTE_FRACTION of the
window's rows, not once per run; the figure it gives is the exact weighted quantile as of
its last recomputation."""
from __future__ import annotations

import numpy as np

from fbrapids.kernels.pool import PRESIZE_QUANTILE, RECOMPUTE_FRACTION, WINDOW_ROWS, PoolSizer, high_quantile


def _reference(runs: list[tuple[float, int]]) -> float:
    """The weighted PRESIZE_QUANTILE of the runs in the window (the last WINDOW_ROWS rows)."""
    kept, weight = [], 0
    for q, w in reversed(runs):
        kept.append((q, w))
        weight += w
        if weight >= WINDOW_ROWS:
            break
    acc = 0
    for q, w in sorted(kept):
        acc += w
        if acc >= PRESIZE_QUANTILE * weight:
            return q
    raise AssertionError("unreachable")


def test_high_quantile_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 64, 100, 101, 1000, 1024):
        a = rng.gamma(2.0, 50.0, n)
        assert np.isclose(high_quantile(a), np.quantile(a, PRESIZE_QUANTILE), rtol=1e-12, atol=0)
    assert high_quantile(np.array([5.0, 5.0, 5.0])) == 5.0


def test_large_runs_recompute_every_run_and_match_the_reference() -> None:
    """Runs of 1,024 sampled rows (a partition): each is 1/8 of the window, so each run
    recomputes, and the figure is the exact weighted quantile of the window."""
    rng = np.random.default_rng(1)
    sizer, runs = PoolSizer(), []
    for k in range(40):
        q = float(rng.integers(10, 1000)) if k != 7 else 1e9  # one outlier run
        sizer.observe(q, 1024)
        runs.append((q, 1024))
        assert sizer.recomputes == k + 1
        assert sizer.per_row() == _reference(runs)


def test_one_row_runs_recompute_rarely() -> None:
    """A served request's layer runs one row at a time: 20,000 runs recompute the window's
    quantile a few dozen times, not 20,000 times, and the figure stays exact as of the last
    recomputation (never more than 1/RECOMPUTE_FRACTION of the window behind)."""
    rng = np.random.default_rng(2)
    sizer, runs = PoolSizer(), []
    last_at, last_count = 0, 0
    for k in range(20_000):
        q = float(rng.integers(40, 60)) if k % 997 else 1e7  # rare outlier rows
        sizer.observe(q, 1)
        runs.append((q, 1))
        if sizer.recomputes != last_count:
            last_count, last_at = sizer.recomputes, k + 1
            assert sizer.per_row() == _reference(runs)
        window = min(len(runs), WINDOW_ROWS)
        assert k + 1 - last_at < max(1, window // RECOMPUTE_FRACTION)  # how far the figure may lag
    # filling the window: about RECOMPUTE_FRACTION * ln(WINDOW_ROWS) recomputations; then one per
    # WINDOW_ROWS / RECOMPUTE_FRACTION runs
    full = (20_000 - WINDOW_ROWS) // (WINDOW_ROWS // RECOMPUTE_FRACTION)
    assert full <= sizer.recomputes <= RECOMPUTE_FRACTION * np.log(WINDOW_ROWS) + 2 * RECOMPUTE_FRACTION + full
    assert sizer.per_row() < 100  # the outliers (1 row in 997) never become the 99th percentile
    assert len(sizer.runs) <= WINDOW_ROWS
