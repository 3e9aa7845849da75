"""Several models trained side by side from one stream of batches.

A feature trial trains 2·K models (baseline and candidate, K seeds) on the same data.
Extracting the features once per model would repeat the pipeline's most expensive part
2·K times; here the stream is read **once**: each batch, as it arrives, takes one
optimizer step of every model, in turn, through that model's *view* of the batch
(:func:`fbrapids.trainers.arms.baseline_view` hides the candidates from a baseline arm).
Every model thus sees the same batches in the same order, and the extraction work is that
of one run.

Each model's step is :func:`fbrapids.trainers.fit.fit`'s: forward, binary cross-entropy on
the logits, backward, the dense optimizer (:func:`~fbrapids.trainers.fit.default_optimizer`
unless given), then the sparse optimizers of its tables.  A NaN / inf loss is a
:class:`~fbrapids.errors.NonFiniteError` naming the model and the step.  No checkpoints:
a trial is re-run, not resumed.

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
import math
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import torch

if TYPE_CHECKING:
    from fbrapids.trainers.models.base import CTRModel

from fbrapids.ui.autobar import tqdm
from fbrapids.errors import ArgumentError, NonFiniteError
from fbrapids.trainers.batch import Batch

log = logging.getLogger(__name__)

View = Callable[[Batch], Batch]


def _same(batch: Batch) -> Batch:
    return batch


def _refresh_total(bar: Any, batches: Iterable[Batch], passes: int = 1) -> None:
    """The bar's total on the stream's estimate of its batches (exact once known)."""
    from fbrapids.trainers.fit import estimated_batches

    per_pass = estimated_batches(batches)
    total = None if per_pass is None else per_pass * passes
    if total != bar.total:
        bar.total = total
        bar.refresh()


def fit_side_by_side(models: Sequence[CTRModel], batches: Iterable[Batch], *,
                     views: Sequence[View | None] | None = None, epochs: int = 1,
                     optimizers: Sequence[torch.optim.Optimizer] | None = None, progress: bool = True) -> int:
    """Train every model of ``models`` on one pass over ``batches`` per epoch (each batch read
    once, one step of each model on ``views[i](batch)``, the batch itself where the view is
    None); returns the steps each model took."""
    from fbrapids.trainers.device import module_device, place_model
    from fbrapids.trainers.fit import default_optimizer

    views = list(views) if views is not None else [None] * len(models)
    if len(views) != len(models):
        raise ArgumentError(f"fit_side_by_side: {len(models)} models but {len(views)} views")
    for m in models:
        place_model(m, None)
        m.train()
    optimizers = list(optimizers) if optimizers is not None else \
        [default_optimizer([p for p in m.parameters() if p.requires_grad]) for m in models]
    loss_fn = torch.nn.BCEWithLogitsLoss()
    devices = [module_device(m) for m in models]
    step = 0
    with tqdm(total=None, disable=not progress, desc="fit", unit="batch", postfix=f"{len(models)} models") as bar:
        for epoch in range(epochs):
            if hasattr(batches, "set_epoch"):
                batches.set_epoch(epoch)
            for batch in batches:
                _refresh_total(bar, batches, epochs)
                step += 1
                for k, (model, view, opt, dev) in enumerate(zip(models, views, optimizers, devices)):
                    b = (view or _same)(batch).to(dev)
                    opt.zero_grad(set_to_none=True)
                    loss = loss_fn(model(b), b.label)
                    value = float(loss.detach())
                    if not math.isfinite(value):
                        raise NonFiniteError(f"step {step}: model {k} ({type(model).__name__}) has loss {value}; "
                                             "the side-by-side training stopped before this update")
                    loss.backward()
                    opt.step()
                    model.apply_sparse_gradients()
                bar.update(1)
    return step


@torch.no_grad()
def predict_side_by_side(models: Sequence[CTRModel], batches: Iterable[Batch], *,
                         views: Sequence[View | None] | None = None,
                         progress: bool = True) -> list[dict[str, np.ndarray]]:
    """Each model's click probabilities over one pass of ``batches`` (through its view), with
    the labels and groups, as :func:`fbrapids.trainers.fit.predict` returns them."""
    from fbrapids.trainers.device import module_device

    views = list(views) if views is not None else [None] * len(models)
    preds: list[list[np.ndarray]] = [[] for _ in models]
    labels, groups = [], []
    for m in models:
        m.eval()
    with tqdm(total=None, disable=not progress, desc="predict", unit="batch", postfix=f"{len(models)} models") as bar:
        for batch in batches:
            _refresh_total(bar, batches)
            for k, (model, view) in enumerate(zip(models, views)):
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


class CountedBatches:
    """A stream of batches that counts the rows it hands out (over every epoch) and
    fingerprints their order (``digest``: sha1 over each batch's labels and groups)."""

    def __init__(self, batches: Any) -> None:
        import hashlib

        self.batches, self.rows, self.digest = batches, 0, hashlib.sha1()

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.batches, "set_epoch"):
            self.batches.set_epoch(epoch)

    def expected_batches(self) -> int | None:
        from fbrapids.trainers.fit import expected_batches

        return expected_batches(self.batches)

    def estimated_batches(self) -> int | None:
        from fbrapids.trainers.fit import estimated_batches

        return estimated_batches(self.batches)

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
