"""``overlap_count``: elements of one list found in another, computed at frame level (row stage)."""

from __future__ import annotations

from fbrapids.kernels.builtins._shared import ExprLike, call, frame_level
from fbrapids.kernels.expr import Call
from fbrapids.kernels.operator import Bound, Sizes


def overlap_count(a: ExprLike, b: ExprLike) -> Call:
    """How many elements of list ``a`` appear in list ``b`` (int64; a duplicate in ``a`` counts
    each time). Elements compare by value: int64 5 matches uint64 5, never the string "5";
    null elements never match. Null rule: null if either list is null.

    Example:
        >>> from fbrapids.ops import split
        >>> str(overlap_count(split("query"), split("title")))
        "overlap_count(split(query, sep=' ', buckets=None), split(title, sep=' ', buckets=None))"
    """
    return call("overlap_count", a, b)



def _overlap_bound(c: Call, sizes: Sizes) -> Bound | None:
    """0 .. the shorter list's most elements, or null."""
    longest = [n for n in map(sizes.length, c.args) if n is not None]
    if len(c.args) != 2 or not longest:
        return None
    return min(longest) + 2, f"0 to {min(longest)} elements in common, or null"


OPERATOR = frame_level("overlap_count", "row", "Elements of one list found in another.",
                       bound=_overlap_bound, builder=overlap_count)
