"""The transfer counters: every runtime counts the bytes it moves between host and device,
and ``explain`` reports them.  The host runtime moves none; the CUDA runtime's figures are
checked in tests/kernels/test_kernels_gpu_residency.py (marked ``gpu``)."""

from __future__ import annotations

import pandas as pd

from fbrapids import kernels, ops
from fbrapids.features import compiled_plan, explain


def test_host_runtime_moves_nothing_and_explain_says_so():
    df = pd.DataFrame({"q": pd.Series(["a b", None, "c"], dtype="str"), "ts": [0, 3600, 7200]})
    feats = {"t": ops.split("q", " ", buckets=11), "h": ops.hour("ts")}
    kernels.reset_stats()
    df.fbx.extract(**feats)
    runtime = compiled_plan(df, feats)
    assert runtime.stats.launches >= 1
    for k in ("bytes_to_device", "bytes_to_host", "column_bytes_to_device", "column_bytes_to_host"):
        assert getattr(runtime.stats, k) == 0 and kernels.stats()[k] == 0
    text = explain(df, feats)
    assert "host <-> device so far: 0 B to the device (0 B of column data), 0 B to the host" in text


def test_counters_add_up():
    a = kernels.KernelStats(bytes_to_device=8, column_bytes_to_host=3, launches=1)
    a += kernels.KernelStats(bytes_to_device=16, bytes_to_host=40, column_bytes_to_host=2, launches=2)
    assert (a.bytes_to_device, a.bytes_to_host, a.column_bytes_to_host, a.launches) == (24, 40, 5, 3)
