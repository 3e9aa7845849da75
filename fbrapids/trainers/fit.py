"""``fit``: the one training loop, whatever trains (one model in this process, a model
sharded over ranks, a trial's arms side by side: a :mod:`strategy <fbrapids.trainers.strategy>`),
its options one :class:`~fbrapids.trainers.fit_config.FitConfig`; and ``predict`` / ``evaluate``.

``fit`` runs, per batch: forward (the stores gather this batch's rows), the next batch's
rows found meanwhile (a background thread), backward, the dense optimizer, then the sparse
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
    >>> fit(model, batches, FitConfig(epochs=1), progress=False).steps
    4
    >>> sorted(evaluate(model, batches, progress=False))
    ['auc', 'calibration', 'gauc', 'logloss', 'n', 'ne']
"""

from __future__ import annotations

import logging
from collections.abc import Sized
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import torch

from fbrapids.errors import ArgumentError
from fbrapids.runs.heap import keep_freed_blocks
from fbrapids.trainers.batch import Batch
from fbrapids.trainers.calibration import HeldBack
from fbrapids.trainers.checkpoint.directory import step_name
from fbrapids.trainers.dense_optim import default_optimizer  # noqa: F401  (re-exported: fit's dense optimizer)
from fbrapids.trainers.device import place_model
from fbrapids.trainers.fit_config import LOOKAHEAD_BATCHES, FitConfig, FitResult  # noqa: F401  (re-exported)
from fbrapids.trainers.metrics import all_metrics
from fbrapids.trainers.models.base import CTRModel
from fbrapids.trainers.nan_policy import FIT_NAN, check_nan
from fbrapids.trainers.sparse.optim import SparseOptimizer
from fbrapids.trainers.strategy import Arms, Item, OneProcess, Strategy, held_logits, nonfinite_grads  # noqa: F401
from fbrapids.ui.autobar import tqdm

log = logging.getLogger(__name__)

#: the ``nan`` words of ``fit`` in one process (:mod:`fbrapids.trainers.nan_policy`)
NAN_POLICIES = FIT_NAN
_nonfinite_grads = nonfinite_grads  # the older name


def expected_batches(batches: Iterable[Batch]) -> int | None:
    """How many batches one pass over ``batches`` gives, when known exactly.

    Example:
        >>> expected_batches([1, 2, 3]), expected_batches(iter([1]))
        (3, None)
    """
    known = getattr(batches, "expected_batches", None)
    if callable(known):
        return known()
    return len(batches) if isinstance(batches, Sized) else None


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


def fit(target: CTRModel | Strategy, batches: Iterable[Batch], config: FitConfig | None = None, *,
        optimizer: torch.optim.Optimizer | None = None, **options: Any) -> FitResult:
    """Train on ``batches`` with binary cross-entropy on logits: one loop for every strategy.

    Args:
        target: a :class:`~fbrapids.trainers.models.base.CTRModel` (DLRM, WideAndDeep, DeepFM,
            DIN, ...), trained in this process (:class:`~fbrapids.trainers.strategy.OneProcess`);
            or a :class:`~fbrapids.trainers.strategy.Strategy`: the ranks of a distributed run
            (:class:`fbrapids.trainers.distributed.Ranks`), a trial's arms side by side
            (:class:`~fbrapids.trainers.strategy.Arms`).
        batches: e.g. ``df.fbx.stream(label=..., dense=[...], sparse=[...], batch_size=...)``;
            on ranks, this rank's share of the global batches.
        config: the options (:class:`~fbrapids.trainers.fit_config.FitConfig`: epochs,
            max_steps, checkpoints and resume, progress, the next rows found ahead, nan,
            device, run identity, lookahead, calibration).
        optimizer: the dense optimizer of a model (default
            :func:`~fbrapids.trainers.dense_optim.default_optimizer`: fused Adam, lr 1e-3).
        options: any :class:`FitConfig` option, over ``config``'s (``fit(model, batches,
            epochs=2)``).

    Returns a :class:`~fbrapids.trainers.fit_config.FitResult`.
    """
    cfg = (config if config is not None else FitConfig()).with_(**options)
    keep_freed_blocks()  # each step's tensors reuse the last step's memory instead of faulting it in again
    strategy = target if isinstance(target, Strategy) else OneProcess(target, optimizer)
    check_nan(cfg.nan, strategy.nan_words, f"fit ({strategy.name})")
    result = FitResult(steps=0)
    with strategy.session(batches, cfg, result) as (start, held):
        step, finished = _passes(strategy, batches, cfg, result, start, held)
        result.steps = step
        changed = _end_of_pass(strategy, held, result, step > start, finished)
        if cfg.checkpoint_dir is not None:
            write_final_checkpoint(lambda at: strategy.save(at, held), step, step > start, changed, result)
    return result


