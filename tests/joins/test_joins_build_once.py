"""A dask join's build side is computed once: the partition computed at planning to size
it is the one the hash table is built from (counted per partition, never timed), and the
result is pandas' own merge (the oracle)."""

from __future__ import annotations

import collections

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import fbrapids  # noqa: F401  (the .fbx accessor)

CALLS: collections.Counter = collections.Counter()


def _counted(part: pd.DataFrame) -> pd.DataFrame:
    if len(part):  # dask also calls it on empty metadata frames
        CALLS[int(part["k"].iloc[0])] += 1
    return part


@pytest.mark.parametrize("nparts", [1, 3])
def test_each_build_partition_is_computed_once(nparts: int) -> None:
    rng = np.random.default_rng(nparts)
    right_pd = pd.DataFrame({"k": np.arange(30, dtype=np.int64), "v": rng.integers(0, 9, 30)})
    left_pd = pd.DataFrame({"k": rng.integers(-5, 35, 200).astype(np.int64), "x": np.arange(200)})
    right = dd.from_pandas(right_pd, npartitions=nparts, sort=False).map_partitions(_counted, meta=right_pd.iloc[:0])
    left = dd.from_pandas(left_pd, npartitions=4, sort=False)
    CALLS.clear()
    with dask.config.set(scheduler="sync"):
        got = left.fbx.join(right, on="k", how="left").compute()
    assert right.npartitions == nparts
    assert len(CALLS) == nparts and set(CALLS.values()) == {1}  # planning's partition 0 reused, none read twice
    want = left_pd.merge(right_pd, on="k", how="left")
    got = got.sort_values("x").reset_index(drop=True)
    assert got["k"].tolist() == want["k"].tolist()
    assert got["v"].astype("Float64").tolist() == want["v"].astype("Float64").tolist()


def test_eager_left_with_a_dask_build_side_reads_each_partition_once() -> None:
    right_pd = pd.DataFrame({"k": np.arange(12, dtype=np.int64), "v": np.arange(12) * 2})
    right = dd.from_pandas(right_pd, npartitions=3, sort=False).map_partitions(_counted, meta=right_pd.iloc[:0])
    left_pd = pd.DataFrame({"k": np.array([3, 11, 40, 0], dtype=np.int64)})
    CALLS.clear()
    with dask.config.set(scheduler="sync"):
        got = left_pd.fbx.join(right, on="k", how="inner")
    assert len(CALLS) == 3 and set(CALLS.values()) == {1}
    assert got["v"].tolist() == [6, 22, 0]
