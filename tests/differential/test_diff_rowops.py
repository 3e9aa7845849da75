"""Differential tests of the scalar, numeric, time and lookup operators (``fill_null``,
``log1p``, ``clip``, ``cast``, ``bucketize``, ``hour``, ``weekday``, ``day``, ``lookup``
with its float form and ``Vocabulary``, ``json_get``, ``col``, ``call``,
``register_operator``) against the references of ``diffref_rowops``, eager and as dask
frames of 1, 3 and 7 partitions (cudf / dask-cudf on a GPU).

A case whose reference raises ``Misfit`` must end in an FbrapidsError naming the column
(and, for a conversion, the value): never a wrapped value.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, strategies as st

import fbrapids  # noqa: F401  (the .fbx accessor)
from fbrapids import ops
from fbrapids.errors import FbrapidsError

import diffref_rowops as ref
from diff_harness import DIFF, FAMILIES, assert_column, assert_error_names, run_modes
from diff_strategies import (
    BIG_IDS,
    NULL_KINDS,
    TIME_UNITS,
    ZONES,
    epoch_ns_values,
    indexes,
    int_columns,
    int_series,
    ints_of,
    sizes,
    string_columns,
    string_series,
    texts,
    time_series,
)

KTYPE = {"int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8", "uint16": "u16",
         "uint32": "u32", "uint64": "u64"}
CAST_TO = ("i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "bool", "f32", "f64")


def _base(dtype: str) -> str:
    return dtype.lower().replace("[pyarrow]", "").replace("uint", "uint")


def _held(values: list[Any]) -> list[Any]:
    """The reference's input: nulls of every kind as None."""
    return [None if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)) else v for v in values]


def _expect(fn, values: list[Any]) -> tuple[list[Any] | None, ref.Misfit | None]:
    try:
        return [fn(v) for v in values], None
    except ref.Misfit as exc:
        return None, exc


def _check(df: pd.DataFrame, feats: dict[str, Any], want: dict[str, list[Any]], family: str,
           culprits: tuple[str, ...] = ()) -> None:
    """Every mode gives ``want`` per feature, or (``culprits``) an FbrapidsError naming one."""
    if culprits:
        for mode in ("eager", "dask3") if family == "cpu" else ("cudf", "dask_cudf3"):
            with pytest.raises(Exception) as info:
                list(run_modes(df, lambda f: f.fbx.extract(**feats), family, only=[mode]))
            assert_error_names(info.value, *culprits)
        return
    for mode, out in run_modes(df, lambda f: f.fbx.extract(**feats), family):
        for name, values in want.items():
            assert_column(out, name, values, mode=mode)


# -- integers: fill_null, clip, cast, bucketize, log1p --------------------------------------
def _params_of(dtype: str) -> st.SearchStrategy[int | float]:
    """Parameters from a small set (edges of the type and of 64 bits, past them, fractions),
    so examples share compiled plans."""
    lo, hi = ref.INT_RANGE[KTYPE[dtype]]
    return st.sampled_from([lo, hi, 0, 1, -1, lo - 1, hi + 1, 2**63, 2**64 - 1, -(2**63), 2**64, 0.5, 2.0, -7.25,
                            2**53 + 1, float(2**53)])


def _misfit_values(values: list[Any], to: str) -> tuple[str, ...]:
    """What a conversion error may name: any value that does not fit (partitions run apart)."""
    return tuple(repr(v) for v in values if v is not None and _misfits(v, to))


