"""A log's time column in the form it is written, read as UTC epoch seconds.

A CTR log writes time in many forms: epoch seconds, milliseconds, microseconds or
nanoseconds; a datetime column (parquet timestamps); text in a fixed format (Avazu's
``hour``, ``14102100``, is ``%y%m%d%H``) or ISO 8601 (``2017-05-06 00:00:00``).  A
:class:`TimeForm` names one of them and reads a column written in it as int64 UTC epoch
seconds (floored; naive text and datetimes are UTC), the unit ``hour`` / ``weekday`` /
``day``, the splits and the history operators read.  The same code reads the log at read
time (:mod:`fbrapids.workloads.frames`) and a served request's column
(:mod:`fbrapids.serving.spec`), so a served row's time is training's.

The form's names: ``"s"``, ``"ms"``, ``"us"``, ``"ns"`` (epoch numbers; an integer
column, or text of integers), ``"datetime"`` (a datetime64 column in any unit and zone;
text is read as ISO 8601), ``"iso8601"``, or a ``strptime`` format holding ``%``.  An
integer column read by a format of fixed-width numeric fields (``%y%m%d%H``) is read as
its zero-padded digits (``5102100`` is ``05102100``).

Undeclared, :func:`infer_form` names the form only where the values leave one reading:
a datetime column; numbers that are epoch seconds, milliseconds, microseconds or
nanoseconds of dates in :data:`PLAUSIBLE` (the four ranges are disjoint); text that is
ISO 8601 there and nothing else.  Otherwise it is an error naming the values seen.

Example:
    >>> import pandas as pd
    >>> TimeForm("%y%m%d%H").seconds(pd.Series([14102100, 14102123]), "hour").tolist()
    [1413849600, 1413932400]
    >>> infer_form(pd.Series([1413849600000, 1413932400000]), "ts").name, TimeForm("ms").describe()
    ('ms', 'epoch milliseconds')
    >>> infer_form(pd.Series([14102100, 14102123]), "log.csv: time 'hour'")
    Traceback (most recent call last):
    ...
    fbrapids.errors.WorkloadError: log.csv: time 'hour': the values seen (14102100 .. 14102123) are not epoch seconds, milliseconds, microseconds or nanoseconds of a date in 1990-2099, nor ISO 8601 text: declare the time column's form (time_form = "s" | "ms" | "us" | "ns" | "datetime" | "iso8601" | a strptime format, e.g. "%y%m%d%H" for YYMMDDHH)
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from fbrapids.errors import WorkloadError
from fbrapids.frames import backend as _backend
from fbrapids.views.inputs import epoch_seconds, is_datetime

if TYPE_CHECKING:  # (annotations only)
    from fbrapids.frames.backend import EagerFrame, EagerSeries, SeriesLike

#: the epoch units and their counts per second
UNITS = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
FORMS = (*UNITS, "datetime", "iso8601")
_DESCRIBED = {"s": "epoch seconds", "ms": "epoch milliseconds", "us": "epoch microseconds",
              "ns": "epoch nanoseconds", "datetime": "a datetime column (text read as ISO 8601)",
              "iso8601": "ISO 8601 text"}
#: the dates an undeclared time column may hold for its form to be inferred (UTC, [lo, hi))
PLAUSIBLE = (int(dt.datetime(1990, 1, 1, tzinfo=dt.timezone.utc).timestamp()),
             int(dt.datetime(2100, 1, 1, tzinfo=dt.timezone.utc).timestamp()))
#: the dates a declared epoch unit may give (a wrong unit gives dates far outside)
DECLARED = (0, PLAUSIBLE[1])
HINT = ('declare the time column\'s form (time_form = "s" | "ms" | "us" | "ns" | "datetime" | "iso8601" | a '
        'strptime format, e.g. "%y%m%d%H" for YYMMDDHH)')


def when(seconds: int | None) -> str:
    """``seconds`` (UTC epoch) as ``YYYY-MM-DD HH:MM:SS``, or ``-`` for None.

    Example:
        >>> when(1413849600), when(None)
        ('2014-10-21 00:00:00', '-')
    """
    if seconds is None:
        return "-"
    try:
        return dt.datetime.fromtimestamp(int(seconds), dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return f"year {1970 + int(seconds) // 31_556_952:+d}"  # beyond what datetime holds


def seen(values: pd.Series, limit: int = 3) -> str:
    """A short account of ``values`` for a message: the range of numbers, or the first
    distinct texts.

    Example:
        >>> seen(pd.Series(["a", "b", "a", "c", "d"])), seen(pd.Series([3, 1, 2]))
        ("'a', 'b', 'c', ...", '1 .. 3')
    """
    s = pd.Series(values).dropna()
    if not len(s):
        return "only nulls"
    if pd.api.types.is_numeric_dtype(s.dtype) and not pd.api.types.is_bool_dtype(s.dtype):
        return f"{s.min()!r} .. {s.max()!r}".replace("np.int64(", "").replace("np.float64(", "").replace(")", "")
    first = list(dict.fromkeys(s.astype(str).tolist()[:1000]))
    return ", ".join(repr(v) for v in first[:limit]) + (", ..." if len(first) > limit else "")


@dataclass(frozen=True)
class TimeForm:
    """One form of a time column (module docstring); ``inferred``: named by
    :func:`infer_form`, not declared."""

    name: str
    inferred: bool = False

    def __post_init__(self) -> None:
        name = self.name
        if not isinstance(name, str) or not (name in FORMS or "%" in name):
            raise WorkloadError(f"time_form must be one of {list(FORMS)} or a strptime format holding '%', got "
                                f"{name!r}")
        if "%" in name:
            try:
                text = dt.datetime(2001, 2, 3, 4, 5, 6).strftime(name)
                dt.datetime.strptime(text, name)
            except ValueError as e:
                raise WorkloadError(f"time_form {name!r} is not a strptime format ({e})") from None

    def describe(self) -> str:
        """The form in words (``"epoch milliseconds"``, ``"text '%y%m%d%H'"``), with
        ``inferred`` said.

        Example:
            >>> TimeForm("%y%m%d%H").describe(), TimeForm("s", inferred=True).describe()
            ("text '%y%m%d%H'", 'epoch seconds (inferred from its values)')
        """
        text = _DESCRIBED.get(self.name, f"text {self.name!r}")
        return text + (" (inferred from its values)" if self.inferred else "")

    # -- reading ----------------------------------------------------------------------------
    def parse(self, values: SeriesLike) -> tuple[np.ndarray, np.ndarray]:
        """``(seconds, bad)``: ``values`` (a pandas or cudf series) as int64 UTC epoch
        seconds, and where a value is null or is not of this form (its seconds there are 0).

        Example:
            >>> secs, bad = TimeForm("iso8601").parse(pd.Series(["2017-05-06 00:00:01", "x", None]))
            >>> secs.tolist(), bad.tolist()
            ([1494028801, 0, 0], [False, True, True])
        """
        s = values.to_pandas() if _backend.is_gpu_object(values) else values
        s = s.reset_index(drop=True)
        if self.name in UNITS:
            out = _from_numbers(s, UNITS[self.name])
        elif is_datetime(s.dtype):
            out = _from_datetimes(s) if self.name in ("datetime", "iso8601") else _all_bad(len(s))
        elif self.name in ("datetime", "iso8601"):
            out = _from_texts(s, "ISO8601")
        else:
            out = _from_texts(_as_digits(s, self.name), self.name)
        return out

    def seconds(self, values: EagerSeries, where: str, bounds: tuple[int, int] | None = None) -> EagerSeries:
        """``values`` as int64 UTC epoch seconds (a series of the same kind, index kept);
        a :class:`~fbrapids.errors.WorkloadError` naming ``where``, how many values are not
        of this form and some of them; with ``bounds`` (default: :data:`DECLARED` for an
        epoch unit), dates outside ``[lo, hi)`` too."""
        secs, bad = self.parse(values)
        host = values.to_pandas() if _backend.is_gpu_object(values) else values
        if bad.any():
            raw = host.reset_index(drop=True)
            null = np.asarray(raw.isna(), dtype=bool)
            other = bad & ~null
            parts = [f"{int(other.sum()):,} of {len(bad):,} values are not {self.describe()} (e.g. {seen(raw[other])})"
                     ] if other.any() else []
            parts += [f"{int(null.sum()):,} of {len(bad):,} are null: every row needs its time (read before any "
                      "cleaning)"] if null.any() else []
            raise WorkloadError(f"{where}: {'; '.join(parts)}" + (f"; {HINT}" if other.any() else ""))
        bounds = bounds if bounds is not None else DECLARED if self.name in UNITS else None
        if bounds is not None and len(secs):
            lo, hi = int(secs.min()), int(secs.max())
            if lo < bounds[0] or hi >= bounds[1]:
                raise WorkloadError(f"{where}: read as {self.describe()}, the values seen ({seen(host)}) are the "
                                    f"dates {when(lo)} .. {when(hi)}, outside {when(bounds[0])[:4]}-"
                                    f"{int(when(bounds[1])[:4]) - 1}: is it another unit? {HINT}")
        out = pd.Series(secs, index=host.index, name=host.name)
        if _backend.is_gpu_object(values):
            import cudf

            return cudf.Series(secs, index=values.index, name=values.name)
        return out


def _all_bad(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool)


def _from_numbers(s: pd.Series, per_second: int) -> tuple[np.ndarray, np.ndarray]:
    """Epoch numbers (ints, floats or their text) in ``per_second`` units, floored to seconds."""
    if is_datetime(s.dtype) or pd.api.types.is_bool_dtype(s.dtype):
        return _all_bad(len(s))
    if not pd.api.types.is_numeric_dtype(s.dtype):
        s = pd.to_numeric(s.astype("str").str.strip(), errors="coerce")
    kind = getattr(getattr(s.dtype, "numpy_dtype", s.dtype), "kind", "f")
    bad = np.array(s.isna().to_numpy(dtype=bool))  # (a copy: pandas may hand out a read-only view)
    if kind == "u":  # above 2^63 - 1: no date
        v = s.fillna(0).to_numpy(dtype=np.uint64)
        bad |= v > np.uint64(np.iinfo(np.int64).max)
        v = np.where(bad, 0, v).astype(np.int64)
    elif kind == "i":
        v = s.fillna(0).to_numpy(dtype=np.int64)
    else:
        f = s.to_numpy(dtype=np.float64, na_value=np.nan)
        bad |= ~np.isfinite(f) | (np.abs(f) >= 2.0 ** 63)
        secs = np.floor(np.where(bad, 0.0, f) / per_second).astype(np.int64)
        return secs, bad
    return np.where(bad, 0, v // per_second).astype(np.int64), bad


def _from_datetimes(s: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    secs = epoch_seconds(s)
    bad = secs.isna().to_numpy(dtype=bool)
    return secs.fillna(0).to_numpy(dtype=np.int64), bad


def _from_texts(s: pd.Series, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """Text (or datetimes) in ``fmt`` (a strptime format or ``"ISO8601"``); naive is UTC."""
    if is_datetime(s.dtype):
        return _from_datetimes(s)
    text = s.astype("str").where(s.notna())
    try:
        parsed = pd.to_datetime(text, format=fmt, utc=True, errors="coerce")
    except (ValueError, TypeError, OverflowError):
        return _all_bad(len(s))
    return _from_datetimes(parsed)


def _as_digits(s: pd.Series, fmt: str) -> pd.Series:
    """An integer column's values as the zero-padded digits a format of fixed-width numeric
    fields reads (``5102100`` -> ``"05102100"`` for ``%y%m%d%H``); other columns as they are."""
    kind = getattr(getattr(s.dtype, "numpy_dtype", s.dtype), "kind", "O")
    if kind not in ("i", "u"):
        return s
    width = len(dt.datetime(2001, 2, 3, 4, 5, 6).strftime(fmt))
    text = s.astype("str").where(s.notna())
    return text.str.zfill(width) if text.notna().any() else text


def infer_form(values: SeriesLike, where: str) -> TimeForm:
    """The one form ``values`` can be read in with dates in :data:`PLAUSIBLE` (module
    docstring), ``inferred``; a :class:`~fbrapids.errors.WorkloadError` naming ``where`` and
    the values seen when none or several can."""
    s = (values.to_pandas() if _backend.is_gpu_object(values) else values).dropna().reset_index(drop=True)
    if is_datetime(s.dtype):
        return TimeForm("datetime", inferred=True)
    if not len(s):
        raise WorkloadError(f"{where}: the time column holds only nulls; {HINT}")
    numeric = pd.api.types.is_numeric_dtype(s.dtype) and not pd.api.types.is_bool_dtype(s.dtype)
    candidates = list(UNITS) if numeric else [*UNITS, "iso8601"]
    fits = []
    for name in candidates:
        secs, bad = TimeForm(name).parse(s)
        if not bad.any() and PLAUSIBLE[0] <= secs.min() and secs.max() < PLAUSIBLE[1]:
            fits.append(name)
    if len(fits) == 1:
        return TimeForm(fits[0], inferred=True)
    if fits:
        readings = " or ".join(TimeForm(f).describe() for f in fits)
        raise WorkloadError(f"{where}: the values seen ({seen(s)}) read as {readings} alike; {HINT}")
    raise WorkloadError(f"{where}: the values seen ({seen(s)}) are not epoch seconds, milliseconds, microseconds or "
                        f"nanoseconds of a date in {when(PLAUSIBLE[0])[:4]}-{int(when(PLAUSIBLE[1])[:4]) - 1}, nor "
                        f"ISO 8601 text: {HINT}")


def parse_time_column(part: EagerFrame, column: str, form: TimeForm, where: str) -> EagerFrame:
    """``part`` (a pandas / cudf frame, or a dask partition) with ``column`` read as int64
    UTC epoch seconds in ``form`` (:meth:`TimeForm.seconds`; errors name ``where``).

    Example:
        >>> parse_time_column(pd.DataFrame({"hour": [14102101]}), "hour", TimeForm("%y%m%d%H"), "log")["hour"].tolist()
        [1413853200]
    """
    if not len(part):  # (a dask meta): the column's dtype as every partition's
        return part.assign(**{column: np.zeros(0, dtype=np.int64)})
    return part.assign(**{column: form.seconds(part[column], where)})
