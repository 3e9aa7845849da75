"""pandas Categorical string columns (dictionary-encoded: known categories eager, unknown
categories from dask's ``astype("category")``) give every operator that accepts strings the
output it gives the plain strings, eager and dask, kernel, fitted and history operators
alike; and the case table covers every such registered operator."""
from __future__ import annotations

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import fbrapids  # noqa: F401
from fbrapids import ops
from fbrapids.kernels.builtins import BUILTINS

VALUES = np.array(["a b", "B c d", None, "x", '{"d": {"os": "ios"}}', "", "Zz y"], dtype=object)

# operator -> a feature over the string column "c" (the key column of fitted / history ones)
CASES = {
    "hash": ops.hash("c"),
    "hash_bucket": ops.hash_bucket("c", 100),
    "cross": ops.cross("c", "k"),
    "split": ops.split("c", " ", buckets=50),
    "length": ops.length("c"),
    "lower": ops.lower("c"),
    "substring": ops.substring("c", 1, 2),
    "json_get": ops.json_get("c", "d.os"),
    "json_scan": ops.call("json_scan", "c", paths=("d.os", "d")),
    "json_pick": ops.call("json_pick", "c", ops.call("json_scan", "c", paths=("d", "d.os")), index=1, group=2,
                          path="d.os"),
    "fill_null": ops.fill_null("c", "zz"),
    "lookup": ops.lookup("c", ["a b", "x"]),
    "lookup_value": ops.lookup("c", {"a b": 0.5, "x": 2.0}, oov=-1.0),
    "first_k": ops.first_k(ops.split("c", " "), 1),
    "last_k": ops.last_k(ops.split("c", " "), 1),
    "ngrams": ops.ngrams(ops.split("c", " "), 2),
    "pad": ops.pad(ops.split("c", " ", buckets=50), 3),
    "overlap_count": ops.overlap_count(ops.split("c", " "), ops.split(ops.lower("c"), " ")),
    "categorify": ops.categorify("c"),
    "count_encode": ops.count_encode("c", "k"),
    "target_encode": ops.target_encode("c", label="click"),
    "history": ops.history("k", "c", "ts", last_n=3),
    "time_since": ops.time_since("c", "ts"),
    "window_count": ops.window_count("c", "ts", 10**8),
    "window_mean": ops.window_mean("c", "v", "ts", 10**8),
}
# operators that accept any type but compute on numbers (their string inputs are errors either way)
NUMERIC = {"minmax", "normalize", "quantile_bucketize", "fill_null_fitted"}


def test_the_cases_cover_every_built_in_operator_that_takes_strings():
    takes_strings = {op.name for op in BUILTINS  # (the registry may also hold operators other tests registered)
                     if any(kind in ("any", "crossable", "hashable", "str", "strorlist", "list", "list<str>")
                            for kind in op.inputs)}
    assert takes_strings - NUMERIC == set(CASES)


def _frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(0)
    n = 300
    plain = pd.DataFrame({"c": pd.Series(rng.choice(VALUES, n), dtype="str"), "k": rng.integers(0, 5, n),
                          "ts": np.sort(rng.integers(0, 10**9, n)), "click": rng.integers(0, 2, n),
                          "v": rng.random(n), "row": np.arange(n)})
    return plain, plain.astype({"c": "category"})


@pytest.fixture(autouse=True)
def _sync_scheduler():
    with dask.config.set(scheduler="sync"):
        yield


def _run(frame: pd.DataFrame, name: str, lazy: bool) -> pd.DataFrame:
    """``f`` = the case's feature, fitted on ``frame`` and extracted from it."""
    feature = CASES[name]
    if lazy:
        categorical = isinstance(frame["c"].dtype, pd.CategoricalDtype)
        frame = dd.from_pandas(frame.astype({"c": "str"}), npartitions=3)
        if categorical:
            frame = frame.astype({"c": "category"})
            assert not frame["c"].cat.known  # dask's astype: categories unknown until computed
        if name == "target_encode":  # dask folds come from a row id, not the partitioning
            feature = ops.target_encode("c", label="click", fold_by="row")
    out = frame.fbx.extract(frame.fbx.fit(f=feature), training=name == "target_encode")
    return out.compute() if lazy else out


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "dask"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_categorical_strings_give_the_plain_strings_output(name, lazy):
    plain, categorical = _frames()
    want = _run(plain, name, lazy).sort_values("row")["f"]
    got = _run(categorical, name, lazy).sort_values("row")["f"]
    assert want.notna().sum() > 0  # not an all-null feature that any input would match
    assert [repr(x) for x in got.tolist()] == [repr(x) for x in want.tolist()]