@pytest.mark.parametrize("family", FAMILIES)
@DIFF
@given(data=st.data())
def test_integer_columns(family, data):
    """Every width, numpy / nullable / Arrow, at its extremes; parameters in and out of the
    type's range: the exact answer or an error naming the column or the value."""
    n = data.draw(sizes())
    values, dtype = data.draw(int_columns(n))
    base = _base(dtype)
    t = KTYPE[base]
    lo, hi = ref.INT_RANGE[t]
    x = int_series(values, dtype, index=data.draw(indexes(n)))
    held = _held(values)
    fill = data.draw(_params_of(base))
    lower, upper = sorted(data.draw(st.lists(_params_of(base), min_size=2, max_size=2)))
    to = data.draw(st.sampled_from(CAST_TO))
    bounds = sorted(data.draw(st.lists(_params_of(base), min_size=1, max_size=3)))
    df = pd.DataFrame({"x": x})
    feats = {"b": ops.bucketize("x", bounds), "l": ops.log1p("x"), "i": ops.col("x")}
    want = {"b": [ref.bucketize(v, bounds) for v in held], "l": [ref.log1p(v) for v in held], "i": held}
    if float(fill).is_integer() and lo <= fill <= hi:  # an integral float (2.0) is the integer it holds
        feats["f"], want["f"] = ops.fill_null("x", fill), [ref.fill_null(v, int(fill)) for v in held]
    else:  # a value past the type (or a fraction for an integer column): an error naming it
        _check(df, {"f": ops.fill_null("x", fill)}, {}, family, culprits=(repr(fill),))
    # the bounds are checked once more on a null row: an empty frame has the same answer
    clipped, misfit = _expect(lambda v: ref.clip(v, lower, upper, t), held + [None])
    clipped = clipped[:-1] if clipped is not None else None
    if misfit is None:
        feats["c"], want["c"] = ops.clip("x", lower, upper), clipped
    else:
        _check(df, {"c": ops.clip("x", lower, upper)}, {}, family, culprits=("'x'",))
    cast, misfit = _expect(lambda v: ref.cast(v, to), held)
    if misfit is None:
        feats["k"], want["k"] = ops.cast("x", to), cast
    else:
        _check(df, {"k": ops.cast("x", to)}, {}, family, culprits=_misfit_values(held, to))
    _check(df, feats, want, family)


def _misfits(v: Any, to: str) -> bool:
    try:
        ref.cast(v, to)
        return False
    except ref.Misfit:
        return True


def _near(v: int) -> list[int | float]:
    return [v - 2, v - 1, v, v + 1, v + 2, float(v), v - 0.5 if abs(v) < 2**52 else float(v)]


BIG_BOUNDS = sorted({b for v in (2**53, 2**63, 2**64 - 1, -(2**63), 0) for b in _near(v)}
                    | {-math.inf, math.inf, 2**64, 2**70, -(2**70), -1.5, 0.5}, key=lambda b: (b, isinstance(b, float)))
BIG_VALUES = {"int64": [2**53 - 1, 2**53, 2**53 + 1, 2**53 + 3, 2**63 - 1, 2**63 - 2, -(2**63), -(2**63) + 1, -1, 0],
              "uint64": BIG_IDS + [0, 1]}


@pytest.mark.parametrize("family", FAMILIES)
@DIFF
@given(data=st.data())
def test_bucketize_big_integers(family, data):
    """int64 / uint64 ids at 2^53 +- k, 2^63 and 2^64 - 1 against boundaries next to them
    (integers float64 cannot hold, the floats that round them, +-inf, past 64 bits): the
    count is exact (an integer column is never compared through float64)."""
    n = data.draw(sizes())
    base = data.draw(st.sampled_from(["int64", "uint64"]))
    dtype = data.draw(st.sampled_from([base, base.capitalize().replace("Uint", "UInt"), f"{base}[pyarrow]"]))
    value = st.sampled_from(BIG_VALUES[base])
    values = data.draw(st.lists(value if dtype == base else st.one_of(value, st.none()), min_size=n, max_size=n))
    x = int_series(values, dtype, index=data.draw(indexes(n)))
    bounds = sorted(data.draw(st.lists(st.sampled_from(BIG_BOUNDS), min_size=1, max_size=4)))
    held = _held(values)
    _check(pd.DataFrame({"x": x, "f": x.astype("float64")}),
           {"b": ops.bucketize("x", bounds), "g": ops.bucketize("f", bounds)},
           {"b": [ref.bucketize(v, bounds) for v in held],
            "g": [ref.bucketize(None if v is None else float(v), bounds) for v in held]}, family)


def test_same_parameters_same_answer_whatever_ran_before():
    """The plan memo tells True from 1, 2.0 from 2 and -0.0 from 0.0: one input always
    gets one answer (fill_null(x, True) on an int column, an error, gave 1 once
    fill_null(x, 1) had run; -0.0 came back as 0.0 after 0.0)."""
    df = pd.DataFrame({"x": pd.array([None, 2], dtype="Int64"), "f": [math.nan, 1.0]})
    assert df.fbx.extract(a=ops.fill_null("x", 1))["a"].tolist() == [1, 2]
    for feats in ({"a": ops.fill_null("x", True)}, {"a": ops.fill_null("x", 1), "b": ops.fill_null("x", True)}):
        with pytest.raises(FbrapidsError) as info:
            df.fbx.extract(**feats)
        assert_error_names(info.value, "True")
    assert df.fbx.extract(a=ops.fill_null("f", 0.0))["a"].tolist() == [0.0, 1.0]
    out = df.fbx.extract(a=ops.fill_null("f", -0.0), b=ops.fill_null("f", 0.0))
    assert np.signbit(out["a"].iloc[0]) and not np.signbit(out["b"].iloc[0])


