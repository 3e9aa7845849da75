"""The host kernels' fast paths give the same ids as the plain definitions.

* decimal text of integers: digit pairs from a table (host) instead of one digit at a time;
* hash buckets: a mask instead of a modulo when the bucket count is a power of two;
* crosses: the innermost integer list's decimal texts rendered once per row (at most 64
  elements; longer lists take the plain path).

The oracle is pyfarmhash over Python's own ``str(int)``, through the real meta-kernels.
"""
from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import fbrapids  # noqa: F401  (registers .fbx)
from fbrapids import ops
from fbrapids.features import extract

farmhash = pytest.importorskip("farmhash", reason="pyfarmhash (import farmhash) is the oracle")

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _boundary_ints() -> list[int]:
    """Every decimal-length boundary (and the 32-bit one), both signs, plus random values."""
    vals = {0, 2**32 - 1, 2**32, 2**32 + 1, INT64_MIN, INT64_MIN + 1, INT64_MAX, INT64_MAX - 1}
    for k in range(19):
        for v in (10**k - 1, 10**k, 10**k + 1, 2 * 10**k, 99 * 10**k):
            if v <= INT64_MAX:
                vals |= {v, -v}
    rng = random.Random(11)
    vals |= {rng.randint(INT64_MIN, INT64_MAX) for _ in range(2000)}
    vals |= {rng.randint(-(10**6), 10**6) for _ in range(500)}
    return sorted(vals)


def _fp(text: str) -> int:
    return farmhash.fingerprint64(text)


@pytest.mark.parametrize("buckets", [1 << 20, 1 << 16, 1, 10, 977, (1 << 20) + 1])
def test_int_hash_buckets_at_every_digit_boundary(buckets):
    vals = _boundary_ints()
    df = pd.DataFrame({"x": np.array(vals, dtype=np.int64)})
    got = extract(df, {"h": ops.hash_bucket("x", buckets)})["h"].tolist()
    assert got == [_fp(str(v)) % buckets for v in vals]


def test_uint64_raw_fingerprints_at_every_digit_boundary():
    vals = [v for v in _boundary_ints() if v >= 0] + [2**63, 2**64 - 1, 10**19, 10**19 - 1, 10**19 + 1]
    df = pd.DataFrame({"x": np.array(vals, dtype=np.uint64)})
    got = extract(df, {"h": ops.hash_bucket("x", 1 << 18)})["h"].tolist()
    assert got == [_fp(str(v)) % (1 << 18) for v in vals]


def _cross_ref(a: list[int] | None, b: list[int] | None, buckets: int, cap: int | None) -> list[int] | None:
    if a is None or b is None:
        return None
    keys = [f"{x}_{y}" for x in a for y in b]
    if cap:
        keys = keys[:cap]
    return [_fp(k) % buckets for k in keys]


@pytest.mark.parametrize("cap", [None, 64, 7])
def test_list_cross_with_cached_and_uncached_inner_lists(cap):
    rng = random.Random(cap or 0)
    rows_a, rows_b = [], []
    for i in range(400):
        na = rng.choice([0, 1, 2, 5, 9])
        nb = rng.choice([0, 1, 3, 8, 63, 64, 65, 100])  # <= 64 cached, > 64 plain
        big = rng.random() < 0.3
        pick = (lambda: rng.randint(INT64_MIN, INT64_MAX)) if big else (lambda: rng.randint(-999, 1 << 18))
        rows_a.append(None if i % 37 == 5 else [pick() for _ in range(na)])
        rows_b.append([pick() for _ in range(nb)])
    t = pd.ArrowDtype(pa.list_(pa.int64()))
    df = pd.DataFrame({"a": pd.Series(rows_a, dtype=t), "b": pd.Series(rows_b, dtype=t)})
    buckets = 1 << 20
    out = extract(df, {"x": ops.cross("a", "b", buckets=buckets, cap=cap)})["x"]
    for i, (a, b) in enumerate(zip(rows_a, rows_b)):
        want = _cross_ref(a, b, buckets, cap)
        got = out.iloc[i]
        if want is None:
            assert pd.isna(got), i
        else:
            assert list(got) == want, i


def test_three_way_cross_scalar_outer_list_inner():
    t = pd.ArrowDtype(pa.list_(pa.int64()))
    inner = [[1, 22, 333], [], [-5] * 70, [10**18, -(10**18)]]
    df = pd.DataFrame({"c": np.array([7, 8, 9, -1], dtype=np.int64), "s": ["x", "y", "zz", ""],
                       "l": pd.Series(inner, dtype=t)})
    out = extract(df, {"x": ops.cross("c", "s", "l", buckets=None, sep="#")})["x"]
    for i in range(len(df)):
        keys = [f"{df.c[i]}#{df.s[i]}#{v}" for v in inner[i]]
        got = [int(v) & (2**64 - 1) for v in out.iloc[i]]
        assert got == [_fp(k) for k in keys], i
