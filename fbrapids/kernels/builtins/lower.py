"""``lower``: ASCII lower case."""

from __future__ import annotations

from fbrapids.kernels.builtins._shared import H_STRING, ExprLike, builtin, call
from fbrapids.kernels.expr import Call
from fbrapids.kernels.operator import Impl


def lower(x: ExprLike) -> Call:
    """ASCII lower case; other bytes (UTF-8 included) unchanged. Null rule: null in, null out.

    Example:
        >>> str(lower("city"))
        'lower(city)'
    """
    return call("lower", x)


def _resolve(t, p):
    return Impl("str", "var", "fbx_lower({a0}, {out})")


OPERATOR = builtin("lower", ("str",), "ASCII lower case (other bytes, UTF-8 included, unchanged).", _resolve,
                   headers=(H_STRING,), family="string", builder=lower)
