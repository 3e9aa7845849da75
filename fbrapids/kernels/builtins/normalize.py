"""``normalize``: (x - fitted mean) / fitted std, computed at frame level (fitted stage)."""

from __future__ import annotations

from fbrapids.kernels.builtins._shared import ExprLike, call, frame_level
from fbrapids.kernels.expr import Call


def normalize(x: ExprLike) -> Call:
    """``(x - mean) / std`` with the fitted mean and population std (float64); null in, null out.
    A constant column (std 0) is divided by 1; fitted on no values, every output is null.

    Example:
        >>> str(normalize("price"))
        'normalize(price)'
    """
    return call("normalize", x)


OPERATOR = frame_level("normalize", "fitted", "(x - fitted mean) / fitted std.", builder=normalize)
