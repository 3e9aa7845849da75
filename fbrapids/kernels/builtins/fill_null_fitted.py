"""``fill_null_fitted``: nulls replaced by the fitted mean or median, computed at frame level (fitted stage)."""

from __future__ import annotations

from fbrapids.errors import OperatorError
from fbrapids.kernels.builtins._shared import ExprLike, call, frame_level
from fbrapids.kernels.expr import Call


def fill_null_fitted(x: ExprLike, stat: str = "mean") -> Call:
    """``x`` (as float64) with nulls replaced by its fitted ``"mean"`` or ``"median"`` (the
    mean of the two middle values for an even count); fitted on no values, nulls stay null.

    Example:
        >>> str(fill_null_fitted("age", "median"))
        "fill_null_fitted(age, stat='median')"
    """
    if stat not in ("mean", "median"):
        raise OperatorError(f"fill_null_fitted: stat must be 'mean' or 'median', got {stat!r}")
    return call("fill_null_fitted", x, stat=stat)


OPERATOR = frame_level("fill_null_fitted", "fitted", "Nulls replaced by the fitted mean or median.",
                       builder=fill_null_fitted)