def test_bucketize_boundaries_are_checked_when_built():
    for bad in ([], [2, 1], [math.nan], ["1"], [True]):
        with pytest.raises(FbrapidsError) as info:
            ops.bucketize("x", bad)
        assert_error_names(info.value, "bucketize")
        assert_error_names(info.value, "'boundaries'")


@pytest.mark.parametrize("family", FAMILIES)
def test_cast_never_wraps_on_any_runtime(family):
    """The range check of ``cast`` runs on the CUDA runtime too (cudf / dask-cudf on a
    GPU): a column value, a computed one and a NaN computed on the device (a value, not a
    null) that do not fit are errors naming the row's value; values that fit pass exactly."""
    df = pd.DataFrame({"x": pd.array([1, 300, None, -129, 5], dtype="Int64"), "y": [0.0, -2.0, None, 1.0, 2.0],
                       "ok": pd.array([1, None, -128, 127, 0], dtype="Int64")})
    _check(df, {"k": ops.cast("x", "i8")}, {}, family, culprits=("300", "-129"))
    _check(df, {"k": ops.cast(ops.clip("x", -1000, 1000), "u8")}, {}, family, culprits=("300", "-129"))
    _check(df, {"k": ops.cast(ops.log1p("y"), "i8")}, {}, family, culprits=("nan",))
    _check(df, {"u": ops.cast(ops.fill_null("ok", 3), "u8")}, {}, family, culprits=("-128",))
    _check(df, {"k": ops.cast("ok", "i8"), "b": ops.cast("ok", "bool")},
           {"k": [1, None, -128, 127, 0], "b": [True, None, True, True, False]}, family)


# -- floats: NaN / inf, f32 and f64 -----------------------------------------------------------
FLOATS = st.one_of(st.floats(width=32), st.sampled_from([0.0, -0.0, -1.0, -1.5, 1e30, -1e30, 2.0**63, 2.0**64,
                                                         -(2.0**63), 127.9, -128.9, 255.5, math.inf, -math.inf]))


@pytest.mark.parametrize("family", FAMILIES)
@DIFF
@given(data=st.data())
def test_float_columns(family, data):
    """NaN is null; infinities and huge values are values: a cast of one that does not fit
    is an error naming it, log1p follows numpy below -1."""
    n = data.draw(sizes())
    dtype = data.draw(st.sampled_from(["float64", "float32", "Float64", "double[pyarrow]"]))
    values = data.draw(st.lists(st.one_of(FLOATS, st.sampled_from(NULL_KINDS)), min_size=n, max_size=n))
    if dtype == "float32":
        values = [v if v is None or v is pd.NA or v != v else ref.to_f32(v) for v in values]
    x = pd.Series(pd.array([None if v is pd.NA else v for v in values], dtype=dtype), index=data.draw(indexes(n)))
    held = [None if v is None or v is pd.NA or v != v else float(x.iloc[i]) for i, v in enumerate(values)]
    t = "f32" if dtype == "float32" else "f64"
    fparams = st.sampled_from([0.0, -1.0, 0.1, 2.5, -0.0, 1e30, -1e30, math.inf, -math.inf, 1e39, 2.0**63])
    lower, upper = sorted(data.draw(st.lists(fparams, min_size=2, max_size=2)))
    fill = data.draw(fparams.filter(lambda v: abs(v) < 1e38 or math.isinf(v)))
    to = data.draw(st.sampled_from(CAST_TO))
    bounds = sorted(data.draw(st.lists(fparams, min_size=1, max_size=3)))
    df = pd.DataFrame({"x": x})
    held_fill = ref.to_f32(fill) if t == "f32" else fill  # documented: rounded to the column's float type
    feats = {"f": ops.fill_null("x", fill), "l": ops.log1p("x"), "b": ops.bucketize("x", bounds)}
    want = {"f": [ref.fill_null(v, held_fill) for v in held], "l": [ref.log1p(v) for v in held],
            "b": [ref.bucketize(v, bounds) for v in held]}
    clipped, misfit = _expect(lambda v: ref.clip(v, lower, upper, t), held + [None])  # + [None]: empty frames too
    if misfit is None:
        feats["c"], want["c"] = ops.clip("x", lower, upper), clipped[:-1]
    else:  # a bound float32 cannot hold (1e39 as the lower bound): an error naming the column
        _check(df, {"c": ops.clip("x", lower, upper)}, {}, family, culprits=("'x'",))
    _check(df, feats, want, family)
    want, misfit = _expect(lambda v: ref.cast(v, to), held)
    if misfit is None:
        _check(df, {"k": ops.cast("x", to)}, {"k": want}, family)
    else:
        _check(df, {"k": ops.cast("x", to)}, {}, family, culprits=_misfit_values(held, to))


