import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fbrapids.views.read import ViewError, read_view

pytestmark = pytest.mark.cpu_only(reason="asserts the host reader's pandas dtypes and messages; cudf's reader is checked by test_read_view_meta.py::test_gpu_views_read_by_cudf_match_the_cpu")


def _is_dask(obj):
    return hasattr(obj, "npartitions")


@pytest.fixture
def parquet_dir(tmp_path):
    for i in range(3):
        pd.DataFrame({"id": np.arange(i * 10, i * 10 + 10, dtype=np.int64), "q": [f"w{j}" for j in range(10)],
                      "x": np.linspace(0, 1, 10)}).to_parquet(tmp_path / f"part{i}.parquet", index=False)
    return tmp_path


def test_parquet_glob_returns_dask_frame_with_a_partition_per_file(parquet_dir):
    view = read_view(parquet_dir / "*.parquet")
    assert _is_dask(view) and view.npartitions == 3
    frame = view.compute()
    assert frame["id"].tolist() == list(range(30))
    eager = read_view(parquet_dir, eager=True)
    # dask may present Arrow strings as string[pyarrow] where pandas says str: same layout
    pd.testing.assert_frame_equal(eager, frame.reset_index(drop=True), check_dtype=False)
    assert isinstance(eager["q"].dtype, pd.StringDtype) and isinstance(frame["q"].dtype, pd.StringDtype)


def test_eager_switch_returns_one_pandas_frame(parquet_dir):
    frame = read_view(str(parquet_dir / "part1.parquet"), eager=True)
    assert isinstance(frame, pd.DataFrame) and frame["id"].min() == 10


def _bytes_read_by_this_process() -> int:
    with open("/proc/self/io") as fh:
        return int(next(line for line in fh if line.startswith("rchar")).split()[1])


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="needs /proc/self/io to count bytes read")
def test_parquet_column_projection_reads_only_the_requested_columns(tmp_path):
    rng = np.random.default_rng(0)
    n = 20_000
    table = pa.table({
        "id": np.arange(n, dtype=np.int64),
        "blob": pa.array([rng.bytes(1000).hex() for _ in range(n)]),  # ~40 MB of incompressible text
    })
    path = tmp_path / "wide.parquet"
    pq.write_table(table, path, compression="none")
    size = path.stat().st_size
    before = _bytes_read_by_this_process()
    got = read_view(path, columns=["id"], eager=True)
    projected = _bytes_read_by_this_process() - before
    assert list(got.columns) == ["id"] and got["id"].tolist() == list(range(n))
    before = _bytes_read_by_this_process()
    read_view(path, eager=True)
    full = _bytes_read_by_this_process() - before
    assert projected < size / 20, (projected, size)
    assert full > size / 2, (full, size)
    lazy = read_view(path, columns=["id"])
    assert list(lazy.columns) == ["id"]


def test_csv_with_header_without_header_and_tab(tmp_path):
    (tmp_path / "a.csv").write_text("id,name\n1,x\n2,y\n")
    (tmp_path / "b.tsv").write_text("3\tz\n4\tw\n")
    assert read_view(tmp_path / "a.csv", eager=True).to_dict("list") == {"id": [1, 2], "name": ["x", "y"]}
    headerless = read_view(tmp_path / "b.tsv", header=False, names=["id", "name"], eager=True)
    assert headerless.to_dict("list") == {"id": [3, 4], "name": ["z", "w"]}
    with pytest.raises(ViewError, match="headerless CSV needs names"):
        read_view(tmp_path / "b.tsv", header=False)


def test_json_lines(tmp_path):
    (tmp_path / "v.jsonl").write_text('{"id": 1, "ctx": "{\\"a\\": 1}"}\n{"id": 2, "ctx": null}\n')
    frame = read_view(tmp_path / "v.jsonl", columns=["ctx", "id"]).compute()
    assert list(frame.columns) == ["ctx", "id"] and frame["id"].tolist() == [1, 2]
    assert frame["ctx"].iloc[0] == '{"a": 1}' and pd.isna(frame["ctx"].iloc[1])


