"""GPU parity of fitted, history and row operators: cudf and dask-cudf frames give results
identical to pandas (skipped cleanly without a GPU)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import fbrapids  # noqa: F401
from fbrapids import ops

pytestmark = pytest.mark.gpu

FEATS = {"c": ops.categorify("city", min_freq=5, oov_buckets=3), "n": ops.count_encode("user", "cat"),
         "te": ops.target_encode("user", label="click", fold_by="rid"), "q": ops.quantile_bucketize("price", 8),
         "z": ops.normalize("price"), "fm": ops.fill_null_fitted("price", "median")}
HIST = {"h": ops.history("user", "cat", "ts", last_n=5, events="click"), "w": ops.window_count("user", "ts", "1d"),
        "s": ops.time_since("user", "ts")}


def frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    from test_fitted_operators import make_frame

    df = make_frame(2000, seed=4)
    return df.iloc[:1500].reset_index(drop=True), df.iloc[1500:].reset_index(drop=True)


def test_fitted_operators_identical_on_cudf() -> None:
    import cudf

    train, test = frames()
    want = train.fbx.fit(**FEATS)
    got = cudf.from_pandas(train).fbx.fit(**FEATS)
    for sid, s in want.states.items():
        for k, v in s.tables.items():
            np.testing.assert_array_equal(v, got.states[sid].tables[k])
    out = cudf.from_pandas(test).fbx.extract(got).to_pandas()
    ref = test.fbx.extract(want)
    for k in FEATS:
        pd.testing.assert_series_equal(out[k], ref[k], check_exact=True, check_dtype=False)


def test_history_identical_on_dask_cudf() -> None:
    import cudf
    import dask.dataframe as dd
    import dask_cudf  # noqa: F401

    train, _ = frames()
    ref = train.fbx.extract(**HIST)
    got = dd.from_pandas(cudf.from_pandas(train), npartitions=3).fbx.extract(**HIST).compute().to_pandas()
    got = got.sort_values("rid").reset_index(drop=True)
    for k in HIST:
        pd.testing.assert_series_equal(got[k], ref[k], check_exact=True, check_dtype=False)
