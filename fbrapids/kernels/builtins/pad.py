"""``pad``: a list padded / cut to exactly n elements, computed at frame level (row stage)."""

from __future__ import annotations

from fbrapids.errors import OperatorError
from fbrapids.kernels import params as P
from fbrapids.kernels.builtins._shared import ExprLike, call, frame_level
from fbrapids.kernels.expr import Call

#: the longest list ``pad`` makes (list offsets are int32)
PAD_MAX = 2**31 - 1


def pad(x: ExprLike, n: int, value: int | str | None = 0, side: str = "right") -> Call:
    """A list made exactly ``n`` long: ``side="right"`` keeps the first ``n`` elements and pads
    after them; ``side="left"`` keeps the last ``n`` (the most recent) and pads before them.
    A null list becomes ``n`` padding values (0 is categorify's padding id).  The result
    keeps the input's list type and its elements exactly (uint64 ids, null elements);
    ``value`` must be an element of that type (``None``: null padding), else an error
    naming the expression and the value.

    Example:
        >>> str(pad("hist", 50, 0, side="left"))
        "pad(hist, n=50, value=0, side='left')"
    """
    if side not in ("left", "right"):
        raise OperatorError(f"pad: side must be 'left' or 'right', got {side!r}")
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, str))):
        raise OperatorError(f"pad: parameter 'value' must be an integer, a string or None, got {value!r}")
    OPERATOR.check_params({"n": n})  # (before int(): a string is no length)
    return call("pad", x, n=int(n), value=value, side=side)


OPERATOR = frame_level("pad", "row", "A list padded / cut to exactly n elements.",
                       params={"n": P.integer(lo=0, hi=PAD_MAX)}, builder=pad)
