"""The checks before an exact cast: every value of a column must fit the dtype it is cast to
(within a narrower int's range, whole for an int, exact in a float, finite in a narrower
float, 0 / 1 for a bool, whole units for a datetime, nothing lost in a coarser datetime
unit); one that does not is a ViewError naming the file, column, row and value, never
wrapped or rounded.

Example:
    >>> import pandas as pd
    >>> check_cast(pd.Series([1, 300]), "int8", "v.parquet", "n")
    Traceback (most recent call last):
    ...
    fbrapids.errors.ViewError: v.parquet: column 'n' row 1: 300 does not fit int8
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

import numpy as np
import pandas as pd

from fbrapids.errors import ViewError
from fbrapids.frames import backend as _backend
from fbrapids.views.dtype_spec import DtypeSpec

if TYPE_CHECKING:
    from fbrapids.frames.backend import EagerSeries


def first_failing(values: EagerSeries, want: DtypeSpec, path: str, col: str, exc: Exception) -> ViewError:
    """The ViewError naming the first row whose value alone does not cast to ``want``."""
    host = _backend.to_host(values)
    for pos in range(min(len(host), 100_000)):
        try:
            host.iloc[pos:pos + 1].astype(want)
        except (TypeError, ValueError, OverflowError) as one:
            value = host.iloc[pos]
            value = value.item() if isinstance(value, np.generic) else value
            return ViewError(f"{path}: column {col!r} row {host.index[pos]}: {value!r} cannot be {want}: {one}")
    return ViewError(f"{path}: column {col!r} cannot be cast to {want}: {exc}")


def _numpy_kind(dtype: DtypeSpec) -> np.dtype | None:
    try:
        d = getattr(dtype, "numpy_dtype", dtype)
        if isinstance(d, pd.api.extensions.ExtensionDtype):  # one without a numpy dtype behind it
            return None
        return d if isinstance(d, np.dtype) else np.dtype(d)
    except TypeError:
        return None


def check_cast(values: EagerSeries, want: DtypeSpec, path: str, col: str) -> None:
    """Raise, naming the first row, unless every value of ``values`` fits ``want`` exactly."""
    have = _numpy_kind(values.dtype)
    if want in ("str", "string", str) or str(want) in ("str", "string", "object"):
        return
    try:
        target_dtype = pd.api.types.pandas_dtype(want)
    except TypeError:
        return
    target = _numpy_kind(target_dtype)
    if have is None or target is None:
        return
    if have.kind == "M" and target.kind in "iufb":
        raise ViewError(f"{path}: column {col!r} holds datetimes, which {want} does not: their numbers depend on the "
                        f"unit they are stored in; read it as a datetime64 and convert explicitly")
    if target.kind == "M" and have.kind in "iufM":
        _check_time_cast(values, have, want, path, col)
        return
    if have.kind not in "iufb" or target.kind not in "iufb":
        return
    valid = values.notna()
    if target.kind in "iub" and not isinstance(target_dtype, pd.api.extensions.ExtensionDtype) \
            and not bool(valid.all()):
        _raise_at(values, ~valid, path, col, f"is null, which {want} cannot hold")
    present = values[valid]
    if not len(present):
        return
    if target.kind in "iub" and have.kind == "f":
        fractional = (present - present.round()).abs() > 0
        if bool(fractional.any()):
            _raise_at(present, fractional, path, col, f"is not a whole number ({want})")
    if target.kind == "b" and have.kind in "iuf":
        not_bit = (present != 0) & (present != 1)
        if bool(not_bit.any()):
            _raise_at(present, not_bit, path, col, f"is not 0 or 1, the numbers {want} holds")
    if target.kind in "iu" and have.kind in "iuf":
        _check_int_fits(present, have, np.iinfo(target), want, path, col)
    if target.kind == "f" and have.kind in "iu":
        back = present.astype(target).astype(have)
        inexact = back != present
        if bool(inexact.any()):
            _raise_at(present, inexact, path, col, f"is not exactly representable as {want}")
    if target.kind == "f" and have.kind == "f" and target.itemsize < have.itemsize:
        finite = np.isfinite(_backend.to_host(present).to_numpy(dtype=have))
        with np.errstate(over="ignore"):
            over = ~np.isfinite(_backend.to_host(present).to_numpy(dtype=have).astype(target)) & finite
        if over.any():
            _raise_at(present, pd.Series(over, index=_backend.to_host(present).index), path, col, f"overflows {want}")


def _check_int_fits(present: EagerSeries, have: np.dtype, info: IntBounds, want: DtypeSpec, path: str, col: str) -> None:
    """Raise, naming the row, unless every (whole) number of ``present`` is within ``info``;
    float bounds compared exactly (``2.0**63`` does not fit int64)."""
    if have.kind == "f":  # compared exactly: the bounds round to floats (2**63 - 1 -> 2.0**63)
        flo, fhi = float(info.min), float(info.max)
        bad = ~(((present > flo) if flo < info.min else (present >= flo))
                & ((present < fhi) if fhi > info.max else (present <= fhi)))
    else:
        low, high = present.min(), present.max()
        if int(low) >= info.min and int(high) <= info.max:
            return
        bad = (present < info.min) | (present > info.max)
    if bool(bad.any()):
        _raise_at(present, bad, path, col, f"does not fit {want}")


@dataclass(frozen=True)
class _TimeRange:
    min: int = -(2**63) + 1
    max: int = 2**63 - 1


_TIME_RANGE = _TimeRange()  #: the numbers a datetime64 holds (int64 less NaT's)
#: the range of whole numbers a cast's target holds
IntBounds = Union[np.iinfo, _TimeRange]


def _check_time_cast(values: EagerSeries, have: np.dtype, want: DtypeSpec, path: str, col: str) -> None:
    """Numbers to a datetime count units of the target (``datetime64[s]``: epoch seconds)
    and must be whole; a datetime to a coarser unit must lose nothing.  ``have``: the
    numpy dtype of ``values``."""
    present = values[values.notna()]
    if not len(present):
        return
    if have.kind == "f":
        fractional = (present - present.round()).abs() > 0
        if bool(fractional.any()):
            _raise_at(present, fractional, path, col, f"is not a whole number of {want} units")
    if have.kind in "iuf":  # int64's lowest value is NaT's bit pattern: never a time
        _check_int_fits(present, have, _TIME_RANGE, want, path, col)
    if have.kind == "M" and getattr(values.dtype, "tz", None) is None:
        try:
            lost = present.astype(pd.api.types.pandas_dtype(want)).astype(values.dtype) != present
        except (TypeError, ValueError, OverflowError):
            return  # out of the target's range: the cast names the row
        if bool(lost.any()):
            _raise_at(present, lost, path, col, f"is finer than {want} holds (it would be truncated)")


def _raise_at(values: EagerSeries, bad: EagerSeries, path: str, col: str, why: str) -> None:
    host, mask = _backend.to_host(values), _backend.to_host(bad)
    pos = int(np.asarray(mask.to_numpy(dtype=bool)).nonzero()[0][0])
    value = host.iloc[pos]
    value = value.item() if isinstance(value, np.generic) else value
    raise ViewError(f"{path}: column {col!r} row {host.index[pos]}: {value!r} {why}")
