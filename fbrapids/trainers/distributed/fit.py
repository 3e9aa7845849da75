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

from fbrapids.errors import ArgumentError, CheckpointError, DistributedError, NonFiniteError
from fbrapids.trainers.checkpoint.directory import checkpoints
from fbrapids.trainers.batch import Batch
from fbrapids.trainers.device import module_device, place_model
from fbrapids.trainers.distributed.buckets import BucketTable
from fbrapids.trainers.distributed.checkpoint import restore_sharded, save_sharded
from fbrapids.trainers.distributed.consistency import check_same_config
from fbrapids.trainers.distributed.data import empty_like
from fbrapids.trainers.distributed.exchange import Exchange
from fbrapids.trainers.distributed.sharded_store import ShardedEmbeddings, shard_model
from fbrapids.trainers.calibration import CALIBRATION_ROWS, ProgressiveBuffer, fit_calibration
from fbrapids.trainers.fit import FitResult, default_optimizer
from fbrapids.trainers.metrics import all_metrics
from fbrapids.trainers.run_identity import run_identity
from fbrapids.trainers.models.base import CTRModel

log = logging.getLogger(__name__)

__all__ = ["fit_distributed", "predict_distributed", "evaluate_distributed", "DistributedTrainer"]


def _template(first: Batch | None, group: dist.ProcessGroup | None) -> Batch | None:
    """An empty batch with the data's features, from any rank that has data."""
    world = dist.get_world_size(group)
    mine = None if first is None else empty_like(first).to("cpu")
    got: list[Any] = [None] * world
    dist.all_gather_object(got, mine, group=group)
    return next((b for b in got if b is not None), None)


def _peek(it: Iterator[Batch]) -> tuple[Batch | None, Iterator[Batch]]:
    first = next(it, None)
    if first is None:
        return None, iter(())

    def chain() -> Iterator[Batch]:
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


