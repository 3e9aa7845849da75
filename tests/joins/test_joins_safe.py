"""Safe joins: validate=, null keys never match, exact integers above 2^53, dask _meta equal to
the partitions, the index kept, and every strategy equal to a plain pandas reference."""

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import fbrapids  # noqa: F401
from fbrapids.errors import JoinError
from fbrapids.joins.strategies import join, join_decisions

BIG = 2**53 + 1  # not representable as float64


def _views(seed=0, n=2_000):
    rng = np.random.default_rng(seed)
    left = pd.DataFrame({"k": rng.integers(0, 300, n).astype(np.int64), "v": np.arange(n, dtype=np.int64),
                         "s": pd.array([f"r{i}" for i in range(n)], dtype="str")})
    right = pd.DataFrame({"k": np.arange(0, 250, dtype=np.int64),
                          "id": np.arange(250, dtype=np.int64) + BIG,
                          "w": np.arange(250, dtype=np.int32),
                          "flag": np.arange(250) % 2 == 0,
                          "name": pd.array([f"n{i}" for i in range(250)], dtype="str")})
    return left, right


def _reference(left, right, on, how):
    """pandas' own merge with nullable payload dtypes (so no float upcast), null keys dropped."""
    right = right.dropna(subset=[on])
    if how == "left":
        right = right.astype({c: {"int64": "Int64", "int32": "Int32", "bool": "boolean"}[str(t)]
                              for c, t in right.dtypes.items() if c != on and str(t) in ("int64", "int32", "bool")})
    return left.merge(right, on=on, how=how, sort=False)


@pytest.mark.parametrize("how", ["left", "inner"])
def test_eager_join_equals_pandas_merge_with_exact_ints(how):
    left, right = _views()
    got = join(left, right, on="k", how=how)
    want = _reference(left, right, "k", how)
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True))
    hits = got["k"] < 250
    assert (got.loc[hits, "id"].astype("int64") == got.loc[hits, "k"] + BIG).all()  # exact above 2^53
    if how == "left":
        assert str(got["id"].dtype) == "Int64" and str(got["w"].dtype) == "Int32"
        assert str(got["flag"].dtype) == "boolean" and got["id"].isna().sum() == (~hits).sum()


def test_left_join_keeps_the_view_index_and_order():
    left, right = _views()
    left.index = pd.RangeIndex(100, 100 + len(left)) * 3
    got = join(left, right, on="k")
    assert got.index.equals(left.index) and got["v"].tolist() == left["v"].tolist()
    inner = join(left, right, on="k", how="inner")
    assert inner.index.equals(left.index[left["k"] < 250])


def test_duplicate_right_keys_are_an_error_naming_key_and_count():
    left, right = _views()
    dup = pd.concat([right, right[right["k"] == 17], right[right["k"] == 17]], ignore_index=True)
    with pytest.raises(JoinError, match=r"key 17 has 3 rows on the right side.*'many_to_one'.*validate=None"):
        join(left, dup, on="k")
    opted_out = join(left, dup, on="k", validate=None)
    assert len(opted_out) == len(left) + 2 * (left["k"] == 17).sum()
    pd.testing.assert_frame_equal(opted_out.reset_index(drop=True),
                                  _reference(left, dup, "k", "left").reset_index(drop=True))
    with pytest.raises(JoinError, match="on the left side.*'one_to_one'"):
        join(left, right, on="k", validate="1:1")
    assert len(join(left.drop_duplicates("k"), right, on="k", validate="one_to_one")) == left["k"].nunique()
    with pytest.raises(JoinError, match="validate='sideways'"):
        join(left, right, on="k", validate="sideways")


def test_duplicates_found_in_a_dask_dictionary_when_computed():
    left, right = _views()
    dup = pd.concat([right, right[right["k"] == 5]], ignore_index=True)
    lazy = join(dd.from_pandas(left, npartitions=3), dd.from_pandas(dup, npartitions=2), on="k")
    with pytest.raises(JoinError, match="key 5 has 2 rows"):
        lazy.compute(scheduler="sync")


@pytest.mark.parametrize("dtype", ["Int64", "str"])
def test_null_keys_never_match(dtype):
    left = pd.DataFrame({"k": [1, None, 2, None], "v": [0, 1, 2, 3]}).astype({"k": dtype})
    right = pd.DataFrame({"k": [None, 1, 3], "w": [99, 10, 30]}).astype({"k": dtype})
    got = join(left, right, on="k")
    assert got["w"].tolist() == [10, pd.NA, pd.NA, pd.NA]  # pandas' merge would give the nulls 99
    assert join(left, right, on="k", how="inner")["v"].tolist() == [0]
    lazy = join(dd.from_pandas(left, npartitions=2), dd.from_pandas(right, npartitions=1), on="k")
    assert lazy.compute(scheduler="sync")["w"].tolist() == [10, pd.NA, pd.NA, pd.NA]
    shuffled = join(dd.from_pandas(left, npartitions=2), dd.from_pandas(right, npartitions=2), on="k", broadcast=False)
    assert sorted(shuffled.compute(scheduler="sync")["w"].dropna().tolist()) == [10]


