"""Hypothesis strategies for the inputs a demanding user's frames hold.

- nulls of every kind (None, NaN, pd.NA, NaT), empty frames, all-null columns;
- every integer width, signed and unsigned, at its extremes; ids at 2^53 +- k, 2^63 and
  2^64 - 1;
- strings as numpy objects, pandas' default ``str``, Arrow-backed and categorical; empty
  strings, accents, CJK, emoji, NUL and very long strings;
- datetimes in s, ms, us and ns, with and without a time zone, and integer epochs in
  seconds and nanoseconds;
- duplicate, unsorted and string indexes; ties in times.

Every strategy draws Python values first (the reference's input) and the frame from them,
so a reference never has to undo a dtype conversion.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from hypothesis import strategies as st

SIGNED = ("int8", "int16", "int32", "int64")
UNSIGNED = ("uint8", "uint16", "uint32", "uint64")
INT_DTYPES = SIGNED + UNSIGNED
NULL_KINDS = (None, float("nan"), pd.NA)


def int_bounds(dtype: str) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def ints_of(dtype: str) -> st.SearchStrategy[int]:
    """Integers of ``dtype``'s range, its extremes and their neighbours drawn often."""
    lo, hi = int_bounds(dtype)
    edges = [lo, lo + 1, 0, 1, hi - 1, hi] + ([-1] if lo < 0 else [])
    return st.one_of(st.sampled_from(edges), st.integers(lo, hi))


#: raw 64-bit ids the embedding store keys on: 2^53 +- k (float64 loses them), 2^63 and
#: 2^64 - 1 (int64 wraps them)
BIG_IDS = [2**53 - 1, 2**53, 2**53 + 1, 2**53 + 3, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 2, 2**64 - 1]


def uint64_ids() -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from(BIG_IDS + [0, 1, 7]), st.integers(0, 2**64 - 1))


def int64_ids() -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from([2**53 - 1, 2**53, 2**53 + 1, -(2**53) - 1, 2**63 - 1, -(2**63), 0, -1]),
                     st.integers(-(2**63), 2**63 - 1))


# -- strings -------------------------------------------------------------------------------
ALPHABET = "ab Z09_|-,.:;/\\\"'\t\néèüß漢字日本😀👍🏽\x00"
LONG = ["x" * 5000, "漢" * 1500, "😀 " * 1200, "a b " * 1100]


def texts(min_size: int = 0, max_size: int = 12, long: bool = True) -> st.SearchStrategy[str]:
    """Short texts over accents, CJK, emoji, NUL, separators; now and then a very long one."""
    short = st.text(alphabet=ALPHABET, min_size=min_size, max_size=max_size)
    return st.one_of(short, st.sampled_from(LONG)) if long else short


STRING_STORAGES = ("object", "str", "string[pyarrow]", "arrow_string", "arrow_large_string", "category")


def string_series(values: list[Any], storage: str, index: pd.Index | None = None) -> pd.Series:
    """``values`` (str or a null kind) as a series of ``storage``: numpy object, pandas'
    default ``str``, ``string[pyarrow]``, Arrow ``string`` / ``large_string`` or categorical."""
    if storage == "object":
        return pd.Series(values, dtype=object, index=index)
    clean = [None if (v is None or v is pd.NA or (isinstance(v, float) and v != v)) else v for v in values]
    if storage == "str":
        return pd.Series(clean, dtype="str", index=index)
    if storage == "string[pyarrow]":
        return pd.Series(clean, dtype="string[pyarrow]", index=index)
    if storage == "arrow_string":
        return pd.Series(clean, dtype=pd.ArrowDtype(pa.string()), index=index)
    if storage == "arrow_large_string":
        return pd.Series(clean, dtype=pd.ArrowDtype(pa.large_string()), index=index)
    if storage == "category":
        return pd.Series(clean, dtype="category", index=index)
    raise ValueError(storage)


@st.composite
def string_columns(draw: st.DrawFn, n: int, null_rate: bool = True, long: bool = True,
                   storages: tuple[str, ...] = STRING_STORAGES) -> tuple[list[Any], str]:
    """``(values, storage)``: ``n`` strings or nulls (of any kind) and a storage to hold them."""
    value = texts(long=long)
    if null_rate:
        value = st.one_of(value, st.sampled_from(NULL_KINDS))
    values = draw(st.lists(value, min_size=n, max_size=n))
    if n and draw(st.booleans()) and null_rate and draw(st.integers(0, 5)) == 0:
        values = [draw(st.sampled_from(NULL_KINDS)) for _ in range(n)]  # all null
    return values, draw(st.sampled_from(storages))


