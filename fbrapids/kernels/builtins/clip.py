"""``clip``: x limited to [lower, upper], in the input's type."""

from __future__ import annotations

import numpy as np

from fbrapids.errors import OperatorError
from fbrapids.kernels import types as T
from fbrapids.kernels.builtins._shared import ExprLike, builtin, call, exact_value, type_range
from fbrapids.kernels.clit import c_number
from fbrapids.kernels.expr import Call
from fbrapids.kernels.operator import Impl


def clip(x: ExprLike, lower: float, upper: float) -> Call:
    """``x`` limited to ``[lower, upper]``, in the input's type. Null rule: null in, null out.

    A bound past the type's range on its own side changes nothing; bounds that leave no
    value of the type, a fractional bound for an integer column, or a bound a float32
    column cannot hold on the other side (``lower=1e39``: never rounded to infinity) are a
    FeatureError naming the column (never wrapped into the type).

    Example:
        >>> str(clip("age", 0, 99))
        'clip(age, lower=0, upper=99)'
    """
    return call("clip", x, lower=lower, upper=upper)


def _resolve(t, p):
    (x,) = t
    lo, hi = p.get("lower"), p.get("upper")
    for nm, v in (("lower", lo), ("upper", hi)):
        if not isinstance(v, (int, float, np.integer, np.floating)) or isinstance(v, bool) or v != v:
            raise OperatorError(f"clip parameter {nm!r} must be a number, got {v!r}")
    if lo > hi:
        raise OperatorError(f"clip: lower {lo} > upper {hi}")
    tmin, tmax = type_range(x) if x in T.INT_TYPES else (-np.inf, np.inf)
    # a bound beyond the type's range on its own side changes nothing: it is the type's end;
    # one beyond it on the other side would put every value outside the type: an error
    if lo > tmax or hi < tmin:
        raise OperatorError(f"clip: bounds [{lo}, {hi}] leave no value of the column's type {x} [{tmin}, {tmax}]")
    if x in T.FLOAT_TYPES:  # a finite bound past the float type's range: its infinity
        fmin, fmax = type_range(x)
        lo, hi = (-np.inf if lo < fmin else float(lo)), (np.inf if hi > fmax else float(hi))
    lo = tmin if lo < tmin else exact_value(lo, x, "clip parameter 'lower'")
    hi = tmax if hi > tmax else exact_value(hi, x, "clip parameter 'upper'")
    ct = T.C_TYPE[x]
    lo_c, hi_c = f"({ct}){c_number(lo, x)}", f"({ct}){c_number(hi, x)}"
    return Impl(x, "expr", f"({{a0}} < {lo_c} ? {lo_c} : ({{a0}} > {hi_c} ? {hi_c} : {{a0}}))")


OPERATOR = builtin("clip", ("num",), "x limited to [lower, upper], in the input's type.", _resolve, builder=clip)
