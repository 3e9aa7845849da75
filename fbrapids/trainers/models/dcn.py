"""DCN-v2 (Wang et al., 2021, "DCN V2: Improved Deep & Cross Network"), laid out as MLPerf's
recommendation benchmark's DLRM-DCNv2: the dense features through a bottom MLP to an
embedding's width, concatenated with the pooled embeddings of every sparse feature into
``x_0``, then DCN-v2's cross network (:class:`~fbrapids.trainers.modules.cross.CrossNetwork`:
``x_{l+1} = x_0 * (W_l x_l + b_l) + x_l``, full or low-rank ``W_l``) and a top MLP.

* ``structure="stacked"`` (the paper's stacked DCN, MLPerf's): the top MLP reads the cross
  network's output.
* ``structure="parallel"``: the top MLP (a deep network) reads ``x_0`` beside the cross
  network, and one linear layer reads both outputs, concatenated.

The tables are the store's (tiers, optimizer, lr), one per sparse feature, keyed by raw ids.

Example:
    >>> import torch
    >>> from fbrapids.trainers.batch import Batch
    >>> from fbrapids.trainers.sparse import StoreConfig
    >>> m = DCNv2(2, ["ad", "user"], embedding_dim=4, bottom_mlp=[8], cross_layers=2, low_rank=3,
    ...           top_mlp=[8], store=StoreConfig(cache_rows=64))
    >>> sp = {"ad": (torch.tensor([1, 2, 3]), torch.arange(3)), "user": (torch.tensor([5, 5, 6]), torch.arange(3))}
    >>> b = Batch(torch.randn(3, 2), torch.tensor([0., 1., 0.]), sp)
    >>> m(b).shape, m.cross.width  # x_0: the bottom MLP's 4 and two tables' 4
    (torch.Size([3]), 12)
    >>> DCNv2(2, ["ad"], embedding_dim=4, structure="parallel", store=StoreConfig(cache_rows=64))(b).shape
    torch.Size([3])
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from fbrapids.errors import ArgumentError
from fbrapids.trainers.batch import Batch
from fbrapids.trainers.models.base import CTRModel
from fbrapids.trainers.models.registry import register_model
from fbrapids.trainers.models.trial_parts import embedding_blocks, first_linear, zero_columns
from fbrapids.trainers.modules import CrossNetwork, TieredEmbeddingBagCollection, mlp, mlp_forward, plain_mlp
from fbrapids.trainers.sparse import StoreConfig

STRUCTURES = ("stacked", "parallel")


@register_model(short="dcn")
class DCNv2(CTRModel):
    """DCN-v2 over a batch's dense matrix and its sparse features (see the module docstring).

    Args:
        dense_dim: number of dense features (0: no bottom MLP; ``x_0`` is the embeddings alone).
        sparse_features: names of the sparse features, one table each.
        embedding_dim: embedding width; also the bottom MLP's output width.
        bottom_mlp: hidden widths of the bottom MLP (Linear + ReLU each, as DLRM's).
        cross_layers: the cross network's layers (MLPerf's DLRM-DCNv2: 3).
        low_rank: rank of each cross layer's ``W`` (MLPerf's: 512 for a 3,456-wide ``x_0``), or
            None for full matrices.
        structure: ``"stacked"`` or ``"parallel"``.
        top_mlp: hidden widths of the top MLP (the deep network of the parallel structure).
        store: tier sizes / optimizer of every table (its ``dim`` set to ``embedding_dim``).
        pooling: ``"sum"`` or ``"mean"`` over a bag of ids.
        dropout: dropout rate after each hidden ReLU of the top MLP while training.
    """

    default_architecture = dict(bottom_mlp=[64, 32], cross_layers=3, low_rank=64, structure="stacked",
                                top_mlp=[64, 32])

    def __init__(self, dense_dim: int, sparse_features: Sequence[str], embedding_dim: int = 16,
                 bottom_mlp: Sequence[int] = (64,), cross_layers: int = 3, low_rank: int | None = None,
                 structure: str = "stacked", top_mlp: Sequence[int] = (64, 32), store: StoreConfig | None = None,
                 pooling: str = "sum", dropout: float = 0.0) -> None:
        super().__init__()
        if structure not in STRUCTURES:
            raise ArgumentError(f"DCNv2: structure must be one of {list(STRUCTURES)}, got {structure!r}")
        if cross_layers < 1 or (low_rank is not None and low_rank < 1) or not top_mlp:
            raise ArgumentError(f"DCNv2: needs cross_layers >= 1, low_rank >= 1 or None and a top MLP, got "
                                f"{cross_layers}, {low_rank}, {list(top_mlp)}")
        self.sparse_features = list(sparse_features)
        self.structure, self.dropout = structure, float(dropout)
        cfg = (store or StoreConfig()).with_(dim=embedding_dim)
        self.bottom = mlp([dense_dim, *bottom_mlp, embedding_dim]) if dense_dim else None
        self.emb = TieredEmbeddingBagCollection(self.sparse_features, cfg, mode=pooling)
        width = embedding_dim * (len(self.sparse_features) + (1 if dense_dim else 0))
        self.cross = CrossNetwork(width, cross_layers, low_rank)
        if structure == "stacked":
            self.top = plain_mlp([width, *top_mlp, 1])
            self.head = None
        else:
            self.top = mlp([width, *top_mlp])  # the deep network: a ReLU after its last layer too
            self.head = nn.Linear(width + int(top_mlp[-1]), 1)

    def forward(self, batch: Batch) -> torch.Tensor:
        dev = self.cross.readers()[0].weight.device
        pooled = self.emb.pooled_stack(batch.sparse).to(dev).flatten(1)  # [B, n_sparse * dim]
        x0 = pooled if self.bottom is None else torch.cat([self.bottom(batch.dense.to(dev)), pooled], dim=1)
        crossed = self.cross(x0)
        if self.head is None:
            return mlp_forward(self.top, crossed, self.dropout, self.training).squeeze(1)
        deep = mlp_forward(self.top, x0, self.dropout, self.training)
        return self.head(torch.cat([crossed, deep], dim=1)).squeeze(1)

    def zero_candidate_inputs(self, dense: Sequence[str], sparse: Sequence[str], new_dense: Sequence[str] = (),
                              new_sparse: Sequence[str] = ()) -> list[str] | None:
        """The bottom MLP's candidate dense columns, and the candidate embeddings' columns of
        ``x_0`` wherever a layer reads them (each cross layer's ``W`` or ``U``, the top MLP's
        first layer; the parallel structure's head reads the cross network's output), so that
        they reach no other coordinate and no output."""
        done: list[str] = []
        if self.bottom is not None:
            zero_columns(self.bottom[0], [list(dense).index(c) for c in new_dense], "bottom.0", done)
        offset = self.emb.dim if self.bottom is not None else 0
        cols = embedding_blocks(offset, self.emb.dim, self.sparse_features, new_sparse)
        prefix = "w" if self.cross.low_rank is None else "u"
        for k, lin in enumerate(self.cross.readers()):
            zero_columns(lin, cols, f"cross.{prefix}.{k}", done)
        zero_columns(first_linear(self.top), cols, "top.0", done)
        if self.head is not None:
            zero_columns(self.head, cols, "head", done)
        return done
