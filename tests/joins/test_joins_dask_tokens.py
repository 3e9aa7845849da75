"""Dask frames built from eager ones keep their own dtypes: dask's tokens ignored the dtype of
masked and Arrow arrays, so of two eager sides equal in values but not in dtype, the second
silently computed as the first (fbrapids.frames.dask_tokens)."""

from __future__ import annotations

import dask
import dask.dataframe as dd
import pandas as pd

import fbrapids  # noqa: F401


def test_eager_sides_equal_in_values_keep_their_dtypes() -> None:
    """Both joins planned before either computes, a forced shuffle: each eager side becomes a
    dask frame of its own (``dd.from_pandas``)."""
    left = dd.from_pandas(pd.DataFrame({"k": [1, 2, 3]}), npartitions=2)
    rights = {d: pd.DataFrame({"k": [1, 2], "v": pd.array([100, None], dtype=d)}) for d in ("Int8", "UInt64", "Int64")}
    joins = {d: left.fbx.join(r, on="k", how="left", broadcast=False) for d, r in rights.items()}
    outs = dask.compute(*joins.values())
    got = {d: str(o["v"].dtype) for d, o in zip(joins, outs)}
    assert got == {"Int8": "Int8", "UInt64": "UInt64", "Int64": "Int64"}


def test_from_pandas_of_equal_values_keeps_each_dtype() -> None:
    frames = [pd.DataFrame({"k": pd.array([1, None], dtype=d)}) for d in ("Int8", "UInt64", "boolean")]
    frames += [pd.DataFrame({"k": pd.Series([1, None], dtype=d)}) for d in ("int8[pyarrow]", "uint64[pyarrow]")]
    lazy = [dd.from_pandas(f, npartitions=1) for f in frames]
    assert [str(x.compute()["k"].dtype) for x in lazy] == [str(f["k"].dtype) for f in frames]
