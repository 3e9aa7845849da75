"""JSON lines as typed columns, exactly: the JSON half of :func:`fbrapids.read_view`.

Every line is parsed with Python's ``json`` (integers stay exact Python ints, whatever
their size), and each column is built from its values by one rule, the same for the
dtypes inferred from a sample and for the dtypes the partitions are converted to:

* a column's dtype follows the kind of its non-null values: booleans -> ``bool``
  (``boolean`` when null occurs); integers -> ``int64`` (``uint64`` when one is above
  2^63 - 1 and none is negative; ``Int64`` / ``UInt64`` when null occurs); numbers with
  a fraction (with or without integers) -> ``float64``; strings, and objects / arrays
  (nested values) -> ``str``; only nulls -> ``str``.  Another mix of kinds is an error
  naming the file, column and line (pass ``dtype={col: "str"}`` to read it as text);
* a nested value (object or array) in a ``str`` column is its compact JSON text
  (``{"k":[1,2]}``, keys in the file's order, non-ASCII kept), a string is itself, and
  a number or boolean is its JSON text (``1``, ``true``);
* a value that does not fit the column's dtype (an integer beyond 64 bits or beyond a
  narrower ``dtype=``, an integer that float64 cannot hold exactly, a fraction for an
  integer column, a string for a number column, null for a non-nullable one) is a
  :class:`~fbrapids.errors.ViewError` naming the file, column, line (1-based) and value;
  it is never wrapped or rounded.

A key missing from a record is null there.

Example:
    >>> import tempfile
    >>> p = tempfile.mktemp(suffix=".jsonl")
    >>> _ = open(p, "w").write('{"id": 18446744073709551615, "t": {"a": [1]}}\\n{"id": 1, "b": true}\\n')
    >>> keys, sample = scan(p, lambda: open(p, "rb"), "utf-8")
    >>> keys, [infer_dtype(sample[k], p, k) for k in keys]
    (['id', 't', 'b'], ['uint64', 'str', 'boolean'])
    >>> to_column(sample["t"], "str", p, "t").tolist()
    ['{"a":[1]}', nan]
"""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, BinaryIO, Callable, Iterator, Union

import numpy as np
import pandas as pd
from pandas.api.extensions import ExtensionArray, ExtensionDtype

from fbrapids.errors import ViewError
from fbrapids.views.dtype_spec import DtypeSpec, as_numpy

if TYPE_CHECKING:
    import pyarrow as pa

#: where a value is, for a message: its line number, or words (``"line 3 of a.jsonl"``)
Where = Union[int, str]
#: (where it is, value) of each value of a column; value None is JSON null or an absent key
#: (a value is what ``json.loads`` gives: a str, number, bool, list or dict)
Values = list[tuple[Where, object]]
#: a function opening a file's (decompressed) bytes
Opener = Callable[[], Union["pa.NativeFile", BinaryIO]]
_NESTED = (dict, list)
_STR_DTYPES = ("str", "string", "object")


def records(path: str, open_fn: Opener, encoding: str, nrows: int | None = None
            ) -> Iterator[tuple[int, dict[str, object]]]:
    """``(line number, record)`` of each non-blank line (the first ``nrows`` when given)."""
    with open_fn() as raw, io.TextIOWrapper(raw, encoding=encoding, newline=None) as fh:
        seen = 0
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            if nrows is not None and seen >= nrows:
                return
            seen += 1
            try:
                rec = json.loads(line)
            except ValueError as exc:
                raise ViewError(f"{path}: line {lineno} is not JSON: {exc}") from None
            if not isinstance(rec, dict):
                raise ViewError(f"{path}: line {lineno} is not a JSON object")
            yield lineno, rec


def columns_of(recs: list[tuple[int, dict[str, object]]], keys: list[str]) -> dict[str, Values]:
    """The values of each of ``keys`` over ``recs`` (None where a record lacks the key)."""
    return {k: [(n, r.get(k)) for n, r in recs] for k in keys}


def scan(path: str, open_fn: Opener, encoding: str, nrows: int | None = None
         ) -> tuple[list[str], dict[str, Values]]:
    """The keys of the first ``nrows`` records (first-seen order) and their values."""
    recs = list(records(path, open_fn, encoding, nrows))
    keys = list(dict.fromkeys(k for _, r in recs for k in r))
    return keys, columns_of(recs, keys)


def _kind(v: object) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "str"
    return "nested"


def infer_dtype(values: Values, path: str, column: str) -> str:
    """The dtype of a column from its values (see the module doc)."""
    first: dict[str, Where] = {}
    nulls = False
    for n, v in values:
        if v is None:
            nulls = True
        else:
            first.setdefault(_kind(v), n)
    kinds = set(first)
    if kinds <= {"str", "nested"}:
        return "str"
    if kinds == {"bool"}:
        return "boolean" if nulls else "bool"
    if kinds == {"int"}:
        ints = [v for _, v in values if isinstance(v, int)]  # (every value but the nulls)
        unsigned = max(ints) >= 2**63 and min(ints) >= 0
        return ("UInt64" if unsigned else "Int64") if nulls else ("uint64" if unsigned else "int64")
    if kinds <= {"int", "float"}:
        return "float64"
    where = ", ".join(f"{k} at {f'line {n}' if isinstance(n, int) else n}" for k, n in first.items())
    raise ViewError(f"{path}: column {column!r} mixes JSON value kinds ({where}); "
                    f"pass dtype={{{column!r}: 'str'}} to read each value as its JSON text")


