"""Differential tests of ``clean`` (fill, json, where, drop, clean_report counts) and
``join`` (eager, broadcast, shuffle, partitioned by sorted index) against the plain-Python
references of diffref_views, eager and as dask frames of 1, 3 and 7 partitions."""

from __future__ import annotations

import json as _json
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, strategies as st

import fbrapids  # noqa: F401  (registers .fbx)
from fbrapids.errors import FbrapidsError
from fbrapids.joins.strategies import join_decisions
from fbrapids.views.clean import clean_report

import diffref_views as ref
from diff_harness import (
    DIFF,
    FAMILIES,
    assert_column,
    assert_error_names,
    assert_values,
    is_dask_mode,
    materialize,
    modes,
    run_modes,
    to_mode,
)
from diff_strategies import (
    BIG_IDS,
    INT_DTYPES,
    NULL_KINDS,
    STRING_STORAGES,
    indexes,
    int_columns,
    int_series,
    ints_of,
    sizes,
    string_columns,
    string_series,
    texts,
)


def _expect_refusal(fn, *culprits: str) -> None:
    with pytest.raises(FbrapidsError) as info:
        fn()
    assert_error_names(info.value, *culprits)


# -- fill ------------------------------------------------------------------------------------
FILL_ODD = [1000, -1, 2.5, 2.0, "x", "", True, 2**53 + 1, 2**64 - 1, 2**64, 1e300, -0.0, float("inf")]


@st.composite
def fill_case(draw, n: int):
    """A column of some dtype with nulls, its reference values and kind, and a fill value."""
    what = draw(st.sampled_from(["int", "float", "bool", "str"]))
    if what == "int":
        values, dtype = draw(int_columns(n))
        series, kind = int_series(values, dtype), dtype.split("[")[0].lower()
        value = draw(st.one_of(ints_of(kind), st.sampled_from(FILL_ODD)))
    elif what == "float":
        kind = draw(st.sampled_from(["float32", "float64"]))
        values = draw(st.lists(st.one_of(st.floats(-1e6, 1e6, width=32), st.sampled_from(NULL_KINDS[:2])),
                               min_size=n, max_size=n))
        series = pd.Series(np.array([np.nan if v is None else v for v in values], dtype=kind))
        values = [None if v is None or v != v else float(np.array(v, dtype=kind)) for v in values]
        value = draw(st.one_of(st.floats(-1e6, 1e6, width=32), st.sampled_from(FILL_ODD)))
    elif what == "bool":
        kind = "bool"
        values = draw(st.lists(st.sampled_from([True, False, None]), min_size=n, max_size=n))
        series = pd.Series(pd.array(values, dtype="boolean"))
        value = draw(st.sampled_from([True, False, 1, 0, "x"]))
    else:
        values, storage = draw(string_columns(n, long=False))
        series = string_series(values, storage)
        all_null_cat = storage == "category" and all(ref.is_null(v) for v in values)
        kind = "any" if all_null_cat else "str"
        value = draw(st.one_of(texts(long=False), st.sampled_from(FILL_ODD)))
    return series, values, kind, value


@pytest.mark.parametrize("family", FAMILIES)
@DIFF
@given(data=st.data())
def test_fill_is_exact_or_refused_naming_column_and_value(family, data):
    n = data.draw(sizes(), label="n")
    cases = [data.draw(fill_case(n), label=f"c{i}") for i in range(data.draw(st.integers(1, 3)))]
    index = data.draw(indexes(n))
    df = pd.DataFrame({f"c{i}": s.set_axis(index) for i, (s, *_) in enumerate(cases)}, index=index)
    spec = {f"c{i}": value for i, (_, _, _, value) in enumerate(cases)}
    misfit = [c for c, (_, _, kind, value) in zip(spec, cases)
              if not (kind == "any" and value is not None) and not ref.fill_fits(kind, value)]
    for mode in modes(family):
        if misfit:
            _expect_refusal(lambda: materialize(to_mode(df, mode).fbx.clean(fill=spec), mode), misfit[0])
            continue
        lazy = to_mode(df, mode).fbx.clean(fill=spec)
        out = materialize(lazy, mode)
        counts = clean_report(lazy).counts
        for col, (_, values, kind, value) in zip(spec, cases):
            want, nulls = ref.fill(values, value)
            if kind.startswith("float"):
                want = [float(np.array(v, dtype=kind)) for v in want]
            assert_column(out, col, want, mode=mode)
            assert counts["fill"][col] == nulls, (mode, col, counts)
        assert counts["rows_in"] == counts["rows_out"] == n
        assert list(out.index) == list(index), mode


