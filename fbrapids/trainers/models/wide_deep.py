"""Wide & Deep (Cheng et al., 2016) and DeepFM (Guo et al., 2017) over tiered embeddings."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from fbrapids.trainers.batch import Batch
from fbrapids.trainers.models.base import CTRModel
from fbrapids.trainers.modules import TieredEmbeddingBagCollection, fm_second_order, plain_mlp
from fbrapids.trainers.sparse import StoreConfig



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

    Example:
        >>> import torch
        >>> from fbrapids.trainers.batch import Batch
        >>> m = WideAndDeep(1, ["ad"], embedding_dim=4, deep_mlp=[8], store=StoreConfig(cache_rows=32))
        >>> m(Batch(torch.zeros(2, 1), torch.zeros(2), {"ad": (torch.tensor([3, 4]), torch.arange(2))})).shape
        torch.Size([2])
    """

    def __init__(self, dense_dim: int, sparse_features: Sequence[str], embedding_dim: int = 16,
                 deep_mlp: Sequence[int] = (64, 32), store: StoreConfig | None = None) -> None:
        super().__init__()
        self.sparse_features = list(sparse_features)
        cfg = store or StoreConfig()
        self.wide = TieredEmbeddingBagCollection(self.sparse_features, cfg.with_(dim=1), prefix="wide_")
        self.wide_dense = nn.Linear(dense_dim, 1)
        self.deep_emb = TieredEmbeddingBagCollection(self.sparse_features,
                                                     cfg.with_(dim=embedding_dim, seed=cfg.seed + 1))
        self.deep = plain_mlp([dense_dim + embedding_dim * len(self.sparse_features), *deep_mlp, 1])

    def forward(self, batch: Batch) -> torch.Tensor:
        dev = self.wide_dense.weight.device
        dense = batch.dense.to(dev)
        wide = linear_term(self.wide, self.wide_dense, dense, batch, self.sparse_features)
        e = self.deep_emb(batch.sparse)
        deep = self.deep(torch.cat([dense, *[e[f].to(dev) for f in self.sparse_features]], dim=1)).squeeze(1)
        return wide + deep


class DeepFM(CTRModel):
    """First-order weights per id and per dense feature, the FM pairwise term over the
    sparse fields' embeddings, and a deep MLP over the same embeddings plus dense features.

    Example:
        >>> import torch
        >>> from fbrapids.trainers.batch import Batch
        >>> m = DeepFM(1, ["ad", "u"], embedding_dim=4, deep_mlp=[8], store=StoreConfig(cache_rows=32))
        >>> sp = {"ad": (torch.tensor([3, 4]), torch.arange(2)), "u": (torch.tensor([1, 1]), torch.arange(2))}
        >>> m(Batch(torch.zeros(2, 1), torch.zeros(2), sp)).shape
        torch.Size([2])
    """

    def __init__(self, dense_dim: int, sparse_features: Sequence[str], embedding_dim: int = 16,
                 deep_mlp: Sequence[int] = (64, 32), store: StoreConfig | None = None) -> None:
        super().__init__()
        self.sparse_features = list(sparse_features)
        cfg = store or StoreConfig()
        self.first = TieredEmbeddingBagCollection(self.sparse_features, cfg.with_(dim=1), prefix="first_")
        self.first_dense = nn.Linear(dense_dim, 1)
        self.emb = TieredEmbeddingBagCollection(self.sparse_features, cfg.with_(dim=embedding_dim, seed=cfg.seed + 1))
        self.deep = plain_mlp([dense_dim + embedding_dim * len(self.sparse_features), *deep_mlp, 1])

    def forward(self, batch: Batch) -> torch.Tensor:
        dev = self.first_dense.weight.device
        dense = batch.dense.to(dev)
        first = linear_term(self.first, self.first_dense, dense, batch, self.sparse_features)
        e = self.emb(batch.sparse)
        fields = torch.stack([e[f].to(dev) for f in self.sparse_features], dim=1)
        deep = self.deep(torch.cat([dense, fields.flatten(1)], dim=1)).squeeze(1)
        return first + fm_second_order(fields) + deep
