"""``clean``: fill nulls, pull fields out of JSON strings, filter rows; with counts.

The order is: row filters whose columns exist in the input run first (less to parse),
then JSON extraction, then fills, then the remaining filters (those that name
extracted columns).  Every default applied is counted: nulls filled per column,
malformed / null / path-missing JSON per source column, rows dropped by the filters.

Counts: for a pandas / cudf frame they are in ``clean_report(frame)`` at once.  For a
dask frame they are a delayed value computed from the same tasks as the frame, so
``dask.compute(frame, clean_report(frame).delayed)`` runs the clean once; reading
``clean_report(frame).counts`` alone computes them.

Example:
    >>> import pandas as pd
    >>> df = pd.DataFrame({"slot": [1, -1, 2], "ctx": ['{"d": {"os": "ios"}}', None, "{bad"]})
    >>> out = clean(df, json={"ctx": {"os": "d.os"}}, fill={"os": ""}, where="slot >= 0")
    >>> out["os"].tolist(), clean_report(out).counts["json"]["ctx"]["malformed"]
    (['ios', ''], 1)
"""

from __future__ import annotations

import collections
import datetime
import logging
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Literal, Sequence, TypedDict, Union

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from fbrapids.errors import CleanError, NoMatchWarning
from fbrapids.frames import backend as _backend
from fbrapids.frames.backend import EagerFrame, EagerSeries, is_eager_frame
from fbrapids.views import json_fields
from fbrapids.views.dtype_spec import DtypeSpec, as_numpy
from fbrapids.views.rows import Mask, fill_null_strings, filter_rows
from fbrapids.views.where import Where, evaluate, parse_where

if TYPE_CHECKING:  # (annotations only: no import at run time)
    from dask.delayed import Delayed

    from fbrapids.frames.backend import FrameLike

log = logging.getLogger(__name__)

#: a filter given as code: one frame (a partition of a dask frame) -> the bool mask of the rows to keep
RowFilter = Callable[[EagerFrame], Mask]
#: a parsed filter expression or a filter given as code
Condition = Union[Where, RowFilter]
WhereArg = Union[str, RowFilter, Sequence[Union[str, RowFilter]], None]
_REPORT_ATTR = "fbrapids.clean"


@dataclass
class CleanReport:
    """What ``clean`` defaulted and dropped.

    ``counts`` is ``{"rows_in", "rows_out", "fill": {col: n}, "json": {src: {...}}}``.
    """

    _counts: dict | None = None
    delayed: Delayed | None = None  # a dask Delayed of the counts, for dask frames

    @property
    def counts(self) -> dict:
        if self._counts is None and self.delayed is not None:
            self._counts = self.delayed.compute()
        return self._counts or {}

    def __repr__(self) -> str:
        return f"CleanReport({self.counts})"


# reports of recently cleaned dask frames, by collection name (bounded: old ones drop out)
_DASK_REPORT_REFS: "collections.OrderedDict[str, CleanReport]" = collections.OrderedDict()
_MAX_REPORTS = 512


def _referenced_columns(cond: Condition) -> set[str] | None:
    """Names a parsed filter reads; None for a callable (unknown)."""
    if isinstance(cond, Where):
        return set(cond.columns)
    return None


def _apply_where(frame: EagerFrame, cond: Condition) -> EagerFrame:
    if isinstance(cond, Where):
        return filter_rows(frame, evaluate(cond, frame))
    mask = cond(frame)
    dtype = getattr(mask, "dtype", None)
    if dtype is None or str(dtype) not in ("bool", "boolean"):
        raise CleanError(f"filter {cond!r} gave {dtype} values, not booleans")
    if str(dtype) == "boolean" and not isinstance(mask, np.ndarray):  # (numpy has no "boolean")
        mask = mask.fillna(False)
    return filter_rows(frame, mask)


