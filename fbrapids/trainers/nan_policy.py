"""One vocabulary for what to do with a NaN / inf: the ``nan=`` of the stream, of ``fit``
(every strategy: one process, ranks, arms) and of the pipeline's ``RunConfig``.

=========  ==================================================================  ==============
word       what it does                                                        where
=========  ==================================================================  ==============
``error``  stop with a :class:`~fbrapids.errors.FbrapidsError` naming where     everywhere
           (the column and first row; the step and table), before the update
``zero``   replace a dense input's NaN / inf / null by 0, counted               the stream
           (``stream.stats["nan_replaced"]``)
``skip``   drop that batch's update (listed in ``FitResult.skipped``)          ``fit``: one process,
                                                                               arms
``warn``   log and go on (the update is applied)                               ``fit``: every strategy
=========  ==================================================================  ==============

The ranks of a distributed run cannot skip alone (every rank must take the same steps), so
``fit`` on ranks takes ``error`` and ``warn``.

Example:
    >>> check_nan("skip", FIT_NAN, "fit")
    'skip'
    >>> check_nan("zero", FIT_NAN, "fit")
    Traceback (most recent call last):
    ...
    fbrapids.errors.ArgumentError: fit: nan must be one of 'error', 'skip', 'warn' (got 'zero'; 'zero' replaces a dense input's NaN by 0: the stream's word, stream(nan='zero'))
"""

from __future__ import annotations

from typing import Sequence

from fbrapids.errors import ArgumentError

#: every word and what it does
NAN_WORDS = {
    "error": "stops with an error naming where, before the update",
    "zero": "replaces a dense input's NaN by 0: the stream's word, stream(nan='zero')",
    "skip": "drops the batch's update: fit's word (one process, arms)",
    "warn": "logs and applies the update: fit's word",
}
#: the words each part takes
STREAM_NAN = ("error", "zero")
FIT_NAN = ("error", "skip", "warn")
RANKS_NAN = ("error", "warn")


def check_nan(value: str, allowed: Sequence[str], where: str) -> str:
    """``value`` when ``allowed`` holds it; else an :class:`~fbrapids.errors.ArgumentError`
    naming the words ``where`` takes and what ``value`` means elsewhere."""
    if value in allowed:
        return value
    also = f"; {value!r} {NAN_WORDS[value]}" if value in NAN_WORDS else ""
    raise ArgumentError(f"{where}: nan must be one of {', '.join(map(repr, allowed))} (got {value!r}{also})")
