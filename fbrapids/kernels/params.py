"""Operator parameters: the checks an :class:`~fbrapids.kernels.operator.Operator` declares
for its parameters, run once per place an expression meets them: when ``fbrapids.ops``
builds the expression (so a bad value is an error at the line that wrote it) and when the
planner resolves it (expressions built by hand, or read from JSON).

A check is ``check(name, value)``: it returns nothing, or raises an
:class:`~fbrapids.errors.OperatorError` naming the parameter (the operator adds its name).

Example:
    >>> integer(lo=1)("buckets", 2**64)
    Traceback (most recent call last):
    ...
    fbrapids.errors.OperatorError: parameter 'buckets' must be an integer in [1, 9223372036854775807], got 18446744073709551616
    >>> separator("sep", "_") is None
    True
"""

from __future__ import annotations

import operator
from typing import Any, Callable

import numpy as np

from fbrapids.errors import OperatorError

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

#: ``check(name, value)``: raises OperatorError naming the parameter, else returns None
Check = Callable[[str, object], None]


def integer(lo: int = INT64_MIN, hi: int = INT64_MAX, none: bool = False) -> Check:
    """A check: an integer in ``[lo, hi]`` (kernel parameters are int64: a larger one would
    be wrapped, never used), or None where ``none``; a bool is not an integer here.

    Example:
        >>> integer(lo=0, none=True)("cap", None) is None
        True
    """
    def check(name: str, v: Any) -> None:
        if v is None and none:
            return
        try:
            i = operator.index(v) if not isinstance(v, (bool, np.bool_)) else None
        except TypeError:
            i = None
        if i is None or not lo <= i <= hi:
            raise OperatorError(f"parameter {name!r} must be an integer in [{lo}, {hi}]"
                                f"{' or None' if none else ''}, got {v!r}")
    return check


def separator(name: str, v: object) -> None:
    """A check: a non-empty string (an empty separator would make ``"ab" + "c"`` and
    ``"a" + "bc"`` one key).

    Example:
        >>> separator("sep", "")
        Traceback (most recent call last):
        ...
        fbrapids.errors.OperatorError: parameter 'sep' must be a non-empty string, got ''
    """
    if not isinstance(v, str) or not v:
        raise OperatorError(f"parameter {name!r} must be a non-empty string, got {v!r}")

