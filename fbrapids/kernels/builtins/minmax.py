"""``minmax``: (x - fitted min) / (fitted max - min), computed at frame level (fitted stage)."""

from __future__ import annotations

from fbrapids.kernels.builtins._shared import ExprLike, call, frame_level
from fbrapids.kernels.expr import Call


def minmax(x: ExprLike) -> Call:
    """``(x - min) / (max - min)`` with the fitted min and max (float64); null in, null out.
    Values outside the fitted range map outside [0, 1]; a constant column is divided by 1;
    fitted on no values, every output is null.

    Example:
        >>> str(minmax("price"))
        'minmax(price)'
    """
    return call("minmax", x)


OPERATOR = frame_level("minmax", "fitted", "(x - fitted min) / (fitted max - min).", builder=minmax)
