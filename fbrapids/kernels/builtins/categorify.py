"""``categorify``: a fitted vocabulary: value -> id, computed at frame level (fitted stage)."""

from __future__ import annotations

from fbrapids.kernels.builtins._shared import ExprLike, call, frame_level
from fbrapids.kernels.expr import Call


def categorify(x: ExprLike, min_freq: int = 1, max_size: int | None = None, oov_buckets: int = 0,
               vocab: str | None = None) -> Call:
    """A fitted vocabulary: value -> id, for scalars or element-wise for lists.

    Fit it on the training frame (``fitted = train.fbx.fit(...)``), then extract ``fitted``
    anywhere; it is never refitted.  The vocabulary keeps values seen at least
    ``min_freq`` times, at most ``max_size`` of them (the most frequent; ties by value).
    Ids: 0 padding (what :func:`pad` adds), 1 null, ``2 .. 1 + max(oov_buckets, 1)`` out
    of vocabulary (with ``oov_buckets``, rare and unseen values are spread over that many
    ids by their FarmHash), then the vocabulary by descending count.  Calls with the same
    ``vocab`` name share one vocabulary fitted over all their columns (history item ids
    then equal candidate item ids).  Values compare exactly (``"a"`` and ``"a\\x00"`` differ;
    ids past 2^53 stay distinct; an int state matches uint64 / float values by exact value);
    a state fitted on numbers applied to text (ids read as strings) or the reverse is an
    ``OperatorTypeError`` naming the column, never all out of vocabulary.

    Example:
        >>> str(categorify("city", min_freq=2))
        'categorify(city, min_freq=2, max_size=None, oov_buckets=0, vocab=None)'
    """
    return call("categorify", x, min_freq=min_freq, max_size=max_size, oov_buckets=oov_buckets, vocab=vocab)


OPERATOR = frame_level("categorify", "fitted", "Fitted vocabulary: ids 0 padding, 1 null, 2.. out of vocabulary "
                       "(hashed into `oov_buckets`), then the values seen >= `min_freq` times (at most `max_size`) by "
                       "count.", family="lookup", builder=categorify)
