"""``fit`` / ``predict`` / ``evaluate`` over the ranks of a ``torch.distributed`` group.

Each rank calls :func:`fit_distributed` with its own share of the data (see
:mod:`~fbrapids.trainers.distributed.data`: ``partitions[r::W]`` or its slice of each global
batch) and a model built the same way on every rank.  Dense layers train data-parallel
under ``DistributedDataParallel``; every embedding table is sharded by rows across the
ranks (:mod:`~fbrapids.trainers.distributed.sharded_store`).  A step's loss is this rank's
rows' share of the mean over the union batch (the union's row count is in the step's
``all_gather``), so DDP's gradient average is the gradient of the union batch's mean loss
however unevenly the rows fall, an empty local batch included (its loss is 0, never NaN).
A rank out of data keeps stepping with an empty batch, serving the rows it owns, until
every rank is done.

At start-up the ranks compare a digest of their configuration (model layout, tables and
their settings, world size, the call's options) with one ``all_gather_object``; a
difference is a :class:`~fbrapids.errors.DistributedError` naming the ranks and what
differs, instead of a hang later.  Two ranks sharing an SSD folder are refused the same way.

With one rank, :func:`fit_distributed` trains bit for bit as :func:`fbrapids.trainers.fit.fit`
(same weights digest).  ``FitResult.losses`` are this rank's local mean losses.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from fbrapids.errors import CheckpointError, DistributedError, NonFiniteError
from fbrapids.runs.workdir import lock_work_dir
from fbrapids.trainers.batch import Batch
from fbrapids.trainers.calibration import CALIBRATION_ROWS, HeldBack, batch_from_state, batch_state, fit_shift
from fbrapids.trainers.checkpoint.directory import checkpoints
from fbrapids.trainers.dense_optim import default_optimizer
from fbrapids.trainers.device import module_device, place_model
from fbrapids.trainers.distributed.buckets import BucketTable
from fbrapids.trainers.distributed.checkpoint import restore_sharded, save_sharded
from fbrapids.trainers.distributed.consistency import check_same_config
from fbrapids.trainers.distributed.data import concat_batches, empty_like, rank_bounds, slice_batch
from fbrapids.trainers.distributed.exchange import Exchange
from fbrapids.trainers.distributed.sharded_store import ShardedEmbeddings, shard_model
from fbrapids.trainers.fit import fit
from fbrapids.trainers.fit_config import FitConfig, FitResult
from fbrapids.trainers.metrics import all_metrics
from fbrapids.trainers.models.base import CTRModel
from fbrapids.trainers.nan_policy import RANKS_NAN
from fbrapids.trainers.run_identity import run_identity
from fbrapids.trainers.strategy import Item, Strategy, nonfinite_grads

log = logging.getLogger(__name__)

__all__ = ["Ranks", "fit_distributed", "predict_distributed", "evaluate_distributed", "DistributedTrainer"]


def _template(first: Batch | None, group: dist.ProcessGroup | None) -> Batch | None:
    """An empty batch with the data's features, from any rank that has data."""
    world = dist.get_world_size(group)
    mine = None if first is None else empty_like(first).to("cpu")
    got: list[Batch | None] = [None] * world
    dist.all_gather_object(got, mine, group=group)
    return next((b for b in got if b is not None), None)


def _peek(it: Iterator[Batch | None]) -> tuple[Batch | None, Iterator[Batch | None]]:
    first = next(it, None)
    if first is None:
        return None, iter(())

    def chain() -> Iterator[Batch | None]:
        yield first
        yield from it

    return first, chain()


class DistributedTrainer:
    """The sharded model, its DDP wrapper and the per-step exchange of one rank."""

    def __init__(self, model: CTRModel, group: dist.ProcessGroup | None = None,
                 buckets: BucketTable | None = None, device: str | torch.device | None = None) -> None:
        if not dist.is_available() or not dist.is_initialized():
            raise DistributedError("torch.distributed is not initialised: launch with torchrun (or "
                                   "fbrapids.trainers.distributed.launch) and call dist.init_process_group first")
        self.model = model
        self.device = place_model(model, device)
        self.exchange = Exchange(group)
        self.rank, self.world = self.exchange.rank, self.exchange.world
        self.sharded: ShardedEmbeddings = shard_model(model, self.exchange, buckets)
        dev = module_device(model)
        self.ddp = DistributedDataParallel(model, device_ids=[dev.index] if dev.type == "cuda" else None,
                                           process_group=group)
        self.group = group
        self.template: Batch | None = None

    @property
    def buckets(self) -> BucketTable:
        return self.sharded.buckets

    def stand_in(self, local: Batch | None) -> Batch:
        """``local``, or (this rank has no batch this step) the empty batch shaped like the data's."""
        if local is not None:
            return local
        if self.template is None:
            raise DistributedError("a step ran with no batch on this rank and no rank's data to shape an empty one")
        return self.template