def fit_distributed(model: CTRModel | DistributedTrainer, batches: Iterable[Batch], *, epochs: int = 1,
                    max_steps: int | None = None, optimizer: torch.optim.Optimizer | None = None,
                    checkpoint_dir: str | os.PathLike | None = None, checkpoint_every: int | None = None,
                    resume: bool = True, keep_checkpoints: int | None = 3, nan: str = "error",
                    group: dist.ProcessGroup | None = None, buckets: BucketTable | None = None,
                    device: str | torch.device | None = None,
                    on_file: Callable[[Path], None] | None = None, run: Mapping[str, Any] | None = None,
                    on_step: Callable[[int, Batch | None], None] | None = None, overlap: bool = True,
                    calibrate: bool = True, calibration_rows: int = CALIBRATION_ROWS
                    ) -> tuple[FitResult, DistributedTrainer]:
    """Train this rank's share of the union batches; returns the result and the trainer
    (pass the trainer to :func:`evaluate_distributed` / to a later call).

    Args are :func:`fbrapids.trainers.fit.fit`'s, plus ``group`` (default: the world),
    ``buckets`` (default: :meth:`BucketTable.default`, or the checkpoint's on resume).
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
    calibration, fitted on the same rows: the ranks' logits of the last steps are gathered in
    rank order (the global batches' row order) at the end, so every rank fits what one
    process fits; the pairs are kept in every shard's ``dense.pt``, so a resume at any world
    size fits it too.
    """
    if nan not in ("error", "warn"):
        raise ArgumentError(f"nan must be 'error' or 'warn' in distributed training, got {nan!r}")
    trainer = model if isinstance(model, DistributedTrainer) else None
    if trainer is None:
        check_same_config(model, group, epochs=epochs, max_steps=max_steps, checkpoint_every=checkpoint_every)
        trainer = DistributedTrainer(model, group, buckets, device)
    net, sharded, world = trainer.model, trainer.sharded, trainer.world
    params = [p for p in net.parameters() if p.requires_grad]
    if optimizer is None:
        optimizer = default_optimizer(params)
    result = FitResult(steps=0)
    start = 0
    position = 0  # rows of the global stream trained (the union of the ranks' steps)
    global_stream = bool(getattr(batches, "global_stream", False))
    identity = run_identity(net, batches, run)
    # as fit: a second pass predicts rows already trained on, so several epochs fit none
    progressive = ProgressiveBuffer(calibration_rows) if calibrate and epochs == 1 else None
    recent = None if progressive is None else _RecentPairs(progressive)
    lock = contextlib.nullcontext()
    if checkpoint_dir is not None:
        from fbrapids.runs.workdir import lock_work_dir
        if trainer.rank == 0:  # one lock for the run: the other ranks are part of it
            lock = lock_work_dir(checkpoint_dir)
    with lock:
        if checkpoint_dir is not None:
            dist.barrier(group=trainer.group)  # rank 0 holds the lock and has cleaned debris
            if resume:
                start, path, meta = restore_sharded(trainer, optimizer, checkpoint_dir, identity, global_stream,
                                                    progressive)
                if progressive is not None and start > 0 and not progressive.restored:
                    log.info("no post-hoc calibration: the checkpoint resumed from holds no progressive predictions")
                    progressive = recent = None
                result.resumed_from = path
                position = int(meta.get("position_rows", 0))
                if path is not None and hasattr(batches, "skip_rows"):
                    batches.skip_rows = position  # the leader skips them; no step is spent on them
                    if "position_rows" not in meta:
                        raise CheckpointError(f"{path} records no stream position (an older fbrapids wrote it): "
                                              "resume it as it was written, feeding the ranks RankSlices")
            elif checkpoints(checkpoint_dir):
                raise CheckpointError(f"{checkpoint_dir} already holds checkpoints up to "
                                      f"{checkpoints(checkpoint_dir)[0].name} from an earlier run; resume from them "
                                      "(resume=True) or use an empty checkpoint dir")
        dev = module_device(net)
        loss_fn = torch.nn.BCEWithLogitsLoss()
        sum_loss = torch.nn.BCEWithLogitsLoss(reduction="sum")
        net.train()
        step = start if hasattr(batches, "skip_rows") else 0

        def extra() -> dict[str, Any]:
            return {"position_rows": position, "global_stream": global_stream, "run": identity}

        for epoch in range(epochs):
            if hasattr(batches, "set_epoch"):
                batches.set_epoch(epoch)
            first, it = _peek(iter(batches))
            if trainer.template is None:
                trainer.template = _template(first, trainer.group)
            ahead: list[Batch | None] = []  # the next batch, its ids already on their way
            while max_steps is None or step < max_steps:
                local = ahead.pop() if ahead else next(it, None)
                if step < start:  # trained before the checkpoint
                    if sharded.begin(local, count_only=True) is None:
                        break
                    step += 1
                    continue
                plan = sharded.begin(local)
                if plan is None:
                    break
                if overlap and world > 1 and (max_steps is None or step + 1 < max_steps):
                    ahead.append(next(it, None))
                    sharded.prepare(ahead[0])
                b = (local if local is not None else trainer.template).to(dev)
                optimizer.zero_grad(set_to_none=True)
                logits = trainer.ddp(b)
                label = b.label.to(logits.device)
                if (plan.rows == plan.rows[0]).all():
                    loss = loss_fn(logits, label)  # DDP's average of equal means: the union's mean
                else:
                    loss = sum_loss(logits, label) * (world / float(plan.rows.sum()))
                value = float(loss.detach())
                loss.backward()
                step += 1
                position += int(plan.rows.sum())
                problem = None if math.isfinite(value) else f"loss is {value}"
                if problem is None and nan == "error":
                    grads = [(n, p.grad) for n, p in net.named_parameters() if p.grad is not None]
                    # one device-to-host sync per step (not one per parameter); names only when it fails
                    if grads and not bool(torch.stack([torch.isfinite(g).all() for _, g in grads]).all()):
                        bad = [n for n, g in grads if not bool(torch.isfinite(g).all())]
                        problem = f"non-finite gradient of {', '.join(bad)}"
                if problem is not None:
                    if nan == "error":
                        raise NonFiniteError(f"rank {trainer.rank}, step {step}: {problem}; training stopped "
                                             "before this update")
                    log.warning("rank %d, step %d: %s (nan='warn')", trainer.rank, step, problem)
                optimizer.step()
                net.apply_sparse_gradients()
                sharded.finish()
                if recent is not None:  # this step's logits before its own update: out of sample
                    recent.add(logits, label, 0 if local is None else int(plan.rows[trainer.rank]),
                               int(plan.rows.sum()))
                if local is not None:
                    result.losses.append(value)
                if on_step is not None:
                    on_step(step, local)
                if checkpoint_dir is not None and checkpoint_every and step % checkpoint_every == 0:
                    result.checkpoints.append(save_sharded(trainer, optimizer, checkpoint_dir, step,
                                                           keep=keep_checkpoints, on_file=on_file, extra=extra(),
                                                           progressive=None if recent is None else recent.gathered(trainer)))
            if max_steps is not None and step >= max_steps:
                break
        result.steps = step
        if recent is not None:
            progressive = recent.gathered(trainer)
        if progressive is not None and step > start:
            # the same pairs on every rank: the same fit; as fit's, on at most the pass's newest
            # PASS_FRACTION (position: the union's rows trained in this pass, a resumed run's included)
            ab = fit_calibration(progressive, pass_rows=position)
            if ab is not None:
                net.set_calibration(*ab)
                result.calibration = ab
        if checkpoint_dir is not None and step > start and (
                not result.checkpoints or result.checkpoints[-1].name != Path(f"step-{step:010d}").name):
            result.checkpoints.append(save_sharded(trainer, optimizer, checkpoint_dir, step, keep=keep_checkpoints,
                                                  on_file=on_file, extra=extra(), progressive=progressive))
    return result, trainer


