"""A right side whose integer keys are in increasing order is probed by binary search
(no hash table): the same rows as pandas' merge, misses and nulls included, and the hash
probe still serves other key dtypes."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fbrapids.joins.hash_join import JoinTable, join_frames


def test_sorted_int_keys_join_like_pandas_merge() -> None:
    rng = np.random.default_rng(5)
    right = pd.DataFrame({"k": np.sort(rng.choice(10_000, 3_000, replace=False)).astype(np.int64),
                          "v": rng.normal(size=3_000)})
    left = pd.DataFrame({"k": rng.integers(-5, 10_005, 5_000).astype(np.int64), "x": np.arange(5_000)})
    table = JoinTable.build(right, ["k"])
    assert table._sorted_lookup(left["k"].to_numpy()) is not None  # noqa: SLF001 - the path under test is taken
    for how in ("inner", "left"):
        got = join_frames(left, right, ["k"], how).reset_index(drop=True)
        want = left.merge(right, on="k", how=how)
        assert got["x"].tolist() == want["x"].tolist(), how
        assert got["v"].fillna(-99.0).tolist() == want["v"].fillna(-99.0).tolist(), how


def test_other_key_dtypes_keep_the_hash_probe() -> None:
    right = pd.DataFrame({"k": np.array([1, 2, 2**63 + 5], dtype=np.uint64), "v": [1, 2, 3]})
    left = pd.DataFrame({"k": np.array([2**63 + 5, 2, 7], dtype=np.uint64)})
    table = JoinTable.build(right, ["k"])
    assert table._sorted_lookup(np.array([1, 2], dtype=np.int64)) is None  # noqa: SLF001 - int64 vs uint64: hashed
    assert join_frames(left, right, ["k"], "left")["v"].tolist() == [3, 2, pd.NA]