# -- time: hour / weekday / day ---------------------------------------------------------------
@pytest.mark.parametrize("family", FAMILIES)
@DIFF
@given(data=st.data())
def test_time_of_datetimes_and_epochs(family, data):
    """Datetimes in s / ms / us / ns, naive (UTC) or zoned (read in UTC), NaT null; integer
    epoch seconds over the whole int64 and uint64 ranges; ties and 1 ns steps."""
    n = data.draw(sizes())
    index = data.draw(indexes(n))
    ns = data.draw(epoch_ns_values(n))
    unit, zone = data.draw(st.sampled_from(TIME_UNITS)), data.draw(st.sampled_from(ZONES))
    ts, held_ns = time_series(ns, unit, zone, index=index)
    secs_values, sdtype = data.draw(int_columns(n, dtypes=("int64", "uint64", "int32", "uint32")))
    df = pd.DataFrame({"ts": ts, "e": int_series(secs_values, sdtype, index=index)})
    secs = [ref.seconds_of_ns(v) for v in held_ns]
    epochs = _held(secs_values)
    feats = {"h": ops.hour("ts"), "w": ops.weekday("ts"), "d": ops.day("ts"),
             "eh": ops.hour("e"), "ew": ops.weekday("e"), "ed": ops.day("e")}
    want = {"h": [ref.hour(s) for s in secs], "w": [ref.weekday(s) for s in secs], "d": [ref.day(s) for s in secs],
            "eh": [ref.hour(s) for s in epochs], "ew": [ref.weekday(s) for s in epochs],
            "ed": [ref.day(s) for s in epochs]}
    _check(df, feats, want, family)


# -- lookup: ints (uint64 ids exact), strings, float values, Vocabulary ----------------------------
@pytest.mark.parametrize("family", FAMILIES)
@DIFF
@given(data=st.data())
def test_lookup_ints(family, data):
    """uint64 ids at 2^53 +- k, 2^63, 2^64 - 1 and int64 ones at their ends against keys
    that include -1 and negatives: 2^64 - 1 never meets -1."""
    n = data.draw(sizes())
    values, dtype = data.draw(int_columns(n, dtypes=("int64", "uint64", "int8", "uint32")))
    x = int_series(values, dtype, index=data.draw(indexes(n)))
    held = _held(values)
    pool = [v for v in held if v is not None] + BIG_IDS + [-1, -(2**63), 0, 5]
    keys = data.draw(st.lists(st.sampled_from(pool), max_size=8, unique=True))
    how = data.draw(st.sampled_from(["mapping", "values", "counts"]))
    if how == "mapping":
        mapping = {k: data.draw(ints_of("int64")) for k in keys}
        vocab = mapping
    elif how == "values":
        start = data.draw(st.integers(-5, 5))
        mapping = ref.vocabulary_from_values(keys, start)
        vocab = ops.Vocabulary.from_values(keys, start=start, kind="int")
    else:
        counts = {k: data.draw(st.integers(0, 4)) for k in keys}
        min_freq = data.draw(st.integers(1, 3))
        mapping = ref.vocabulary_from_counts(counts, min_freq)
        vocab = ops.Vocabulary.from_counts(pd.Series(counts, dtype=object) if counts else {}, min_freq, kind="int")
    oov = data.draw(ints_of("int64"))
    scores = {k: float(i) + 0.5 for i, k in enumerate(keys)}
    default = data.draw(st.floats(allow_nan=False, width=32))
    feats = {"id": ops.lookup("x", vocab, oov=oov)}
    want = {"id": [ref.lookup(v, mapping, oov) for v in held]}
    if scores:  # the float form: a dict with float values (lookup_value)
        feats["s"] = ops.lookup("x", scores, oov=default)
        want["s"] = [ref.lookup(v, scores, default) for v in held]
    _check(pd.DataFrame({"x": x}), feats, want, family)


