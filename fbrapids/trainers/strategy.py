"""How ``fit``'s one loop trains: a :class:`Strategy` is what differs between training one
model in this process (:class:`OneProcess`), a model sharded over the ranks of a
``torch.distributed`` group (:class:`fbrapids.trainers.distributed.Ranks`) and a trial's arms
side by side (:class:`Arms`).

The loop (:func:`fbrapids.trainers.fit.fit`) is the same for all: passes over the batches,
the steps a resumed run already took skipped, every
:data:`~fbrapids.trainers.calibration.HOLD_EVERY`-th batch held back for the calibration,
checkpoints every ``checkpoint_every`` steps and at the end, the calibration fitted at the
end.  A strategy supplies each part's body:

* :meth:`Strategy.session`: placement, optimizers, the work dir's lock, a resume; yields
  the step to start from and the held-back batches (None: no calibration);
* :meth:`Strategy.items`: a pass's batches, each with those read ahead of it;
* :meth:`Strategy.train`: one update on a batch (False: every rank is out of data);
  :meth:`~Strategy.skip` / :meth:`~Strategy.hold`: a batch a resume skips / one held back;
* :meth:`Strategy.save`, :meth:`~Strategy.calibrate`, :meth:`~Strategy.train_held`.

A strategy for a trial's arms at the cost of one (one store whose row holds every arm's
vector, the dense parts batched) is a strategy of its own: its ``train`` steps every arm on
a batch, its ``session`` builds what the arms share; the loop stays.

Example:
    >>> import pandas as pd, fbrapids
    >>> from fbrapids.trainers.fit import FitConfig, fit
    >>> from fbrapids.trainers.models import WideAndDeep
    >>> df = pd.DataFrame({"y": [0, 1, 1, 0] * 12, "d0": [0.5] * 48, "ad": list(range(6)) * 8})
    >>> arms = Arms([WideAndDeep(1, ["ad"], embedding_dim=4, deep_mlp=[8]) for _ in range(3)])
    >>> fit(arms, df.fbx.stream(label="y", dense=["d0"], sparse=["ad"], batch_size=16),
    ...     FitConfig(progress=False, calibrate=False)).steps
    3
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import logging
import math
import os
from pathlib import Path
from typing import Callable, Generic, Iterable, Iterator, Mapping, Protocol, Sequence, TypeVar

import numpy as np
import torch

from fbrapids.errors import ArgumentError, BatchError, CheckpointError, NonFiniteError
from fbrapids.files.manifest import resolve_inside, verification_enabled
from fbrapids.runs.workdir import clean_stale, lock_work_dir, preflight
from fbrapids.trainers.batch import Batch
from fbrapids.trainers.calibration import HeldBack, fit_shift
from fbrapids.trainers.checkpoint.directory import (
    check_pointer_writable,
    checkpoints,
    clean_partial,
    newest_verified,
    read_small_file,
)
from fbrapids.trainers.checkpoint.model_state import load_checkpoint, nonfinite_weights, save_checkpoint
from fbrapids.trainers.dense_optim import default_optimizer
from fbrapids.trainers.device import module_device, place_model
from fbrapids.trainers.fit_config import FitConfig, FitResult
from fbrapids.trainers.model_inputs import check_model_stream
from fbrapids.trainers.models.base import CTRModel
from fbrapids.trainers.nan_policy import FIT_NAN
from fbrapids.trainers.run_identity import RUN_KEY, check_identity, run_identity

log = logging.getLogger(__name__)

#: one item of a pass: a batch (None: this rank has none) and the batches read ahead of it
Item = tuple[Batch | None, list[Batch]]
View = Callable[[Batch], Batch]


def _given(batch: Batch | None, strategy: str) -> Batch:
    """``batch``, which a one-process strategy always has (only a rank of a sharded run can
    be out of data: None)."""
    if batch is None:
        raise BatchError(f"{strategy}: no batch (None) given to a strategy whose every step has one")
    return batch


class Strategy:
    """What one run of ``fit`` trains and how (module docstring); the defaults are a strategy
    with no checkpoints and no calibration.  ``nan_words``: the ``nan`` words it takes;
    ``limit_first``: ``max_steps`` is checked before the next batch is read (ranks: every
    rank reads the same batches) rather than after."""

    name = "strategy"
    nan_words: tuple[str, ...] = FIT_NAN
    limit_first = False

    @contextlib.contextmanager
    def session(self, batches: Iterable[Batch], cfg: FitConfig,
                result: FitResult) -> Iterator[tuple[int, HeldBack | None]]:
        yield 0, None

    def items(self, batches: Iterable[Batch]) -> Iterator[Item]:
        for b in batches:
            yield b, []

    def first_step(self, start: int, batches: Iterable[Batch]) -> int:
        """The step counter at the start of the passes (a stream that skips the rows a resume
        trained on starts at ``start``)."""
        return 0

    def announce(self, index: int, item: Item) -> None:
        """Told the pass's batch ``index`` is next (and what was read ahead of it)."""

    def skip(self, batch: Batch | None) -> bool:
        """A batch trained on before the checkpoint resumed from; False: the pass is over."""
        return True

    def hold(self, batch: Batch | None, held: HeldBack, index: int = -1) -> list[Batch | None] | None:
        """Hold ``batch`` back (``index``: its number in the pass); the older held batches it
        pushes out (to train now), or None: the pass is over."""
        return held.add(batch, index=index)

    def train(self, batch: Batch | None, step: int, ahead: list[Batch], next_held: bool) -> bool:
        """One update on ``batch`` at global step ``step`` (``ahead``: read after it;
        ``next_held``: the next batch will be held back); False: the pass is over."""
        raise NotImplementedError

    def train_older(self, batch: Batch | None, step: int) -> None:
        """An update on a held batch pushed out of the held ones (its rows were read before)."""
        self.train(batch, step, [], True)

    def save(self, step: int, held: HeldBack | None) -> Path:
        raise CheckpointError(f"{self.name}: no checkpoints (a trial is re-run, not resumed)")

    def calibrate(self, held: HeldBack, result: FitResult) -> bool:
        """Fit the calibration on the held rows; False when they are too few."""
        return False

    def calibration(self) -> torch.Tensor | None:
        """The model's calibration now (a copy; None: it has none), to tell whether
        :meth:`calibrate` changed it."""
        return None

    def train_held(self, held: HeldBack, step: int, result: FitResult) -> None:
        """Train on every held batch (too few to calibrate on: nothing withheld for nothing)."""
        for b in held.batches:
            self.train_older(b, step)
        held.clear()
        result.held_rows = 0

    def shows_progress(self) -> bool:
        return True