# -- integers ------------------------------------------------------------------------------
@st.composite
def int_columns(draw: st.DrawFn, n: int, dtypes: tuple[str, ...] = INT_DTYPES, nullable: bool = True
                ) -> tuple[list[Any], str]:
    """``(values, dtype)``: ``n`` integers of one width (extremes drawn often), with nulls
    when the dtype is a nullable one (``Int8`` ... ``UInt64`` or Arrow ``int64[pyarrow]``)."""
    base = draw(st.sampled_from(dtypes))
    kind = draw(st.sampled_from(["numpy", "nullable", "arrow"] if nullable else ["numpy"]))
    value = ints_of(base)
    if kind != "numpy":
        value = st.one_of(value, st.none())
    values = draw(st.lists(value, min_size=n, max_size=n))
    dtype = {"numpy": base, "nullable": base.capitalize().replace("Uint", "UInt"), "arrow": f"{base}[pyarrow]"}[kind]
    return values, dtype


def int_series(values: list[Any], dtype: str, index: pd.Index | None = None) -> pd.Series:
    """``values`` as a series of ``dtype``, exactly (numpy dtypes through ``np.array``:
    ``pd.array([2**64 - 1], dtype="uint64")`` wraps to 0 in pandas 3.1)."""
    if dtype in INT_DTYPES:
        arr = np.array(values, dtype=dtype)
        assert arr.tolist() == list(values), f"{dtype} did not hold {values}"
        return pd.Series(arr, index=index)
    # nullable / Arrow dtypes: from an exact numpy array and a mask (pd.array of a null-free
    # list holding 2**63 goes through float64 in pandas 3.1: 2**53 + 1 came out 2**53)
    base = dtype.split("[")[0].lower()
    mask = np.array([v is None for v in values], dtype=bool)
    arr = np.array([0 if v is None else v for v in values], dtype=base)
    out = pd.Series(pd.arrays.IntegerArray(arr, mask) if "[" not in dtype else pd.array(arr, dtype=dtype), index=index)
    if "[" in dtype and mask.any():
        out = out.mask(pd.Series(mask, index=index))
    assert [None if v is pd.NA else v for v in out.tolist()] == list(values), f"{dtype} did not hold {values}"
    return out


# -- times ---------------------------------------------------------------------------------
TIME_UNITS = ("s", "ms", "us", "ns")
ZONES = (None, "UTC", "America/New_York", "Asia/Kolkata")
#: 1970 .. 2100 in seconds: inside every unit's range (ns ends in 2262)
EPOCH_S = (0, 4_102_444_800)


@st.composite
def epoch_ns_values(draw: st.DrawFn, n: int, null: bool = True) -> list[int | None]:
    """``n`` instants as integer nanoseconds since the epoch (None for null), with ties and
    with events 1 ns, 1 us, 1 ms and 1 s apart."""
    base = draw(st.integers(*EPOCH_S)) * 10**9
    steps = st.one_of(st.sampled_from([0, 1, 1000, 10**6, 10**9, 3600 * 10**9, 86400 * 10**9]),
                      st.integers(0, 7 * 86400 * 10**9))
    offsets = draw(st.lists(steps, min_size=n, max_size=n))
    out: list[int | None] = [base + o for o in offsets]
    if null:
        out = [None if draw(st.integers(0, 9)) == 0 else v for v in out]
    return out


def time_series(ns_values: list[int | None], unit: str, tz: str | None, index: pd.Index | None = None,
                round_to_unit: bool = True) -> tuple[pd.Series, list[int | None]]:
    """Instants (integer ns) as a ``datetime64[unit, tz]`` series, and the ns values it
    holds (truncated to ``unit`` when ``round_to_unit``), for the reference."""
    per = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}[unit]
    held = [None if v is None else (v // per) * per if round_to_unit else v for v in ns_values]
    arr = np.array([np.iinfo("int64").min if v is None else v // per for v in held], dtype="int64")
    s = pd.Series(arr.view(f"datetime64[{unit}]"), index=index)
    if tz is not None:
        s = s.dt.tz_localize("UTC").dt.tz_convert(tz)
    return s, held


# -- indexes -------------------------------------------------------------------------------
INDEX_KINDS = ("range", "duplicate", "unsorted", "string", "offset")


@st.composite
def indexes(draw: st.DrawFn, n: int) -> pd.Index:
    """A default, duplicate, unsorted, string or offset index of ``n`` rows."""
    kind = draw(st.sampled_from(INDEX_KINDS))
    if kind == "range" or n == 0:
        return pd.RangeIndex(n)
    if kind == "duplicate":
        return pd.Index([i // 2 for i in range(n)])
    if kind == "unsorted":
        perm = draw(st.permutations(list(range(n))))
        return pd.Index(perm)
    if kind == "string":
        return pd.Index([f"r{n - i}" for i in range(n)])
    return pd.RangeIndex(1000, 1000 + n)


def sizes(max_rows: int = 30) -> st.SearchStrategy[int]:
    """Row counts: empty and one-row frames drawn often."""
    return st.one_of(st.sampled_from([0, 1, 2]), st.integers(0, max_rows))
