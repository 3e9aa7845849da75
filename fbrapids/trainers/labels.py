"""Label checks for ``stream``: a CTR trainer learns from 0/1 clicks, or from soft labels in
a declared range; anything else is an error naming the column, the partition and a bad
value, before a batch is built from it.

Example:
    >>> import pandas as pd
    >>> check_labels(pd.Series([0, 1, 1]), "click", partition=0)
    >>> check_labels(pd.Series([0.0, 0.7]), "ctr", partition=3, label_range=(0, 1))
    >>> check_labels(pd.Series([0, 2]), "click", partition=5)
    Traceback (most recent call last):
    ...
    fbrapids.errors.LabelError: label column 'click', partition 5: 1 value(s) not 0 or 1, first 2 at row 1; pass label_range=(lo, hi) for soft labels
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, TypeGuard, overload

import numpy as np
import pandas as pd

from fbrapids.errors import LabelError
from fbrapids.frames import backend as _backend

if TYPE_CHECKING:  # (annotations only)
    import cudf


@overload
def check_label_range(label_range: None) -> None: ...
@overload
def check_label_range(label_range: tuple[float, float]) -> tuple[float, float]: ...
def check_label_range(label_range: tuple[float, float] | None) -> tuple[float, float] | None:
    """Validate a ``label_range`` argument: None, or ``(lo, hi)`` with finite ``lo <= hi``."""
    if label_range is None:
        return None
    try:
        lo, hi = (float(v) for v in label_range)
    except (TypeError, ValueError):
        raise LabelError(f"label_range must be (lo, hi) numbers, got {label_range!r}") from None
    if not (np.isfinite(lo) and np.isfinite(hi) and lo <= hi):
        raise LabelError(f"label_range must be finite with lo <= hi, got {label_range!r}")
    return lo, hi


def _on_device(values: object) -> TypeGuard[cudf.Series]:
    return _backend.is_gpu_object(values)


def check_labels(values: pd.Series | cudf.Series, column: str, partition: int | None = None,
                 label_range: tuple[float, float] | None = None) -> None:
    """Raise :class:`~fbrapids.errors.LabelError` unless every label is 0 or 1 (default) or
    within ``label_range`` (inclusive).  Nulls are left to the batch builder's own error.

    Args:
        values: the label column of one partition (pandas series).
        column: its name, for the message.
        partition: the partition's number, for the message.
        label_range: ``(lo, hi)`` for soft labels (e.g. ``(0, 1)`` for click rates).
    """
    where = f"label column {column!r}" + (f", partition {partition}" if partition is not None else "")
    dtype = values.dtype
    if isinstance(dtype, pd.StringDtype) or str(dtype) in ("str", "string", "object") or \
            getattr(dtype, "kind", "") in "OSU" and not isinstance(dtype, pd.CategoricalDtype):
        sample = _backend.to_host(values.dropna().head(1)).tolist()  # cudf's tolist() always raises
        example = f", e.g. {sample[0]!r}" if sample else ""
        raise LabelError(f"{where} holds strings ({dtype}{example}); labels must be numbers (0/1 clicks, or soft "
                         "labels with label_range=(lo, hi)); convert the column first, e.g. .map({'no': 0, 'yes': 1})")
    xp: ModuleType = np
    if _on_device(values):  # checked on the device: only the verdict comes to the host
        import cupy

        xp = cupy

        y = values.astype("float64").to_cupy(na_value=np.nan)
    else:
        y = values.to_numpy(dtype=np.float64, na_value=np.nan)
    known = ~xp.isnan(y)
    if label_range is None:
        bad = known & (y != 0.0) & (y != 1.0)
        what = "not 0 or 1"
        hint = "; pass label_range=(lo, hi) for soft labels"
    else:
        lo, hi = check_label_range(label_range)
        bad = known & ((y < lo) | (y > hi))
        what = f"outside label_range [{lo:g}, {hi:g}]"
        hint = ""
    if bool(bad.any()):
        i = int(xp.flatnonzero(bad)[0])
        v = float(y[i])
        shown = int(v) if float(v).is_integer() else v
        raise LabelError(f"{where}: {int(bad.sum())} value(s) {what}, first {shown} at row {i}{hint}")
