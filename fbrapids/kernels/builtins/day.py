"""``day``: day of month (UTC, 1-31) (int32) of a time."""

from __future__ import annotations

from fbrapids.kernels.builtins._shared import H_SCALAR, TIME_OF, ExprLike, builtin, call, time_part
from fbrapids.kernels.expr import Call


def day(ts: ExprLike) -> Call:
    """Day of month (UTC, 1-31) (int32) of a datetime64 column or epoch seconds, as
    :func:`hour`. Null rule: null in, null out.

    Example:
        >>> str(day("ts"))
        'day(ts)'
    """
    return call("day", ts)


OPERATOR = builtin("day", ("int",), f"Day of month (UTC, 1-31) (int32) of {TIME_OF}.",
                   time_part("fbx_day", "days"), headers=(H_SCALAR,), reads_time=True, builder=day)
