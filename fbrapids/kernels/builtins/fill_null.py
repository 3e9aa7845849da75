"""``fill_null``: the value, or a given value where it is null."""

from __future__ import annotations

from fbrapids.errors import OperatorError
from fbrapids.kernels import types as T
from fbrapids.kernels.builtins._shared import H_LIST, H_STRING, ExprLike, builtin, call, exact_value
from fbrapids.kernels.clit import c_number, c_string
from fbrapids.kernels.expr import Call
from fbrapids.kernels.operator import Impl


def fill_null(x: ExprLike, value: object) -> Call:
    """``x`` with nulls replaced by ``value`` (a number, a string, or ``[]`` for lists).

    A number must fit the column's type exactly (an integer column takes integers in its
    range; a float column rounds to its type): otherwise a FeatureError names the value and
    the column; it is never wrapped.  Null rule: the output is never null (NaN is refused).

    Example:
        >>> str(fill_null("q", ""))
        "fill_null(q, value='')"
    """
    return call("fill_null", x, value=value)


def _resolve(t, p):
    (x,) = t
    v = p.get("value")
    if x in T.FIXED_TYPES:
        v = exact_value(v, x, "fill_null value")
        if v != v:
            raise OperatorError(f"fill_null value NaN would leave the {x} column's nulls null")
        return Impl(x, "expr", f"({{v0}} ? {{a0}} : ({T.C_TYPE[x]}){c_number(v, x)})",
                    null_rule="handles", never_null=True)
    if x == "str":
        if not isinstance(v, str):
            raise OperatorError(f"fill_null of a string column needs a string, got {v!r}")
        return Impl("str", "var", f"fbx_fill_str({{a0}}, {{v0}}, {c_string(v)}, {len(v.encode())}, {{out}})",
                    null_rule="handles")
    if v != [] and v != ():
        raise OperatorError(f"fill_null of a {x} column takes [] only, got {v!r}")
    if x == "list<str>":
        return Impl(x, "var", "({v0} ? fbx_slice_ls({a0}, {a0}.n, 0, {ends}, {bytes}, {nbytes}) : (*{nbytes} = 0, 0))",
                    null_rule="handles")
    return Impl(x, "var", "fbx_fill_li({a0}, {v0}, {out})", null_rule="handles")


OPERATOR = builtin("fill_null", ("any",), "The value, or `value` where it is null (lists: only [] as the fill).",
                   _resolve, null_rule="never null: nulls become `value`", headers=(H_STRING, H_LIST),
                   builder=fill_null)
