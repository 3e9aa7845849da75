"""``bucketize``: TensorFlow Bucketize, exact for any integer or float column."""

from __future__ import annotations

import math
import numbers
import sys
from typing import Sequence

import numpy as np

from fbrapids.errors import OperatorError
from fbrapids.kernels import types as T
from fbrapids.kernels.builtins._shared import H_SCALAR, ExprLike, builtin, call, type_range
from fbrapids.kernels.expr import Call
from fbrapids.kernels.operator import Bound, Impl, Sizes


def bucketize(x: ExprLike, boundaries: Sequence[float]) -> Call:
    """TensorFlow ``Bucketize``: the number of boundaries ``b`` with ``b <= x`` (int32).

    Null rule: null in, null out.  The comparison is exact, as Python compares an int and
    a float: an integer column is never read through float64 (``x = 2**53`` is below the
    boundary ``2**53 + 1``; uint64 ids at ``2**64 - 1`` included), and an integer boundary
    that float64 cannot hold is kept as the integer.  Boundaries must be sorted numbers
    (no NaN): an OperatorError naming the operator and the parameter when built.

    Example:
        >>> str(bucketize("age", [18, 25]))
        'bucketize(age, boundaries=(18.0, 25.0))'
        >>> bucketize("id", [2**53 + 1]).params
        (('boundaries', (9007199254740993,)),)
    """
    bs = tuple(_boundary(b) for b in boundaries)
    if not bs or any(a > b for a, b in zip(bs, bs[1:])):
        raise OperatorError(f"bucketize: parameter 'boundaries' must be a non-empty sorted list, got {boundaries!r}")
    return call("bucketize", x, boundaries=bs)


def _boundary(b: object) -> int | float:
    """A bucketize boundary: a float where float64 holds it exactly, else the integer."""
    if isinstance(b, bool) or not isinstance(b, numbers.Real) or b != b:
        raise OperatorError(f"bucketize: parameter 'boundaries' must hold numbers (no NaN), got {b!r}")
    if not isinstance(b, numbers.Integral):
        return float(b)
    try:
        f = float(b)
    except OverflowError:
        return int(b)
    return f if f == b else int(b)


def _bucketize_bound(c: Call, sizes: Sizes) -> Bound | None:
    n = len(c.param_dict().get("boundaries") or ())
    return (n + 1, f"{n} boundaries + 1") if "boundaries" in c.param_dict() else None


def _resolve(t, p):
    (x,) = t
    b = list(p.get("boundaries") or ())
    if not b or any(not _is_number(v) or v != v for v in b) or any(u > v for u, v in zip(b, b[1:])):
        raise OperatorError(f"bucketize: boundaries must be a non-empty sorted list of numbers, got {p.get('boundaries')!r}")
    if x in T.FLOAT_TYPES:  # b <= x  <=>  d <= x for the smallest double d >= b (exact for any b)
        d = np.array([_double_at_least(v) for v in b], dtype=np.float64)
        return Impl("i32", "expr", f"fbx_bucketize((double){{a0}}, (const double*){{b0}}, {len(d)})", buffers=(d,))
    # an integer column compares exactly: b <= x  <=>  ceil(b) <= x; thresholds past the type's
    # ends count for every value (below) or none (above); the rest compare in the column's sign
    tmin, tmax = type_range(x)
    th = [math.ceil(v) if isinstance(v, float) and math.isfinite(v) else v for v in b]
    always = sum(1 for v in th if v <= tmin)
    mid = [int(v) for v in th if tmin < v <= tmax]
    kind = "u64" if x in ("u64", "u32", "u16", "u8", "bool") else "i64"
    arr = np.array(mid or [0], dtype=np.uint64 if kind == "u64" else np.int64)
    return Impl("i32", "expr", f"fbx_bucketize_{kind}((fbx_{kind}){{a0}}, (const fbx_{kind}*){{b0}}, {len(mid)}, "
                f"{always})", buffers=(arr,))


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def _double_at_least(v: int | float) -> float:
    """The smallest double ``d >= v`` (``inf`` past the largest): for a double ``x``,
    ``v <= x`` exactly when ``d <= x``.

    Example:
        >>> _double_at_least(2**53 + 1) == 2.0**53 + 2
        True
    """
    if isinstance(v, (float, np.floating)):
        return float(v)
    try:
        d = float(v)
    except OverflowError:
        return math.inf if v > 0 else -sys.float_info.max
    return d if d >= v else math.nextafter(d, math.inf)


OPERATOR = builtin("bucketize", ("num",), "TensorFlow Bucketize: the number of boundaries b with b <= x (int32).",
                   _resolve, headers=(H_SCALAR,), bound=_bucketize_bound, builder=bucketize)