@pytest.mark.parametrize("family", FAMILIES)
@DIFF
@given(data=st.data())
def test_lookup_strings(family, data):
    """Every string storage; keys with accents, CJK, emoji, NUL (a trailing NUL is another
    key), empty and very long strings; nulls give oov."""
    n = data.draw(sizes())
    values, storage = data.draw(string_columns(n))
    x = string_series(values, storage, index=data.draw(indexes(n)))
    held = _held(values)
    seen = sorted({v for v in held if v is not None})
    keys = data.draw(st.lists(st.one_of(st.sampled_from(seen) if seen else texts(), texts(), st.just("")),
                              max_size=6, unique=True))
    keys += [k + "\x00" for k in keys[:1]]  # differs only by a trailing NUL: its own key
    mapping = {k: i * 7 - 3 for i, k in enumerate(keys)}
    scores = {k: i / 4 for i, k in enumerate(keys)}
    feats = {"id": ops.lookup("x", mapping, oov=-1), "q": ops.lookup("x", keys, oov=0)}
    want = {"id": [ref.lookup(v, mapping, -1) for v in held],
            "q": [ref.lookup(v, ref.vocabulary_from_values(keys), 0) for v in held]}
    if scores and keys and all(isinstance(s, float) for s in scores.values()) and len(keys) > 1:
        feats["s"] = ops.lookup("x", scores, oov=-0.5)
        want["s"] = [ref.lookup(v, scores, -0.5) for v in held]
    _check(pd.DataFrame({"x": x}), feats, want, family)


@pytest.mark.parametrize("family", FAMILIES)
def test_lookup_keys_one_float64_step_apart(family):
    """Keys and values that float64 cannot tell apart (2^63 - 2 / 2^63 - 1, 2^53 / 2^53 + 1,
    2^64 - 2 / 2^64 - 1) match only themselves, in the id and the float form, on int64,
    uint64 (numpy, masked, Arrow) and float64 columns."""
    ids = {"i": ([2**63 - 2, 2**63 - 1, None, 2**53, -1], "Int64"), "u": ([2**64 - 2, 2**64 - 1, 2**53, None, 7], "UInt64"),
           "a": ([2**53, 2**53 + 1, None, 0, 1], "uint64[pyarrow]"), "n": ([2**53 + 1, 2**64 - 2, 3, 2**53, 1], "uint64")}
    df = pd.DataFrame({k: int_series(v, dt) for k, (v, dt) in ids.items()})
    df["f"] = [2.0**53, 2.0**63, None, 3.0, -1.0]
    feats, want = {}, {}
    for j, keys in enumerate(([2**63 - 1, 2**53 + 1, 3], [2**64 - 1, 2**53 + 1, 3], [2**63 - 1, 2**64 - 1, -1, 3])):
        scores, mapping = {k: i + 0.5 for i, k in enumerate(keys)}, {k: i for i, k in enumerate(keys)}
        for c in ("i", "u", "a", "n", "f"):
            held = [None if v is None or v != v else v for v in df[c].astype(object).where(df[c].notna(), None)]
            feats[f"s{c}{j}"], want[f"s{c}{j}"] = ops.lookup(c, scores, oov=-0.5), [ref.lookup(v, scores, -0.5) for v in held]
            if c != "f":
                feats[f"d{c}{j}"], want[f"d{c}{j}"] = ops.lookup(c, mapping, oov=-9), [ref.lookup(v, mapping, -9) for v in held]
    _check(df, feats, want, family)


def test_lookup_kinds_that_never_match_are_errors():
    """String keys against an int column (and int keys against strings) would match
    nothing: an error naming the column, for the id and the float form alike."""
    df = pd.DataFrame({"user_id": [1, 2], "city": pd.Series(["a", "b"], dtype="str")})
    for feats, col in (({"f": ops.lookup("user_id", {"1": 1})}, "user_id"), ({"f": ops.lookup("city", {1: 1})}, "city"),
                       ({"f": ops.lookup("user_id", {"1": 0.5})}, "user_id"),
                       ({"f": ops.lookup("city", {1: 0.5})}, "city")):
        for mode in ("eager", "dask3"):
            with pytest.raises(FbrapidsError) as info:
                list(run_modes(df, lambda f: f.fbx.extract(**feats), only=[mode]))
            assert_error_names(info.value, col)


