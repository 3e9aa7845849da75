"""``cast``: x converted to another fixed-width type, exactly or an error."""

from __future__ import annotations

from fbrapids.errors import OperatorError
from fbrapids.kernels import types as T
from fbrapids.kernels.builtins._shared import ExprLike, builtin, call
from fbrapids.kernels.expr import Call
from fbrapids.kernels.operator import Bound, Impl, Sizes

#: the values of the small fixed-width types (a cast to one bounds an expression's values)
SMALL_INTS = {"i8": 1 << 8, "u8": 1 << 8, "int8": 1 << 8, "uint8": 1 << 8, "i16": 1 << 16, "u16": 1 << 16,
              "int16": 1 << 16, "uint16": 1 << 16, "bool": 2}


def cast(x: ExprLike, to: str) -> Call:
    """``x`` converted to the fixed-width type ``to`` (``"i8"``, ``"i32"``, ``"f64"``, ...).

    Exact, or a KernelRuntimeError naming the column, the row and the value that does not
    fit (never wrapped).  Floats to integers truncate toward zero; to ``"bool"`` is
    ``x != 0``; to a float type rounds to nearest (an integer past 2^53 to float64 too).

    Example:
        >>> str(cast("hour", "i8"))
        "cast(hour, to='i8')"
    """
    return call("cast", x, to=to)


def _cast_bound(c: Call, sizes: Sizes) -> Bound | None:
    """A cast to a small type: that type's values; and never more than its input's."""
    to = str(c.param_dict().get("to"))
    found = [(SMALL_INTS[to], f"the {SMALL_INTS[to]:,} values of {to}")] if to in SMALL_INTS else []
    inner = sizes.values(c.args[0]) if c.args else None
    return min(found + ([inner] if inner is not None else []), key=lambda b: b[0], default=None)


def _resolve(t, p):
    to = p.get("to")
    if to not in T.FIXED_TYPES:
        raise OperatorError(f"cast: 'to' must be one of {', '.join(T.FIXED_TYPES)}, got {to!r}")
    if to == "bool":
        return Impl(to, "expr", "(fbx_u8)({a0} != 0)")
    return Impl(to, "expr", f"({T.C_TYPE[to]}){{a0}}", checks_fit=to)


OPERATOR = builtin("cast", ("num",), "x converted to another fixed-width type: exact, or an error naming the row "
                   "and the value that does not fit (never wrapped); floats to integers truncate toward zero, to "
                   "bool: x != 0.", _resolve, bound=_cast_bound, builder=cast)
