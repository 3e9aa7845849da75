"""lookup with float values, pad and overlap_count against plain-Python references, on
pandas and on dask (1, 3, 7 partitions), nested inside and around meta-kernel operators."""

from __future__ import annotations

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

import fbrapids  # noqa: F401
from fbrapids import ops

L = pd.ArrowDtype(pa.list_(pa.int64()))


def make(n: int = 400, seed: int = 2) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    a = [None if rng.random() < 0.05 else rng.integers(0, 12, rng.integers(0, 9)).tolist() for _ in range(n)]
    b = [None if rng.random() < 0.05 else rng.integers(0, 12, rng.integers(0, 6)).tolist() for _ in range(n)]
    city = pd.Series(rng.choice(["x", "y", "z", "w"], n), dtype="str").where(rng.random(n) > 0.1)
    return pd.DataFrame({"rid": np.arange(n), "a": pd.Series(a, dtype=L), "b": pd.Series(b, dtype=L), "city": city})


SCORES = {"x": 0.25, "y": -1.5, "z": 3.0}
FEATS = {"score": ops.lookup("city", SCORES, oov=0.5),
         "pl": ops.pad("a", 5, 0, side="left"), "pr": ops.pad("a", 5, -1, side="right"),
         "ov": ops.overlap_count("a", "b"),
         "ov_h": ops.hash_bucket(ops.overlap_count("a", "b"), 7),  # a kernel op over a row op
         "pad_tail": ops.pad(ops.last_k("a", 3), 4, 0, side="left")}  # a row op over a kernel op


def ref(df: pd.DataFrame) -> dict[str, list]:
    out: dict[str, list] = {k: [] for k in ("score", "pl", "pr", "ov", "pad_tail")}
    lists = {c: pa.array(df[c].array).to_pylist() for c in ("a", "b")}
    for city, a, b in zip(df["city"], lists["a"], lists["b"]):
        out["score"].append(SCORES.get(city, 0.5) if isinstance(city, str) else 0.5)
        lst = list(a) if a is not None else []
        out["pl"].append(([0] * 5 + lst[-5:])[-5:] if len(lst) < 5 else lst[-5:])
        out["pr"].append((lst[:5] + [-1] * 5)[:5])
        out["ov"].append(pd.NA if a is None or b is None else sum(1 for v in a if v in set(b)))
        tail = lst[-3:]
        out["pad_tail"].append([0] * (4 - len(tail)) + tail)
    return out


def test_row_operators_match_references() -> None:
    df = make()
    got = df.fbx.extract(**FEATS)
    want = ref(df)
    assert got["score"].tolist() == want["score"]
    for k in ("pl", "pr", "pad_tail"):
        assert got[k].tolist() == want[k], k
    assert [x if x is not pd.NA else None for x in got["ov"].tolist()] == \
        [x if x is not pd.NA else None for x in want["ov"]]
    assert got["score"].dtype == np.float64 and str(got["ov"].dtype) == "int64[pyarrow]"


@pytest.mark.parametrize("nparts", [1, 3, 7])
def test_row_operators_on_dask(nparts: int) -> None:
    df = make()
    want = df.fbx.extract(**FEATS)
    with dask.config.set(scheduler="sync"):
        got = dd.from_pandas(df, npartitions=nparts).fbx.extract(**FEATS).compute()
    for k in FEATS:
        pd.testing.assert_series_equal(got[k], want[k], check_exact=True)


def _python_overlap(a: list | None, b: list | None) -> int | None:
    """The reference: Python's own ``==`` (NaN equals nothing, 5 == 5.0, "5" != 5)."""
    if a is None or b is None:
        return None
    present = [w for w in b if w is not None]
    return sum(1 for v in a if v is not None and any(v == w for w in present))


def _overlap_of(df: pd.DataFrame | dd.DataFrame) -> list:
    """overlap_count of ``a0`` and ``a1`` through the public path (``.fbx.extract``), eager or dask."""
    out = df.rename(columns={"a0": "x", "a1": "y"}).fbx.extract(ov=ops.overlap_count("x", "y"))["ov"]
    if isinstance(out, dd.Series):
        with dask.config.set(scheduler="sync"):
            out = out.compute()
    return [None if x is pd.NA else x for x in out.tolist()]


_FLOATS = st.sampled_from([0.0, -0.0, 1.0, 5.0, 2.5, float("nan"), float("inf"), -1.0])
_ELEMENT_KINDS = {
    "float64": (pa.float64(), _FLOATS),
    "int64": (pa.int64(), st.integers(-3, 6)),
    "uint64": (pa.uint64(), st.sampled_from([0, 1, 5, 2**63, 2**64 - 1])),
    "string": (pa.string(), st.sampled_from(["", "5", "a", "漢", "a\x00"])),
    "large_string": (pa.large_string(), st.sampled_from(["", "5", "a", "b"])),
}


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_overlap_count_is_pythons_equality_for_every_element_kind(data: st.DataObject) -> None:
    """overlap_count against Python's ``==`` on lists of floats (NaN, -0.0, inf), int64,
    uint64 (past 2^63) and strings, each list column of its own kind, null lists and null
    elements included, eager and on dask: NaN matches nothing, 5 matches 5.0 and never "5"."""
    n = data.draw(st.integers(0, 12))
    cols = {}
    for name in ("a0", "a1"):
        t, elem = _ELEMENT_KINDS[data.draw(st.sampled_from(sorted(_ELEMENT_KINDS)))]
        lists = data.draw(st.lists(st.one_of(st.none(), st.lists(st.one_of(elem, st.none()), max_size=5)),
                                   min_size=n, max_size=n))
        cols[name] = (lists, t)
    df = pd.DataFrame({k: pd.Series(pd.array(v, dtype=pd.ArrowDtype(pa.list_(t)))) for k, (v, t) in cols.items()})
    want = [_python_overlap(a, b) for a, b in zip(cols["a0"][0], cols["a1"][0])]
    assert _overlap_of(df) == want
    assert _overlap_of(dd.from_pandas(df, npartitions=3)) == want
