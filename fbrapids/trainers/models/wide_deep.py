"""Wide & Deep (Cheng et al., 2016) and DeepFM (Guo et al., 2017) over tiered embeddings.

Both add tables' values straight into the logit: the first-order (wide) weights, one per
id, and DeepFM's pairwise FM term over the fields' embeddings.  Those tables get their own
defaults, derived from the model's ``store`` (:func:`first_order_config`,
:func:`fm_field_config`), because the defaults of a deep embedding table (rows uniform in
``[-1/sqrt(dim), 1/sqrt(dim))``, Adagrad from a zero accumulator) make them diverge on
sparse CTR data:

* a dim-1 table would start every weight uniform in ``[-1, 1)``: with ~26 fields and bags
  of tokens (~65 ids a row on the demo data) the first-order term starts with a logit
  standard deviation of 4.8, and rare ids (most of them) and ids first seen at
  evaluation keep that noise; first-order weights start at 0, as in logistic regression;
* the FM term is quadratic in the embeddings and sums ``F * (F - 1) / 2`` pairs of fields
  (325 of the demo's 26): at ``1/sqrt(16)`` it would start with a standard deviation of
  4.9 logits.  DeepFM takes the *mean* over the pairs (``fm_scale``, default
  ``1 / pairs``), so its fields are initialised and trained as the deep embeddings they
  also are (:func:`fm_field_config`).  Summed pairs at a tiny initial scale (0.01, the
  DeepFM reference's N(0, 0.01)) started the deep side on near-zero inputs too: it needed
  4 epochs and stayed below Wide&Deep on the demo data (held-out AUC 0.7010 against
  0.7101 at 200,000 rows, 3 seeds; docs/models.md);
* row-wise Adagrad from a zero accumulator moves a row seen once by the full ``lr``
  whatever its gradient (``g / sqrt(g * g)``), and every id of an impression moves the
  same way (same label): on a sum over ~65 ids one impression shifts its own logit by
  ~3 at ``lr=0.05``.  From ``ADDITIVE_ACCUMULATOR`` a row's first steps are
  proportional to its gradient (SGD at ``lr / sqrt(1e-4) = 500 x lr`` on the mean-loss
  gradient), and frequent ids, whose summed gradients soon exceed it, still get
  Adagrad's steps.

A table behind an MLP (DLRM, DIN, the deep side here) is left on the ``store`` as given:
the MLP learns how much to trust it.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from fbrapids.trainers.batch import Batch
from fbrapids.trainers.models.base import CTRModel
from fbrapids.trainers.modules import TieredEmbeddingBagCollection, fm_second_order, mlp_forward, plain_mlp
from fbrapids.trainers.sparse import StoreConfig

#: row-wise Adagrad's initial accumulator in the tables added straight into the logit
#: (the first-order weights); a store configured higher keeps its own
ADDITIVE_ACCUMULATOR = 1e-4


def first_order_config(store: StoreConfig) -> StoreConfig:
    """A first-order (wide) table's configuration derived from a model's ``store``: dim 1,
    every weight starting at 0, and Adagrad from at least :data:`ADDITIVE_ACCUMULATOR`
    (tiers, lr, optimizer and seed as in ``store``).

    Example:
        >>> c = first_order_config(StoreConfig(dim=16, lr=0.1))
        >>> c.dim, c.scale, c.initial_accumulator, c.lr
        (1, 0.0, 0.0001, 0.1)
    """
    return store.with_(dim=1, init_scale=0.0,
                       initial_accumulator=max(store.initial_accumulator, ADDITIVE_ACCUMULATOR))


def fm_field_config(store: StoreConfig, embedding_dim: int) -> StoreConfig:
    """DeepFM's field-embedding configuration derived from a model's ``store``: a deep
    embedding table's (the store's initial scale, ``1/sqrt(dim)`` unless it names one, and its
    Adagrad accumulator; the FM term is a mean over the pairs of fields, module docstring) at
    ``embedding_dim``, seed ``store.seed + 1`` (apart from the first-order table's).

    Example:
        >>> c = fm_field_config(StoreConfig(), 8)
        >>> c.dim, c.scale, c.initial_accumulator, c.seed
        (8, 0.3535533905932738, 0.0, 1)
        >>> fm_field_config(StoreConfig(init_scale=0.1), 8).scale
        0.1
    """
    return store.with_(dim=embedding_dim, seed=store.seed + 1)


def fm_pairs_scale(fields: int) -> float:
    """DeepFM's default ``fm_scale``: one over the number of pairs of ``fields`` fields (the FM
    term a mean over the pairs); 1.0 with fewer than two fields.

    Example:
        >>> fm_pairs_scale(26), fm_pairs_scale(2), fm_pairs_scale(1)
        (0.003076923076923077, 1.0, 1.0)
    """
    pairs = fields * (fields - 1) // 2
    return 1.0 / pairs if pairs > 0 else 1.0


def linear_term(weights: TieredEmbeddingBagCollection, dense_linear: nn.Linear, dense: torch.Tensor,
                batch: Batch, features: Sequence[str]) -> torch.Tensor:
    """The first-order part shared by Wide&Deep's wide side and DeepFM: a linear map of the
    dense features plus one learned weight (a 1-dim embedding) per sparse id, summed."""
    w = weights(batch.sparse)
    return dense_linear(dense).squeeze(1) + sum(w[f].to(dense.device).squeeze(1) for f in features)


class WideAndDeep(CTRModel):
    """Wide part: one weight per raw id (a dim-1 tiered table per feature) plus a linear
    term of the dense features.  Deep part: an MLP over the dense features and the pooled
    embeddings.  ``logit = wide + deep``.

    Args:
        dense_dim, sparse_features, embedding_dim, deep_mlp: sizes.
        store: the deep embeddings' tables (its ``dim`` set to ``embedding_dim``, its seed + 1).
        wide_store: the wide tables (its ``dim`` set to 1); default
            :func:`first_order_config` of ``store`` (weights from 0, see the module docstring).
        pooling: ``"sum"`` or ``"mean"`` of a bag's deep embeddings (the wide weights are summed).
        dropout: dropout rate after each hidden ReLU of the deep MLP while training.

    Example:
        >>> import torch
        >>> from fbrapids.trainers.batch import Batch
        >>> m = WideAndDeep(1, ["ad"], embedding_dim=4, deep_mlp=[8], store=StoreConfig(cache_rows=32))
        >>> m(Batch(torch.zeros(2, 1), torch.zeros(2), {"ad": (torch.tensor([3, 4]), torch.arange(2))})).shape
        torch.Size([2])
        >>> m.wide.stores["ad"].config.scale  # a new id's weight is 0
        0.0
    """

    def __init__(self, dense_dim: int, sparse_features: Sequence[str], embedding_dim: int = 16,
                 deep_mlp: Sequence[int] = (64, 32), store: StoreConfig | None = None,
                 wide_store: StoreConfig | None = None, pooling: str = "sum", dropout: float = 0.0) -> None:
        super().__init__()
        self.sparse_features = list(sparse_features)
        self.dropout = float(dropout)
        cfg = store or StoreConfig()
        wide = wide_store.with_(dim=1) if wide_store is not None else first_order_config(cfg)
        self.wide = TieredEmbeddingBagCollection(self.sparse_features, wide, prefix="wide_")
        self.wide_dense = nn.Linear(dense_dim, 1)
        self.deep_emb = TieredEmbeddingBagCollection(self.sparse_features,
                                                     cfg.with_(dim=embedding_dim, seed=cfg.seed + 1), mode=pooling)
        self.deep = plain_mlp([dense_dim + embedding_dim * len(self.sparse_features), *deep_mlp, 1])

    def forward(self, batch: Batch) -> torch.Tensor:
        dev = self.wide_dense.weight.device
        dense = batch.dense.to(dev)
        wide = linear_term(self.wide, self.wide_dense, dense, batch, self.sparse_features)
        e = self.deep_emb(batch.sparse)
        deep = mlp_forward(self.deep, torch.cat([dense, *[e[f].to(dev) for f in self.sparse_features]], dim=1),
                           self.dropout, self.training).squeeze(1)
        return wide + deep


class DeepFM(CTRModel):
    """First-order weights per id and per dense feature, the FM pairwise term over the
    sparse fields' embeddings, and a deep MLP over the same embeddings plus dense features.

    Args:
        dense_dim, sparse_features, embedding_dim, deep_mlp: sizes.
        store: tiers, optimizer, lr and seed of every table; the FM fields' table is
            :func:`fm_field_config` of it unless ``field_store`` is given (its ``dim`` set
            to ``embedding_dim``).
        first_order_store: the first-order tables (its ``dim`` set to 1); default
            :func:`first_order_config` of ``store``.
        pooling: ``"sum"`` or ``"mean"`` of a bag's field embeddings (the first-order weights are summed).
        dropout: dropout rate after each hidden ReLU of the deep MLP while training.
        fm_scale: the FM term's factor; None: :func:`fm_pairs_scale` of the fields (the mean
            over the pairs of fields, module docstring).  Not a parameter: a model rebuilt from
            the same arguments has it.

    Example:
        >>> import torch
        >>> from fbrapids.trainers.batch import Batch
        >>> m = DeepFM(1, ["ad", "u"], embedding_dim=4, deep_mlp=[8], store=StoreConfig(cache_rows=32))
        >>> sp = {"ad": (torch.tensor([3, 4]), torch.arange(2)), "u": (torch.tensor([1, 1]), torch.arange(2))}
        >>> m(Batch(torch.zeros(2, 1), torch.zeros(2), sp)).shape
        torch.Size([2])
        >>> m.first.stores["ad"].config.scale, m.emb.stores["ad"].config.scale, m.fm_scale
        (0.0, 0.5, 1.0)
    """

    def __init__(self, dense_dim: int, sparse_features: Sequence[str], embedding_dim: int = 16,
                 deep_mlp: Sequence[int] = (64, 32), store: StoreConfig | None = None,
                 first_order_store: StoreConfig | None = None, field_store: StoreConfig | None = None,
                 pooling: str = "sum", dropout: float = 0.0, fm_scale: float | None = None) -> None:
        super().__init__()
        self.sparse_features = list(sparse_features)
        self.dropout = float(dropout)
        self.fm_scale = fm_pairs_scale(len(self.sparse_features)) if fm_scale is None else float(fm_scale)
        cfg = store or StoreConfig()
        first = first_order_store.with_(dim=1) if first_order_store is not None else first_order_config(cfg)
        fields = field_store.with_(dim=embedding_dim) if field_store is not None else fm_field_config(cfg, embedding_dim)
        self.first = TieredEmbeddingBagCollection(self.sparse_features, first, prefix="first_")
        self.first_dense = nn.Linear(dense_dim, 1)
        self.emb = TieredEmbeddingBagCollection(self.sparse_features, fields, mode=pooling)
        self.deep = plain_mlp([dense_dim + embedding_dim * len(self.sparse_features), *deep_mlp, 1])

    def forward(self, batch: Batch) -> torch.Tensor:
        dev = self.first_dense.weight.device
        dense = batch.dense.to(dev)
        first = linear_term(self.first, self.first_dense, dense, batch, self.sparse_features)
        e = self.emb(batch.sparse)
        fields = torch.stack([e[f].to(dev) for f in self.sparse_features], dim=1)
        deep = mlp_forward(self.deep, torch.cat([dense, fields.flatten(1)], dim=1), self.dropout,
                           self.training).squeeze(1)
        return first + self.fm_scale * fm_second_order(fields) + deep
