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

    Example:
        >>> import torch
        >>> att = AttentionPooling(4)
        >>> out = att(torch.randn(2, 4), torch.randn(3, 4), torch.tensor([0, 0, 1]))
        >>> out.shape
        torch.Size([2, 4])
    """

    def __init__(self, dim: int, hidden: Sequence[int] = (36,)) -> None:
        super().__init__()
        self.unit = attention_unit(4 * dim, hidden)

    def forward(self, query: torch.Tensor, keys: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
        q = query.index_select(0, segments)
        w = self.unit(torch.cat([q, keys, q - keys, q * keys], dim=1))
        out = torch.zeros_like(query)
        return out.index_add(0, segments, w * keys)
