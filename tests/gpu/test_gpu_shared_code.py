"""The first known GPU-path bugs, checked where they can be seen without a device: the
backend helpers the shared code now asks (their cudf answers are checked on cudf's real classes
by the GPU conformance stage, ``scripts/gpu_conformance``), and the pandas side of each fix."""

from __future__ import annotations

import subprocess
import sys

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from fbrapids.errors import BackendUnavailableError
from fbrapids.features.fitted import copy_columns
from fbrapids.frames import backend as B
from fbrapids.frames.cluster import cuda_worker_count
from fbrapids.trainers.device_batch import GROUP_HASH


def test_on_index_places_values_by_position_on_a_duplicate_index():
    part = pd.DataFrame({"a": pd.Series([[1], [2, 3]], dtype=pd.ArrowDtype(pa.list_(pa.int64())), index=[7, 7])})
    out = part.assign(b=B.on_index(part["a"], part.index))
    assert out["b"].tolist() == [[1], [2, 3]] and out.index.tolist() == [7, 7]
    with pytest.raises(ValueError, match="2 values for an index of 3"):
        B.on_index(part["a"], pd.Index([0, 1, 2]))


def test_copy_columns_on_dask_partitions_with_duplicate_labels():
    frame = dd.from_pandas(pd.DataFrame({"k": [1, 2, 3, 4], "l": [5, 6, 7, 8]}, index=[0, 0, 1, 1]), npartitions=2)
    out = copy_columns(frame, {"c": "l"}).compute()
    assert out["c"].tolist() == [5, 6, 7, 8]


def test_arrow_string_fast_path_is_for_host_series_only():
    s = pd.Series(["a", None], dtype="str")
    assert B.is_host_arrow_strings(s)
    assert not B.is_host_arrow_strings(s.astype(object))
    assert not B.is_host_arrow_strings(pd.Series([1]))


def test_categorical_and_list_dtype_questions():
    assert B.is_categorical(pd.CategoricalDtype(["x"])) and not B.is_categorical(pd.StringDtype())
    assert B.is_list_dtype(pd.ArrowDtype(pa.large_list(pa.string())))
    assert not B.is_list_dtype(pd.ArrowDtype(pa.int64())) and not B.is_list_dtype(None)
    cat = pd.CategoricalDtype(["x"])
    assert B.host_dtype(cat) is cat


@pytest.mark.parametrize("dtype, tid", [("int8", "INT8"), ("uint8", "UINT8"), ("int32", "INT32"),
                                        ("uint64", "UINT64"), (pd.Int16Dtype(), "INT16")])
def test_device_csv_checks_the_target_integer_width(dtype, tid):
    # views/text_columns.py asks pylibcudf's is_integer with this type, so "300" is refused for int8
    assert B.plc_int_type_id(dtype) == tid
    with pytest.raises(ValueError):
        B.plc_int_type_id(np.dtype("float32"))


def test_list_ids_are_read_signed_or_not_as_their_type_says():
    assert B.int_dtype_of_type_id("UINT32") == np.dtype("uint32")
    assert B.int_dtype_of_type_id("INT16") == np.dtype("int16")
    with pytest.raises(ValueError, match="FLOAT64"):
        B.int_dtype_of_type_id("FLOAT64")


def test_device_gauc_key_is_64_bit():
    assert GROUP_HASH == "xxhash64"  # cudf's default murmur3 gives uint32 keys: users collide


def test_local_cuda_cluster_gets_one_worker_per_visible_device():
    assert cuda_worker_count(None, 1) == 1 and cuda_worker_count(None, 4) == 4 and cuda_worker_count(1, 2) == 1
    with pytest.raises(BackendUnavailableError, match="2 local GPU workers asked for, but this machine shows 1"):
        cuda_worker_count(2, 1)
    with pytest.raises(BackendUnavailableError, match="none is visible"):
        cuda_worker_count(None, 0)


def test_no_device_message_does_not_advise_the_installed_extra():
    only_device = B.gpu_unavailable_message(("no CUDA device is visible: the driver reports none",))
    assert "fbrapids[gpu]" not in only_device and "insufficient" not in only_device
    assert "no CUDA device is visible" in only_device and "FBRAPIDS_BACKEND=cpu" in only_device
    both = B.gpu_unavailable_message(("python package 'cudf-cu13' (import cudf)", "no CUDA device is visible: x"))
    assert "fbrapids[gpu]" in both and "cudf-cu13" in both


def test_import_fbrapids_loads_no_rapids_nor_dask_module():
    code = ("import sys, fbrapids, pandas as pd; pd.DataFrame({'a': [1]}).fbx; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('cudf', 'dask_cudf', 'rmm', 'cupy', 'pylibcudf', 'dask_cuda', 'dask')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"FBRAPIDS_BACKEND": "cpu", "PATH": ""}).stdout
    assert out.strip() == "[]"


def test_the_cli_parses_arguments_without_pandas_numpy_or_dask():
    # `fbrapids --help` must answer fast (< 1 s warm; 0.2 s measured): nothing heavy is imported for it
    code = ("import sys, runpy; sys.argv = ['fbrapids', '--help']\n"
            "try:\n    runpy.run_module('fbrapids.app.cli', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'pandas', 'numpy', 'dask', 'pyarrow', 'torch'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_dask_accessor_is_registered_when_dask_is_imported_after_fbrapids():
    code = ("import fbrapids, pandas as pd, dask.dataframe as dd; "
            "print(dd.from_pandas(pd.DataFrame({'a': [1.0, None]}), npartitions=1).fbx.clean(fill={'a': 0.0})"
            ".compute()['a'].tolist())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[1.0, 0.0]"
