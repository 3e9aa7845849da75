"""DICM: Deep Image CTR Model ("Image Matters", Ge et al., 2018) over tiered id embeddings.

The model is the embedding-and-MLP basic net (one sum-pooled id embedding per sparse
feature, plus the behaviour id sequence sum-pooled) with two image inputs:

* the **ad image**: one image id per row, embedded by the AMS sub-model;
* the **behaviour images**: the images of the user's behaviours (a list feature of image
  ids), embedded by the same sub-model and aggregated per row by ``aggregator``:
  ``"sum"``, ``"max"``, ``"attentive"`` (queried by the ad image embedding) or
  ``"multi_query"`` (:class:`~fbrapids.ams.pooling.MultiQueryAttentivePooling`: one channel
  queried by the ad image embedding, one by the ad's id embeddings, outputs concatenated).

All image references of a batch (ad and behaviours, every row) go through one
:class:`~fbrapids.ams.embedding.ImageEmbedder` call, so with dedup each unique image is
embedded once per batch; ``model.image_report`` is that batch's report.  The sub-model is
a dense submodule: ``fit``'s optimizer trains it end to end with the rest.

Example:
    >>> import torch
    >>> from fbrapids.trainers.batch import Batch
    >>> from fbrapids.trainers.sparse import StoreConfig
    >>> from fbrapids.ams import ImageEmbedder, ImageEmbeddingMLP, ImageVectorStore
    >>> emb = ImageEmbedder(ImageVectorStore.from_ids(range(20), dim=16), ImageEmbeddingMLP([16, 8, 4]))
    >>> m = DICM(0, ["ad"], emb, behaviour_images="hist", ad_image="ad", ad_id_features=["ad"],
    ...          behaviour_ids="hist", tables={"hist": "ad"}, embedding_dim=4, mlp=[8],
    ...          store=StoreConfig(cache_rows=64))
    >>> sp = {"ad": (torch.tensor([3, 4]), torch.arange(2)), "hist": (torch.tensor([3, 5, 4]), torch.tensor([0, 2]))}
    >>> m(Batch(torch.zeros(2, 0), torch.zeros(2), sp)).shape, m.image_report.unique_images
    (torch.Size([2]), 3)
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch
from torch import nn

from fbrapids.ams.embedding import ImageBatchReport, ImageEmbedder
from fbrapids.ams.pooling import MultiQueryAttentivePooling, max_pool, sum_pool
from fbrapids.errors import ArgumentError, NotFoundError
from fbrapids.trainers.batch import Batch
from fbrapids.trainers.models.base import CTRModel
from fbrapids.trainers.models.registry import register_model
from fbrapids.trainers.modules import AttentionPooling, TieredEmbeddingBagCollection, bag_segments
from fbrapids.trainers.sparse import StoreConfig

AGGREGATORS = ("sum", "max", "attentive", "multi_query")


def prelu_mlp(sizes: Sequence[int]) -> nn.Sequential:
    """Linear layers with PReLU between them; the last layer is linear (a logit)."""
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(int(sizes[i]), int(sizes[i + 1])))
        if i < len(sizes) - 2:
            layers.append(nn.PReLU(int(sizes[i + 1])))
    return nn.Sequential(*layers)


@register_model
class DICM(CTRModel):
    """Deep Image CTR Model (see the module docstring).

    Args:
        dense_dim: number of dense features.
        sparse_features: id features, each sum-pooled from its own tiered table.
        images: the :class:`ImageEmbedder` (vector store + trainable sub-model).
        behaviour_images: list feature of the behaviours' image ids.
        ad_image: feature holding the ad's image id (exactly one per row).
        ad_id_features: the ad's id features; their embeddings are the second query of
            ``"multi_query"`` (needed for it).
        behaviour_ids: optional list feature of the behaviours' ids, sum-pooled in the
            basic net (share the ad id table with ``tables={behaviour_ids: ad_feature}``).
        tables: feature -> table name, for features sharing a table.
        aggregator: one of ``"sum"``, ``"max"``, ``"attentive"``, ``"multi_query"``.
        embedding_dim, attention_mlp, mlp, store: sizes and the id tables' configuration.
    """

    def __init__(self, dense_dim: int, sparse_features: Sequence[str], images: ImageEmbedder,
                 behaviour_images: str, ad_image: str, ad_id_features: Sequence[str] = (),
                 behaviour_ids: str | None = None, tables: Mapping[str, str] | None = None,
                 aggregator: str = "multi_query", embedding_dim: int = 16, attention_mlp: Sequence[int] = (36,),
                 mlp: Sequence[int] = (200, 80), store: StoreConfig | None = None) -> None:
        super().__init__()
        if aggregator not in AGGREGATORS:
            raise ArgumentError(f"DICM: aggregator must be one of {AGGREGATORS}, got {aggregator!r}")
        self.sparse_features = list(sparse_features)
        self.ad_id_features = list(ad_id_features)
        missing = [f for f in self.ad_id_features if f not in self.sparse_features]
        if missing:
            raise ArgumentError(f"DICM: ad_id_features {missing} are not among sparse_features")
        if aggregator == "multi_query" and not self.ad_id_features:
            raise ArgumentError("DICM: aggregator 'multi_query' needs ad_id_features (its second query)")
        self.behaviour_images, self.ad_image, self.behaviour_ids = behaviour_images, ad_image, behaviour_ids
        self.aggregator = aggregator
        cfg = (store or StoreConfig()).with_(dim=embedding_dim)
        feats = self.sparse_features + ([behaviour_ids] if behaviour_ids else [])
        self.emb = TieredEmbeddingBagCollection(feats, cfg, tables=dict(tables or {}))
        self.images = images
        d_img = images.out_dim
        if aggregator == "attentive":
            self.pool: nn.Module | None = AttentionPooling(d_img, attention_mlp)
            agg_dim = d_img
        elif aggregator == "multi_query":
            self.pool = MultiQueryAttentivePooling([d_img, embedding_dim * len(self.ad_id_features)], d_img,
                                                   attention_mlp)
            agg_dim = self.pool.out_dim
        else:
            self.pool = None
            agg_dim = d_img
        width = dense_dim + embedding_dim * len(feats) + d_img + agg_dim
        self.mlp = prelu_mlp([width, *mlp, 1])
        self.image_report = ImageBatchReport()

    def sparse_inputs(self) -> list[str]:
        """The sparse features, the behaviour ids and the two image-id columns read from a batch."""
        extra = [f for f in (self.behaviour_ids, self.behaviour_images, self.ad_image) if f]
        return list(dict.fromkeys(self.sparse_features + extra))

    def forward(self, batch: Batch) -> torch.Tensor:
        dev = next(self.mlp.parameters()).device  # (the first layer's weight)
        rows = len(batch)
        pooled = {f: p.to(dev) for f, p in self.emb(batch.sparse).items()}
        for f in (self.behaviour_images, self.ad_image):
            if f not in batch.sparse:
                raise NotFoundError(f"DICM: image feature {f!r} is not in the batch (it has {sorted(batch.sparse)})")
        ad_ids, ad_off = batch.sparse[self.ad_image]
        if len(ad_ids) != rows:
            raise ArgumentError(f"DICM: ad image feature {self.ad_image!r} must hold one image id per row, "
                             f"got {len(ad_ids)} ids for {rows} rows")
        beh_ids, beh_off = batch.sparse[self.behaviour_images]
        emb = self.images({"ad": ad_ids, "behaviour": beh_ids})
        self.image_report = self.images.last_report
        ad_img = emb["ad"].to(dev)
        beh_img = emb["behaviour"].to(dev)
        seg = bag_segments(beh_off.to(dev), len(beh_ids))
        if self.aggregator == "sum":
            agg = sum_pool(beh_img, seg, rows)
        elif self.aggregator == "max":
            agg = max_pool(beh_img, seg, rows)
        elif self.aggregator == "attentive":
            assert self.pool is not None  # (made by __init__ for the attentive aggregators)
            agg = self.pool(ad_img, beh_img, seg)
        else:
            assert self.pool is not None
            ad_id_q = torch.cat([pooled[f] for f in self.ad_id_features], dim=1)
            agg = self.pool([ad_img, ad_id_q], beh_img, seg)
        parts = [batch.dense.to(dev), *pooled.values(), ad_img, agg]
        return self.mlp(torch.cat(parts, dim=1)).squeeze(1)
