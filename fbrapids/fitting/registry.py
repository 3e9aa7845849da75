"""The frame-level operators by name: :func:`frame_operator` (each declared beside its algorithm,
as a :class:`~fbrapids.fitting.frame_op.FrameOperator`).

Example:
    >>> from fbrapids import ops
    >>> [str(e) for e in frame_operator("categorify").input_exprs(ops.categorify("c", oov_buckets=4), True)]
    ['c', 'hash_bucket(c, buckets=4)']
"""

from __future__ import annotations

from fbrapids.errors import FeatureError
from fbrapids.fitting import encoders, history, rowops
from fbrapids.fitting.frame_op import FrameOperator


def frame_operator(name: str) -> FrameOperator:
    """The frame-level operator ``name``: a FeatureError for another name.

    Example:
        >>> frame_operator("hour")
        Traceback (most recent call last):
        ...
        fbrapids.errors.FeatureError: 'hour' is not a frame-level operator (fitted, history or row)
    """
    for declared in (encoders.FRAME_OPERATORS, history.FRAME_OPERATORS, rowops.FRAME_OPERATORS):
        if name in declared:
            return declared[name]
    raise FeatureError(f"{name!r} is not a frame-level operator (fitted, history or row)")
