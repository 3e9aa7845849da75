"""Feature interactions: DLRM's pairwise dot products and the FM second-order term; the MLPs."""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn


class DotInteraction(nn.Module):
    """DLRM's ``interact_features`` with ``arch_interaction_op="dot"``.

    Stacks ``[x] + ly`` into ``[B, 1 + n, d]``, takes all pairwise dot products, keeps the
    strictly lower triangle (``self_interaction=True`` keeps the diagonal too) in the
    reference implementation's row-major order, and concatenates them after ``x``.

    Example:
        >>> import torch
        >>> x = torch.ones(2, 3); ly = [torch.ones(2, 3), 2 * torch.ones(2, 3)]
        >>> DotInteraction(3)(x, ly).tolist()[0]
        [1.0, 1.0, 1.0, 3.0, 6.0, 6.0]
        >>> DotInteraction(4)(x, torch.stack(ly, 1), bias=torch.ones(3)).tolist()[0]  # the bias one more field
        [1.0, 1.0, 1.0, 3.0, 6.0, 6.0, 3.0, 3.0, 6.0]
    """

    # buffers (registered in __init__): the pairs' row and column fields, their positions in
    # the flattened interaction matrix (and transposed), and the pairs (i, i)
    li: torch.Tensor
    lj: torch.Tensor
    flat: torch.Tensor
    flat_t: torch.Tensor
    diag: torch.Tensor

    def __init__(self, num_features: int, self_interaction: bool = False) -> None:
        super().__init__()
        off = 1 if self_interaction else 0
        ni = num_features
        self.num_features = ni
        self.self_interaction = self_interaction
        self.register_buffer("li", torch.tensor([i for i in range(ni) for j in range(i + off)], dtype=torch.long),
                             persistent=False)
        self.register_buffer("lj", torch.tensor([j for i in range(ni) for j in range(i + off)], dtype=torch.long),
                             persistent=False)
        # position of (li, lj) in the flattened [ni * ni] interaction matrix, and of (lj, li)
        self.register_buffer("flat", self.li * ni + self.lj, persistent=False)
        self.register_buffer("flat_t", self.lj * ni + self.li, persistent=False)
        # the pairs (i, i), from the index lists (torch.nonzero has no meta-device form: a model
        # sized on torch's meta device before it is loaded builds this too)
        pairs = [(i, j) for i in range(ni) for j in range(i + off)]
        self.register_buffer("diag", torch.tensor([k for k, (i, j) in enumerate(pairs) if i == j], dtype=torch.long),
                             persistent=False)
        self._grad_buffer: torch.Tensor | None = None  # the backward's [B, ni * ni] scratch, kept

    @property
    def num_outputs(self) -> int:
        return int(self.li.numel())

    def forward(self, x: torch.Tensor, ly: Sequence[torch.Tensor] | torch.Tensor,
                bias: torch.Tensor | None = None) -> torch.Tensor:
        """``x`` ``[B, d]``; ``ly`` the pooled bags, a list of ``[B, d]`` or one ``[B, n, d]``;
        ``bias`` (DLRM's bias vector, ``[d]``) one more field after them in every row.  On the
        CPU (float32, within its limits) the dots are :func:`~fbrapids.trainers.modules.arms_dots.arms_dots`'s
        C pass, as one arm: each dot once, where the fields lie, the bias not copied per row (at
        2,048 rows of 28 fields, forward and backward 3.4 ms -> 1.4 ms a step on one thread);
        else ``bmm(T, T^T)``."""
        from fbrapids.trainers.modules import arms_dots

        b, d = x.shape
        row = None if bias is None else bias[None]
        if isinstance(ly, torch.Tensor) and arms_dots.fits(x[None], ly[None], row):
            return arms_dots.arms_dots(x[None], ly[None], row, self.self_interaction)[0]
        if bias is not None:
            ly = (torch.cat([ly, bias.expand(b, 1, d)], dim=1) if isinstance(ly, torch.Tensor)
                  else [*ly, bias.expand(b, d)])
        if isinstance(ly, torch.Tensor):
            t = torch.cat([x.unsqueeze(1), ly], dim=1)
        else:
            t = torch.cat([x, *ly], dim=1).view(b, -1, d)
        buf = self._grad_buffer
        if buf is None or buf.shape != (b, t.shape[1] ** 2) or buf.dtype != t.dtype or buf.device != t.device:
            # positions outside flat / flat_t (the diagonal without self-interaction) stay 0
            buf = self._grad_buffer = torch.zeros((b, t.shape[1] ** 2), dtype=t.dtype, device=t.device)
        return torch.cat([x, _LowerTriangleDots.apply(t, self.flat, self.flat_t, self.diag, buf)], dim=1)


