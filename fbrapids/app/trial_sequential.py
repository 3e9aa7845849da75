"""A sequential trial: add seeds only while the answer is not yet clear against a margin.

``trial(..., min_effect=m, seeds=K_max)`` starts with two seeds per arm and **looks** after
each: at ``K = 2, 3, ..., K_max`` seeds.  A look computes every comparison as a fixed-K
trial would (:mod:`fbrapids.app.trials`) and asks of each candidate's AUC interval where it
lies against the user's margin ``m`` (the smallest gain worth having):

* **above** (``low >= m``): the candidate helps by at least ``m``;
* **below** (``high <= m``): whatever it does, it gains less than ``m``;
* **straddles** (``low < m < high``): not yet known.

The trial adds a seed while any candidate's interval straddles the margin, and stops at
``K_max`` regardless.  The verdicts (helps / hurts / no detectable effect, against 0 as
always) are the stopping look's.

**The error rate.**  Looking several times gives a false "helps" several chances, so each
look tests at a share of ``alpha = 1 - level``: with ``L = K_max - 1`` possible looks, each
look's intervals are at level ``1 - alpha / L`` and its p-values are multiplied by ``L``
(Bonferroni over the looks).  Whatever the stopping rule, the chance of a false verdict
at the look where the trial stops is at most the sum over the looks, ``alpha``; with
several candidates the family's correction (:mod:`fbrapids.app.trial_family`) applies within
each look, so the family-wise error stays at most ``alpha``.  The price is width: a look's
interval is wider than a fixed-K trial's at the same K.  What it buys is seeds: a clear
answer (a large effect, or one far below the margin) stops at K = 2.
``benchmarks/trial_calibration.py --min-effect`` measures the false-alarm rate, the power
and the seeds used.

Example:
    >>> d = SequentialDesign(min_effect=0.002, max_seeds=6)
    >>> d.looks, d.alpha_share(0.05), d.first
    (5, 0.01, 2)
    >>> d.position((0.003, 0.009)), d.position((-0.004, 0.001)), d.position((0.0, 0.004))
    ('above', 'below', 'straddles')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

from fbrapids.errors import ArgumentError

#: the most seeds per arm of a sequential trial when ``seeds`` is not given
DEFAULT_MAX_SEEDS = 6
#: the metric whose interval the looks compare with the margin
MARGIN_METRIC = "auc"


class Look(TypedDict):
    """One look of a sequential trial: the seeds, and each candidate's AUC interval and its position."""

    seeds: int
    positions: dict[str, str]
    intervals: dict[str, list[float]]


@dataclass
class SequentialDesign:
    """Looks at ``first``, ``first + 1``, ..., ``max_seeds`` seeds, each at ``alpha / looks``;
    a seed is added while an AUC interval straddles ``min_effect`` (module docstring)."""

    min_effect: float
    max_seeds: int
    first: int = 2
    history: list[Look] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.min_effect > 0:
            raise ArgumentError(f"min_effect must be above 0 (the smallest AUC gain worth having), "
                                f"got {self.min_effect!r}")
        if self.max_seeds < self.first:
            raise ArgumentError(f"a sequential trial needs seeds >= {self.first} (its first look), "
                                f"got {self.max_seeds}")

    @property
    def looks(self) -> int:
        """How many looks the trial may take."""
        return self.max_seeds - self.first + 1

    def alpha_share(self, alpha: float) -> float:
        """Each look's share of the error rate ``alpha``."""
        return alpha / self.looks

    def position(self, interval: tuple[float, float]) -> str:
        """``"above"``, ``"below"`` or ``"straddles"``: ``interval`` against the margin."""
        lo, hi = interval
        if lo >= self.min_effect:
            return "above"
        if hi <= self.min_effect:
            return "below"
        return "straddles"

    def look(self, seeds: int, intervals: dict[str, tuple[float, float]]) -> bool:
        """Record a look at ``seeds`` seeds (each candidate's AUC interval); True when the trial
        goes on (an interval straddles the margin and a seed is left to add).

        Example:
            >>> d = SequentialDesign(0.002, 4)
            >>> d.look(2, {"a": (-0.001, 0.006)}), d.look(3, {"a": (0.0005, 0.0015)})
            (True, False)
            >>> [h["positions"]["a"] for h in d.history], d.stopped
            (['straddles', 'below'], 'every interval is clear of the margin')
        """
        positions = {name: self.position(iv) for name, iv in intervals.items()}
        self.history.append({"seeds": seeds, "positions": positions,
                             "intervals": {n: [float(a), float(b)] for n, (a, b) in intervals.items()}})
        return "straddles" in positions.values() and seeds < self.max_seeds

    @property
    def stopped(self) -> str:
        """Why the trial stopped (after its last look)."""
        if not self.history:
            return "no look taken"
        last = self.history[-1]
        if "straddles" in last["positions"].values():
            return f"the most seeds ({self.max_seeds}) reached with an interval straddling the margin"
        return "every interval is clear of the margin"

    def as_dict(self) -> dict[str, object]:
        """The design and its looks, for a trial's result and JSON."""
        return {"min_effect": self.min_effect, "metric": MARGIN_METRIC, "max_seeds": self.max_seeds,
                "first_look": self.first, "looks_allowed": self.looks, "looks": self.history,
                "stopped": self.stopped}
