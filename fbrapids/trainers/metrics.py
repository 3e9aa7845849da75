"""CTR metrics in numpy: AUC, GAUC, logloss, normalized entropy, calibration.

scikit-learn is only the tests' oracle; these are written against numpy so that the
trainer has no dependency on it.

Example:
    >>> import numpy as np
    >>> y = np.array([0, 0, 1, 1]); p = np.array([0.1, 0.4, 0.35, 0.8])
    >>> auc(y, p)
    0.75
    >>> round(logloss(y, p), 6)
    0.472288
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import numpy.typing as npt

from fbrapids.errors import ArgumentError, MetricUndefinedError, UndefinedMetricWarning


def _arrays(y: npt.ArrayLike, p: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(y, dtype=np.float64).ravel()
    p = np.asarray(p, dtype=np.float64).ravel()
    if y.shape != p.shape:
        raise ArgumentError(f"labels ({y.shape[0]}) and predictions ({p.shape[0]}) differ in length")
    if len(y) == 0:
        raise MetricUndefinedError("metrics of an empty set of predictions")
    return y, p


def _ranked(y: npt.ArrayLike, p: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """``_arrays`` for the rank metrics, refusing a non-finite label or prediction as
    scikit-learn does: NaN has no rank, so an AUC over it would be a number about nothing."""
    y, p = _arrays(y, p)
    for name, values in (("predictions", p), ("labels", y)):
        bad = ~np.isfinite(values)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ArgumentError(f"{name} hold {int(bad.sum())} non-finite value(s) (first at position {i}: "
                                f"{values[i]}); AUC / GAUC rank finite numbers only")
    return y, p


def _avg_ranks(p: np.ndarray) -> np.ndarray:
    """1-based ranks of ``p`` with ties given their average rank."""
    order = np.argsort(p, kind="mergesort")
    sp = p[order]
    new = np.empty(len(p), dtype=bool)
    new[0] = True
    np.not_equal(sp[1:], sp[:-1], out=new[1:])
    run = np.cumsum(new) - 1
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], len(p))
    avg = (starts + ends + 1) / 2.0  # mean of ranks starts+1 .. ends
    ranks = np.empty(len(p), dtype=np.float64)
    ranks[order] = avg[run]
    return ranks


def auc(y: npt.ArrayLike, p: npt.ArrayLike) -> float:
    """Area under the ROC curve (ties count one half), via the rank-sum statistic.

    Raises:
        MetricUndefinedError: only one class is present (a ``ValueError``).
        ArgumentError: a label or prediction is NaN or infinite (scikit-learn raises too).
    """
    y, p = _ranked(y, p)
    pos = y > 0.5
    n_pos = int(pos.sum())
    n_neg = len(y) - n_pos
    if n_pos == 0 or n_neg == 0:
        raise MetricUndefinedError(f"AUC is undefined when only one class is present ({len(y)} rows, all "
                                   f"{'positive' if n_pos else 'negative'})")
    r = _avg_ranks(p)
    return float((r[pos].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def gauc(y: npt.ArrayLike, p: npt.ArrayLike, group: npt.ArrayLike) -> float:
    """Group AUC: per-group AUC weighted by the group's number of impressions.

    Groups (users) whose labels are all one class are skipped.  Returns NaN when no group
    has both classes.

    Example:
        >>> gauc([0, 1, 1, 0, 1], [0.2, 0.9, 0.5, 0.6, 0.3], [1, 1, 1, 2, 2])
        0.6

    Raises:
        ArgumentError: a label or prediction is NaN or infinite (as for :func:`auc`).
    """
    y, p = _ranked(y, p)
    g = np.asarray(group).ravel()
    if len(g) != len(y):
        raise ArgumentError(f"group ({len(g)}) and labels ({len(y)}) differ in length")
    _, gi = np.unique(g, return_inverse=True)
    order = np.lexsort((p, gi))
    gs, ps, ys = gi[order], p[order], y[order] > 0.5
    n = len(ys)
    # runs of equal (group, score): average rank within the group
    new_run = np.empty(n, dtype=bool)
    new_run[0] = True
    new_run[1:] = (gs[1:] != gs[:-1]) | (ps[1:] != ps[:-1])
    new_grp = np.empty(n, dtype=bool)
    new_grp[0] = True
    new_grp[1:] = gs[1:] != gs[:-1]
    run_id = np.cumsum(new_run) - 1
    run_start = np.flatnonzero(new_run)
    run_end = np.append(run_start[1:], n)
    grp_start_of_row = np.maximum.accumulate(np.where(new_grp, np.arange(n), 0))
    grp_start_of_run = grp_start_of_row[run_start]
    run_rank = (run_start + run_end + 1) / 2.0 - grp_start_of_run
    rank = run_rank[run_id]
    ngroups = int(gs[-1]) + 1
    cnt = np.bincount(gs, minlength=ngroups).astype(np.float64)
    npos = np.bincount(gs, weights=ys.astype(np.float64), minlength=ngroups)
    nneg = cnt - npos
    rsum = np.bincount(gs, weights=np.where(ys, rank, 0.0), minlength=ngroups)
    ok = (npos > 0) & (nneg > 0)
    if not ok.any():
        return float("nan")
    a = (rsum[ok] - npos[ok] * (npos[ok] + 1) / 2.0) / (npos[ok] * nneg[ok])
    w = cnt[ok]
    return float((a * w).sum() / w.sum())


def logloss(y: npt.ArrayLike, p: npt.ArrayLike, eps: float | None = None) -> float:
    """Mean binary cross-entropy; predictions clipped to ``[eps, 1 - eps]`` (float64 eps by default)."""
    labels, preds = _arrays(y, p)
    eps = np.finfo(np.float64).eps if eps is None else eps
    clipped = np.clip(preds, eps, 1 - eps)
    return float(-np.mean(labels * np.log(clipped) + (1 - labels) * np.log1p(-clipped)))


def normalized_entropy(y: npt.ArrayLike, p: npt.ArrayLike) -> float:
    """Logloss divided by the entropy of the base click rate (He et al., 2014); < 1 beats the prior."""
    y, p = _arrays(y, p)
    ctr = float(y.mean())
    if ctr <= 0.0 or ctr >= 1.0:
        return float("nan")
    base = -(ctr * np.log(ctr) + (1 - ctr) * np.log(1 - ctr))
    return logloss(y, p) / base


def calibration(y: npt.ArrayLike, p: npt.ArrayLike) -> float:
    """Predicted CTR over actual CTR (1.0 is calibrated); inf when there are no clicks."""
    y, p = _arrays(y, p)
    actual = float(y.mean())
    return float(p.mean() / actual) if actual > 0 else float("inf")


def all_metrics(y: npt.ArrayLike, p: npt.ArrayLike, group: npt.ArrayLike | None = None) -> dict[str, Any]:
    """``auc``, ``gauc``, ``logloss``, ``ne``, ``calibration`` and ``n``.

    A metric the data cannot define is ``None``, never a NaN or an infinity that reads
    like a result: with labels of one class only, AUC, GAUC and NE are undefined (and
    calibration too when there are no clicks); an :class:`UndefinedMetricWarning` says so
    and ``undefined`` holds the reason.  GAUC is ``None`` without groups or when no group
    has both classes.

    Example:
        >>> sorted(all_metrics([0, 1], [0.2, 0.7]))
        ['auc', 'calibration', 'gauc', 'logloss', 'n', 'ne']
        >>> all_metrics([0, 1, 1], [0.2, 0.7, 0.6], group=[1, 1, 1])["gauc"]  # plain floats, printable
        1.0
        >>> import warnings
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     m = all_metrics([0, 0], [0.2, 0.7])
        >>> m["auc"], m["calibration"], m["undefined"]
        (None, None, 'all 2 labels are 0: AUC, GAUC and NE need both classes, calibration needs a click')
    """
    y, p = _arrays(y, p)
    pos = int((y > 0.5).sum())
    out: dict[str, Any] = {"auc": None, "gauc": None, "logloss": float(logloss(y, p)), "ne": None,
                           "calibration": None, "n": int(len(y))}
    if pos == 0 or pos == len(y):
        reason = (f"all {len(y)} labels are {1 if pos else 0}: AUC, GAUC and NE need both classes"
                  + ("" if pos else ", calibration needs a click"))
        warnings.warn(f"evaluation: {reason}", UndefinedMetricWarning, stacklevel=2)
        out["undefined"] = reason
        if pos:
            out["calibration"] = float(calibration(y, p))
        return out
    out["auc"] = float(auc(y, p))  # plain floats: printed, the dict reads 0.71, not np.float64(0.71)
    if group is not None:
        g = gauc(y, p, group)
        out["gauc"] = None if np.isnan(g) else float(g)
    out["ne"] = float(normalized_entropy(y, p))
    out["calibration"] = float(calibration(y, p))
    return out


def format_metric(value: float | None, spec: str = ".4f") -> str:
    """A metric for a summary line: ``"undefined"`` for None.

    Example:
        >>> format_metric(0.71234), format_metric(None)
        ('0.7123', 'undefined')
    """
    return "undefined" if value is None else format(value, spec)
