"""Independent references for ``read_view``, written from its docstring (and that of
``fbrapids.views.jsonl``) on pandas.read_csv / read_parquet, Python's ``json`` and plain
Python; they never call fbrapids.

Each reference reads a list of files (the partitions, in order) and returns
``(columns, dtypes, values)``: the column names, the dtype name each reads as
(``int64``, ``uint64``, ``Int64``, ``UInt64``, ``bool``, ``boolean``, ``float64``,
``str`` or another numpy / pandas name) and each column's values as plain Python
objects (None for null).  A case the docstring makes an error raises :class:`Refused`
naming the culprits the error must name.

Readers are not in ``fbrapids.ops``, so ``OPERATORS`` is empty.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Callable

import pandas as pd

OPERATORS: dict[str, Callable[..., Any]] = {}

INT64 = (-(2**63), 2**63 - 1)
UINT64 = (0, 2**64 - 1)
NAN_TEXTS = ("nan", "+nan", "-nan")
_INT_RE = re.compile(r"[+-]?[0-9]+")
_NUMERIC_NP = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}


class Refused(Exception):
    """The reference's answer is an error; ``culprits`` are what its message must name
    (the file and the column of a value; the column alone where no file is to blame).
    ``options``: every such tuple the reference found; the error must name one of them
    (a reader may stop at any bad value)."""

    def __init__(self, *culprits: str, options: list[tuple[str, ...]] | None = None) -> None:
        self.options = options or [culprits]
        super().__init__("; ".join(", ".join(o) for o in self.options))
        self.culprits = self.options[0]


def refuse_all(found: list[tuple[str, ...]]) -> None:
    """Raise Refused with every bad (file, column) found, when there is one."""
    if found:
        raise Refused(options=list(dict.fromkeys(found)))


# -- the shared value rules ---------------------------------------------------------------
def int_range(dtype: str) -> tuple[int, int]:
    name = dtype.lower()
    bits = int(re.sub(r"\D", "", name))
    return (0, 2**bits - 1) if name.startswith("u") else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


def is_nullable(dtype: str) -> bool:
    return dtype[0].isupper() or dtype in ("boolean", "str", "float64", "float32") or dtype.startswith("datetime")


def ints_dtype(ints: list[int], nulls: bool, culprits: tuple[str, ...]) -> str:
    if not ints:
        return "Int64" if nulls else "int64"
    lo, hi = min(ints), max(ints)
    if lo >= INT64[0] and hi <= INT64[1]:
        return "Int64" if nulls else "int64"
    if lo >= 0 and hi <= UINT64[1]:
        return "UInt64" if nulls else "uint64"
    raise Refused(*culprits)


def as_float(f: float, dtype: str, culprits: tuple[str, ...]) -> float:
    """``f`` rounded to ``dtype`` (float32 / float64); a finite value that overflows is refused."""
    import numpy as np

    with np.errstate(over="ignore"):
        g = float(np.dtype(dtype).type(f))
    if math.isinf(g) and not math.isinf(f):
        raise Refused(*culprits)
    return g


# -- CSV ----------------------------------------------------------------------------------
def _csv_text(path: str, sep: str, header: bool, names: list[str] | None, compression: str | None
              ) -> pd.DataFrame | None:
    with open(path, "rb") as fh:
        raw = fh.read()
    if compression == "gzip":
        import gzip

        raw = gzip.decompress(raw)
    if not raw:
        return None
    import io

    return pd.read_csv(io.BytesIO(raw), sep=sep, header=0 if header else None, names=names, dtype=str,
                       keep_default_na=False, na_values=[""], encoding="utf-8-sig", index_col=False)


def _float(t: str) -> float:
    """A number text as the docstring reads it: ASCII only (Python's float() also takes
    ``1_000`` and other scripts' digits, which are text to a CSV reader)."""
    if not t.isascii() or "_" in t:
        raise ValueError(t)
    return float(t)


def _csv_infer(texts: list[str | None]) -> str:
    present = [t.strip() for t in texts if t is not None and t.strip() != ""]
    if not present:
        return "str"
    nulls = len(present) < len(texts) or any(t.lower() in NAN_TEXTS for t in present)
    numbers = [t for t in present if t.lower() not in NAN_TEXTS]
    if numbers and all(_INT_RE.fullmatch(t) for t in numbers):
        ints = [int(t) for t in numbers]
        return ints_dtype(ints, nulls, ("column",))
    if all(t.lower() in ("true", "false") for t in present):
        return "boolean" if len(present) < len(texts) else "bool"
    try:
        [_float(t) for t in present]
    except ValueError:
        return "str"
    if any(_INT_RE.fullmatch(t) and int(_float(t)) != int(t) for t in present):
        return "str"  # an integer float64 cannot hold exactly: the column stays text
    return "float64"


def csv_value(text: str | None, dtype: str, culprits: tuple[str, ...]) -> Any:
    """One CSV field as ``dtype``, by the docstring's rules, or Refused."""
    if dtype == "str":
        return text if text not in (None, "") else None  # only an empty field is null
    t = None if text is None or text.strip() == "" else text.strip()
    if t is not None and dtype.lower() in _NUMERIC_NP and t.lower() in NAN_TEXTS:
        t = None
    if t is None:
        if not is_nullable(dtype):
            raise Refused(*culprits)
        return None
    if dtype.lower() in _NUMERIC_NP:
        if _INT_RE.fullmatch(t):
            v = int(t)
        else:
            try:
                f = _float(t)
            except ValueError:
                raise Refused(*culprits) from None
            if not (f.is_integer() and abs(f) < 2**53):
                raise Refused(*culprits)
            v = int(f)
        lo, hi = int_range(dtype)
        if not lo <= v <= hi:
            raise Refused(*culprits)
        return v
    if dtype in ("bool", "boolean"):
        if t.lower() not in ("true", "false"):
            raise Refused(*culprits)
        return t.lower() == "true"
    if dtype in ("float64", "float32"):
        try:
            f = _float(t)
        except ValueError:
            raise Refused(*culprits) from None
        if math.isnan(f):
            return None
        g = as_float(f, dtype, culprits)
        if _INT_RE.fullmatch(t) and int(g) != int(t):
            raise Refused(*culprits)  # an integer is held exactly or refused
        return g
    return pd.Series([t]).astype(dtype).iloc[0]


def read_csv_ref(paths: list[str], *, sep: str, header: bool = True, names: list[str] | None = None,
                 dtype: dict[str, str] | None = None, compression: str | None = None
                 ) -> tuple[list[str], dict[str, str], dict[str, list[Any]]]:
    """CSV files as read_view documents them: text first, dtypes from the first file with
    text (or ``dtype=``), every file converted to those."""
    frames = [(p, _csv_text(p, sep, header, names, compression)) for p in paths]
    texts = [(p, f) for p, f in frames if f is not None]
    if not texts:
        return list(names or []), {c: (dtype or {}).get(c, "str") for c in names or []}, {c: [] for c in names or []}
    first_path, first = texts[0]
    columns = [str(c) for c in first.columns]
    dtypes = {}
    for c in columns:
        if dtype and c in dtype:
            dtypes[c] = dtype[c]
            continue
        try:
            dtypes[c] = _csv_infer([None if v is None or v != v else v for v in first[c].tolist()])
        except Refused:
            raise Refused(first_path, c) from None
    values: dict[str, list[Any]] = {c: [] for c in columns}
    found: list[tuple[str, ...]] = []
    for path, frame in texts:
        for c in columns:
            for v in frame[c].tolist():
                try:
                    values[c].append(csv_value(None if v is None or v != v else v, dtypes[c], (path, c)))
                except Refused as bad:
                    found.append(bad.culprits)
    refuse_all(found)
    return columns, dtypes, values


# -- JSON lines ---------------------------------------------------------------------------
def _kind(v: Any) -> str:
    return ("bool" if isinstance(v, bool) else "int" if isinstance(v, int) else "float" if isinstance(v, float)
            else "str" if isinstance(v, str) else "nested")


def json_text(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, separators=(",", ":"))


def read_json_ref(paths: list[str], dtype: dict[str, str] | None = None
                  ) -> tuple[list[str], dict[str, str], dict[str, list[Any]]]:
    """JSON-lines files as read_view / fbrapids.views.jsonl document them (small files:
    every record is in the sample)."""
    records: list[tuple[str, dict[str, Any]]] = []
    for p in paths:
        import gzip

        with (gzip.open(p, "rt", encoding="utf-8-sig") if p.endswith(".gz") else open(p, encoding="utf-8-sig")) as fh:
            records += [(p, json.loads(line)) for line in fh if line.strip()]
    columns = list(dict.fromkeys(k for _, r in records for k in r))
    dtypes, values = {}, {}
    found: list[tuple[str, ...]] = []
    for c in columns:
        vals = [r.get(c) for _, r in records]
        kinds = {_kind(v) for v in vals if v is not None}
        nulls = any(v is None for v in vals)
        want = (dtype or {}).get(c)
        if want is None:
            if kinds <= {"str", "nested"}:
                want = "str"
            elif kinds == {"bool"}:
                want = "boolean" if nulls else "bool"
            elif kinds == {"int"}:
                try:
                    want = ints_dtype([v for v in vals if v is not None], nulls, (c,))
                except Refused as bad:  # every bad column is an option: a reader may stop at any
                    found.append(bad.culprits)
                    continue
            elif kinds <= {"int", "float"}:
                want = "float64"
            else:
                found.append((c,))
                continue
        dtypes[c] = want
        values[c] = []
        for (p, _), v in zip(records, vals):
            try:
                values[c].append(_json_value(v, want, (p, c)))
            except Refused as bad:
                found.append(bad.culprits)
    refuse_all(found)
    return columns, dtypes, values


def _json_value(v: Any, want: str, culprits: tuple[str, ...]) -> Any:
    if v is None:
        if not is_nullable(want):
            raise Refused(*culprits)
        return None
    if want == "str":
        return json_text(v)
    if want.lower() in _NUMERIC_NP:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise Refused(*culprits)
        if isinstance(v, float):
            if not (v.is_integer() and abs(v) < 2**53):
                raise Refused(*culprits)
            v = int(v)
        lo, hi = int_range(want)
        if not lo <= v <= hi:
            raise Refused(*culprits)
        return v
    if want in ("bool", "boolean"):
        if not isinstance(v, bool):
            raise Refused(*culprits)
        return v
    if want in ("float64", "float32"):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise Refused(*culprits)
        if isinstance(v, int) and int(as_float(float(v), want, culprits)) != v:
            raise Refused(*culprits)
        return as_float(float(v), want, culprits)
    return pd.Series([v]).astype(want).iloc[0]


# -- parquet ------------------------------------------------------------------------------
def read_parquet_ref(paths: list[str], columns: list[str] | None = None
                     ) -> tuple[list[str], dict[str, str], dict[str, list[Any]]]:
    """Parquet files through pandas.read_parquet; a stored index becomes a column (its
    name, or ``__index_level_0__`` unnamed), a RangeIndex is dropped."""
    frames = []
    for p in paths:
        f = pd.read_parquet(p, dtype_backend="numpy_nullable")
        if not isinstance(f.index, pd.RangeIndex):
            levels = f.index.nlevels
            f = f.reset_index(names=[n if n is not None else f"__index_level_{i}__"
                                     for i, n in enumerate(f.index.names)])
            f = f[list(f.columns[levels:]) + list(f.columns[:levels])]  # pandas stores the index last
        frames.append(f)
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    cols = list(columns) if columns is not None else [str(c) for c in frame.columns]
    values = {c: [None if _null(v) else v for v in frame[c].astype(object).tolist()] for c in cols}
    return cols, {c: str(frame[c].dtype) for c in cols}, values


def _null(v: Any) -> bool:
    try:
        return v is None or bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


# -- dtype= on stored columns (parquet) -----------------------------------------------------
_TIME_NS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}


