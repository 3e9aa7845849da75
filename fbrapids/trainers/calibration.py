"""Post-hoc calibration: a shift of a model's logits, fitted on rows held back from training.

A CTR model's mean prediction on a held-out day can sit away from the day's click rate
while it still ranks well.  ``fit`` holds back every :data:`HOLD_EVERY`-th batch of its pass
from training (:class:`HeldBack`: the newest ones, up to ``calibration_rows`` rows; an older
held batch pushed out is trained on then) and, at the end, fits :func:`intercept` on the
final model's logits of the held rows: the shift ``b`` of ``sigmoid(logit + b)`` that makes
the mean prediction there the click rate (a logistic regression of the labels on the logit
with its slope held at 1).  The held rows are out of sample for the model that is
calibrated, as the held-out day is, and they come from the whole pass, not from its last
steps.

**The click rate it is fitted to is the span's, not the held rows' own.**  A held batch is a
sample of the batches read since the one held before it (its *span*: it and the
``HOLD_EVERY - 1`` trained ones before it, :meth:`HeldBack.count`); the held rows' click rate
carries their own coin flips, about 2% (SD) at 20,480 rows and a 12% click rate, and the
shift passed them on to every model trained on that stream: on the demo data at 200,000 rows
the held rows' click rate sat 2.2% to 3.2% below the training rows' on data seeds 0, 1 and 2,
and every model's held-out calibration 2% to 4% below the oracle's (docs/models.md).  The
final model's mean prediction is still read on the held rows (the only rows it has not
trained on), but it is brought to the click rate of their spans, eight times the rows
(:meth:`HeldBack.rate`): an unbiased target with an eighth of the variance, and as recent
as the held rows (at a million rows the kept spans are the pass's last 262,144 rows).

Why held-back rows, and not the progressive predictions (each batch's logits before its own
step, McMahan et al., 2013), which cost no rows: the final model's mean prediction moves with
the labels of its last steps, and on the demo data at 200,000 rows the held-out calibration
of a shift fitted on the progressive pairs fell outside ``[0.95, 1.05]`` in 7 of 20 runs,
whatever the slice (docs/models.md); training on the held rows after fitting the shift
moved it off again (0.86 to 0.94 on the seed where the progressive fit gave 1.10 to 1.19).
With several epochs, every pass reads the batches in the first pass's order (``fit`` sets the
stream's epoch to 0 on every pass), so that a later pass holds back the same batches
(:meth:`HeldBack.holds`): the held rows stay out of every pass and calibrate the final model.

Why not Platt scaling's slope too (:func:`platt`, ``sigmoid(a * logit + b)``): a fitted slope
stretched the final model's logits and moved its held-out calibration away from 1 in the
earlier, progressive fit (docs/models.md); the shift alone keeps the ranking and the AUC.

Example:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> z = rng.normal(-2, 1, 50_000)
    >>> y = (rng.random(50_000) < 1 / (1 + np.exp(-(z + 0.3)))).astype(float)
    >>> round(intercept(z, y), 1)
    0.3
    >>> a, b = platt(z, y)
    >>> round(a, 1), round(b, 1)
    (1.0, 0.3)
"""

from __future__ import annotations

import logging
import math
from typing import Any, Mapping, TypedDict

import numpy as np
import torch

from fbrapids.errors import ArgumentError
from fbrapids.trainers.batch import Batch

log = logging.getLogger(__name__)

#: rows held back for the calibration at most (the newest held batches; older ones are trained on)
CALIBRATION_ROWS = 1 << 15
#: every this-many-th batch of a pass is held back from training for the calibration
HOLD_EVERY = 8
#: fewer rows than this, or fewer positives / negatives than ``MIN_CLASS_ROWS``: no calibration
MIN_ROWS = 256
MIN_CLASS_ROWS = 16