def test_missing_file_and_empty_glob_name_the_pattern(tmp_path):
    with pytest.raises(ViewError, match=f"no files match '{tmp_path}/nothing-\\*.parquet'"):
        read_view(tmp_path / "nothing-*.parquet")
    with pytest.raises(ViewError, match="absent.parquet"):
        read_view(tmp_path / "absent.parquet")


def test_absent_column_is_named_with_the_available_ones(parquet_dir):
    with pytest.raises(ViewError) as err:
        read_view(parquet_dir / "*.parquet", columns=["id", "clicks"])
    assert "'clicks'" in str(err.value) and "available: id, q, x" in str(err.value)


def test_mismatched_partition_schemas_name_the_file(parquet_dir):
    pd.DataFrame({"id": ["a"], "q": ["b"], "x": [1.0]}).to_parquet(parquet_dir / "part9.parquet", index=False)
    with pytest.raises(ViewError) as err:
        read_view(parquet_dir / "*.parquet")
    assert "part9.parquet" in str(err.value) and "id: int64 vs large_string" in str(err.value).replace("string", "large_string").replace("large_large", "large")


def test_mismatched_csv_headers_name_the_file(tmp_path):
    (tmp_path / "a.csv").write_text("id,q\n1,x\n")
    (tmp_path / "b.csv").write_text("id,query\n2,y\n")
    with pytest.raises(ViewError, match="b.csv"):
        read_view(tmp_path / "*.csv")


def test_csv_partitions_whose_values_do_not_convert_name_the_file(tmp_path):
    (tmp_path / "a.csv").write_text("id,q\n1,x\n")
    (tmp_path / "b.csv").write_text("id,q\nnot-a-number,y\n")
    view = read_view(tmp_path / "*.csv")
    with pytest.raises(ViewError, match="b.csv.*'id'.*not-a-number"):
        view.compute()


def test_file_vanishing_between_planning_and_reading_is_named(parquet_dir):
    view = read_view(parquet_dir / "*.parquet")
    (parquet_dir / "part2.parquet").unlink()
    with pytest.raises(FileNotFoundError, match="part2.parquet"):
        view.compute()


def test_empty_partition_files_are_fine(tmp_path):
    pd.DataFrame({"id": np.array([], dtype=np.int64)}).to_parquet(tmp_path / "a.parquet", index=False)
    pd.DataFrame({"id": np.array([5], dtype=np.int64)}).to_parquet(tmp_path / "b.parquet", index=False)
    assert read_view(tmp_path / "*.parquet").compute()["id"].tolist() == [5]
    assert read_view(tmp_path / "*.parquet", eager=True)["id"].tolist() == [5]


# ---- the real samples -------------------------------------------------------------------

def test_criteo_sample_header_empty_cells_and_integral_floats(shared_data):
    path = shared_data / "criteo_sample.txt"
    frame = read_view(path, eager=True)
    raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    assert frame.shape == (200, 40) and list(frame.columns) == list(raw.columns)
    assert frame["label"].dtype == np.int64
    empty = int((raw == "").to_numpy().sum())
    assert int(frame.isna().to_numpy().sum()) == empty == 1101
    dense = [f"I{i}" for i in range(1, 14)]
    assert all(frame[c].dtype.kind in "if" for c in dense)
    assert (raw[dense].apply(lambda c: c.str.contains(r"\.0$")).to_numpy().any())  # the sample has "260.0"
    as_int = read_view(path, dtype={c: "Int64" for c in dense}, eager=True)
    for c in dense:
        expect = [None if v == "" else int(float(v)) for v in raw[c]]
        got = [None if pd.isna(v) else int(v) for v in as_int[c]]
        assert got == expect, c
    assert (as_int[dense] < 0).sum().sum() == 15
    assert frame["C1"].dtype.kind not in "if" and frame["C1"].str.fullmatch("[0-9a-f]{8}").all()