_B = TypeVar("_B", contravariant=True)


class PreparingTables(Protocol, Generic[_B]):
    """Tables told the batches coming (a model's, a trial's shared ones)."""

    @property
    def prepares_two_deep(self) -> bool: ...

    def prepared_next(self) -> bool: ...

    def prepare(self, batch: _B) -> None: ...


def prepare_before_lookup(tables: PreparingTables[_B], current: _B, upcoming: _B | None) -> bool:
    """Where ``tables`` prepare two deep, tell them ``upcoming`` now, before ``current`` is
    looked up (its rows then found beside the whole step), and ``current`` first when no
    prepare is pending for it (the first step, or one whose prepare went to another batch);
    returns whether it did: else the caller tells them ``upcoming`` after the lookup."""
    if upcoming is None or not tables.prepares_two_deep:
        return False
    if not tables.prepared_next():
        tables.prepare(current)
    tables.prepare(upcoming)
    return True


def next_trained(ahead: list[Batch], next_held: bool, step: int, max_steps: int | None = None) -> Batch | None:
    """The batch trained after the one at global step ``step`` (``ahead``: those read after
    it; ``next_held``: the first of them is held back for the calibration): ``ahead[0]``, or
    where it is held back the one after it (two in a row never are), the batch whose rows a
    step prepares beside it; None when there is none, or it comes at or past ``max_steps``.
    A held batch is never prepared: its ids stay unseen, as served, when the calibration
    predicts it; the batch after it is, or its lookup would wait for its own prepare (at
    200,000 rows of the demo every eighth step, 4-6 ms each).

    Example:
        >>> next_trained(["b", "c"], False, 3), next_trained(["b", "c"], True, 3), next_trained(["b"], True, 3)
        ('b', 'c', None)
        >>> next_trained(["b", "c"], True, 3, max_steps=4), next_trained(["b", "c"], False, 3, max_steps=4)
        (None, 'b')
    """
    k = 1 if next_held else 0
    if len(ahead) <= k or (max_steps is not None and step + k >= max_steps):
        return None
    return ahead[k]