# -- json_get ------------------------------------------------------------------------------------
JSON_KEYS = st.sampled_from(["a", "b", "é", "漢", "😀", "a b", "", "k\x00"])


def _json_values(depth: int) -> st.SearchStrategy[Any]:
    leaf = st.one_of(texts(max_size=6, long=False), st.integers(-(2**70), 2**70), st.booleans(), st.none(),
                     st.floats(allow_nan=False, allow_infinity=False))
    if depth == 0:
        return leaf
    inner = _json_values(depth - 1)
    return st.one_of(leaf, st.dictionaries(JSON_KEYS, inner, max_size=3), st.lists(inner, max_size=2))


@pytest.mark.parametrize("family", FAMILIES)
@DIFF
@given(data=st.data())
def test_json_get(family, data):
    """Strict JSON documents (escaped or raw UTF-8, nested, numbers past 64 bits), broken
    ones (cut, NaN, trailing text, single quotes), nulls; dotted paths of one to three keys."""
    n = data.draw(sizes(20))
    docs = []
    for _ in range(n):
        kind = data.draw(st.integers(0, 9))
        value = data.draw(st.dictionaries(JSON_KEYS, _json_values(2), max_size=4))
        text = json.dumps(value, ensure_ascii=data.draw(st.booleans()), separators=data.draw(
            st.sampled_from([(",", ":"), (", ", ": ")])))
        if kind == 0:
            docs.append(data.draw(st.sampled_from(NULL_KINDS)))
        elif kind == 1:
            docs.append(text[: data.draw(st.integers(0, len(text)))])
        elif kind == 2:
            docs.append(data.draw(st.sampled_from(['{"a": NaN}', '{"a": "x"} 1', "{'a': 'x'}", '{"a": "x",}',
                                                  '  {"a" : "sp"}  ', '{"a": "\\u00e9\\ud83d\\ude00"}', "[]", '"a"',
                                                  '{"a": {"b": "deep"}, "a": "dup"}'])))
        else:
            docs.append(text)
    storage = data.draw(st.sampled_from(["object", "str", "arrow_large_string"]))
    x = string_series(docs, storage, index=data.draw(indexes(n)))
    paths = data.draw(st.lists(st.lists(JSON_KEYS.filter(lambda k: "." not in k and k), min_size=1, max_size=3)
                               .map(".".join), min_size=1, max_size=3, unique=True))
    feats = {f"j{i}": ops.json_get("x", p) for i, p in enumerate(paths)}
    want = {f"j{i}": [ref.json_get(d, p) for d in _held(docs)] for i, p in enumerate(paths)}
    _check(pd.DataFrame({"x": x}), feats, want, family)


# -- user operators, call, col ----------------------------------------------------------------------
@pytest.mark.parametrize("family", FAMILIES)
@DIFF
@given(data=st.data())
def test_user_operator_call_and_col(family, data):
    """A user operator from a C snippet (f64 body) equals the same body in Python; ``call``
    reaches it and a built-in by name; ``col`` is the column itself."""
    ops.register_operator("diff_affine", "f64 x, f64 y", "f64 z", "z = x * 2.5 - y;", replace=True)
    n = data.draw(sizes())
    xs = data.draw(st.lists(st.one_of(st.floats(allow_nan=False, width=32), st.none()), min_size=n, max_size=n))
    ys = data.draw(st.lists(st.one_of(st.floats(allow_nan=False, width=32), st.none()), min_size=n, max_size=n))
    secs = data.draw(st.lists(ints_of("int64"), min_size=n, max_size=n))
    index = data.draw(indexes(n))
    df = pd.DataFrame({"x": pd.Series(xs, dtype="float64", index=index), "y": pd.Series(ys, dtype="Float64", index=index),
                       "t": pd.Series(secs, dtype="int64", index=index)})
    feats = {"z": ops.call("diff_affine", "x", ops.col("y")), "h": ops.call("hour", "t"), "x2": ops.col("x")}
    want = {"z": [ref.call(ref.register_operator, a, b) for a, b in zip(xs, ys)],
            "h": [ref.call(ref.hour, s) for s in secs], "x2": [ref.col(a) for a in xs]}
    _check(df, feats, want, family)
