"""Feature trials: does a candidate feature help?  The question FeatureBox exists to answer.

``trial`` trains the baseline features, then the baseline plus the candidates, on the same
data, split and seed, and compares them on the held-out last day.  The uncertainty of the
AUC and GAUC deltas comes from a paired bootstrap over users: each round resamples the
held-out users with replacement and recomputes both models' metrics on the same rows, so
user-level correlation is respected.

Example:
    >>> import tempfile
    >>> from fbrapids import ops
    >>> from fbrapids.datagen import generate
    >>> d = tempfile.mkdtemp(); _ = generate(3000, d)
    >>> r = trial(d, {"slot_x_os": ops.cross("slot", "os")}, n_boot=20, progress=False)  # doctest: +SKIP
    >>> sorted(r.delta)  # doctest: +SKIP
    ['auc', 'gauc']
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fbrapids.errors import ArgumentError, FeatureError
from fbrapids.kernels import Expr
from fbrapids.errors import TrialError

log = logging.getLogger(__name__)


@dataclass
class TrialResult:
    """Baseline vs candidate metrics on the held-out day, with bootstrap intervals of the deltas."""

    candidates: list[str]
    baseline: dict[str, float]
    candidate: dict[str, float]
    delta: dict[str, float] = field(default_factory=dict)
    interval: dict[str, tuple[float, float]] = field(default_factory=dict)  # 95% bootstrap interval
    p_better: dict[str, float] = field(default_factory=dict)  # share of rounds where the candidate wins
    n_boot: int = 0
    n_users: int = 0

    def _repr_html_(self) -> str:
        """What a notebook shows: the metrics table and the deltas with bootstrap error bars."""
        from fbrapids.display import trial_html

        return trial_html(self)

    def render(self) -> str:
        lines = [f"feature trial: baseline + {', '.join(self.candidates)}  ({self.n_boot} bootstrap rounds over "
                 f"{self.n_users:,} held-out users)"]
        for m in ("auc", "gauc"):
            lo, hi = self.interval.get(m, (float("nan"), float("nan")))
            lines.append(f"  {m.upper():<5} baseline {self.baseline[m]:.4f}  candidate {self.candidate[m]:.4f}  "
                         f"delta {self.delta[m]:+.4f}  95% [{lo:+.4f}, {hi:+.4f}]  P(better) {self.p_better[m]:.2f}")
        return "\n".join(lines)


def _auc_weighted(y: np.ndarray, p: np.ndarray, w: np.ndarray) -> float:
    """AUC with integer row weights (a bootstrap sample's multiplicities); ties count half."""
    keep = w > 0
    y, p, w = y[keep], p[keep], w[keep].astype(np.float64)
    order = np.argsort(p, kind="mergesort")
    y, p, w = y[order], p[order], w[order]
    pos_w = np.where(y == 1, w, 0.0)
    neg_w = np.where(y == 0, w, 0.0)
    # group equal scores: negatives strictly below, plus half of the tied negatives
    _, start = np.unique(p, return_index=True)
    neg_cum = np.concatenate([[0.0], np.cumsum(neg_w)])
    ends = np.append(start[1:], len(p))
    neg_below = neg_cum[start]
    neg_tied = neg_cum[ends] - neg_cum[start]
    pos_group = np.add.reduceat(pos_w, start)
    total_pos, total_neg = pos_w.sum(), neg_w.sum()
    if total_pos == 0 or total_neg == 0:
        return float("nan")
    return float((pos_group * (neg_below + 0.5 * neg_tied)).sum() / (total_pos * total_neg))


def _gauc_weighted(y: np.ndarray, p: np.ndarray, g: np.ndarray, user_weight: dict[Any, int]) -> float:
    num = den = 0.0
    for user, idx in _groups(g).items():
        w = user_weight.get(user, 0)
        if w == 0:
            continue
        yy = y[idx]
        if yy.min() == yy.max():
            continue  # single-class users carry no ranking signal
        a = _auc_weighted(yy, p[idx], np.ones(len(idx), dtype=np.int64))
        num += w * len(idx) * a
        den += w * len(idx)
    return num / den if den else float("nan")


def _groups(g: np.ndarray) -> dict[Any, np.ndarray]:
    order = np.argsort(g, kind="mergesort")
    users, start = np.unique(g[order], return_index=True)
    return dict(zip(users.tolist(), np.split(order, start[1:])))


def paired_bootstrap(label: np.ndarray, base: np.ndarray, cand: np.ndarray, group: np.ndarray,
                     n_boot: int = 200, seed: int = 0) -> dict[str, np.ndarray]:
    """Deltas (candidate - baseline) of AUC and GAUC over bootstrap resamples of users.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> y = rng.integers(0, 2, 400); g = rng.integers(0, 40, 400)
        >>> d = paired_bootstrap(y, rng.random(400), y * 0.5 + rng.random(400), g, n_boot=10)
        >>> bool((d["auc"] > 0).all())
        True
    """
    rng = np.random.default_rng(seed)
    users = np.unique(group)
    index = {u: i for i, u in enumerate(users.tolist())}
    row_user = np.fromiter((index[u] for u in group.tolist()), dtype=np.int64, count=len(group))
    out = {"auc": np.empty(n_boot), "gauc": np.empty(n_boot)}
    for b in range(n_boot):
        counts = np.bincount(rng.integers(0, len(users), len(users)), minlength=len(users))
        w = counts[row_user]
        out["auc"][b] = _auc_weighted(label, cand, w) - _auc_weighted(label, base, w)
        uw = dict(zip(users.tolist(), counts.tolist()))
        out["gauc"][b] = _gauc_weighted(label, cand, group, uw) - _gauc_weighted(label, base, group, uw)
    return out


def trial(data_dir: str | Path, candidates: dict[str, Expr], *, kind: str = "sparse", model: str = "dlrm",
          n_boot: int = 200, seed: int = 0, progress: bool = True, sequences: dict[str, str] | None = None,
          **pipeline_options: Any) -> TrialResult:
    """Train baseline vs baseline + ``candidates`` on the same data and seed; compare them.

    Args:
        data_dir: a workload folder (impressions / users / ads / basic parquet).
        candidates: new feature name -> expression over the joined views (``fbrapids.ops``).
        kind: ``"sparse"`` (ids, embedded) or ``"dense"`` (numbers) for the candidates.
        model: the model both arms train.
        n_boot: paired bootstrap rounds over held-out users.
        sequences: ``model="din"``: candidate behaviour sequences -> the sparse feature each
            attends to (the baseline arm trains DIN with no sequence).  Candidates may be
            fitted operators (fitted on the training days only) or history operators.
        pipeline_options: passed to :func:`fbrapids.pipeline.run_pipeline` for both arms.

    Raises:
        FeatureError: a candidate name collides with a baseline column.
    """
    from fbrapids import workload
    from fbrapids.pipeline import DENSE, SPARSE, run_pipeline

    clash = [n for n in candidates if n in workload.features() or n in SPARSE or n in DENSE]
    if clash:
        raise FeatureError(f"candidate feature name(s) {clash} already name baseline columns; rename them")
    if kind not in ("sparse", "dense"):
        raise ArgumentError(f"kind must be 'sparse' or 'dense', got {kind!r}")
    common = dict(model=model, seed=seed, progress=progress, checkpoint=False, **pipeline_options)
    from fbrapids.autobar import tqdm

    bar = tqdm(total=3, disable=not progress, desc="trial", unit="step", position=1, leave=False)
    with tempfile.TemporaryDirectory(prefix="fbrapids-trial-") as work:
        arms = {"sequences": {}} if model == "din" else {}
        bar.set_postfix_str("baseline arm")
        base = run_pipeline(data_dir, work_dir=Path(work) / "baseline", **arms, **common)
        bar.update(1)
        extra = list(candidates)
        cols = {"sparse": SPARSE + extra, "dense": DENSE} if kind == "sparse" else {"sparse": SPARSE, "dense": DENSE + extra}
        if model == "din":
            cols["sequences"] = dict(sequences or {})
        bar.set_postfix_str("candidate arm")
        cand = run_pipeline(data_dir, work_dir=Path(work) / "candidate", extra_features=dict(candidates), **cols, **common)
        bar.update(1)
        bar.set_postfix_str(f"bootstrap x{n_boot}")
    bp, cp = base.predictions, cand.predictions
    if not np.array_equal(bp["label"], cp["label"]) or not np.array_equal(bp["group"], cp["group"]):
        raise TrialError("the two arms saw different held-out rows; the trial is not paired")
    deltas = paired_bootstrap(bp["label"], bp["pred"], cp["pred"], bp["group"], n_boot=n_boot, seed=seed)
    bar.update(1)
    bar.close()
    result = TrialResult(extra, {m: base.metrics[m] for m in ("auc", "gauc", "logloss")},
                         {m: cand.metrics[m] for m in ("auc", "gauc", "logloss")}, n_boot=n_boot,
                         n_users=int(len(np.unique(bp["group"]))))
    for m in ("auc", "gauc"):
        result.delta[m] = result.candidate[m] - result.baseline[m]
        d = deltas[m][np.isfinite(deltas[m])]
        result.interval[m] = (float(np.quantile(d, 0.025)), float(np.quantile(d, 0.975))) if len(d) else (np.nan, np.nan)
        result.p_better[m] = float((d > 0).mean()) if len(d) else float("nan")
    log.info("%s", result.render())
    return result
