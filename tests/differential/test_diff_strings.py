"""Differential tests of the hashing, string and list operators against the independent
references in ``diffref_strings`` (pyfarmhash and plain Python), eager and as dask frames
of 1, 3 and 7 partitions (cudf / dask-cudf on a GPU).

Inputs: every string storage (object, str, string[pyarrow], Arrow string / large_string,
categorical) with empty strings, accents, CJK, emoji, NUL and very long strings; every
integer width at its extremes and the raw 64-bit ids 2^53 +- k, 2^63, 2^64 - 1; list
columns of int64 / uint64 / strings with null lists, empty lists and null elements;
duplicate, unsorted and string indexes; all-null columns and empty frames.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, strategies as st

from fbrapids import ops
from fbrapids.errors import FbrapidsError

import diffref_strings as ref
from diff_harness import DIFF, FAMILIES, PROFILE, assert_column, assert_error_names, run_modes
from diff_strategies import (
    BIG_IDS,
    INT_DTYPES,
    STRING_STORAGES,
    indexes,
    int_series,
    ints_of,
    sizes,
    string_columns,
    string_series,
    texts,
)

SEPS = (" ", ",", "ab", "\x00", "漢", "😀")
BUCKETS = st.one_of(st.sampled_from([1, 2, 7, 1 << 20, 2**63 - 1]), st.integers(1, 2**63 - 1))
SPLIT_BUCKETS = st.one_of(st.none(), st.just(0), BUCKETS)


def params(ci: list[dict[str, Any]], **thorough: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Operator parameters: under the ``ci`` profile one of a few fixed sets (parameters are
    compiled into the kernels: each new set costs a C compile), under ``thorough`` those or
    (one time in four) drawn freely from the strategies."""
    fixed = st.sampled_from(ci)
    return fixed if PROFILE == "ci" else st.one_of(fixed, fixed, fixed, st.fixed_dictionaries(thorough))
LIST_KINDS = ("int64", "uint64", "string", "int32", "uint8", "large_string")


def _clean(values: list[Any]) -> list[Any]:
    """The reference's view of a column: any null kind as None."""
    return [None if (v is None or v is pd.NA or (isinstance(v, float) and v != v)) else v for v in values]


#: the shared storages and pandas' Python-backed ``string[python]``
STORAGES = STRING_STORAGES + ("string[python]",)


def _strings(values: list[Any], storage: str, index: pd.Index) -> pd.Series:
    if storage == "string[python]":
        return pd.Series(_clean(values), dtype=pd.StringDtype("python"), index=index)
    return string_series(values, storage, index)


def _check_index(out: Any, index: pd.Index, mode: str) -> None:
    assert out.index.tolist() == index.tolist(), f"{mode}: the output's index differs from the input's"


def _is_u64(s: pd.Series) -> bool:
    return str(s.dtype) in ("uint64", "uint64[pyarrow]", "UInt64")


# -- list columns ------------------------------------------------------------------------------
def _list_values(kind: str) -> st.SearchStrategy[Any]:
    if kind in ("string", "large_string"):
        return texts(max_size=6, long=False)
    if kind == "uint64":
        return st.sampled_from(BIG_IDS + [0, 1, 7])
    if kind == "int64":
        return st.one_of(st.sampled_from([-(2**63), 2**63 - 1, 2**53, 2**53 + 1, -1, 0, 7]), st.integers(-(2**63), 2**63 - 1))
    lo, hi = (int(np.iinfo(kind).min), int(np.iinfo(kind).max))
    return st.sampled_from([lo, hi, 0, 1])


@st.composite
def list_columns(draw: st.DrawFn, n: int, kinds: tuple[str, ...] = LIST_KINDS, null_elements: bool = False,
                 max_len: int = 5) -> tuple[list[Any], str]:
    """``(values, kind)``: ``n`` lists (or None) of one element kind, empty lists drawn often."""
    kind = draw(st.sampled_from(kinds))
    elem = _list_values(kind)
    if null_elements:
        elem = st.one_of(elem, st.none())
    one = st.one_of(st.none(), st.just([]), st.lists(elem, min_size=1, max_size=max_len))
    return draw(st.lists(one, min_size=n, max_size=n)), kind


