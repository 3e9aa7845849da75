"""``length``: bytes of a string, elements of a list."""

from __future__ import annotations

from fbrapids.errors import OperatorError
from fbrapids.kernels import types as T
from fbrapids.kernels.builtins._shared import ExprLike, builtin, call
from fbrapids.kernels.expr import Call
from fbrapids.kernels.operator import Impl


def length(x: ExprLike) -> Call:
    """UTF-8 bytes of a string (not code points: ``"é"`` is 2); elements of a list (int32).
    Null rule: null in, null out; a list with null elements is an error naming the column.

    Example:
        >>> from fbrapids.ops import split
        >>> str(length(split("q")))
        "length(split(q, sep=' ', buckets=None))"
    """
    return call("length", x)


def _resolve(t, p):
    if t[0] in T.FIXED_TYPES:
        raise OperatorError(f"length takes a string or a list, got {t[0]}")
    return Impl("i32", "expr", "(fbx_i32)({a0}.n)")


OPERATOR = builtin("length", ("strorlist",), "Bytes of a string, elements of a list (int32).", _resolve,
                   family="string", builder=length)