def platt(logits: np.ndarray, labels: np.ndarray, ridge: float = 1e-6, max_iter: int = 100) -> tuple[float, float]:
    """``(a, b)`` of the logistic regression of ``labels`` (0/1) on ``logits``: Newton's
    method on the mean log loss (a tiny ridge keeps it defined on separable data), from
    ``(1, 0)``, the identity.

    Example:
        >>> [round(v, 4) + 0.0 for v in platt(np.array([-1.0, 1.0, -1.0, 1.0]), np.array([0.0, 1.0, 1.0, 0.0]))]
        [0.0, 0.0]
    """
    z = np.asarray(logits, dtype=np.float64).ravel()
    y = np.asarray(labels, dtype=np.float64).ravel()
    x = np.column_stack([z, np.ones_like(z)])
    w = np.array([1.0, 0.0])
    n = len(z)
    for _ in range(max_iter):
        p = 1.0 / (1.0 + np.exp(-np.clip(x @ w, -50, 50)))
        grad = x.T @ (p - y) / n + ridge * w
        hess = (x * (p * (1 - p))[:, None]).T @ x / n + ridge * np.eye(2)
        step = np.linalg.solve(hess, grad)
        w -= step
        if float(np.abs(step).max()) < 1e-10:
            break
    return float(w[0]), float(w[1])


def intercept(logits: np.ndarray, labels: np.ndarray, max_iter: int = 200, rate: float | None = None) -> float:
    """The shift ``b`` of the logistic regression of ``labels`` (0/1) on ``logits`` with the
    slope held at 1: the root of ``sum(sigmoid(logit + b)) = sum(labels)``, so the mean
    prediction equals the click rate (``rate`` when given, else the labels').  Newton's method kept inside a bracket that holds the
    root (``logit(rate) - max(logit)`` to ``logit(rate) - min(logit)``), bisecting where a
    Newton step would leave it: plain Newton from 0 overshoots and diverges when the logits sit
    far from the labels' rate (every logit near +1.8, a rate of 0.3).

    Example:
        >>> round(intercept(np.zeros(4), np.array([0.0, 0.0, 0.0, 1.0])), 4)  # log(1/3)
        -1.0986
        >>> round(intercept(np.full(10, 1.8), np.r_[np.ones(3), np.zeros(7)]), 4)  # logit(0.3) - 1.8
        -2.6473
        >>> round(intercept(np.zeros(4), np.zeros(4), rate=0.25), 4)  # a given rate: log(1/3)
        -1.0986
    """
    z = np.asarray(logits, dtype=np.float64).ravel()
    y = np.asarray(labels, dtype=np.float64).ravel()
    rate = float(y.mean()) if rate is None else float(rate)
    if not 0.0 < rate < 1.0:
        return -math.inf if rate <= 0.0 else math.inf
    target = math.log(rate / (1.0 - rate))
    lo, hi = target - float(z.max()), target - float(z.min())
    b = min(max(0.0, lo), hi)
    for _ in range(max_iter):
        p = 1.0 / (1.0 + np.exp(-np.clip(z + b, -50, 50)))
        gap = float(p.mean()) - rate  # increasing in b
        if gap > 0:
            hi = b
        else:
            lo = b
        slope = float((p * (1 - p)).mean())
        nb = b - gap / slope if slope > 0 else math.nan
        if not lo <= nb <= hi:  # a Newton step out of the bracket: bisect instead
            nb = 0.5 * (lo + hi)
        if abs(nb - b) < 1e-12 or hi - lo < 1e-12:
            return float(nb)
        b = nb
    return float(b)


class BatchState(TypedDict):
    """A :class:`~fbrapids.trainers.batch.Batch` as tensors and plain containers (:func:`batch_state`)."""

    dense: torch.Tensor
    label: torch.Tensor
    group: torch.Tensor | None
    sparse: dict[str, list[torch.Tensor]]


def batch_state(batch: Batch) -> BatchState:
    """``batch`` as tensors and plain containers (what ``torch.load(weights_only=True)`` reads back)."""
    return {"dense": batch.dense, "label": batch.label, "group": batch.group,
            "sparse": {k: [v, o] for k, (v, o) in batch.sparse.items()}}