def list_series(values: list[Any], kind: str, index: pd.Index | None = None) -> pd.Series:
    t = {"string": pa.string(), "large_string": pa.large_string()}.get(kind) or pa.from_numpy_dtype(np.dtype(kind))
    outer = pa.large_list(t) if kind == "large_string" else pa.list_(t)
    return pd.Series(pd.array(values, dtype=pd.ArrowDtype(outer)), index=index)


STRING_PARAMS = [
    dict(sep=" ", gsep=" ", xsep="_", b=1 << 20, sb=None, gb=None, start=0, size=3, gram=2, xb=1 << 20),
    dict(sep="\x00", gsep="漢", xsep="|", b=7, sb=0, gb=0, start=-3, size=None, gram=1, xb=None),
    dict(sep="😀", gsep="ab", xsep="\x00", b=2**63 - 1, sb=5, gb=2**63 - 1, start=2, size=0, gram=3, xb=1),
]


# -- strings ------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", FAMILIES)
@DIFF
@given(data=st.data())
def test_string_operators(family: str, data: st.DataObject) -> None:
    """hash, hash_bucket, split, length, lower, substring, ngrams and cross of a string
    column in any storage, against pyfarmhash and Python's own string methods."""
    n = data.draw(sizes())
    index = data.draw(indexes(n))
    values, storage = data.draw(string_columns(n, storages=STORAGES))
    other, storage2 = data.draw(string_columns(n, long=False, storages=STORAGES))
    p = data.draw(params(STRING_PARAMS, sep=st.sampled_from(SEPS), gsep=st.sampled_from(SEPS),
                         xsep=st.sampled_from(SEPS), b=BUCKETS, sb=SPLIT_BUCKETS, gb=SPLIT_BUCKETS,
                         start=st.integers(-8, 8), size=st.one_of(st.none(), st.integers(0, 6)),
                         gram=st.integers(1, 3), xb=st.one_of(st.none(), BUCKETS)))
    sep, gsep, xsep, b, sb, gb = p["sep"], p["gsep"], p["xsep"], p["b"], p["sb"], p["gb"]
    start, size, gram, xb = p["start"], p["size"], p["gram"], p["xb"]
    df = pd.DataFrame({"s": _strings(values, storage, index), "t": _strings(other, storage2, index)})
    vs, ts = _clean(values), _clean(other)
    feats = {"h": ops.hash("s"), "hb": ops.hash_bucket("s", b), "sp": ops.split("s", sep, buckets=sb),
             "len": ops.length("s"), "lo": ops.lower("s"), "sub": ops.substring("s", start, size),
             "ng": ops.ngrams(ops.split("s", sep), gram, sep=gsep, buckets=gb),
             "x": ops.cross("s", "t", buckets=xb, sep=xsep)}
    want = {"h": [ref.hash(v) for v in vs], "hb": [ref.hash_bucket(v, b) for v in vs],
            "sp": [ref.split(v, sep, sb) for v in vs], "len": [ref.length(v) for v in vs],
            "lo": [ref.lower(v) for v in vs], "sub": [ref.substring(v, start, size) for v in vs],
            "ng": [ref.ngrams(ref.split(v, sep), gram, gsep, gb) for v in vs],
            "x": [ref.cross([v, t], buckets=xb, sep=xsep) for v, t in zip(vs, ts)]}
    for mode, out in run_modes(df, lambda f: f.fbx.extract(**feats), family):
        _check_index(out, index, mode)
        for name, w in want.items():
            assert_column(out, name, w, mode=mode)
        assert _is_u64(out["h"]), f"{mode}: hash gives {out['h'].dtype}, not uint64"


INT_PARAMS = [dict(b=1 << 20, xb=None), dict(b=10**18 + 9, xb=3)]