def _split_where(where: WhereArg, columns: Sequence[str]) -> tuple[list[Condition], list[Condition]]:
    if where is None:
        return [], []
    given = [where] if isinstance(where, str) or callable(where) else list(where)
    conds = [parse_where(c) if isinstance(c, str) else c for c in given]
    early: list[Condition] = []
    late: list[Condition] = []
    for cond in conds:
        refs = _referenced_columns(cond)
        (early if refs is not None and refs <= set(columns) else late).append(cond)
    return early, late


#: the units a pandas timestamp holds, as pandas-stubs names them
_TIME_UNITS: dict[str, Literal["s", "ms", "us", "ns"]] = {"s": "s", "ms": "ms", "us": "us", "ns": "ns"}
#: a fill for a numeric column, as given
Number = Union[int, float, np.integer, np.floating]


class CleanCounts(TypedDict, total=False):
    """One frame's (or partition's) clean counts: rows in and out, nulls filled per column,
    and per JSON source column what :func:`~fbrapids.views.json_fields.extract_json` counted."""

    rows_in: int
    rows_out: int
    fill: dict[str, int]
    json: dict[str, dict[str, int]]


_STRING_DTYPES = ("object", "str", "string", "string[pyarrow]", "string[python]", "large_string[pyarrow]")


def _misfit(column: str, dtype: DtypeSpec, value: object, why: str) -> CleanError:
    return CleanError(f"fill value {value!r} for column {column!r} ({dtype}) {why}; the fill must be a value of "
                      "the column's type (nothing is wrapped, rounded or converted to another type)")


def fill_value(column: str, dtype: DtypeSpec, value: object) -> object:
    """``value`` checked against ``column``'s ``dtype`` (and made exact for it) before any
    row is filled, so every partition, with nulls or without, agrees.

    * bool columns take a bool; integer columns an int (or an integral float) within the
      dtype's range, never a bool;
    * float columns a number that the dtype holds: an int exactly (``2**53 + 1`` does not
      fit float64), a float without overflow (``1e300`` does not fit float32; a float is
      rounded to the nearest float32 as numpy does);
    * string columns (object, ``str``, ``string``, Arrow strings) take a str: a dask frame
      holds an object column of strings as a string column, so an object column is one too;
    * categoricals a value of their categories' type, which joins the categories when new;
    * datetimes a timestamp (or text pandas parses as one) of the same time-zone awareness,
      exact in the column's unit (a half second does not fit ``datetime64[s]``).

    Raises:
        CleanError: the value does not fit; the message names the column, its dtype and the value.

    Example:
        >>> import numpy as np
        >>> fill_value("age", np.dtype("int8"), -1.0)
        -1
        >>> fill_value("age", np.dtype("int8"), 1000)
        Traceback (most recent call last):
        ...
        fbrapids.errors.CleanError: fill value 1000 for column 'age' (int8) is outside the range -128..127; the fill must be a value of the column's type (nothing is wrapped, rounded or converted to another type)
    """
    if value is None or value is pd.NA or value is pd.NaT:
        raise _misfit(column, dtype, value, "is null")
    text = str(dtype)
    categories = getattr(dtype, "categories", None) if text == "category" else None
    if categories is not None:
        if len(categories) == 0:
            return value  # an all-null categorical of no categories: any value starts them
        return fill_value(column, categories.dtype, value)
    pa_type = getattr(dtype, "pyarrow_dtype", None)
    if pa_type is not None and (pa.types.is_list(pa_type) or pa.types.is_large_list(pa_type)):
        return _fill_list(column, dtype, pa_type, value)
    if isinstance(value, (list, tuple, dict)):
        raise _misfit(column, dtype, value, f"is a {type(value).__name__}: a list fills an Arrow list column "
                      "(pd.ArrowDtype(pa.list_(...))) only")
    if text in _STRING_DTYPES or "string" in text:
        if not isinstance(value, str):
            raise _misfit(column, dtype, value, "is not a string")
        return value
    kind = getattr(getattr(dtype, "numpy_dtype", dtype), "kind", None)
    if kind == "M" or isinstance(dtype, pd.DatetimeTZDtype):
        return _fill_time(column, dtype, value)
    if kind == "b":
        if not isinstance(value, (bool, np.bool_)):
            raise _misfit(column, dtype, value, "is not a bool")
        return bool(value)
    if kind in ("i", "u", "f"):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise _misfit(column, dtype, value, "is not a number")
        numpy_dtype = as_numpy(dtype)
        return _fill_int(column, dtype, numpy_dtype, value) if kind in "iu" else _fill_float(column, dtype, numpy_dtype, value)
    return value


