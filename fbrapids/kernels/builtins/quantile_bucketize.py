"""``quantile_bucketize``: fitted quantile buckets, computed at frame level (fitted stage)."""

from __future__ import annotations

from fbrapids.kernels.builtins._shared import ExprLike, call, frame_level
from fbrapids.kernels.expr import Call


def quantile_bucketize(x: ExprLike, n: int) -> Call:
    """Fitted quantile buckets of ``x``: null -> 0, values -> 1..n (int32); boundaries exact
    from value counts, so the same whatever the partitioning or backend.

    Example:
        >>> str(quantile_bucketize("price", 10))
        'quantile_bucketize(price, n=10)'
    """
    return call("quantile_bucketize", x, n=int(n))


OPERATOR = frame_level("quantile_bucketize", "fitted", "Fitted quantile buckets; null -> bucket 0.",
                       builder=quantile_bucketize)
