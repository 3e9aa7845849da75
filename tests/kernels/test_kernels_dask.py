"""extract on dask frames: per partition (an empty one included), and on a LocalCluster with
2 worker processes, identical to pandas."""

from __future__ import annotations

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import fbrapids  # noqa: F401
from fbrapids import ops


def frame(n=1500):
    rng = np.random.default_rng(4)
    words = np.array(["a", "bb", "é", "x y"])
    return pd.DataFrame({"ts": rng.integers(1.6e9, 1.7e9, n), "uid": rng.integers(0, 50, n),
                         "q": pd.Series([" ".join(rng.choice(words, rng.integers(0, 5))) for _ in range(n)], dtype="str")})


FEATS = {"h": ops.hour("ts"), "t": ops.split("q", " ", buckets=1 << 18), "x": ops.cross("uid", ops.split("q", " "), cap=5),
         "c": ops.categorify("uid", min_freq=20), "n": ops.length(ops.split("q", " "))}


def _check(got: pd.DataFrame, want: pd.DataFrame):
    got = got.sort_index()
    for c in FEATS:
        assert got[c].tolist() == want[c].tolist(), c


def test_dask_partitions_with_an_empty_one():
    df = frame()
    fitted = df.fbx.fit(**FEATS)  # categorify: fitted once, applied to every partition
    want = df.fbx.extract(fitted)
    ddf = dd.from_pandas(df, npartitions=3)
    empty = dd.from_pandas(df.iloc[:0], npartitions=1)
    ddf = dd.concat([ddf, empty])
    assert ddf.npartitions == 4
    out = ddf.fbx.extract(fitted)
    assert set(FEATS) <= set(out.columns)
    with dask.config.set(scheduler="threads"):
        _check(out.compute(), want)


def test_local_cluster_two_processes():
    distributed = pytest.importorskip("distributed")
    df = frame()
    fitted = df.fbx.fit(**FEATS)
    want = df.fbx.extract(fitted)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cl, \
            distributed.Client(cl) as client:
        out = dd.from_pandas(df, npartitions=4).fbx.extract(fitted)
        got = client.compute(out).result()
        _check(got, want)

        def compiled():
            from fbrapids import kernels

            return kernels.compilations(), kernels.cached_plans(), __import__("os").getpid()

        per_worker = client.run(compiled)
        assert len({pid for _, _, pid in per_worker.values()}) == 2  # two worker processes
        for comp, plans, _ in per_worker.values():
            assert comp == plans  # no plan compiled twice in one process
        assert sum(c for c, _, _ in per_worker.values()) < 2 * out.npartitions


def test_user_operator_registered_in_the_client_runs_on_cluster_workers(local_cluster):
    """Workers never imported the code that registered the operator: it travels with the task."""
    import dask.dataframe as dd

    from fbrapids import ops
    from fbrapids.kernels import register_operator

    register_operator("triple_plus_one_demo", "i64 x", "i64 y", "y = 3 * x + 1;", replace=True)
    frame = pd.DataFrame({"x": np.arange(40, dtype=np.int64)})
    lazy = dd.from_pandas(frame, npartitions=4).fbx.extract(y=ops.call("triple_plus_one_demo", "x"))
    got = local_cluster.compute(lazy).result().sort_index()
    assert got["y"].tolist() == [3 * v + 1 for v in range(40)]
