"""The canonical workload on pandas, eager cudf and dask-cudf: identical output, dtypes and counts.

Everything here needs a CUDA device with cudf / dask-cudf / dask-cuda (marker ``gpu``); the
helpers that canonicalise frames are plain code and are checked on the CPU as well.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from fbrapids.datasets.synthetic import views as workload
from fbrapids.views.clean import clean, clean_report

KEY = "instance_id"


def _large(t: pa.DataType) -> pa.DataType:
    """The Arrow type with 64-bit offsets (cudf hands out either width, pandas large ones)."""
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pa.large_string()
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.large_list(_large(t.value_type))
    return t


def canonical(frame) -> pd.DataFrame:
    """A pandas / cudf frame as Arrow-backed pandas, rows sorted by instance_id, offsets
    widened: two frames holding the same typed values compare equal with check_dtype=True,
    and any difference in an integer width, float width or list element type does not."""
    if type(frame).__module__.split(".")[0] == "cudf":
        table = frame.to_arrow(preserve_index=False)
    else:
        table = pa.Table.from_pandas(frame, preserve_index=False)
    table = table.cast(pa.schema([pa.field(f.name, _large(f.type)) for f in table.schema]))
    out = table.to_pandas(types_mapper=pd.ArrowDtype)
    if KEY in out.columns:
        out = out.sort_values(KEY, kind="stable").reset_index(drop=True)
    return out


def test_canonical_frames_catch_width_differences():
    a = pd.DataFrame({KEY: [2, 1], "x": np.array([1, 2], dtype=np.int32), "s": ["b", "a"]})
    b = a.sort_values(KEY).astype({"x": np.int64})
    with pytest.raises(AssertionError, match="dtype"):
        pd.testing.assert_frame_equal(canonical(a), canonical(b), check_dtype=True)
    pd.testing.assert_frame_equal(canonical(a), canonical(a.iloc[::-1]), check_dtype=True)
    assert canonical(a)["s"].tolist() == ["a", "b"]


def _run_workload(data_dir, backend: str, eager: bool, npartitions: int | None = None):
    views = workload.read_views(data_dir, eager=eager, backend=backend)
    if npartitions is not None:
        views["impressions"] = views["impressions"].repartition(npartitions=npartitions)
    impressions, users, ads = workload.clean_views(views)
    joined = workload.join_views(impressions, users, ads)
    merged = workload.merge_basic(workload.extract_features(joined), views["basic"])
    return merged, impressions


@pytest.mark.gpu
def test_workload_identical_on_pandas_eager_cudf_and_dask_cudf(gen_dir):
    from fbrapids.frames.backend import is_gpu_object

    cpu, cpu_imp = _run_workload(gen_dir, "cpu", eager=True)
    gpu, gpu_imp = _run_workload(gen_dir, "gpu", eager=True)
    lazy, lazy_imp = _run_workload(gen_dir, "gpu", eager=False, npartitions=3)
    assert is_gpu_object(gpu) and is_gpu_object(lazy) and lazy_imp.npartitions >= 3
    want = canonical(cpu)
    assert len(want) > 1000
    pd.testing.assert_frame_equal(canonical(gpu), want, check_dtype=True)
    parts = [p.compute() for p in lazy.to_delayed()]
    for part in parts:  # dask-cudf's _meta says what every partition holds
        assert {c: str(t) for c, t in part.dtypes.items()} == {c: str(t) for c, t in lazy._meta.dtypes.items()}
    pd.testing.assert_frame_equal(canonical(lazy.compute()), want, check_dtype=True)
    counts = clean_report(cpu_imp).counts
    assert counts["rows_in"] > counts["rows_out"] > 0
    assert clean_report(gpu_imp).counts == counts
    assert lazy_imp.fbx.clean_report.counts == counts


@pytest.mark.gpu
@pytest.mark.parametrize("width", ["int8", "int16", "uint8", "float32"])
def test_where_over_narrow_widths_on_cudf_and_dask_cudf(width):
    import dask.dataframe as dd

    from fbrapids.frames.backend import get_backend, to_backend
    from fbrapids.views.where import evaluate

    from test_clean_where import EXPRESSIONS, narrow_frame

    be = get_backend("gpu")
    for nulls in (False, True):
        host = narrow_frame(width, nulls=nulls)
        dev = to_backend(host, be)
        assert str(dev["x"].dtype) == width
        for expr in EXPRESSIONS:
            want = evaluate(expr, host)
            got = evaluate(expr, dev)
            assert got.to_numpy().tolist() == want.tolist(), f"{expr} on {width} (nulls={nulls})"
        lazy = dd.from_pandas(host, npartitions=3).to_backend("cudf")
        out = clean(lazy, where="x >= 0 and not (y > 3 or x == 7)")  # _meta built on cudf without failing
        eager = clean(host, where="x >= 0 and not (y > 3 or x == 7)")
        assert len(out.compute()) == len(eager) == out.fbx.clean_report.counts["rows_out"]


@pytest.mark.gpu
def test_one_worker_local_cuda_cluster_runs_the_pipeline_extraction(gen_dir):
    import dask

    from fbrapids import kernels as kernel_stats
    from fbrapids.app.pipeline import feature_frame
    from fbrapids.frames.cluster import close_client, local_cluster

    client = local_cluster(n_workers=1, backend="gpu")
    try:
        assert len(client.scheduler_info()["workers"]) == 1

        def pool_kind():
            import rmm

            from fbrapids.frames.backend import device_memory, resource_chain

            device_memory()
            return [type(r).__name__ for r in resource_chain(rmm.mr.get_current_device_resource())]

        (kinds,) = client.run(pool_kind).values()
        assert "PoolMemoryResource" in kinds  # dask-cuda's pool, adopted (with statistics) by fbrapids
        client.run(kernel_stats.reset_stats)
        with dask.config.set(scheduler=client):
            merged, _ = feature_frame(gen_dir, backend="gpu")
            got = merged.compute()
        (worker_stats,) = client.run(kernel_stats.stats).values()
        assert worker_stats["launches"] > 0  # the kernels ran in the worker, not here
    finally:
        close_client(client)
    want, _ = feature_frame(gen_dir, backend="cpu")
    pd.testing.assert_frame_equal(canonical(got), canonical(want.compute()), check_dtype=True)
