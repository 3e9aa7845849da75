"""Declared ranges of dense features: values outside are counted, or an error with ``strict``.

A corrupt input that still decodes (a flipped exponent turns 0.3 into 1e21) passes the
NaN / inf checks; a declared range catches it.  Works on host (numpy) and device (torch)
dense matrices alike.

Example:
    >>> import numpy as np
    >>> counts = {}
    >>> check_ranges(np.array([[0.5], [1e21]], np.float32), ["d5"], {"d5": (0.0, 1.0)}, counts=counts)
    1
    >>> counts
    {'d5': 1}
    >>> check_ranges(np.array([[0.5], [1e21]], np.float32), ["d5"], {"d5": (0.0, 1.0)}, strict=True, part=3)
    Traceback (most recent call last):
    ...
    fbrapids.errors.RangeError: partition 3: dense feature 'd5' has 1 value(s) outside its declared range [0.0, 1.0], the first at row 1 (1e+21)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

from fbrapids.errors import RangeError

if TYPE_CHECKING:  # (annotations only: no import at run time)
    import numpy as np
    import torch


def validate_ranges(ranges: Mapping[str, tuple[float, float]] | None, dense: Sequence[str]) -> dict:
    """``ranges`` checked: each names a dense column and has ``lo <= hi``."""
    out = dict(ranges or {})
    for col, bounds in out.items():
        if col not in dense:
            raise RangeError(f"a range is declared for {col!r}, which is not a dense feature ({list(dense)})")
        lo, hi = bounds
        if not lo <= hi:
            raise RangeError(f"the declared range of {col!r} is empty: [{lo}, {hi}]")
    return out


def check_ranges(dense: np.ndarray | torch.Tensor, columns: Sequence[str], ranges: Mapping[str, tuple[float, float]],
                 strict: bool = False, part: int | None = None, counts: dict[str, int] | None = None) -> int:
    """Count the values of ``dense`` (``[n, len(columns)]``, numpy or torch) outside their
    column's declared ``(lo, hi)`` (closed); add them to ``counts`` per column; returns the
    total.  With ``strict`` the first column with any is a :class:`~fbrapids.errors.RangeError`
    naming it, the partition, the count and the first row."""
    total = 0
    for col, (lo, hi) in ranges.items():
        values = dense[:, columns.index(col)]
        outside = (values < lo) | (values > hi)
        n = int(outside.sum())
        if not n:
            continue
        if strict:
            first = int(outside.nonzero()[0][0])  # numpy: (rows,) ; torch: [m, 1]
            where = f"partition {part}: " if part is not None else ""
            raise RangeError(f"{where}dense feature {col!r} has {n} value(s) outside its declared range "
                             f"[{lo}, {hi}], the first at row {first} ({float(values[first]):g})")
        if counts is not None:
            counts[col] = counts.get(col, 0) + n
        total += n
    return total