def test_avazu_20_digit_ids_survive_exactly_as_uint64(shared_data):
    path = shared_data / "avazu_sample.txt"
    raw = pd.read_csv(path, dtype=str)
    for frame in (read_view(path, eager=True), read_view(path).compute()):
        assert frame["id"].dtype == np.uint64
        assert [str(v) for v in frame["id"]] == raw["id"].tolist()
    big = [int(v) for v in raw["id"] if int(v) > 2**63 - 1]
    assert big, "the sample has ids above 2^63"


def test_dask_partitions_split_one_large_row_group_for_parallel_cores(tmp_path):
    """A file written with one row group (pandas' default) still gives several partitions
    (about two per core), read as row ranges; the content is the file's, in order."""
    import numpy as np
    import pandas as pd

    from fbrapids.views.partitions import auto_partition_rows

    n = 100_000
    df = pd.DataFrame({"id": np.arange(n, dtype=np.int64), "s": [f"v{i % 7}" for i in range(n)]})
    path = tmp_path / "one.parquet"
    df.to_parquet(path, row_group_size=n)
    view = read_view(path)
    target = auto_partition_rows(n)
    assert view.npartitions == -(-n // target) >= 2
    assert view.compute()["id"].tolist() == df["id"].tolist()
    grouped = read_view(path, partition_rows=30_000)
    assert grouped.npartitions == 4
    assert grouped.map_partitions(len).compute().tolist() == [25_000] * 4


def test_dask_partitions_group_row_groups_up_to_the_target(tmp_path):
    import numpy as np
    import pandas as pd

    n = 40_000
    df = pd.DataFrame({"id": np.arange(n, dtype=np.int64)})
    path = tmp_path / "groups.parquet"
    df.to_parquet(path, row_group_size=5_000)  # 8 row groups
    view = read_view(path, partition_rows=10_000)
    assert view.map_partitions(len).compute().tolist() == [10_000] * 4
    assert view.compute()["id"].tolist() == df["id"].tolist()
    assert read_view(path, row_groups_per_partition=1).npartitions == 8
    # the meta comes from the schema and matches what the partitions hold
    assert dict(view._meta.dtypes) == dict(view.compute().dtypes)


@pytest.mark.parametrize("fmt", ["parquet", "csv", "json"])
def test_text_columns_have_the_same_dtype_eager_and_on_dask(tmp_path, fmt):
    """The docstring's promise, the same frame both ways: dask's "convert-string" must not turn
    the text columns into "string" (where ``s == "a"`` is <NA> at a null) while the eager
    frame has pandas' own "str".  Reference: plain pandas reading the same file."""
    import json

    rows = [{"s": "a", "x": 1}, {"s": None, "x": 2}, {"s": "b", "x": 3}]
    path = tmp_path / f"v.{'jsonl' if fmt == 'json' else fmt}"
    if fmt == "parquet":
        pd.DataFrame(rows).to_parquet(path)
    elif fmt == "csv":
        pd.DataFrame(rows).to_csv(path, index=False)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    reference = {"parquet": pd.read_parquet, "csv": pd.read_csv,
                 "json": lambda p: pd.read_json(p, lines=True, dtype={"s": "str"})}[fmt](path)
    eager = read_view(str(path), eager=True)
    lazy = read_view(str(path))
    computed = lazy.compute()
    assert eager["s"].dtype == reference["s"].dtype
    assert lazy["s"].dtype == reference["s"].dtype and computed["s"].dtype == reference["s"].dtype
    want = (reference["s"] == "a").tolist()
    assert (eager["s"] == "a").tolist() == want and (computed["s"] == "a").tolist() == want == [True, False, False]
    assert (lazy["s"] == "a").compute().tolist() == want