# -- json ------------------------------------------------------------------------------------
LEAVES = st.one_of(texts(long=False), st.integers(-10, 2**64), st.booleans(), st.none(),
                   st.floats(allow_nan=False, allow_infinity=False), st.just([]), st.just({}))


@st.composite
def documents(draw):
    """JSON text: valid documents (escaped or raw unicode, surrogate pairs, duplicate keys)
    and near misses (truncated, trailing garbage, NaN, single quotes, BOM, lone surrogate,
    raw control characters, deep nesting)."""
    leaf = draw(LEAVES)
    doc = {"a": {"b": leaf, draw(st.sampled_from(["c", "b\u00e9", "日"])): draw(LEAVES)}, "c": draw(LEAVES)}
    if draw(st.booleans()):
        doc = {"a": draw(LEAVES), "c": doc["a"]}
    text = _json.dumps(doc, ensure_ascii=draw(st.booleans()), separators=draw(st.sampled_from([None, (",", ":")])))
    kind = draw(st.sampled_from(["valid", "valid", "dup", "dup_late", "mutate", "deep", "root"]))
    if kind == "dup":  # the first of two "a" keys holds the path; the last wins
        text = text[:-1] + ', "a": ' + _json.dumps(draw(LEAVES)) + "}"
    elif kind == "dup_late":
        text = '{"a": 5, ' + text[1:]
    elif kind == "mutate":
        cut = draw(st.integers(0, len(text)))
        text = draw(st.sampled_from([
            text[:cut], text + " x", text.replace('"', "'", 1), "\ufeff" + text, text[:-1] + ",}",
            text.replace('"a"', '"\\ud800"', 1), text.replace('"a"', '"a\tb"', 1), '{"a": {"b": NaN}}',
            '{"a": {"b": "\\ud83d\\ude00\\u00e9\\u0000"}}', " \r\n" + text + "\t", text + "\x0b", "", "01",
            '{"a": {"b": "x"}} {}', '{"a": {"b": "\\x"}}', '{"a" {"b": "x"}}']))
    elif kind == "deep":
        k = draw(st.integers(60, 70))
        text = '{"a": ' + "[" * k + "]" * k + "}"
    elif kind == "root":
        text = draw(st.sampled_from(['"a.b"', "[1, 2]", "null", "true", "-0.5e+3", "1.", ".5", "+1", "Infinity"]))
    return text


# random documents: a path is often in none of them (and, on dask, in none of a partition's), which
# clean warns about by design (NoMatchWarning; its own tests: tests/project/test_newcomer_traps.py)
@pytest.mark.filterwarnings("ignore::fbrapids.errors.NoMatchWarning")
@pytest.mark.parametrize("family", FAMILIES)
@DIFF
@given(data=st.data())
def test_json_fields_and_counts(family, data):
    n = data.draw(sizes(20), label="n")
    docs = data.draw(st.lists(st.one_of(documents(), st.sampled_from(NULL_KINDS)), min_size=n, max_size=n))
    storage = data.draw(st.sampled_from(STRING_STORAGES))
    index = data.draw(indexes(n))
    paths = {"ab": "a.b", "a": "a", "c": "c", "x": "a.b.c"}
    df = pd.DataFrame({"ctx": string_series(docs, storage, index=index), "rid": np.arange(n)}, index=index)
    want, want_counts = ref.extract_json([None if ref.is_null(d) else d for d in docs], paths)
    spec = dict(json={"ctx": paths}, fill={"ab": "?"}, where="ab != 'zz' or isnull(ab)", drop=["ctx"])
    keep = [v != "zz" for v in want["ab"]]
    for mode, out in run_modes(df, lambda f: f.fbx.clean(**spec), family):
        assert list(out.columns) == ["rid", *paths], mode
        assert_values(out["rid"], [i for i in range(n) if keep[i]], what=f"{mode}: kept rows")
        for name in paths:
            col = [v for v, k in zip(want[name], keep) if k]
            if name == "ab":
                col = ref.fill(col, "?")[0]
            assert_column(out, name, col, mode=mode)
    for mode in modes(family):
        lazy = to_mode(df, mode).fbx.clean(**spec)
        counts = clean_report(lazy).counts
        assert counts["json"]["ctx"] == want_counts, (mode, counts["json"]["ctx"], want_counts)
        assert counts["fill"]["ab"] == sum(v is None for v in want["ab"]), mode