class Ranks(Strategy):
    """A model trained over the ranks of a ``torch.distributed`` group: ``fit(Ranks(model), batches)``
    on every rank, each with its share of the data (module docstring).  ``model`` may be the
    :class:`DistributedTrainer` of an earlier call (its shards kept); ``optimizer``, ``group``,
    ``buckets``, ``on_file``, ``on_step`` and ``overlap`` as :func:`fit_distributed`'s.  After
    ``fit``, :attr:`trainer` is the trainer (for :func:`evaluate_distributed`)."""

    name = "ranks"
    nan_words = RANKS_NAN
    limit_first = True  # every rank reads the same batches: none past max_steps

    def __init__(self, model: CTRModel | DistributedTrainer, *, optimizer: torch.optim.Optimizer | None = None,
                 group: dist.ProcessGroup | None = None, buckets: BucketTable | None = None,
                 on_file: Callable[[Path], None] | None = None,
                 on_step: Callable[[int, Batch | None], None] | None = None, overlap: bool = True) -> None:
        self.model, self.optimizer, self.group, self.buckets = model, optimizer, group, buckets
        self.on_file, self.on_step, self.overlap = on_file, on_step, overlap
        self.trainer: DistributedTrainer | None = model if isinstance(model, DistributedTrainer) else None

    @contextlib.contextmanager
    def session(self, batches: Iterable[Batch], cfg: FitConfig,
                result: FitResult) -> Iterator[tuple[int, HeldBack | None]]:
        trainer = self.trainer
        if trainer is None:
            model = self.model
            assert not isinstance(model, DistributedTrainer)  # __init__ made such a model the trainer
            check_same_config(model, self.group, epochs=cfg.epochs, max_steps=cfg.max_steps,
                              checkpoint_every=cfg.checkpoint_every)
            trainer = self.trainer = DistributedTrainer(model, self.group, self.buckets, cfg.device)
        net = trainer.model
        if self.optimizer is None:
            self.optimizer = default_optimizer([p for p in net.parameters() if p.requires_grad])
        self.cfg = cfg
        self.global_stream = bool(getattr(batches, "global_stream", False))
        self.identity = run_identity(net, batches, cfg.run)
        # several epochs are not calibrated on ranks (one process is: each pass in the first's order)
        held = HeldBack(cfg.calibration_rows) if cfg.calibrate and cfg.epochs == 1 else None
        self.run = _RanksRun(trainer, self.optimizer, result, cfg.nan, self.overlap and cfg.prefetch_rows,
                             cfg.max_steps)
        lock: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
        if cfg.checkpoint_dir is not None and trainer.rank == 0:  # one lock for the run: the others are part of it
            lock = lock_work_dir(cfg.checkpoint_dir)
        with lock:
            start = 0
            if cfg.checkpoint_dir is not None:
                dist.barrier(group=trainer.group)  # rank 0 holds the lock and has cleaned debris
                if cfg.resume:
                    start, held = _resume(trainer, self.optimizer, cfg.checkpoint_dir, self.identity,
                                          self.global_stream, held, batches, self.run, result)
                elif checkpoints(cfg.checkpoint_dir):
                    raise CheckpointError(f"{cfg.checkpoint_dir} already holds checkpoints up to "
                                          f"{checkpoints(cfg.checkpoint_dir)[0].name} from an earlier run; resume "
                                          "from them (resume=True) or use an empty checkpoint dir")
            net.train()
            yield start, held

    def _trainer_now(self) -> DistributedTrainer:
        """The trainer, which :meth:`session` made (or ``__init__`` was given)."""
        if self.trainer is None:
            raise DistributedError("ranks: the strategy was used outside fit's session (no trainer yet)")
        return self.trainer

    def first_step(self, start: int, batches: Iterable[Batch]) -> int:
        return start if hasattr(batches, "skip_rows") else 0  # a feed that skips the rows: no steps for them

    def items(self, batches: Iterable[Batch]) -> Iterator[Item]:
        trainer, run = self._trainer_now(), self.run
        first, run.it = _peek(iter(batches))
        if trainer.template is None:
            trainer.template = _template(first, trainer.group)

        def pass_items() -> Iterator[Item]:
            while True:  # a rank out of data keeps stepping (None) until every rank is: begin() tells
                yield run.next_batch(), []

        return pass_items()

    def skip(self, batch: Batch | None) -> bool:
        return self._trainer_now().sharded.begin(batch, count_only=True) is not None

    def hold(self, batch: Batch | None, held: HeldBack, index: int = -1) -> list[Batch | None] | None:
        union = self._trainer_now().sharded.begin(batch, count_only=True)  # the union's rows; None: out of data
        if union is None:
            return None
        rows = int(union.rows.sum())
        self.run.position += rows
        return held.add(None if batch is None or len(batch) == 0 else batch, rows=rows, index=index)

    def train(self, batch: Batch | None, step: int, ahead: list[Batch], next_held: bool) -> bool:
        if not self.run.train(batch, step, read_ahead=not next_held):
            return False
        if self.on_step is not None:
            self.on_step(step, batch)
        return True

    def train_older(self, batch: Batch | None, step: int) -> None:
        self.run.train(batch, step, read_ahead=False, read=False)  # its rows were read when it was held
        if self.on_step is not None:
            self.on_step(step, batch)

    def train_held(self, held: HeldBack, step: int, result: FitResult) -> None:
        self.run.train_held(held, step, self.on_step)

    def save(self, step: int, held: HeldBack | None) -> Path:
        cfg, trainer = self.cfg, self._trainer_now()
        if cfg.checkpoint_dir is None:
            raise CheckpointError(f"{self.name}: a checkpoint asked for without a checkpoint_dir")
        return save_sharded(trainer, self.optimizer, cfg.checkpoint_dir, step, keep=cfg.keep_checkpoints,
                            on_file=self.on_file, extra={"position_rows": self.run.position,
                                                         "global_stream": self.global_stream, "run": self.identity},
                            held=None if held is None else _union_held(trainer, held))

    def calibrate(self, held: HeldBack, result: FitResult) -> bool:
        return _calibrate_ranks(self._trainer_now(), held, result)

    def calibration(self) -> torch.Tensor | None:
        return self._trainer_now().model.calibration.clone()

    def shows_progress(self) -> bool:
        return self.trainer is None or self.trainer.rank == 0


