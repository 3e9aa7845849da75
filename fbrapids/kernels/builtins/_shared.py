"""What several built-in operators share: their C headers, the declared checks of common
parameters, the two ways a built-in is declared (:func:`builtin`, :func:`frame_level`), the
building of a call (:func:`checked`), and the value checks and C pieces more than one
operator's resolver uses.  It declares no operator.

Example:
    >>> exact_value(300, "i8", "fill_null value")
    Traceback (most recent call last):
    ...
    fbrapids.errors.OperatorError: fill_null value 300 does not fit the column's type i8 [-128, 127]
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from fbrapids.errors import OperatorError
from fbrapids.kernels import params as P, types as T
from fbrapids.kernels.clit import c_string
from fbrapids.kernels.expr import Call, Expr, as_expr
from fbrapids.kernels.operator import Impl, Operator

H_VIEWS = "ops/fbx_views.h"
H_SCALAR = "ops/fbx_ops_scalar.h"
H_HASH = "ops/fbx_ops_hash.h"
H_STRING = "ops/fbx_ops_string.h"
H_LIST = "ops/fbx_ops_list.h"
H_CROSS = "ops/fbx_ops_cross.h"
H_LOOKUP = "ops/fbx_ops_lookup.h"
H_JSON = "ops/fbx_ops_json.h"
JSON_SCAN_PATHS = 4  #: FBX_JSON_SCAN_PATHS of csrc/ops/fbx_ops_json.h: paths one json_scan reads

#: the declared checks of the parameters several operators share
BUCKETS = P.integer(lo=1)  # bucket ids are int64
BUCKETS_OR_RAW = P.integer(lo=0, none=True)  # 0 / None: raw fingerprints (uint64)
COUNT = P.integer(lo=0)

#: what a feature operator's function takes for an input: an expression or a column name
ExprLike = Expr | str


def builtin(name: str, inputs: tuple[str, ...], doc: str, resolver: Callable[..., Impl],
            null_rule: str = "a null input gives a null output", variadic: bool = False,
            headers: tuple[str, ...] = (), **declared: Any) -> Operator:
    """The built-in ``name``, run in a meta-kernel by ``resolver``'s C; ``declared``: the
    :class:`Operator`'s other properties (``family`` defaults to ``scalar``)."""
    return Operator(name=name, inputs=inputs, resolver=resolver, doc=doc, variadic=variadic,
                    null_rule=null_rule, headers=(H_VIEWS,) + headers, **{"family": "scalar", **declared})


# -- frame-level operators ---------------------------------------------------------------
# Computed over whole frames by :mod:`fbrapids.features.fitted` (their ``stage``: ``fitted``,
# statistics fitted on a training frame and frozen; ``history``, over a key's earlier rows;
# ``row``, vectorised per partition), never planned into a meta-kernel: their calls are
# replaced by columns first.
def _frame_level(name: str) -> Callable[..., Impl]:
    def resolver(t, p):
        raise OperatorError(f"{name} runs at frame level (fbrapids.features.fitted), not in a meta-kernel: "
                            "extract it with frame.fbx.extract (fitted operators: fit first, frame.fbx.fit)")
    return resolver


def frame_level(name: str, stage: str, doc: str, **declared: Any) -> Operator:
    """The frame-level built-in ``name`` of ``stage``; ``declared``: the :class:`Operator`'s
    other properties.

    Example:
        >>> frame_level("demo_rank", "row", "A rank.").resolve(("i64",), {})
        Traceback (most recent call last):
        ...
        fbrapids.errors.OperatorError: demo_rank runs at frame level (fbrapids.features.fitted), not in a meta-kernel: extract it with frame.fbx.extract (fitted operators: fit first, frame.fbx.fit)
    """
    return Operator(name=name, inputs=("any",), resolver=_frame_level(name), doc=doc, variadic=True,
                    null_rule="see fbrapids.ops", headers=(H_VIEWS,), stage=stage,
                    **{"family": "scalar", **declared})


# -- building calls ----------------------------------------------------------------------
def call(op: str, *inputs: ExprLike, **params: object) -> Call:
    """Apply any registered operator (a user operator, say) by name; its parameters are
    checked when the expression is planned (naming the feature).

    Example:
        >>> str(call("hour", "ts"))
        'hour(ts)'
    """
    return Call(op, tuple(as_expr(x) for x in inputs), tuple(params.items()))


def checked(op: Operator, *inputs: ExprLike, **params: object) -> Call:
    """:func:`call`, the parameters ``op`` declares checked now: a bad one is an
    OperatorError naming the operator and the parameter where the expression is built (the
    same checks run again when it is planned).

    Example:
        >>> from fbrapids.kernels.builtins.substring import OPERATOR
        >>> checked(OPERATOR, "title", start=2**64)
        Traceback (most recent call last):
        ...
        fbrapids.errors.OperatorError: substring: parameter 'start' must be an integer in [-9223372036854775808, 9223372036854775807], got 18446744073709551616
    """
    op.check_params(params)
    return call(op.name, *inputs, **params)