def test_json_source_must_hold_text():
    df = pd.DataFrame({"ctx": [1, 2]})
    _expect_refusal(lambda: df.fbx.clean(json={"ctx": {"a": "a"}}), "ctx")


# -- where -----------------------------------------------------------------------------------
INT_LITS = [0, 1, -1, 127, 128, -129, 255, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63)]


@st.composite
def conditions(draw, cols: dict, depth: int = 0):
    """``(text, row -> True/False/None)``: a filter and its three-valued reference."""
    if depth < 2 and draw(st.integers(0, 2)) == 0:
        kind = draw(st.sampled_from(["and", "or", "not"]))
        a = draw(conditions(cols, depth + 1))
        if kind == "not":
            return f"not ({a[0]})", lambda r, a=a: ref.tv_not(a[1](r))
        b = draw(conditions(cols, depth + 1))
        fn = ref.tv_and if kind == "and" else ref.tv_or
        return f"({a[0]}) {kind} ({b[0]})", lambda r, a=a, b=b, fn=fn: fn(a[1](r), b[1](r))
    op = draw(st.sampled_from(["==", "!=", "<", "<=", ">", ">="]))
    atom = draw(st.sampled_from(["x_lit", "x_flt", "f_lit", "f_int", "s_lit", "s_in", "x_in", "null", "x_f",
                                 "x_arith", "b", "x_y", "y_f", "mismatch", "nan_lit"]))
    unsigned = cols["x"] == "uint64"
    if atom == "x_lit":
        lit = draw(st.one_of(st.sampled_from(INT_LITS), st.integers(-300, 300)))
        return f"x {op} {lit}", lambda r: ref.compare(op, r["x"], lit)
    if atom == "x_flt":
        lit = draw(st.sampled_from([2.5, -0.5, 127.5, 1e20, float(2**63), float("inf"), float("-inf")]))
        return f"x {op} {lit!r}", lambda r: ref.compare(op, r["x"], lit)
    if atom == "f_lit":
        lit = draw(st.sampled_from([0.0, 0.1, -1.5, 1e300]))
        return f"{lit!r} {op} f", lambda r: ref.compare(op, lit, r["f"])
    if atom == "f_int":
        lit = draw(st.sampled_from([2**53 + 1, 2**53, -(2**53) - 1, 3]))
        return f"f {op} {lit}", lambda r: ref.compare(op, r["f"], lit)
    if atom == "x_f":
        return f"x {op} f", lambda r: ref.compare(op, r["x"], r["f"])
    if atom == "nan_lit":  # a NaN operand is unknown whatever the operator (x != nan too)
        col = draw(st.sampled_from(["x", "f", "y"]))
        text = f"{col} {op} nan" if draw(st.booleans()) else f"nan {op} {col}"
        return text, lambda r: ref.compare(op, r[col], math.nan)
    if atom in ("x_y", "y_f"):  # column against column of another type: exact, never via float64
        a, b = ("x", "y") if atom == "x_y" else ("y", "f")
        if draw(st.booleans()):
            a, b = b, a
        return f"{a} {op} {b}", lambda r: ref.compare(op, r[a], r[b])
    if atom == "mismatch":  # a literal or column of another kind: refused naming the column
        text, culprit = draw(st.sampled_from([("x in ['a']", "'x'"), ("x == 'a'", "'x'"), ("'' != y", "'y'"),
                                              ("s in [1]", "'s'"), ("s not in [2.5, 'a']", "'s'"),
                                              ("s == x", "'s'"), ("f < s", "'s'")]))
        cols["refused"].append(culprit)
        return text, lambda r: None
    if atom == "s_lit":
        lit = draw(st.sampled_from(["", "a", "a\x00", "é", "日本", "b"]))
        if op not in ("==", "!="):
            op = draw(st.sampled_from(["<", ">="]))
        return f"s {op} {lit!r}", lambda r: ref.compare(op, r["s"], lit)
    if atom == "s_in":
        lits = draw(st.lists(st.sampled_from(["", "a", "a\x00", "é", "日本"]), min_size=1, max_size=3))
        neg = draw(st.booleans())
        return (f"s {'not in' if neg else 'in'} {lits!r}",
                lambda r: None if ref.is_null(r["s"]) else (r["s"] in lits) != neg)
    if atom == "x_in":
        lits = draw(st.lists(st.sampled_from(INT_LITS + [2, 2.0, 2.5, float(2**63), math.nan]), min_size=1, max_size=3))
        # x in [1, nan] is x == 1 or x == nan: True where a value matches, else unknown when nan is listed
        return f"x in {lits!r}", lambda r: ref.is_in(r["x"], lits)
    if atom == "null":
        col = draw(st.sampled_from(["x", "f", "s"]))
        neg = draw(st.booleans())
        return f"{'notnull' if neg else 'isnull'}({col})", lambda r: ref.is_null(r[col]) != neg
    if atom == "b":
        return "b", lambda r: None if r["b"] is None else r["b"]
    aop = draw(st.sampled_from(["+", "-", "*", "//", "%"]))
    lit = draw(st.sampled_from([0, 1, 2, 3, 100, 2**62] + ([] if unsigned else [-1, -7])))
    right = draw(st.sampled_from(["x", str(lit), "y"]))  # y: a column divisor, null on some rows
    if right == "y" and unsigned != (cols["y"] == "uint64"):
        cols["refused"].append("uint64")  # int64 with uint64 arithmetic: no exact common type
    cmp_lit = draw(st.sampled_from([0, 5, -5]))

    def fn(r, aop=aop, right=right, lit=lit, cmp_lit=cmp_lit, op=op):
        b = r[right] if right in ("x", "y") else lit
        return ref.compare(op, ref.arith(aop, r["x"], b, unsigned), cmp_lit)
    return f"x {aop} {right} {op} {cmp_lit}", fn