def lookahead_items(it: Iterable[Batch], depth: int = 1) -> Iterator[Item]:
    """Each batch with the (up to) ``depth`` batches after it, read ahead of it.

    Example:
        >>> [(b, ahead) for b, ahead in lookahead_items(iter([1, 2, 3]), depth=2)]
        [(1, [2, 3]), (2, [3]), (3, [])]
        >>> read = []
        >>> for b, ahead in lookahead_items(iter(read.append(i) or i for i in range(5)), depth=1):
        ...     assert len(read) == b + 2 - (b == 4)  # this batch and one more, no further
    """
    it = iter(it)
    window = collections.deque(itertools.islice(it, depth + 1))
    while window:
        cur = window.popleft()
        yield cur, list(window)  # ``depth`` batches read ahead of ``cur``, no more
        window.extend(itertools.islice(it, 1))


def nonfinite_grads(model: torch.nn.Module,
                    named: Sequence[tuple[str, torch.nn.Parameter]] | None = None) -> list[str]:
    """Names of dense parameters whose gradient holds NaN / inf (one fused check when all are
    finite); ``named``: ``model``'s named parameters, listed once by a caller that checks every step."""
    grads = [(n, p.grad) for n, p in (model.named_parameters() if named is None else named) if p.grad is not None]
    if not grads:
        return []
    # one fused pass per device sets ``found`` when any value is NaN or inf (its multiply by 1.0 changes no
    # bit); only then is each gradient looked at
    found = {}
    for dev, gs in _by_device([g for _, g in grads]).items():
        found[dev] = torch.zeros(1, device=dev)
        torch._amp_foreach_non_finite_check_and_unscale_(gs, found[dev], torch.ones(1, device=dev))
    if not any(bool(f) for f in found.values()):
        return []
    return [n for n, g in grads if not bool(torch.isfinite(g).all())]


def _by_device(tensors: list[torch.Tensor]) -> dict[torch.device, list[torch.Tensor]]:
    out: dict[torch.device, list[torch.Tensor]] = {}
    for t in tensors:
        out.setdefault(t.device, []).append(t)
    return out


def _nonfinite_message(step: int, what: str, model: CTRModel, optimizer: torch.optim.Optimizer) -> str:
    where = nonfinite_weights(model, optimizer)
    return (f"step {step}: {what}; " + (f"non-finite weights in {', '.join(where)}" if where else
                                        "every weight is finite (the batch's inputs or an overflow)")
            + "; training stopped before this update and no checkpoint is written from it "
            "(fit(nan='skip') drops such batches instead)")


class Stepper:
    """One update of ``model`` on a batch: forward, loss, the ``nan`` policy, backward, the
    dense and sparse steps (``prefetch``: the next batch's rows found meanwhile, told before
    the forward where the tables prepare two deep, after it otherwise); the loss goes to
    ``result.losses``, a skipped step to ``result.skipped``."""

    def __init__(self, model: CTRModel, optimizer: torch.optim.Optimizer, result: FitResult, nan: str) -> None:
        self.model, self.optimizer, self.result, self.nan = model, optimizer, result, nan
        self.dev = module_device(model)
        self.loss_fn = torch.nn.BCEWithLogitsLoss()
        self.named = list(model.named_parameters())  # listed once: the check after each backward reads their grads

    def __call__(self, batch: Batch, step: int, prefetch: Batch | None = None) -> None:
        model, optimizer = self.model, self.optimizer
        optimizer.zero_grad(set_to_none=True)
        told = prepare_before_lookup(model, batch, prefetch)  # the next batch's rows found beside the whole step
        batch = batch.to(self.dev)
        logits = model(batch)
        if prefetch is not None and not told:  # found beside the rest of this step
            model.prepare(prefetch)
        loss = self.loss_fn(logits, batch.label.to(logits.device))
        value = float(loss.detach())
        problem = None if math.isfinite(value) else f"loss is {value}"
        if problem is None:
            loss.backward()
            if self.nan != "warn":
                bad = nonfinite_grads(model, self.named)
                problem = f"non-finite gradient of {', '.join(bad)}" if bad else None
        if problem is not None:
            if self.nan == "error":
                raise NonFiniteError(_nonfinite_message(step, problem, model, optimizer))
            log.warning("step %d: %s (nan=%r)", step, problem, self.nan)
            if self.nan == "skip":
                optimizer.zero_grad(set_to_none=True)
                self.result.skipped.append(step)
                return
        model.apply_sparse_gradients(background=True)  # first: on CPU caches it runs beside the dense step
        optimizer.step()
        self.result.losses.append(value)


