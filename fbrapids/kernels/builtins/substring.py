"""``substring``: code points of UTF-8 text, as Python slices them."""

from __future__ import annotations

from fbrapids.kernels import params as P
from fbrapids.kernels.builtins._shared import H_STRING, ExprLike, builtin, checked
from fbrapids.kernels.expr import Call
from fbrapids.kernels.operator import Impl


def substring(x: ExprLike, start: int, length: int | None = None) -> Call:
    """Code points ``[start, start + length)`` of UTF-8 text: a negative start counts from
    the end (clamped at the first code point, then ``length`` code points are taken);
    ``length=None`` to the end. ``start`` and ``length`` must fit an int64 (an error naming
    the parameter when the expression is built). Null rule: null in, null out.

    Example:
        >>> str(substring("title", 0, 3))
        'substring(title, start=0, length=3)'
    """
    return checked(OPERATOR, x, start=start, length=length)


def _resolve(t, p):
    start = int(p["start"])
    length = None if p.get("length") is None else int(p["length"])
    return Impl("str", "var", f"fbx_substring({{a0}}, {start}LL, {-1 if length is None else length}LL, {{out}})")


OPERATOR = builtin("substring", ("str",), "Code points [start, start + length) of UTF-8 text (Python slicing; a "
                   "negative start counts from the end; length None means to the end).", _resolve,
                   headers=(H_STRING,), family="string",
                   params={"start": P.integer(), "length": P.integer(lo=0, none=True)}, builder=substring)