@pytest.mark.parametrize("family", FAMILIES)
@DIFF
@given(data=st.data())
def test_where_three_valued_and_exact(family, data):
    n = data.draw(sizes(), label="n")
    xs, xdtype = data.draw(int_columns(n))
    fs = data.draw(st.lists(st.one_of(st.sampled_from([None, float(2**53), 0.1, -1.5, 127.5, float(2**63),
                                                       float(2**64), -float(2**63)]),
                                      st.floats(-1e3, 1e3)), min_size=n, max_size=n))
    ys, ydtype = data.draw(int_columns(n))
    lo, hi = ref.INT_RANGE[ydtype.split("[")[0].lower()]
    for i, tie in enumerate(data.draw(st.lists(st.sampled_from(["", "f", "y", "fy"]), min_size=n, max_size=n))):
        if xs[i] is not None and "f" in tie:  # rows where the float column ties the int one's nearest float
            fs[i] = float(xs[i])
        if xs[i] is not None and "y" in tie and lo <= xs[i] <= hi:  # and rows where both int columns agree
            ys[i] = xs[i]
    ss, storage = data.draw(string_columns(n, long=False))
    bs = data.draw(st.lists(st.sampled_from([True, False, None]), min_size=n, max_size=n))
    index = data.draw(indexes(n))
    df = pd.DataFrame({"x": int_series(xs, xdtype, index), "f": pd.Series([np.nan if v is None else v for v in fs],
                                                                           index=index, dtype="float64"),
                       "s": string_series(ss, storage, index), "b": pd.Series(pd.array(bs, dtype="boolean"), index=index),
                       "y": int_series(ys, ydtype, index), "rid": np.arange(n)}, index=index)
    cols = {"x": xdtype.split("[")[0].lower(), "y": ydtype.split("[")[0].lower(), "refused": []}
    text, fn = data.draw(conditions(cols), label="where")
    rows = [{"x": xs[i], "y": ys[i], "f": fs[i], "s": None if ref.is_null(ss[i]) else ss[i], "b": bs[i]}
            for i in range(n)]
    try:
        if cols["refused"]:
            raise ref.Refused(*cols["refused"])
        keep = [i for i, r in enumerate(rows) if fn(r) is True]
    except (ref.Overflow, ref.Refused) as exc:
        culprits = (text, *getattr(exc, "culprits", ()))
        for mode in modes(family):
            _expect_refusal(lambda: materialize(to_mode(df, mode).fbx.clean(where=text), mode), *culprits)
        return
    for mode, out in run_modes(df, lambda f: f.fbx.clean(where=text), family):
        assert_values(out["rid"], keep, what=f"{mode}: rows kept by {text!r}")
        assert list(out.index) == [index[i] for i in keep], mode
    lazy = to_mode(df, modes(family)[-1]).fbx.clean(where=text)
    assert clean_report(lazy).counts["rows_out"] == len(keep)


