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

import itertools
from typing import Sequence, cast

import numpy as np
import torch
from torch import nn

from fbrapids.trainers.batch import Batch
from fbrapids.trainers.device import module_device
from fbrapids.trainers.models.base import CTRModel
from fbrapids.trainers.models.registry import register_model
from fbrapids.trainers.models.split import SideArrays, dense_rows, pool, pooled_sides, to_tensor
from fbrapids.trainers.models.trial_parts import (
    embedding_blocks,
    first_linear,
    stacked_linear_term,
    stacked_mlp,
    zero_columns,
    zero_table,
)
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


@register_model(short="wide_deep")
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

    default_architecture = dict(deep_mlp=[64, 32])
    first_order_store_argument = "wide_store"

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

    def split_logits(self, req: SideArrays, rows: SideArrays, owner: np.ndarray, dense: Sequence[tuple[str, int]],
                     sparse: Sequence[str]) -> torch.Tensor:
        """Serving: the request's wide terms and its share of the deep MLP's first layer
        (``W[:, request columns] @ x_request``) once per request, the item side's once per
        row, added (broadcast by the row's request) before the rest of the MLP."""
        dev = module_device(self)
        own = to_tensor(owner).to(dev)
        side_sparse = {f: (req.sparse[f] if f not in rows.sparse else rows.sparse[f]) for f in self.sparse_features}
        lookup_in = {f: (to_tensor(v).to(dev), to_tensor(o[:-1]).to(dev)) for f, (v, o) in side_sparse.items()}
        wl, dl = self.wide.lookup(lookup_in), self.deep_emb.lookup(lookup_in)
        xr, xi = to_tensor(req.dense).to(dev), to_tensor(rows.dense).to(dev)
        r_idx = [k for k, (s, _) in enumerate(dense) if s == "request"]
        i_idx = [k for k, (s, _) in enumerate(dense) if s != "request"]
        r_src, i_src = [j for s, j in dense if s == "request"], [j for s, j in dense if s != "request"]
        w = self.wide_dense.weight  # [1, d]
        wide = {True: xr[:, r_src] @ w[:, r_idx].T, False: xi[:, i_src] @ w[:, i_idx].T + self.wide_dense.bias}
        cols: dict[bool, list[int]] = {True: list(r_idx), False: list(i_idx)}
        parts = {True: [xr[:, r_src]], False: [xi[:, i_src]]}  # by side: request (True) or row
        nd, e_dim = len(dense), self.deep_emb.dim
        for k, f in enumerate(self.sparse_features):
            is_req = f not in rows.sparse
            wide[is_req] = wide[is_req] + pool(self.wide, wl[f], side_sparse[f][1], dev)
            cols[is_req] += list(range(nd + k * e_dim, nd + (k + 1) * e_dim))
            parts[is_req].append(pool(self.deep_emb, dl[f], side_sparse[f][1], dev))
        first = cast(torch.nn.Linear, self.deep[0])  # plain_mlp's first layer
        h_r = torch.cat(parts[True], dim=1) @ first.weight[:, cols[True]].T  # once per request
        h = torch.cat(parts[False], dim=1) @ first.weight[:, cols[False]].T + first.bias + h_r.index_select(0, own)
        for layer in itertools.islice(self.deep, 1, None):  # not self.deep[1:]: a new Sequential per call
            h = layer(h)
        return (wide[False] + wide[True].index_select(0, own)).squeeze(1) + h.squeeze(1)

    def zero_candidate_inputs(self, dense: Sequence[str], sparse: Sequence[str], new_dense: Sequence[str] = (),
                              new_sparse: Sequence[str] = ()) -> list[str] | None:
        """The wide side's candidate dense weights (its per-id weights start at 0 already) and
        the deep MLP's first-layer columns of the candidates' dense values and embeddings."""
        done: list[str] = []
        dcols = [list(dense).index(c) for c in new_dense]
        zero_columns(self.wide_dense, dcols, "wide_dense", done)
        zero_columns(first_linear(self.deep), dcols + embedding_blocks(len(dense), self.deep_emb.dim,
                                                                       self.sparse_features, new_sparse),
                     "deep.0", done)
        return done

    @staticmethod
    def batched_logits(models: Sequence[WideAndDeep], dense: torch.Tensor, pooled: dict[str, torch.Tensor]) -> torch.Tensor:
        """The forward of a trial's arms at once: ``[M, B]``."""
        wide = stacked_linear_term([net.wide_dense for net in models], dense, pooled["wide"])
        bags = pooled["deep_emb"]
        deep = stacked_mlp([net.deep for net in models], torch.cat([dense, bags.flatten(2)], dim=2)).squeeze(2)
        return wide + deep


@register_model(short="deepfm")
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

    default_architecture = dict(deep_mlp=[64, 32])
    first_order_store_argument = "first_order_store"

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

    def split_logits(self, req: SideArrays, rows: SideArrays, owner: np.ndarray, dense: Sequence[tuple[str, int]],
                     sparse: Sequence[str]) -> torch.Tensor:
        """Serving: every request-side bag looked up and pooled once per request, gathered by
        the row's request; the first-order sum, the FM term and the deep MLP per row."""
        dev = module_device(self)
        own = to_tensor(owner).to(dev)
        x = dense_rows(req, rows, owner, dense, dev)
        first_w, _ = pooled_sides(self.first, req, rows, own, dev)
        first = self.first_dense(x).squeeze(1) + sum(first_w[f].squeeze(1) for f in self.sparse_features)
        e, _ = pooled_sides(self.emb, req, rows, own, dev)
        fields = torch.stack([e[f] for f in self.sparse_features], dim=1)
        deep = self.deep(torch.cat([x, fields.flatten(1)], dim=1)).squeeze(1)
        return first + self.fm_scale * fm_second_order(fields) + deep

    def zero_candidate_inputs(self, dense: Sequence[str], sparse: Sequence[str], new_dense: Sequence[str] = (),
                              new_sparse: Sequence[str] = ()) -> list[str] | None:
        """The first-order candidate dense weights (its per-id weights start at 0 already), the
        deep MLP's first-layer columns of the candidates, and the candidates' field embeddings
        (their FM interactions then scale from 0)."""
        done: list[str] = []
        dcols = [list(dense).index(c) for c in new_dense]
        zero_columns(self.first_dense, dcols, "first_dense", done)
        zero_columns(first_linear(self.deep), dcols + embedding_blocks(len(dense), self.emb.dim,
                                                                       self.sparse_features, new_sparse),
                     "deep.0", done)
        for f in new_sparse:
            zero_table(self.emb, f)
            done.append(f"emb/{f} (FM field rows start at 0)")
        return done

    @staticmethod
    def batched_logits(models: Sequence[DeepFM], dense: torch.Tensor, pooled: dict[str, torch.Tensor]) -> torch.Tensor:
        """The forward of a trial's arms at once (the FM term of all arms' rows in one batch): ``[M, B]``."""
        m, b = dense.shape[:2]
        first = stacked_linear_term([net.first_dense for net in models], dense, pooled["first"])
        fields = pooled["emb"]
        scale = torch.tensor([float(net.fm_scale) for net in models], dtype=fields.dtype, device=fields.device)
        fm = fm_second_order(fields.reshape(m * b, *fields.shape[2:])).view(m, b) * scale.unsqueeze(1)
        deep = stacked_mlp([net.deep for net in models], torch.cat([dense, fields.flatten(2)], dim=2)).squeeze(2)
        return first + fm + deep
