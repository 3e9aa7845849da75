"""Join keys of differing dtypes never give a silent wrong answer: pandas Categorical keys
(known or unknown categories, eager and dask, broadcast and shuffle) match by value; int
widths are widened, never narrowed into false matches; nullable keys against numpy keys;
an empty build side; kinds that cannot match are errors naming the key."""
from __future__ import annotations

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import fbrapids  # noqa: F401
from fbrapids.errors import JoinError
from fbrapids.joins.strategies import join


@pytest.fixture(autouse=True)
def _sync_scheduler():
    with dask.config.set(scheduler="sync"):
        yield


def _frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(0)
    keys = np.array([f"k{i}" for i in range(300)], dtype=object)
    left = pd.DataFrame({"k": pd.Series(rng.choice(keys, 2000), dtype="str"), "x": np.arange(2000)})
    right = pd.DataFrame({"k": pd.Series(keys[::2], dtype="str"), "v": np.arange(150)})
    return left, right


def _oracle(left: pd.DataFrame, right: pd.DataFrame) -> np.ndarray:
    """pandas' merge on the plain string keys: each left row's v, -1 for a miss."""
    out = left.merge(right, on="k", how="left")
    assert len(out) == len(left)
    return out["v"].fillna(-1).to_numpy(dtype=np.int64)


def _v(result) -> np.ndarray:
    got = result.compute() if hasattr(result, "compute") else result
    return got.sort_values("x")["v"].fillna(-1).to_numpy(dtype=np.int64)


def _categorical(frame, side: str, how: str):
    """``frame`` (pandas) as the join input: pandas or dask, its key a Categorical with known
    (``pd`` astype, then ``from_pandas``) or unknown (dask astype) categories, or plain."""
    if how == "eager-plain":
        return frame
    if how == "eager-cat":
        return frame.astype({"k": "category"})
    if how == "dask-plain":
        return dd.from_pandas(frame, npartitions=4 if side == "left" else 3)
    if how == "dask-known":
        return dd.from_pandas(frame.astype({"k": "category"}), npartitions=4 if side == "left" else 3)
    assert how == "dask-unknown"
    lazy = dd.from_pandas(frame, npartitions=4 if side == "left" else 3).astype({"k": "category"})
    assert not lazy["k"].cat.known
    return lazy


CASES = [("eager-cat", "eager-plain"), ("eager-plain", "eager-cat"), ("eager-cat", "eager-cat"),
         ("dask-unknown", "dask-plain"), ("dask-plain", "dask-unknown"), ("dask-unknown", "dask-unknown"),
         ("dask-known", "dask-plain"), ("dask-known", "dask-unknown"), ("dask-unknown", "eager-cat"),
         ("dask-unknown", "eager-plain")]


@pytest.mark.parametrize("broadcast", [True, False])
@pytest.mark.parametrize("lhow,rhow", CASES)
def test_categorical_keys_match_by_value(lhow, rhow, broadcast):
    left, right = _frames()
    expect = _oracle(left, right)
    assert (expect >= 0).sum() > 900  # about half the rows match: a silent miss cannot pass
    lhs, rhs = _categorical(left, "left", lhow), _categorical(right, "right", rhow)
    got = join(lhs, rhs, on="k", broadcast=broadcast if lhow.startswith("dask") else None)
    assert np.array_equal(_v(got), expect)
    if hasattr(got, "_meta"):  # the declared dtypes are the computed ones
        assert got._meta.dtypes.to_dict() == got.compute().dtypes.to_dict()


def test_inner_join_on_unknown_categories_both_sides():
    left, right = _frames()
    expect = _oracle(left, right)
    got = join(_categorical(left, "left", "dask-unknown"), _categorical(right, "right", "dask-unknown"), on="k",
               how="inner", broadcast=False).compute()
    assert len(got) == (expect >= 0).sum()
    assert np.array_equal(got.sort_values("x")["v"].to_numpy(), expect[expect >= 0])


def test_int_categories_against_int_keys_match():
    rng = np.random.default_rng(1)
    left = pd.DataFrame({"k": rng.integers(-50, 250, 1000), "x": np.arange(1000)})
    right = pd.DataFrame({"k": np.arange(-50, 250, 2, dtype=np.int32), "v": np.arange(150)})
    expect = left.merge(right.astype({"k": "int64"}), on="k", how="left")["v"].fillna(-1).to_numpy(np.int64)
    assert np.array_equal(_v(join(left.astype({"k": "category"}), right, on="k")), expect)
    lazy = dd.from_pandas(left, npartitions=4).astype({"k": "category"})  # unknown int64 categories
    for broadcast in (True, False):
        got = join(lazy, dd.from_pandas(right, npartitions=3), on="k", broadcast=broadcast)
        assert np.array_equal(_v(got), expect)