# -- join ------------------------------------------------------------------------------------
KEY_KINDS = ("int", "uint64", "str")


@st.composite
def key_sides(draw):
    """``(left keys, right keys, left series maker, right series maker)`` over one pool, so
    keys match; int keys of every width (right maybe of another width), uint64 ids, strings
    with trailing NUL; nulls."""
    kind = draw(st.sampled_from(KEY_KINDS))
    if kind == "str":
        pool = draw(st.lists(st.sampled_from(["a", "a\x00", "", "é", "日本😀", "b", "a "]), min_size=1, max_size=5))
        ls, rs = draw(st.sampled_from(STRING_STORAGES)), draw(st.sampled_from(STRING_STORAGES))
        make = (lambda v, i=None: string_series(v, ls, i)), (lambda v, i=None: string_series(v, rs, i))
    else:
        dtypes = ("uint64",) if kind == "uint64" else tuple(t for t in INT_DTYPES if t != "uint64")
        base_l, base_r = draw(st.sampled_from(dtypes)), draw(st.sampled_from(dtypes))
        lo = max(ref.INT_RANGE[base_l][0], ref.INT_RANGE[base_r][0])
        hi = min(ref.INT_RANGE[base_l][1], ref.INT_RANGE[base_r][1])
        extra = [v for v in BIG_IDS + [lo, hi, -1, 0] if lo <= v <= hi]
        pool = draw(st.lists(st.one_of(st.sampled_from(extra), st.integers(lo, hi)), min_size=1, max_size=5))
        flav = draw(st.sampled_from(["", "nullable", "arrow"]))
        name = {"": base_l, "nullable": base_l.capitalize().replace("Uint", "UInt"), "arrow": f"{base_l}[pyarrow]"}[flav]
        rname = base_r.capitalize().replace("Uint", "UInt")
        make = (lambda v, i=None: int_series(v, name if flav or None not in v else name.capitalize().replace("Uint", "UInt"), i)), \
               (lambda v, i=None: int_series(v, rname, i))
    value = st.one_of(st.sampled_from(pool), st.none())
    return value, make, kind


@pytest.mark.parametrize("family", FAMILIES)
@DIFF
@given(data=st.data())
def test_join_every_strategy(family, data):
    value, (make_l, make_r), kind = data.draw(key_sides(), label="keys")
    n, m = data.draw(sizes(20), label="n"), data.draw(st.integers(0, 8), label="m")
    lk = data.draw(st.lists(value, min_size=n, max_size=n))
    rk = data.draw(st.lists(value, min_size=m, max_size=m))
    how = data.draw(st.sampled_from(["left", "inner"]))
    validate = data.draw(st.sampled_from(["auto", None, "one_to_one", "many_to_one", "one_to_many", "many_to_many"]))
    kwargs = {} if validate == "auto" else {"validate": validate}
    v = "many_to_one" if validate == "auto" and how == "left" else (None if validate == "auto" else validate)
    index = data.draw(indexes(n))
    left = pd.DataFrame({"k": make_l(lk, index), "rid": np.arange(n)}, index=index)
    right = pd.DataFrame({"k": make_r(rk), "r": np.arange(m), "big": np.array(
        [BIG_IDS[j % len(BIG_IDS)] for j in range(m)], dtype="uint64"), "s": [f"v{j}é" for j in range(m)]})
    clean = [None if ref.is_null(x) else x for x in lk], [None if ref.is_null(x) else x for x in rk]
    try:
        pairs = ref.join(*clean, how, v)
    except ref.Refused as refused:
        for strategy, fn in _strategies(left, right, how, kwargs, family):
            _expect_refusal(lambda: fn(), *refused.culprits)
        return
    for strategy, fn in _strategies(left, right, how, kwargs, family):
        out, mode = fn(with_mode=True)
        _check_join(out, pairs, clean, strategy, mode, left.index)
        assert join_decisions()[-1].strategy == strategy.split(":")[0], (strategy, join_decisions()[-1])


