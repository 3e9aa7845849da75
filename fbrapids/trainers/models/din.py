"""DIN (Zhou et al., 2018): attention pooling of a behaviour sequence against the candidate."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import torch

from fbrapids.errors import ArgumentError
from fbrapids.trainers.batch import Batch, ragged_take
from fbrapids.trainers.device import module_device
from fbrapids.trainers.models.base import CTRModel
from fbrapids.trainers.models.registry import register_model
from fbrapids.trainers.models.split import SideArrays, attend, dense_rows, pooled_sides, to_tensor
from fbrapids.trainers.models.trial_parts import embedding_blocks, first_linear, zero_columns
from fbrapids.trainers.models.wide_deep import first_order_config, linear_term
from fbrapids.trainers.modules import (
    AttentionPooling,
    TieredEmbeddingBagCollection,
    bag_segments,
    mlp_forward,
    plain_mlp,
)
from fbrapids.trainers.sparse import StoreConfig


@register_model(short="din")
class DIN(CTRModel):
    """Deep Interest Network over tiered embeddings.

    Args:
        dense_dim: number of dense features.
        sparse_features: features pooled by sum (the candidate among them).
        sequences: behaviour-sequence list feature -> the candidate feature it is
            attended against; the sequence shares the candidate's table (same id space).
        embedding_dim, attention_mlp, mlp, store: sizes and store configuration.
        pooling: ``"sum"`` or ``"mean"`` of a bag's embeddings; with ``"mean"`` a sequence's
            attention-weighted sum is divided by its length too (``AttentionPooling(mean=True)``).
        first_order: add Wide&Deep's first-order part to the logit (one weight per id of the
            non-sequence features, from 0, :func:`~fbrapids.trainers.models.wide_deep.first_order_config`,
            plus a linear map of the dense features); the pipeline's default (docs/models.md).
        first_order_store: the first-order tables (its ``dim`` set to 1); default
            :func:`~fbrapids.trainers.models.wide_deep.first_order_config` of ``store``.
        dropout: dropout rate after each hidden ReLU of the MLP while training.

    Example:
        >>> import torch
        >>> from fbrapids.trainers.batch import Batch
        >>> m = DIN(1, ["ad"], {"hist": "ad"}, embedding_dim=4, store=StoreConfig(cache_rows=32))
        >>> sp = {"ad": (torch.tensor([3, 4]), torch.arange(2)),
        ...       "hist": (torch.tensor([3, 5, 6]), torch.tensor([0, 1]))}
        >>> m(Batch(torch.zeros(2, 1), torch.zeros(2), sp)).shape
        torch.Size([2])
        >>> sorted(DIN(1, ["ad"], {"hist": "ad"}, store=StoreConfig(cache_rows=32), first_order=True).stores())
        ['emb/ad', 'first/ad']
    """

    default_architecture = dict(attention_mlp=(36,), mlp=(64, 32), first_order=True)
    reads_sequences = True
    first_order_store_argument = "first_order_store"

    def __init__(self, dense_dim: int, sparse_features: Sequence[str], sequences: Mapping[str, str],
                 embedding_dim: int = 16, attention_mlp: Sequence[int] = (36,), mlp: Sequence[int] = (200, 80),
                 store: StoreConfig | None = None, pooling: str = "sum", first_order: bool = False,
                 first_order_store: StoreConfig | None = None, dropout: float = 0.0) -> None:
        super().__init__()
        self.sparse_features = list(sparse_features)
        self.dropout = float(dropout)
        self.sequences = dict(sequences)
        for seq, target in self.sequences.items():
            if target not in self.sparse_features:
                raise ArgumentError(f"DIN: sequence {seq!r} attends to {target!r}, which is not a sparse feature")
        cfg = (store or StoreConfig()).with_(dim=embedding_dim)
        feats = self.sparse_features + list(self.sequences)
        self.emb = TieredEmbeddingBagCollection(feats, cfg, tables={s: t for s, t in self.sequences.items()},
                                                mode=pooling)
        self.attention = torch.nn.ModuleDict(
            {s: AttentionPooling(embedding_dim, attention_mlp, mean=pooling == "mean") for s in self.sequences})
        width = dense_dim + embedding_dim * (len(self.sparse_features) + len(self.sequences))
        self.mlp = plain_mlp([width, *mlp, 1])
        self.first = self.first_dense = None
        if first_order:
            first = (first_order_store.with_(dim=1) if first_order_store is not None
                     else first_order_config(store or StoreConfig()))
            self.first = TieredEmbeddingBagCollection(self.sparse_features, first, prefix="first_")
            self.first_dense = torch.nn.Linear(dense_dim, 1)

    def forward(self, batch: Batch) -> torch.Tensor:
        dev = next(self.mlp.parameters()).device  # the first layer's weight's
        looked = self.emb.lookup(batch.sparse)
        pooled = {f: self.emb.pool(looked[f], batch.sparse[f][1]).to(dev) for f in self.sparse_features}
        parts = [batch.dense.to(dev), *pooled.values()]
        for seq, target in self.sequences.items():
            rows, inv = looked[seq]
            keys = rows.index_select(0, inv).to(dev)
            seg = bag_segments(batch.sparse[seq][1].to(dev), len(inv))
            parts.append(self.attention[seq](pooled[target], keys, seg))
        logit = mlp_forward(self.mlp, torch.cat(parts, dim=1), self.dropout, self.training).squeeze(1)
        if self.first is not None and self.first_dense is not None:  # made together
            logit = logit + linear_term(self.first, self.first_dense, batch.dense.to(dev), batch, self.sparse_features)
        return logit

    def split_logits(self, req: SideArrays, rows: SideArrays, owner: np.ndarray, dense: Sequence[tuple[str, int]],
                     sparse: Sequence[str]) -> torch.Tensor:
        """Serving: every request-side bag and the request's behaviour sequence looked up once
        per request; the attention (each candidate against each history entry, the row's
        work: :mod:`fbrapids.serving.cost`) in groups of rows of bounded memory
        (:func:`~fbrapids.trainers.models.split.attend`), the MLP per row."""
        dev = module_device(self)
        own = to_tensor(owner).to(dev)
        pooled, looked = pooled_sides(self.emb, req, rows, own, dev, skip=list(self.sequences))
        x = dense_rows(req, rows, owner, dense, dev)
        parts = [x, *[pooled[f] for f in self.sparse_features]]
        for seq, target in self.sequences.items():
            table_rows, inv = looked[seq]
            if seq in rows.sparse:  # a row-side sequence: as the model's forward
                offsets = rows.sparse[seq][1]
                at = inv
            else:  # the request's history, looked up once, its entries gathered for each row of the request
                pos, offsets = ragged_take(np.arange(len(req.sparse[seq][0]), dtype=np.int64), req.sparse[seq][1],
                                           owner)
                at = inv.index_select(0, to_tensor(pos).to(inv.device))
            parts.append(attend(self.attention[seq], pooled[target], table_rows, at, offsets, dev))
        logit = self.mlp(torch.cat(parts, dim=1)).squeeze(1)
        if self.first is not None and self.first_dense is not None:  # the first-order part, as the model's forward
            first, _ = pooled_sides(self.first, req, rows, own, dev)
            logit = logit + self.first_dense(x).squeeze(1) + sum(first[f].squeeze(1) for f in self.sparse_features)
        return logit

    def zero_candidate_inputs(self, dense: Sequence[str], sparse: Sequence[str], new_dense: Sequence[str] = (),
                              new_sparse: Sequence[str] = ()) -> list[str] | None:
        """The MLP's first-layer columns of the candidates' dense values and embeddings (a
        candidate sequence's attended vector among them), and the first-order part's candidate
        dense weights (its per-id weights start at 0 already)."""
        done: list[str] = []
        dcols = [list(dense).index(c) for c in new_dense]
        blocks = embedding_blocks(len(dense), self.emb.dim, self.sparse_features + list(self.sequences), new_sparse)
        zero_columns(first_linear(self.mlp), dcols + blocks, "mlp.0", done)
        if self.first_dense is not None:
            zero_columns(self.first_dense, dcols, "first_dense", done)
        return done
