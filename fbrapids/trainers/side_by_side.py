"""Several models trained side by side from one stream of batches.

A feature trial trains 2·K models (baseline and candidate, K seeds) on the same data.
Extracting the features once per model would repeat the pipeline's most expensive part
2·K times; here the stream is read **once**: each batch, as it arrives, takes one
optimizer step of every model, in turn, through that model's *view* of the batch
(:func:`fbrapids.trainers.arms.baseline_view` hides the candidates from a baseline arm).
Every model thus sees the same batches in the same order, and the extraction work is that
of one run.

The training is :func:`fbrapids.trainers.fit.fit`'s one loop with an arms strategy
(:func:`side_by_side` picks it): models of one architecture with a batched form train as
:class:`~fbrapids.trainers.arms_batched.BatchedArms` (tables shared by the arms are one
store whose row holds every arm's vector, the dense parts of all arms run batched: about the
cost of one model); any others as :class:`~fbrapids.trainers.strategy.Arms`, each model's
step ``fit``'s in turn (forward, binary cross-entropy on the logits, backward, the dense
optimizer, then the sparse optimizers of its tables).  A NaN / inf loss is a
:class:`~fbrapids.errors.NonFiniteError` naming the model and the step.  No checkpoints.

Example:
    >>> import numpy as np, pandas as pd, torch
    >>> import fbrapids
    >>> from fbrapids.trainers.models import DLRM
    >>> from fbrapids.trainers.sparse import StoreConfig
    >>> rng = np.random.default_rng(0)
    >>> df = pd.DataFrame({"y": rng.integers(0, 2, 64), "d0": rng.random(64), "ad": rng.integers(0, 9, 64)})
    >>> batches = df.fbx.stream(label="y", dense=["d0"], sparse=["ad"], batch_size=16)
    >>> models = [DLRM(1, ["ad"], embedding_dim=4, bottom_mlp=[8], top_mlp=[8],
    ...                store=StoreConfig(cache_rows=64, seed=s)) for s in (0, 1)]
    >>> steps = fit_side_by_side(models, batches, progress=False)
    >>> steps, [len(p["pred"]) for p in predict_side_by_side(models, batches, progress=False)]
    (4, [64, 64])
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence

import numpy as np
import torch

if TYPE_CHECKING:
    from fbrapids.trainers.models.base import CTRModel
    from fbrapids.trainers.strategy import Strategy

from fbrapids.trainers.batch import Batch
from fbrapids.trainers.kept_batches import BatchesThrough
from fbrapids.ui.autobar import tqdm

log = logging.getLogger(__name__)

View = Callable[[Batch], Batch]


def _same(batch: Batch) -> Batch:
    return batch


def _refresh_total(bar: tqdm, batches: Iterable[Batch], passes: int = 1) -> None:
    """The bar's total on the stream's estimate of its batches (exact once known)."""
    from fbrapids.trainers.fit import estimated_batches

    per_pass = estimated_batches(batches)
    total = None if per_pass is None else per_pass * passes
    if total != bar.total:
        bar.total = total
        bar.refresh()


def side_by_side(models: Sequence[CTRModel], views: Sequence[View | None] | None = None) -> Strategy:
    """The strategy that trains ``models`` side by side: :class:`~fbrapids.trainers.arms_batched.BatchedArms`
    where they have a batched form (:func:`~fbrapids.trainers.arms_batched.batched_head`),
    else :class:`~fbrapids.trainers.strategy.Arms` (one after another).

    Example:
        >>> from fbrapids.trainers.models import DLRM, LogisticRegression
        >>> from fbrapids.trainers.sparse import StoreConfig
        >>> cfg = StoreConfig(cache_rows=8)
        >>> type(side_by_side([DLRM(1, ["a"], embedding_dim=2, store=cfg) for _ in range(2)])).__name__
        'BatchedArms'
        >>> type(side_by_side([LogisticRegression(1, ["a"], store=cfg) for _ in range(2)])).__name__
        'Arms'
    """
    from fbrapids.trainers.arms_batched import BatchedArms, batched_head
    from fbrapids.trainers.strategy import Arms

    return BatchedArms(models, views) if batched_head(models) is not None else Arms(models, views)


def fit_side_by_side(models: Sequence[CTRModel], batches: Iterable[Batch], *,
                     views: Sequence[View | None] | None = None, epochs: int = 1,
                     optimizers: Sequence[torch.optim.Optimizer] | None = None, progress: bool = True,
                     strategy: Strategy | None = None, sparse_lr_decay: float = 1.0) -> int:
    """Train every model of ``models`` on one pass over ``batches`` per epoch (each batch read
    once, one step of each model on ``views[i](batch)``, the batch itself where the view is
    None); returns the steps each model took: ``fit`` with ``strategy`` (default: the
    :class:`~fbrapids.trainers.strategy.Arms` strategy, or it with ``optimizers``; no
    calibration).  A :class:`~fbrapids.trainers.arms_batched.BatchedArms` strategy trains the
    arms' shared stores, so its models are predicted through it (:func:`predict_side_by_side`
    with the same ``strategy``); ``sparse_lr_decay``: :attr:`FitConfig.sparse_lr_decay`."""
    from fbrapids.trainers.fit import fit
    from fbrapids.trainers.fit_config import FitConfig
    from fbrapids.trainers.strategy import Arms

    batched = strategy is not None and not isinstance(strategy, Arms)
    cfg = FitConfig(epochs=epochs, progress=progress, calibrate=False, prefetch_rows=batched,
                    sparse_lr_decay=sparse_lr_decay)
    return fit(strategy if strategy is not None else Arms(models, views, optimizers), batches, cfg).steps


@torch.no_grad()
def predict_side_by_side(models: Sequence[CTRModel], batches: Iterable[Batch], *,
                         views: Sequence[View | None] | None = None,
                         progress: bool = True, strategy: Strategy | None = None) -> list[dict[str, np.ndarray]]:
    """Each model's click probabilities over one pass of ``batches`` (through its view), with
    the labels and groups, as :func:`fbrapids.trainers.fit.predict` returns them; through
    ``strategy`` when it holds the models' trained tables (a
    :class:`~fbrapids.trainers.arms_batched.BatchedArms`: its views are the models').  Every
    table, the shared ones included, is read-only meanwhile, as served
    (:func:`~fbrapids.trainers.sparse.store.read_only`): an id training never admitted reads
    the default row, counted, and is not admitted, so each model's score is the one
    :func:`~fbrapids.trainers.fit.predict` gives it alone."""
    from fbrapids.trainers.device import module_device
    from fbrapids.trainers.sparse.store import read_only

    views = list(views) if views is not None else [None] * len(models)
    batched = getattr(strategy, "predict", None)
    preds: list[list[np.ndarray]] = [[] for _ in models]
    labels, groups = [], []
    for m in models:
        m.eval()
    stores = [s for m in models if hasattr(m, "stores") for s in m.stores().values()]
    stores += [g.store for g in getattr(getattr(strategy, "tables", None), "groups", ())]
    with tqdm(total=None, disable=not progress, desc="predict", unit="batch", postfix=f"{len(models)} models") as bar, \
            read_only(stores):
        for batch in batches:
            _refresh_total(bar, batches)
            if batched is not None:
                for k, p in enumerate(batched(batch).cpu().numpy()):
                    preds[k].append(p)
            for k, (model, view) in enumerate(zip(models, views) if batched is None else ()):
                b = (view or _same)(batch).to(module_device(model))
                preds[k].append(model.predict(b).double().cpu().numpy())
            labels.append(batch.label.cpu().numpy())
            if batch.group is not None:
                groups.append(batch.group.cpu().numpy())
            bar.update(1)
    for m in models:
        m.train()
    label = np.concatenate(labels) if labels else np.zeros(0)
    out = []
    for p in preds:
        d = {"pred": np.concatenate(p) if p else np.zeros(0), "label": label}
        if groups and len(groups) == len(p):
            d["group"] = np.concatenate(groups)
        out.append(d)
    return out


class CountedBatches(BatchesThrough):
    """A stream of batches that counts the rows it hands out (over every epoch) and
    fingerprints their order (``digest``: sha1 over each batch's labels and groups)."""

    def __init__(self, batches: Iterable[Batch]) -> None:
        import hashlib

        super().__init__(batches)
        self.rows, self.digest = 0, hashlib.sha1()

    def __iter__(self) -> Iterator[Batch]:
        for b in self.batches:
            self.rows += len(b)
            self.digest.update(batch_fingerprint(b))
            yield b


def batch_fingerprint(batch: Batch) -> bytes:
    """A batch's labels and groups as bytes, in row order (what ``ArmsRun.order`` hashes).

    Example:
        >>> import torch
        >>> from fbrapids.trainers.batch import Batch
        >>> b = Batch(torch.zeros(2, 0), torch.tensor([1.0, 0.0]), {}, torch.tensor([7, 8]))
        >>> len(batch_fingerprint(b))  # 2 float32 labels and 2 int64 groups
        24
    """
    out = batch.label.detach().cpu().numpy().tobytes()
    if batch.group is not None:
        out += batch.group.detach().cpu().numpy().tobytes()
    return out
