"""The trial's statistics: the metrics per bootstrap round, the combined test, one comparison.

The method is stated in :mod:`fbrapids.app.trials` (paired over seeds, a bootstrap over
held-out users, Student's t at Welch-Satterthwaite's degrees of freedom); this module holds
its parts: :func:`arm_rounds` (every prediction vector's AUC and GAUC on the held-out set
and on each bootstrap resample of users), :func:`combine` (the test of one metric),
:func:`compare` (a candidate against the baseline, and its A/A arms), and
:class:`TrialResult`.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence, TypedDict

import numpy as np
import torch

from fbrapids.errors import ArgumentError

log = logging.getLogger(__name__)

METRICS = ("auc", "gauc")
VERDICTS = ("helps", "hurts", "no detectable effect")


class CombinedTest(TypedDict):
    """The combined test of one metric (:func:`combine`)."""

    delta: float
    se: float
    se_seeds: float
    se_users: float
    df: float
    interval: tuple[float, float]
    p_better: float
    verdict: str


@dataclass
class TrialResult:
    """Baseline vs candidate on the held-out day, over K seeds (the method: :mod:`fbrapids.app.trials`).

    ``baseline`` / ``candidate``: each arm's metrics averaged over the seeds; ``delta``: the
    mean per-seed delta; ``seed_deltas``: each seed's; ``interval`` / ``p_better`` /
    ``verdict``: the combined test; ``se`` / ``se_seeds`` / ``se_users`` / ``df``: its parts;
    ``aa_delta`` / ``aa_seed_deltas`` / ``aa_interval`` / ``aa_verdict``: the A/A arms'
    (shuffled candidates) test, ``aa_spread`` the largest per-seed |A/A delta| (empty with
    ``aa=False``); ``info_delta`` / ``info_interval`` / ``info_verdict``: candidate against
    the A/A arm (what the candidate's values tell beyond a shuffled copy); ``seed_spread``: the largest |difference| between two baseline seeds'
    metric (one model's training noise); ``nan_rounds``: bootstrap rounds where a metric
    was undefined (a resample with one class), left out of ``se_users`` and counted here.

    ``p_value``: the delta's two-sided p-value under the same t; ``p_family``: with several
    candidates against one baseline, the larger of it and the test with the training noise
    pooled over them (:mod:`fbrapids.app.trial_family`; else ``p_value``); ``p_adjusted``:
    ``p_family`` corrected for the ``family`` of candidates (``correction``:
    :data:`fbrapids.app.trial_family.CORRECTIONS`, or ``"none"`` for one) and, in a
    sequential trial, for its looks; the verdict is ``p_adjusted < 1 - level`` by the
    delta's sign.  ``cost``: the trial's wall time, models trained and passes, beside one
    plain training's time on the same data when measured (``trial(reference=True)``);
    ``sequential``: the design and its looks (``trial(min_effect=...)``).
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
    split: dict[str, object] = field(default_factory=dict)
    p_value: dict[str, float] = field(default_factory=dict)
    p_family: dict[str, float] = field(default_factory=dict)
    p_adjusted: dict[str, float] = field(default_factory=dict)
    correction: str = "none"
    family: int = 1
    cost: dict[str, object] = field(default_factory=dict)
    sequential: dict[str, object] = field(default_factory=dict)

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
            if self.correction != "none" and m in self.p_adjusted:
                lines.append(f"        p {self.p_value[m]:.4f}, adjusted {self.p_adjusted[m]:.4f} ({self.correction})")
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
        from fbrapids.app.trial_report import cost_lines, sequential_lines

        return "\n".join(lines + sequential_lines(self.sequential) + cost_lines(self.cost))


class _Ranked:
    """A prediction vector sorted once for the AUC of every bootstrap round: the rows in
    score order, their labels, and where each group of tied scores starts."""

    def __init__(self, y: np.ndarray, p: np.ndarray) -> None:
        self.order = np.argsort(p, kind="mergesort")
        self.y = (y[self.order] != 0).astype(np.int64)
        self.start = np.flatnonzero(np.r_[True, np.diff(p[self.order]) != 0])


@functools.lru_cache(maxsize=None)
def _rounds_lib() -> ctypes.CDLL:
    from fbrapids.kernels import load_source

    lib = load_source((Path(__file__).with_name("csrc") / "auc_rounds.c").read_text())
    p, i64 = ctypes.c_void_p, ctypes.c_int64
    lib.fbx_auc_rounds.restype = None
    lib.fbx_auc_rounds.argtypes = [p, i64, i64, p, p, i64, p, i64, p, ctypes.c_int]
    return lib


def _auc_rounds(ranked: _Ranked, counts: np.ndarray, users_in_order: np.ndarray,
                threads: int | None = None) -> np.ndarray:
    """AUC of the ranked vector under each bootstrap round, ``counts`` ``[R, n_users]`` the
    rounds' user counts (a row weighs its user's count) and ``users_in_order`` each row's user
    in score order; ties count half; NaN where a round holds one class only; the rounds split
    over ``threads`` (default: the cores; the same bits on any).  In exact integer
    sums, one pass over the rows per round in C (``csrc/auc_rounds.c``: the numpy form made
    ``[R, n]`` temporaries and its ``reduceat`` along rows was most of a trial's bootstrap).

    Example (rows at 0.1, 0.8, 0.4, 0.4, labels 0, 1, 1, 0, users 0, 0, 1, 1):
        >>> ranked = _Ranked(np.array([0, 1, 1, 0]), np.array([0.1, 0.8, 0.4, 0.4]))
        >>> counts = np.array([[1, 1], [2, 0], [0, 3]])  # each user once; user 0 twice; user 1 thrice
        >>> _auc_rounds(ranked, counts, np.array([0, 0, 1, 1])[ranked.order]).tolist()
        [0.875, 1.0, 0.5]
    """
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    users = np.ascontiguousarray(users_in_order, dtype=np.int64)
    y, start = np.ascontiguousarray(ranked.y, dtype=np.int64), np.ascontiguousarray(ranked.start, dtype=np.int64)
    if len(users) and (users.min() < 0 or users.max() >= counts.shape[1]):
        raise ArgumentError(f"AUC rounds: a row's user outside the {counts.shape[1]} users counted")
    out = np.empty(len(counts))
    _rounds_lib().fbx_auc_rounds(counts.ctypes.data, len(counts), counts.shape[1], users.ctypes.data, y.ctypes.data,
                                 len(users), start.ctypes.data, len(start), out.ctypes.data,
                                 _cores() if threads is None else threads)
    return out


def _cores() -> int:
    """The cores this process may run on (the rounds' threads)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _auc_weighted(y: np.ndarray, p: np.ndarray, w: np.ndarray) -> float:
    """AUC with integer row weights (a bootstrap sample's multiplicities); ties count half:
    one round of :func:`_auc_rounds`, each row its own user."""
    ranked = _Ranked(y, p)
    return float(_auc_rounds(ranked, np.asarray(w, dtype=np.int64)[None, :], ranked.order)[0])


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
               seed: int = 0) -> dict[str, np.ndarray]:
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
    resamples = UserResamples(group, n_boot, seed)
    out = {m: np.empty((len(preds), 1 + n_boot)) for m in METRICS}
    for i, p in enumerate(preds):
        one = resamples.rounds(label, p)
        for m in METRICS:
            out[m][i] = one[m]
    return out


class UserResamples:
    """``n_boot`` bootstrap resamples of the held-out users (``group``'s distinct values),
    drawn from ``seed``: the same for every prediction vector, whenever it is scored, so
    that a trial scores each arm once as its seed finishes (:meth:`rounds`) and pairs the
    rows later (:func:`arm_rounds` scores several at once)."""

    def __init__(self, group: np.ndarray, n_boot: int, seed: int = 0) -> None:
        self.row_user, self.n_users = _user_index(group)
        rng = np.random.default_rng(seed)
        n = self.n_users
        self.counts = np.vstack([np.ones(n, dtype=np.int64)]
                                + [np.bincount(rng.integers(0, n, n), minlength=n) for _ in range(n_boot)])
        self._counts64 = torch.from_numpy(self.counts.astype(np.float64))  # (the GAUC's weighted sums)

    def rounds(self, label: np.ndarray, p: np.ndarray) -> dict[str, np.ndarray]:
        """``p``'s AUC and GAUC on the full set (element 0) and on each resample: ``[1 + n_boot]``."""
        return self.finish(self.scored(label, p))

    def scored(self, label: np.ndarray, p: np.ndarray, threads: int | None = None) -> "Scored":
        """The part of :meth:`rounds` that needs no torch: every round's AUC (on ``threads``,
        default the cores) and each user's AUC and GAUC weight; single-threaded with
        ``threads=1``, so that it can run beside a training (a trial scores a pass's arms
        while the next pass trains).  :meth:`finish` makes it the rounds."""
        row_user = self.row_user
        ranked = _Ranked(label, p)  # sorted once for every round
        auc = _auc_rounds(ranked, self.counts, row_user[ranked.order], threads)
        a, w = user_aucs(label, p, row_user, self.n_users)
        return Scored(auc, a, w)

    def finish(self, part: "Scored") -> dict[str, np.ndarray]:
        """:meth:`rounds` from its :meth:`scored` part: each round's GAUC, its weighted sums as one
        product with the counts cast once (numpy's ``counts @ w`` cast them at every call, and
        its BLAS threads then spun beside the training: 2-3% of a 10-candidate trial's CPU;
        torch's run on the threads the training already has, so on the calling thread)."""
        den, num = (self._counts64 @ torch.from_numpy(np.stack([part.w, part.w * part.a], axis=1))).numpy().T
        with np.errstate(invalid="ignore", divide="ignore"):
            gauc = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
        return {"auc": part.auc, "gauc": gauc}


@dataclass
class Scored:
    """:meth:`UserResamples.scored`'s part of one vector's rounds: every round's AUC, each
    user's AUC ``a`` and GAUC weight ``w`` (:func:`user_aucs`)."""

    auc: np.ndarray
    a: np.ndarray
    w: np.ndarray


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


def combine(seed_deltas: np.ndarray, boot_deltas: np.ndarray, level: float = 0.95) -> CombinedTest:
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
    # Student's t and the normal through the functions scipy.stats calls (the same values) without
    # importing scipy.stats: half a second or more of a trial in a process of its own
    from scipy import special

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
    q = special.stdtrit(df, 0.5 + level / 2) if np.isfinite(df) else special.ndtri(0.5 + level / 2)
    if se > 0:
        lo, hi = mean - q * se, mean + q * se
        p_better = float(special.stdtr(df, mean / se) if np.isfinite(df) else special.ndtr(mean / se))
    else:
        lo = hi = mean
        p_better = float(mean > 0) if mean != 0 else 0.5
    verdict = "helps" if lo > 0 else "hurts" if hi < 0 else "no detectable effect"
    return {"delta": mean, "se": se, "se_seeds": float(np.sqrt(v_seeds)),
            "se_users": float(np.sqrt(v_users)) if np.isfinite(v_users) else float("nan"), "df": df,
            "interval": (float(lo), float(hi)), "p_better": p_better, "verdict": verdict}




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




def _logloss(y: np.ndarray, p: np.ndarray) -> float:
    q = np.clip(p.astype(np.float64), 1e-7, 1 - 1e-7)
    return float(-np.mean(y * np.log(q) + (1 - y) * np.log(1 - q)))


def compare(candidates: list[str], label: np.ndarray, base: Sequence[np.ndarray], cand: Sequence[np.ndarray],
            rounds: dict[str, dict[str, np.ndarray]], level: float) -> TrialResult:
    """One comparison: the candidate arms' predictions ``cand`` against the baseline's
    ``base`` (one vector per seed, paired by position), and, where ``rounds`` holds ``"aa"``,
    the A/A arms' against the baseline and the candidate's against them.  ``rounds[arm][m]``:
    :func:`arm_rounds`' rows of that arm's vectors (``"base"``, ``"cand"``, ``"aa"``) for metric
    ``m``.  The verdicts are the test at ``level`` (a family's correction is applied after).

    Example:
        >>> rng = np.random.default_rng(0)
        >>> y, g = rng.integers(0, 2, 400), rng.integers(0, 40, 400)
        >>> base = [rng.random(400) for _ in range(3)]; cand = [b + 0.3 * y for b in base]
        >>> r = arm_rounds(y, [*base, *cand], g, n_boot=30)
        >>> res = compare(["x"], y, base, cand, {a: {m: r[m][i:i + 3] for m in METRICS}
        ...                                      for a, i in (("base", 0), ("cand", 3))}, 0.95)
        >>> res.verdict["auc"], res.p_value["auc"] < 0.05, res.correction
        ('helps', True, 'none')
    """
    from fbrapids.app.trial_family import two_sided_p

    k = len(base)
    result = TrialResult(list(candidates), {}, {}, level=level)
    for m in METRICS:
        b, c = rounds["base"][m], rounds["cand"][m]
        full, boot = c[:, 0] - b[:, 0], (c[:, 1:] - b[:, 1:]).mean(axis=0)
        result.nan_rounds[m] = int((~np.isfinite(boot)).sum())
        if result.nan_rounds[m]:
            log.warning("trial: %d of %d bootstrap rounds have an undefined %s (left out of the users' variance)",
                        result.nan_rounds[m], len(boot), m.upper())
        if "aa" in rounds:
            a = rounds["aa"][m]
            _aa_check(result, m, a[:, 0] - b[:, 0], (a[:, 1:] - b[:, 1:]).mean(axis=0), level)
            i = combine(c[:, 0] - a[:, 0], (c[:, 1:] - a[:, 1:]).mean(axis=0), level)
            result.info_delta[m], result.info_interval[m], result.info_verdict[m] = \
                i["delta"], i["interval"], i["verdict"]
        t = combine(full, boot, level)
        result.baseline[m], result.candidate[m] = float(b[:, 0].mean()), float(c[:, 0].mean())
        result.delta[m], result.interval[m], result.p_better[m] = t["delta"], t["interval"], t["p_better"]
        result.verdict[m], result.se[m], result.df[m] = t["verdict"], t["se"], t["df"]
        result.se_seeds[m], result.se_users[m] = t["se_seeds"], t["se_users"]
        result.p_value[m] = result.p_family[m] = result.p_adjusted[m] = two_sided_p(t["delta"], t["se"], t["df"])
        result.seed_deltas[m] = [float(x) for x in full]
        result.seed_spread[m] = float(b[:, 0].max() - b[:, 0].min()) if k > 1 else float("nan")
    result.baseline["logloss"] = float(np.mean([_logloss(label, p) for p in base]))
    result.candidate["logloss"] = float(np.mean([_logloss(label, p) for p in cand]))
    return result
