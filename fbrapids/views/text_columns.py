"""Text columns as typed columns, exactly, by the rules :func:`fbrapids.views.read.read_view`
documents for CSV (exact 64-bit ints, correctly rounded floats, ``true`` / ``false``
booleans, ``NaN`` texts null in a number column; a value that does not convert is an error
naming the file, column and row): on the host (:func:`convert_text_column`) and, for the GPU
reader, on the device after checks that the host's rules would give the same answer
(:func:`text_to_dtypes_device`).  :func:`apply_dtypes` converts a partition's columns to the
view's dtypes: text by these rules, any other column by an exact cast
(:func:`fbrapids.views.casts.check_cast`).

Example:
    >>> import pandas as pd
    >>> convert_text_column(pd.Series(["18446744073709551615", "", " 7"], dtype="str"), None, "v.csv", "id").dtype
    UInt64Dtype()
    >>> convert_text_column(pd.Series(["1.5", "x"], dtype="str"), "float64", "v.csv", "p")
    Traceback (most recent call last):
    ...
    fbrapids.errors.ViewError: v.csv: column 'p' row 1 (0-based, after the header): 'x' is not a number (float64)
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Hashable

import numpy as np
import pandas as pd
import pyarrow as pa

from fbrapids.errors import ViewError
from fbrapids.frames import backend as _backend
from fbrapids.views.casts import check_cast, first_failing
from fbrapids.views.dtype_spec import DtypeSpec, as_numpy

if TYPE_CHECKING:
    import cudf

    from fbrapids.frames.backend import EagerFrame, EagerSeries

log = logging.getLogger(__name__)


def _int_text_to_exact(values: pd.Series, path: str, column: str) -> pd.Series:
    """Integers parsed exactly from text: int64 where they fit, uint64 above 2^63.

    Integral floats written as text (``"260.0"``) are accepted when exactly representable
    (below 2^53); anything else is an error naming the file, column and row.  Nulls give a
    nullable ``Int64`` / ``UInt64`` column.
    """
    import pyarrow.compute as pc

    stripped = values.astype("str").str.strip()
    stripped = stripped.where(~_nan_texts(stripped), None).replace("", None)  # "NaN": null, as an empty field
    arr = pa.array(stripped, type=pa.large_string())
    digits = bool(stripped.dropna().str.fullmatch(_INT_TEXT).all())  # (Arrow's int cast also takes "0x10")
    for target in (pa.int64(), pa.uint64()) if digits else ():
        try:
            ints = pc.cast(arr, target)
            break
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
    else:
        try:
            floats = pc.cast(arr, pa.float64())
        except pa.ArrowInvalid:
            floats = None
        f = floats.to_numpy(zero_copy_only=False) if floats is not None else None
        ok = f is not None and bool(np.all(np.isnan(f) | ((np.floor(f) == f) & (np.abs(f) < 2**53))))
        if not ok:
            row, text, why = _first_bad_int(values)
            raise ViewError(f"{path}: column {column!r} row {row} (0-based, after the header): {text!r} {why}")
        ints = pc.cast(floats, pa.int64(), safe=False)
    nullable = {pa.int64(): "Int64", pa.uint64(): "UInt64"}[ints.type]
    if ints.null_count:
        return pd.Series(pd.array(ints.to_pandas(types_mapper={ints.type: pd.api.types.pandas_dtype(nullable)}.get)),
                         index=values.index, name=values.name)
    return pd.Series(ints.to_numpy(), index=values.index, name=values.name)


def _first_bad_int(values: pd.Series) -> tuple[Hashable, str, str]:
    """(row, text, why) of the first value that keeps a column from being 64-bit integers."""
    lowest = highest = None  # rows of a negative value and of one above 2^63 - 1
    for row, text in values.items():
        if text is None or (isinstance(text, float) and np.isnan(text)) or str(text).strip() == "":
            continue
        t = str(text).strip()
        if t.lower() in _NAN_TEXTS:
            continue
        if not re.fullmatch(_INT_TEXT, t):
            x = float(t) if _parses_as_float(t) else float("nan")
            if x.is_integer() and abs(x) < 2**53:
                continue
            return row, str(text), "is not an integer"
        v = int(t)
        if not -(2**63) <= v < 2**64:
            return row, str(text), "is outside the 64-bit range (int64, or uint64 below 2^64)"
        if v < 0 and lowest is None:
            lowest = (row, str(text))
        if v >= 2**63 and highest is None:
            highest = (row, str(text))
    if lowest and highest:
        return highest[0], highest[1], (f"needs uint64, but row {lowest[0]} holds the negative {lowest[1]!r}: "
                                        "no 64-bit integer type holds both")
    return -1, "", "is not an integer"


def text_to_dtypes_device(text: cudf.DataFrame, columns: list[str], dtype: dict[str, DtypeSpec], path: str,
                          be: _backend.Backend) -> cudf.DataFrame | None:
    """cudf string columns converted to ``dtype`` on the device, each conversion checked
    first; None when a check fails (the host reader then gives the answer or the error)."""
    import pylibcudf as plc

    out = {}
    for col in columns:
        want = dtype[col]
        values = text[col]
        if str(want) in ("str", "string", "object") or want is str:
            if bool(values.str.endswith("\r").any()):
                return None  # a CRLF file whose CR cudf kept in the last field: the host's text
            out[col] = values
            continue
        try:
            np_want = as_numpy(pd.api.types.pandas_dtype(want))
        except TypeError:  # a dtype numpy has no name for: the host reader converts it
            return None
        stripped = values.str.strip()
        if np_want.kind in "iu":
            # the target's own range: libcudf's cast does not check overflow, so an int8 column
            # checked against int64 alone would wrap (the host reader raises)
            target = plc.types.DataType(getattr(plc.types.TypeId, _backend.plc_int_type_id(np_want)))
            checked = be.xdf.Series.from_pylibcudf(
                plc.strings.convert.convert_integers.is_integer(stripped.to_pylibcudf()[0], target))
        elif np_want.kind == "f":
            checked = stripped.str.isfloat()
        else:
            return None
        if not bool(checked.all()):  # nulls are skipped: empty fields are nulls
            log.debug("%s: column %r does not all parse as %s on the device; reading on the host", path, col, np_want)
            return None
        if np_want.kind in "iu" and values.null_count \
                and not isinstance(pd.api.types.pandas_dtype(want), pd.api.extensions.ExtensionDtype):
            return None  # a null for a non-nullable int: the host reader names its row
        if np_want.kind == "f" and not _device_floats_exact(stripped, np_want):
            return None
        out[col] = stripped.astype(np_want)
        if np_want.kind == "f":  # a NaN text is null, as on the host (cudf keeps NaN apart from null)
            out[col] = out[col].nans_to_nulls()
    return be.xdf.DataFrame(out)


#: the most digits an integer text may have and be exact in a float type on every value
_EXACT_INT_DIGITS = {np.dtype("float64"): 15, np.dtype("float32"): 7, np.dtype("float16"): 3}


def _device_floats_exact(stripped: cudf.Series, np_want: np.dtype) -> bool:
    """Whether the cudf text column converts to ``np_want`` as the host's rules say, checked
    on the device: no integer text longer than the type holds exactly (the host refuses an
    inexact one, an id is never rounded) and no finite value overflowing a narrower float
    (the host refuses it).  False: let the host reader answer or name the row."""
    unsigned = stripped.str.lstrip("+-")
    whole = unsigned.str.isdecimal() & (unsigned.str.len() > _EXACT_INT_DIGITS.get(np_want, 0))
    if bool(whole.any()):
        return False
    if np_want.itemsize >= 8:
        return True
    wide = stripped.astype("float64")
    narrow = wide.astype(np_want)
    return not bool(((narrow.abs() == np.inf) & (wide.abs() != np.inf)).any())


def _check_int_range(exact: pd.Series, want: DtypeSpec, path: str, column: str) -> None:
    """Raise, naming the row, when an exact int does not fit ``want`` (numpy would wrap it)."""
    info = np.iinfo(getattr(want, "numpy_dtype", want))
    valid = exact.dropna()
    if not len(valid):
        return
    lo, hi = valid.min(), valid.max()
    if int(lo) < info.min or int(hi) > info.max:
        bad = valid[(valid > info.max) if int(hi) > info.max else (valid < info.min)]
        raise ViewError(f"{path}: column {column!r} row {bad.index[0]}: {int(bad.iloc[0])} does not fit {want}")


_NAN_TEXTS = ("nan", "+nan", "-nan")
_INT_TEXT = r"[+-]?[0-9]+"  #: an integer text: ASCII digits with an optional sign
_BOOL_TEXTS = {"true": True, "false": False}


def _nan_texts(stripped: pd.Series) -> pd.Series:
    """Which (stripped) texts spell a float NaN (``NaN``, ``nan``, ``-nan`` ..., any case)."""
    return stripped.str.lower().isin(_NAN_TEXTS).fillna(False).astype(bool)


def _text_error(path: str, column: str, values: pd.Series, bad: pd.Series, why: str) -> ViewError:
    row = bad.to_numpy().nonzero()[0][0]
    text = values.iloc[row]
    shown = "an empty field" if text is None or text != text or not str(text).strip() else repr(text)
    return ViewError(f"{path}: column {column!r} row {row} (0-based, after the header): {shown} {why}")


def _text_to_floats(values: pd.Series, want: DtypeSpec, path: str, column: str) -> pd.Series:
    """Floats parsed from text, correctly rounded; NaN texts and empty fields are NaN; a
    text that is no number, or a finite number that overflows ``want``, names its row."""
    import pyarrow.compute as pc

    stripped = values.str.strip()
    text = pa.array(stripped.where(stripped.notna() & (stripped != ""), None), type=pa.large_string())
    try:
        out = pc.cast(text, pa.float64()).to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        bad = pd.Series([not _parses_as_float(t) for t in text.to_pylist()])
        raise _text_error(path, column, values, bad, f"is not a number ({want})") from None
    target = as_numpy(pd.api.types.pandas_dtype(want))
    if target != np.float64:
        with np.errstate(over="ignore"):
            narrow = out.astype(target)
        over = pd.Series(np.isinf(narrow) & np.isfinite(out))
        if over.any():
            raise _text_error(path, column, values, over, f"overflows {want}")
        out = narrow
    whole = stripped.str.fullmatch(_INT_TEXT).fillna(False).astype(bool).to_numpy()
    if whole.any():  # an integer text must be held exactly (an id is never rounded)
        inexact = pd.Series([bool(w) and int(t) != int(o) for w, t, o in zip(whole, stripped, out)])
        if inexact.any():
            raise _text_error(path, column, values, inexact, f"is an integer not exactly representable as {want}")
    return pd.Series(out, index=values.index, name=values.name).astype(pd.api.types.pandas_dtype(want))


def _parses_as_float(text: str | None) -> bool:
    import pyarrow.compute as pc

    try:
        pc.cast(pa.array([text], type=pa.large_string()), pa.float64())
        return True
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False


def _text_to_bools(values: pd.Series, want: DtypeSpec, path: str, column: str) -> pd.Series:
    """``true`` / ``false`` (any case) as booleans; empty fields null (an error for ``bool``)."""
    low = values.str.strip().str.lower()
    null = low.isna() | (low == "")
    bad = ~null & ~low.isin(list(_BOOL_TEXTS)).fillna(False).astype(bool)
    if bad.any():
        raise _text_error(path, column, values, bad, f"is not a boolean (true / false) for {want}")
    if null.any() and str(want) == "bool":
        raise _text_error(path, column, values, null, "is empty, which bool cannot hold; pass "
                          f"dtype={{{column!r}: 'boolean'}}")
    out = pd.array([None if n else _BOOL_TEXTS[v] for v, n in zip(low, null)], dtype="boolean")
    return pd.Series(out, index=values.index, name=values.name).astype(pd.api.types.pandas_dtype(want))


def _text_to_ints(values: pd.Series, want: DtypeSpec, path: str, column: str) -> pd.Series:
    """Exact ints of ``want``; a null for a non-nullable int names its row."""
    exact = _int_text_to_exact(values, path, column)
    dtype = pd.api.types.pandas_dtype(want)
    _check_int_range(exact, dtype, path, column)
    if exact.isna().any() and not isinstance(dtype, pd.api.extensions.ExtensionDtype):
        raise _text_error(path, column, values, exact.isna(), f"is null, which {want} cannot hold; pass "
                          f"dtype={{{column!r}: {str(want).capitalize().replace('Uint', 'UInt')!r}}}")
    try:
        return exact.astype(dtype)  # (pandas' astype resolves want by pandas_dtype too)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ViewError(f"{path}: column {column!r} cannot be {want}: {exc}") from None


def _all_int_texts(values: pd.Series) -> bool:
    """Whether every non-empty text of ``values`` is an integer (and one is)."""
    stripped = values.dropna().str.strip()
    stripped = stripped[stripped != ""]
    return bool(len(stripped)) and bool(stripped.str.fullmatch(_INT_TEXT).all())


def convert_text_column(values: pd.Series, want: DtypeSpec | None, path: str, column: str) -> pd.Series:
    """A CSV text column as ``want``, or inferred (see :func:`~fbrapids.views.read.read_view`):
    exact ints, else floats, else booleans, else strings.  ``NaN`` texts are null in a
    number column."""
    if want is not None:
        kind = "U" if want in ("str", "string", str) else pd.api.types.pandas_dtype(want).kind
        if kind in "iu":
            return _text_to_ints(values, want, path, column)
        if kind == "f":
            return _text_to_floats(values, want, path, column)
        if kind == "b":
            return _text_to_bools(values, want, path, column)
        if kind == "M" and _all_int_texts(values):  # epoch numbers in the dtype's unit
            return _cast_column(_int_text_to_exact(values, path, column), want, path, column)
        return values.astype("str")
    stripped = values.dropna().str.strip()
    stripped = stripped[stripped != ""]
    if stripped.empty:
        return values.astype("str")
    numbers = stripped[~_nan_texts(stripped)]
    if len(numbers) and numbers.str.fullmatch(_INT_TEXT).all():
        return _int_text_to_exact(values, path, column)
    if stripped.str.lower().isin(list(_BOOL_TEXTS)).all():
        return _text_to_bools(values, "boolean" if len(stripped) < len(values) else "bool", path, column)
    if pd.to_numeric(numbers, errors="coerce").notna().all():
        try:
            return _text_to_floats(values, "float64", path, column)
        except ViewError:  # pandas' parser took a text Arrow's does not: text it stays
            pass
    return values.astype("str")


# the casts of whole columns live here, not in casts.py: a text column cast to a number is
# converted by convert_text_column, whose datetime texts are cast back through _cast_column
def apply_dtypes(frame: EagerFrame, dtype: dict[str, DtypeSpec], path: str) -> EagerFrame:
    """``frame``'s columns cast to ``dtype``, exactly: a value the target cannot hold (out
    of range, a fraction or NaN for an int, a finite float that overflows, an int that
    float cannot hold exactly, null for a non-nullable dtype, a number other than 0 / 1
    for a bool, a time finer than a coarser datetime unit) is an error naming the file,
    column, row and value, never wrapped.  A text column (parquet strings) converts to a
    number or bool by the CSV text rules (:func:`convert_text_column`)."""
    for col, want in dtype.items():
        if col in frame.columns and str(frame[col].dtype) != str(want):
            frame[col] = _cast_column(frame[col], want, path, col)
    return frame


def _is_text(dtype: DtypeSpec) -> bool:
    return isinstance(dtype, pd.StringDtype) or str(dtype) in ("object", "str", "string")


def _cast_column(values: EagerSeries, want: DtypeSpec, path: str, col: str) -> EagerSeries:
    """One column as ``want``, exactly, or a ViewError naming the file, column, row and value."""
    try:
        target = pd.api.types.pandas_dtype(want) if want is not str else None
    except TypeError:
        target = None
    kind = getattr(target, "kind", "O")
    if _is_text(values.dtype) and kind in "iufb" and target is not None:
        host = _backend.to_host(values)
        text = host.where(host.isna(), host.astype("str")).astype("str")
        out = convert_text_column(text, want, path, col)
        return _backend.to_backend(out, _backend.backend_of(values))  # (cudf: the host's rules, moved back)
    check_cast(values, want, path, col)
    try:  # (pandas' astype resolves ``want`` by pandas_dtype itself; cudf's is given it as it is)
        return values.astype(pd.api.types.pandas_dtype(want)) if isinstance(values, pd.Series) else values.astype(want)
    except (TypeError, ValueError, OverflowError) as exc:
        raise first_failing(values, want, path, col, exc) from None
