"""Aggregators over ragged behaviour sequences: sum, max, attentive, multi-query attentive.

A batch's behaviour embeddings are ragged: ``keys [R, d]`` holds every behaviour of every
sample, ``segments [R]`` the sample (row) each belongs to (see
:func:`fbrapids.trainers.modules.bag_segments`).  Every aggregator returns ``[B, ...]``;
a row with no behaviours gets zeros.

* :func:`sum_pool`, :func:`max_pool`.
* :class:`AttentivePooling`: DIN-style weights ``a = MLP([q, k, q' * k, q' - k])`` (``q'``
  is ``q`` projected to the key width when the widths differ), the query being e.g. the ad's
  image embedding; weights are used as they are (DIN) or softmax-normalised per row.
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

from fbrapids.trainers.modules.attention import attention_unit
from fbrapids.errors import ArgumentError


def sum_pool(keys: torch.Tensor, segments: torch.Tensor, rows: int) -> torch.Tensor:
    """Per-row sum ``[rows, d]`` of ragged ``keys``."""
    out = keys.new_zeros((rows, keys.shape[1]))
    return out.index_add(0, segments, keys)


def max_pool(keys: torch.Tensor, segments: torch.Tensor, rows: int) -> torch.Tensor:
    """Per-row element-wise max ``[rows, d]`` of ragged ``keys`` (zeros for empty rows)."""
    out = keys.new_zeros((rows, keys.shape[1]))
    idx = segments.unsqueeze(1).expand_as(keys)
    return out.scatter_reduce(0, idx, keys, reduce="amax", include_self=False)


def segment_softmax(scores: torch.Tensor, segments: torch.Tensor, rows: int) -> torch.Tensor:
    """Softmax of ``scores [R]`` within each segment (numerically stable).

    Example:
        >>> segment_softmax(torch.tensor([0.0, 0.0, 5.0]), torch.tensor([0, 0, 1]), 2).tolist()
        [0.5, 0.5, 1.0]
    """
    top = scores.new_full((rows,), float("-inf")).scatter_reduce(0, segments, scores, reduce="amax",
                                                                include_self=True)
    e = torch.exp(scores - top.index_select(0, segments))
    den = scores.new_zeros(rows).index_add(0, segments, e)
    return e / den.index_select(0, segments)


class AttentivePooling(nn.Module):
    """Attention-weighted sum of behaviours against one query per row.

    Args:
        query_dim: width of the query (e.g. the ad image embedding).
        key_dim: width of the behaviour keys (e.g. behaviour image embeddings).
        hidden: widths of the attention MLP (PReLU between layers).
        normalize: ``"none"`` (DIN: raw weights) or ``"softmax"`` (per row).

    Example:
        >>> att = AttentivePooling(4, 4)
        >>> att(torch.randn(2, 4), torch.randn(3, 4), torch.tensor([0, 0, 1])).shape
        torch.Size([2, 4])
    """

    def __init__(self, query_dim: int, key_dim: int, hidden: Sequence[int] = (36,), normalize: str = "none") -> None:
        super().__init__()
        if normalize not in ("none", "softmax"):
            raise ArgumentError(f"normalize must be 'none' or 'softmax', got {normalize!r}")
        self.normalize = normalize
        self.key_dim = key_dim
        self.proj = nn.Identity() if query_dim == key_dim else nn.Linear(query_dim, key_dim, bias=False)
        self.unit = attention_unit(query_dim + 3 * key_dim, hidden)

    def weights(self, query: torch.Tensor, keys: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
        """Attention weight ``[R]`` of each behaviour."""
        q = query.index_select(0, segments)
        qp = self.proj(q)
        w = self.unit(torch.cat([q, keys, qp * keys, qp - keys], dim=1)).squeeze(1)
        if self.normalize == "softmax":
            w = segment_softmax(w, segments, query.shape[0])
        return w

    def forward(self, query: torch.Tensor, keys: torch.Tensor, segments: torch.Tensor,
                values: torch.Tensor | None = None) -> torch.Tensor:
        """``[B, value_dim]``: per row, the behaviours' ``values`` (default: ``keys``) weighted."""
        v = keys if values is None else values
        w = self.weights(query, keys, segments)
        return sum_pool(w.unsqueeze(1) * v, segments, query.shape[0])


class MultiQueryAttentivePooling(nn.Module):
    """Several attention channels over the same behaviours, one per query; outputs concatenated.

    Args:
        query_dims: width of each channel's query, e.g. ``[image_dim, id_dims]`` for the
            ad image embedding and the ad's (concatenated) id embeddings.
        key_dim: width of the behaviour keys (and values).
        hidden, normalize: as :class:`AttentivePooling`.

    Example:
        >>> mq = MultiQueryAttentivePooling([4, 6], 4)
        >>> mq([torch.randn(2, 4), torch.randn(2, 6)], torch.randn(3, 4), torch.tensor([0, 1, 1])).shape
        torch.Size([2, 8])
    """

    def __init__(self, query_dims: Sequence[int], key_dim: int, hidden: Sequence[int] = (36,),
                 normalize: str = "none") -> None:
        super().__init__()
        self.channels = nn.ModuleList([AttentivePooling(q, key_dim, hidden, normalize) for q in query_dims])
        self.out_dim = key_dim * len(self.channels)

    def forward(self, queries: Sequence[torch.Tensor], keys: torch.Tensor, segments: torch.Tensor,
                values: torch.Tensor | None = None) -> torch.Tensor:
        if len(queries) != len(self.channels):
            raise ArgumentError(f"MultiQueryAttentivePooling has {len(self.channels)} channels, "
                             f"got {len(queries)} queries")
        return torch.cat([ch(q, keys, segments, values) for ch, q in zip(self.channels, queries)], dim=1)