# -- parameter values --------------------------------------------------------------------
def c_separator(params: dict, name: str = "sep") -> tuple[str, int]:
    """A checked separator as (C string literal, its length in bytes)."""
    s = params[name]
    return c_string(s), len(s.encode())


def type_range(x: str) -> tuple[int, int] | tuple[float, float]:
    """The values a fixed-width type holds: ``(min, max)`` (floats: the finite range).

    Example:
        >>> type_range("u8"), type_range("bool")
        ((0, 255), (0, 1))
    """
    if x == "bool":
        return 0, 1
    dt: np.dtype[Any] = np.dtype(T.NUMPY_DTYPE[x])
    if x in T.INT_TYPES:
        ints = np.iinfo(dt)
        return int(ints.min), int(ints.max)
    floats = np.finfo(dt)
    return float(floats.min), float(floats.max)


def exact_value(v: object, x: str, what: str) -> int | float:
    """``v`` as an exact value of a ``x`` column, or an OperatorError naming it: an integer
    column takes integers (or integral floats) in its range, a float column any number whose
    rounding to it stays finite.  Never wrapped."""
    if isinstance(v, bool) and x != "bool" or not isinstance(v, (int, float, np.integer, np.floating, bool)):
        raise OperatorError(f"{what} must be a number for a {x} column, got {v!r}")
    lo, hi = type_range(x)
    if x in T.INT_TYPES:
        if isinstance(v, (float, np.floating)) and not float(v).is_integer():
            raise OperatorError(f"{what} {v!r} is not an integer, and the column is {x}")
        if not lo <= int(v) <= hi:
            raise OperatorError(f"{what} {v!r} does not fit the column's type {x} [{lo}, {hi}]")
        return int(v)
    v = float(v)
    with np.errstate(over="ignore"):
        overflows = np.isfinite(v) and not np.isfinite(T.NUMPY_DTYPE[x](v))
    if overflows:
        raise OperatorError(f"{what} {v!r} does not fit the column's type {x} (overflows to infinity)")
    return v


# -- resolvers several operators share ---------------------------------------------------
#: what the time operators (hour, weekday, day) read
TIME_OF = ("datetime64 (any unit; time-zoned in UTC, naive taken as UTC) or integer epoch seconds (the "
           "whole int64 / uint64 range)")


def time_part(fn: str, part: str) -> Callable[..., Impl]:
    """The resolver of a time operator: C function ``fn`` of the seconds of day (``part``
    ``sod``) or the days since the epoch (``days``)."""
    def resolver(t, p):
        sign = "u64" if t[0] == "u64" else "i64"  # a uint64 second above 2^63 is not a negative time
        return Impl("i32", "expr", f"{fn}(fbx_{part}_{sign}((fbx_{sign}){{a0}}))")
    return resolver


def hash_impl(x: str, buckets: int) -> Impl:
    """The hash of a ``x`` value, ``buckets`` > 0 its bucket (int64), 0 its fingerprint (uint64)."""
    out_scalar, out_list = ("i64", "list<i64>") if buckets > 0 else ("u64", "list<u64>")
    if x == "str":
        return Impl(out_scalar, "expr", f"fbx_hb_str({{a0}}, {buckets}LL)")
    if x in T.INT_TYPES:
        fn = "fbx_hb_i64((fbx_i64)" if T.is_signed(x) else "fbx_hb_u64((fbx_u64)"
        return Impl(out_scalar, "expr", f"{fn}{{a0}}, {buckets}LL)")
    fn = {"list<str>": "fbx_hb_list_str", "list<i64>": "fbx_hb_list_i64", "list<u64>": "fbx_hb_list_u64"}[x]
    return Impl(out_list, "var", f"{fn}({{a0}}, {buckets}LL, {{out}})")


def k_elements(c: Call) -> int | None:
    """The most elements a ``first_k`` / ``last_k`` list holds: ``k``."""
    k = c.param_dict().get("k")
    return k if isinstance(k, int) and k >= 0 else None


def list_end(end: int) -> Callable[..., Impl]:
    """The resolver of ``first_k`` (``end`` 0) or ``last_k`` (``end`` 1)."""
    def resolver(t, p):
        k = int(p["k"])
        if t[0] == "list<str>":
            return Impl("list<str>", "var", f"fbx_slice_ls({{a0}}, {k}LL, {end}, {{ends}}, {{bytes}}, {{nbytes}})")
        return Impl(t[0], "var", f"fbx_slice_li({{a0}}, {k}LL, {end}, {{out}})")
    return resolver


def json_path(p: dict, op: str) -> str:
    """The C arguments ``path, path_len, segments`` of a json operator's ``path`` parameter."""
    path = p.get("path")
    if not isinstance(path, str) or not path:
        raise OperatorError(f"{op}: path must be a non-empty dotted string, got {path!r}")
    return f"{c_string(path)}, {len(path.encode())}, {path.count('.') + 1}"
