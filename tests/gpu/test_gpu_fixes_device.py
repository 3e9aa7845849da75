"""The first GPU-path fixes (joins, cleaning, categorify, GAUC, CSV, the local cluster) where only a device shows them (``gpu``-marked, skipped without one);
the CPU-observable halves are in test_gpu_shared_code.py and the GPU conformance stage.
Fitted / history operators on dask-cudf (fitted.py ``_copy`` / ``_attach``) are covered by
tests/fitting/test_fitted_gpu.py::test_history_identical_on_dask_cudf."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import fbrapids  # noqa: F401
from fbrapids import ops

pytestmark = pytest.mark.gpu


def test_device_join_keeps_the_right_sides_dtypes():
    import cudf

    from fbrapids.joins.hash_join import join_frames

    left = pd.DataFrame({"k": [1, 2, 3]})
    right = pd.DataFrame({"k": [1, 2], "c": pd.Categorical(["x", "y"]), "i": pd.array([5, None], dtype="Int64"),
                          "b": pd.array([True, None], dtype="boolean"),
                          "t": pd.to_datetime(["2024-01-01", "2024-01-02"]).tz_localize("UTC"),
                          "n": np.array([7, 8], dtype=np.int8)})
    want = join_frames(left, right, ["k"], "left")
    got = join_frames(cudf.DataFrame(left), cudf.DataFrame(right), ["k"], "left")
    for c in ["c", "i", "b", "t", "n"]:
        assert str(got[c].dtype) == str(want[c].dtype) or (c == "c" and str(got[c].dtype) == "category"), c
    assert got["c"].to_pandas().tolist()[:2] == ["x", "y"]


def test_clean_fills_cudf_strings_and_categoricals_like_pandas():
    import cudf

    df = pd.DataFrame({"s": pd.Series(["a", None], dtype="str"), "c": pd.Categorical(["x", None])})
    want = df.fbx.clean(fill={"s": "?", "c": "?"})
    got = cudf.DataFrame(df).fbx.clean(fill={"s": "?", "c": "?"}).to_pandas()
    assert got["s"].tolist() == want["s"].tolist() == ["a", "?"]
    assert got["c"].astype(str).tolist() == want["c"].astype(str).tolist() == ["x", "?"]


def test_cudf_categorical_columns_are_typed_for_planning():
    import cudf

    from fbrapids.features.schema import column_type

    s = pd.Series(pd.Categorical(["x", "y"]))
    assert column_type(cudf.Series(s)) == column_type(s) == "str"


def test_categorify_counts_list_elements_on_cudf():
    import cudf

    s = pd.Series([["a", "b"], ["a"]], dtype=pd.ArrowDtype(pa.list_(pa.string())))
    df = pd.DataFrame({"l": s})
    want = df.fbx.fit(c=ops.categorify("l")).states
    got = cudf.DataFrame(df).fbx.fit(c=ops.categorify("l")).states
    for sid, st in want.items():
        for k, v in st.tables.items():
            np.testing.assert_array_equal(v, got[sid].tables[k])


def test_device_gauc_groups_by_a_64_bit_key_and_unsigned_list_ids_stay_positive():
    import cudf
    import torch

    from fbrapids.trainers.device_batch import device_columns

    ids = pd.Series([[2**32 - 1], [3]], dtype=pd.ArrowDtype(pa.list_(pa.uint32())))
    df = cudf.DataFrame(pd.DataFrame({"y": [0.0, 1.0], "u": ["alice", "bob"], "l": ids}))
    cols = device_columns(df, "y", [], ["l"], group="u")
    assert cols.group.dtype == torch.int64 and cols.group[0] != cols.group[1]
    assert cols.sparse["l"][0].tolist() == [2**32 - 1, 3]


def test_gpu_csv_refuses_an_int8_overflow_like_the_host(tmp_path):
    from fbrapids.errors import FbrapidsError
    from fbrapids.views.read import read_view

    path = tmp_path / "a.csv"
    path.write_text("a\n1\n300\n")
    with pytest.raises(FbrapidsError) as host:
        read_view(str(path), dtype={"a": "int8"}, eager=True, backend="cpu")
    with pytest.raises(FbrapidsError) as dev:
        read_view(str(path), dtype={"a": "int8"}, eager=True, backend="gpu")
    assert type(dev.value) is type(host.value)


def test_local_cuda_cluster_defaults_to_one_worker_per_device():
    from fbrapids.frames.backend import visible_devices
    from fbrapids.frames.cluster import close_client, local_cluster

    client = local_cluster(backend="gpu")
    try:
        assert len(client.scheduler_info()["workers"]) == visible_devices()[0]
    finally:
        close_client(client)
