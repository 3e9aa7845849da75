"""DLRM (Naumov et al., 2019), laid out as the reference ``DLRM_Net`` of facebookresearch/dlrm.

* ``bot_l``: ``Sequential`` of Linear + ReLU over the dense features, ending in
  ``embedding_dim`` units (``create_mlp(ln_bot, sigmoid_bot=-1)``).
* ``emb_l``: one embedding bag per sparse feature (sum pooling), here backed by tiered
  stores keyed by raw ids.
* pairwise dot interactions of ``[bottom output] + bags``, strictly lower triangle,
  concatenated after the bottom output.
* ``top_l``: ``Sequential`` of Linear + ReLU ending in Linear + Sigmoid
  (``create_mlp(ln_top, sigmoid_top=len(ln_top) - 2)``).

So a reference state dict (``bot_l.0.weight``, ..., ``top_l.4.bias``, ``emb_l.k.weight``)
loads with :meth:`DLRM.load_reference_state_dict`: the MLP tensors by name, and row ``i``
of table ``k`` as the id ``i`` of the k-th sparse feature (:meth:`DLRM.reference_state_dict`
goes the other way).  ``forward`` returns the
logit (``top_l`` without its final Sigmoid); ``predict`` applies it.

Example:
    >>> import torch
    >>> from fbrapids.trainers.batch import Batch
    >>> from fbrapids.trainers.sparse import StoreConfig
    >>> m = DLRM(2, ["ad", "user"], embedding_dim=4, bottom_mlp=[8], top_mlp=[8], store=StoreConfig(cache_rows=64))
    >>> sp = {"ad": (torch.tensor([1, 2, 3]), torch.arange(3)), "user": (torch.tensor([5, 5, 6]), torch.arange(3))}
    >>> b = Batch(torch.randn(3, 2), torch.tensor([0., 1., 0.]), sp)
    >>> m(b).shape, sorted(m.state_dict())[:2]
    (torch.Size([3]), ['bot_l.0.bias', 'bot_l.0.weight'])
"""

from __future__ import annotations

from typing import Mapping, Sequence, cast

import numpy as np
import torch

from fbrapids.errors import ArgumentError, NotFoundError
from fbrapids.trainers.batch import Batch
from fbrapids.trainers.device import module_device
from fbrapids.trainers.models.base import CTRModel
from fbrapids.trainers.models.registry import register_model
from fbrapids.trainers.models.split import SideArrays, dense_rows, pooled_sides, to_tensor
from fbrapids.trainers.models.trial_parts import arms_tensor, stacked_mlp, zero_columns
from fbrapids.trainers.modules import DotInteraction, TieredEmbeddingBagCollection, arms_dots, mlp, mlp_forward
from fbrapids.trainers.sparse import StoreConfig


