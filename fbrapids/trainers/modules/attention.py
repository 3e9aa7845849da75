"""DIN-style attention pooling over a ragged behaviour sequence (Zhou et al., 2018)."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn



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

class AttentionPooling(nn.Module):
    """Weight each behaviour embedding by an MLP of ``[q, k, q - k, q * k]`` and sum per row.

    As in DIN, the weights are not softmax-normalised.  Sequences are ragged: ``keys``
    holds every element of every row and ``segments`` the row each element belongs to.
    ``mean=True`` divides a row's weighted sum by its sequence's length (an empty one stays
    0): a history that grows over the log (the held-out day's are the longest) then does not
    scale the pooled vector out of the range trained on (docs/models.md).

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
    """

    def __init__(self, dim: int, hidden: Sequence[int] = (36,), mean: bool = False) -> None:
        super().__init__()
        self.unit = attention_unit(4 * dim, hidden)
        self.mean = bool(mean)

    def forward(self, query: torch.Tensor, keys: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
        q = query.index_select(0, segments)
        w = self.unit(torch.cat([q, keys, q - keys, q * keys], dim=1))
        out = torch.zeros_like(query).index_add(0, segments, w * keys)
        if self.mean:
            n = torch.bincount(segments, minlength=len(query)).clamp_(min=1).to(out.dtype)
            out = out / n.unsqueeze(1)
        return out
