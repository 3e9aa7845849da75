"""Post-hoc calibration: a shift of a model's logits, fitted on progressive predictions.

A CTR model's mean prediction on a held-out day can sit away from the day's click rate
while it still ranks well.  ``fit`` keeps the *progressive* predictions of its last pass
(each batch's logits computed before the step that trains on it, as in progressive
validation, McMahan et al., 2013) for its last ``calibration_rows`` rows
(:class:`ProgressiveBuffer`) and fits :func:`intercept` on them at the end: the shift ``b``
of ``sigmoid(logit + b)`` that makes the mean prediction there the click rate (a logistic
regression of the labels on the logit with its slope held at 1).  The pairs must be out of
sample: predictions of rows the model has already trained on are over-confident
(memorised ids).  Only a single pass gives out-of-sample predictions: with several epochs
``fit`` fits none (a second pass's predictions of rows already trained on made the held-out
logloss worse than none).

Why not Platt scaling's slope too (:func:`platt`, ``sigmoid(a * logit + b)``): the
progressive logits come from the model while it still learns, less spread than the final
model's; their fitted slope (1.2 to 1.5 for DLRM and DIN on the demo data) then stretched
the final model's logits and moved its held-out calibration away from 1 (docs/models.md).

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

import numpy as np
import torch

log = logging.getLogger(__name__)

#: rows of progressive predictions ``fit`` fits the calibration on (the newest ones)
CALIBRATION_ROWS = 1 << 15
#: rows of progressive predictions ``fit`` keeps (in its checkpoints too): more than it fits
#: on, so that another calibration slice can be judged from a checkpoint without training again
KEPT_ROWS = 1 << 17
#: the calibration is fitted on at most this fraction of a pass's rows, its newest (fit_calibration)
PASS_FRACTION = 0.25
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


def intercept(logits: np.ndarray, labels: np.ndarray, max_iter: int = 100) -> float:
    """The shift ``b`` of the logistic regression of ``labels`` (0/1) on ``logits`` with the
    slope held at 1: the root of ``sum(sigmoid(logit + b)) = sum(labels)`` (Newton's method
    on the mean log loss from ``b = 0``), so the mean prediction equals the click rate.

    Example:
        >>> round(intercept(np.zeros(4), np.array([0.0, 0.0, 0.0, 1.0])), 4)  # log(1/3)
        -1.0986
    """
    z = np.asarray(logits, dtype=np.float64).ravel()
    y = np.asarray(labels, dtype=np.float64).ravel()
    b = 0.0
    for _ in range(max_iter):
        p = 1.0 / (1.0 + np.exp(-np.clip(z + b, -50, 50)))
        step = (p.mean() - y.mean()) / max(float((p * (1 - p)).mean()), 1e-12)
        b -= step
        if abs(step) < 1e-12:
            break
    return float(b)


class ProgressiveBuffer:
    """The newest ``capacity`` (logit, label) pairs added, in a ring.

    Example:
        >>> buf = ProgressiveBuffer(3)
        >>> buf.add(torch.tensor([1., 2.]), torch.tensor([0., 1.])); buf.add(torch.tensor([3., 4.]), torch.tensor([1., 1.]))
        >>> buf.arrays()[0].tolist(), len(buf)
        ([2.0, 3.0, 4.0], 3)
    """

    def __init__(self, capacity: int = CALIBRATION_ROWS) -> None:
        self.capacity = int(capacity)
        self.logits = np.zeros(self.capacity, dtype=np.float32)
        self.labels = np.zeros(self.capacity, dtype=np.float32)
        self.seen = 0  # pairs ever added
        self.restored = False  # filled from a checkpoint (load)

    def __len__(self) -> int:
        return min(self.seen, self.capacity)

    def add(self, logits: torch.Tensor, labels: torch.Tensor) -> None:
        z = logits.detach().float().cpu().numpy().ravel()[-self.capacity:]
        y = labels.detach().float().cpu().numpy().ravel()[-self.capacity:]
        at = (self.seen + np.arange(len(z))) % self.capacity
        self.logits[at], self.labels[at] = z, y
        self.seen += len(z)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The pairs held, oldest first."""
        n = len(self)
        order = (self.seen - n + np.arange(n)) % self.capacity
        return self.logits[order], self.labels[order]

    def state(self) -> dict[str, torch.Tensor]:
        """What a checkpoint keeps of it (a resumed run then fits what an unbroken one would)."""
        z, y = self.arrays()
        return {"logits": torch.from_numpy(z.copy()), "labels": torch.from_numpy(y.copy())}

    def load(self, state: dict[str, torch.Tensor]) -> None:
        """Hold the pairs of :meth:`state` (oldest first), as the buffer that made it did."""
        self.seen = 0
        self.add(state["logits"], state["labels"])
        self.restored = True


def fit_calibration(buffer: ProgressiveBuffer, rows: int | None = None,
                    pass_rows: int | None = None) -> tuple[float, float] | None:
    """``(1, b)``: :func:`intercept` on the buffer's newest pairs, ``rows`` of them (all it
    holds when not given) but, given the rows of the pass ``pass_rows``, never more than its
    newest :data:`PASS_FRACTION`; or None (logged) when they are too few or one class is too
    rare.

    The fraction: the shift describes the final model only if the pairs come from a model
    near its final state.  On a short pass (20,000 rows, 16 steps) the pairs of the first
    steps, from a model that has not learned yet, pulled the shift far down and the
    held-out calibration to 0.18 (docs/models.md); from a pass of ``4 * CALIBRATION_ROWS``
    rows on, the limit is ``rows`` itself.

    Example:
        >>> fit_calibration(ProgressiveBuffer(8)) is None
        True
    """
    z, y = buffer.arrays()
    n = min(len(z) if rows is None else rows, len(z), len(z) if pass_rows is None else int(pass_rows * PASS_FRACTION))
    z, y = z[len(z) - n:], y[len(y) - n:]
    pos = int((y > 0.5).sum())
    if len(z) < MIN_ROWS or min(pos, len(y) - pos) < MIN_CLASS_ROWS:
        log.info("no calibration fitted: %d progressive predictions, %d clicks (need %d rows and %d of each class)",
                 len(z), pos, MIN_ROWS, MIN_CLASS_ROWS)
        return None
    a, b = 1.0, intercept(z, y)
    if not math.isfinite(b):
        log.warning("no calibration fitted: the intercept fit gave b=%s", b)
        return None
    return a, b


def calibrated_logits(model: torch.nn.Module, logits: torch.Tensor) -> torch.Tensor:
    """``model``'s calibration applied to ``logits`` (``model.calibrated``), or ``logits`` as
    they are for a model without one; what serving turns into probabilities.

    Example:
        >>> calibrated_logits(torch.nn.Linear(1, 1), torch.tensor([0.5])).tolist()
        [0.5]
    """
    f = getattr(model, "calibrated", None)
    return f(logits) if callable(f) else logits