class _RecentPairs:
    """This rank's (logit, label) pairs of its newest steps, enough of them for the union's
    last ``capacity`` rows; :meth:`gathered` puts the ranks' pairs in the global batches'
    order (rank r holds rows ``[r*B/W, (r+1)*B/W)`` of each) after those already kept: one
    object collective when it is called (at a checkpoint, at the end), none per step."""

    def __init__(self, kept: ProgressiveBuffer) -> None:
        self.kept = kept  # the pairs up to the last gather (a resumed run: the checkpoint's)
        self.steps: list[tuple[np.ndarray, np.ndarray, int]] = []  # (z, y, union rows) per step

    def add(self, logits: torch.Tensor, label: torch.Tensor, mine: int, union: int) -> None:
        z = logits.detach().float().reshape(-1)[:mine].cpu().numpy()
        self.steps.append((z, label.detach().float().reshape(-1)[:mine].cpu().numpy(), union))
        while len(self.steps) > 1 and sum(u for *_, u in self.steps[1:]) >= self.kept.capacity:
            self.steps.pop(0)

    def gathered(self, trainer: DistributedTrainer) -> ProgressiveBuffer:
        got: list[Any] = [None] * trainer.world
        dist.all_gather_object(got, [(z, y) for z, y, _ in self.steps], group=trainer.group)
        for k in range(len(self.steps)):
            self.kept.add(torch.from_numpy(np.concatenate([g[k][0] for g in got])),
                          torch.from_numpy(np.concatenate([g[k][1] for g in got])))
        self.steps = []
        return self.kept


@torch.no_grad()
def predict_distributed(trainer: DistributedTrainer, batches: Iterable[Batch]) -> dict[str, np.ndarray]:
    """Predictions, labels (and groups) of the union of every rank's ``batches``, on every
    rank (gathered with ``all_gather_object``, in rank order)."""
    net, sharded = trainer.model, trainer.sharded
    dev = module_device(net)
    net.eval()
    ps, ys, gs = [], [], []
    first, it = _peek(iter(batches))
    if trainer.template is None:
        trainer.template = _template(first, trainer.group)
    try:
        while True:
            local = next(it, None)
            if sharded.begin(local, train=False) is None:
                break
            b = (local if local is not None else trainer.template).to(dev)
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
