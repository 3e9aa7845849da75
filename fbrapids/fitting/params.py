"""An operator's parameters (and a state's statistics) read as the algorithms use them.

A call's parameters and a fitted state's ``meta`` are JSON-like values of any type; an
algorithm reads each as the one type it needs.  These readers convert the way ``int()`` /
``float()`` do, and say which value is wrong where that cannot work (a FeatureError naming
it, never a bare TypeError).

Example:
    >>> as_int("5", "folds"), as_float(2, "smoothing"), labels_of({"_labels": ("u", "y")})
    (5, 2.0, ('u', 'y'))
    >>> as_int(None, "n_keys")
    Traceback (most recent call last):
    ...
    fbrapids.errors.FeatureError: n_keys: None is not a number
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from fbrapids.errors import FeatureError

#: what ``int()`` / ``float()`` take
_NUMBERS = (int, float, str, np.integer, np.floating, np.bool_)


def as_int(value: object, name: str) -> int:
    """``int(value)``; a FeatureError naming ``name`` for a value that is no number."""
    if not isinstance(value, _NUMBERS):
        raise FeatureError(f"{name}: {value!r} is not a number")
    return int(value)


def as_float(value: object, name: str) -> float:
    """``float(value)``; a FeatureError naming ``name`` for a value that is no number."""
    if not isinstance(value, _NUMBERS):
        raise FeatureError(f"{name}: {value!r} is not a number")
    return float(value)


def labels_of(params: Mapping[str, object]) -> tuple[str, ...]:
    """The input columns' names the frame-level stage put in ``params["_labels"]`` (for
    errors; empty when absent).

    Example:
        >>> labels_of({})
        ()
    """
    labels = params.get("_labels", ())
    return tuple(str(v) for v in labels) if isinstance(labels, (tuple, list)) else ()