def test_multi_key_join():
    left = pd.DataFrame({"a": [1, 1, 2, 2], "b": ["x", "y", "x", None], "v": range(4)})
    right = pd.DataFrame({"a": [1, 2, 2], "b": ["y", "x", None], "w": [5, 6, 7]})
    got = join(left, right, on=["a", "b"])
    assert got["w"].tolist() == [pd.NA, 5, 6, pd.NA]


@pytest.mark.parametrize("strategy", ["broadcast", "shuffle"])
def test_dask_strategies_equal_eager_and_meta_matches_partitions(strategy):
    left, right = _views(1)
    lazy = join(dd.from_pandas(left, npartitions=4), dd.from_pandas(right, npartitions=3), on="k",
                broadcast=strategy == "broadcast")
    assert join_decisions()[-1].strategy == strategy
    parts = [p for p in dask.compute(*lazy.to_delayed(), scheduler="sync")]
    for part in parts:  # misses or not, every partition has _meta's dtypes
        assert part.dtypes.to_dict() == lazy._meta.dtypes.to_dict()
    got = pd.concat(parts).sort_values("v").reset_index(drop=True)
    want = join(left, right, on="k").reset_index(drop=True)
    # dask's from_pandas turns str into string[pyarrow]: only string dtypes may differ
    pd.testing.assert_frame_equal(got, want, check_dtype=False)
    assert {c: str(t) for c, t in got.dtypes.items() if c not in ("s", "name")} == \
        {c: str(t) for c, t in want.dtypes.items() if c not in ("s", "name")}


def test_partitioned_join_of_two_sorted_views_keeps_divisions():
    left, right = _views(2)
    left = left.sort_values("k").set_index("k")
    right = right.set_index("k")
    lazy_left = dd.from_pandas(left, npartitions=4, sort=True)
    lazy = join(lazy_left, dd.from_pandas(right, npartitions=3, sort=True), on="k", how="inner")
    assert join_decisions()[-1].strategy == "partitioned"
    assert lazy.known_divisions and lazy.divisions == lazy_left.divisions
    got = lazy.compute(scheduler="sync")
    want = join(left, right, on="k", how="inner")
    pd.testing.assert_frame_equal(got.sort_values("v"), want.sort_values("v"), check_dtype=False)
    assert str(got["id"].dtype) == "int64" and (got["id"] - got.index == BIG).all()


# -- the device and host-fallback paths (skip without a GPU) ------------------------------------
def _device_views():
    from fbrapids.frames.backend import get_backend, to_backend

    left, right = _views(3)
    return get_backend("gpu"), left, right, to_backend(left, get_backend("gpu")), to_backend(right, get_backend("gpu"))


@pytest.mark.gpu
@pytest.mark.parametrize("budget", [None, 16], ids=["device", "host"])
def test_gpu_left_join_with_misses_keeps_ids_above_2_53(budget):
    from fbrapids.frames.backend import to_host

    _, left, right, gleft, gright = _device_views()
    got = to_host(join(gleft, gright, on="k", device_budget=budget))
    assert join_decisions()[-1].placement == ("host" if budget else "device")
    assert got["id"].dtype.kind in "iu" or str(got["id"].dtype) == "Int64"
    hits = got["k"] < 250
    assert (got.loc[hits, "id"].astype("int64") == got.loc[hits, "k"] + BIG).all()
    assert got["id"].isna().sum() == (~hits).sum()
    assert got["v"].tolist() == left["v"].tolist()


@pytest.mark.gpu
def test_gpu_dask_left_join_meta_matches_partitions_and_values_exact():
    from fbrapids.frames.backend import dask_dataframe, to_host

    _, left, right, gleft, gright = _device_views()
    ddf = dask_dataframe()
    lazy = join(ddf.from_pandas(gleft, npartitions=4), ddf.from_pandas(gright, npartitions=2), on="k")
    parts = dask.compute(*lazy.to_delayed(), scheduler="sync")
    for part in parts:
        assert dict(part.dtypes) == dict(lazy._meta.dtypes)
    got = pd.concat([to_host(p) for p in parts]).sort_values("v")
    hits = got["k"] < 250
    assert (got.loc[hits, "id"].astype("int64") == got.loc[hits, "k"] + BIG).all()


@pytest.mark.gpu
def test_gpu_null_keys_never_match():
    from fbrapids.frames.backend import get_backend, to_backend, to_host

    be = get_backend("gpu")
    left = to_backend(pd.DataFrame({"k": [1, None, 2], "v": [0, 1, 2]}).astype({"k": "Int64"}), be)
    right = to_backend(pd.DataFrame({"k": [None, 1], "w": [99, 10]}).astype({"k": "Int64"}), be)
    got = to_host(join(left, right, on="k"))
    assert [None if pd.isna(x) else int(x) for x in got["w"]] == [10, None, None]
