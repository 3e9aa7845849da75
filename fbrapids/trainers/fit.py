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

import io
import json
import logging
import os
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np
import torch
from tqdm.auto import tqdm

from fbrapids.trainers.batch import Batch
from fbrapids.errors import UnsafeFileError
from fbrapids.manifest import resolve_inside
from fbrapids.trainers.checkpoint import checkpoint_dir, clean_partial, latest_checkpoint, prune, write_atomic
from fbrapids.trainers.metrics import all_metrics
from fbrapids.trainers.models.base import CTRModel

log = logging.getLogger(__name__)


@dataclass
class FitResult:
    """What ``fit`` did: the global step reached, per-step losses of this call, checkpoints written."""

    steps: int
    losses: list[float] = field(default_factory=list)
    checkpoints: list[Path] = field(default_factory=list)
    resumed_from: Path | None = None

    @property
    def mean_loss(self) -> float:
        return float(np.mean(self.losses)) if self.losses else float("nan")


def _table_dir(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "__", key)


def save_checkpoint(model: CTRModel, optimizer: torch.optim.Optimizer | None, root: str | os.PathLike, step: int,
                    on_file: Callable[[Path], None] | None = None, keep: int | None = None) -> Path:
    """Write a complete checkpoint of ``model`` (dense + every table) under ``root``.

    ``on_file(path)`` is called after each file is in place (e.g. for progress).  With
    ``keep``, older complete checkpoints beyond the newest ``keep`` are removed afterwards.
    Returns the checkpoint directory.
    """
    with checkpoint_dir(root, step) as d:
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict() if optimizer else None,
                 "step": int(step), "torch_rng": torch.get_rng_state()}
        buf = io.BytesIO()
        torch.save(state, buf)
        write_atomic(d / "dense.pt", [buf.getvalue()])
        if on_file:
            on_file(d / "dense.pt")
        stores = model.stores()
        for key, store in stores.items():
            store.save(d / "tables" / _table_dir(key), progress=on_file)
        write_atomic(d / "meta.json", [json.dumps({"step": int(step), "tables": sorted(stores)}).encode()])
    if keep is not None:
        prune(root, keep)
    return latest_checkpoint(root)


def load_checkpoint(model: CTRModel, optimizer: torch.optim.Optimizer | None, path: str | os.PathLike) -> int:
    """Restore ``model`` (and ``optimizer``) from a checkpoint directory, or from the newest
    one under a root holding a ``latest`` pointer; returns the step.

    Loading runs no code from the files: ``dense.pt`` is read with
    ``torch.load(weights_only=True)`` (tensors and plain containers only; a pickle that
    would call anything is an :class:`~fbrapids.errors.UnsafeFileError`), and every file
    read must resolve inside the checkpoint directory.
    """
    path = Path(path)
    if (path / "latest").exists():
        path = latest_checkpoint(path)
    meta = json.loads(resolve_inside(path, "meta.json").read_text())
    state = load_tensors(resolve_inside(path, "dense.pt"))
    model.load_state_dict(state["model"])
    if optimizer is not None and state.get("optimizer") is not None:
        optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["torch_rng"])
    stores = model.stores()
    if sorted(stores) != meta["tables"]:
        raise ValueError(f"checkpoint {path} holds tables {meta['tables']}, the model has {sorted(stores)}")
    for key, store in stores.items():
        store.load(resolve_inside(path, f"tables/{_table_dir(key)}", what="table directory"))
    return int(state["step"])


def load_tensors(path: str | os.PathLike) -> object:
    """``torch.load(path, map_location="cpu", weights_only=True)``: tensors, numbers, strings
    and containers only; a file that would run code or build other objects is refused
    with an :class:`~fbrapids.errors.UnsafeFileError` naming it.

    Example:
        >>> import tempfile, torch
        >>> p = tempfile.mkdtemp() + "/w.pt"; torch.save({"w": torch.ones(2)}, p)
        >>> load_tensors(p)["w"].tolist()
        [1.0, 1.0]
    """
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        why = next((ln for ln in lines if "Unsupported" in ln or "WeightsUnpickler" in ln), lines[0] if lines else "")
        raise UnsafeFileError(f"{path}: refused by torch.load(weights_only=True), which loads tensors only "
                              f"({why[:300]})") from None


def _lookahead(it: Iterable[Batch]) -> Iterator[tuple[Batch, Batch | None]]:
    it = iter(it)
    cur = next(it, None)
    while cur is not None:
        nxt = next(it, None)
        yield cur, nxt
        cur = nxt


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


