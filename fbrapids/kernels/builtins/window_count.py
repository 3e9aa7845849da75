"""``window_count``: the key's events in a time window before the row, computed at frame level (history stage)."""

from __future__ import annotations

from fbrapids.kernels.builtins._shared import ExprLike, call, frame_level
from fbrapids.kernels.expr import Call


def window_count(key: ExprLike, time: ExprLike, window: int | str, events: ExprLike | None = None) -> Call:
    """The key's events in ``[t - window, t)`` (int64; 0 for a row with a null key or time).

    ``window``: ``"90m"``, ``"1h"``, ``"1d"``, ``"7d"`` (s / m / h / d / w), or a number:
    seconds for a datetime ``time`` (whatever its unit), the column's own units for an
    integer ``time`` (a string window takes integer times as epoch seconds).  Times as in
    :func:`history`; ``events`` as there.

    Example:
        >>> str(window_count("user_id", "ts", "1d"))
        "window_count(user_id, ts, window='1d')"
    """
    extra = (events,) if events is not None else ()
    return call("window_count", key, time, *extra, window=window)


OPERATOR = frame_level("window_count", "history", "The key's events in [t - window, t).", builder=window_count)