def fit_distributed(model: CTRModel | DistributedTrainer, batches: Iterable[Batch], *, epochs: int = 1,
                    max_steps: int | None = None, optimizer: torch.optim.Optimizer | None = None,
                    checkpoint_dir: str | os.PathLike | None = None, checkpoint_every: int | None = None,
                    resume: bool = True, keep_checkpoints: int | None = 3, nan: str = "error",
                    group: dist.ProcessGroup | None = None, buckets: BucketTable | None = None,
                    device: str | torch.device | None = None,
                    on_file: Callable[[Path], None] | None = None, run: Mapping[str, object] | None = None,
                    on_step: Callable[[int, Batch | None], None] | None = None, overlap: bool = True,
                    calibrate: bool = True, calibration_rows: int = CALIBRATION_ROWS
                    ) -> tuple[FitResult, DistributedTrainer]:
    """Train this rank's share of the union batches: ``fit`` with the :class:`Ranks`
    strategy (no progress bar); returns the result and the trainer (pass the trainer to
    :func:`evaluate_distributed` / to a later call).

    Args are :func:`fbrapids.trainers.fit.fit`'s (:class:`~fbrapids.trainers.fit_config.FitConfig`'s,
    ``nan`` ``"error"`` or ``"warn"``), plus ``group`` (default: the world), ``buckets``
    (default: :meth:`BucketTable.default`, or the checkpoint's on resume).
    ``checkpoint_dir``: sharded checkpoints (:mod:`~fbrapids.trainers.distributed.checkpoint`),
    the same path on every rank (a shared file system across nodes); ``on_file(path)`` is
    called after each checkpoint file this rank writes.  ``run``: more settings a resume
    must share with the checkpoint, recorded with the model's and the stream's
    (:func:`~fbrapids.trainers.run_identity.run_identity`; with a global stream its batch
    size is the global batch).  Each checkpoint records the rows of the global stream
    trained so far; a resume continues at that row, at any world size when the ranks read
    slices of one global stream (:class:`~fbrapids.trainers.distributed.data.LeaderFeed`,
    :class:`~fbrapids.trainers.distributed.data.RankSlices`); a :class:`LeaderFeed`'s
    leader skips those rows without sending them.  ``on_step(step, batch)``: called after
    each applied update with this rank's batch (None when it had none).  ``overlap``: the
    next batch is read ahead and its ids exchanged (a thread, a process group of its own)
    while this step computes; its rows are looked up once this step's updates are applied,
    so the training is the same (``trainer.exchange.stats``: ``seconds`` in the step's own
    collectives, ``seconds_overlapped`` in the prepared ones, ``waited_for_ids_s`` the part
    of those the step waited for).  ``calibrate`` / ``calibration_rows``: ``fit``'s post-hoc
    calibration, on the same rows: every ``HOLD_EVERY``-th global batch is held back (each rank
    holds its part of it), and the shift is fitted on the final model's logits of the held
    rows, gathered from every rank, so every rank fits what one process fits; the union's
    held batches are kept in every shard's ``dense.pt``, so a resume at any world size holds
    them too.
    """
    ranks = Ranks(model, optimizer=optimizer, group=group, buckets=buckets, on_file=on_file, on_step=on_step,
                  overlap=overlap)
    cfg = FitConfig(epochs=epochs, max_steps=max_steps, checkpoint_dir=checkpoint_dir,
                    checkpoint_every=checkpoint_every, resume=resume, keep_checkpoints=keep_checkpoints, nan=nan,
                    device=device, run=run, calibrate=calibrate, calibration_rows=calibration_rows, progress=False)
    result = fit(ranks, batches, cfg)
    assert ranks.trainer is not None
    return result, ranks.trainer


