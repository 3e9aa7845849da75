"""A toy CTR model added in one file: what adding a model to fbrapids takes.

``ToyCTR``: every sparse feature's bag pooled from its own tiered table, concatenated after
the dense values, through a small MLP.  Registered under the short name ``"toy"``, it is at
once a choice of ``RunConfig``, the demo, ``fbrapids trial`` and ``fbrapids export``; what
varies from model to model is declared here, on the class:

* ``default_architecture``: the pipeline's hidden widths;
* ``split_logits``: serving's forward with the request side pooled once per request;
* ``zero_candidate_inputs``: a trial's common start (the first layer's candidate columns at 0).

Its inputs from a workload (no behaviour sequences) and its pipeline arguments are
:class:`~fbrapids.trainers.models.base.CTRModel`'s defaults.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from fbrapids.trainers.batch import Batch
from fbrapids.trainers.device import module_device
from fbrapids.trainers.models import CTRModel, register_model
from fbrapids.trainers.models.split import SideArrays, dense_rows, pooled_sides, to_tensor
from fbrapids.trainers.models.trial_parts import embedding_blocks, zero_columns
from fbrapids.trainers.modules import TieredEmbeddingBagCollection, mlp_forward, plain_mlp
from fbrapids.trainers.sparse import StoreConfig


@register_model(short="toy")
class ToyCTR(CTRModel):
    """``logit = MLP([dense, pooled(f) for f in sparse_features])``.

    Args:
        dense_dim, sparse_features, embedding_dim: the inputs and the tables' width.
        hidden: the MLP's hidden widths.
        store: the tables' tiers and optimizer (``dim`` set to ``embedding_dim``).
        pooling: ``"sum"`` or ``"mean"`` of a bag.
        dropout: after each hidden ReLU while training.
    """

    default_architecture = dict(hidden=[16])

    def __init__(self, dense_dim: int, sparse_features: Sequence[str], embedding_dim: int = 8,
                 hidden: Sequence[int] = (8,), store: StoreConfig | None = None, pooling: str = "sum",
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.sparse_features = list(sparse_features)
        self.dropout = float(dropout)
        cfg = (store or StoreConfig()).with_(dim=embedding_dim)
        self.emb = TieredEmbeddingBagCollection(self.sparse_features, cfg, mode=pooling)
        self.mlp = plain_mlp([dense_dim + embedding_dim * len(self.sparse_features), *hidden, 1])

    def _logits(self, dense: torch.Tensor, pooled: dict[str, torch.Tensor]) -> torch.Tensor:
        x = torch.cat([dense, *[pooled[f] for f in self.sparse_features]], dim=1)
        return mlp_forward(self.mlp, x, self.dropout, self.training).squeeze(1)

    def forward(self, batch: Batch) -> torch.Tensor:
        dev = module_device(self)
        pooled = {f: e.to(dev) for f, e in self.emb(batch.sparse).items()}
        return self._logits(batch.dense.to(dev), pooled)

    def split_logits(self, req: SideArrays, rows: SideArrays, owner: np.ndarray, dense: Sequence[tuple[str, int]],
                     sparse: Sequence[str]) -> torch.Tensor:
        dev = module_device(self)
        pooled, _ = pooled_sides(self.emb, req, rows, to_tensor(owner).to(dev), dev)  # request bags: once each
        return self._logits(dense_rows(req, rows, owner, dense, dev), pooled)

    def zero_candidate_inputs(self, dense: Sequence[str], sparse: Sequence[str], new_dense: Sequence[str] = (),
                              new_sparse: Sequence[str] = ()) -> list[str] | None:
        done: list[str] = []
        cols = [list(dense).index(c) for c in new_dense]
        cols += embedding_blocks(len(dense), self.emb.dim, self.sparse_features, new_sparse)
        zero_columns(self.mlp[0], cols, "mlp.0", done)
        return done