def _fill_list(column: str, dtype: DtypeSpec, pa_type: pa.DataType, value: object) -> list:
    """A list fill for an Arrow list column: a list whose items the column's item type holds
    exactly (Arrow itself would truncate ``1.5`` into an int list)."""
    if not isinstance(value, (list, tuple)):
        raise _misfit(column, dtype, value, "is not a list")
    try:
        held = pa.scalar(list(value), type=pa_type).as_py()
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
        raise _misfit(column, dtype, value, f"does not fit {pa_type} ({exc})") from None
    if held != list(value) or any(isinstance(h, bool) != isinstance(v, bool) for h, v in zip(held, value)):
        raise _misfit(column, dtype, value, f"is not exactly a {pa_type} value (it would read {held!r})")
    return list(value)


def _check_text_column(src: str, dtype: DtypeSpec) -> None:
    """A JSON source column holds text (strings, object, or a categorical of strings); a
    numeric one would be read as the JSON numbers its values print as."""
    text = str(dtype)
    categories = getattr(dtype, "categories", None) if text == "category" else None
    if categories is not None and len(categories):
        text = str(categories.dtype)
    if not (text in _STRING_DTYPES or "string" in text or text == "category"):
        raise CleanError(f"json source column {src!r} holds {dtype} values, not JSON text")


def _fill_int(column: str, dtype: DtypeSpec, numpy_dtype: np.dtype, value: Number) -> int:
    if isinstance(value, (float, np.floating)):
        if not np.isfinite(value) or not float(value).is_integer():
            raise _misfit(column, dtype, value, "is not an integer")
        value = int(value)
    info = np.iinfo(numpy_dtype)
    if not info.min <= int(value) <= info.max:
        raise _misfit(column, dtype, value, f"is outside the range {info.min}..{info.max}")
    return int(value)


def _fill_float(column: str, dtype: DtypeSpec, numpy_dtype: np.dtype, value: Number) -> float:
    with np.errstate(over="ignore"):
        held = numpy_dtype.type(value)
    if isinstance(value, (int, np.integer)):
        if not np.isfinite(held) or int(held) != int(value):
            raise _misfit(column, dtype, value, f"is not exactly a {numpy_dtype} value")
        return float(held)
    if np.isfinite(value) and not np.isfinite(held):
        raise _misfit(column, dtype, value, f"overflows {numpy_dtype}")
    return float(held)


def _fill_time(column: str, dtype: DtypeSpec, value: object) -> pd.Timestamp:
    if not isinstance(value, (str, int, float, np.integer, datetime.date, np.datetime64)):
        raise _misfit(column, dtype, value, f"is not a timestamp (a {type(value).__name__})")
    try:
        ts = pd.Timestamp(value)
    except (TypeError, ValueError) as exc:
        raise _misfit(column, dtype, value, f"is not a timestamp ({exc})") from None
    if ts is pd.NaT:
        raise _misfit(column, dtype, value, "is null")
    tz = getattr(dtype, "tz", None)
    if (tz is None) != (ts.tz is None):
        raise _misfit(column, dtype, value, "differs in time-zone awareness")
    unit = getattr(dtype, "unit", None) or np.datetime_data(as_numpy(dtype))[0]
    held = _TIME_UNITS.get(unit)
    if held is None:
        raise _misfit(column, dtype, value, f"is not exact in unit {unit!r} (a unit pandas timestamps do not hold)")
    try:
        ts = ts.tz_convert(tz) if tz is not None else ts
        return ts.as_unit(held, round_ok=False)
    except (ValueError, OverflowError) as exc:
        raise _misfit(column, dtype, value, f"is not exact in unit {unit!r} ({exc})") from None