def _resume(trainer: DistributedTrainer, optimizer: torch.optim.Optimizer, checkpoint_dir: str | os.PathLike,
            identity: Mapping[str, object], global_stream: bool, held: HeldBack | None, batches: Iterable[Batch],
            run_state: "_RanksRun", result: FitResult) -> tuple[int, HeldBack | None]:
    """Restore the newest sharded checkpoint: the step to start from and the held-back
    batches (this rank's part of the union's the checkpoint keeps; None when it keeps none)."""
    start, path, meta = restore_sharded(trainer, optimizer, checkpoint_dir, identity, global_stream, held)
    if held is not None and start > 0 and not held.restored:
        log.info("no post-hoc calibration: the checkpoint resumed from holds no held-back batches")
        held = None
    if held is not None and held.restored:  # the union's batches: this rank's rows of each, as a global stream's
        held.batches = [_rank_part(b, trainer.rank, trainer.world) for b in held.batches]
        if trainer.rank:  # the union's span counts: rank 0 keeps them (the ranks' sum is the union's)
            held.spans = [None if s is None else (0.0, 0.0) for s in held.spans]
            held.open = [0.0, 0.0]
    result.resumed_from = path
    run_state.position = int(meta.get("position_rows", 0))
    if path is not None and hasattr(batches, "skip_rows"):
        batches.skip_rows = run_state.position  # the leader skips them; no step is spent on them
        if "position_rows" not in meta:
            raise CheckpointError(f"{path} records no stream position (an older fbrapids wrote it): "
                                  "resume it as it was written, feeding the ranks RankSlices")
    return start, held


def _rank_part(batch: Batch | None, rank: int, world: int) -> Batch | None:
    """Rank ``rank``'s rows of a union batch (None when it has none)."""
    if batch is None:
        return None
    part = slice_batch(batch, *rank_bounds(len(batch), rank, world))
    return part if len(part) else None


