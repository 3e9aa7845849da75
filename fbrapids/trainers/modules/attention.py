"""DIN-style attention pooling over a ragged behaviour sequence (Zhou et al., 2018): the one
attention module of DIN and of DICM's aggregators (:mod:`fbrapids.ams.pooling`)."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from fbrapids.errors import ArgumentError


def attention_unit(in_dim: int, hidden: Sequence[int]) -> nn.Sequential:
    """DIN's local activation unit: Linear + PReLU per hidden width, then one score.

    Example:
        >>> attention_unit(16, (8,))
        Sequential(
          (0): Linear(in_features=16, out_features=8, bias=True)
          (1): PReLU(num_parameters=8)
          (2): Linear(in_features=8, out_features=1, bias=True)
        )
    """
    layers: list[nn.Module] = []
    prev = in_dim
    for h in hidden:
        layers += [nn.Linear(prev, h), nn.PReLU(h)]
        prev = h
    layers.append(nn.Linear(prev, 1))
    return nn.Sequential(*layers)


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


class AttentionPooling(nn.Module):
    """DIN's attention pooling, the one of every model here (DIN, DICM's aggregators): weight
    each behaviour key ``k`` by an MLP of ``[q, k, q' - k, q' * k]`` (``q'``: the query
    projected to the key width when the widths differ) and sum the weighted values (default:
    the keys) per row.

    As in DIN, the weights are not softmax-normalised (``normalize="softmax"``: they are, per
    row).  Sequences are ragged: ``keys`` holds every element of every row and ``segments`` the
    row each element belongs to.  ``mean=True`` divides a row's weighted sum by its
    sequence's length (an empty one stays 0): a history that grows over the log (the held-out
    day's are the longest) then does not scale the pooled vector out of the range trained on
    (docs/models.md).

    Args:
        dim: width of the query.
        hidden: widths of the attention MLP (PReLU between layers).
        mean: divide by the sequence's length.
        key_dim: width of the keys (default ``dim``).
        normalize: ``"none"`` (DIN: raw weights) or ``"softmax"`` (per row).

    Example:
        >>> import torch
        >>> att = AttentionPooling(4)
        >>> out = att(torch.randn(2, 4), torch.randn(3, 4), torch.tensor([0, 0, 1]))
        >>> out.shape
        torch.Size([2, 4])
        >>> q, k, seg = torch.randn(1, 4), torch.randn(1, 4), torch.tensor([0, 0])
        >>> mean = AttentionPooling(4, mean=True); mean.unit = att.unit
        >>> bool(torch.allclose(mean(q, k.repeat(2, 1), seg), att(q, k, seg[:1])))  # a repeated key: its own weight
        True
        >>> AttentionPooling(3, key_dim=6)(torch.randn(2, 3), torch.randn(3, 6), torch.tensor([0, 0, 1])).shape
        torch.Size([2, 6])
    """

    def __init__(self, dim: int, hidden: Sequence[int] = (36,), mean: bool = False, key_dim: int | None = None,
                 normalize: str = "none") -> None:
        super().__init__()
        if normalize not in ("none", "softmax"):
            raise ArgumentError(f"normalize must be 'none' or 'softmax', got {normalize!r}")
        key_dim = dim if key_dim is None else int(key_dim)
        self.key_dim, self.normalize, self.mean = key_dim, normalize, bool(mean)
        self.proj: nn.Module = nn.Identity() if dim == key_dim else nn.Linear(dim, key_dim, bias=False)
        self.unit = attention_unit(dim + 3 * key_dim, hidden)

    def weights(self, query: torch.Tensor, keys: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
        """Attention weight ``[R]`` of each behaviour."""
        q = query.index_select(0, segments)
        qp = self.proj(q)
        w = self.unit(torch.cat([q, keys, qp - keys, qp * keys], dim=1)).squeeze(1)
        return segment_softmax(w, segments, len(query)) if self.normalize == "softmax" else w

    def forward(self, query: torch.Tensor, keys: torch.Tensor, segments: torch.Tensor,
                values: torch.Tensor | None = None) -> torch.Tensor:
        """``[B, value width]``: per row, the behaviours' ``values`` (default: ``keys``) weighted."""
        v = keys if values is None else values
        w = self.weights(query, keys, segments)
        out = v.new_zeros((len(query), v.shape[1])).index_add(0, segments, w.unsqueeze(1) * v)
        if self.mean:
            n = torch.bincount(segments, minlength=len(query)).clamp_(min=1).to(out.dtype)
            out = out / n.unsqueeze(1)
        return out