def cast_stored(v: Any, kind: str, target: str, culprits: tuple[str, ...]) -> Any:
    """One stored value (``kind``: ``int``, ``float``, ``text`` or ``time`` as epoch ns) read
    with ``dtype=target``, by read_view's docstring: exact, or Refused.

    Ints read as floats must be exact; floats read as ints must be whole and in range;
    numbers read as bool must be 0 or 1; text follows the CSV text rules; numbers read as
    ``datetime64[u]`` count units ``u`` and must be whole (int64 less its lowest value);
    a time read in a coarser unit must lose nothing; a time is never read as a number."""
    if v is None:
        if not is_nullable(target):
            raise Refused(*culprits)
        return None
    if kind == "text":
        return v if target == "str" else csv_value(v, target, culprits)
    if target == "str":
        return str(v)
    if target.startswith("datetime64"):
        unit = target[len("datetime64["):-1]
        if kind == "time":
            if v % _TIME_NS[unit]:
                raise Refused(*culprits)
            return pd.Timestamp(v, unit="ns")
        if (isinstance(v, float) and not v.is_integer()) or not INT64[0] < v <= INT64[1]:
            raise Refused(*culprits)
        import numpy as np

        return np.datetime64(int(v), unit)
    if kind == "time":
        raise Refused(*culprits)
    if target.lower() in _NUMERIC_NP:
        lo, hi = int_range(target)
        if (isinstance(v, float) and not v.is_integer()) or not lo <= v <= hi:
            raise Refused(*culprits)
        return int(v)
    if target in ("bool", "boolean"):
        if v not in (0, 1):
            raise Refused(*culprits)
        return bool(v)
    g = as_float(float(v), target, culprits)
    if isinstance(v, int) and int(g) != v:
        raise Refused(*culprits)
    return g


def read_cast_ref(files: list[tuple[str, list[Any]]], kind: str, column: str, target: str
                  ) -> tuple[list[str], dict[str, str], dict[str, list[Any]]]:
    """One stored column, file by file, read with ``dtype={column: target}``.  A time read
    as a number is refused by its type, whatever its values (none, or only nulls, too)."""
    if kind == "time" and not target.startswith("datetime64") and target != "str":
        raise Refused(column)
    values: list[Any] = []
    found: list[tuple[str, ...]] = []
    for path, vals in files:
        for v in vals:
            try:
                values.append(cast_stored(v, kind, target, (path, column)))
            except Refused as bad:
                found.append(bad.culprits)
    refuse_all(found)
    return [column], {column: target}, {column: values}
