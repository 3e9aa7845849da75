"""read_view against independent references (diffref_readers), on generated files.

The rows of each generated case are written as 1, 3 and 7 files (the partitions of a
dask view; a file may be empty) and read eager and as dask; every read must give the
reference's columns, dtypes and values, or, where the reference refuses, a ViewError
naming the file and column.  Dask ``_meta`` dtypes are checked against the computed ones.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, strategies as st

from fbrapids import read_view
from fbrapids.errors import ViewError

import diffref_readers as ref
from diff_harness import DIFF, FAMILIES, assert_error_names, assert_values, materialize
from diff_strategies import (
    BIG_IDS,
    INT_DTYPES,
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
    uint64_ids,
)

FILE_COUNTS = (1, 3, 7)
_counter = iter(range(10**9))


def _backend(family: str) -> str:
    return "gpu" if family == "gpu" else "cpu"


def _split(rows: list[Any], k: int) -> list[list[Any]]:
    step = -(-len(rows) // k) if rows else 0
    return [rows[i * step:(i + 1) * step] if step else [] for i in range(k)]


def _dtype_name(dtype: Any) -> str:
    return "str" if isinstance(dtype, pd.StringDtype) else str(dtype)


def _reads(paths: list[str], family: str, **kw: Any):
    """(mode, pandas frame) of the eager read and the dask read of ``paths``."""
    eager = "cudf" if family == "gpu" else "eager"  # (a cudf frame is compared as pandas)
    yield eager, materialize(read_view(paths, eager=True, backend=_backend(family), **kw), eager)
    mode = f"{'dask_cudf' if family == 'gpu' else 'dask'}{len(paths)}"
    yield mode, materialize(read_view(paths, backend=_backend(family), **kw), mode)


def check_against(paths: list[str], family: str, reference, kw: dict[str, Any], check_dtypes: bool = True) -> None:
    """Every read of ``paths`` equals ``reference()``, or both refuse (naming file and column)."""
    try:
        columns, dtypes, values = reference()
    except ref.Refused as refused:
        for mode in ("eager", "dask"):
            with pytest.raises(ViewError) as err:
                if mode == "eager":
                    read_view(paths, eager=True, backend=_backend(family), **kw)
                else:
                    read_view(paths, backend=_backend(family), **kw).compute()
            text = str(err.value)
            assert_error_names(err.value, *(o[-1] for o in refused.options))
            assert any(all(part in text for part in o) for o in refused.options), \
                f"{mode}: error names none of the reference's culprits {refused.options}: {text}"
        return
    for mode, out in _reads(paths, family, **kw):
        assert [str(c) for c in out.columns] == columns, f"{mode}: columns {list(out.columns)} != {columns}"
        assert len(out) == len(next(iter(values.values()), [])) or not columns, f"{mode}: {len(out)} rows"
        for c in columns:
            if check_dtypes:
                assert _dtype_name(out[c].dtype) == dtypes[c], f"{mode}: column {c!r} is {out[c].dtype}, want {dtypes[c]}"
            assert_values(out[c].reset_index(drop=True), values[c], what=f"{mode}: column {c!r}")


# -- CSV ----------------------------------------------------------------------------------
CSV_COLUMNS = ("i", "id", "f", "b", "s", "dt")


@st.composite
def csv_cases(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(sizes(24))
    width = draw(st.sampled_from(INT_DTYPES))
    null_text = st.sampled_from(["", "NaN", "nan"])

    def maybe(value: st.SearchStrategy[str], null: st.SearchStrategy[str]) -> list[str]:
        return draw(st.lists(st.one_of(value, value, null), min_size=n, max_size=n))

    cols = {
        "i": maybe(ints_of(width).map(str), null_text),
        "id": maybe(uint64_ids().map(str), st.just("")),
        "f": maybe(st.floats(allow_nan=False, width=64).map(repr), null_text),
        "b": maybe(st.sampled_from(["true", "false", "True", "FALSE"]), st.just("")),
        "s": maybe(texts(max_size=8, long=draw(st.booleans())).filter(lambda t: "\x00" not in t and "\r" not in t),
                   st.just("")),
        "dt": maybe(st.integers(0, 4_102_444_800).map(lambda s: str(pd.Timestamp(s, unit="s"))), st.just("")),
    }
    opts = dict(sep=draw(st.sampled_from([",", "\t", ";"])), header=draw(st.booleans()),
                bom=draw(st.booleans()), crlf=draw(st.booleans()), gzip=draw(st.booleans()),
                give_sep=draw(st.booleans()), empty_as_zero_bytes=draw(st.booleans()))
    opts["dtype"] = draw(st.sampled_from([None, {"i": draw(st.sampled_from(INT_DTYPES + ("Int64", "Int8")))},
                                          {"f": "float32"}, {"b": "bool"}, {"dt": "datetime64[ns]"},
                                          {"i": "float32"}, {"id": "float64"}, {"f": "Int64"}, {"i": "boolean"}]))
    return {"rows": [[cols[c][r] for c in CSV_COLUMNS] for r in range(n)], "opts": opts}


def write_csv(d: Path, rows: list[list[str]], k: int, o: dict[str, Any]) -> list[str]:
    suffix = ".tsv" if o["sep"] == "\t" and not o["give_sep"] else ".csv"
    paths = []
    for j, chunk in enumerate(_split(rows, k)):
        buf = io.StringIO()
        w = csv.writer(buf, delimiter=o["sep"], lineterminator="\r\n" if o["crlf"] else "\n")
        if o["header"]:
            w.writerow(CSV_COLUMNS)
        w.writerows(chunk)
        data = (("\ufeff" if o["bom"] else "") + buf.getvalue()).encode()
        if not chunk and o["empty_as_zero_bytes"] and j:
            data = b""
        path = d / f"part{j:02d}{suffix}{'.gz' if o['gzip'] else ''}"
        path.write_bytes(gzip.compress(data) if o["gzip"] else data)
        paths.append(str(path))
    return paths


@pytest.mark.parametrize("family", FAMILIES)
@DIFF
@given(case=csv_cases())
def test_csv_matches_reference(family, case, tmp_path_factory):
    o = case["opts"]
    for k in FILE_COUNTS:
        d = tmp_path_factory.mktemp(f"csv{next(_counter)}")
        paths = write_csv(d, case["rows"], k, o)
        kw: dict[str, Any] = {"header": o["header"]}
        if o["give_sep"] or not o["header"]:
            kw["sep"] = o["sep"]
        if not o["header"]:
            kw["names"] = list(CSV_COLUMNS)
        if o["dtype"]:
            kw["dtype"] = o["dtype"]
        check_against(paths, family, lambda: ref.read_csv_ref(
            paths, sep=o["sep"], header=o["header"], names=kw.get("names"), dtype=o["dtype"],
            compression="gzip" if o["gzip"] else None), kw)


@pytest.mark.parametrize("family", FAMILIES)
def test_csv_ragged_rows_and_differing_headers_are_named(family, tmp_path):
    (tmp_path / "long.csv").write_text("a,b\n1,x\n2,y,extra\n")
    (tmp_path / "short.csv").write_text("a,b\n1,x\n2\n")
    (tmp_path / "h.csv").write_text("1,x,extra\n2,y\n")
    for kw, path, culprit in (({}, "long.csv", "line 3"), ({"header": False, "names": ["a", "b"]}, "h.csv", "row 0")):
        with pytest.raises(ViewError) as err:
            read_view(tmp_path / path, eager=True, backend=_backend(family), **kw)
        assert_error_names(err.value, path)
        assert_error_names(err.value, culprit)
    short = read_view(tmp_path / "short.csv", eager=True, backend=_backend(family))
    assert_values(short["b"], ["x", None], what="short row: its missing field is null")
    (tmp_path / "other.csv").write_text("a,c\n3,z\n")
    with pytest.raises(ViewError) as err:
        read_view([tmp_path / "short.csv", tmp_path / "other.csv"], backend=_backend(family))
    for culprit in ("short.csv", "other.csv", "'c'", "'b'"):
        assert_error_names(err.value, culprit)
    both = read_view([tmp_path / "short.csv", tmp_path / "other.csv"], columns=["a"], eager=True)
    assert_values(both["a"], [1, 2, 3], what="the common column of two headers")


# -- JSON lines ---------------------------------------------------------------------------
def _json_values() -> dict[str, st.SearchStrategy[Any]]:
    return {
        "i": st.one_of(*(ints_of(t) for t in INT_DTYPES)),
        "id": uint64_ids(),
        "f": st.floats(allow_nan=False, allow_infinity=False),
        "b": st.booleans(),
        "s": texts(max_size=8, long=False),
        "n": st.recursive(st.one_of(st.integers(-5, 5), texts(max_size=4, long=False), st.booleans(), st.none()),
                          lambda kids: st.one_of(st.lists(kids, max_size=3),
                                                 st.dictionaries(texts(max_size=3, long=False), kids, max_size=3)),
                          max_leaves=6).filter(lambda v: isinstance(v, (list, dict))),
        "late": st.integers(-(2**63), 2**64 - 1),
        "m": st.one_of(st.integers(0, 9), texts(max_size=3, long=False)),
    }


@st.composite
def json_cases(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(sizes(20))
    values = _json_values()
    keys = draw(st.lists(st.sampled_from([k for k in values if k != "m"]), min_size=1, max_size=6, unique=True))
    if draw(st.integers(0, 3)) == 0:
        keys.append("m")  # mixed kinds: refused unless dtype= says str
    records = []
    for r in range(n):
        rec = {}
        for k in keys:
            if k == "late" and r < n // 2:
                continue
            choice = draw(st.integers(0, 5))
            if choice == 0:
                continue  # absent
            rec[k] = None if choice == 1 else draw(values[k])
        records.append(rec)
    opts = dict(bom=draw(st.booleans()), crlf=draw(st.booleans()), gzip=draw(st.booleans()),
                dtype=draw(st.sampled_from([None, {"i": "int64"}, {"m": "str"}, {"id": "Int64"}, {"f": "float32"},
                                            {"id": "float64"}, {"i": "boolean"}, {"b": "Int8"}])))
    if opts["dtype"] and not set(opts["dtype"]) & {k for r in records for k in r}:
        opts["dtype"] = None
    return {"records": records, "opts": opts}


def write_jsonl(d: Path, records: list[dict[str, Any]], k: int, o: dict[str, Any]) -> list[str]:
    paths = []
    for j, chunk in enumerate(_split(records, k)):
        end = "\r\n" if o["crlf"] else "\n"
        text = ("\ufeff" if o["bom"] else "") + "".join(json.dumps(r, ensure_ascii=False) + end for r in chunk)
        path = d / f"part{j:02d}.jsonl{'.gz' if o['gzip'] else ''}"
        path.write_bytes(gzip.compress(text.encode()) if o["gzip"] else text.encode())
        paths.append(str(path))
    return paths


@pytest.mark.parametrize("family", FAMILIES)
@DIFF
@given(case=json_cases())
def test_json_lines_matches_reference(family, case, tmp_path_factory):
    o = case["opts"]
    for k in FILE_COUNTS:
        d = tmp_path_factory.mktemp(f"json{next(_counter)}")
        paths = write_jsonl(d, case["records"], k, o)
        kw = {"dtype": o["dtype"]} if o["dtype"] else {}
        check_against(paths, family, lambda: ref.read_json_ref(paths, dtype=o["dtype"]), kw)


# -- parquet ------------------------------------------------------------------------------
@st.composite
def parquet_frames(draw: st.DrawFn) -> pd.DataFrame:
    n = draw(sizes(24))
    ints, int_dtype = draw(int_columns(n, dtypes=INT_DTYPES))
    ids = draw(st.lists(st.one_of(st.sampled_from(BIG_IDS), uint64_ids(), st.none()), min_size=n, max_size=n))
    strs, storage = draw(string_columns(n, storages=("object", "str", "string[pyarrow]", "arrow_string",
                                                     "arrow_large_string", "category")))
    ns = draw(epoch_ns_values(n))
    ts, _ = time_series(ns, draw(st.sampled_from(TIME_UNITS)), draw(st.sampled_from(ZONES)))
    bools = draw(st.lists(st.one_of(st.booleans(), st.none()), min_size=n, max_size=n))
    index = draw(indexes(n))
    if draw(st.booleans()) and not isinstance(index, pd.RangeIndex):
        index = index.rename("key")
    frame = pd.DataFrame({
        "i": int_series(ints, int_dtype).to_numpy() if int_dtype[0].islower() and "[" not in int_dtype
        else int_series(ints, int_dtype).array,
        "id": pd.array(ids, dtype="UInt64"),
        "s": string_series(strs, storage).array,
        "ts": ts.array,
        "b": pd.array(bools, dtype="boolean"),
    }, index=index)
    return frame


@pytest.mark.parametrize("family", FAMILIES)
@DIFF
@given(frame=parquet_frames(), project=st.booleans())
def test_parquet_matches_reference(family, frame, project, tmp_path_factory):
    for k in FILE_COUNTS:
        d = tmp_path_factory.mktemp(f"pq{next(_counter)}")
        paths = []
        step = -(-len(frame) // k) if len(frame) else 0
        for j in range(k):
            part = frame.iloc[j * step:(j + 1) * step] if step else frame.iloc[:0]
            path = d / f"part{j:02d}.parquet"
            part.to_parquet(path)
            paths.append(str(path))
        columns = ["id", "ts"] if project else None
        kw = {"columns": columns} if columns else {}
        check_against(paths, family, lambda: ref.read_parquet_ref(paths, columns), kw, check_dtypes=False)
        for mode, out in _reads(paths, family, **kw):
            assert out["id"].dtype == "UInt64", f"{mode}: ids read as {out['id'].dtype}"
    one = tmp_path_factory.mktemp("pq_rows") / "one.parquet"
    frame.to_parquet(one, row_group_size=4)
    view = read_view(one, partition_rows=3)  # row groups split into row ranges
    _, _, want = ref.read_parquet_ref([str(one)])
    out = materialize(view, "dask_rows")
    for c, values in want.items():
        assert_values(out[c].reset_index(drop=True), values, what=f"partition_rows=3: column {c!r}")


@pytest.mark.parametrize("family", FAMILIES)
def test_parquet_differing_schemas_name_files_and_columns(family, tmp_path):
    pd.DataFrame({"a": [1], "b": ["x"]}).to_parquet(tmp_path / "p1.parquet")
    pd.DataFrame({"b": ["y"], "a": [2.5]}).to_parquet(tmp_path / "p2.parquet")
    pd.DataFrame({"a": [3]}).to_parquet(tmp_path / "p3.parquet")
    for other, culprit in (("p2.parquet", "a: int64 vs double"), ("p3.parquet", "b: ")):
        with pytest.raises(ViewError) as err:
            read_view([tmp_path / "p1.parquet", tmp_path / other], backend=_backend(family))
        for c in ("p1.parquet", other, culprit):
            assert_error_names(err.value, c)
    got = read_view([tmp_path / "p1.parquet", tmp_path / "p2.parquet"], columns=["b"], eager=True)
    assert_values(got["b"], ["x", "y"], what="columns= of the shared column, any order")


def test_dtype_narrower_than_values_names_file_column_row_value(tmp_path):
    (tmp_path / "n.csv").write_text("a\n1\n300\n")
    (tmp_path / "n.jsonl").write_text('{"a": 1}\n{"a": 300}\n')
    pd.DataFrame({"a": np.array([1, 300], dtype=np.int64)}).to_parquet(tmp_path / "n.parquet")
    for name in ("n.csv", "n.jsonl", "n.parquet"):
        for lazy in (False, True):
            with pytest.raises(ViewError) as err:
                v = read_view(tmp_path / name, dtype={"a": "int8"}, eager=not lazy)
                v.compute() if lazy else v
            for culprit in (name, "'a'", "300", "int8"):
                assert_error_names(err.value, culprit)


# -- dtype= on stored columns -------------------------------------------------------------
_TEXTS = ["+7", " 12 ", "1e3", "1.5", "0x10", "", "true", "FALSE", "0", "1", "-3", "NaN", "9007199254740993",
          "18446744073709551615", "-129", "\uff12", "1_0", "16777217", "1e400", "inf"]
_TARGETS = {
    "int": INT_DTYPES + ("Int64", "UInt8", "float32", "float64", "bool", "boolean", "str", "datetime64[s]",
                         "datetime64[ns]"),
    "float": ("int8", "int64", "uint64", "Int64", "float32", "bool", "boolean", "datetime64[s]", "datetime64[ns]"),
    "text": ("int8", "int64", "uint64", "UInt64", "float32", "float64", "bool", "boolean", "str"),
    "time": ("datetime64[s]", "datetime64[ms]", "datetime64[ns]", "int64", "float64"),
}


@st.composite
def stored_casts(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(sizes(12))
    kind = draw(st.sampled_from(sorted(_TARGETS)))
    null = st.none() if draw(st.booleans()) else st.nothing()
    if kind == "int":
        width = draw(st.sampled_from(INT_DTYPES))
        value = st.one_of(ints_of(width), st.sampled_from([0, 1]))
    elif kind == "float":
        value = st.one_of(st.sampled_from([0.0, 1.0, -1.0, 0.5, 2.0**53, 2.0**53 + 2, 2.0**63, -(2.0**63), 2.0**64,
                                           127.0, 128.0, -129.0, 1e300, 3.4e38]),
                          st.integers(-(2**31), 2**31).map(float), st.floats(allow_nan=False, allow_infinity=False))
    elif kind == "text":
        value = st.one_of(st.sampled_from(_TEXTS), st.integers(-(2**64), 2**64).map(str))
    else:
        value = st.one_of(st.just(0), st.integers(0, 4_102_444_800).map(lambda s: s * 10**9),
                          st.integers(0, 4_102_444_800 * 10**9))
    values = draw(st.lists(st.one_of(value, null), min_size=n, max_size=n))
    target = draw(st.sampled_from(_TARGETS[kind]))
    stored = {"int": f"{width[0].upper()}{width[1:]}".replace("Uint", "UInt") if kind == "int" else None,
              "float": "float64", "text": "str", "time": "datetime64[ns]"}[kind]
    return {"values": values, "kind": kind, "stored": stored, "target": target}


def _stored_series(values: list[Any], kind: str, stored: str) -> pd.Series:
    if kind == "time":
        return pd.Series(pd.array([None if v is None else pd.Timestamp(v, unit="ns") for v in values],
                                  dtype="datetime64[ns]"))
    if kind == "float":
        return pd.Series(np.array([np.nan if v is None else v for v in values], dtype="float64"))
    if kind == "int" and None not in values:
        return pd.Series(np.array(values, dtype=stored.lower()))
    return pd.Series(pd.array(values, dtype=stored) if kind == "text" else
                     pd.arrays.IntegerArray(np.array([0 if v is None else v for v in values], dtype=stored.lower()),
                                            np.array([v is None for v in values], dtype=bool)))


@pytest.mark.parametrize("family", FAMILIES)
@DIFF
@given(case=stored_casts())
def test_dtype_on_stored_columns_matches_reference(family, case, tmp_path_factory):
    """dtype= on parquet columns: int / float / text / datetime sources into every target."""
    for k in (1, 3):
        d = tmp_path_factory.mktemp(f"cast{next(_counter)}")
        files = []
        for j, chunk in enumerate(_split(case["values"], k)):
            path = str(d / f"part{j:02d}.parquet")
            pd.DataFrame({"a": _stored_series(chunk, case["kind"], case["stored"])}).to_parquet(path)
            files.append((path, chunk))
        paths = [p for p, _ in files]
        check_against(paths, family, lambda: ref.read_cast_ref(files, case["kind"], "a", case["target"]),
                      {"dtype": {"a": case["target"]}}, check_dtypes=False)
        if case["target"] != "str" and family == "cpu":  # (cudf: nullable ints / bools are plain dtypes)
            try:
                ref.read_cast_ref(files, case["kind"], "a", case["target"])
            except ref.Refused:
                continue
            for mode, out in _reads(paths, family, dtype={"a": case["target"]}):
                assert str(out["a"].dtype) == case["target"], f"{mode}: read as {out['a'].dtype}"


@pytest.mark.parametrize("family", FAMILIES)
def test_numbers_read_as_datetimes_count_the_dtypes_units(family, tmp_path):
    """A number read as datetime64[unit] counts that unit since the epoch; a fraction, or
    int64's lowest value (NaT's bits), is an error naming the file, column, row / line and
    value, never truncated nor turned into null."""
    (tmp_path / "ok.jsonl").write_text('{"t": 5}\n{"t": null}\n{"t": "1970-01-01 00:00:07"}\n')
    (tmp_path / "ok.csv").write_text("t\n5\n\n")
    pd.DataFrame({"t": pd.array([5, None], dtype="Int64")}).to_parquet(tmp_path / "ok.parquet")
    for name in ("ok.jsonl", "ok.csv", "ok.parquet"):
        for mode, out in _reads([str(tmp_path / name)], family, dtype={"t": "datetime64[s]"}):
            want = [pd.Timestamp(5, unit="s"), None, pd.Timestamp(7, unit="s")][:len(out)]
            assert str(out["t"].dtype) == "datetime64[s]", f"{name} {mode}: {out['t'].dtype}"
            assert_values(out["t"], want, what=f"{name} {mode}")
    (tmp_path / "frac.jsonl").write_text('{"t": 1.5}\n')
    (tmp_path / "nat.jsonl").write_text('{"t": -9223372036854775808}\n')
    pd.DataFrame({"t": [1.5]}).to_parquet(tmp_path / "frac.parquet")
    pd.DataFrame({"t": np.array([-(2**63)])}).to_parquet(tmp_path / "nat.parquet")
    pd.DataFrame({"t": pd.to_datetime(["2020-01-01 00:00:00.5"]).as_unit("ns")}).to_parquet(tmp_path / "fine.parquet")
    for name, value in (("frac.jsonl", "1.5"), ("nat.jsonl", "-9223372036854775808"), ("frac.parquet", "1.5"),
                        ("nat.parquet", "-9223372036854775808"), ("fine.parquet", "00:00:00.5")):
        for lazy in (False, True):
            with pytest.raises(ViewError) as err:
                v = read_view(tmp_path / name, dtype={"t": "datetime64[s]"}, eager=not lazy, backend=_backend(family))
                v.compute() if lazy else v
            for culprit in (name, "'t'", value):
                assert_error_names(err.value, culprit)


@pytest.mark.parametrize("family", FAMILIES)
def test_csv_rules_hold_on_every_backend(family, tmp_path):
    """The rules the GPU's CSV conversion checks before converting on the device (else the
    host reader answers): NaN texts are null in a float column, CR of CRLF files is no
    part of a value, a null for a non-nullable int / an integer a float cannot hold
    exactly / a finite value overflowing float32 are errors naming the row and value."""
    (tmp_path / "ok.csv").write_bytes(b"f,s,n\r\n1.5,x,1\r\nNaN,y,\r\n")
    for mode, out in _reads([str(tmp_path / "ok.csv")], family, dtype={"f": "float64", "s": "str", "n": "Int64"}):
        assert_values(out["f"], [1.5, None], what=f"{mode}: NaN text")
        assert_values(out["s"], ["x", "y"], what=f"{mode}: CRLF")
        assert_values(out["n"], [1, None], what=f"{mode}: Int64 with an empty field")
    for text, dtype, value in (("", "int64", "empty field"), ("9007199254740993", "float64", "9007199254740993"),
                               ("16777217", "float32", "16777217"), ("1e39", "float32", "1e39")):
        (tmp_path / "bad.csv").write_text(f"a,b\n1,x\n{text},y\n")
        for lazy in (False, True):
            with pytest.raises(ViewError) as err:
                v = read_view(tmp_path / "bad.csv", dtype={"a": dtype}, eager=not lazy, backend=_backend(family))
                v.compute() if lazy else v
            for culprit in ("bad.csv", "'a'", value):
                assert_error_names(err.value, culprit)


@pytest.mark.parametrize("family", FAMILIES)
def test_json_ids_beside_nulls_and_keyless_records_stay_exact(family, tmp_path):
    """Fixed edges the generated cases found: ids above 2^53 in a file without nulls of a
    column nullable elsewhere (pandas built that UInt64 through float64: 2^53 + 1 rounded), and a file of records with no keys before the
    file where a key first appears (it counted as no records: the key's null was refused)."""
    (tmp_path / "a.jsonl").write_text("{}\n{}\n")
    (tmp_path / "b.jsonl").write_text('{"id": 9007199254740993}\n{"id": 9223372036854775808}\n')
    (tmp_path / "c.jsonl").write_text('{"i": -9007199254740993}\n')
    for mode, out in _reads([str(tmp_path / f"{n}.jsonl") for n in "abc"], family):
        assert [_dtype_name(out[c].dtype) for c in ("id", "i")] == ["UInt64", "Int64"], f"{mode}: {out.dtypes}"
        assert_values(out["id"], [None, None, 2**53 + 1, 2**63, None], what=f"{mode}: ids")
        assert_values(out["i"], [None, None, None, None, -(2**53) - 1], what=f"{mode}: ints")
