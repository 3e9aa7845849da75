"""Many candidates against one baseline: p-values, the family's correction, the ranked table.

``trial(workload, {"a": ..., "b": ...}, each=True)`` tries every candidate on its own
against one shared baseline (:mod:`fbrapids.app.trial_training`: N + 1 arms per seed, and an
A/A arm per candidate with ``aa=True``).  Each candidate's comparison is a plain trial's
(:mod:`fbrapids.app.trials`: paired over seeds, a bootstrap over held-out users, Student's
t); what changes is the verdict, which must hold for the **family** of N candidates.

**The p-value.**  A candidate's own two-sided p-value is its test's t distribution's
probability of a delta at least as far from 0 as the one measured: ``2 * P(T > |delta| / se)``.
With one candidate, ``p < 1 - level`` exactly when the interval leaves out 0, so a single
candidate's verdict is the plain trial's.

**The family's p-value.**  A correction for N candidates tests each at about
``(1 - level) / N``, far out in the tails, where a test whose training noise rests on K - 1 = 2
degrees of freedom is not what its t distribution says: when the K seeds happen to agree, the
variance is small *and* Welch-Satterthwaite's degrees of freedom large, and the p-value far
too small (under the trial's model with the calibration's noise levels, ``p < 0.005`` comes
up ~2.5 times as often as it should, and Holm over ten noise candidates calls one in ~12% of
trials).  The family holds more evidence on that noise: every candidate's arms train from
the same seeds, on the same batches, against the same baseline.  So the per-seed deltas
form a candidates x seeds table, and a randomized-block analysis (seeds the blocks) pools
the training noise: the interaction mean square (``(N - 1)(K - 1)`` degrees of freedom) for
each candidate's own arm, the seeds' mean square (``K - 1``) for what the shared baseline
adds to every candidate's delta; with the candidate's users' variance (its bootstrap's) the
delta's variance is their sum, at Satterthwaite's degrees of freedom (:func:`pooled_p`).
That test assumes the candidates' arms are alike in training noise; the candidate's own
test does not.  A candidate's family p-value is the **larger** of the two: it is valid
wherever either test is (under the model, ten noise candidates: any false verdict in
~3% of trials, whether or not the candidates' training noise differ by 4x; the power lost
beside the pooled test alone is a few points).

**The correction** (per metric; AUC and GAUC are separate families):

* ``"holm"`` (the default): Holm's step-down method.  The p-values sorted,
  ``p_(1) <= ... <= p_(N)``, the ``j``-th is adjusted to ``max_{i <= j} min(1, (N - i + 1) p_(i))``.
  It controls the **family-wise error rate**, the chance of *any* false verdict among the N,
  at ``1 - level``, whatever the dependence between the candidates (they share the
  baseline arms, so their deltas are correlated).
* ``"bh"``: Benjamini-Hochberg's step-up method, adjusted ``min_{i >= j} min(1, N p_(i) / i)``.
  It controls the **false discovery rate**, the expected share of false verdicts among the
  candidates called, at ``1 - level``, under independence or positive dependence of the
  p-values (a shared baseline makes the deltas positively correlated).  More power, a
  weaker promise: among many true effects a few false ones may be called.

A candidate **helps** when its adjusted p-value is below ``1 - level`` and its delta is
above 0, **hurts** when below 0, else shows **no detectable effect**.  The intervals
stay each candidate's own, at ``level`` (not widened for the family): a candidate whose
interval leaves out 0 may still be "no detectable effect" once the family is accounted for,
and the table shows both p-values.

Example:
    >>> adjust_p([0.01, 0.04, 0.03, 0.20], "holm")
    [0.04, 0.09, 0.09, 0.2]
    >>> [round(p, 4) for p in adjust_p([0.01, 0.04, 0.03, 0.20], "bh")]
    [0.04, 0.0533, 0.0533, 0.2]
    >>> two_sided_p(0.0, 0.001, 5.0), round(two_sided_p(0.003, 0.001, float("inf")), 4)
    (1.0, 0.0027)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

import numpy as np

from fbrapids.errors import ArgumentError

if TYPE_CHECKING:
    from fbrapids.app.trial_stats import TrialResult

#: the corrections :func:`adjust_p` applies, by the names ``trial(correction=...)`` takes
CORRECTIONS = {"holm": "Holm's step-down method (family-wise error rate)",
               "bh": "Benjamini-Hochberg's step-up method (false discovery rate)"}


def two_sided_p(delta: float, se: float, df: float) -> float:
    """``2 * P(T > |delta| / se)`` for Student's t at ``df`` degrees of freedom (normal when
    ``df`` is infinite); 1 for a delta of 0, 0 for a nonzero delta with ``se == 0``."""
    from scipy import special  # (scipy.stats's t.sf and norm.sf, without importing scipy.stats: see trial_stats)

    if se <= 0 or not math.isfinite(se):
        return 1.0 if delta == 0 else 0.0
    z = abs(delta) / se
    return float(2 * (special.stdtr(df, -z) if math.isfinite(df) else special.ndtr(-z)))


def pooled_p(seed_deltas: np.ndarray, v_users: Sequence[float]) -> list[float]:
    """Each candidate's two-sided p-value with the training noise pooled over the family
    (module docstring): ``seed_deltas`` ``[N, K]`` (candidate ``i``'s per-seed deltas, the
    seeds paired across candidates), ``v_users[i]`` the users' variance of candidate ``i``'s
    seed-averaged delta.  Needs ``N >= 2`` and ``K >= 2``.

    Example:
        >>> d = np.array([[0.004, 0.006, 0.005], [0.0, 0.001, -0.001], [0.001, -0.002, 0.0]])
        >>> [round(p, 4) for p in pooled_p(d, [1e-7, 1e-7, 1e-7])]
        [0.0005, 1.0, 0.677]
    """

    d = np.asarray(seed_deltas, dtype=np.float64)
    n, k = d.shape
    if n < 2 or k < 2:
        raise ArgumentError(f"pooled_p: needs at least 2 candidates and 2 seeds, got {n} x {k}")
    row, col, grand = d.mean(axis=1, keepdims=True), d.mean(axis=0, keepdims=True), d.mean()
    ms_resid = float(((d - row - col + grand) ** 2).sum() / ((n - 1) * (k - 1)))  # one arm's own noise
    ms_seeds = float(n * ((col - grand) ** 2).sum() / (k - 1))  # n x the shared part + the own part
    shared, own = ms_seeds / (n * k), ms_resid * (1 - 1 / n) / k  # var of a row mean: (s_B^2 + s_C^2) / K
    v_seeds = shared + own
    df_seeds = v_seeds ** 2 / (shared ** 2 / (k - 1) + own ** 2 / ((n - 1) * (k - 1))) if v_seeds > 0 else np.inf
    out = []
    for i in range(n):
        var = v_seeds + float(v_users[i])
        df = df_seeds * (var / v_seeds) ** 2 if v_seeds > 0 else np.inf
        out.append(two_sided_p(float(row[i, 0]), float(np.sqrt(var)), df))
    return out


def family_p(own: Sequence[float], seed_deltas: np.ndarray, v_users: Sequence[float]) -> list[float]:
    """The family's p-value of each candidate: the larger of its own test's (``own``) and
    :func:`pooled_p`'s (module docstring); its own alone with one candidate or one seed.

    Example:
        >>> d = np.array([[0.004, 0.006, 0.005], [0.0, 0.001, -0.001]])
        >>> family_p([0.01, 0.9], d, [1e-7, 1e-7]) == [max(a, b) for a, b in zip([0.01, 0.9], pooled_p(d, [1e-7] * 2))]
        True
    """
    d = np.asarray(seed_deltas, dtype=np.float64)
    if d.shape[0] < 2 or d.shape[1] < 2:
        return [float(p) for p in own]
    return [max(float(a), b) for a, b in zip(own, pooled_p(d, v_users))]


def adjust_p(p: Sequence[float], method: str = "holm") -> list[float]:
    """The family's adjusted p-values, in the order given (see the module docstring): a
    hypothesis is rejected at ``alpha`` when its adjusted p-value is below ``alpha``.

    Raises:
        ArgumentError: an unknown ``method`` (:data:`CORRECTIONS` names them).
    """
    if method not in CORRECTIONS:
        raise ArgumentError(f"correction must be one of {', '.join(CORRECTIONS)}, got {method!r}")
    q = np.asarray(p, dtype=np.float64)
    n = len(q)
    if n == 0:
        return []
    order = np.argsort(q, kind="mergesort")
    ranked = q[order]
    if method == "holm":
        adjusted = np.maximum.accumulate(np.minimum(1.0, (n - np.arange(n)) * ranked))
    else:
        adjusted = np.minimum.accumulate(np.minimum(1.0, n * ranked / np.arange(1, n + 1))[::-1])[::-1]
    out = np.empty(n)
    out[order] = adjusted
    return [float(x) for x in out]


def verdict_of(delta: float, p_adjusted: float, alpha: float) -> str:
    """``"helps"`` / ``"hurts"`` when ``p_adjusted < alpha`` (by the delta's sign), else
    ``"no detectable effect"``.

    Example:
        >>> verdict_of(0.004, 0.01, 0.05), verdict_of(-0.004, 0.01, 0.05), verdict_of(0.004, 0.2, 0.05)
        ('helps', 'hurts', 'no detectable effect')
    """
    if p_adjusted < alpha and delta != 0:
        return "helps" if delta > 0 else "hurts"
    return "no detectable effect"


@dataclass
class CandidateTrials:
    """Every candidate against one shared baseline (``trial(..., each=True)``).

    ``results``: each candidate's :class:`~fbrapids.app.trials.TrialResult` against the
    baseline (its ``verdict`` the family's, from ``p_adjusted``; ``p_value`` its own);
    ``correction``: the method (:data:`CORRECTIONS`), applied per metric over the
    candidates; ``cost``: wall time, models trained, passes and, when measured, one plain
    training's time on the same data (:meth:`fbrapids.app.trials.TrialResult.cost`);
    ``sequential``: the looks of a sequential design, when one ran.
    """

    results: dict[str, TrialResult]
    correction: str
    level: float = 0.95
    seeds: list[int] = field(default_factory=list)
    n_boot: int = 0
    n_users: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    split: dict[str, object] = field(default_factory=dict)
    extraction: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    cost: dict[str, object] = field(default_factory=dict)
    sequential: dict[str, object] = field(default_factory=dict)

    @property
    def candidates(self) -> list[str]:
        return list(self.results)

    @property
    def method(self) -> str:
        """The correction's method, in words (:data:`CORRECTIONS`)."""
        return CORRECTIONS[self.correction]

    def ranking(self, metric: str = "auc") -> list[str]:
        """The candidates by delta on ``metric``, largest first.

        Example:
            >>> from fbrapids.app.trials import TrialResult
            >>> r = {n: TrialResult([n], {}, {}, delta={"auc": d}) for n, d in (("a", 0.001), ("b", 0.004))}
            >>> CandidateTrials(r, "holm").ranking()
            ['b', 'a']
        """
        return sorted(self.results, key=lambda n: -self.results[n].delta.get(metric, float("-inf")))

    def helps(self, metric: str = "auc") -> list[str]:
        """The candidates whose family-corrected verdict on ``metric`` is "helps", best first."""
        return [n for n in self.ranking(metric) if self.results[n].verdict.get(metric) == "helps"]

    def render(self) -> str:
        """The ranked table: per metric, each candidate's delta, interval, p-values and verdict."""
        from fbrapids.app.trial_report import render_family

        return render_family(self)

    def as_dict(self) -> dict[str, object]:
        """What ``fbrapids trial --each`` writes as JSON: the family's settings, the ranking
        per metric, and every candidate's result."""
        import dataclasses

        return {"each": True, "correction": self.correction, "correction_method": CORRECTIONS[self.correction],
                "level": self.level, "seeds": self.seeds, "n_boot": self.n_boot, "n_users": self.n_users,
                "rows": self.rows, "split": self.split, "extraction": self.extraction, "seconds": self.seconds,
                "cost": self.cost, "sequential": self.sequential,
                "ranking": {m: self.ranking(m) for m in ("auc", "gauc")},
                "candidates": {n: dataclasses.asdict(r) for n, r in self.results.items()}}

    def _repr_html_(self) -> str:
        """What a notebook shows: the ranked table and every candidate's deltas as bars."""
        from fbrapids.ui.display import family_html

        return family_html(self)