def _strategies(left, right, how, kwargs, family):
    """``(strategy, call)``: eager, then on dask broadcast (right eager / right dask forced),
    shuffle and partitioned (both sides indexed and sorted by the key, null keys left out)."""
    for mode in modes(family):
        if not is_dask_mode(mode):
            yield "eager", _call(left, right, how, kwargs, mode, mode, None)
            continue
        rmode = mode[:-1] + "3" if mode.endswith("7") else mode
        yield "broadcast", _call(left, right, how, kwargs, mode, None, None)
        yield "broadcast:forced", _call(left, right, how, kwargs, mode, rmode, True)
        yield "shuffle", _call(left, right, how, kwargs, mode, rmode, False)


def _call(left, right, how, kwargs, lmode, rmode, broadcast):
    def fn(with_mode=False):
        other = right if rmode is None else to_mode(right, rmode)
        extra = {} if broadcast is None else {"broadcast": broadcast}
        out = materialize(to_mode(left, lmode).fbx.join(other, on="k", how=how, **kwargs, **extra), lmode)
        return (out, lmode) if with_mode else out
    return fn


def _check_join(out, pairs, keys, strategy, mode, index):
    order = np.lexsort((out["r"].fillna(-1).to_numpy(dtype="int64"), out["rid"].to_numpy(dtype="int64")))
    if strategy.startswith("shuffle"):
        out = out.iloc[order]
    else:  # the view's order, and per view row the right side's order
        assert list(order) == list(range(len(out))), f"{strategy} {mode}: rows out of the view's order"
    assert_values(out["rid"], [i for i, _ in pairs], what=f"{strategy} {mode}: view rows")
    assert_values(out["r"], [j for _, j in pairs], what=f"{strategy} {mode}: right rows")
    assert_values(out["k"], [keys[0][i] for i, _ in pairs], what=f"{strategy} {mode}: key")
    big = [None if j is None else BIG_IDS[j % len(BIG_IDS)] for _, j in pairs]
    assert_values(out["big"], big, what=f"{strategy} {mode}: uint64 payload")
    assert_values(out["s"], [None if j is None else f"v{j}é" for _, j in pairs], what=f"{strategy} {mode}: str payload")
    assert list(out.index) == [index[i] for i, _ in pairs], f"{strategy} {mode}: index"


@DIFF
@given(data=st.data())
def test_join_partitioned_by_sorted_index(data):
    """Both sides indexed by the key and sorted, with known divisions, of differing key
    ranges; partitioned and shuffle agree with the reference and with each other."""
    n, m = data.draw(st.integers(1, 25)), data.draw(st.integers(1, 12))
    kind = data.draw(st.sampled_from(["int64", "uint64", "str"]))
    if kind == "str":
        value = st.text(alphabet="ab\x00é日", max_size=3)
    else:
        value = st.one_of(st.sampled_from([0, 5, 2**53, 2**53 + 1, 2**63 - 1] + ([2**63, 2**64 - 1] if kind == "uint64" else [-5])),
                          st.integers(0, 40) if data.draw(st.booleans()) else st.integers(30, 90))
    lk = sorted(data.draw(st.lists(value, min_size=n, max_size=n)))
    rk = sorted(set(data.draw(st.lists(value, min_size=m, max_size=m))))
    dtype = object if kind == "str" else kind
    left = pd.DataFrame({"rid": np.arange(n)}, index=pd.Index(np.array(lk, dtype=dtype), name="k"))
    right = pd.DataFrame({"r": np.arange(len(rk))}, index=pd.Index(np.array(rk, dtype=dtype), name="k"))
    how = data.draw(st.sampled_from(["left", "inner"]))
    pairs = ref.join(lk, rk, how, None)
    for np_l, np_r in ((1, 1), (3, 2), (7, 3)):
        dl, dr = pd_dask(left, np_l), pd_dask(right, np_r)
        for broadcast in (None, False):
            got = dl.fbx.join(dr, on="k", how=how, broadcast=broadcast)
            assert join_decisions()[-1].strategy == "partitioned"
            out = materialize(got, f"dask{np_l}")
            assert_values(out["rid"], [i for i, _ in pairs], what=f"partitioned {np_l}/{np_r}: view rows")
            assert_values(out["r"], [j for _, j in pairs], what=f"partitioned {np_l}/{np_r}: right rows")
            assert_values(pd.Series(out.index), [lk[i] for i, _ in pairs], what=f"partitioned {np_l}/{np_r}: keys")
            assert got.known_divisions