def _fill_column(col: EagerSeries, value: Any) -> tuple[EagerSeries, int]:
    """``col`` with its nulls filled, and how many there were.

    The result's dtype depends on the column's dtype only, never on whether this
    partition had nulls: a nullable pandas int / bool column (which holds no nulls once
    filled) always becomes its numpy dtype, so every partition, and a dask frame's
    ``_meta``, agree.
    """
    if isinstance(value, str) and isinstance(col, pd.Series) and _backend.is_host_arrow_strings(col):  # not cudf's: same dtype, no .array
        return _fill_arrow_strings(col, value)
    if isinstance(value, list) and isinstance(col.dtype, pd.ArrowDtype):  # an Arrow list column
        arr = pa.array(col)
        n = arr.null_count
        filled = pc.fill_null(arr, pa.scalar(value, type=arr.type)) if n else arr
        return pd.Series(pd.arrays.ArrowExtensionArray(filled), index=col.index, name=col.name, copy=False), n
    n = int(col.isna().sum())
    if _backend.is_categorical(col.dtype) and value not in col.cat.categories:  # cudf's is no pd.CategoricalDtype
        col = col.cat.add_categories([value])  # dictionary-encoded strings: the fill joins the categories
    filled = col.fillna(value) if n else col
    behind = getattr(filled.dtype, "numpy_dtype", None)
    if isinstance(filled.dtype, pd.api.extensions.ExtensionDtype) and filled.dtype.kind in "iub" \
            and isinstance(behind, np.dtype):
        filled = filled.astype(behind)
    return filled, n


def _fill_arrow_strings(col: pd.Series, value: str) -> tuple[pd.Series, int]:
    """An Arrow-backed string column's nulls filled as Arrow's ``fill_null`` does: for ``""``
    with no bytes under the null slots, the same buffers without the validity bitmap;
    otherwise by the take kernel on a large column (pandas' ``fillna`` there goes through a
    masked replace several times slower).  Same values and dtype as ``col.fillna(value)``."""
    arr = col.array.__arrow_array__()
    n = int(arr.null_count)
    if not n:
        return col, 0
    chunks = [_empty_nulls_as_empty_strings(c) for c in arr.chunks] if value == "" else [None]
    done = (pa.chunked_array(chunks, type=arr.type) if all(c is not None for c in chunks)
            else fill_null_strings(arr, value))  # no copy where the null slots hold no bytes
    filled = pd.arrays.ArrowStringArray(done, dtype=col.dtype)  # type: ignore[call-arg]  # pandas 3 takes dtype=; pandas-stubs 3.1 does not list it
    return pd.Series(filled, index=col.index, name=col.name, copy=False), n


def _empty_nulls_as_empty_strings(chunk: pa.Array) -> pa.Array | None:
    """``chunk`` with its nulls read as ``""``, without a copy, when every null slot already
    spans no bytes (as Arrow's readers and the kernels write them): the same offsets and
    bytes, no validity bitmap.  None when some null slot holds bytes.

    Example:
        >>> _empty_nulls_as_empty_strings(pa.array(["a", None, "bc"])).to_pylist()
        ['a', '', 'bc']
    """
    import pyarrow.compute as pc

    if not chunk.null_count:
        return chunk
    if not (pa.types.is_string(chunk.type) or pa.types.is_large_string(chunk.type)):
        return None
    offsets = np.frombuffer(chunk.buffers()[1], dtype=np.int64 if pa.types.is_large_string(chunk.type) else np.int32)
    span = int(offsets[chunk.offset + len(chunk)]) - int(offsets[chunk.offset])
    if pc.sum(pc.binary_length(chunk)).as_py() != span:  # lengths are >= 0: equal iff nulls span nothing
        return None
    return pa.Array.from_buffers(chunk.type, len(chunk), [None, *chunk.buffers()[1:]], null_count=0,
                                 offset=chunk.offset)


