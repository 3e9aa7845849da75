"""CTR metrics against scikit-learn (the oracle) and a plain per-group GAUC reference."""

from __future__ import annotations

import numpy as np
import pytest

from fbrapids.trainers.metrics import all_metrics, auc, calibration, gauc, logloss, normalized_entropy

sk = pytest.importorskip("sklearn.metrics", reason="scikit-learn is the metrics oracle")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auc_and_logloss_match_sklearn(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 20000
    y = rng.integers(0, 2, n)
    p = rng.random(n)
    p[: n // 4] = np.round(p[: n // 4], 2)  # plenty of ties
    assert abs(auc(y, p) - sk.roc_auc_score(y, p)) < 1e-9
    assert abs(logloss(y, p) - sk.log_loss(y, p)) < 1e-9


def test_logloss_clips_like_sklearn() -> None:
    y = np.array([0, 1, 1, 0])
    p = np.array([0.0, 1.0, 0.0, 1.0])  # infinitely wrong twice
    assert abs(logloss(y, p) - sk.log_loss(y, p)) < 1e-9


def _gauc_reference(y, p, g) -> float:
    num = den = 0.0
    for u in np.unique(g):
        m = g == u
        if len(np.unique(y[m])) < 2:
            continue
        num += m.sum() * sk.roc_auc_score(y[m], p[m])
        den += m.sum()
    return num / den


def test_gauc_matches_per_group_reference_with_single_class_groups() -> None:
    rng = np.random.default_rng(5)
    n = 6000
    g = rng.integers(0, 400, n)
    y = rng.integers(0, 2, n)
    y[g % 7 == 0] = 0  # single-class groups (all negative)
    y[g % 11 == 0] = 1  # single-class groups (all positive)
    p = np.round(rng.random(n) * 0.6 + 0.2 * y + 0.05 * (g % 5), 2)  # informative, per-group offsets, ties
    single = sum(len(np.unique(y[g == u])) < 2 for u in np.unique(g))
    assert single > 50
    ref = _gauc_reference(y, p, g)
    assert abs(gauc(y, p, g) - ref) < 1e-12
    assert abs(gauc(y, p, g) - auc(y, p)) > 1e-3  # per-group, not the pooled AUC
    kept = np.isin(g, [u for u in np.unique(g) if len(np.unique(y[g == u])) == 2])
    assert abs(gauc(y[kept], p[kept], g[kept]) - gauc(y, p, g)) < 1e-12  # single-class groups add nothing


def test_gauc_with_no_two_class_group_is_nan() -> None:
    assert np.isnan(gauc([0, 1], [0.1, 0.2], [1, 2]))


def test_ne_and_calibration() -> None:
    y = np.array([0, 0, 0, 1])
    base = np.full(4, 0.25)
    assert abs(normalized_entropy(y, base) - 1.0) < 1e-12  # predicting the base rate: NE = 1
    assert calibration(y, np.full(4, 0.5)) == pytest.approx(2.0)
    m = all_metrics(y, np.array([0.1, 0.2, 0.3, 0.9]))
    assert m["auc"] == 1.0 and m["n"] == 4 and m["gauc"] is None and m["ne"] < 1.0


@pytest.mark.parametrize("label", [0, 1])
def test_all_one_class_warns_and_reports_undefined_not_nan_or_inf(label) -> None:
    from fbrapids.errors import UndefinedMetricWarning
    from fbrapids.trainers.metrics import format_metric

    y = np.full(5, label)
    p = np.array([0.1, 0.2, 0.3, 0.4, 0.5])
    with pytest.warns(UndefinedMetricWarning, match=f"all 5 labels are {label}"):
        m = all_metrics(y, p, group=[1, 1, 2, 2, 2])
    assert m["auc"] is None and m["gauc"] is None and m["ne"] is None
    assert m["logloss"] == pytest.approx(logloss(y, p))
    if label:
        assert m["calibration"] == pytest.approx(0.3)  # defined with clicks: mean prediction / 1
    else:
        assert m["calibration"] is None and "calibration needs a click" in m["undefined"]
    assert format_metric(m["auc"]) == "undefined"


def test_auc_one_class_raises() -> None:
    with pytest.raises(ValueError, match="one class"):
        auc([1, 1], [0.2, 0.3])


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_auc_and_gauc_refuse_non_finite_predictions_like_sklearn(bad) -> None:
    """scikit-learn raises on a NaN (or infinite) score; a number over it would be silent."""
    from fbrapids.errors import FbrapidsError

    y = np.array([0, 1, 0, 1, 1, 0])
    p = np.array([0.1, 0.9, 0.3, bad, 0.6, 0.2])
    with pytest.raises(ValueError):
        sk.roc_auc_score(y, p)  # the oracle's verdict
    with pytest.raises(FbrapidsError, match="predictions hold 1 non-finite value.*position 3"):
        auc(y, p)
    with pytest.raises(FbrapidsError, match="predictions hold 1 non-finite value"):
        gauc(y, p, [1, 1, 1, 2, 2, 2])
    with pytest.raises(FbrapidsError, match="labels hold 1 non-finite"):
        auc(np.where(np.arange(6) == 2, np.nan, y), np.linspace(0, 1, 6))
