"""``clean(where=...)``: the safe expression language over every numeric width, with nulls.

Every expression is checked against two oracles: pandas' own ``DataFrame.eval`` on null-free
data (the same answers), and a row-by-row Python evaluation with SQL three-valued logic
on data with nulls (the documented rule; pandas' eval has two different rules there).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from fbrapids.errors import CleanError
from fbrapids.views.clean import clean, clean_report
from fbrapids.views.where import evaluate, parse_where

WIDTHS = ["int8", "int16", "uint8", "float32", "int64", "float64"]
EXPRESSIONS = [
    "x >= 0",
    "x < 300",
    "x > -1",
    "x != 7 and y <= 3",
    "x == 7 or not y > 2",
    "not (x > 5 or y < 1)",
    "0 < x <= 100",
    "x + y > 10",
    "x * 2 >= y - 1",
    "x > 2.5",
    "x in [1, 7, 200]",
    "x not in (7,)",
    "isnull(x) or y == 0",
    "notnull(x) and not isna(y)",
]


def narrow_frame(width: str, nulls: bool) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    hi = 200 if width == "uint8" else 120
    lo = 0 if width == "uint8" else -100
    x = rng.integers(lo, hi, 400)
    y = rng.integers(0, 6, 400)
    x[:4] = [7, 200 if width == "uint8" else 100, 1, 0]
    xs = pd.Series(x, dtype=width)
    ys = pd.Series(y, dtype="int16")
    if nulls:
        nullable = {"int8": "Int8", "int16": "Int16", "uint8": "UInt8", "int64": "Int64"}.get(width, width)
        xs = xs.astype(nullable)
        ys = ys.astype("Int16")
        xs[rng.random(400) < 0.2] = None
        ys[rng.random(400) < 0.2] = None
    return pd.DataFrame({"x": xs, "y": ys})


def _py(v):
    return None if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)) else v


def _oracle(expr: str, row: dict) -> bool | None:
    """Row-by-row three-valued evaluation with Python numbers (exact: no dtype at all)."""
    import ast

    def ev(n):
        if isinstance(n, ast.BoolOp):
            vals = [ev(v) for v in n.values]
            if isinstance(n.op, ast.And):
                return False if False in vals else (None if None in vals else True)
            return True if True in vals else (None if None in vals else False)
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
            v = ev(n.operand)
            return None if v is None else not v
        if isinstance(n, ast.UnaryOp):
            v = ev(n.operand)
            return None if v is None else -v
        if isinstance(n, ast.Compare):
            out, left = True, ev(n.left)
            for op, rn in zip(n.ops, n.comparators):
                if isinstance(op, (ast.In, ast.NotIn)):
                    vals = [ev(e) for e in rn.elts]
                    r = None if left is None else ((left in vals) != isinstance(op, ast.NotIn))
                else:
                    right = ev(rn)
                    r = None if left is None or right is None else {
                        ast.Eq: left == right, ast.NotEq: left != right, ast.Lt: left < right,
                        ast.LtE: left <= right, ast.Gt: left > right, ast.GtE: left >= right}[type(op)]
                    left = right
                out = False if (out is False or r is False) else (None if (out is None or r is None) else True)
            return out
        if isinstance(n, ast.BinOp):
            a, b = ev(n.left), ev(n.right)
            if a is None or b is None:
                return None
            return {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}[type(n.op)]
        if isinstance(n, ast.Call):
            v = ev(n.args[0])
            return (v is None) if n.func.id in ("isnull", "isna") else (v is not None)
        if isinstance(n, ast.Name):
            return row[n.id]
        return n.value

    return ev(ast.parse(expr, mode="eval").body)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_where_matches_pandas_eval_without_nulls(width, expr):
    df = narrow_frame(width, nulls=False)
    ours = evaluate(expr, df)
    pd_expr = (expr.replace("isnull(x)", "x.isnull()").replace("notnull(x)", "x.notnull()")
               .replace("isna(y)", "y.isna()"))
    # pandas wraps int8 arithmetic around; fbrapids widens first (documented): pandas' eval
    # over the 64-bit frame is the oracle there
    arith = any(op in expr for op in ("+", "*", " - "))
    wide = df.astype({c: ("float64" if df[c].dtype.kind == "f" else "int64") for c in df.columns})
    theirs = (wide if arith else df).eval(pd_expr, engine="python")
    assert ours.dtype == bool
    np.testing.assert_array_equal(ours.to_numpy(), theirs.to_numpy(dtype=bool), err_msg=f"{expr} on {width}")
    out = clean(df, where=expr)
    assert len(out) == int(theirs.sum()) and clean_report(out).counts["rows_out"] == len(out)
    assert out.dtypes.tolist() == df.dtypes.tolist()


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_where_three_valued_logic_with_nulls(width, expr):
    df = narrow_frame(width, nulls=True)
    assert df["x"].isna().sum() > 40 and df["y"].isna().sum() > 40
    want = [_oracle(expr, {"x": _py(a), "y": _py(b)}) is True
            for a, b in zip(df["x"].astype(object), df["y"].astype(object))]
    got = evaluate(expr, df)
    assert got.dtype == bool
    assert got.tolist() == want, f"{expr} on nullable {width}"


def test_out_of_range_literals_compare_exactly():
    x = pd.Series([-128, -1, 0, 5, 127], dtype="int8")
    df = pd.DataFrame({"x": x, "u": pd.Series([0, 1, 255, 7, 3], dtype="uint8"),
                       "big": pd.Series([2**62, -5, 0, 1, 2**63 - 1], dtype="int64")})
    assert evaluate("x < 300", df).all() and not evaluate("x >= 300", df).any()
    assert evaluate("x > -129", df).all() and not evaluate("x == 1000", df).any()
    assert evaluate("u > -1", df).all() and not evaluate("u < -1", df).any()
    assert evaluate("u != 256", df).all()
    assert not evaluate("big >= 18446744073709551616", df).any()  # 2**64: beyond uint64 too
    assert evaluate("big < 18446744073709551616", df).all()
    assert evaluate("big > 9223372036854775806", df).tolist() == [False, False, False, False, True]
    assert evaluate("x > 2.5", df).tolist() == [False, False, False, True, True]
    assert evaluate("x <= -0.5", df).tolist() == [True, True, False, False, False]
    assert not evaluate("x == 2.5", df).any() and evaluate("x != 2.5", df).all()
    assert evaluate("x < inf", df).all() and not evaluate("x == nan", df).any()


def test_float32_literal_is_exact_not_weak():
    df = pd.DataFrame({"f": pd.Series([0.1, 0.5, 2.0], dtype="float32")})
    assert evaluate("f == 0.5", df).tolist() == [False, True, False]  # 0.5 is a float32: cast
    assert evaluate("f == 0.1", df).tolist() == [False, False, False]  # float32(0.1) != 0.1: widened
    assert evaluate("f > 0.1", df).tolist() == [True, True, True]


def test_strings_bools_and_late_filters_on_extracted_columns():
    df = pd.DataFrame({"os": pd.Series(["ios", None, "android"], dtype="str"),
                       "flag": pd.array([True, None, False], dtype="boolean"),
                       "ctx": ['{"a": "x"}', '{"a": "y"}', "{bad"]})
    assert evaluate("os == 'ios' or os == 'android'", df).tolist() == [True, False, True]
    assert evaluate("flag", df).tolist() == [True, False, False]
    assert evaluate("not flag", df).tolist() == [False, False, True]
    out = clean(df, json={"ctx": {"a": "a"}}, where=["a == 'y' or isnull(a)", "isnull(os) or os != 'ios'"])
    assert out["a"].tolist()[:1] == ["y"] and len(out) == 2


@pytest.mark.parametrize("expr, message", [
    ("len(q) > 2", "call to 'len' is not allowed"),
    ("x > 1 & y < 2", "operator '&' is not allowed; write 'and'"),
    ("x.abs() > 1", "call to 'x.abs' is not allowed"),
    ("x.y > 1", "Attribute expressions are not allowed"),
    ("x +", "not a valid expression"),
    ("x + 1", "not a condition"),
    ("x > None", "use isnull()"),
    ("x in y", "'in' needs a list of literals"),
])
def test_unsupported_constructs_are_named(expr, message):
    with pytest.raises(CleanError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_where(expr)


def test_unknown_columns_and_types_are_named():
    df = pd.DataFrame({"x": pd.Series([1, 2], dtype="int8"), "s": ["a", "b"]})
    with pytest.raises(CleanError, match="'nope' not found; available: x, s"):
        clean(df, where="nope > 1")
    with pytest.raises(CleanError, match=r"column 'x' \(int8\) with the str literal 'a'"):
        clean(df, where="x == 'a'")
    with pytest.raises(CleanError, match=r"column 'x' \(int8\) with the str literal 'a'"):
        clean(df, where="x in ['a']")
    with pytest.raises(CleanError, match=r"column 's' \(\w+\) with the int literal 1"):
        clean(df, where="s in [1]")


def test_dask_meta_and_partitions_agree_on_dtypes():
    import dask.dataframe as dd

    df = narrow_frame("int8", nulls=True).assign(z=pd.array([None] * 200 + [1] * 200, dtype="Int32"))
    ddf = dd.from_pandas(df, npartitions=4)
    out = clean(ddf, fill={"z": -1}, where="x >= 0 and not y > 3")
    parts = [p for p in out.to_delayed()]
    computed = [p.compute() for p in parts]
    for part in computed:
        assert part.dtypes.to_dict() == out._meta.dtypes.to_dict()
    assert str(out._meta["z"].dtype) == "int32"
    eager = clean(df, fill={"z": -1}, where="x >= 0 and not y > 3")
    pd.testing.assert_frame_equal(pd.concat(computed), eager, check_dtype=True)
    assert clean_report(out).counts == clean_report(eager).counts


def test_in_lists_are_exact_and_typed_by_the_column():
    """``in`` compares in the column's own type (a categorical of numbers by its values);
    a literal of another kind is refused naming the column."""
    df = pd.DataFrame({"c": pd.Series([1, 2, None, 3], dtype="category"),
                       "u": pd.Series([2**64 - 1, 2**53 + 1, 0, 2], dtype="uint64")})
    assert clean(df, where="c in [1, 3.0, 2.5]").index.tolist() == [0, 3]
    assert clean(df, where="u in [18446744073709551615, 9007199254740992, -1, 2.0]").index.tolist() == [0, 3]
    with pytest.raises(CleanError, match=r"column 'c' \(category\) with the str literal 'a'"):
        clean(df, where="c in ['a']")


@pytest.mark.parametrize("dtype", ["Int64", "UInt64", "Int16", "int64[pyarrow]"])
@pytest.mark.parametrize("op", ["//", "%"])
def test_a_null_divisor_is_unknown_not_one(dtype, op):
    """``clicks // imps`` with ``imps`` null is null (the row is dropped), like a zero divisor;
    the reference is Python arithmetic row by row."""
    clicks = [5, 6, None, 7, 9, 0]
    imps = [1, None, 2, 0, None, 3]
    df = pd.DataFrame({"clicks": pd.array(clicks, dtype=dtype), "imps": pd.array(imps, dtype=dtype)})
    for expr, keep in ((f"(clicks {op} imps) >= 0", lambda r: r >= 0), (f"not ((clicks {op} imps) < 0)", lambda r: r >= 0),
                       (f"isnull(clicks {op} imps)", None)):
        results = [None if a is None or b is None or b == 0 else (a // b if op == "//" else a % b)
                   for a, b in zip(clicks, imps)]
        want = [r is None for r in results] if keep is None else [r is not None and keep(r) for r in results]
        assert evaluate(expr, df).tolist() == want, (expr, dtype)


@pytest.mark.parametrize("expr", ["x != nan", "not (x > nan)", "nan == x", "not (x <= nan)", "i != nan",
                                  "not (i < nan)", "x in [1.0, nan]", "x not in [nan]", "not (i in [3, nan])"])
def test_a_nan_literal_is_unknown_on_every_row(expr):
    """A NaN operand makes a comparison unknown (the module doc's rule), so ``x != nan`` keeps
    no row; ``x in [1, nan]`` is ``x == 1 or x == nan``: True where 1 matches, else unknown."""
    df = pd.DataFrame({"x": [1.0, np.nan, 3.0, -2.5], "i": pd.array([1, None, 3, 4], dtype="Int32")})
    col = "i" if "i " in expr or "(i" in expr else "x"
    values = [None if pd.isna(v) else v for v in df[col].astype(object)]
    if " in " in expr:
        listed = [1.0] if "1.0" in expr else [3] if "3" in expr else []
        hit = [v is not None and v in listed for v in values]
        want = [h and "not" not in expr for h in hit]  # the rest are unknown: dropped, negated or not
    else:
        want = [False] * len(values)
    assert evaluate(expr, df).tolist() == want, expr
    assert len(clean(df, where=expr)) == sum(want)


@pytest.mark.parametrize("expr", ["x > 7 // 2", "x > 7 % 4", "x >= -7 // 2 + 6"])
def test_integer_arithmetic_of_two_literals(expr):
    """``7 // 2`` between two literals is a literal (it used to reach a series-only step);
    the reference is Python's own arithmetic on each row."""
    xs = [1, 3, 4, 5]
    df = pd.DataFrame({"x": xs})
    want = [bool(eval(expr, {}, {"x": x})) for x in xs]
    assert evaluate(expr, df).tolist() == want


def test_a_literal_division_by_zero_is_named():
    with pytest.raises(CleanError, match="integer division by zero"):
        evaluate("x > 7 // 0", pd.DataFrame({"x": [1, 2]}))


def test_a_chained_in_is_refused_when_parsed():
    with pytest.raises(CleanError, match="'in' cannot be chained"):
        parse_where("x in [1] in [2]")