@pytest.mark.parametrize("rk", [[2**53], [2**53, 2**53 + 1], [-1], [0, 2**53]])
def test_join_partitioned_right_side_of_one_key(rk):
    """dask's repartition(divisions=(0, 5, a, a)) of a one-key side (divisions (a, a)) dropped
    all its rows: the partitioned inner join found nothing (found by the thorough profile)."""
    lk = [0, 5, 2**53]
    left = pd.DataFrame({"rid": np.arange(3)}, index=pd.Index(np.array(lk, dtype="int64"), name="k"))
    right = pd.DataFrame({"r": np.arange(len(rk))}, index=pd.Index(np.array(rk, dtype="int64"), name="k"))
    pairs = ref.join(lk, rk, "left", None)
    got = materialize(pd_dask(left, 3).fbx.join(pd_dask(right, 2), on="k", how="left"), "dask3")
    assert join_decisions()[-1].strategy == "partitioned"
    assert_values(got["rid"], [i for i, _ in pairs], what="view rows")
    assert_values(got["r"], [j for _, j in pairs], what="right rows")


def pd_dask(frame, n):
    import dask.dataframe as dd

    return dd.from_pandas(frame, npartitions=n, sort=True)


@DIFF
@given(data=st.data())
def test_join_refuses_mismatched_keys_naming_them(data):
    a = data.draw(st.sampled_from(["int64", "Int32", "str", "uint64", "float64", "category"]))
    b = data.draw(st.sampled_from(["int8", "string[pyarrow]", "int64", "float32", "uint64"]))
    kinds = {"int64": "i", "Int32": "i", "int8": "i", "str": "s", "string[pyarrow]": "s", "category": "s",
             "uint64": "u", "float64": "f", "float32": "f"}
    left = pd.DataFrame({"k": pd.Series(["1", "2"] if kinds[a] == "s" else [1, 2]).astype(a)})
    right = pd.DataFrame({"k": pd.Series(["1"] if kinds[b] == "s" else [1]).astype(b), "v": [7]})
    ok = kinds[a] == kinds[b] and kinds[a] != "f"
    for mode in ("eager", "dask3"):
        call = lambda: materialize(to_mode(left, mode).fbx.join(to_mode(right, "dask1" if mode != "eager" else mode), on="k"),
                                   mode)
        if ok:
            assert_values(call()["v"], [7, None], what=f"{a} with {b}")
        else:
            _expect_refusal(call, "'k'")


WHERE_EDGES = ["x * x > 0", "x - 1 > 0", "x + 9223372036854775807 > 0", "x // 0 == 0", "isnull(x % 0)",
               "x // -1 > 0", "f == 9007199254740993", "f < 9007199254740993", "f >= 9007199254740993",
               "s < 'b'", "s >= 'a\\x00'", "x < 2.5", "x == 18446744073709551615", "x > -1",
               "x == g", "x < g", "g >= x", "x == u", "u > x", "x in ['a']", "x == 'a'", "s in [1]", "x in [2.0, 2.5]"]


