"""The arms' stacked parameters gather each stack's gradient as the sum of the gradients of
the slices read since the last gather, whether the slices tile the stack (a trial's chunks
of arms: joined) or not (any reads: summed into zeros); the reference is numpy's sum."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings, strategies as st

from fbrapids.trainers.models.trial_parts import StackedParameters, arms_tensor


@st.composite
def _reads(draw: st.DrawFn) -> tuple[int, list[tuple[int, int]]]:
    m = draw(st.integers(1, 6))
    if draw(st.booleans()):  # chunks tiling the stack, in order
        cuts = sorted(draw(st.sets(st.integers(1, m - 1), max_size=m - 1))) if m > 1 else []
        ends = [*cuts, m]
        return m, list(zip([0, *cuts], ends))
    ranges = st.tuples(st.integers(0, m - 1), st.integers(1, m)).map(lambda t: (min(t), max(t[1], min(t) + 1)))
    return m, draw(st.lists(ranges, min_size=1, max_size=4))


@settings(max_examples=60, deadline=None)
@given(case=_reads(), seed=st.integers(0, 2**16))
def test_a_stacks_gradient_is_the_sum_of_its_slices_read(case: tuple[int, list[tuple[int, int]]], seed: int) -> None:
    m, reads = case
    torch.manual_seed(seed)
    nets = [torch.nn.Linear(3, 2) for _ in range(m)]
    held = StackedParameters(nets)
    ref = np.zeros((m, 2, 3), dtype=np.float32)
    for a, b in reads:
        coef = torch.randn(b - a, 2, 3)
        (arms_tensor([n.weight for n in nets[a:b]]) * coef).sum().backward()
        ref[a:b] += coef.numpy()
    held.gather_grads()
    weight, bias = held.stacks
    assert weight.grad is not None and bias.grad is None  # no bias read: no gradient
    np.testing.assert_array_equal(weight.grad.numpy(), ref)
    held.gather_grads()  # nothing read since: no gradient
    assert weight.grad is None