@register_model(short="dlrm")
class DLRM(CTRModel):
    """DLRM over a batch's dense matrix and its sparse features (see the module docstring).

    Args:
        dense_dim: number of dense features.
        sparse_features: names of the sparse features, in table order ``emb_l.0, emb_l.1, ...``.
        embedding_dim: embedding width (``m_spa``); also the bottom MLP's output width.
        bottom_mlp: hidden widths of the bottom MLP (``ln_bot`` without its ends).
        top_mlp: hidden widths of the top MLP (``ln_top`` without its ends).
        store: tier sizes / optimizer of every table (its ``dim`` is set to ``embedding_dim``).
        self_interaction: keep the diagonal of the interaction matrix (``arch_interaction_itself``).
        bias_vector: one more learned vector among the interacted ones, the same on every
            row (not in the reference): its dot product with an id's embedding is a
            first-order term of that id (the pipeline's default; docs/models.md).
        pooling: ``"sum"`` (the reference's ``EmbeddingBag``) or ``"mean"`` over a bag of ids
            (the pipeline's default: a bag of 64 tokens then weighs as much as one id,
            docs/models.md).
        dropout: dropout rate after each hidden ReLU of the top MLP while training
            (:func:`~fbrapids.trainers.modules.interaction.mlp_forward`; the layout is the same).
    """

    default_architecture = dict(bottom_mlp=[64, 32], top_mlp=[64, 32], bias_vector=True)

    def __init__(self, dense_dim: int, sparse_features: Sequence[str], embedding_dim: int = 16,
                 bottom_mlp: Sequence[int] = (64,), top_mlp: Sequence[int] = (64,),
                 store: StoreConfig | None = None, self_interaction: bool = False, pooling: str = "sum",
                 bias_vector: bool = False, dropout: float = 0.0) -> None:
        super().__init__()
        self.sparse_features = list(sparse_features)
        self.dropout = float(dropout)
        cfg = (store or StoreConfig()).with_(dim=embedding_dim)
        self.ln_bot = [dense_dim, *bottom_mlp, embedding_dim]
        self.bot_l = mlp(self.ln_bot, sigmoid_layer=-1)
        self.emb_l = TieredEmbeddingBagCollection(self.sparse_features, cfg, mode=pooling)
        self.bias_vector = None
        if bias_vector:
            scale = cfg.scale  # as a table's new row
            self.bias_vector = torch.nn.Parameter(torch.empty(embedding_dim).uniform_(-scale, scale))
        self.interaction = DotInteraction(1 + len(self.sparse_features) + int(bias_vector), self_interaction)
        self.ln_top = [embedding_dim + self.interaction.num_outputs, *top_mlp, 1]
        self.top_l = mlp(self.ln_top, sigmoid_layer=len(self.ln_top) - 2)

    @classmethod
    def cpu_sources(cls) -> list[str]:
        """The store's helpers and the dots' C pass (:mod:`~fbrapids.trainers.modules.arms_dots`)."""
        return [*super().cpu_sources(), arms_dots.source()]

    def forward(self, batch: Batch) -> torch.Tensor:
        dev = next(self.bot_l.parameters()).device  # the first layer's weight's
        x = self.bot_l(batch.dense.to(dev))
        pooled = self.emb_l.pooled_stack(batch.sparse).to(dev)  # [B, n_sparse, dim], in sparse_features order
        z = self.interaction(x, pooled, self.bias_vector)
        top = cast(torch.nn.Sequential, self.top_l[:-1])  # a Sequential's slice is one (torch types it Module)
        return mlp_forward(top, z, self.dropout, self.training).squeeze(1)

    def split_logits(self, req: SideArrays, rows: SideArrays, owner: np.ndarray, dense: Sequence[tuple[str, int]],
                     sparse: Sequence[str]) -> torch.Tensor:
        """Serving: every request-side bag looked up and pooled once per request, gathered by
        the row's request; the bottom MLP, the interactions and the top MLP per row."""
        dev = module_device(self)
        own = to_tensor(owner).to(dev)
        x = self.bot_l(dense_rows(req, rows, owner, dense, dev))
        pooled, _ = pooled_sides(self.emb_l, req, rows, own, dev)
        stack = torch.stack([pooled[f] for f in self.sparse_features], dim=1)
        return self.top_l[:-1](self.interaction(x, stack, self.bias_vector)).squeeze(1)

    def zero_candidate_inputs(self, dense: Sequence[str], sparse: Sequence[str], new_dense: Sequence[str] = (),
                              new_sparse: Sequence[str] = ()) -> list[str] | None:
        """The bottom MLP's candidate dense columns and the top MLP's columns of every
        interaction involving a candidate field."""
        done: list[str] = []
        zero_columns(self.bot_l[0], [list(dense).index(c) for c in new_dense], "bot_l.0", done)
        fields = {1 + self.sparse_features.index(f) for f in new_sparse}  # field 0: the bottom MLP's output
        li, lj = self.interaction.li.tolist(), self.interaction.lj.tolist()
        width = self.ln_bot[-1]
        cols = [width + k for k, (i, j) in enumerate(zip(li, lj)) if i in fields or j in fields]
        zero_columns(self.top_l[0], cols, "top_l.0", done)
        return done

    @staticmethod
    def batched_logits(models: Sequence[DLRM], dense: torch.Tensor, pooled: dict[str, torch.Tensor]) -> torch.Tensor:
        """The forward of a trial's arms at once: the bottom MLPs stacked, each arm's bias
        vector among its bags, the dot interactions of all arms' rows in one batch, the top
        MLPs (without the final sigmoid) stacked: ``[M, B]``."""
        m, b = dense.shape[:2]
        first = models[0]
        x = stacked_mlp([net.bot_l for net in models], dense)
        bags = pooled["emb_l"]
        bias = None
        if first.bias_vector is not None:
            bias = arms_tensor([cast(torch.Tensor, net.bias_vector) for net in models])  # [M, dim]: all have one
        in_c = arms_dots.fits(x, bags, bias)
        if in_c:  # the dots where the fields lie, in C (no concatenation, no bmm)
            z = arms_dots.arms_dots(x, bags, bias, first.interaction.self_interaction)
        else:
            if bias is not None:
                bags = torch.cat([bags, bias[:, None, None, :].expand(m, b, 1, bias.shape[1])], dim=2)
            z = first.interaction(x.reshape(m * b, -1), bags.reshape(m * b, bags.shape[2], bags.shape[3]))
        tops = [cast(torch.nn.Sequential, net.top_l[:-1]) for net in models]  # a Sequential's slice is one
        # (the C dots read their gradient by column: the first top layer's input gradient is laid out so)
        return stacked_mlp(tops, z.view(m, b, -1), input_grad_by_column=in_c).squeeze(2)

    def load_reference_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        """Load a state dict of the reference ``DLRM_Net`` (MLPs by name, tables into the stores).

        Raises ``KeyError`` / ``ValueError`` naming what does not fit.
        """
        mlps = {k: v for k, v in state.items() if k.startswith(("bot_l.", "top_l."))}
        missing, unexpected = self.load_state_dict(mlps, strict=False)
        missing = [k for k in missing if k.startswith(("bot_l.", "top_l."))]
        if missing or unexpected:
            raise NotFoundError(f"reference DLRM state dict does not fit: missing {missing}, unexpected {unexpected}")
        for k, f in enumerate(self.sparse_features):
            key = f"emb_l.{k}.weight"
            if key not in state:
                raise NotFoundError(f"reference DLRM state dict has no {key} for sparse feature {f!r}")
            w = state[key]
            self.emb_l.stores[f].assign(np.arange(w.shape[0], dtype=np.int64), w)

    def reference_state_dict(self, num_embeddings: Sequence[int]) -> dict[str, torch.Tensor]:
        """This model as a reference ``DLRM_Net`` state dict: the MLPs, and table ``k`` as a
        dense ``[num_embeddings[k], dim]`` matrix whose row ``i`` is the id ``i``."""
        if len(num_embeddings) != len(self.sparse_features):
            raise ArgumentError(f"{len(self.sparse_features)} tables, {len(num_embeddings)} sizes given")
        out = {k: v.detach().clone() for k, v in self.state_dict().items()
               if k.startswith(("bot_l.", "top_l."))}  # not the calibration (fbrapids' own, applied after)
        for k, (f, n) in enumerate(zip(self.sparse_features, num_embeddings)):
            out[f"emb_l.{k}.weight"] = torch.from_numpy(self.emb_l.stores[f].weights(np.arange(n, dtype=np.int64)))
        return out
