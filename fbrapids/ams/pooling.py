"""Aggregators over ragged behaviour sequences: sum, max, attentive, multi-query attentive.

A batch's behaviour embeddings are ragged: ``keys [R, d]`` holds every behaviour of every
sample, ``segments [R]`` the sample (row) each belongs to (see
:func:`fbrapids.trainers.modules.bag_segments`).  Every aggregator returns ``[B, ...]``;
a row with no behaviours gets zeros.

* :func:`sum_pool`, :func:`max_pool`.
* DIN's attention, :class:`~fbrapids.trainers.modules.attention.AttentionPooling` (the one
  attention module: weights ``a = MLP([q, k, q' - k, q' * k])``, ``q'`` the query projected
  to the key width when the widths differ), the query being e.g. the ad's image embedding;
  weights are used as they are (DIN) or softmax-normalised per row.
* :class:`MultiQueryAttentivePooling` ("Image Matters", section 4.3): one attention channel
  per query (the ad image embedding, the ad id embeddings), all over the same behaviours;
  the channels' outputs are concatenated.

Example:
    >>> import torch
    >>> keys = torch.tensor([[1.0, 0.0], [3.0, 2.0], [5.0, 1.0]]); seg = torch.tensor([0, 0, 2])
    >>> sum_pool(keys, seg, 3).tolist(), max_pool(keys, seg, 3).tolist()
    ([[4.0, 2.0], [0.0, 0.0], [5.0, 1.0]], [[3.0, 2.0], [0.0, 0.0], [5.0, 1.0]])
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from fbrapids.errors import ArgumentError
from fbrapids.trainers.modules.attention import AttentionPooling


def sum_pool(keys: torch.Tensor, segments: torch.Tensor, rows: int) -> torch.Tensor:
    """Per-row sum ``[rows, d]`` of ragged ``keys``."""
    out = keys.new_zeros((rows, keys.shape[1]))
    return out.index_add(0, segments, keys)


def max_pool(keys: torch.Tensor, segments: torch.Tensor, rows: int) -> torch.Tensor:
    """Per-row element-wise max ``[rows, d]`` of ragged ``keys`` (zeros for empty rows)."""
    out = keys.new_zeros((rows, keys.shape[1]))
    idx = segments.unsqueeze(1).expand_as(keys)
    return out.scatter_reduce(0, idx, keys, reduce="amax", include_self=False)


class MultiQueryAttentivePooling(nn.Module):
    """Several attention channels over the same behaviours, one per query; outputs concatenated.

    Args:
        query_dims: width of each channel's query, e.g. ``[image_dim, id_dims]`` for the
            ad image embedding and the ad's (concatenated) id embeddings.
        key_dim: width of the behaviour keys (and values).
        hidden, normalize: as :class:`~fbrapids.trainers.modules.attention.AttentionPooling`.

    Example:
        >>> mq = MultiQueryAttentivePooling([4, 6], 4)
        >>> mq([torch.randn(2, 4), torch.randn(2, 6)], torch.randn(3, 4), torch.tensor([0, 1, 1])).shape
        torch.Size([2, 8])
    """

    def __init__(self, query_dims: Sequence[int], key_dim: int, hidden: Sequence[int] = (36,),
                 normalize: str = "none") -> None:
        super().__init__()
        self.channels = nn.ModuleList([AttentionPooling(q, hidden, key_dim=key_dim, normalize=normalize)
                                       for q in query_dims])
        self.out_dim = key_dim * len(self.channels)

    def forward(self, queries: Sequence[torch.Tensor], keys: torch.Tensor, segments: torch.Tensor,
                values: torch.Tensor | None = None) -> torch.Tensor:
        if len(queries) != len(self.channels):
            raise ArgumentError(f"MultiQueryAttentivePooling has {len(self.channels)} channels, "
                             f"got {len(queries)} queries")
        return torch.cat([ch(q, keys, segments, values) for ch, q in zip(self.channels, queries)], dim=1)