class _LowerTriangleDots(torch.autograd.Function):
    """``bmm(T, T^T)`` flattened and gathered at ``flat``: the reference's ``Z[:, li, lj]``.

    Forward: one ``bmm`` and one ``index_select``.  Backward: ``dT = (G + G^T) T`` with
    ``G`` the gradient scattered into a ``[B, n, n]`` matrix; the symmetric ``G + G^T`` is
    written straight into a kept scratch buffer (the gradient scattered to ``flat`` and to the
    transposed positions ``flat_t``, doubled on the diagonal ``diag`` when it is kept), then
    one ``bmm`` (autograd through ``bmm`` + advanced indexing takes two ``bmm`` and an
    ``index_put``; building ``G`` with ``zeros`` and adding its transpose costs more than
    the ``bmm``).
    """

    @staticmethod
    def forward(ctx, t: torch.Tensor, flat: torch.Tensor, flat_t: torch.Tensor, diag: torch.Tensor,
                buf: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        b, n, _ = t.shape
        ctx.save_for_backward(t, flat, flat_t, diag)
        ctx.buf = buf
        return torch.bmm(t, t.transpose(1, 2)).view(b, n * n).index_select(1, flat)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        t, flat, flat_t, diag = ctx.saved_tensors
        b, n, _ = t.shape
        g, grad = ctx.buf, grad.contiguous()
        # scatter_ along the rows, the positions broadcast over the batch (an expanded view):
        # index_copy_ on dim 1 takes ~2.8x as long at the demo's [2048, 28 * 28] (no position
        # repeats within a row, so every element is written once, the same bits)
        g.scatter_(1, flat_t.expand(b, -1), grad)
        g.scatter_(1, flat.expand(b, -1), grad)
        if len(diag):  # self-interaction: d(t_i . t_i) / d t_i = 2 t_i
            g.scatter_(1, flat.index_select(0, diag).expand(b, -1), 2 * grad.index_select(1, diag))
        return torch.bmm(g.view(b, n, n), t), None, None, None, None


def fm_second_order(fields: torch.Tensor) -> torch.Tensor:
    """Factorization-machine pairwise term ``0.5 * sum_d((sum_f v)^2 - sum_f v^2)`` over ``[B, F, d]``.

    Example:
        >>> import torch
        >>> fm_second_order(torch.tensor([[[1.0], [2.0], [3.0]]])).tolist()
        [11.0]
    """
    s = fields.sum(dim=1)
    return 0.5 * (s * s - (fields * fields).sum(dim=1)).sum(dim=1)


def mlp(sizes: Sequence[int], sigmoid_layer: int = -1) -> nn.Sequential:
    """Linear layers each followed by ReLU (Sigmoid at index ``sigmoid_layer``), laid out as
    DLRM's ``create_mlp`` (``Sequential`` of Linear, act, Linear, act, ...).

    Example:
        >>> [type(m).__name__ for m in mlp([4, 3, 1], sigmoid_layer=1)]
        ['Linear', 'ReLU', 'Linear', 'Sigmoid']
    """
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(int(sizes[i]), int(sizes[i + 1]), bias=True))
        layers.append(nn.Sigmoid() if i == sigmoid_layer else nn.ReLU())
    return nn.Sequential(*layers)


def plain_mlp(sizes: Sequence[int]) -> nn.Sequential:
    """ReLU MLP whose last layer is linear (outputs a logit / embedding)."""
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(int(sizes[i]), int(sizes[i + 1])))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def mlp_forward(layers: nn.Sequential, x: torch.Tensor, dropout: float = 0.0, training: bool = False) -> torch.Tensor:
    """``layers(x)``, with dropout at rate ``dropout`` after each ReLU while ``training``
    (the models apply it this way, not as modules: a model's layout, its state dict and its
    exports are the same whatever its dropout).

    Example:
        >>> import torch
        >>> _ = torch.manual_seed(0)  # one net: drawn at random, its ReLUs all read 0 now and then (no dropout to see)
        >>> net = plain_mlp([3, 4, 1])
        >>> x = torch.ones(2, 3)
        >>> torch.equal(mlp_forward(net, x, 0.5, training=False), net(x))
        True
        >>> _ = torch.manual_seed(0); torch.equal(mlp_forward(net, x, 0.5, training=True), net(x))
        False
    """
    if not (dropout and training):
        return layers(x)
    for layer in layers:
        x = layer(x)
        if isinstance(layer, nn.ReLU):
            x = F.dropout(x, dropout, training=True)
    return x
