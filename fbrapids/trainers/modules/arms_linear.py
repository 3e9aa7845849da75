"""One Linear layer of a trial's arms at once, its input's gradient laid out by column.

The arms' stacked MLPs (:func:`fbrapids.trainers.models.trial_parts.stacked_mlp`) run each
Linear as ``baddbmm(bias, x, weight^T)`` over ``[M, B, in]``.  Autograd's backward gives the
input's gradient as ``grad @ weight`` (``[M, B, out] @ [M, out, in]``), which MKL runs at half
its rate when ``out`` is small and ``in`` wide, as for DLRM's first top layer (64 outputs of
the 422 dots and bottom outputs; 22 ms against 11 ms for 8 arms x 2,048 rows on a 2-core AMD
EPYC).  :func:`arms_linear` computes the same product as ``weight^T @ grad^T`` and hands it
back as its transpose, ``[M, B, in]`` laid out ``[M, in, B]`` (by column): the arms' dots
(:func:`~fbrapids.trainers.modules.arms_dots.arms_dots`) read it so, sixteen samples of a
column side by side, as their lanes want it, with no transpose.  The weight's and the bias's
gradients are autograd's own computations, so their bits are baddbmm's; the input's are the
same sums, which MKL gave the same bits on that machine for every layer shape of the trial's
DLRM (another BLAS may round them otherwise).

Example:
    >>> g = torch.Generator().manual_seed(0)
    >>> x = torch.randn(2, 5, 3, generator=g, requires_grad=True)
    >>> w, b = torch.randn(2, 4, 3, generator=g, requires_grad=True), torch.randn(2, 1, 4, generator=g, requires_grad=True)
    >>> y = arms_linear(x, w, b)
    >>> ref = torch.baddbmm(b, x, w.transpose(1, 2))
    >>> torch.allclose(y, ref)
    True
    >>> (gx,), (gref,) = torch.autograd.grad(y.sum(), [x]), torch.autograd.grad(ref.sum(), [x])
    >>> torch.allclose(gx, gref, atol=1e-6), gx.transpose(1, 2).is_contiguous()
    (True, True)
"""

from __future__ import annotations

from typing import Any

import torch


def stacked_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """Each arm's ``x @ weight^T + bias``: ``x`` ``[M, B, in]``, ``weight`` ``[M, out, in]``,
    ``bias`` ``[M, 1, out]`` (or None), as one ``baddbmm`` (``bmm`` without a bias), through
    autograd's own backward."""
    wt = weight.transpose(1, 2)
    return torch.baddbmm(bias, x, wt) if bias is not None else torch.bmm(x, wt)


def arms_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """:func:`stacked_linear` whose input's gradient comes back laid out by column."""
    return _ArmsLinear.apply(x, weight, bias)


class _ArmsLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor,  # type: ignore[override]
                bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return stacked_linear(x, weight, bias)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        x, weight = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad
        gx = gw = gb = None
        if need_x:  # weight^T @ grad^T: [M, in, B], handed back as its transpose [M, B, in]
            gx = torch.bmm(weight.transpose(1, 2), grad.transpose(1, 2)).transpose(1, 2)
        if need_w:  # as baddbmm's backward: x^T @ grad is the gradient of weight^T
            gw = x.transpose(1, 2).bmm(grad).transpose(1, 2)
        if need_b and ctx.has_bias:  # the bias broadcast over the rows: summed over them
            gb = grad.sum(1, keepdim=True)
        return gx, gw, gb
