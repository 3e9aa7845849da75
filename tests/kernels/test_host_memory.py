"""Kernel outputs of 4 MiB and more live in system-allocator buffers (plain pages): the
values are those of the same plan run over slices small enough for numpy's own buffers
(the oracle), bit for bit."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from fbrapids import ops
from fbrapids.kernels import host_empty
from fbrapids.kernels.host_memory import LARGE_BYTES
from fbrapids.kernels.plan import build_plan
from fbrapids.kernels.runtime_host import HostPlan

ROWS = LARGE_BYTES // 8 + 10_000  # an int64 output past the threshold


def _frame(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(7)
    words = np.array(["a", "bb", "ccc", "dd d", ""], dtype=object)
    text = pd.Series(words[rng.integers(0, len(words), n)] + " " + words[rng.integers(0, len(words), n)], dtype="str")
    ids = pd.Series(rng.integers(-2**62, 2**62, n), dtype="int64")
    return pd.DataFrame({"u": ids, "t": text})


def test_large_outputs_match_the_same_plan_over_small_slices() -> None:
    frame = _frame(ROWS)
    toks = ops.split("t", " ", buckets=1 << 18)
    plan = build_plan({"h": ops.hash_bucket("u", 1 << 20), "x": ops.cross("u", toks, buckets=1 << 20), "k": toks},
                      {"u": "i64", "t": "str"})
    runtime = HostPlan(plan)
    whole = runtime.run(frame).columns
    h = whole["h"].data
    assert isinstance(h.base, pa.Buffer) and h.nbytes >= LARGE_BYTES  # the system allocator's, not numpy's
    step = 100_000  # 800 kB outputs: numpy's buffers
    parts = [HostPlan(plan).run(frame.iloc[i:i + step].reset_index(drop=True)).columns for i in range(0, ROWS, step)]
    assert np.array_equal(h, np.concatenate([p["h"].data for p in parts]))
    for name in ("x", "k"):
        got = pa.chunked_array([c for c in [_arrow(whole[name])]]).combine_chunks()
        want = pa.concat_arrays([_arrow(p[name]) for p in parts])
        assert got.equals(want), name


def _arrow(col):
    from fbrapids.kernels.columns import to_arrow

    arr = to_arrow(col)
    return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr


def test_host_empty_is_writable_and_sized() -> None:
    small, large = host_empty(10, np.int32), host_empty(ROWS, np.float64)
    assert small.base is None or not isinstance(small.base, pa.Buffer)
    assert isinstance(large.base, pa.Buffer) and large.shape == (ROWS,) and large.flags.writeable
    large[:] = 1.5
    assert float(large.sum()) == 1.5 * ROWS
