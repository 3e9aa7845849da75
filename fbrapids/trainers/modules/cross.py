"""DCN-v2's cross network (Wang et al., 2021): explicit feature crosses of bounded degree.

Layer ``l`` maps ``x_l`` to ``x_{l+1} = x_0 * (W_l x_l + b_l) + x_l`` (elementwise product with
the network's input ``x_0``), so ``L`` layers hold every cross of degree up to ``L + 1`` of
the input's coordinates.  ``W_l`` is a full ``[d, d]`` matrix or, with ``low_rank=r``, the
product ``V_l U_l`` of a ``[r, d]`` and a ``[d, r]`` one (the paper's low-rank DCN, cheaper by
``d / 2r``), laid out as TensorFlow Recommenders' ``tfrs.layers.dcn.Cross``: ``U`` without a
bias, then ``V`` with one; weights Glorot-uniform, biases 0.

Example:
    >>> import torch
    >>> net = CrossNetwork(4, layers=2, low_rank=2)
    >>> x0 = torch.randn(3, 4)
    >>> net(x0).shape
    torch.Size([3, 4])
    >>> full = CrossNetwork(4, layers=1)
    >>> with torch.no_grad():
    ...     _ = full.w[0].weight.zero_(), full.w[0].bias.fill_(1.0)
    >>> torch.equal(full(x0), x0 * 1.0 + x0)  # W = 0, b = 1: x0 * 1 + x0
    True
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn


class CrossNetwork(nn.Module):
    """``layers`` cross layers over inputs of ``width`` coordinates (module docstring).

    Args:
        width: the input's width ``d``.
        layers: cross layers ``L``.
        low_rank: ``r`` (``W_l = V_l U_l``), or None for full ``[d, d]`` matrices.
    """

    def __init__(self, width: int, layers: int = 3, low_rank: int | None = None) -> None:
        super().__init__()
        self.width, self.layers, self.low_rank = int(width), int(layers), low_rank
        if low_rank is None:
            w = [nn.Linear(width, width) for _ in range(layers)]
            for lin in w:
                _glorot(lin)
            self.w = nn.ModuleList(w)
        else:
            u = [nn.Linear(width, int(low_rank), bias=False) for _ in range(layers)]
            v = [nn.Linear(int(low_rank), width) for _ in range(layers)]
            for lin in [*u, *v]:
                _glorot(lin)
            self.u, self.v = nn.ModuleList(u), nn.ModuleList(v)

    def project(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """``W_l x + b_l`` of layer ``layer``."""
        if self.low_rank is None:
            return self.w[layer](x)
        return self.v[layer](self.u[layer](x))

    def forward(self, x0: torch.Tensor) -> torch.Tensor:
        x = x0
        for layer in range(self.layers):
            x = x0 * self.project(layer, x) + x
        return x

    def readers(self) -> Sequence[nn.Linear]:
        """The layers whose weight columns read ``x_l`` (a trial zeroes a candidate's columns
        there: :func:`fbrapids.trainers.arms.zero_candidate_inputs`)."""
        return _linears(self.w if self.low_rank is None else self.u)


def _linears(layers: nn.ModuleList) -> list[nn.Linear]:
    """``layers``, built of :class:`~torch.nn.Linear` only, typed as such."""
    out = [lin for lin in layers if isinstance(lin, nn.Linear)]
    assert len(out) == len(layers)  # the constructor puts nothing else there
    return out


def _glorot(lin: nn.Linear) -> None:
    nn.init.xavier_uniform_(lin.weight)
    if lin.bias is not None:
        nn.init.zeros_(lin.bias)