def batch_from_state(state: BatchState) -> Batch:
    """The batch :func:`batch_state` wrote.

    Example:
        >>> b = Batch(torch.zeros(2, 1), torch.tensor([0., 1.]), {"u": (torch.tensor([3, 4]), torch.tensor([0, 1]))})
        >>> batch_from_state(batch_state(b)).sparse["u"][0].tolist()
        [3, 4]
    """
    return Batch(state["dense"], state["label"], {k: (v, o) for k, (v, o) in state["sparse"].items()},
                 state.get("group"))


class HeldBack:
    """The batches of a pass held back from training for the calibration: every
    ``every``-th one (:meth:`holds`), the newest of them up to ``capacity`` rows.

    ``rows`` counts each held step's rows over every rank (the union's); ``batches`` holds
    this process's part of each (None where it has none).  :meth:`add` returns the held
    batches pushed out by a newer one, oldest first: the trainer trains on them then.
    ``spans`` holds, per held batch, the rows and clicks of the batches this process read
    since the held one before it, itself included (:meth:`count` each batch of the pass
    before :meth:`add` holds it): :meth:`rate`, the click rate the shift is fitted to (the
    module docstring).  ``index`` holds each held batch's number in its pass: a later pass
    (read in the same order) holds back those batches, and only those.

    Example:
        >>> held = HeldBack(capacity=4, every=2)
        >>> [i for i in range(6) if held.holds(i)]
        [1, 3, 5]
        >>> held.add("a", 3), held.add("b", 3), held.add("c", 1)
        ([], [], ['a'])
        >>> held.batches, held.held_rows()
        (['b', 'c'], 4)
        >>> held.index, [i for i in range(6) if held.holds(i, epoch=1)]  # a later pass: the kept ones
        ([-1, -1], [])

    The spans' click rate:
        >>> held = HeldBack(capacity=8, every=2)
        >>> b = Batch(torch.zeros(2, 0), torch.tensor([1.0, 0.0]), {})
        >>> held.count(b); held.count(b); _ = held.add(b)
        >>> held.spans, held.rate()
        ([(4.0, 2.0)], 0.5)
    """

    def __init__(self, capacity: int = CALIBRATION_ROWS, every: int = HOLD_EVERY) -> None:
        if capacity < 1 or every < 2:
            raise ArgumentError(f"calibration needs capacity >= 1 row and every >= 2, got {capacity}, {every}")
        self.capacity, self.every = int(capacity), int(every)
        self.batches: list[Batch | None] = []
        self.rows: list[int] = []
        #: per held batch: (rows, clicks) read since the held one before it; None: not counted
        #: (a checkpoint of an older fbrapids)
        self.spans: list[tuple[float, float] | None] = []
        self.open = [0.0, 0.0]  # rows and clicks read since the newest held batch
        self.index: list[int] = []  # each held batch's number in its pass (-1: not given)
        self.restored = False  # filled from a checkpoint (load)

    def clear(self) -> None:
        """Hold nothing (the held batches were trained on after all)."""
        self.batches, self.rows, self.spans, self.index = [], [], [], []

    def count(self, batch: Batch | None) -> None:
        """Count the rows and clicks of ``batch`` (a batch of the pass, held or trained; None:
        none) into the span of the next held batch."""
        if batch is not None and len(batch):
            self.open[0] += float(len(batch))
            self.open[1] += float(batch.label.double().sum())

    def rate(self) -> float | None:
        """The click rate of the held batches' spans (this process's rows); None when a held
        batch's span was not counted or they hold no rows."""
        if any(s is None for s in self.spans):
            return None
        rows = sum(s[0] for s in self.spans if s is not None)
        return sum(s[1] for s in self.spans if s is not None) / rows if rows else None

    def holds(self, index: int, epoch: int = 0) -> bool:
        """Whether the pass's batch number ``index`` (from 0) is held back: in the first pass
        every ``every``-th one; in a later pass (``epoch`` > 0, read in the first one's order)
        the held batches kept, and no other."""
        return index % self.every == self.every - 1 if epoch == 0 else index in self.index

    def held_rows(self) -> int:
        return sum(self.rows)

    def add(self, batch: Batch | None, rows: int | None = None, index: int = -1) -> list[Batch | None]:
        """Hold ``batch`` (``rows``: its union's rows, default ``len(batch)``; ``index``: its
        number in the pass); returns the older held batches it pushes out (the newest held
        always stay: at least ``capacity`` rows when there are that many)."""
        if rows is None and batch is None:
            raise ArgumentError("HeldBack.add: a process without a batch gives the union's rows")
        self.batches.append(batch)
        self.rows.append(len(batch) if batch is not None and rows is None else int(rows or 0))
        self.spans.append((self.open[0], self.open[1]))
        self.index.append(int(index))
        self.open = [0.0, 0.0]
        out = []
        while len(self.rows) > 1 and self.held_rows() - self.rows[0] >= self.capacity:
            out.append(self.batches.pop(0))
            self.rows.pop(0)
            self.spans.pop(0)
            self.index.pop(0)
        return out

    def state(self) -> dict[str, torch.Tensor | list[BatchState | None]]:
        """What a checkpoint keeps of it (a resumed run then calibrates as an unbroken one)."""
        out: dict[str, torch.Tensor | list[BatchState | None]] = {"rows": torch.tensor(self.rows, dtype=torch.int64),
               "batches": [None if b is None else batch_state(b) for b in self.batches],
               "open": torch.tensor(self.open, dtype=torch.float64),
               "index": torch.tensor(self.index, dtype=torch.int64)}
        if all(s is not None for s in self.spans):
            out["spans"] = torch.tensor(self.spans, dtype=torch.float64).reshape(-1, 2)
        return out

    def load(self, state: Mapping[str, Any]) -> None:
        """Hold what :meth:`state` wrote (a state without spans, of an older fbrapids: the
        shift is fitted to the held rows' own click rate, as it was)."""
        self.rows = [int(r) for r in state["rows"].tolist()]
        self.batches = [None if b is None else batch_from_state(b) for b in state["batches"]]
        spans = state.get("spans")
        self.spans = ([(float(r), float(c)) for r, c in spans.tolist()] if spans is not None
                      else [None] * len(self.rows))
        self.open = [float(v) for v in state["open"].tolist()] if state.get("open") is not None else [0.0, 0.0]
        index = state.get("index")
        self.index = [int(i) for i in index.tolist()] if index is not None else [-1] * len(self.rows)
        self.restored = True


