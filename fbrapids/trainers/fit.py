"""Training and evaluation loops, with crash-safe checkpoints and exact resume.

``fit`` runs, per batch: forward (the stores gather and pin this batch's rows), prefetch
of the next batch's rows into the caches, backward, the dense optimizer, then the sparse
optimizers of every table.  Every ``checkpoint_every`` steps it writes a checkpoint
directory: ``dense.pt`` (model weights, optimizer state, step, RNG state) and every table
flushed and copied (``tables/<name>/rows.f32``, ``index.npz``, ``meta.json``); each file is
written under a temporary name, fsynced and renamed, the directory is renamed into place
when complete, and the ``latest`` pointer is swapped last (see
:mod:`fbrapids.trainers.checkpoint`).  With ``resume=True`` it restores the latest
checkpoint and skips the batches already trained on, so N steps + checkpoint + resume + M
steps gives, on the CPU, bit for bit the weights of N + M steps without a break (the
stream must replay the same order: same source, same ``seed``; and torch must run with the
same number of threads, ``torch.set_num_threads``, since CPU reductions split by thread).

Example:
    >>> import pandas as pd, numpy as np, fbrapids
    >>> from fbrapids.trainers.models import DLRM
    >>> from fbrapids.trainers.sparse import StoreConfig
    >>> rng = np.random.default_rng(0)
    >>> df = pd.DataFrame({"click": rng.integers(0, 2, 64), "d0": rng.random(64), "ad": rng.integers(0, 9, 64),
    ...                    "user": rng.integers(0, 5, 64)})
    >>> batches = df.fbx.stream(label="click", dense=["d0"], sparse=["ad"], group="user", batch_size=16)
    >>> model = DLRM(1, ["ad"], embedding_dim=4, bottom_mlp=[8], top_mlp=[8], store=StoreConfig(cache_rows=64))
    >>> fit(model, batches, progress=False).steps
    4
    >>> sorted(evaluate(model, batches, progress=False))
    ['auc', 'calibration', 'gauc', 'logloss', 'n', 'ne']
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

import numpy as np
import torch
from fbrapids.ui.autobar import tqdm

from fbrapids.errors import ArgumentError, CheckpointError, NonFiniteError
from fbrapids.files.manifest import verification_enabled
from fbrapids.trainers.batch import Batch
from fbrapids.trainers.calibration import CALIBRATION_ROWS, HeldBack, fit_shift
from fbrapids.files.manifest import resolve_inside
from fbrapids.trainers.checkpoint.model_state import load_checkpoint, nonfinite_weights, save_checkpoint
from fbrapids.trainers.checkpoint.directory import (check_pointer_writable, checkpoints, clean_partial,
                                          newest_verified, read_small_file, step_name)
from fbrapids.trainers.device import module_device, place_model
from fbrapids.trainers.metrics import all_metrics
from fbrapids.trainers.models.base import CTRModel
from fbrapids.trainers.model_inputs import check_model_stream
from fbrapids.trainers.run_identity import RUN_KEY, check_identity, run_identity
from fbrapids.runs.workdir import clean_stale, lock_work_dir, preflight

log = logging.getLogger(__name__)


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


def expected_batches(batches: Iterable[Batch]) -> int | None:
    """How many batches one pass over ``batches`` gives, when known exactly.

    Example:
        >>> expected_batches([1, 2, 3]), expected_batches(iter([1]))
        (3, None)
    """
    known = getattr(batches, "expected_batches", None)
    if callable(known):
        return known()
    return len(batches) if hasattr(batches, "__len__") else None


def estimated_batches(batches: Iterable[Batch]) -> int | None:
    """The batches of one pass as progress bars show them: exact when known, else the
    stream's running estimate (``estimated_batches()``, e.g. during a first pass over a dask
    frame), else None.

    Example:
        >>> estimated_batches([1, 2, 3]), estimated_batches(iter([1]))
        (3, None)
    """
    estimate = getattr(batches, "estimated_batches", None)
    return estimate() if callable(estimate) else expected_batches(batches)


class _BarTotal:
    """Keeps a tqdm bar's total on the batches' estimate: ``per_pass`` x ``passes``, at most
    ``cap``; re-read by :meth:`refresh` (cheap) until the count is exact."""

    def __init__(self, bar: tqdm, batches: Iterable[Batch], passes: int = 1, cap: int | None = None) -> None:
        self.bar, self.batches, self.passes, self.cap = bar, batches, passes, cap
        self.exact = False
        self.refresh()

    def refresh(self) -> None:
        if self.exact:
            return
        per_pass = estimated_batches(self.batches)
        self.exact = per_pass is not None and per_pass == expected_batches(self.batches)
        total = None if per_pass is None else per_pass * self.passes
        if self.cap is not None:
            total = self.cap if total is None else min(total, self.cap)
        if total != self.bar.total:
            self.bar.total = total
            self.bar.refresh()


def _lookahead(it: Iterable[Batch], depth: int = 1) -> Iterator[tuple[Batch, list[Batch]]]:
    """Each batch with the (up to) ``depth`` batches after it, read ahead of it.

    Example:
        >>> [(b, ahead) for b, ahead in _lookahead(iter([1, 2, 3]), depth=2)]
        [(1, [2, 3]), (2, [3]), (3, [])]
        >>> read = []
        >>> for b, ahead in _lookahead(iter(read.append(i) or i for i in range(5)), depth=1):
        ...     assert len(read) == b + 2 - (b == 4)  # this batch and one more, no further
    """
    it = iter(it)
    window = collections.deque(itertools.islice(it, depth + 1))
    while window:
        cur = window.popleft()
        yield cur, list(window)  # ``depth`` batches read ahead of ``cur``, no more
        window.extend(itertools.islice(it, 1))


#: batches ``fit`` reads ahead and announces to ``lfu_window`` tables (``fit(lookahead=...)``)
LOOKAHEAD_BATCHES = 32


def default_optimizer(params: list[torch.nn.Parameter], lr: float = 1e-3) -> torch.optim.Optimizer:
    """``Adam(lr=1e-3)`` as one fused kernel over all dense parameters (one call per step
    instead of a dozen small ops per tensor), or the plain per-tensor loop where torch has
    no fused kernel for the parameters' device.

    Example:
        >>> import torch
        >>> type(default_optimizer([torch.nn.Parameter(torch.zeros(2))])).__name__
        'Adam'
    """
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, ValueError):
        return torch.optim.Adam(params, lr=lr)


NAN_POLICIES = ("error", "skip", "warn")


def _nonfinite_grads(model: CTRModel) -> list[str]:
    """Names of dense parameters whose gradient holds NaN / inf (one fused check when all are finite)."""
    named = [(n, p.grad) for n, p in model.named_parameters() if p.grad is not None]
    if not named:
        return []
    # the total 2-norm (one fused pass per device, no copy) is finite when every value is; a NaN or
    # inf makes it non-finite, and so can finite values that overflow it: the exact check below tells
    if bool(torch.isfinite(torch.nn.utils.get_total_norm([g for _, g in named]))):
        return []
    return [n for n, g in named if not bool(torch.isfinite(g).all())]


def _nonfinite_message(step: int, what: str, model: CTRModel, optimizer: torch.optim.Optimizer) -> str:
    where = nonfinite_weights(model, optimizer)
    return (f"step {step}: {what}; " + (f"non-finite weights in {', '.join(where)}" if where else
                                        "every weight is finite (the batch's inputs or an overflow)")
            + "; training stopped before this update and no checkpoint is written from it "
            "(fit(nan='skip') drops such batches instead)")


def _checkpoint_root(checkpoint_dir: str | os.PathLike, optimizer: torch.optim.Optimizer, model: CTRModel,
                     resume: bool, result: FitResult, identity: Mapping[str, Any],
                     held: HeldBack | None = None) -> int:
    """Clean debris, check the disk, and restore the newest verified checkpoint when resuming;
    returns the step to start from."""
    root = Path(checkpoint_dir)
    clean_partial(root)  # first, a checkpoint a killed re-checkpoint left only as a copy is put back
    clean_stale(root)
    check_pointer_writable(root)  # before training, not at its first checkpoint
    dense_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values() if torch.is_tensor(t))
    table_bytes = sum(len(s) * (s.config.width * 4 + 24) for s in model.stores().values())
    preflight({"checkpoint dir": root}, {"one checkpoint": 3 * dense_bytes + table_bytes})
    if not resume:
        found = checkpoints(root)
        if found:
            raise CheckpointError(f"{root} already holds checkpoints up to {found[0].name} from an earlier run; "
                                  "resume from them (resume=True, --resume) or use an empty checkpoint dir")
        return 0
    ckpt = newest_verified(root)
    if ckpt is None:
        return 0
    meta = json.loads(read_small_file(resolve_inside(ckpt, "meta.json"), "checkpoint meta"))
    check_identity(meta.get(RUN_KEY), identity, ckpt)  # before anything is loaded
    start = load_checkpoint(model, optimizer, ckpt, held)
    result.resumed_from = ckpt
    log.info("resumed from %s at step %d", ckpt, start)
    return start


def fit(model: CTRModel, batches: Iterable[Batch], *, epochs: int = 1, max_steps: int | None = None,
        optimizer: torch.optim.Optimizer | None = None, checkpoint_dir: str | os.PathLike | None = None,
        checkpoint_every: int | None = None, resume: bool = True, progress: bool = True,
        prefetch_rows: bool = True, keep_checkpoints: int | None = 3, nan: str = "error",
        device: str | torch.device | None = None, run: Mapping[str, Any] | None = None,
        lookahead: int = LOOKAHEAD_BATCHES, calibrate: bool = True,
        calibration_rows: int = CALIBRATION_ROWS) -> FitResult:
    """Train ``model`` on ``batches`` with binary cross-entropy on logits.

    Args:
        model: a :class:`~fbrapids.trainers.models.base.CTRModel` (DLRM, WideAndDeep, DeepFM, DIN).
        batches: e.g. ``df.fbx.stream(label=..., dense=[...], sparse=[...], batch_size=...)``.
        epochs: passes over ``batches``.
        max_steps: stop at this global step.
        optimizer: dense optimizer (default :func:`default_optimizer`: fused ``Adam(lr=1e-3)``).
        checkpoint_dir: where checkpoints go (and are resumed from); held exclusively by this
            call (a second run on it is a :class:`~fbrapids.errors.WorkDirLockedError`), its
            writability and free space checked before the first step.
        checkpoint_every: checkpoint every this many global steps; the final checkpoint is
            written at the end, after the calibration fit (replacing a periodic one of the
            last step), so that it holds the model whose metrics the run reports.
        resume: restore the newest checkpoint in ``checkpoint_dir`` that verifies (older ones
            are tried when newer ones are corrupt; each skip is logged) and skip the batches
            it had trained on.  With ``resume=False`` a ``checkpoint_dir`` that already holds
            checkpoints is an error: runs are never mixed.
        progress: show a tqdm bar.
        prefetch_rows: pin the next batch's rows in the caches while this one trains.
        lookahead: where a table's eviction uses upcoming batches (``StoreConfig(eviction=
            "lfu_window")``), read this many batches ahead of training and announce each
            one's ids to it (:meth:`~fbrapids.trainers.sparse.TieredEmbeddingStore.announce`)
            as it enters that window; otherwise only the next batch is read ahead.  A
            stream already holds the partitions it extracted ahead (a 200k-row demo
            partition is 16 batches of 2,048 rows; the pipeline's partitions up to 128), so
            the default, 32, holds about two demo partitions' batches.
        keep_checkpoints: keep this many newest checkpoints (None: all); the newest verified
            one is never removed.
        nan: a NaN / inf loss or dense gradient: ``"error"`` (default) stops with a
            :class:`~fbrapids.errors.NonFiniteError` naming the step and the table, before
            the update; ``"skip"`` drops that batch's update (the steps are listed in
            ``FitResult.skipped``); ``"warn"`` logs and applies it.  Checkpoints are never
            written from non-finite weights, whatever the policy.
        device: where to train (:func:`fbrapids.trainers.device.place_model`: this, else
            where the model already is on an accelerator, else ``$FBRAPIDS_DEVICE``, else
            cuda on the GPU backend, else the CPU); the model, its stores' caches and every
            batch go there.
        run: more settings a resume must share with its checkpoint (e.g. the data's
            fingerprint), recorded in every checkpoint with the model's (class, tables'
            dims, dense shapes) and the stream's (label, ordered dense / sparse lists,
            batch size, seed): :mod:`fbrapids.trainers.run_identity`.  Resuming with any
            of them changed is a :class:`~fbrapids.errors.CheckpointMismatchError` naming
            each difference, before anything is loaded.
        calibrate: hold back every :data:`~fbrapids.trainers.calibration.HOLD_EVERY`-th batch
            of the pass from training (the newest held ones, up to ``calibration_rows`` rows;
            an older one pushed out is trained on then) and, at the end, fit the model's
            post-hoc calibration on the final model's logits of the held rows: a shift,
            ``sigmoid(logit + b)`` (``model.set_calibration``;
            :mod:`fbrapids.trainers.calibration`), returned in ``FitResult.calibration``;
            ``predict`` / ``evaluate`` and serving apply it.  The held rows are never trained
            on (``FitResult.held_rows``): with several epochs every pass reads the batches in
            the first pass's order and holds back the same ones.  Not when resuming a
            checkpoint that holds no held-back batches.
            ``False``: train on every batch and leave the model's calibration as it is.
        calibration_rows: the most rows held back at once.
    """
    check_model_stream(model, batches)  # a stream of other features: one error naming the feature, before training
    place_model(model, device)
    if nan not in NAN_POLICIES:
        raise ArgumentError(f"nan must be one of {', '.join(NAN_POLICIES)}, got {nan!r}")
    params = [p for p in model.parameters() if p.requires_grad]
    if optimizer is None:
        optimizer = default_optimizer(params)
    result = FitResult(steps=0)
    identity = run_identity(model, batches, run)
    held = HeldBack(calibration_rows) if calibrate else None
    check = verification_enabled()
    # the debris is cleaned under the lock by _checkpoint_root, after restoring what a killed writer left
    with (lock_work_dir(checkpoint_dir, clean=False) if checkpoint_dir is not None else contextlib.nullcontext()):
        start = (0 if checkpoint_dir is None
                 else _checkpoint_root(checkpoint_dir, optimizer, model, resume, result, identity, held))
        if held is not None and start > 0 and not held.restored:
            log.info("no post-hoc calibration: the checkpoint resumed from holds no held-back batches (one written "
                     "without calibration, or by an older fbrapids); every batch is trained on")
            held = None
        if lookahead < 0:
            raise ArgumentError(f"lookahead must be >= 0 batches, got {lookahead}")
        step, finished = _train(model, batches, optimizer, result, start, epochs, max_steps, checkpoint_dir,
                                checkpoint_every,
                      progress, prefetch_rows, keep_checkpoints, nan if check else "warn", identity,
                      lookahead if model.uses_window() else 0, held)
        result.steps = step
        changed = _end_of_pass(model, optimizer, held, result, step > start, finished, nan if check else "warn")
        if checkpoint_dir is not None:
            write_final_checkpoint(lambda at: save_checkpoint(model, optimizer, checkpoint_dir, at, keep=keep_checkpoints,
                                                              run=identity, held=held),
                                   step, step > start, changed, result)
    return result


def _end_of_pass(model: CTRModel, optimizer: torch.optim.Optimizer, held: HeldBack | None, result: FitResult,
                 trained: bool, finished: bool, nan: str) -> bool:
    """The end-of-pass step: the calibration fitted on the held-back batches, when this call
    trained (``trained``) or the pass had ended before it (``finished``: resumed from a
    checkpoint of the last step, which may have been written before the fit: a periodic one,
    a run killed between the two writes; the fit on the same model and rows gives the same
    shift); too few to fit on at the end of the pass, they are trained on after all.
    Returns whether the model changed (its final checkpoint must then be written)."""
    if held is None or not (trained or finished):
        return False
    before = model.calibration.clone()
    if _calibrate(model, held, result):
        return not torch.equal(before, model.calibration)
    if not finished or not held.batches:
        return False
    train = _Stepper(model, optimizer, result, nan)
    for b in held.batches:  # too few to calibrate on: trained on after all, nothing withheld for nothing
        train(b, result.steps)
    held.clear()
    result.held_rows = 0
    return True


def write_final_checkpoint(save: Callable[[int], Path], step: int, trained: bool, changed: bool,
                           result: FitResult) -> None:
    """The final checkpoint, ``save(step)``: the model whose metrics are reported, after the
    end-of-pass step (:func:`_end_of_pass`), so that an export, ``fbrapids export`` and a
    resume read what the run printed.  Written when this call ``trained`` past its newest
    checkpoint or the end-of-pass step ``changed`` the model, replacing a periodic checkpoint
    of the same step written before that step (kept as it is when nothing changed after it)."""
    same = bool(result.checkpoints) and result.checkpoints[-1].name == step_name(step)
    if not changed and (same or not trained):
        return
    path = save(step)
    if same:
        result.checkpoints[-1] = path
    else:
        result.checkpoints.append(path)


def _calibrate(model: CTRModel, held: HeldBack, result: FitResult) -> bool:
    """Fit and set ``model``'s calibration (a shift of its logits) on its logits of the
    held-back batches; False when they are too few (:func:`~fbrapids.trainers.calibration.fit_shift`)."""
    z, y = held_logits(model, held.batches)
    result.held_rows = len(z)
    ab = fit_shift(z, y, rate=held.rate())
    if ab is None:
        return False
    model.set_calibration(*ab)
    result.calibration = ab
    log.info("calibration: sigmoid(%.4f * logit %+.4f), fitted on %d rows held back from training", ab[0], ab[1],
             len(z))
    return True


@torch.no_grad()
def held_logits(model: CTRModel, batches: Iterable[Batch | None]) -> tuple[np.ndarray, np.ndarray]:
    """``model``'s raw logits (no calibration) and the labels of ``batches`` (Nones skipped),
    in evaluation mode, as :func:`predict` computes them."""
    dev = module_device(model)
    model.eval()
    zs, ys = [np.zeros(0)], [np.zeros(0)]
    try:
        for b in batches:
            if b is not None:
                b = b.to(dev)
                zs.append(model(b).double().cpu().numpy().ravel())
                ys.append(b.label.double().cpu().numpy().ravel())
    finally:
        model.train()
    return np.concatenate(zs), np.concatenate(ys)


def _train(model: CTRModel, batches: Iterable[Batch], optimizer: torch.optim.Optimizer, result: FitResult,
           start: int, epochs: int, max_steps: int | None, checkpoint_dir: str | os.PathLike | None,
           checkpoint_every: int | None, progress: bool, prefetch_rows: bool, keep_checkpoints: int | None,
           nan: str, identity: Mapping[str, Any] | None = None, lookahead: int = 0,
           held: HeldBack | None = None) -> tuple[int, bool]:
    """The pass(es): returns the global step reached (a step is a batch read from the
    stream, held back or trained on) and whether the stream ended (False: ``max_steps``)."""
    step = 0
    model.train()
    bar = tqdm(total=None, initial=start, disable=not progress, desc="fit", unit="batch")
    # the total: exact for an eager frame; over a dask stream's first pass an estimate refined
    # with each partition, exact after it
    total = _BarTotal(bar, batches, epochs, max_steps)
    train = _Stepper(model, optimizer, result, nan)
    try:
        for epoch in range(epochs):
            if hasattr(batches, "set_epoch"):  # calibrated: each pass in the first's order, the same rows held back
                batches.set_epoch(0 if held is not None else epoch)
            announced = 0  # batches of this pass announced so far
            for i, (batch, ahead) in enumerate(_lookahead(batches, max(1, lookahead))):
                total.refresh()
                if max_steps is not None and step >= max_steps:
                    return step, False
                if step < start:  # trained (or held back) before the checkpoint
                    step += 1
                    continue
                if lookahead:  # this batch and those entering the window, each announced once
                    upcoming = [batch, *ahead[:lookahead]]
                    for j in range(max(announced, i), i + len(upcoming)):
                        model.announce(upcoming[j - i], j - i)
                    announced = i + len(upcoming)
                step += 1
                bar.update(1)  # a batch consumed (a skipped or held one too: the bar reaches its total)
                if held is not None and epoch == 0:
                    held.count(batch)  # the rows and clicks the next held batch stands for
                if held is not None and held.holds(i, epoch):  # a later pass: the held rows are not trained
                    for older in (held.add(batch, index=i) if epoch == 0 else []):  # pushed out: trained on now
                        train(older, step)
                else:
                    train(batch, step, ahead[0] if prefetch_rows and ahead else None)
                if result.losses:
                    bar.set_postfix(loss=f"{result.losses[-1]:.4f}", refresh=False)
                if checkpoint_dir is not None and checkpoint_every and step % checkpoint_every == 0:
                    result.checkpoints.append(
                        save_checkpoint(model, optimizer, checkpoint_dir, step, keep=keep_checkpoints, run=identity,
                                        held=held))
        return step, True
    finally:
        bar.close()


class _Stepper:
    """One update of ``model`` on a batch: forward, loss, the ``nan`` policy, backward, the
    dense and sparse steps; the loss goes to ``result.losses``."""

    def __init__(self, model: CTRModel, optimizer: torch.optim.Optimizer, result: FitResult, nan: str) -> None:
        self.model, self.optimizer, self.result, self.nan = model, optimizer, result, nan
        self.dev = module_device(model)
        self.loss_fn = torch.nn.BCEWithLogitsLoss()

    def __call__(self, batch: Batch, step: int, prefetch: Batch | None = None) -> None:
        model, optimizer = self.model, self.optimizer
        optimizer.zero_grad(set_to_none=True)
        batch = batch.to(self.dev)
        logits = model(batch)
        if prefetch is not None:
            model.prefetch(prefetch)
        loss = self.loss_fn(logits, batch.label.to(logits.device))
        value = float(loss.detach())
        problem = None if math.isfinite(value) else f"loss is {value}"
        if problem is None:
            loss.backward()
            if self.nan != "warn":
                bad = _nonfinite_grads(model)
                problem = f"non-finite gradient of {', '.join(bad)}" if bad else None
        if problem is not None:
            if self.nan == "error":
                raise NonFiniteError(_nonfinite_message(step, problem, model, optimizer))
            log.warning("step %d: %s (nan=%r)", step, problem, self.nan)
            if self.nan == "skip":
                optimizer.zero_grad(set_to_none=True)
                self.result.skipped.append(step)
                return
        optimizer.step()
        model.apply_sparse_gradients()
        self.result.losses.append(value)


@torch.no_grad()
def predict(model: CTRModel, batches: Iterable[Batch], progress: bool = True,
            device: str | torch.device | None = None) -> dict[str, np.ndarray]:
    """Predictions, labels and groups (when the batches carry them) as numpy arrays; the
    model runs where :func:`~fbrapids.trainers.device.place_model` puts it, and so do the batches.
    Its tables are read-only meanwhile, as served (:func:`~fbrapids.trainers.sparse.store.read_only`:
    an id training never admitted reads the default row), so a prediction is the served score."""
    from fbrapids.trainers.sparse.store import read_only

    dev = place_model(model, device)
    model.eval()
    ps, ys, gs = [], [], []
    with tqdm(total=None, disable=not progress, desc="predict", unit="batch") as bar, \
            read_only(model.stores().values() if hasattr(model, "stores") else ()):
        total = _BarTotal(bar, batches)
        for batch in batches:
            total.refresh()
            ps.append(model.predict(batch.to(dev)).double().cpu().numpy())
            ys.append(batch.label.cpu().numpy())
            if batch.group is not None:
                gs.append(batch.group.cpu().numpy())
            bar.update(1)
    model.train()
    out = {"pred": np.concatenate(ps) if ps else np.zeros(0), "label": np.concatenate(ys) if ys else np.zeros(0)}
    if gs and len(gs) == len(ps):
        out["group"] = np.concatenate(gs)
    return out


def evaluate(model: CTRModel, batches: Iterable[Batch], progress: bool = True,
             device: str | torch.device | None = None) -> dict[str, float]:
    """AUC, GAUC (needs ``group=`` in the stream; NaN otherwise), logloss, normalized entropy,
    calibration and the number of rows, over ``batches`` (on ``device`` as in :func:`predict`)."""
    out = predict(model, batches, progress, device)
    return all_metrics(out["label"], out["pred"], out.get("group"))