def checkpoint_root(checkpoint_dir: str | os.PathLike, optimizer: torch.optim.Optimizer, model: CTRModel,
                    resume: bool, result: FitResult, identity: Mapping[str, object],
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


@torch.no_grad()
def held_logits(model: CTRModel, batches: Iterable[Batch | None]) -> tuple[np.ndarray, np.ndarray]:
    """``model``'s raw logits (no calibration) and the labels of ``batches`` (Nones skipped),
    in evaluation mode, as :func:`~fbrapids.trainers.fit.predict` computes them: its tables
    read-only, as served (an id training never admitted reads the default row, and is not
    admitted: the model calibrated is the model saved and served)."""
    from fbrapids.trainers.sparse.store import read_only

    dev = module_device(model)
    model.eval()
    zs, ys = [np.zeros(0)], [np.zeros(0)]
    try:
        with read_only(model.stores().values()):
            for b in batches:
                if b is not None:
                    b = b.to(dev)
                    zs.append(model(b).double().cpu().numpy().ravel())
                    ys.append(b.label.double().cpu().numpy().ravel())
    finally:
        model.train()
    return np.concatenate(zs), np.concatenate(ys)


def calibrate_on(model: CTRModel, logits: np.ndarray, labels: np.ndarray, result: FitResult,
                 rate: float | None = None) -> bool:
    """Fit and set ``model``'s calibration (a shift of its logits) on the held rows' raw
    ``logits`` and ``labels``, to the click rate ``rate`` (the held batches' spans',
    :meth:`~fbrapids.trainers.calibration.HeldBack.rate`; None: the labels'); False when they
    are too few (:func:`~fbrapids.trainers.calibration.fit_shift`)."""
    result.held_rows = len(logits)
    ab = fit_shift(logits, labels, rate=rate)
    if ab is None:
        return False
    model.set_calibration(*ab)
    result.calibration = ab
    log.info("calibration: sigmoid(%.4f * logit %+.4f), fitted on %d rows held back from training", ab[0], ab[1],
             len(logits))
    return True


class OneProcess(Strategy):
    """One model trained in this process (``fit(model, ...)``): the model on its device, the
    stores' next rows found in the background while a step computes, checkpoints of the
    model and its tables (:mod:`fbrapids.trainers.checkpoint`) and an exact resume."""

    name = "one process"

    def __init__(self, model: CTRModel, optimizer: torch.optim.Optimizer | None = None) -> None:
        self.model, self.optimizer = model, optimizer
        self.identity: Mapping[str, object] = {}
        self.window = 0
        self.announced = 0

    @contextlib.contextmanager
    def session(self, batches: Iterable[Batch], cfg: FitConfig,
                result: FitResult) -> Iterator[tuple[int, HeldBack | None]]:
        model = self.model
        check_model_stream(model, batches)  # a stream of other features: one error naming the feature, before training
        place_model(model, cfg.device)
        if self.optimizer is None:
            self.optimizer = default_optimizer([p for p in model.parameters() if p.requires_grad])
        self.identity = run_identity(model, batches, cfg.run)
        # several epochs: every pass reads the first one's order and holds back the same batches
        held = HeldBack(cfg.calibration_rows) if cfg.calibrate else None
        self.cfg = cfg
        nan = cfg.nan if verification_enabled() else "warn"
        self.window = cfg.lookahead if model.uses_window() else 0
        # the debris is cleaned under the lock by checkpoint_root, after restoring what a killed writer left
        with (lock_work_dir(cfg.checkpoint_dir, clean=False) if cfg.checkpoint_dir is not None
              else contextlib.nullcontext()):
            start = (0 if cfg.checkpoint_dir is None else
                     checkpoint_root(cfg.checkpoint_dir, self.optimizer, model, cfg.resume, result, self.identity,
                                     held))
            if held is not None and start > 0 and not held.restored:
                log.info("no post-hoc calibration: the checkpoint resumed from holds no held-back batches (one "
                         "written without calibration, or by an older fbrapids); every batch is trained on")
                held = None
            self.stepper = Stepper(model, self.optimizer, result, nan)
            model.train()
            yield start, held

    def items(self, batches: Iterable[Batch]) -> Iterator[Item]:
        self.announced = 0  # batches of this pass announced so far
        # calibrated, two read ahead: where the next batch is held back, the one after it is the next trained
        # (next_trained); else one
        return lookahead_items(batches, max(2 if self.cfg.calibrate else 1, self.window))

    def announce(self, index: int, item: Item) -> None:
        if self.window:  # this batch and those entering the window, each announced once
            upcoming = [item[0], *item[1][: self.window]]
            for j in range(max(self.announced, index), index + len(upcoming)):
                self.model.announce(_given(upcoming[j - index], self.name), j - index)
            self.announced = index + len(upcoming)

    def train(self, batch: Batch | None, step: int, ahead: list[Batch], next_held: bool) -> bool:
        # a batch to be held back is not prepared: its ids stay unseen, as served, when the calibration predicts it;
        # nor is one after the last step (max_steps): it is never trained on
        upcoming = next_trained(ahead, next_held, step, self.cfg.max_steps) if self.cfg.prefetch_rows else None
        self.stepper(_given(batch, self.name), step, upcoming)
        return True

    def train_older(self, batch: Batch | None, step: int) -> None:
        self.stepper(_given(batch, self.name), step)

    def save(self, step: int, held: HeldBack | None) -> Path:
        if self.cfg.checkpoint_dir is None:
            raise CheckpointError(f"{self.name}: a checkpoint asked for without a checkpoint_dir")
        return save_checkpoint(self.model, self.optimizer, self.cfg.checkpoint_dir, step,
                               keep=self.cfg.keep_checkpoints, run=self.identity, held=held)

    def calibrate(self, held: HeldBack, result: FitResult) -> bool:
        return calibrate_on(self.model, *held_logits(self.model, held.batches), result, rate=held.rate())

    def calibration(self) -> torch.Tensor | None:
        return self.model.calibration.clone()


class Arms(Strategy):
    """Several models trained side by side from one stream (a trial's arms): each batch, as
    it is read, takes one step of every model in turn, through that model's *view* of it
    (``views[k]``, e.g. :func:`fbrapids.trainers.arms.baseline_view`; None: the batch
    itself), each with its own dense optimizer (default :func:`~fbrapids.trainers.dense_optim.default_optimizer`).
    Every model sees the same batches in the same order; the extraction is one run's.  No
    checkpoints, no calibration: a trial is re-run, not resumed.  A NaN / inf names the
    model's index in the step's error."""

    name = "arms"

    def __init__(self, models: Sequence[CTRModel], views: Sequence[View | None] | None = None,
                 optimizers: Sequence[torch.optim.Optimizer] | None = None) -> None:
        self.models = list(models)
        self.views = list(views) if views is not None else [None] * len(self.models)
        if len(self.views) != len(self.models):
            raise ArgumentError(f"arms: {len(self.models)} models but {len(self.views)} views")
        self.optimizers = list(optimizers) if optimizers is not None else None
        self.steppers: list[Stepper] = []

    @contextlib.contextmanager
    def session(self, batches: Iterable[Batch], cfg: FitConfig,
                result: FitResult) -> Iterator[tuple[int, HeldBack | None]]:
        arms_start(self, self.models, cfg)
        optimizers = self.optimizers or [default_optimizer([p for p in m.parameters() if p.requires_grad])
                                         for m in self.models]
        self.steppers = [_ArmStepper(k, m, o, result, cfg.nan) for k, (m, o) in enumerate(zip(self.models,
                                                                                               optimizers))]
        yield 0, None

    def train(self, batch: Batch | None, step: int, ahead: list[Batch], next_held: bool) -> bool:
        for stepper, view in zip(self.steppers, self.views):
            given = _given(batch, self.name)
            stepper(given if view is None else view(given), step)
        return True


def arms_start(strategy: Strategy, models: Sequence[CTRModel], cfg: FitConfig) -> torch.device:
    """The start of a session of a trial's arms: no checkpoints (a trial keeps finished seeds,
    not steps), every model placed (:func:`~fbrapids.trainers.device.place_model`) and in
    training mode; returns the first model's device."""
    if cfg.checkpoint_dir is not None:
        raise ArgumentError(f"fit({type(strategy).__name__}(...)): no checkpoints (a trial keeps finished seeds, "
                            "not steps)")
    devices = [place_model(m, cfg.device) for m in models]
    for m in models:
        m.train()
    return devices[0]


class _ArmStepper(Stepper):
    """One arm's step: :class:`Stepper`'s, its error naming the arm."""

    def __init__(self, index: int, model: CTRModel, optimizer: torch.optim.Optimizer, result: FitResult,
                 nan: str) -> None:
        super().__init__(model, optimizer, result, nan)
        self.index = index

    def __call__(self, batch: Batch, step: int, prefetch: Batch | None = None) -> None:
        try:
            super().__call__(batch, step, prefetch)
        except NonFiniteError as exc:
            raise NonFiniteError(f"model {self.index} ({type(self.model).__name__}): {exc}; the side-by-side "
                                 "training stopped before this update") from None