def fit_shift(logits: np.ndarray, labels: np.ndarray, rate: float | None = None) -> tuple[float, float] | None:
    """``(1, b)``: :func:`intercept` of ``labels`` on ``logits`` (to the click rate ``rate``
    when given: the held batches' spans', :meth:`HeldBack.rate`); or None (logged) when they
    are fewer than :data:`MIN_ROWS` or one class has fewer than :data:`MIN_CLASS_ROWS` rows.

    Example:
        >>> fit_shift(np.zeros(8), np.zeros(8)) is None
        True
        >>> a, b = fit_shift(np.zeros(400), np.r_[np.ones(100), np.zeros(300)])
        >>> a, round(b, 4)  # log(1/3)
        (1.0, -1.0986)
    """
    z, y = np.asarray(logits, dtype=np.float64).ravel(), np.asarray(labels, dtype=np.float64).ravel()
    pos = int((y > 0.5).sum())
    if len(z) < MIN_ROWS or min(pos, len(y) - pos) < MIN_CLASS_ROWS:
        log.info("no calibration fitted: %d held-back rows, %d clicks (need %d rows and %d of each class)",
                 len(z), pos, MIN_ROWS, MIN_CLASS_ROWS)
        return None
    b = intercept(z, y, rate=rate)
    if not math.isfinite(b):
        log.warning("no calibration fitted: the intercept fit gave b=%s", b)
        return None
    return 1.0, b


def calibrated_logits(model: torch.nn.Module, logits: torch.Tensor) -> torch.Tensor:
    """``model``'s calibration applied to ``logits`` (``model.calibrated``), or ``logits`` as
    they are for a model without one; what serving turns into probabilities.

    Example:
        >>> calibrated_logits(torch.nn.Linear(1, 1), torch.tensor([0.5])).tolist()
        [0.5]
    """
    f = getattr(model, "calibrated", None)
    return f(logits) if callable(f) else logits