# -- integers -----------------------------------------------------------------------------------
@pytest.mark.parametrize("family", FAMILIES)
@DIFF
@given(data=st.data())
def test_integer_operators(family: str, data: st.DataObject) -> None:
    """hash, hash_bucket and cross of integers of every width, signed and unsigned (one
    column each; numpy, nullable or Arrow, with all-null columns), at their extremes, and of
    the raw ids 2^53 +- k, 2^63, 2^64 - 1: the decimal text of the exact value, never a
    wrapped or float text."""
    n = data.draw(sizes())
    index = data.draw(indexes(n))
    kind = data.draw(st.sampled_from(["numpy", "nullable", "arrow"]))
    columns: dict[str, list[Any]] = {}
    for dtype in INT_DTYPES:
        value = ints_of(dtype) if kind == "numpy" else st.one_of(ints_of(dtype), st.none())
        columns[dtype] = data.draw(st.lists(value, min_size=n, max_size=n))
        if kind != "numpy" and n and data.draw(st.integers(0, 7)) == 0:
            columns[dtype] = [None] * n  # all null
    ids = data.draw(st.lists(st.sampled_from(BIG_IDS), min_size=n, max_size=n))
    p = data.draw(params(INT_PARAMS, b=BUCKETS, xb=st.one_of(st.none(), BUCKETS)))
    b, xb = p["b"], p["xb"]
    spelled = {"numpy": str, "nullable": lambda t: t.capitalize().replace("Uint", "UInt"),
               "arrow": lambda t: f"{t}[pyarrow]"}[kind]
    flags = data.draw(st.lists(st.booleans() if kind == "numpy" else st.one_of(st.booleans(), st.none()),
                               min_size=n, max_size=n))
    df = pd.DataFrame({**{t: int_series(v, spelled(t), index) for t, v in columns.items()},
                       "u": pd.Series(np.array(ids, dtype=np.uint64), index=index),
                       "flag": pd.Series(pd.array(flags, dtype={"numpy": "bool", "nullable": "boolean",
                                                                "arrow": "bool[pyarrow]"}[kind]), index=index)})
    feats: dict[str, Any] = {"xs": ops.cross("u", "u", buckets=None, sep="|")}
    want: dict[str, list[Any]] = {"xs": [ref.cross([u, u], buckets=None, sep="|") for u in ids]}
    feats["hflag"], want["hflag"] = ops.hash("flag"), [ref.hash(x) for x in flags]  # a bool hashes as "1" / "0"
    for t, v in columns.items():
        feats[f"h_{t}"], want[f"h_{t}"] = ops.hash(t), [ref.hash(x) for x in v]
        feats[f"hb_{t}"], want[f"hb_{t}"] = ops.hash_bucket(t, b), [ref.hash_bucket(x, b) for x in v]
    for t in ("int64", "uint64", "int8"):
        feats[f"x_{t}"] = ops.cross(t, "u", buckets=xb)
        want[f"x_{t}"] = [ref.cross([x, u], buckets=xb) for x, u in zip(columns[t], ids)]
    for mode, out in run_modes(df, lambda f: f.fbx.extract(**feats), family):
        _check_index(out, index, mode)
        for name, w in want.items():
            assert_column(out, name, w, mode=mode)
        assert _is_u64(out["h_int8"]) and _is_u64(out["xs"]), f"{mode}: hash gives {out['h_int8'].dtype}, not uint64"


LIST_PARAMS = [dict(k=0, width=3, side="left", b=1 << 20, cap=0, gram=2),
               dict(k=2, width=0, side="right", b=7, cap=3, gram=1),
               dict(k=5, width=6, side="right", b=2**63 - 1, cap=1, gram=3)]


