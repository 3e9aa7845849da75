"""``history``: the key's last N items strictly before the row's time, computed at frame level (history stage)."""

from __future__ import annotations

from fbrapids.kernels.builtins._shared import ExprLike, call, frame_level
from fbrapids.kernels.expr import Call
from fbrapids.kernels.operator import Bound, Sizes


def history(key: ExprLike, item: ExprLike, time: ExprLike, last_n: int = 50, events: ExprLike | None = None) -> Call:
    """The key's last ``last_n`` items strictly before the row's time, oldest first (a list).

    ``events`` (a boolean / 0-1 column, e.g. ``"click"``; null is false) keeps only those
    rows as events.  Events at equal times are ordered by item (null items first).  A row
    with a null key or time gets ``[]``.

    ``time`` is a datetime64 column (any unit, with or without a time zone: instants are
    compared exactly in the column's unit) or integer times (epoch seconds or any integer
    unit; exact int64, never through float64).  On dask only the inputs are shuffled by
    ``key``; the frame keeps its partitions and row order.

    Example:
        >>> str(history("user_id", "category", "ts", last_n=50, events="click"))
        'history(user_id, ts, category, click, last_n=50)'
    """
    extra = (events,) if events is not None else ()
    return call("history", key, time, item, *extra, last_n=int(last_n))



def _history_bound(c: Call, sizes: Sizes) -> Bound | None:
    """The values of its second argument."""
    return sizes.values(c.args[1] if len(c.args) > 1 else c.args[0]) if c.args else None


OPERATOR = frame_level("history", "history", "The key's last N items strictly before the row's time.",
                       bound=_history_bound, builder=history)
