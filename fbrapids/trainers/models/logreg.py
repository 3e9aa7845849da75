"""Logistic regression over hashed one-hot ids and dense features: the industry's CTR baseline.

``logit = b + w . x + sum over every sparse id i of the row of w_i``: one weight per id of
each feature (the pipeline's sparse features are already hashed ids, so this is a hashed
one-hot encoding), held in a dim-1 tiered table per feature, the same store as the deep
models' embeddings (cache, host RAM, SSD).  Per-id weights start at 0 and learn by
row-wise Adagrad (:func:`~fbrapids.trainers.models.wide_deep.first_order_config`: from an
accumulator of at least 1e-4, so a rare id's first steps are proportional to its
gradient), with L2 and L1 (sub)gradients ``l2 * w + l1 * sign(w)`` added to each row a
batch touches (lazy regularisation: rows not in the batch are not decayed).  The dense
weights and bias start at 0 too: nothing is random, so training is deterministic and any
seed gives the same model.  They are stored divided by :data:`DENSE_SCALE`: the dense
optimizer's step (``fit``'s Adam, ``lr=1e-3``) then moves a dense weight by up to
``DENSE_SCALE * 1e-3`` a step, the order of the tables' Adagrad steps, so one epoch is
enough to fit them.

A bag (a list feature: the query's tokens, the query x title token pairs) is summed by
default, as a hashed bag of words; ``pooling="mean"`` averages its weights instead, as the
deep models pool their bags (the pipeline's choice: summed, the up to 64 rare query x title
pairs of a row outweighed its single-id fields and the regression fell below scikit-learn's,
docs/models.md).

Example:
    >>> import torch
    >>> from fbrapids.trainers.batch import Batch
    >>> from fbrapids.trainers.sparse import StoreConfig
    >>> m = LogisticRegression(2, ["ad"], store=StoreConfig(cache_rows=32))
    >>> b = Batch(torch.ones(2, 2), torch.tensor([0.0, 1.0]), {"ad": (torch.tensor([3, 4]), torch.arange(2))})
    >>> m(b).tolist()  # everything starts at 0
    [0.0, 0.0]
    >>> m.stores()["weights/ad"].config.dim
    1
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import nn

from fbrapids.trainers.batch import Batch
from fbrapids.trainers.models.base import CTRModel, ModelRecipe
from fbrapids.trainers.models.registry import register_model
from fbrapids.trainers.models.trial_parts import zero_columns
from fbrapids.trainers.models.wide_deep import first_order_config
from fbrapids.trainers.modules import TieredEmbeddingBagCollection
from fbrapids.trainers.sparse import StoreConfig

#: the dense weights are stored as ``weight / DENSE_SCALE`` (see the module docstring)
DENSE_SCALE = 30.0


class _Regularised(torch.autograd.Function):
    """Identity forward; backward adds ``l2 * w + l1 * sign(w)`` to the rows' gradient."""

    @staticmethod
    def forward(ctx, rows: torch.Tensor, l1: float, l2: float) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(rows)
        ctx.l1, ctx.l2 = l1, l2
        return rows.view_as(rows)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        (rows,) = ctx.saved_tensors
        return grad + ctx.l2 * rows + ctx.l1 * torch.sign(rows), None, None


@register_model(short="logreg")
class LogisticRegression(CTRModel):
    """Logistic regression over the sparse ids (one weight each) and the dense features.

    Args:
        dense_dim: number of dense features.
        sparse_features: the sparse features (a dim-1 table each).
        store: tiers, lr and optimizer of the tables (dim set to 1, weights from 0:
            :func:`~fbrapids.trainers.models.wide_deep.first_order_config`).
        l1, l2: regularisation of the per-id weights (see the module docstring).
        embedding_dim: accepted for the pipeline's common arguments, unused.
        pooling: ``"sum"`` or ``"mean"`` of a bag's weights (see the module docstring).
    """

    #: no scorer serves it yet (the screen model); it trains in one process
    exportable = False
    trains_distributed = False

    @classmethod
    def pipeline_arguments(cls, common: dict[str, Any], store: StoreConfig, recipe: ModelRecipe | None = None,
                           sequences: dict[str, str] | None = None) -> dict[str, Any]:
        """The pipeline's inputs and store, its tables at the recipe's first-order rate (every
        table of it is first-order); no MLP, so no dropout nor architecture."""
        out = dict(common)
        if recipe is not None:
            out["store"] = recipe.store(store).with_(lr=recipe.first_order)
        return out

    def __init__(self, dense_dim: int, sparse_features: Sequence[str], store: StoreConfig | None = None,
                 l1: float = 0.0, l2: float = 1e-5, embedding_dim: int | None = None, pooling: str = "sum") -> None:
        super().__init__()
        self.sparse_features = list(sparse_features)
        self.l1, self.l2 = float(l1), float(l2)
        self.weights = TieredEmbeddingBagCollection(self.sparse_features, first_order_config(store or StoreConfig()),
                                                    mode=pooling, prefix="lr_")
        self.dense_linear = nn.Linear(dense_dim, 1)
        with torch.no_grad():
            self.dense_linear.weight.zero_()
            self.dense_linear.bias.zero_()

    def forward(self, batch: Batch) -> torch.Tensor:
        dev = self.dense_linear.weight.device
        logit = self.dense_linear(batch.dense.to(dev)).squeeze(1) * DENSE_SCALE
        looked = self.weights.lookup(batch.sparse)
        regularise = self.training and torch.is_grad_enabled() and (self.l1 or self.l2)
        done: dict[int, torch.Tensor] = {}  # features sharing a table share its (regularised) rows
        for f in self.sparse_features:
            rows, inv = looked[f]
            if regularise:
                rows = done.setdefault(id(rows), _Regularised.apply(rows, self.l1, self.l2))
            logit = logit + self.weights.pool((rows, inv), batch.sparse[f][1]).to(dev).squeeze(1)
        return logit

    def zero_candidate_inputs(self, dense: Sequence[str], sparse: Sequence[str], new_dense: Sequence[str] = (),
                              new_sparse: Sequence[str] = ()) -> list[str] | None:
        """The candidates' dense weights (its per-id weights start at 0 already)."""
        done: list[str] = []
        zero_columns(self.dense_linear, [list(dense).index(c) for c in new_dense], "dense_linear", done)
        return done