# -- lists --------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", FAMILIES)
@DIFF
@given(data=st.data())
def test_list_operators(family: str, data: st.DataObject) -> None:
    """first_k, last_k, pad, overlap_count, length, hash, hash_bucket and cross of list
    columns (int64 / uint64 / narrow ints / strings; null and empty lists): ids exact."""
    n = data.draw(sizes())
    index = data.draw(indexes(n))
    values, kind = data.draw(list_columns(n))
    other, kind2 = data.draw(list_columns(n, kinds=(kind,) if kind in ("string", "large_string") else
                                          ("int64", "uint64", "int32", "uint8")))
    p = data.draw(params(LIST_PARAMS, k=st.integers(0, 6), width=st.integers(0, 6),
                         side=st.sampled_from(["left", "right"]), b=BUCKETS, cap=st.one_of(st.none(), st.integers(0, 8)),
                         gram=st.integers(1, 3)))
    k, width, side, b, cap, gram = p["k"], p["width"], p["side"], p["b"], p["cap"], p["gram"]
    textual = kind in ("string", "large_string")
    fill = data.draw(st.sampled_from(["", "pad", "漢", None]) if textual else st.sampled_from(
        [0, 1, 255, None] + ([2**64 - 1, 2**63] if kind == "uint64" else [-1, -(2**63)] if kind == "int64" else [])))
    df = pd.DataFrame({"l": list_series(values, kind, index), "m": list_series(other, kind2, index),
                       "s": string_series(["ab", "漢"] * (n // 2) + ["x"] * (n % 2), "str", index)})
    feats = {"fk": ops.first_k("l", k), "lk": ops.last_k("l", k), "pad": ops.pad("l", width, fill, side=side),
             "ov": ops.overlap_count("l", "m"), "len": ops.length("l"), "h": ops.hash("l"),
             "hb": ops.hash_bucket("l", b), "x": ops.cross("s", "l", "l", buckets=b, cap=cap)}
    strs = list(df["s"])
    want = {"fk": [ref.first_k(v, k) for v in values], "lk": [ref.last_k(v, k) for v in values],
            "pad": [ref.pad(v, width, fill, side) for v in values],
            "ov": [ref.overlap_count(v, m) for v, m in zip(values, other)],
            "len": [ref.length(v) for v in values], "h": [ref.hash(v) for v in values],
            "hb": [ref.hash_bucket(v, b) for v in values],
            "x": [ref.cross([s, v, v], buckets=b, cap=cap) for s, v in zip(strs, values)]}
    if textual:
        feats["ng"] = ops.ngrams("l", gram, sep="+", buckets=0)
        want["ng"] = [ref.ngrams(v, gram, "+", 0) for v in values]
    else:  # two integer lists: the host's token x token loop (a separator past 8 bytes: the general one)
        xsep = data.draw(st.sampled_from(["_", "::", "é漢", "123456789"]))
        feats["x2"] = ops.cross("l", "m", buckets=b, cap=cap, sep=xsep)
        want["x2"] = [ref.cross([v, m], buckets=b, cap=cap, sep=xsep) for v, m in zip(values, other)]
    for mode, out in run_modes(df, lambda f: f.fbx.extract(**feats), family):
        _check_index(out, index, mode)
        for name, w in want.items():
            assert_column(out, name, w, mode=mode)
        for name in ("fk", "lk", "pad"):
            got = pa.array(out[name].array).type if len(out) else out[name].dtype.pyarrow_dtype
            if kind == "uint64":
                assert got.value_type == pa.uint64(), f"{mode}: {name} of list<uint64> gives {got}"


@pytest.mark.parametrize("family", FAMILIES)
@DIFF
@given(data=st.data())
def test_lists_with_null_elements(family: str, data: st.DataObject) -> None:
    """Null list elements: pad keeps them where they are and overlap_count never matches
    them (both documented); the kernel list operators refuse them with an error naming the
    column and the count, in every mode."""
    n = data.draw(st.integers(1, 12))
    index = data.draw(indexes(n))
    values, kind = data.draw(list_columns(n, kinds=("int64", "uint64", "string"), null_elements=True))
    other, _ = data.draw(list_columns(n, kinds=(kind,), null_elements=True))
    width, side = data.draw(st.integers(0, 4)), data.draw(st.sampled_from(["left", "right"]))
    df = pd.DataFrame({"l": list_series(values, kind, index), "m": list_series(other, kind, index)})
    feats = {"pad": ops.pad("l", width, None, side=side), "ov": ops.overlap_count("l", "m")}
    for mode, out in run_modes(df, lambda f: f.fbx.extract(**feats), family):
        assert_column(out, "pad", [ref.pad(v, width, None, side) for v in values], mode=mode)
        assert_column(out, "ov", [ref.overlap_count(v, m) for v, m in zip(values, other)], mode=mode)
    nulls = sum(x is None for v in values if v for x in v)
    if not nulls:
        return
    for op in (ops.first_k("l", 2), ops.hash("l"), ops.length("l")):
        with pytest.raises(Exception) as err:
            for _ in run_modes(df, lambda f: f.fbx.extract(x=op), family, only=("eager", "dask3")):
                pass
        assert_error_names(err.value, "'l'")
        assert f"({nulls} are)" in str(err.value) or "null" in str(err.value)


LONG_KEYS = ["k" * 4090, "漢" * 1400, "x" * 4096, "y" * 9000, "😀" * 2000]


@pytest.mark.parametrize("family", FAMILIES)
def test_keys_of_any_length(family: str) -> None:
    """cross and ngrams keys past 4,096 bytes (the kernels' key buffer) hash like any other:
    the fingerprint of the whole key (list and scalar crosses, hashed and raw n-grams)."""
    words = LONG_KEYS + ["", "a", None]
    toks = [[w, "b", w] if w is not None else None for w in words]
    df = pd.DataFrame({"s": pd.Series(words, dtype="str"), "t": pd.Series(words[::-1], dtype=object),
                       "l": list_series(toks, "string"), "i": np.array([2**64 - 9 + k for k in range(len(words))], dtype=np.uint64)})
    feats = {"x": ops.cross("s", "t", "i", buckets=None, sep="::"), "xl": ops.cross("l", "s", buckets=1 << 20),
             "ng": ops.ngrams("l", 2, sep="漢", buckets=0), "ngb": ops.ngrams("l", 3, sep="|", buckets=97),
             "ngs": ops.ngrams("l", 2, sep="+")}
    want = {"x": [ref.cross([s, t, int(i)], buckets=None, sep="::") for s, t, i in zip(words, words[::-1], df["i"])],
            "xl": [ref.cross([l, s], buckets=1 << 20) for l, s in zip(toks, words)],
            "ng": [ref.ngrams(l, 2, "漢", 0) for l in toks], "ngb": [ref.ngrams(l, 3, "|", 97) for l in toks],
            "ngs": [ref.ngrams(l, 2, "+") for l in toks]}
    for mode, out in run_modes(df, lambda f: f.fbx.extract(**feats), family):
        for name, w in want.items():
            assert_column(out, name, w, mode=mode)


BAD_PARAMETERS = [
    (lambda: ops.substring("s", 2**64 + 2), "substring", "start"),
    (lambda: ops.substring("s", -(2**63) - 1), "substring", "start"),
    (lambda: ops.substring("s", 0, 2**63), "substring", "length"),
    (lambda: ops.substring("s", 0, -1), "substring", "length"),
    (lambda: ops.hash_bucket("s", 2**64), "hash_bucket", "buckets"),
    (lambda: ops.hash_bucket("s", 0), "hash_bucket", "buckets"),
    (lambda: ops.hash_bucket("s", 1.5), "hash_bucket", "buckets"),
    (lambda: ops.cross("s", "t", buckets=-1), "cross", "buckets"),
    (lambda: ops.cross("s", "t", cap=2**64), "cross", "cap"),
    (lambda: ops.split("s", buckets=2**63), "split", "buckets"),
    (lambda: ops.ngrams("l", 0), "ngrams", "n"),
    (lambda: ops.ngrams("l", 2**64), "ngrams", "n"),
    (lambda: ops.ngrams("l", 2, buckets=2**64 + 5), "ngrams", "buckets"),
    (lambda: ops.first_k("l", 2**64), "first_k", "k"),
    (lambda: ops.last_k("l", -1), "last_k", "k"),
    (lambda: ops.last_k("l", True), "last_k", "k"),
    (lambda: ops.pad("l", -1), "pad", "n"),
    (lambda: ops.pad("l", 2**31), "pad", "n"),
    (lambda: ops.pad("l", 3, value=1.5), "pad", "value"),
    (lambda: ops.pad("l", 3, side="up"), "pad", "side"),
    (lambda: ops.split("s", ""), "split", "sep"),
    (lambda: ops.ngrams("l", 2, sep=""), "ngrams", "sep"),
    (lambda: ops.cross("s", "t", sep=""), "cross", "sep"),
    (lambda: ops.cross("s", "t", sep=None), "cross", "sep"),
]


@pytest.mark.parametrize("build, op, param", BAD_PARAMETERS, ids=[f"{o}-{p}-{i}" for i, (_, o, p) in
                                                                 enumerate(BAD_PARAMETERS)])
def test_parameters_out_of_range_fail_when_built(build: Any, op: str, param: str) -> None:
    """A parameter that does not fit its range is an error naming the operator and the
    parameter when the expression is built (never wrapped into int64 by the C compiler)."""
    with pytest.raises(FbrapidsError) as err:
        build()
    assert_error_names(err.value, op)
    assert param in str(err.value), str(err.value)


def test_parameters_through_call_fail_when_planned() -> None:
    """The same checks hold for ``ops.call`` (no constructor): the plan refuses the
    parameter, naming the feature, the operator and the parameter; substring of any int64
    start / length is exact (no overflow of start + length)."""
    df = pd.DataFrame({"s": ["hello", "漢字日本語", ""]})
    with pytest.raises(FbrapidsError) as err:
        df.fbx.extract(x=ops.call("substring", "s", start=2**64 + 2, length=None))
    assert_error_names(err.value, "substring")
    assert "'start'" in str(err.value) and "'x'" in str(err.value)
    for start, size in [(2**63 - 1, 2**63 - 1), (3, 2**63 - 1), (-(2**63), 2**63 - 1), (-2, 1)]:
        out = df.fbx.extract(x=ops.substring("s", start, size))
        assert_column(out, "x", [ref.substring(v, start, size) for v in df["s"]], mode="eager")


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("kind, value", [("uint64", -1), ("uint64", 2**64), ("int64", 2**63), ("uint8", 256),
                                         ("int64", "x"), ("string", 0)])
def test_pad_value_must_fit_the_elements(family: str, kind: str, value: Any) -> None:
    """A padding value the list's element type cannot hold is an error naming the
    expression (its column) and the value, eager and on dask (never wrapped or widened)."""
    df = pd.DataFrame({"hist": list_series([[1], None] if kind != "string" else [["a"], None], kind)})
    with pytest.raises(Exception) as err:
        for _ in run_modes(df, lambda f: f.fbx.extract(p=ops.pad("hist", 3, value)), family, only=("eager", "dask3")):
            pass
    assert_error_names(err.value, "hist")
    assert repr(value) in str(err.value)


@pytest.mark.parametrize("family", FAMILIES)
def test_unhashable_columns_are_named(family: str) -> None:
    """hash of a float or datetime column is an error naming the feature and the column
    (integers and strings hash; a float's text is ambiguous: 1.0 vs 1)."""
    df = pd.DataFrame({"price": [1.5, None], "ts": pd.to_datetime(["2024-01-01", None])})
    for column in ("price", "ts"):
        with pytest.raises(Exception) as err:
            for _ in run_modes(df, lambda f: f.fbx.extract(h=ops.hash(column)), family, only=("eager", "dask3")):
                pass
        assert_error_names(err.value, repr(column))


@pytest.mark.parametrize("family", FAMILIES)
def test_object_columns_of_python_ints(family: str) -> None:
    """An object column of Python ints (ids as read from JSON, say) hashes each id's exact
    decimal text, 2^64 - 1 included (pyarrow infers int64 and overflowed on it); one that no
    64-bit type holds (2^64 - 1 beside -5) is an error naming the column.  An all-null object
    column pads to padding and hashes to null."""
    ids = [2**64 - 1, 5, None, 2**63, 2**53 + 1]
    df = pd.DataFrame({"id": pd.Series(ids, dtype=object), "none": pd.Series([None] * 5, dtype=object)})
    feats = {"h": ops.hash("id"), "hb": ops.hash_bucket("id", 1000), "p": ops.pad("none", 2, 7),
             "hn": ops.hash("none"), "x": ops.cross("id", "none")}
    for mode, out in run_modes(df, lambda f: f.fbx.extract(**feats), family):
        assert_column(out, "h", [ref.hash(v) for v in ids], mode=mode)
        assert_column(out, "hb", [ref.hash_bucket(v, 1000) for v in ids], mode=mode)
        assert_column(out, "p", [ref.pad(None, 2, 7)] * 5, mode=mode)
        assert_column(out, "hn", [None] * 5, mode=mode)
        assert_column(out, "x", [None] * 5, mode=mode)
    bad = pd.DataFrame({"id": pd.Series([2**64 - 1, -5], dtype=object)})
    with pytest.raises(FbrapidsError) as err:
        bad.fbx.extract(h=ops.hash("id"))
    assert_error_names(err.value, "'id'")
