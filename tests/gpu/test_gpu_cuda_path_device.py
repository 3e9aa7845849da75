"""The CUDA path's fixes (D1-D3, P1-P5) where only a device shows them (``gpu``-marked, skipped without one;
run by ``make gpu-check``).  The CPU-observable halves: tests/kernels/test_kernels_cuda_compile.py
(D1), tests/kernels/test_nvrtc.py (P3), tests/trainers/test_trainer_device_batch.py (D3, P1),
tests/frames/test_backend_device_memory.py (P4), and the conformance stage's ``ptxas`` / ``dtype-paths``
checks with their mutation tests (tests/gpu_conformance)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import fbrapids  # noqa: F401
from fbrapids import ops

pytestmark = pytest.mark.gpu


def _gpu(df):
    import cudf

    return cudf.DataFrame(df)


def test_timestamp_operators_read_a_zoned_cudf_column():  # D2
    ts = pd.to_datetime(["2024-01-01 05:00", "2024-03-31 01:30", None]).tz_localize("Europe/Paris")
    df = pd.DataFrame({"ts": ts})
    for unit in ("s", "ms", "ns"):
        d = df.assign(ts=df["ts"].astype(f"datetime64[{unit}, Europe/Paris]"))
        feats = dict(h=ops.hour("ts"), w=ops.weekday("ts"), d=ops.day("ts"))
        want = d.fbx.extract(**feats)
        got = _gpu(d).fbx.extract(**feats).to_pandas()
        for c in feats:
            assert got[c].tolist() == want[c].tolist(), (unit, c)


def test_device_batches_take_arrow_list_features():  # D3
    import torch

    from fbrapids.trainers.stream import stream

    lists = pd.Series([[1, 2], [], [3]], dtype=pd.ArrowDtype(pa.list_(pa.int64())))
    df = pd.DataFrame({"y": [0.0, 1.0, 0.0], "toks": lists})
    g = _gpu(df)
    batches = list(stream(g, label="y", sparse=["toks"], batch_size=2, device="cuda"))
    assert [b.sparse["toks"][0].tolist() for b in batches] == [[1, 2], [3]]
    assert batches[0].sparse["toks"][0].device.type == "cuda" and torch.cuda.is_available()


def test_nan_is_null_on_both_backends():  # P2
    x = np.array([1.5, np.nan, -2.0, 40.0, np.nan], dtype="float64")
    df = pd.DataFrame({"x": x, "f": x.astype("float32")})
    feats = dict(fill=ops.fill_null("x", 0.0), b=ops.bucketize("x", [0.0, 10.0]), h=ops.hash("x"),
                 c=ops.clip("f", -1.0, 1.0), i=ops.cast("x", "i32"))
    want = df.fbx.extract(**feats)
    got = _gpu(df).fbx.extract(**feats).to_pandas()
    for c in feats:
        assert got[c].isna().tolist() == want[c].isna().tolist(), c
        assert got[c].dropna().tolist() == want[c].dropna().tolist(), c


def test_float32_denormals_survive_on_the_device():  # P3
    tiny = np.array([1e-40, -3e-42, 1.0], dtype="float32")
    df = pd.DataFrame({"f": tiny})
    feats = dict(c=ops.clip("f", -1e-41, 1e-39))
    assert _gpu(df).fbx.extract(**feats).to_pandas()["c"].tolist() == df.fbx.extract(**feats)["c"].tolist()


def test_dask_meta_matches_the_partitions_for_list_outputs():  # P5
    import dask_cudf  # noqa: F401

    from fbrapids.frames.backend import dask_dataframe

    df = pd.DataFrame({"q": pd.Series(["a b", "c", ""], dtype="str"), "ids": [1, 2, 3]})
    ddf = dask_dataframe().from_pandas(_gpu(df), npartitions=2)
    out = ddf.fbx.extract(t=ops.split("q", " "), b=ops.split("q", " ", buckets=8))
    part = out.partitions[0].compute()
    for c in ("t", "b"):
        assert str(out._meta[c].dtype) == str(part[c].dtype), c


def test_ptxas_accepts_a_wide_layer_on_the_device():  # D1, as cupy loads it
    q = pd.Series([f"a{i % 5}|b c,d" for i in range(300)], dtype="str")
    df = pd.DataFrame({"q": q})
    feats = {f"s{i}": ops.split("q", "|, "[i % 3], buckets=97 + i) for i in range(48)}
    want = df.fbx.extract(**feats)
    got = _gpu(df).fbx.extract(**feats).to_pandas()
    for c in feats:
        assert got[c].tolist() == want[c].tolist(), c


def test_clean_leaves_the_callers_cudf_frame_as_it_was():  # slow path: no deep copy of the partition
    df = pd.DataFrame({"s": pd.Series(["a", None, "b"], dtype="str"), "x": [1.0, np.nan, 3.0]})
    g = _gpu(df)
    before = g.to_pandas()
    out = g.fbx.clean(fill={"s": "?", "x": 0.0})
    assert out.to_pandas()["s"].tolist() == ["a", "?", "b"]
    pd.testing.assert_frame_equal(g.to_pandas(), before)


def test_labels_are_checked_on_the_device():  # slow path: the label column no longer copied to the host
    import cudf

    from fbrapids.errors import LabelError
    from fbrapids.trainers.labels import check_labels

    check_labels(cudf.Series([0, 1, None, 1]), "y", 0)
    with pytest.raises(LabelError, match=r"'y', partition 3: 2 value\(s\) not 0 or 1, first 7 at row 2"):
        check_labels(cudf.Series([0.0, 1.0, 7.0, 0.5]), "y", 3)
    check_labels(cudf.Series([0.2, 0.9]), "y", 0, label_range=(0, 1))
