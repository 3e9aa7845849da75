"""``window_mean``: the mean of a value over the key's events in a time window,
computed at frame level (history stage)."""

from __future__ import annotations

from fbrapids.kernels.builtins._shared import ExprLike, call, frame_level
from fbrapids.kernels.expr import Call


def window_mean(key: ExprLike, value: ExprLike, time: ExprLike, window: int | str,
                events: ExprLike | None = None) -> Call:
    """Mean of ``value`` over the key's events in ``[t - window, t)`` with a non-null
    ``value`` (float64; NaN when none).  Only values inside the window enter its sum (a huge
    old value never cancels out of later windows).  ``window`` and times as in
    :func:`window_count`.

    Example:
        >>> str(window_mean("user_id", "click", "ts", "7d"))
        "window_mean(user_id, ts, click, window='7d')"
    """
    extra = (events,) if events is not None else ()
    return call("window_mean", key, time, value, *extra, window=window)


OPERATOR = frame_level("window_mean", "history", "Mean of a value over the key's events in [t - window, t).",
                       builder=window_mean)
