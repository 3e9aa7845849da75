import numpy as np
import pandas as pd
import pytest

from fbrapids.frames import backend as B


def test_cpu_backend_exposes_its_libraries():
    be = B.get_backend("cpu")
    assert be.name == "cpu" and be.xdf is pd and be.xp is np and be.dask_backend == "pandas"
    assert be.free_device_memory() is None
    assert not be.is_gpu


def test_environment_variable_overrides_auto(monkeypatch):
    monkeypatch.setenv(B.ENV_VAR, "cpu")
    assert B.get_backend().name == "cpu"
    monkeypatch.setenv(B.ENV_VAR, "tpu")
    with pytest.raises(ValueError, match="unknown backend 'tpu'.*FBRAPIDS_BACKEND"):
        B.get_backend()


def test_argument_beats_environment(monkeypatch):
    monkeypatch.setenv(B.ENV_VAR, "gpu")
    assert B.get_backend("cpu").name == "cpu"


@pytest.mark.skipif(not B.gpu_missing(), reason="a GPU backend is available here")
def test_asking_for_gpu_without_one_says_what_is_missing():
    with pytest.raises(B.BackendUnavailableError) as err:
        B.get_backend("gpu")
    msg = str(err.value)
    assert "cudf" in msg and "fbrapids[gpu]" in msg
    for missing in B.gpu_missing():
        assert missing in msg


@pytest.mark.skipif(not B.gpu_missing(), reason="a GPU backend is available here")
def test_auto_falls_back_to_cpu_without_gpu(monkeypatch):
    monkeypatch.delenv(B.ENV_VAR, raising=False)
    assert B.resolve_name() == "cpu"


def test_objects_report_their_backend():
    import dask.dataframe as dd

    frame = pd.DataFrame({"a": [1, 2]})
    assert B.backend_of(frame).name == "cpu"
    assert B.backend_of(dd.from_pandas(frame, npartitions=1)).name == "cpu"
    assert B.to_backend(frame, B.get_backend("cpu")) is frame


@pytest.mark.gpu
def test_gpu_backend_moves_frames_to_device():
    be = B.get_backend("gpu")
    frame = B.to_backend(pd.DataFrame({"a": [1, 2]}), be)
    assert B.is_gpu_object(frame)
    assert be.free_device_memory() > 0
    assert B.to_host(frame)["a"].tolist() == [1, 2]


def test_dask_tests_tell_frames_series_and_eager_objects_apart():
    import dask.dataframe as dd

    frame = pd.DataFrame({"a": [1, 2]})
    lazy = dd.from_pandas(frame, npartitions=1)
    assert [B.is_dask(x) for x in (frame, frame["a"], lazy, lazy["a"])] == [False, False, True, True]
    assert [B.is_dask_frame(x) for x in (frame, frame["a"], lazy, lazy["a"])] == [False, False, True, False]


def test_integer_type_ids_refuse_other_dtypes_by_name():
    import pyarrow as pa

    from fbrapids.errors import ArgumentError

    assert B.plc_int_type_id(pd.ArrowDtype(pa.uint64())) == "UINT64"
    for dtype in (np.dtype("float32"), pd.CategoricalDtype(["a"]), pd.StringDtype()):
        with pytest.raises(ArgumentError, match="is not an integer dtype"):
            B.plc_int_type_id(dtype)