def _union_held(trainer: DistributedTrainer, held: HeldBack) -> HeldBack:
    """The union's held-back batches (each rank's parts in rank order), the same on every
    rank: what a checkpoint keeps, whatever the world size it is resumed at."""
    union = HeldBack(held.capacity, held.every)
    counted = torch.tensor([held.open] + [s if s is not None else (math.nan, math.nan) for s in held.spans],
                           dtype=torch.float64)
    dist.all_reduce(counted, group=trainer.group)  # every rank's rows and clicks of the spans: the union's
    union.open = counted[0].tolist()
    if not held.rows:  # nothing held on any rank yet (the ranks hold in step)
        return union
    union.spans = [None if math.isnan(r) else (r, c) for r, c in counted[1:].tolist()]
    got: list[Any] = [None] * trainer.world
    dist.all_gather_object(got, [None if b is None else batch_state(b) for b in held.batches], group=trainer.group)
    for k, rows in enumerate(held.rows):
        parts = [batch_from_state(g[k]) for g in got if g[k] is not None]
        union.batches.append(concat_batches(parts) if parts else None)
        union.rows.append(rows)
    return union


def _union_rate(trainer: DistributedTrainer, held: HeldBack) -> float | None:
    """The click rate of the held batches' spans over every rank (each rank counted its own
    rows of them); None where a span was not counted (a checkpoint of an older fbrapids)."""
    known = torch.tensor([float(all(s is not None for s in held.spans))], dtype=torch.float64)
    dist.all_reduce(known, op=dist.ReduceOp.MIN, group=trainer.group)
    if not known.item():
        return None
    total = torch.tensor([sum(s[k] for s in held.spans if s is not None) for k in (0, 1)], dtype=torch.float64)
    dist.all_reduce(total, group=trainer.group)
    return float(total[1] / total[0]) if total[0] > 0 else None


def _calibrate_ranks(trainer: DistributedTrainer, held: HeldBack, result: FitResult) -> bool:
    """``fit``'s calibration over the ranks: the shift fitted on the union's logits of the
    held rows; False when they are too few."""
    net = trainer.model
    if not held.rows:  # no batch held back (a pass of fewer than HOLD_EVERY batches): as fit, none fitted
        log.info("no calibration fitted: no batch was held back")
        return False
    keep = net.calibration.clone()
    net.set_calibration(1.0, 0.0)  # the raw logits, as fit's
    out = predict_distributed(trainer, held.batches)  # as served, as fit's held_logits read them
    net.calibration.copy_(keep)
    p = np.clip(out["pred"], 1e-300, 1.0)
    z = np.log(p) - np.log1p(-np.minimum(p, 1 - 1e-16))
    result.held_rows = len(z)
    ab = fit_shift(z, out["label"], rate=_union_rate(trainer, held))
    if ab is None:
        return False
    net.set_calibration(*ab)
    result.calibration = ab
    return True


