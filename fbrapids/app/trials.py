"""Feature trials: does a candidate feature help?  The question FeatureBox exists to answer.

``trial`` trains a baseline and a baseline + candidates arm for each of K seeds, side by
side from one extraction pass (:mod:`fbrapids.app.trial_training`), and compares them on the
held-out last day.

**The interval.**  Two sources of noise move a measured delta: the training draw (the
seed: initial weights; the batches come in one order, shuffled within windows as a plain
run streams them) and the
held-out users sampled.  Per seed ``k`` the delta ``d_k`` (candidate minus baseline, both
trained from seed ``k``, starting as the same function, reading the same batches in the
same order: :mod:`fbrapids.trainers.arms`) is
measured on the same users; the estimate is their mean ``d``.  Its variance is estimated
as ``s^2 / K + v_users``: ``s^2`` the sample variance of the ``d_k`` (training noise, the
users held fixed) and ``v_users`` the variance of the seed-averaged delta over a paired
bootstrap of held-out users (each round resamples users with replacement and recomputes
every arm's AUC and GAUC on the same rows, so user-level correlation is respected).  The
interval is ``d +- t * se`` with Student's t at Welch-Satterthwaite's degrees of freedom
(``(K - 1) * (se^2 / (s^2 / K))^2``: the bootstrap term counts as known), and
``P(better)`` is that t distribution's probability that the true delta is above 0.  With
``K = 1`` there is no estimate of training noise: the interval is the bootstrap's alone
(normal), and the result says so.

Assumptions: the per-seed deltas are independent draws, normal enough for a t interval
(the calibration, ``benchmarks/trial_calibration.py``, checks the false-positive rate on
planted noise); users are independent units; the question is about the training recipe
as run (same data order), not about other orders.  The verdict: **helps** when the
interval lies above 0, **hurts** when below, else **no detectable effect** at that level.

**The A/A check.**  With ``aa=True`` (the default) each seed also trains an A/A arm: the
candidate arm's architecture and start, fed the candidates' values shuffled across each
batch's rows (:func:`fbrapids.trainers.arms.shuffled_view`), so it carries the candidate's
ids and their frequencies but not their link to the click.  Its deltas against the
baseline go through the same test: ``aa_delta`` / ``aa_interval`` / ``aa_verdict`` (a
trial whose A/A verdict is not "no detectable effect" is logged as a warning) and the
**A/A spread**, the largest per-seed |A/A delta|: what a seed's paired comparison shows
for a candidate that tells nothing.  ``seed_spread`` is the largest difference between two
baseline seeds' metric: one model's training noise, which the pairing cancels (it used to
be the A/A spread of trials whose arms were independent draws).

**What an A/A verdict means.**  The shuffled copy is not a placebo: the A/A arm's extra
table and weights fit the shuffled values' noise, and a model that reads an input telling
nothing can predict a little worse.  So the A/A check measures what an input of the
candidate's shape costs when it tells nothing; a "hurts" A/A verdict may be that cost
detected rather than a failure of the interval.  The calibration
(``benchmarks/trial_calibration.py``: ``aa.mean_delta`` / ``aa.se_mean`` over trials, and
the noise trials' ``delta / se``, whose SD is about 1 under a calibrated interval)
separates the two.  Trained in time order (before issue 34's shuffle), 20 trials at 100k
rows gave a mean A/A AUC delta of -0.0006 +- 0.0002 (3 of 20 "hurts"); with the shuffled
stream, -0.0002 +- 0.0002 (3 of 20 called: 2 "helps", 1 "hurts"), while 40 noise trials'
``delta / se`` had SD 1.09 (AUC) and 0.82 (GAUC) and 1 and 2 of 40 were called: the
interval is not too narrow, and of the 60 null comparisons 4 were called on AUC.  A true
no-information arm (a constant in the candidate's slot) would be the baseline arm itself,
whose delta is 0 by construction.

Example:
    >>> import tempfile
    >>> from fbrapids import ops
    >>> from fbrapids.datasets.synthetic.generate import generate
    >>> d = tempfile.mkdtemp(); _ = generate(3000, d)
    >>> r = trial(d, {"slot_x_os": ops.cross("slot", "os")}, n_boot=20, progress=False)  # doctest: +SKIP
    >>> sorted(r.delta)  # doctest: +SKIP
    ['auc', 'gauc']
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from fbrapids.errors import ArgumentError, FeatureError, TrialError
from fbrapids.kernels import Expr

log = logging.getLogger(__name__)

#: seeds per arm when ``trial(seeds=...)`` is not given (``benchmarks/trial_calibration.py``)
DEFAULT_SEEDS = 3
METRICS = ("auc", "gauc")
VERDICTS = ("helps", "hurts", "no detectable effect")


@dataclass
class TrialResult:
    """Baseline vs candidate on the held-out day, over K seeds (see the module docstring).

    ``baseline`` / ``candidate``: each arm's metrics averaged over the seeds; ``delta``: the
    mean per-seed delta; ``seed_deltas``: each seed's; ``interval`` / ``p_better`` /
    ``verdict``: the combined test; ``se`` / ``se_seeds`` / ``se_users`` / ``df``: its parts;
    ``aa_delta`` / ``aa_seed_deltas`` / ``aa_interval`` / ``aa_verdict``: the A/A arms'
    (shuffled candidates) test, ``aa_spread`` the largest per-seed |A/A delta| (empty with
    ``aa=False``); ``info_delta`` / ``info_interval`` / ``info_verdict``: candidate against
    the A/A arm (what the candidate's values tell beyond a shuffled copy); ``seed_spread``: the largest |difference| between two baseline seeds'
    metric (one model's training noise); ``nan_rounds``: bootstrap rounds where a metric
    was undefined (a resample with one class), left out of ``se_users`` and counted here.
    """

    candidates: list[str]
    baseline: dict[str, float]
    candidate: dict[str, float]
    delta: dict[str, float] = field(default_factory=dict)
    interval: dict[str, tuple[float, float]] = field(default_factory=dict)
    p_better: dict[str, float] = field(default_factory=dict)
    n_boot: int = 0
    n_users: int = 0
    seeds: list[int] = field(default_factory=list)
    seed_deltas: dict[str, list[float]] = field(default_factory=dict)
    verdict: dict[str, str] = field(default_factory=dict)
    level: float = 0.95
    se: dict[str, float] = field(default_factory=dict)
    se_seeds: dict[str, float] = field(default_factory=dict)
    se_users: dict[str, float] = field(default_factory=dict)
    df: dict[str, float] = field(default_factory=dict)
    aa_spread: dict[str, float] = field(default_factory=dict)
    aa_delta: dict[str, float] = field(default_factory=dict)
    aa_seed_deltas: dict[str, list[float]] = field(default_factory=dict)
    aa_interval: dict[str, tuple[float, float]] = field(default_factory=dict)
    aa_verdict: dict[str, str] = field(default_factory=dict)
    seed_spread: dict[str, float] = field(default_factory=dict)
    info_delta: dict[str, float] = field(default_factory=dict)
    info_interval: dict[str, tuple[float, float]] = field(default_factory=dict)
    info_verdict: dict[str, str] = field(default_factory=dict)
    nan_rounds: dict[str, int] = field(default_factory=dict)
    extraction: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    split: dict[str, Any] = field(default_factory=dict)

    def _repr_html_(self) -> str:
        """What a notebook shows: the metrics table and the deltas with their intervals."""
        from fbrapids.ui.display import trial_html

        return trial_html(self)

    def render(self) -> str:
        pct = f"{100 * self.level:g}%"
        lines = [f"feature trial: baseline + {', '.join(self.candidates)}  ({len(self.seeds)} seed(s) per arm, "
                 f"{self.n_boot} bootstrap rounds over {self.n_users:,} held-out users)"]
        if self.rows:
            lines.append(f"  rows: trained {self.rows.get('trained', 0):,}, held out {self.rows.get('held out', 0):,}"
                         + (f" ({self.split['rule']})" if self.split.get("rule") else ""))
        for m in METRICS:
            lo, hi = self.interval.get(m, (float("nan"), float("nan")))
            per_seed = ", ".join(f"{d:+.4f}" for d in self.seed_deltas.get(m, []))
            lines.append(f"  {m.upper():<5} baseline {self.baseline[m]:.4f}  candidate {self.candidate[m]:.4f}  "
                         f"delta {self.delta[m]:+.4f}  {pct} [{lo:+.4f}, {hi:+.4f}]  P(better) "
                         f"{self.p_better[m]:.2f}  -> {self.verdict.get(m, '?')}")
            lines.append(f"        per seed [{per_seed}]  seed spread {self.seed_spread.get(m, float('nan')):.4f}  "
                         f"se {self.se.get(m, float('nan')):.4f} (seeds {self.se_seeds.get(m, float('nan')):.4f}, "
                         f"users {self.se_users.get(m, float('nan')):.4f})"
                         + (f"  {self.nan_rounds[m]} NaN bootstrap round(s)" if self.nan_rounds.get(m) else ""))
            if m in self.aa_delta:
                alo, ahi = self.aa_interval[m]
                lines.append(f"        A/A (candidates shuffled) delta {self.aa_delta[m]:+.4f} [{alo:+.4f}, {ahi:+.4f}] "
                             f"-> {self.aa_verdict[m]}  A/A spread {self.aa_spread[m]:.4f}")
                ilo, ihi = self.info_interval[m]
                lines.append(f"        candidate vs A/A (beyond a shuffled copy) {self.info_delta[m]:+.4f} "
                             f"[{ilo:+.4f}, {ihi:+.4f}] -> {self.info_verdict[m]}")
        if len(self.seeds) < 2:
            lines.append("  one seed: training noise is not in the interval (seeds=3 or more puts it there)")
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


def _auc_rounds(y: np.ndarray, p: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """AUC of ``p`` under each row of ``weights`` (``[R, n]`` integer row weights, a bootstrap
    round each; ties count half); NaN where a round holds one class only."""
    order = np.argsort(p, kind="mergesort")
    ys = y[order].astype(np.float64)
    _, start = np.unique(p[order], return_index=True)
    w = weights[:, order].astype(np.float64)
    pos = np.add.reduceat(w * ys, start, axis=1)
    neg = np.add.reduceat(w * (1.0 - ys), start, axis=1)
    neg_below = np.cumsum(neg, axis=1) - neg
    num = (pos * (neg_below + 0.5 * neg)).sum(axis=1)
    total = pos.sum(axis=1) * neg.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, num / np.where(total > 0, total, 1.0), np.nan)


def user_aucs(y: np.ndarray, p: np.ndarray, user: np.ndarray, n_users: int) -> tuple[np.ndarray, np.ndarray]:
    """Per user (``user``: dense indices ``0..n_users-1``): the AUC of ``p`` over the user's
    rows (ties count half; 0 where the user has one class) and the user's GAUC weight, its
    row count where it has both classes, else 0 (single-class users carry no ranking signal).

    Example:
        >>> y = np.array([0, 1, 1, 0, 1]); p = np.array([0.1, 0.9, 0.2, 0.3, 0.5])
        >>> a, w = user_aucs(y, p, np.array([0, 0, 1, 1, 2]), 3)
        >>> a.tolist(), w.tolist()
        ([1.0, 0.0, 0.0], [2.0, 2.0, 0.0])
    """
    order = np.lexsort((p, user))
    ys, ps, us = y[order].astype(np.float64), p[order], user[order]
    n = len(order)
    new = np.r_[True, (us[1:] != us[:-1]) | (ps[1:] != ps[:-1])] if n else np.zeros(0, bool)
    gstart = np.flatnonzero(new)
    gend = np.r_[gstart[1:], n]
    avg_pos = np.repeat((gstart + gend - 1) / 2.0, gend - gstart)  # 0-based position, ties averaged
    first = np.flatnonzero(np.r_[True, us[1:] != us[:-1]]) if n else np.zeros(0, np.int64)
    ustart = np.repeat(first, np.diff(np.r_[first, n]))
    rank = avg_pos - ustart + 1.0  # rank within the user
    count = np.bincount(us, minlength=n_users).astype(np.float64)
    npos = np.bincount(us, weights=ys, minlength=n_users)
    rsum = np.bincount(us, weights=ys * rank, minlength=n_users)
    nneg = count - npos
    valid = (npos > 0) & (nneg > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        auc = np.where(valid, (rsum - npos * (npos + 1) / 2) / np.where(valid, npos * nneg, 1.0), 0.0)
    return auc, np.where(valid, count, 0.0)


def _user_index(group: np.ndarray) -> tuple[np.ndarray, int]:
    users, row_user = np.unique(group, return_inverse=True)
    return row_user.reshape(-1), len(users)


def arm_rounds(label: np.ndarray, preds: Sequence[np.ndarray], group: np.ndarray, n_boot: int,
               seed: int = 0, chunk: int = 25) -> dict[str, np.ndarray]:
    """Each prediction vector's AUC and GAUC on the full held-out set (column 0) and on
    ``n_boot`` paired bootstrap resamples of users (columns 1..n_boot; the same resamples
    for every vector): arrays ``[len(preds), 1 + n_boot]``, NaN where undefined.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> y = rng.integers(0, 2, 300); g = rng.integers(0, 30, 300); p = rng.random(300)
        >>> r = arm_rounds(y, [p, y + p], g, n_boot=8)
        >>> r["auc"].shape, bool((r["auc"][1] > r["auc"][0]).all())
        ((2, 9), True)
    """
    row_user, n_users = _user_index(group)
    rng = np.random.default_rng(seed)
    counts = np.vstack([np.ones(n_users, dtype=np.int64)]
                       + [np.bincount(rng.integers(0, n_users, n_users), minlength=n_users) for _ in range(n_boot)])
    out = {m: np.empty((len(preds), 1 + n_boot)) for m in METRICS}
    for i, p in enumerate(preds):
        for lo in range(0, 1 + n_boot, chunk):
            out["auc"][i, lo:lo + chunk] = _auc_rounds(label, p, counts[lo:lo + chunk][:, row_user])
        a, w = user_aucs(label, p, row_user, n_users)
        den = counts @ w
        with np.errstate(invalid="ignore", divide="ignore"):
            out["gauc"][i] = np.where(den > 0, (counts @ (w * a)) / np.where(den > 0, den, 1.0), np.nan)
    return out


def paired_bootstrap(label: np.ndarray, base: np.ndarray, cand: np.ndarray, group: np.ndarray,
                     n_boot: int = 200, seed: int = 0) -> dict[str, np.ndarray]:
    """Deltas (candidate - baseline) of AUC and GAUC over ``n_boot`` bootstrap resamples of
    users; ``base`` / ``cand`` one prediction vector each, or one per seed (paired by
    position: a round's delta is the mean over seeds).  Rounds where a metric is undefined
    are NaN, and counted in ``out["nan_rounds"][metric]`` (never dropped silently).

    Example:
        >>> rng = np.random.default_rng(0)
        >>> y = rng.integers(0, 2, 400); g = rng.integers(0, 40, 400)
        >>> d = paired_bootstrap(y, rng.random(400), y * 0.5 + rng.random(400), g, n_boot=10)
        >>> bool((d["auc"] > 0).all()), d["nan_rounds"]
        (True, {'auc': 0, 'gauc': 0})
    """
    base_l = [base] if isinstance(base, np.ndarray) else list(base)
    cand_l = [cand] if isinstance(cand, np.ndarray) else list(cand)
    if len(base_l) != len(cand_l):
        raise ArgumentError(f"paired_bootstrap: {len(base_l)} baseline but {len(cand_l)} candidate vectors")
    r = arm_rounds(label, [*base_l, *cand_l], group, n_boot, seed)
    k = len(base_l)
    out: dict[str, Any] = {m: (r[m][k:, 1:] - r[m][:k, 1:]).mean(axis=0) for m in METRICS}
    out["nan_rounds"] = {m: int((~np.isfinite(out[m])).sum()) for m in METRICS}
    return out


def combine(seed_deltas: np.ndarray, boot_deltas: np.ndarray, level: float = 0.95) -> dict[str, Any]:
    """The combined test of one metric (module docstring): ``seed_deltas`` the K per-seed
    deltas on the full held-out set, ``boot_deltas`` the seed-averaged delta per bootstrap
    round (NaN rounds left out).  Returns delta, se (and its parts), df, interval, p_better
    and verdict.

    Example:
        >>> r = combine(np.array([0.010, 0.012, 0.008]), np.random.default_rng(0).normal(0.01, 0.001, 200))
        >>> r["verdict"], round(r["df"], 1) > 2, r["interval"][0] > 0
        ('helps', True, True)
        >>> combine(np.array([0.01, -0.012, 0.004]), np.zeros(50))["verdict"]
        'no detectable effect'
    """
    from scipy import stats

    d = np.asarray(seed_deltas, dtype=np.float64)
    b = np.asarray(boot_deltas, dtype=np.float64)
    b = b[np.isfinite(b)]
    k = len(d)
    mean = float(d.mean())
    v_users = float(b.var(ddof=1)) if len(b) > 1 else float("nan")
    v_seeds = float(d.var(ddof=1)) / k if k > 1 else 0.0
    var = v_seeds + (v_users if np.isfinite(v_users) else 0.0)
    se = float(np.sqrt(var))
    df = float("inf") if v_seeds == 0 or k < 2 else (k - 1) * (var / v_seeds) ** 2
    q = stats.t.ppf(0.5 + level / 2, df) if np.isfinite(df) else stats.norm.ppf(0.5 + level / 2)
    if se > 0:
        lo, hi = mean - q * se, mean + q * se
        p_better = float(stats.t.cdf(mean / se, df) if np.isfinite(df) else stats.norm.cdf(mean / se))
    else:
        lo = hi = mean
        p_better = float(mean > 0) if mean != 0 else 0.5
    verdict = "helps" if lo > 0 else "hurts" if hi < 0 else "no detectable effect"
    return {"delta": mean, "se": se, "se_seeds": float(np.sqrt(v_seeds)),
            "se_users": float(np.sqrt(v_users)) if np.isfinite(v_users) else float("nan"), "df": df,
            "interval": (float(lo), float(hi)), "p_better": p_better, "verdict": verdict}


def trial(workload: Any, candidates: dict[str, Expr], *, kind: str = "sparse", model: str = "dlrm",
          seeds: int | Sequence[int] | None = None, n_boot: int = 200, seed: int = 0, level: float = 0.95,
          progress: bool = True, sequences: dict[str, str] | None = None, paired: bool = True,
          aa: bool = True, **options: Any) -> TrialResult:
    """Train baseline vs baseline + ``candidates`` over K seeds, paired; compare them (the
    method and its assumptions: the module docstring).

    Args:
        workload: a :class:`~fbrapids.workloads.Workload` (a declared log: views, joins,
            label, split, group, baseline features; ``load_workload("my.toml")``), or a
            folder of generated data (:func:`fbrapids.datasets.synthetic.workload`).  Its
            group column is the bootstrap's unit.
        candidates: new feature name -> expression over the joined views (``fbrapids.ops``).
        kind: ``"sparse"`` (ids, embedded) or ``"dense"`` (numbers) for the candidates.
        model: the model both arms train (``"dlrm"``, ``"wide_deep"``, ``"deepfm"``, ``"din"``,
            ``"logreg"``).
        seeds: K (seeds ``seed, seed + 1, ...``) or the seeds themselves; default
            :data:`DEFAULT_SEEDS`.  Each seed trains a baseline and a candidate arm.
        n_boot: paired bootstrap rounds over held-out users.
        seed: the first seed, and the bootstrap's.
        level: the interval's coverage (the verdict's test is at ``1 - level``).
        sequences: ``model="din"``: candidate behaviour sequences -> the sparse feature each
            attends to (the baseline arm trains DIN with no sequence).  Candidates may be
            fitted operators (fitted on the training days only) or history operators.
        paired: the arms of a seed start as one function (:mod:`fbrapids.trainers.arms`);
            False trains them as separate models (to measure what the pairing buys).
        aa: train an A/A arm per seed (the candidates shuffled across rows: the module
            docstring), +50% training; False leaves the A/A check out.
        options: ``backend``, ``epochs``, ``batch_size``, ``embedding_dim``, ``cache_rows``,
            ``host_rows``, ``train_threads``, ``nan``, ``work_dir``
            (:data:`fbrapids.app.trial_training.OPTIONS`; ``count_clean`` is accepted and unused).

    Raises:
        FeatureError: a candidate name collides with a baseline column.
        ArgumentError: a bad ``kind``, ``seeds``, ``level`` or option.
    """
    from fbrapids.ui.autobar import tqdm
    from fbrapids.datasets.synthetic import as_workload
    from fbrapids.app.trial_training import train_arms

    w = as_workload(workload)
    _check_arguments(w, candidates, kind, level)
    seed_list = _seed_list(seeds, seed)
    from fbrapids.workloads.split_check import check_split

    check = check_split(w)  # a split that cannot be right: one line before any bar or model
    t0 = time.perf_counter()
    bar = tqdm(total=2, disable=not progress, desc="trial", unit="step", position=1, leave=False)
    bar.set_postfix_str(f"{2 * len(seed_list)} models, one extraction")
    run = train_arms(w, candidates, kind=kind, model=model, seeds=seed_list, progress=progress,
                     sequences=sequences, paired=paired, aa=aa, split_check=check, **options)
    bar.update(1)
    _refuse_empty_arms(run, w)
    bar.set_postfix_str(f"bootstrap x{n_boot}")
    t = time.perf_counter()
    k = len(seed_list)
    rounds = arm_rounds(run.label, [*run.baseline, *run.candidate, *run.aa], run.group, n_boot, seed)
    result = TrialResult(list(candidates), {}, {}, n_boot=n_boot, n_users=int(len(np.unique(run.group))),
                         seeds=seed_list, level=level, extraction=run.extraction, rows=dict(run.rows),
                         split=dict(run.split))
    for m in METRICS:
        base, cand, shuffled = rounds[m][:k], rounds[m][k:2 * k], rounds[m][2 * k:]
        full = cand[:, 0] - base[:, 0]
        boot = (cand[:, 1:] - base[:, 1:]).mean(axis=0)
        result.nan_rounds[m] = int((~np.isfinite(boot)).sum())
        if run.aa:
            _aa_check(result, m, shuffled[:, 0] - base[:, 0], (shuffled[:, 1:] - base[:, 1:]).mean(axis=0), level)
            c = combine(cand[:, 0] - shuffled[:, 0], (cand[:, 1:] - shuffled[:, 1:]).mean(axis=0), level)
            result.info_delta[m], result.info_interval[m], result.info_verdict[m] = \
                c["delta"], c["interval"], c["verdict"]
        if result.nan_rounds[m]:
            log.warning("trial: %d of %d bootstrap rounds have an undefined %s (left out of the users' variance)",
                        result.nan_rounds[m], n_boot, m.upper())
        c = combine(full, boot, level)
        result.baseline[m], result.candidate[m] = float(base[:, 0].mean()), float(cand[:, 0].mean())
        result.delta[m], result.interval[m], result.p_better[m] = c["delta"], c["interval"], c["p_better"]
        result.verdict[m], result.se[m], result.df[m] = c["verdict"], c["se"], c["df"]
        result.se_seeds[m], result.se_users[m] = c["se_seeds"], c["se_users"]
        result.seed_deltas[m] = [float(x) for x in full]
        b0 = base[:, 0]
        result.seed_spread[m] = float(b0.max() - b0.min()) if k > 1 else float("nan")
    result.baseline["logloss"] = float(np.mean([_logloss(run.label, p) for p in run.baseline]))
    result.candidate["logloss"] = float(np.mean([_logloss(run.label, p) for p in run.candidate]))
    result.seconds = {**run.seconds, "bootstrap": time.perf_counter() - t, "total": time.perf_counter() - t0}
    bar.update(1)
    bar.refresh()  # the last step drawn even when it came within tqdm's redraw interval of the one before
    bar.close()
    log.info("%s", result.render())
    return result


def _check_arguments(w: Any, candidates: Any, kind: str, level: float) -> None:
    """What :func:`trial` refuses before any work: no candidates, a candidate named like a
    baseline column, a bad ``kind`` or ``level``, missing files, no group column."""
    if not isinstance(candidates, dict) or not candidates:
        raise ArgumentError(f"candidates must be a non-empty dict of name -> feature expression, got {candidates!r}")
    clash = [n for n in candidates if n in w.features or n in w.sparse or n in w.dense]
    if clash:
        raise FeatureError(f"candidate feature name(s) {clash} already name baseline columns; rename them")
    if kind not in ("sparse", "dense"):
        raise ArgumentError(f"kind must be 'sparse' or 'dense', got {kind!r}")
    if not 0 < level < 1:
        raise ArgumentError(f"level must be in (0, 1), got {level!r}")
    w.check_files()
    if w.group is None:
        raise ArgumentError(f"trial: {w.where} declares no group column; the trial's bootstrap resamples groups "
                            "(users): set group = ...")


def _refuse_empty_arms(run: Any, w: Any) -> None:
    """No verdict from arms that trained on 0 rows, or were judged on none (what cleaning or
    an inner join left of a split the check passed): a :class:`~fbrapids.errors.TrialError`."""
    trained, held = run.rows.get("trained", 0), run.rows.get("held out", 0)
    if trained == 0 or held == 0:
        rule = run.split.get("rule", w.split.rule)
        raise TrialError(f"trial on {w.where}: no verdict: the arms trained on {trained:,} rows and were judged on "
                         f"{held:,} held-out rows (split: held out {rule}, after cleaning and joins)")


def _aa_check(result: TrialResult, m: str, full: np.ndarray, boot: np.ndarray, level: float) -> None:
    """The A/A arms' test of metric ``m`` into ``result`` (``full``: per-seed A/A deltas;
    ``boot``: the seed-averaged A/A delta per bootstrap round)."""
    c = combine(full, boot, level)
    result.aa_delta[m], result.aa_interval[m], result.aa_verdict[m] = c["delta"], c["interval"], c["verdict"]
    result.aa_seed_deltas[m] = [float(x) for x in full]
    result.aa_spread[m] = float(np.abs(full).max())
    if c["verdict"] != "no detectable effect":
        log.warning("trial: the A/A check on %s: shuffled candidates give %+.4f [%+.4f, %+.4f] (%s): an input of "
                    "the candidates' shape moves the metric even when it tells nothing; read the candidates "
                    "against their shuffled copy (info_verdict)", m.upper(), c["delta"], *c["interval"], c["verdict"])


def _seed_list(seeds: int | Sequence[int] | None, first: int) -> list[int]:
    if seeds is None:
        seeds = DEFAULT_SEEDS
    if isinstance(seeds, (int, np.integer)):
        if seeds < 1:
            raise ArgumentError(f"seeds must be at least 1, got {seeds}")
        return [first + i for i in range(int(seeds))]
    out = [int(s) for s in seeds]
    if not out or len(set(out)) != len(out):
        raise ArgumentError(f"seeds must be distinct and at least one, got {list(seeds)}")
    return out


def _logloss(y: np.ndarray, p: np.ndarray) -> float:
    q = np.clip(p.astype(np.float64), 1e-7, 1 - 1e-7)
    return float(-np.mean(y * np.log(q) + (1 - y) * np.log(1 - q)))
