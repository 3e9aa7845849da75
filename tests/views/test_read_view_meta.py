"""read_view's ``_meta``: built without reading a partition, and equal to every partition's dtypes."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fbrapids.errors import ViewError
from fbrapids.views.csv import META_SAMPLE_ROWS
from fbrapids.views.read import read_view


@pytest.fixture(autouse=True)
def host_reader(request, monkeypatch):
    """The CPU tests here check the host reader (pandas dtypes) whatever FBRAPIDS_BACKEND
    says; the cudf reader has its own test below."""
    if request.node.get_closest_marker("gpu") is None:
        monkeypatch.setenv("FBRAPIDS_BACKEND", "cpu")


def _dtypes(frame) -> dict:
    return {c: str(t) for c, t in frame.dtypes.items()}


def test_parquet_meta_from_the_schema_matches_partitions(tmp_path):
    table = pa.table({
        "id": pa.array([2**63 + 5, 1, 2], pa.uint64()),
        "age": pa.array([20, None, 30], pa.int64()),
        "f": pa.array([0.5, None, 1.5], pa.float32()),
        "s": pa.array(["a", None, "c"], pa.large_string()),
        "l": pa.array([[1, 2], None, []], pa.list_(pa.int64())),
        "b": pa.array([True, False, None]),
        "ts": pa.array([1, 2, 3], pa.timestamp("s")),
    })
    pq.write_table(table, tmp_path / "a.parquet", row_group_size=1)
    pdf = pd.DataFrame({"n": pd.array([1, None], dtype="Int16"), "q": pd.Series(["x", None], dtype="str")})
    pdf.to_parquet(tmp_path / "p.parquet")
    for path, cols in ((tmp_path / "a.parquet", None), (tmp_path / "a.parquet", ["l", "id"]),
                       (tmp_path / "p.parquet", None)):
        view = read_view(path, columns=cols, row_groups_per_partition=1)
        assert view.npartitions == (3 if path.name == "a.parquet" else 1)
        parts = [p.compute() for p in view.to_delayed()]
        for part in parts:
            assert _dtypes(part) == _dtypes(view._meta), path
        assert list(view._meta.columns) == (cols or list(parts[0].columns))
    sliced = read_view(tmp_path / "p.parquet", partition_rows=1)  # one row group split into row ranges
    assert sliced.npartitions == 2
    assert [_dtypes(p.compute()) for p in sliced.to_delayed()] == [_dtypes(sliced._meta)] * 2
    assert sliced.compute()["n"].tolist()[:1] == [1]


def test_csv_meta_comes_from_a_sample_not_the_whole_file(tmp_path):
    n = META_SAMPLE_ROWS + 500
    ids = [str(i) for i in range(n)]
    ids[-3] = "12x"  # beyond the sample: planning succeeds, reading names the row
    path = tmp_path / "big.csv"
    path.write_text("id,v\n" + "".join(f"{i},{k % 7}\n" for k, i in enumerate(ids)))
    view = read_view(path)  # plans from the first META_SAMPLE_ROWS rows only
    assert _dtypes(view._meta) == {"id": "int64", "v": "int64"}
    with pytest.raises(ViewError, match=rf"big.csv: column 'id' row {n - 3}\b.*: '12x' is not an integer"):
        view.compute()
    with pytest.raises(ViewError, match="'12x' is not an integer"):
        read_view(path, eager=True)


def test_csv_partitions_convert_to_the_sampled_dtypes(tmp_path):
    (tmp_path / "a.csv").write_text("id,x,name\n1,0.5,a\n2,,b\n")
    (tmp_path / "b.csv").write_text("id,x,name\n3,2,c\n18446744073709551615,3,\n")
    with pytest.raises(ViewError, match=r"b.csv: column 'id' row 1: 18446744073709551615 does not fit int64"):
        read_view(tmp_path / "*.csv").compute()  # uint64 id does not fit the sampled int64: never wrapped
    (tmp_path / "b.csv").write_text("id,x,name\n3,2,c\n4,3,\n")
    view = read_view(tmp_path / "*.csv")
    parts = [p.compute() for p in view.to_delayed()]
    assert all(_dtypes(p) == _dtypes(view._meta) for p in parts)
    assert {c: _dtypes(view._meta)[c] for c in ("id", "x")} == {"id": "int64", "x": "float64"}
    assert view.compute()["x"].tolist()[2:] == [2.0, 3.0]


def test_json_meta_from_a_sample_and_partitions_agree(tmp_path):
    rows_a = [{"id": i, "ctx": json.dumps({"os": "ios"}), "p": 0.5 * i} for i in range(5)]
    rows_b = [{"id": 10 + i, "ctx": None, "p": float(i)} for i in range(4)]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows_a))
    (tmp_path / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows_b))
    view = read_view(tmp_path / "*.jsonl", columns=["id", "ctx", "p"])
    parts = [p.compute() for p in view.to_delayed()]
    assert all(_dtypes(p) == _dtypes(view._meta) for p in parts)
    assert {c: _dtypes(view._meta)[c] for c in ("id", "p")} == {"id": "int64", "p": "float64"}
    (tmp_path / "c.jsonl").write_text('{"id": 1.5, "ctx": "x", "p": 1}\n')
    # every file's first records are sampled: 1.5 makes "id" float64 (its ints are exact there) ...
    assert _dtypes(read_view(tmp_path / "*.jsonl")._meta)["id"] == "float64"
    # ... and a dtype it does not fit names the file, column, line and value
    with pytest.raises(ViewError, match=r"c.jsonl: column 'id' line 1: '1.5' is not a whole number"):
        read_view(tmp_path / "*.jsonl", dtype={"id": "int64"}).compute()


@pytest.mark.gpu
def test_gpu_views_read_by_cudf_match_the_cpu(tmp_path):
    """parquet, CSV and JSON lines on the GPU: cudf frames, _meta equal to the partitions,
    values equal to the CPU reader's (ids above 2^53 exact), bad values still named."""
    from fbrapids.frames.backend import is_gpu_object

    n = 3000
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"id": rng.integers(2**60, 2**62, n), "v": rng.normal(size=n),
                       "s": pd.Series([f"w{i % 13}" if i % 11 else None for i in range(n)], dtype="str"),
                       "k": pd.array([i if i % 5 else None for i in range(n)], dtype="Int64")})
    df.to_parquet(tmp_path / "a.parquet", row_group_size=1000)
    df.to_csv(tmp_path / "a.csv", index=False)
    with open(tmp_path / "a.jsonl", "w") as fh:
        for rec in df.to_dict("records"):
            fh.write(json.dumps({k: (None if pd.isna(v) else (int(v) if k in ("id", "k") else v))
                                 for k, v in rec.items()}) + "\n")
    for name in ("a.parquet", "a.csv", "a.jsonl"):
        gpu = read_view(tmp_path / name, backend="gpu")
        assert is_gpu_object(gpu._meta)
        parts = [p.compute() for p in gpu.to_delayed()]
        assert all(is_gpu_object(p) and _dtypes(p) == _dtypes(gpu._meta) for p in parts), name
        cpu = read_view(tmp_path / name, backend="cpu").compute().reset_index(drop=True)
        host = gpu.compute().to_pandas(nullable=True).reset_index(drop=True)
        assert host["id"].tolist() == cpu["id"].tolist(), name
        assert host["s"].astype(object).where(host["s"].notna(), None).tolist() == \
            cpu["s"].astype(object).where(cpu["s"].notna(), None).tolist(), name
        np.testing.assert_allclose(host["v"].to_numpy(dtype=float), cpu["v"].to_numpy(dtype=float))
        assert host["k"].isna().sum() == cpu["k"].isna().sum() == n // 5 + 1
    (tmp_path / "bad.csv").write_text("id,v\n1,2\n3x,4\n")
    with pytest.raises(ViewError, match=r"bad.csv: column 'id' row 1\b.*: '3x' is not an integer"):
        read_view(tmp_path / "bad.csv", backend="gpu", dtype={"id": "int64"}).compute()
