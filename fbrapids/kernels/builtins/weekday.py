"""``weekday``: day of week (UTC, Monday = 0) (int32) of a time."""

from __future__ import annotations

from fbrapids.kernels.builtins._shared import H_SCALAR, TIME_OF, ExprLike, builtin, call, time_part
from fbrapids.kernels.expr import Call


def weekday(ts: ExprLike) -> Call:
    """Day of week (UTC, Monday = 0) (int32) of a datetime64 column or epoch seconds, as
    :func:`hour`. Null rule: null in, null out.

    Example:
        >>> str(weekday("ts"))
        'weekday(ts)'
    """
    return call("weekday", ts)


OPERATOR = builtin("weekday", ("int",), f"Day of week (UTC, Monday = 0) (int32) of {TIME_OF}.",
                   time_part("fbx_weekday", "days"), headers=(H_SCALAR,), reads_time=True, builder=weekday)