def test_categorical_keys_of_another_kind_are_errors_naming_the_key():
    left = pd.DataFrame({"k": pd.Series([1, 2], dtype="category"), "x": [0, 1]})
    right = pd.DataFrame({"k": ["1", "2"], "v": [5, 6]})
    with pytest.raises(JoinError, match="join key 'k' has dtype category on the left but str on the right"):
        join(left, right, on="k")
    # unknown categories: found per partition, when computed
    lazy = dd.from_pandas(left.astype({"k": "int64"}), npartitions=2).astype({"k": "category"})
    with pytest.raises(JoinError, match=r"join key 'k' is a categorical of int64 values where string values"):
        join(lazy, dd.from_pandas(right, npartitions=1), on="k").compute()
    # both unknown: their values cannot be known before computing; strings are assumed and checked
    both = dd.from_pandas(right.astype({"k": "int64"}), npartitions=1).astype({"k": "category"})
    with pytest.raises(JoinError, match=r"astype\(\{'k': 'int64'\}\)"):
        join(lazy, both, on="k", broadcast=False).compute()


@pytest.mark.parametrize("lazy", [False, True])
def test_int_widths_are_widened_never_wrapped(lazy):
    """An int32 key against int64 ids above 2^32: narrowing the right side would wrap
    2^32 + 5 into 5, a false match; -1 hashes differently in int32 and int64 (a shuffle)."""
    left = pd.DataFrame({"k": np.array([5, 7, -1], dtype=np.int32), "x": [0, 1, 2]})
    right = pd.DataFrame({"k": np.array([2**32 + 5, 7, -1], dtype=np.int64), "v": [1, 2, 3]})
    if lazy:
        got = join(dd.from_pandas(left, npartitions=2), dd.from_pandas(right, npartitions=2), on="k", broadcast=False)
    else:
        got = join(left, right, on="k")
    assert _v(got).tolist() == [-1, 2, 3]


@pytest.mark.parametrize("lazy", [False, True])
def test_nullable_narrow_keys_with_nulls_against_numpy_keys(lazy):
    """A dictionary with nullable Int32 ids (nulls included) against int64 view keys: before,
    the cast to int64 raised 'cannot convert NA to integer'; null keys never match."""
    left = pd.DataFrame({"k": np.array([5, 7, -1], dtype=np.int64), "x": [0, 1, 2]})
    right = pd.DataFrame({"k": pd.array([5, None, -1], dtype="Int32"), "v": [1, 2, 3]})
    if lazy:
        got = join(dd.from_pandas(left, npartitions=2), dd.from_pandas(right, npartitions=2), on="k", broadcast=False)
    else:
        got = join(left, right, on="k")
    assert _v(got).tolist() == [1, -1, 3]


def test_empty_build_side_is_all_misses():
    left = pd.DataFrame({"k": ["a", "b"], "x": [0, 1]})
    empty = pd.DataFrame({"k": pd.Series([], dtype="str"), "v": pd.Series([], dtype="int64")})
    out = join(left, empty, on="k")
    assert out["v"].isna().all() and len(out) == 2
    assert len(join(left, empty, on="k", how="inner")) == 0
    # a shuffle whose bucket of the small side is empty for some partitions
    right = pd.DataFrame({"k": ["a"], "v": [9]})
    got = join(dd.from_pandas(left, npartitions=2), dd.from_pandas(right, npartitions=1), on="k", broadcast=False)
    assert _v(got).tolist() == [9, -1]


@pytest.mark.parametrize("left_dtype", ["int64", "Int64", "int64[pyarrow]"])
@pytest.mark.parametrize("right_dtype", ["int64", "Int64", "int64[pyarrow]"])
def test_one_width_int_flavours_match_without_casts(left_dtype, right_dtype):
    from fbrapids.joins.strategies import check_keys

    left = pd.DataFrame({"k": pd.array([5, 7, -1, 2**40], dtype=left_dtype), "x": [0, 1, 2, 3]})
    right = pd.DataFrame({"k": pd.array([5, -1, 2**40 + 1], dtype=right_dtype), "v": [1, 2, 3]})
    assert check_keys(left, right, ["k"]) == ({}, {})  # no O(rows) conversion, the view's dtype kept
    assert _v(join(left, right, on="k")).tolist() == [1, -1, 2, -1]
    got = join(dd.from_pandas(left, npartitions=2), dd.from_pandas(right, npartitions=2), on="k", broadcast=False)
    assert _v(got).tolist() == [1, -1, 2, -1] and str(got.compute()["k"].dtype) == left_dtype