class _RanksRun:
    """The ranks' training steps, one global batch each: the read-ahead of the next batch
    (its ids exchanged while this step computes), the union's loss, the ``nan`` policy, the
    dense and sparse updates, and the stream position (the union's rows read)."""

    def __init__(self, trainer: DistributedTrainer, optimizer: torch.optim.Optimizer, result: FitResult, nan: str,
                 overlap: bool, max_steps: int | None) -> None:
        self.trainer, self.optimizer, self.result, self.nan = trainer, optimizer, result, nan
        self.overlap, self.max_steps = overlap and trainer.world > 1, max_steps
        self.loss_fn = torch.nn.BCEWithLogitsLoss()
        self.sum_loss = torch.nn.BCEWithLogitsLoss(reduction="sum")
        self.position = 0  # rows of the global stream read (the union of the ranks' steps)
        self.ahead: list[Batch | None] = []  # the next batch, its ids already on their way
        self.it: Iterator[Batch | None] = iter(())

    def next_batch(self) -> Batch | None:
        return self.ahead.pop() if self.ahead else next(self.it, None)

    def train_held(self, held: HeldBack, step: int, on_step: Callable[[int, Batch | None], None] | None,
                   batches: list[Batch | None] | None = None) -> None:
        """Train on held-back batches now (``batches``, default: all ``held`` holds, which
        it then holds no more), at step ``step``; their rows were read before."""
        for older in held.batches if batches is None else batches:
            self.train(older, step, read_ahead=False, read=False)
            if on_step is not None:
                on_step(step, older)
        if batches is None:
            held.clear()
            self.result.held_rows = 0

    def train(self, local: Batch | None, step: int, read_ahead: bool = True, read: bool = True) -> bool:
        """One update on ``local`` (this rank's part; None: none) at step ``step`` (``read_ahead``:
        and read the next batch, its ids exchanged meanwhile; ``read``: its rows are new to the
        stream position, not a held batch read before), or False when every rank is out of data."""
        trainer, optimizer = self.trainer, self.optimizer
        net, sharded, world = trainer.model, trainer.sharded, trainer.world
        plan = sharded.begin(local)
        if plan is None:
            return False
        if read_ahead and self.overlap and (self.max_steps is None or step < self.max_steps):
            self.ahead.append(next(self.it, None))
            sharded.prepare(self.ahead[0])
        b = trainer.stand_in(local).to(module_device(net))
        optimizer.zero_grad(set_to_none=True)
        logits = trainer.ddp(b)
        label = b.label.to(logits.device)
        if (plan.rows == plan.rows[0]).all():
            loss = self.loss_fn(logits, label)  # DDP's average of equal means: the union's mean
        else:
            loss = self.sum_loss(logits, label) * (world / float(plan.rows.sum()))
        value = float(loss.detach())
        loss.backward()
        if read:
            self.position += int(plan.rows.sum())
        problem = None if math.isfinite(value) else f"loss is {value}"
        if problem is None and self.nan == "error":
            bad = nonfinite_grads(net)  # one fused check per step; names only when it fails
            problem = f"non-finite gradient of {', '.join(bad)}" if bad else None
        if problem is not None:
            if self.nan == "error":
                raise NonFiniteError(f"rank {trainer.rank}, step {step}: {problem}; training stopped "
                                     "before this update")
            log.warning("rank %d, step %d: %s (nan='warn')", trainer.rank, step, problem)
        optimizer.step()
        net.apply_sparse_gradients(background=True)  # beside the exchange that finishes the step
        sharded.finish()
        if local is not None:
            self.result.losses.append(value)
        return True


@torch.no_grad()
def predict_distributed(trainer: DistributedTrainer, batches: Iterable[Batch | None]) -> dict[str, np.ndarray]:
    """Predictions, labels (and groups) of the union of every rank's ``batches``, on every
    rank (gathered with ``all_gather_object``, in rank order), the tables read-only meanwhile,
    as served and as one process predicts (:func:`~fbrapids.trainers.sparse.store.read_only`;
    so do ``fit``'s calibration's held rows, :func:`~fbrapids.trainers.fit.held_logits`)."""
    from fbrapids.trainers.sparse.store import read_only

    net, sharded = trainer.model, trainer.sharded
    dev = module_device(net)
    net.eval()
    ps, ys, gs = [], [], []
    first, it = _peek(iter(batches))
    if trainer.template is None:
        trainer.template = _template(first, trainer.group)
    try:
        with read_only(t.local for t in sharded.tables):
            while True:
                local = next(it, None)
                if sharded.begin(local, train=False) is None:
                    break
                b = trainer.stand_in(local).to(dev)
                p = net.predict(b).double().cpu().numpy()  # the inner model: DDP's forward is for training
                sharded.plan = None
                if local is not None:
                    ps.append(p)
                    ys.append(b.label.cpu().numpy())
                    if b.group is not None:
                        gs.append(b.group.cpu().numpy())
    finally:
        net.train()
    mine = {"pred": np.concatenate(ps) if ps else np.zeros(0, np.float32),
            "label": np.concatenate(ys) if ys else np.zeros(0, np.float32),
            "group": np.concatenate(gs) if gs and len(gs) == len(ps) else None}
    got: list[Any] = [None] * trainer.world
    dist.all_gather_object(got, mine, group=trainer.group)
    out = {k: np.concatenate([g[k] for g in got]) for k in ("pred", "label")}
    if all(g["group"] is not None or len(g["pred"]) == 0 for g in got) and any(g["group"] is not None for g in got):
        out["group"] = np.concatenate([g["group"] for g in got if g["group"] is not None])
    return out


def evaluate_distributed(trainer: DistributedTrainer, batches: Iterable[Batch]) -> dict[str, float]:
    """AUC, GAUC, logloss, NE, calibration and rows over the union of every rank's
    predictions (never an average of per-rank metrics); the same on every rank."""
    out = predict_distributed(trainer, batches)
    return all_metrics(out["label"], out["pred"], out.get("group"))
