"""``fit``'s options, one typed object (:class:`FitConfig`, as :class:`~fbrapids.trainers.sparse.StoreConfig`
is the store's), and what a run of it did (:class:`FitResult`).

Example:
    >>> cfg = FitConfig(epochs=2).with_(nan="skip", checkpoint_every=50)
    >>> cfg.epochs, cfg.nan, cfg.checkpoint_every
    (2, 'skip', 50)
    >>> FitConfig(lookahead=-1)
    Traceback (most recent call last):
    ...
    fbrapids.errors.ArgumentError: FitConfig.lookahead must be an int >= 0, got -1
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import torch

from fbrapids.errors import ArgumentError
from fbrapids.trainers.calibration import CALIBRATION_ROWS
from fbrapids.trainers.nan_policy import NAN_WORDS

#: batches ``fit`` reads ahead and announces to ``lfu_window`` tables (``FitConfig.lookahead``)
LOOKAHEAD_BATCHES = 32


@dataclass(frozen=True)
class FitConfig:
    """How :func:`fbrapids.trainers.fit.fit` trains, whatever its strategy (one process, ranks,
    a trial's arms).

    Attributes:
        epochs: passes over the batches.
        max_steps: stop at this global step.
        checkpoint_dir: where checkpoints go (and are resumed from); held exclusively by the
            run (a second run on it is a :class:`~fbrapids.errors.WorkDirLockedError`), its
            writability and free space checked before the first step.
        checkpoint_every: checkpoint every this many global steps; the final checkpoint is
            written at the end, after the calibration fit (replacing a periodic one of the
            last step), so that it holds the model whose metrics the run reports.
        resume: restore the newest checkpoint in ``checkpoint_dir`` that verifies (older ones
            are tried when newer ones are corrupt; each skip is logged) and skip the batches
            it had trained on.  With ``resume=False`` a ``checkpoint_dir`` that already holds
            checkpoints is an error: runs are never mixed.
        progress: show a tqdm bar (on the ranks: rank 0's).
        prefetch_rows: find the next batch's rows while this one trains (one process: a
            background thread, :meth:`~fbrapids.trainers.sparse.TieredEmbeddingStore.prepare`,
            told before this batch's forward where every table is in one RAM tier (two deep),
            after it otherwise; ranks: the next batch's ids exchanged meanwhile).
        keep_checkpoints: keep this many newest checkpoints (None: all); the newest verified
            one is never removed.
        nan: a NaN / inf loss or dense gradient (:mod:`fbrapids.trainers.nan_policy`):
            ``"error"`` (default) stops with a :class:`~fbrapids.errors.NonFiniteError` naming
            the step and the table, before the update; ``"skip"`` drops that batch's update
            (listed in ``FitResult.skipped``; not on ranks); ``"warn"`` logs and applies it.
            Checkpoints are never written from non-finite weights, whatever the word.
        device: where to train (:func:`fbrapids.trainers.device.place_model`).
        run: more settings a resume must share with its checkpoint (e.g. the data's
            fingerprint): :mod:`fbrapids.trainers.run_identity`.
        lookahead: where a table's eviction uses upcoming batches (``lfu_window``), read this
            many batches ahead and announce each one's ids as it enters that window.
        calibrate: hold back every :data:`~fbrapids.trainers.calibration.HOLD_EVERY`-th batch
            from training and fit the model's post-hoc calibration on the final model's logits
            of the held rows (:mod:`fbrapids.trainers.calibration`).  With several epochs every
            pass reads the batches in the first pass's order and holds back the same ones (on
            one process; a run on ranks calibrates only with ``epochs=1``).
        calibration_rows: the most rows held back at once.
        sparse_lr_decay: pass ``e`` (from 0) runs every table's sparse optimizer at its
            configured lr times ``sparse_lr_decay ** e`` (1: a constant rate); the rates are
            restored when ``fit`` returns.  One process or a trial's arms
            (:class:`~fbrapids.trainers.strategy.Arms`).
    """

    epochs: int = 1
    max_steps: int | None = None
    checkpoint_dir: str | os.PathLike | None = None
    checkpoint_every: int | None = None
    resume: bool = True
    progress: bool = True
    prefetch_rows: bool = True
    keep_checkpoints: int | None = 3
    nan: str = "error"
    device: str | torch.device | None = None
    run: Mapping[str, object] | None = None
    lookahead: int = LOOKAHEAD_BATCHES
    calibrate: bool = True
    calibration_rows: int = CALIBRATION_ROWS
    sparse_lr_decay: float = 1.0

    def __post_init__(self) -> None:
        for name, lo, optional in (("epochs", 1, False), ("max_steps", 0, True), ("checkpoint_every", 1, True),
                                   ("keep_checkpoints", 1, True), ("lookahead", 0, False),
                                   ("calibration_rows", 1, False)):
            value = getattr(self, name)
            if value is None and optional:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < lo:
                raise ArgumentError(f"FitConfig.{name} must be an int >= {lo}" + (" or None" if optional else "")
                                    + f", got {value!r}")
        d = self.sparse_lr_decay
        if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0.0 < d <= 1.0:
            raise ArgumentError(f"FitConfig.sparse_lr_decay must be a number in (0, 1], got {d!r}")
        if self.nan not in NAN_WORDS:
            raise ArgumentError(f"FitConfig.nan must be one of {', '.join(map(repr, NAN_WORDS))}, got {self.nan!r}")
        if self.checkpoint_dir is not None and not isinstance(self.checkpoint_dir, (str, os.PathLike)):
            raise ArgumentError(f"FitConfig.checkpoint_dir must be a path or None, got {self.checkpoint_dir!r}")

    def with_(self, **changes: Any) -> "FitConfig":
        """A copy with some options changed; an unknown name is an
        :class:`~fbrapids.errors.ArgumentError` listing the known ones."""
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ArgumentError(f"fit has no option(s) {unknown}; FitConfig's are {', '.join(sorted(known))}")
        return dataclasses.replace(self, **changes) if changes else self


@dataclass
class FitResult:
    """What ``fit`` did: the global step reached, per-step losses of this call, checkpoints written."""

    steps: int
    losses: list[float] = field(default_factory=list)
    checkpoints: list[Path] = field(default_factory=list)
    resumed_from: Path | None = None
    skipped: list[int] = field(default_factory=list)  # steps whose update ``nan="skip"`` dropped
    calibration: tuple[float, float] | None = None  # (a, b) fitted at the end: sigmoid(a * logit + b)
    held_rows: int = 0  # rows held back from training for the calibration (never trained on)
