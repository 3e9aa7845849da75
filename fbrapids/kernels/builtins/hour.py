"""``hour``: hour of day (UTC, 0-23) (int32) of a time."""

from __future__ import annotations

from fbrapids.kernels.builtins._shared import H_SCALAR, TIME_OF, ExprLike, builtin, call, time_part
from fbrapids.kernels.expr import Call


def hour(ts: ExprLike) -> Call:
    """Hour of day (UTC, 0-23) (int32) of a datetime64 column in any unit (a time-zoned
    one in UTC, unlike pandas' local ``.dt.hour``; naive taken as UTC) or of integer epoch
    seconds (int64 / uint64, any value). Null rule: null in, null out (NaT is null).

    Example:
        >>> str(hour("ts"))
        'hour(ts)'
    """
    return call("hour", ts)


OPERATOR = builtin("hour", ("int",), f"Hour of day (UTC, 0-23) (int32) of {TIME_OF}.",
                   time_part("fbx_hour", "sod"), headers=(H_SCALAR,), reads_time=True, builder=hour)