def json_text(v: object) -> str:
    """A value as text: a string as itself, anything else as compact JSON."""
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, separators=(",", ":"))


def _bad(path: str, column: str, lineno: Where, v: object, why: str) -> ViewError:
    return ViewError(f"{path}: column {column!r} line {lineno}: {json_text(v)[:200]!r} {why}")


def _exact_int(v: object, info: np.iinfo, want: DtypeSpec, path: str, column: str, n: Where) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _bad(path, column, n, v, f"is not an integer ({want})")
    if isinstance(v, float):
        if not (v == v and v.is_integer() and abs(v) < 2**53):
            raise _bad(path, column, n, v, f"is not a whole number exactly representable as {want}")
        v = int(v)
    if not info.min <= v <= info.max:
        raise _bad(path, column, n, v, f"does not fit {want}")
    return v


def _to_ints(values: Values, dtype: np.dtype | ExtensionDtype, path: str, column: str) -> np.ndarray | ExtensionArray:
    info = np.iinfo(as_numpy(dtype))
    nullable = isinstance(dtype, pd.api.extensions.ExtensionDtype)
    out: list[int | None] = []
    for n, v in values:
        if v is None:
            if not nullable:
                raise _bad(path, column, n, v, f"is null, which {dtype} cannot hold; pass dtype={{{column!r}: "
                                                f"{str(dtype).capitalize().replace('Uint', 'UInt')!r}}}")
            out.append(None)
        else:
            out.append(_exact_int(v, info, dtype, path, column, n))
    if not nullable:
        return np.array(out, dtype=as_numpy(dtype))  # (a numpy dtype here)
    # values and mask apart: pd.array([None, 2**53 + 1], dtype="UInt64") goes through float64
    data = np.array([0 if v is None else v for v in out], dtype=as_numpy(dtype))
    return pd.arrays.IntegerArray(data, np.array([v is None for v in out], dtype=bool))


def _to_floats(values: Values, dtype: np.dtype | ExtensionDtype, path: str, column: str) -> np.ndarray | ExtensionArray:
    out = np.empty(len(values), dtype=as_numpy(dtype))
    for i, (n, v) in enumerate(values):
        if v is None:
            out[i] = np.nan
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise _bad(path, column, n, v, f"is not a number ({dtype})")
        out[i] = v
        if isinstance(v, int) and int(out[i]) != v:
            raise _bad(path, column, n, v, f"is not exactly representable as {dtype}")
        if np.isinf(out[i]) and not np.isinf(v):
            raise _bad(path, column, n, v, f"overflows {dtype}")
    if isinstance(dtype, pd.api.extensions.ExtensionDtype):  # pandas-stubs 3.1 names each extension dtype pd.array takes:
        return pd.array(out, dtype=dtype)  # type: ignore[call-overload]  # any one is taken at run time
    return out


def _to_bools(values: Values, dtype: np.dtype | ExtensionDtype, path: str, column: str) -> np.ndarray | ExtensionArray:
    nullable = isinstance(dtype, pd.api.extensions.ExtensionDtype)
    for n, v in values:
        if v is None and not nullable:
            raise _bad(path, column, n, v, f"is null, which {dtype} cannot hold; pass dtype={{{column!r}: 'boolean'}}")
        if v is not None and not isinstance(v, bool):
            raise _bad(path, column, n, v, f"is not a boolean ({dtype})")
    vals = [v if isinstance(v, bool) else None for _, v in values]  # (each a bool or None, checked above)
    return pd.array(vals, dtype="boolean") if nullable else np.array(vals, dtype=bool)


def _to_other(values: Values, dtype: np.dtype | ExtensionDtype, path: str, column: str) -> ExtensionArray:
    """Strings to another dtype (datetimes ...): pandas converts; an error names the line.
    A number read as a datetime counts units of it (``datetime64[s]``: epoch seconds), and
    must be whole and within int64 less its lowest value (NaT's); a boolean is no time."""
    if getattr(dtype, "kind", "") == "M":
        for n, v in values:
            if isinstance(v, bool) or (isinstance(v, float) and not (v == v and v.is_integer())):
                raise _bad(path, column, n, v, f"is not a whole number of {dtype} units")
            if isinstance(v, (int, float)) and not -(2**63) < v < 2**63:
                raise _bad(path, column, n, v, f"does not fit {dtype}")
    obj = pd.Series([v for _, v in values], dtype=object)
    try:
        return obj.astype(dtype).array
    except (TypeError, ValueError, OverflowError) as exc:
        for n, v in values:
            try:
                pd.Series([v], dtype=object).astype(dtype)
            except (TypeError, ValueError, OverflowError):
                raise _bad(path, column, n, v, f"cannot be {dtype}: {exc}") from None
        raise ViewError(f"{path}: column {column!r} cannot be {dtype}: {exc}") from None


def to_column(values: Values, want: DtypeSpec, path: str, column: str) -> pd.Series:
    """One column's values as ``want`` (a dtype or its name), exactly, or a ViewError."""
    if want is str or str(want) in _STR_DTYPES:
        return pd.Series([None if v is None else json_text(v) for _, v in values], dtype="str")
    dtype = pd.api.types.pandas_dtype(want)
    kind = getattr(dtype, "kind", "O")
    if kind in "iu":
        return pd.Series(_to_ints(values, dtype, path, column))
    if kind == "f":
        return pd.Series(_to_floats(values, dtype, path, column))
    if kind == "b":
        return pd.Series(_to_bools(values, dtype, path, column))
    return pd.Series(_to_other(values, dtype, path, column))
