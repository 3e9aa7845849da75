"""``log1p``: log(1 + x) in float64."""

from __future__ import annotations

from fbrapids.kernels.builtins._shared import ExprLike, builtin, call
from fbrapids.kernels.expr import Call
from fbrapids.kernels.operator import Impl


def log1p(x: ExprLike) -> Call:
    """``log(1 + x)`` as float64. Null rule: null in, null out.

    Example:
        >>> str(log1p("price"))
        'log1p(price)'
    """
    return call("log1p", x)


def _resolve(t, p):
    return Impl("f64", "expr", "FBX_LOG1P((double){a0})")


OPERATOR = builtin("log1p", ("num",), "log(1 + x) in float64.", _resolve, builder=log1p)
