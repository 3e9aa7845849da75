"""What the models' trial methods share: zeroing the weights that read a candidate's inputs
(:meth:`~fbrapids.trainers.models.base.CTRModel.zero_candidate_inputs`, the arms' common
start: :mod:`fbrapids.trainers.arms`) and running the arms' MLPs stacked (a model's
``batched_logits``: :mod:`fbrapids.trainers.arms_batched`).

Example:
    >>> lin = torch.nn.Linear(3, 2); done = []
    >>> zero_columns(lin, [1], "head", done); done, lin.weight[:, 1].abs().sum().item()
    (['head.weight[:, [1]]'], 0.0)
    >>> embedding_blocks(1, 2, ["a", "b", "c"], ["b"])  # b's two columns after one dense and a's two
    [3, 4]
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING, Sequence

import torch

from fbrapids.errors import ArgumentError

if TYPE_CHECKING:
    from fbrapids.trainers.modules import TieredEmbeddingBagCollection


def zero_columns(layer: object, cols: list[int], name: str, done: list[str]) -> None:
    """Zero the weight columns ``cols`` of ``layer`` (a model's :class:`~torch.nn.Linear`, named
    ``name``) and note it in ``done``."""
    if cols:
        if not isinstance(layer, torch.nn.Linear):
            raise ArgumentError(f"{name}: expected a torch.nn.Linear, got {type(layer).__name__}")
        with torch.no_grad():
            layer.weight[:, cols] = 0
        done.append(f"{name}.weight[:, {cols}]")


def first_linear(seq: torch.nn.Module) -> torch.nn.Linear:
    """The first :class:`~torch.nn.Linear` of ``seq`` (an MLP)."""
    return next(m for m in seq.modules() if isinstance(m, torch.nn.Linear))


def embedding_blocks(offset: int, dim: int, features: Sequence[str], new: Sequence[str]) -> list[int]:
    """Columns of the ``new`` features' embeddings in ``[dense..., emb(f) for f in features]``."""
    return [offset + k * dim + d for k, f in enumerate(features) if f in new for d in range(dim)]


def zero_table(collection: TieredEmbeddingBagCollection, table: str) -> None:
    """Replace ``table``'s store in ``collection`` by one whose new rows start at 0 (nothing is
    looked up yet)."""
    from fbrapids.trainers.sparse import TieredEmbeddingStore

    old = collection.stores.pop(table)
    config, name, device = old.config.with_(init_scale=0.0), old.name, old.device
    del old
    gc.collect()  # its SSD directory (a weakly held registration) is free again
    collection.stores[table] = TieredEmbeddingStore(config, name=name, device=device)


def stacked_mlp(layers: Sequence[torch.nn.Sequential], x: torch.Tensor) -> torch.Tensor:
    """The arms' MLPs (one ``Sequential`` of Linear / ReLU / Sigmoid each, same shapes) on
    ``x`` ``[M, B, in]``: each Linear as one ``baddbmm`` over the arms' stacked weights.

    Example:
        >>> from fbrapids.trainers.modules import mlp
        >>> nets = [mlp([3, 4, 2]) for _ in range(2)]
        >>> x = torch.randn(2, 5, 3)
        >>> torch.allclose(stacked_mlp(nets, x), torch.stack([n(x[k]) for k, n in enumerate(nets)]), atol=1e-6)
        True
    """
    for parts in zip(*layers):
        first = parts[0]
        if isinstance(first, torch.nn.Linear):
            w = torch.stack([p.weight for p in parts])
            if first.bias is not None:
                x = torch.baddbmm(torch.stack([p.bias for p in parts]).unsqueeze(1), x, w.transpose(1, 2))
            else:
                x = torch.bmm(x, w.transpose(1, 2))
        elif isinstance(first, torch.nn.ReLU):
            x = torch.relu(x)
        elif isinstance(first, torch.nn.Sigmoid):
            x = torch.sigmoid(x)
        else:
            raise ArgumentError(f"stacked_mlp: no batched form of {type(first).__name__}")
    return x


def stacked_linear_term(layers: Sequence[torch.nn.Linear], dense: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Wide&Deep's and DeepFM's first-order part for every arm (:func:`~fbrapids.trainers.models.wide_deep.linear_term`):
    the arms' linear maps of the dense features plus their per-id weights ``[M, B, F, 1]``
    summed over the features: ``[M, B]``."""
    return stacked_mlp([torch.nn.Sequential(lin) for lin in layers], dense).squeeze(2) + weights.sum(dim=2).squeeze(2)
