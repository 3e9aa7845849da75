"""``time_since``: the time since the key's previous event, computed at frame level (history stage)."""

from __future__ import annotations

from fbrapids.kernels.builtins._shared import ExprLike, call, frame_level
from fbrapids.kernels.expr import Call


def time_since(key: ExprLike, time: ExprLike, events: ExprLike | None = None) -> Call:
    """Time since the key's previous event strictly before the row's time (int64, null when
    none or when the key or time is null): in the integer time's own units, or in whole
    seconds (floored) for a datetime column, whatever its unit.

    Example:
        >>> str(time_since("user_id", "ts"))
        'time_since(user_id, ts)'
    """
    extra = (events,) if events is not None else ()
    return call("time_since", key, time, *extra)


OPERATOR = frame_level("time_since", "history", "Time since the key's previous event.", builder=time_since)