def _clean_frame(frame: EagerFrame, fill: dict[str, object], json: dict[str, dict[str, str]], early: list[Condition],
                 late: list[Condition], drop: Sequence[str]) -> tuple[EagerFrame, CleanCounts]:
    counts: CleanCounts = {"rows_in": int(len(frame)), "fill": {}, "json": {}}
    for cond in early:
        frame = _apply_where(frame, cond)
    if json or fill:
        # a new frame whose columns are replaced below (whole columns, never written in place):
        # the caller's frame keeps its own, so no column data is copied here, on pandas (its
        # copy-on-write) or cudf (a shallow copy holds a column table of its own)
        frame = frame.copy(deep=False)
    for src, paths in json.items():
        cols, jcounts = json_fields.extract_json(frame[src], paths)
        for name, values in cols.items():
            frame[name] = values
        counts["json"][src] = jcounts
        _warn_unmatched(src, paths, jcounts)
    for col, value in fill.items():
        try:
            frame[col], counts["fill"][col] = _fill_column(frame[col], value)
        except (TypeError, ValueError, OverflowError) as exc:
            raise CleanError(f"fill value {value!r} for column {col!r} ({frame[col].dtype}) failed: {exc}") from exc
    for cond in late:
        frame = _apply_where(frame, cond)
    if drop:
        frame = frame.drop(columns=list(drop))
    counts["rows_out"] = int(len(frame))
    return frame, counts


def _warn_unmatched(src: str, paths: dict[str, str], jcounts: dict[str, int]) -> None:
    """A :class:`~fbrapids.errors.NoMatchWarning` for each path found in none of the
    documents of ``src`` that parse (there being some): its column is all null."""
    parsed = jcounts["rows"] - jcounts["null_input"] - jcounts["malformed"] - jcounts["too_deep"]
    for name, path in paths.items():
        if parsed > 0 and jcounts[f"missing:{name}"] == parsed:
            hint = " (it has an empty key: two dots in a row, or a dot at an end)" if "" in path.split(".") else ""
            warnings.warn(f"clean: json path {path!r} (column {name!r}) is in none of the documents of column "
                          f"{src!r} that parse{hint}: {name!r} is all null", NoMatchWarning, stacklevel=3)


def merge_counts(parts: Sequence[dict]) -> dict:
    """Sum per-partition clean counts into one dict of the same shape.

    Example:
        >>> merge_counts([{"rows_in": 2, "fill": {"a": 1}}, {"rows_in": 3, "fill": {"a": 2}}])
        {'rows_in': 5, 'fill': {'a': 3}}
    """
    total: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, dict):
                total[key] = merge_counts([total.get(key, {}), value])
            else:
                total[key] = total.get(key, 0) + value
    return total


def _validate(columns: Sequence[str], fill: dict, json: dict, drop: Sequence[str]) -> None:
    available = list(columns)
    produced = [name for paths in json.values() for name in paths]
    for src, paths in json.items():
        if src not in available:
            raise CleanError(f"json source column {src!r} not found; available: {', '.join(available)}")
        if not isinstance(paths, dict) or not all(isinstance(p, str) and p for p in paths.values()):
            raise CleanError(f"json spec for {src!r} must map output names to dotted paths, got {paths!r}")
    for col in fill:
        if col not in available and col not in produced:
            raise CleanError(f"fill column {col!r} not found; available: {', '.join(available + produced)}")
    for col in drop:
        if col not in available and col not in produced:
            raise CleanError(f"drop column {col!r} not found; available: {', '.join(available + produced)}")


