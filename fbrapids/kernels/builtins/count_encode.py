"""``count_encode``: rows per key tuple in the fitted frame, computed at frame level (fitted stage)."""

from __future__ import annotations

from fbrapids.kernels.builtins._shared import ExprLike, call, frame_level
from fbrapids.kernels.expr import Call


def count_encode(*keys: ExprLike) -> Call:
    """Rows per key (tuple) in the fitted frame, int64; 0 for unseen or null keys (a tuple
    with any null).  Keys compare as :func:`categorify`'s values do.

    Example:
        >>> str(count_encode("user_id", "category"))
        'count_encode(user_id, category, n_keys=2)'
    """
    return call("count_encode", *keys, n_keys=len(keys))


OPERATOR = frame_level("count_encode", "fitted", "Rows per key tuple in the fitted frame (0 for unseen).",
                       builder=count_encode)