def _end_of_pass(strategy: Strategy, held: HeldBack | None, result: FitResult, trained: bool, finished: bool) -> bool:
    """The end-of-pass step: the calibration fitted on the held-back batches, when this call
    trained (``trained``) or the pass had ended before it (``finished``: resumed from a
    checkpoint of the last step, which may have been written before the fit: a periodic one,
    a run killed between the two writes; the fit on the same model and rows gives the same
    shift); too few to fit on at the end of the pass, they are trained on after all.
    Returns whether the model changed (its final checkpoint must then be written)."""
    if held is None or not (trained or finished):
        return False
    before = strategy.calibration()
    if strategy.calibrate(held, result):
        after = strategy.calibration()
        return before is None or after is None or not torch.equal(before, after)
    if not finished or not held.rows:
        return False
    strategy.train_held(held, result.steps, result)  # too few to calibrate on: trained on after all
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


def _passes(strategy: Strategy, batches: Iterable[Batch], cfg: FitConfig, result: FitResult, start: int,
            held: HeldBack | None) -> tuple[int, bool]:
    """The pass(es): returns the global step reached (a step is a batch read from the
    stream, held back or trained on) and whether the stream ended (False: ``max_steps``)."""
    step = strategy.first_step(start, batches)
    limit = cfg.max_steps
    bar = tqdm(total=None, initial=start, disable=not (cfg.progress and strategy.shows_progress()), desc="fit",
               unit="batch")
    # the total: exact for an eager frame; over a dask stream's first pass an estimate refined with each partition
    total = _BarTotal(bar, batches, cfg.epochs, limit)
    rates = _sparse_rates(strategy, cfg.sparse_lr_decay)
    try:
        for epoch in range(cfg.epochs):
            for opt, lr in rates:
                opt.lr = lr * cfg.sparse_lr_decay ** epoch
            if hasattr(batches, "set_epoch"):  # calibrated: each pass in the first's order, the same rows held back
                batches.set_epoch(0 if held is not None else epoch)
            items = iter(strategy.items(batches))
            for i in range(1 << 62):
                if strategy.limit_first and limit is not None and step >= limit:
                    return step, False
                item = next(items, None)
                if item is None:
                    break
                total.refresh()
                if limit is not None and step >= limit:
                    return step, False
                if not _one_step(strategy, item, i, step, start, held, epoch):
                    break  # the pass is over (every rank is out of data)
                step += 1
                if step > start:
                    bar.update(1)  # a batch consumed (a skipped or held one too: the bar reaches its total)
                    if result.losses:
                        bar.set_postfix(loss=f"{result.losses[-1]:.4f}", refresh=False)
                    if cfg.checkpoint_dir is not None and cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
                        result.checkpoints.append(strategy.save(step, held))
        return step, True
    finally:
        for opt, lr in rates:
            opt.lr = lr
        bar.close()


def _sparse_rates(strategy: Strategy, decay: float) -> list[tuple[SparseOptimizer, float]]:
    """The sparse optimizers of ``strategy``'s model and their configured lr, for
    :attr:`FitConfig.sparse_lr_decay` (none when it is 1)."""
    if decay == 1.0:
        return []
    if isinstance(strategy, OneProcess):
        models = [strategy.model]
    elif isinstance(strategy, Arms):
        models = list(strategy.models)
    else:
        raise ArgumentError(f"fit: sparse_lr_decay runs on one process or a trial's arms, not on {strategy.name}")
    from fbrapids.trainers.sparse import TieredEmbeddingStore

    stores = [s for m in models for s in m.stores().values()]
    other = [s.name for s in stores if not isinstance(s, TieredEmbeddingStore)]
    if other:
        raise ArgumentError(f"fit: sparse_lr_decay decays a tiered store's learning rate; tables {other} are not one")
    return [(s.optimizer, s.config.lr) for s in stores if isinstance(s, TieredEmbeddingStore)]


def _one_step(strategy: Strategy, item: Item, i: int, step: int, start: int, held: HeldBack | None,
              epoch: int = 0) -> bool:
    """The part of the loop for the pass's batch number ``i`` at global step ``step`` (before
    it) of pass ``epoch``: skipped (trained before the checkpoint resumed from), held back, or
    trained on; False: the pass is over (every rank is out of data).  In the first pass the
    held batches are every ``HOLD_EVERY``-th global step and each batch is counted into the
    next held one's span (:meth:`~fbrapids.trainers.calibration.HeldBack.count`); a later
    pass (read in the first one's order) holds back the same batches, by their number in it."""
    batch, ahead = item
    if step < start:
        return strategy.skip(batch)
    strategy.announce(i, item)
    at = step if epoch == 0 else i  # the batch's number in the pass (the first pass's: its global step)
    if held is not None and epoch == 0:
        held.count(batch)  # the rows and clicks the next held batch stands for
    if held is not None and held.holds(at, epoch):
        if epoch:  # a later pass: held back again, not trained on
            return True
        pushed = strategy.hold(batch, held, index=at)
        if pushed is None:
            return False
        for older in pushed:  # pushed out of the held ones: trained on now
            strategy.train_older(older, step + 1)
        return True
    return strategy.train(batch, step + 1, ahead, held is not None and held.holds(at + 1, epoch))


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