def clean(
    df: _backend.FrameLike,
    fill: dict[str, object] | None = None,
    json: dict[str, dict[str, str]] | None = None,
    where: WhereArg = None,
    drop: Sequence[str] = (),
) -> _backend.FrameLike:
    """Fill nulls, extract JSON fields and filter rows of a pandas, cudf or dask frame.

    Args:
        df: the frame.
        fill: column -> value for its nulls (extracted JSON columns included).
        json: source column -> {output column: dotted path}.  Null, malformed or
            path-missing documents give null (then ``fill``), and are counted.  A path in
            none of the documents that parse (``"device..os"``, a typo) gives a
            :class:`~fbrapids.errors.NoMatchWarning` naming it (on dask, once per process,
            when a partition is computed).
        where: a filter expression (``"slot >= 0 and not isnull(os)"``; the language and its
            exact typing and null rules are in :mod:`fbrapids.views.where`), a callable
            ``frame -> bool mask``, or a list of them; rows where it is False or unknown
            (null) are dropped.
        drop: columns to drop at the end (e.g. the raw JSON column).

    Returns:
        The cleaned frame, of the same kind; counts via :func:`clean_report`.

    Example:
        >>> import pandas as pd
        >>> clean(pd.DataFrame({"q": [None, "a"]}), fill={"q": ""})["q"].tolist()
        ['', 'a']
    """
    fill, json = dict(fill or {}), dict(json or {})
    columns = list(df.columns)
    _validate(columns, fill, json, drop)
    for src in json:
        _check_text_column(src, df.dtypes[src])
    json_dtypes = {name: "str" for paths in json.values() for name in paths}
    fill = {col: fill_value(col, json_dtypes[col] if col in json_dtypes else df.dtypes[col], value)
            for col, value in fill.items()}
    early, late = _split_where(where, columns)
    produced = {name for paths in json.values() for name in paths}
    for cond in late:
        if not isinstance(cond, Where):
            continue
        unknown = sorted(_referenced_columns(cond) or set())
        unknown = [c for c in unknown if c not in columns and c not in produced]
        if unknown:
            raise CleanError(f"filter {cond.text!r} names column(s) {', '.join(map(repr, unknown))} not found; "
                             f"available: {', '.join(list(columns) + sorted(produced))}")
    if is_eager_frame(df):
        out, counts = _clean_frame(df, fill, json, early, late, drop)
        out.attrs = {**getattr(out, "attrs", {}), _REPORT_ATTR: counts} if hasattr(out, "attrs") else {}
        log.debug("clean: %s", counts)
        return out
    import dask

    dd = _backend.dask_dataframe()
    meta, _ = _clean_frame(df._meta, fill, json, early, late, drop)
    parts = df.to_delayed()
    step = dask.delayed(_clean_frame, pure=True, nout=2)
    results = [step(p, fill, json, early, late, drop) for p in parts]
    frames = [r[0] for r in results]
    counts = dask.delayed(merge_counts, pure=True)([r[1] for r in results])
    # rows are only filtered, never moved: known divisions (a view sorted by its key) stay known
    divisions = tuple(df.divisions) if df.known_divisions else None
    out = dd.from_delayed(frames, meta=meta.iloc[:0], divisions=divisions, verify_meta=False)
    report = CleanReport(delayed=counts)
    _DASK_REPORT_REFS[out._name] = report
    while len(_DASK_REPORT_REFS) > _MAX_REPORTS:
        _DASK_REPORT_REFS.popitem(last=False)
    return out


def clean_report(frame: FrameLike) -> CleanReport:
    """The counts of the ``clean`` that produced ``frame``.

    Raises:
        CleanError: ``frame`` was not produced by ``clean``.

    Example:
        >>> import pandas as pd
        >>> out = clean(pd.DataFrame({"a": [None, 1.0]}), fill={"a": 0.0})
        >>> clean_report(out).counts["fill"]
        {'a': 1}
    """
    if not is_eager_frame(frame):
        report = _DASK_REPORT_REFS.get(frame._name)
        if report is None:
            raise CleanError("this dask frame was not produced by clean(); ask the cleaned frame itself")
        return report
    counts = getattr(frame, "attrs", {}).get(_REPORT_ATTR)
    if counts is None:
        raise CleanError("this frame was not produced by clean(); ask the cleaned frame itself")
    return CleanReport(_counts=counts)