@pytest.mark.parametrize("xdtype", ["int64", "uint64", "Int8", "uint8[pyarrow]", "int64[pyarrow]"])
@pytest.mark.parametrize("text", WHERE_EDGES)
def test_where_edges_exact_or_refused(text, xdtype):
    """Fixed extremes through the three-valued reference: wrap-around, division by zero,
    float-vs-int exactness and categorical string order."""
    lo, hi = ref.INT_RANGE[xdtype.split("[")[0].lower()]
    xs = [lo, hi, 0, 1, None if xdtype[0] in "IU" or "[" in xdtype else 2]
    n = len(xs)
    df = pd.DataFrame({"x": int_series(xs, xdtype), "f": [2.0**53, 2.0**53 + 2, 1.0, np.nan, 0.5],
                       "s": pd.Series(["a", "b", "a\x00", None, "é"], dtype="category"), "rid": np.arange(n)})
    # columns whose float64 images tie x's: float(hi) is 2**63 / 2**64 beyond int64 / uint64
    gs = [float(lo), float(hi), 1.0, None, 2.0]
    us = [2**53, hi + 1 if hi < 2**64 - 1 else 2**64 - 2, 0, 2**64 - 1, 7]
    df["g"], df["u"] = [np.nan if v is None else v for v in gs], np.array(us, dtype=np.uint64)
    rows = [{"x": xs[i], "f": float(df["f"][i]), "s": df["s"][i], "g": gs[i], "u": us[i], "_u": xdtype.split("[")[0].lower() == "uint64"}
            for i in range(n)]
    tree = compile_where(text)
    try:
        keep = [i for i, r in enumerate(rows) if tree(r) is True]
    except (ref.Overflow, ref.Refused) as exc:
        for mode in ("eager", "dask3"):
            _expect_refusal(lambda: materialize(to_mode(df, mode).fbx.clean(where=text), mode),
                            text, *getattr(exc, "culprits", ()))
        return
    for mode, out in run_modes(df, lambda f: f.fbx.clean(where=text), "cpu", only=("eager", "dask3")):
        assert_values(out["rid"], keep, what=f"{mode}: rows kept by {text!r}")


def compile_where(text: str):
    """The few edge filters above as reference functions (no parsing of fbrapids' language)."""
    def x_arith(op, lit, cmp_op, cmp_lit):
        return lambda r: ref.compare(cmp_op, ref.arith(op, r["x"], r["x"] if lit == "x" else lit, r["_u"]), cmp_lit)
    table = {
        "x * x > 0": x_arith("*", "x", ">", 0),
        "x - 1 > 0": x_arith("-", 1, ">", 0),
        "x + 9223372036854775807 > 0": x_arith("+", 2**63 - 1, ">", 0),
        "x // 0 == 0": lambda r: None,
        "isnull(x % 0)": lambda r: True,
        "x // -1 > 0": x_arith("//", -1, ">", 0),
        "f == 9007199254740993": lambda r: ref.compare("==", r["f"], 2**53 + 1),
        "f < 9007199254740993": lambda r: ref.compare("<", r["f"], 2**53 + 1),
        "f >= 9007199254740993": lambda r: ref.compare(">=", r["f"], 2**53 + 1),
        "s < 'b'": lambda r: ref.compare("<", None if ref.is_null(r["s"]) else r["s"], "b"),
        "s >= 'a\\x00'": lambda r: ref.compare(">=", None if ref.is_null(r["s"]) else r["s"], "a\x00"),
        "x < 2.5": lambda r: ref.compare("<", r["x"], 2.5),
        "x == 18446744073709551615": lambda r: ref.compare("==", r["x"], 2**64 - 1),
        "x > -1": lambda r: ref.compare(">", r["x"], -1),
        "x == g": lambda r: ref.compare("==", r["x"], r["g"]),
        "x < g": lambda r: ref.compare("<", r["x"], r["g"]),
        "g >= x": lambda r: ref.compare(">=", r["g"], r["x"]),
        "x == u": lambda r: ref.compare("==", r["x"], r["u"]),
        "u > x": lambda r: ref.compare(">", r["u"], r["x"]),
        "x in ['a']": _refused("'x'"), "x == 'a'": _refused("'x'"), "s in [1]": _refused("'s'"),
        "x in [2.0, 2.5]": lambda r: None if r["x"] is None else r["x"] in (2.0, 2.5),
    }
    return table[text]


def _refused(*culprits: str):
    """A reference whose answer is an error naming ``culprits``."""
    def fn(r):
        raise ref.Refused(*culprits)
    return fn