def fit(model: CTRModel, batches: Iterable[Batch], *, epochs: int = 1, max_steps: int | None = None,
        optimizer: torch.optim.Optimizer | None = None, checkpoint_dir: str | os.PathLike | None = None,
        checkpoint_every: int | None = None, resume: bool = True, progress: bool = True,
        prefetch_rows: bool = True, keep_checkpoints: int | None = 3) -> FitResult:
    """Train ``model`` on ``batches`` with binary cross-entropy on logits.

    Args:
        model: a :class:`~fbrapids.trainers.models.base.CTRModel` (DLRM, WideAndDeep, DeepFM, DIN).
        batches: e.g. ``df.fbx.stream(label=..., dense=[...], sparse=[...], batch_size=...)``.
        epochs: passes over ``batches``.
        max_steps: stop at this global step.
        optimizer: dense optimizer (default :func:`default_optimizer`: fused ``Adam(lr=1e-3)``).
        checkpoint_dir: where checkpoints go (and are resumed from).
        checkpoint_every: checkpoint every this many global steps (and at the end).
        resume: restore the latest checkpoint in ``checkpoint_dir`` first and skip the
            batches it had trained on.
        progress: show a tqdm bar.
        prefetch_rows: pin the next batch's rows in the caches while this one trains.
        keep_checkpoints: keep this many newest checkpoints (None: all).
    """
    params = [p for p in model.parameters() if p.requires_grad]
    if optimizer is None:
        optimizer = default_optimizer(params)
    result = FitResult(steps=0)
    start = 0
    if checkpoint_dir is not None and resume:
        clean_partial(checkpoint_dir)
        ckpt = latest_checkpoint(checkpoint_dir)
        if ckpt is not None:
            start = load_checkpoint(model, optimizer, ckpt)
            result.resumed_from = ckpt
            log.info("resumed from %s at step %d", ckpt, start)
    step = 0
    loss_fn = torch.nn.BCEWithLogitsLoss()
    model.train()
    bar = tqdm(total=max_steps, initial=start, disable=not progress, desc="fit", unit="batch")
    done = False
    for epoch in range(epochs):
        if hasattr(batches, "set_epoch"):
            batches.set_epoch(epoch)
        for batch, nxt in _lookahead(batches):
            if max_steps is not None and step >= max_steps:
                done = True
                break
            if step < start:  # trained before the checkpoint
                step += 1
                continue
            optimizer.zero_grad(set_to_none=True)
            logits = model(batch)
            if prefetch_rows and nxt is not None:
                model.prefetch(nxt)
            loss = loss_fn(logits, batch.label.to(logits.device))
            loss.backward()
            optimizer.step()
            model.apply_sparse_gradients()
            step += 1
            result.losses.append(float(loss.detach()))
            bar.update(1)
            bar.set_postfix(loss=f"{result.losses[-1]:.4f}", refresh=False)
            if checkpoint_dir is not None and checkpoint_every and step % checkpoint_every == 0:
                result.checkpoints.append(
                    save_checkpoint(model, optimizer, checkpoint_dir, step, keep=keep_checkpoints))
        if done:
            break
    bar.close()
    result.steps = step
    if checkpoint_dir is not None and step > start and (not result.checkpoints or
                                                         result.checkpoints[-1].name != f"step-{step:010d}"):
        result.checkpoints.append(save_checkpoint(model, optimizer, checkpoint_dir, step, keep=keep_checkpoints))
    return result


@torch.no_grad()
def predict(model: CTRModel, batches: Iterable[Batch], progress: bool = True) -> dict[str, np.ndarray]:
    """Predictions, labels and groups (when the batches carry them) as numpy arrays."""
    model.eval()
    ps, ys, gs = [], [], []
    for batch in tqdm(batches, disable=not progress, desc="predict", unit="batch"):
        ps.append(model.predict(batch).float().cpu().numpy())
        ys.append(batch.label.cpu().numpy())
        if batch.group is not None:
            gs.append(batch.group.cpu().numpy())
    model.train()
    out = {"pred": np.concatenate(ps) if ps else np.zeros(0), "label": np.concatenate(ys) if ys else np.zeros(0)}
    if gs and len(gs) == len(ps):
        out["group"] = np.concatenate(gs)
    return out


def evaluate(model: CTRModel, batches: Iterable[Batch], progress: bool = True) -> dict[str, float]:
    """AUC, GAUC (needs ``group=`` in the stream; NaN otherwise), logloss, normalized entropy,
    calibration and the number of rows, over ``batches``."""
    out = predict(model, batches, progress)
    return all_metrics(out["label"], out["pred"], out.get("group"))
