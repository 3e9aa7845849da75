"""Model forward passes over request-side and row-side inputs, without repeating the request.

Scoring one request against N items, the request-side inputs are the same for every row.
:func:`split_forward` asks the model for its split forward
(:meth:`~fbrapids.trainers.models.base.CTRModel.split_logits`), which computes them once
per request and broadcasts them by the row's request index:

* Wide&Deep: the request's wide terms and its share of the deep MLP's first layer
  (``W[:, request columns] @ x_request``) once per request, the item side's once per row.
* DLRM, DeepFM and DIN: every request-side bag (a query's tokens, interests) is looked up and
  pooled once per request, over R rows, and the pooled vector gathered by the row's request
  index; only the per-row arithmetic (bottom MLP, dot interactions, FM term, top MLP) runs
  per row.  DIN's behaviour sequence is looked up once per request too; its attention
  compares each candidate with each history entry, so that part is the row's work (counted
  as such by :mod:`fbrapids.serving.cost`), attended in groups of rows of at most
  :data:`~fbrapids.trainers.models.split.ATTENTION_PAIRS` entries.
* any other :class:`~fbrapids.trainers.models.base.CTRModel`:
  :func:`~fbrapids.trainers.models.split.broadcast_batch` builds the full batch by
  gathering request rows by index (features are still computed once per request and per
  item; only the model's own arithmetic is repeated).

Both give the training-side ``model(batch)`` scores on the same rows (the tests check it).

Example:
    >>> import numpy as np
    >>> req = SideArrays(np.ones((1, 1), np.float32), {"u": (np.array([7]), np.array([0, 1]))})
    >>> rows = SideArrays(np.zeros((2, 1), np.float32), {"a": (np.array([1, 2]), np.array([0, 1, 2]))})
    >>> b = broadcast_batch(req, rows, np.array([0, 0]), dense=[("request", 0), ("item", 0)], sparse=["u", "a"])
    >>> b.dense.tolist(), b.sparse["u"][0].tolist()
    ([[1.0, 0.0], [1.0, 0.0]], [7, 7])
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from fbrapids.trainers.device import module_device
from fbrapids.trainers.models.base import CTRModel, has_split_forward
from fbrapids.trainers.models.split import SideArrays, broadcast_batch, to_tensor

__all__ = ["SideArrays", "broadcast_batch", "to_tensor", "supports_split", "split_forward"]


def supports_split(model: CTRModel) -> bool:
    """Whether :func:`split_forward` computes the request side once for this model
    (:func:`~fbrapids.trainers.models.base.has_split_forward`).

    >>> from fbrapids.trainers.models import DLRM
    >>> supports_split(DLRM(1, ["a"], embedding_dim=2, bottom_mlp=[2], top_mlp=[2]))
    True
    """
    return has_split_forward(model)


@torch.no_grad()
def split_forward(model: CTRModel, req: SideArrays, rows: SideArrays, owner: np.ndarray,
                  dense: Sequence[tuple[str, int]], sparse: Sequence[str]) -> torch.Tensor:
    """Logits ``[N]`` of ``N`` rows whose request-side inputs are row ``owner[i]`` of ``req``.

    ``dense`` / ``sparse`` as in :func:`~fbrapids.trainers.models.split.broadcast_batch`.
    """
    if has_split_forward(model):
        return model.split_logits(req, rows, owner, dense, sparse)
    return model(broadcast_batch(req, rows, owner, dense, sparse).to(module_device(model)))
